"""`torchscope run` end to end on scripts we wrote: the user's zero-code path."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest

import torchscope
from torchscope.cli.main import main

SCRIPTS = Path(__file__).parent / "scripts"


@pytest.fixture(scope="module", autouse=True)
def _warm_optimizer_imports() -> None:
    """Build one optimizer first: its lazy torch._dynamo import is not what these tests measure."""
    import torch

    torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)


def _report(out: Path) -> dict:
    return json.loads((out / "report.json").read_text())


def test_run_trains_resnet_with_a_schedule_from_optimizer_steps(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    code = main(
        [
            "run",
            "--out",
            str(out),
            "--wait",
            "0",
            "--warmup",
            "1",
            "--active",
            "2",
            "--repeat",
            "1",
            str(SCRIPTS / "train_resnet.py"),
            "--steps",
            "4",
        ]
    )
    captured = capsys.readouterr()
    assert code == 0
    assert "trained 4 steps" in captured.out  # the script's stdout passes through untouched
    facts = json.loads((out / "run.json").read_text())
    assert facts["optimizer_steps"] == 4
    assert len(facts["traces"]) == 1 and Path(facts["traces"][0]).is_file()
    report = _report(out)
    run = report["report"]
    # steps came from optimizer.step() with no change to the script: warm up 1, then 2 active steps
    assert len(run["steps"]) == 2
    names = {r["name"] for r in run["operators"]}
    assert {"aten::convolution_backward", "aten::native_batch_norm"} <= names
    assert "Optimizer.step#SGD.step" in names
    conv = next(r for r in run["operators"] if r["name"] == "aten::conv2d")
    assert conv["calls"] == 2 * 20  # ResNet-18 has 20 convolutions, two recorded steps
    assert report["run"]["exit_code"] == 0 and report["env"]["torch"].startswith("2.")
    import torch

    assert run["meta"]["torch_version"] == torch.__version__  # the Report tab's "torch version"
    assert (out / "report.html").stat().st_size > 10_000
    assert "where the time goes" in captured.err
    # (once, on a CI machine 4x slower than usual, this was missing: the summary is shown whole
    # if it ever is again)
    assert "aten::convolution_backward" in captured.err, captured.err


def test_hot_spot_table_names_argwhere_that_the_op_profiler_misses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "mask"
    assert main(["run", "--out", str(out), str(SCRIPTS / "masking.py")]) == 0
    hot = _report(out)["hotspots"]
    argwhere = next(r for r in hot if r["function"] == "argwhere")
    # placed at the script's line that called it (masking.py:18), not at NumPy's numeric.py
    assert argwhere["location"].endswith("masking.py:18"), argwhere["location"]
    assert argwhere["total_pct"] > 30.0  # the run's time goes here
    assert argwhere["outside_ops_pct"] > 90.0  # and no ATen op covers it
    forward = next(r for r in hot if r["function"] == "forward" and r["file"].endswith("masking.py"))
    assert forward["total_ns"] >= argwhere["total_ns"]
    # the page's Flame tab draws the same samples: argwhere's node holds most of the run too
    flame = _report(out)["hotspots_flame"]
    node = max((i for i, n in enumerate(flame["name"]) if "argwhere" in flame["names"][n]),
               key=lambda i: flame["total"][i])
    assert flame["total"][node] > 0.3 * flame["total"][0]
    assert "argwhere" in capsys.readouterr().err


def test_crashing_script_keeps_trace_report_and_exit_code(tmp_path: Path) -> None:
    out = tmp_path / "crash"
    proc = subprocess.run(
        [sys.executable, "-m", "torchscope", "run", "--out", str(out), str(SCRIPTS / "crash.py")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 1
    assert "about to fail" in proc.stdout
    assert "ValueError: boom at step 1" in proc.stderr
    tb = proc.stderr.split("ValueError")[0]
    assert "torchscope/runner" not in tb and "runpy" not in tb  # the traceback is the script's
    lines = tb.splitlines()
    first = lines[lines.index("Traceback (most recent call last):") + 1]
    assert first.startswith(f'  File "{SCRIPTS / "crash.py"}"')
    facts = json.loads((out / "run.json").read_text())
    assert facts["exit_code"] == 1 and facts["optimizer_steps"] == 2
    assert Path(facts["traces"][0]).is_file() and (out / "report.html").is_file()
    report = _report(out)
    assert report["run"]["error"] == "ValueError: boom at step 1"
    # no schedule: the whole run is recorded, cut at each optimizer step; the crash after the
    # second step is no step
    assert len(report["report"]["steps"]) == 2
    # only the script's own frames are hot spots: not our console script, CLI, runner, the
    # traceback we printed, nor torch._dynamo's lazy import that the runner pre-pays
    # (our own profiler's work inside optimizer.step() has its own row, file "<torchscope>",
    # when a sample lands in it: named as ours, never charged to a frame of ours)
    files = [r["file"] for r in report["hotspots"] if r["file"] != "<torchscope>"]
    assert files and any(f.endswith("crash.py") for f in files)
    ours = str(Path(torchscope.__file__).parent)  # by location: the checkout may be named torchscope
    for f in files:
        assert not f.startswith(ours) and not f.endswith("bin/torchscope")
        assert "traceback" not in f and "linecache" not in f
        assert "importlib" not in f and "_dynamo" not in f and "runpy" not in f
    assert {r["name"] for r in report["report"]["operators"]} >= {"aten::linear", "Optimizer.step#Adam.step"}


def test_exit_code_argv_and_streams_pass_through(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        ["run", "--out", str(tmp_path / "e"), "--no-summary", str(SCRIPTS / "exits.py"), "3", "--lr", "0.1"]
    )
    captured = capsys.readouterr()
    assert code == 3
    assert "argv: ['3', '--lr', '0.1']" in captured.out
    assert captured.err.startswith("to stderr")
    assert json.loads((tmp_path / "e" / "run.json").read_text())["exit_code"] == 3



def test_a_script_named_relative_sees_its_file_absolute_as_under_python(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``torchscope run train.py`` gave the script ``__file__ == "train.py"``: one that changed
    directory and then read its config beside ``__file__`` failed where ``python`` ran it."""
    (tmp_path / "config.json").write_text('{"lr": 0.5}')
    (tmp_path / "train.py").write_text(
        "import json, os, sys\n"
        "here = os.path.dirname(__file__)\n"
        "os.chdir(os.sep)\n"
        "print(json.load(open(os.path.join(here, 'config.json')))['lr'], __file__, sys.argv[0])\n"
    )
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "torchscope", "run", "--out", str(out), "--no-summary", "train.py"],
        capture_output=True, text=True, timeout=300, check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["0.5", str(tmp_path / "train.py"), "train.py"]  # argv[0] as typed

def test_run_module_with_dash_m(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(SCRIPTS)
    code = main(["run", "--out", str(tmp_path / "m"), "--no-summary", "-m", "pkgdemo", "--epochs", "1"])
    assert code == 0
    assert "module ran with ['--epochs', '1'] name __main__" in capsys.readouterr().out
    ops = {r["name"]: r for r in _report(tmp_path / "m")["report"]["operators"]}
    assert ops["aten::tanh"]["calls"] == 5


def test_bad_usage_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", str(tmp_path / "missing.py")]) == 2
    assert "no such script" in capsys.readouterr().err
    assert main(["run", "--activities", "tpu", str(SCRIPTS / "exits.py"), "0"]) == 2


def test_steps_run_from_one_optimizer_step_to_the_next_and_setup_is_no_step(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "steps"
    assert main(["run", "--out", str(out), "--sample-ms", "0", str(SCRIPTS / "train_resnet.py")]) == 0
    err = capsys.readouterr().err
    report = _report(out)
    run = report["report"]
    # 4 optimizer steps are 4 steps: building the model and the optimizer is setup, and the
    # print after the last optimizer.step() is no step
    assert len(run["steps"]) == 4
    assert "(4 steps" in err.replace("\n", " ")
    assert report["run"]["optimizer_steps"] == 4 and report["run"]["setup_s"] > 0
    assert "after" in err and "s of setup" in err
    names = {r["name"] for r in run["operators"]}
    assert not any(n.startswith(("torchscope#", "ProfilerStep#")) for n in names)
    text = Path(report["run"]["traces"][0]).read_text()
    assert '"torchscope#setup"' in text and '"ProfilerStep#0"' in text and '"ProfilerStep#3"' in text
    assert '"ProfilerStep#4"' not in text and '"torchscope#after_last_step"' in text
    # step 0 starts at the first forward pass: it holds the same 20 convolutions as the others
    from torchscope.trace.loader import load

    trace = load(report["run"]["traces"][0])
    ev = trace.events  # type: ignore[union-attr]
    import polars as pl

    convs = ev.filter(pl.col("name").cast(pl.String) == "aten::conv2d").group_by("step").len().sort("step")
    assert convs["step"].to_list() == [0, 1, 2, 3] and convs["len"].to_list() == [20, 20, 20, 20]


def test_advice_names_the_python_the_sampler_caught(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No Python stacks were recorded (the run's default), yet the advice names np.argwhere:
    the sampler caught it inside the region the trace says is outside every op."""
    out = tmp_path / "mask"
    assert main(["run", "--out", str(out), str(SCRIPTS / "masking.py")]) == 0
    findings = [r for r in _report(out)["report"]["recommendations"] if r["rule"] == "python_outside_ops"]
    masking = next(f for f in findings if f["evidence"]["region"] == "LABEL2: masking")
    assert masking["evidence"]["sampled"] is True and masking["evidence"]["python_stacks"] is False
    assert masking["evidence"]["python_functions"][0] == "argwhere (masking.py:18)"
    assert "the sampler caught most of it in argwhere" in masking["message"]
    assert "torchscope run" not in masking["fix"]  # no advice to use the tool the user is using
    assert "the sampler caught most of it in argwhere" in capsys.readouterr().err


def test_each_cycle_s_advice_names_what_the_sampler_caught_in_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With several cycles the terminal shows the latest cycle's findings: they named no code
    ("no Python stacks were recorded ... profile with torchscope run") while report.json's
    run-level finding named the function the sampler caught."""
    out = tmp_path / "busy"
    schedule = ["--wait", "1", "--warmup", "1", "--active", "2", "--repeat", "2"]
    # 600k rounds a step (~60 ms): the steps' module-level Python (the optimizer, the module
    # calls) is sampled as "<module>" too, and with the default 200k it came first once in a
    # full run of the suite on 2 busy cores
    script = [str(SCRIPTS / "busy_python_steps.py"), "600000"]
    assert main(["run", "--out", str(out), *schedule, *script]) == 0
    err = " ".join(capsys.readouterr().err.split())  # the terminal wraps its lines
    report = _report(out)["report"]
    assert len(report["ranks"]) == 2
    for name, cycle in [("run", report), *report["ranks"].items()]:
        (finding,) = [f for f in cycle["recommendations"] if f["rule"] == "python_outside_ops"]
        assert finding["evidence"]["python_functions"][0].startswith("busy_python (busy_python_steps.py:"), name
        assert "torchscope run" not in finding["fix"]
    assert "the sampler caught most of it in busy_python" in err
    assert "no Python stacks were recorded" not in err
    # each cycle's line names its findings: the summary above it is the latest cycle's alone
    assert err.count("; findings: python_outside_ops") == 2


def test_a_cycle_the_sampler_caught_nothing_in_is_not_told_to_use_torchscope_run() -> None:
    """A cycle in the middle of a run holds no span of the runner's, so the advisor took it for
    a plain trace and advised "profile with `torchscope run`" to a user of ``torchscope run``
    when the sampler had caught nothing in its short steps."""
    import types

    from torchscope.runner.results import name_sampled_culprits

    generic = (
        "Record with with_stack=True (or profile with `torchscope run`, whose sampler names the Python "
        "functions) to see which code runs there, then move it into torch ops or out of the step."
    )

    def finding() -> dict[str, object]:
        return {"rule": "python_outside_ops", "message": "32% ...", "fix": generic, "evidence": {"region": "ProfilerStep#*"}}

    report = {"recommendations": [finding()], "ranks": {"step_7": {"recommendations": [finding()]}}}
    name_sampled_culprits({"report": report}, [], {}, types.SimpleNamespace(hotspots=None))  # type: ignore[arg-type]
    for f in (report["recommendations"][0], report["ranks"]["step_7"]["recommendations"][0]):
        assert "torchscope run" not in f["fix"] and "--stack" in f["fix"] and "--sample-ms" in f["fix"]


def test_a_last_cycle_with_no_step_is_listed_not_shown_in_full(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The script ends as the schedule's second cycle starts recording (8 optimizer steps,
    cycles of 6): that cycle holds a few events after the last step and no step. The terminal
    showed it in full ("the whole run as one step") above the real cycle; then it was listed
    ("step_8: no step") and took one of the report's slots; now it is not written at all."""
    out = tmp_path / "stub"
    schedule = ["--wait", "1", "--warmup", "1", "--active", "4", "--repeat", "0", "--sample-ms", "0"]
    assert main(["run", "--out", str(out), *schedule, str(SCRIPTS / "busy_python_steps.py")]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert "where the time goes (4 steps," in err and "the whole run as one step" not in err
    assert "step_8" not in err
    assert [p.name for p in (out / "traces").iterdir()] == ["step_5.pt.trace.json"]


def test_under_torchrun_each_rank_writes_its_own_run_directory(tmp_path: Path) -> None:
    """``torchrun -m torchscope run`` profiles every rank: each writes OUT/rank-N (they used to
    overwrite one another's files), rank 0 alone prints the summary and names the command for
    all ranks, and the job directory reads as ranks of one job with rank 1 the straggler."""
    import os

    import torchscope
    from torchscope.analysis.distributed import distributed

    out = tmp_path / "job"
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo"}  # the two ranks talk over loopback only
    done = subprocess.run(
        [
            *(sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"),
            *("-m", "torchscope", "run", "--out", str(out), str(SCRIPTS / "ddp_train.py")),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "rank 0 trained" in done.stdout and "rank 1 trained" in done.stdout
    for rank in (0, 1):
        # 6 steps: the default schedule records steps 0-4 (the cycle saved at step 5)
        assert (out / f"rank-{rank}" / "traces" / f"rank-{rank}.step_4.pt.trace.json").is_file()
        assert json.loads((out / f"rank-{rank}" / "run.json").read_text())["optimizer_steps"] == 6
    assert done.stderr.count("where the time goes") == 1  # one summary for the job, rank 0's
    assert f"torchscope report {out}" in " ".join(done.stderr.split())
    job = torchscope.load(out)
    assert list(job) == ["rank0", "rank1"]
    assert [t.meta.world_size for t in job.values()] == [2, 2]
    assert distributed(job).slowest_rank == 1


@pytest.mark.parametrize("ending", ["", "sys.exit(3)", "raise RuntimeError('boom')"])
def test_the_scripts_objects_live_until_exit_as_under_python(
    tmp_path: Path, ending: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Under plain python a script's globals die at exit; runpy dropped them as soon as the
    script returned (or raised), running destructors early (a DDP model's, after
    destroy_process_group, hung gloo's teardown under torchrun)."""
    import gc

    from torchscope.runner.target import Target, execute

    died = tmp_path / "died"
    script = tmp_path / "script.py"
    script.write_text(
        "import sys\n"
        "class Model:\n"
        f"    def __del__(self, _open=open): _open({str(died)!r}, 'w').close()\n"
        "model = Model()\n" + ending + "\n"
    )
    outcome = execute(Target(str(script), ()))
    gc.collect()  # an exception's traceback holds the frames in a cycle only the collector frees
    assert outcome.exit_code == {"": 0, "sys.exit(3)": 3}.get(ending, 1)
    assert not died.exists()


def _run_cli(*args: str, timeout: int = 600) -> subprocess.CompletedProcess[str]:
    """``python -m torchscope run ...`` in a child: a crash of the child (a signal) is a result."""
    return subprocess.run(
        [sys.executable, "-m", "torchscope", "run", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_default_schedule_records_the_start_and_two_steady_state_cycles_with_one_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No schedule option on a script with 60 optimizer steps: steps 0-4 (with the setup), then
    20-22 and 38-40; one full report (the last cycle's) and one line per cycle."""
    out = tmp_path / "default"
    assert main(["run", "--out", str(out), "--sample-ms", "0", str(SCRIPTS / "linear_steps.py"), "60"]) == 0
    err = " ".join(capsys.readouterr().err.split())
    facts = json.loads((out / "run.json").read_text())
    assert [Path(p).name for p in facts["traces"]] == [
        "step_4.pt.trace.json",
        "step_22.pt.trace.json",
        "step_40.pt.trace.json",
    ]
    report = _report(out)
    cycles = report["report"]["ranks"]  # one report per cycle, named as its run
    assert [len(c["steps"]) for c in cycles.values()] == [5, 3, 3]
    assert report["run"]["schedule"]["recorded_steps"] == [[0, 4], [20, 22], [38, 40]]
    assert err.count("where the time goes") == 1  # one block, not one per cycle
    assert "cycles (3;" in err and "step_22: 3 steps" in err and "step_40: 3 steps" in err
    assert "default schedule: recorded 11 of the run's 60 steps (0–4, 20–22, 38–40)" in err and "--all" in err


def test_a_schedule_without_repeat_stops_after_three_cycles(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--wait 1 --warmup 1 --active 3`` printed 87 summary blocks for a 3 s script: a schedule
    now runs DEFAULT_REPEAT cycles unless --repeat says otherwise, summarised in one block."""
    out = tmp_path / "sched"
    args = ["run", "--out", str(out), "--sample-ms", "0", "--wait", "1", "--warmup", "1", "--active", "3"]
    assert main([*args, str(SCRIPTS / "linear_steps.py"), "100"]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert len(json.loads((out / "run.json").read_text())["traces"]) == 3
    assert err.count("where the time goes") == 1 and err.count(": 3 steps,") == 3
    out_all = tmp_path / "sched_all"
    args[2] = str(out_all)
    assert main([*args, "--repeat", "0", "--no-summary", str(SCRIPTS / "linear_steps.py"), "100"]) == 0
    facts = json.loads((out_all / "run.json").read_text())
    assert len(facts["traces"]) == 20  # 0 = until the end: every file is written ...
    assert len(_report(out_all)["runs"]) == 8  # ... and the report holds the first and the latest 7


@pytest.mark.slow
def test_a_minute_of_small_ops_keeps_the_trace_and_the_report_bounded(tmp_path: Path) -> None:
    """A 60 s loop of tiny ops and no optimizer (6 s of it wrote 2.5 GB and its report took 24 GB):
    recording stops at the cap, with a message, and the whole run's peak memory stays bounded."""
    import resource

    out = tmp_path / "ops"
    done = _run_cli("--out", str(out), str(SCRIPTS / "small_ops.py"), "60")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "ran " in done.stdout
    peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    traces = json.loads((out / "run.json").read_text())["traces"]
    size_mb = sum(Path(p).stat().st_size for p in traces) / 1e6
    print(f"\n60 s small-op loop: trace {size_mb:.0f} MB, peak RSS of run + report {peak_mb:.0f} MB")
    # no optimizer step: the note names the allowance that held, not "by optimizer step 0"
    assert "stopped at the cap" in " ".join(done.stderr.split())
    said = " ".join(done.stderr.split())
    assert "stopped at the cap (before any optimizer step; cap 96 MB, 2x that before the first step)" in said
    # the script waited for the stop, and is told how long; no schedule sentence for a script
    # without steps (it read "recorded 0 of the run's 0 steps ()"), no "step" it does not have
    assert "Stopping it held the script up for " in said and "of the run's 0 steps" not in said
    assert "note the memory cap cut its recording: it holds the run up to the cut, not all of it" in said
    assert len(traces) == 1 and size_mb < 600  # two caps before any step: ~185 MB on this machine
    assert peak_mb < 5000  # ~2.2 GB on this machine; unbounded it grew by GBs per second
    assert _report(out)["report"]["meta"]["events"] > 10_000


def test_the_cycles_of_a_scripts_own_profiler_get_their_hot_spots(tmp_path: Path) -> None:
    """The samples were placed on a script's cycle only when they began at most one cycle's
    length before it: the report of a script with its own profiler showed the hot spots of the
    imports and none of its steps ("no Python stacks were recorded")."""
    out = tmp_path / "run"
    done = _run_cli("--out", str(out), str(SCRIPTS / "own_profiler.py"), str(tmp_path / "tb"), "0", "300000")
    assert done.returncode == 0, done.stderr[-2000:]
    report = _report(out)
    rows = {r["function"]: r for r in report["hotspots"]}
    busy = rows["busy_python"]
    assert busy["file"].endswith("own_profiler.py")
    # the two recorded steps, nothing else: the busy function is most of them, and outside ops
    assert busy["total_pct"] > 50 and busy["outside_ops_pct"] > 90
    # printed under the last cycle's summary, the table says it covers every recorded cycle
    cycles = len(report["runs"])
    assert cycles == 2 and f"Python hot spots over all {cycles} recorded cycles" in " ".join(done.stderr.split())


def test_a_script_with_its_own_torch_profiler_keeps_its_files_and_exit_code(tmp_path: Path) -> None:
    """torch.profiler inside torchscope run ended in a segmentation fault (139) and wrote nothing.
    Now its names are ours for the script: its schedule and tensorboard_trace_handler write its
    own files, our run steps aside, copies its cycles into the report and keeps its exit code."""
    out, logs = tmp_path / "run", tmp_path / "tb"
    done = _run_cli("--out", str(out), str(SCRIPTS / "own_profiler.py"), str(logs), "7")
    assert done.returncode == 7, done.stderr[-2000:]
    assert "torchscope.capture.profiler profiled True" in done.stdout  # the script got ours
    own = list(logs.glob("mine.*.pt.trace.json"))
    assert len(own) == 1  # wait 1, warmup 1, active 2, repeat 1: one cycle, as torch writes it
    import torchscope

    assert torchscope.load(own[0]).steps.height == 2
    report = _report(out)
    names = [r["name"] for r in report["runs"]]
    assert names[-1].startswith("script_profiler1.")  # the script's cycle, copied once
    assert "my_step" in {r["name"] for r in report["report"]["ranks"][names[-1]]["operators"]}
    assert any("stepped aside" in n for n in report["run"]["notes"])
    assert report["run"]["exit_code"] == 7
    # ours stepped aside when the script's profiler started, before any optimizer step: nothing
    # of the script's steps (its own ProfilerStep#0 of the wait phase) lands in our recording
    assert any("after 0 optimizer steps" in n for n in report["run"]["notes"])
    ours = [p for p in (out / "traces").glob("*.pt.trace.json") if not p.name.startswith("script_profiler")]
    for path in ours:
        assert "ProfilerStep#" not in path.read_text()


def test_with_no_redirect_torchs_own_profiler_runs_after_ours_stops(tmp_path: Path) -> None:
    """--no-redirect leaves torch.profiler torch's: it started a second Kineto session beside ours
    and the process died (139) with nothing written. Ours now stops before torch's prepares."""
    out, logs = tmp_path / "run", tmp_path / "tb"
    done = _run_cli("--no-redirect", "--out", str(out), str(SCRIPTS / "own_profiler.py"), str(logs), "7")
    assert done.returncode == 7, done.stderr[-2000:]
    assert "torch.profiler.profiler profiled True" in done.stdout  # the script got torch's own
    assert len(list(logs.glob("mine.*.pt.trace.json"))) == 1
    report = _report(out)
    assert any("started torch's own profiler" in n and "--no-redirect" in n for n in report["run"]["notes"])
    assert report["run"]["exit_code"] == 7


def test_legacy_autograd_profiler_and_torchscope_profile_inside_run(tmp_path: Path) -> None:
    out = tmp_path / "legacy"
    done = _run_cli("--out", str(out), "--no-summary", str(SCRIPTS / "own_legacy_profiler.py"), "4")
    assert done.returncode == 4, done.stderr[-2000:]
    assert "legacy events 1 False" in done.stdout  # enabled=False records nothing, as torch's
    assert "torchscope ops ['aten::mm', 'aten::relu']" in done.stdout
    traces = [Path(p).name for p in json.loads((out / "run.json").read_text())["traces"]]
    assert traces == [
        "run.pt.trace.json",
        "script_profiler1.cycle1.pt.trace.json",
        "script_profiler2.cycle1.pt.trace.json",
    ]


def test_redirection_is_undone_after_the_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import torch.autograd.profiler
    import torch.profiler

    before = (torch.profiler.profile, torch.profiler.schedule, torch.autograd.profiler.profile)
    assert main(["run", "--out", str(tmp_path / "r"), "--no-summary", str(SCRIPTS / "exits.py"), "0"]) == 0
    assert (torch.profiler.profile, torch.profiler.schedule, torch.autograd.profiler.profile) == before


def test_a_bad_out_is_a_one_line_error_before_the_script_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    for out, under in (("/dev/null/x", "/dev/null"), (str(blocker / "run"), str(blocker))):
        assert main(["run", "--out", out, str(SCRIPTS / "exits.py"), "0"]) == 2
        captured = capsys.readouterr()
        assert captured.out == ""  # the script never ran
        lines = captured.err.strip().splitlines()
        assert lines == [f"torchscope run: error: {out}: cannot write the run directory here: {under} is not a directory"]


def _enospc(partial: bytes = b'{"traceEvents": [') -> OSError:
    import errno
    import os

    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_a_full_disk_never_changes_the_exit_code_nor_leaves_partial_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The disk fills while the traces and the report are written (a fake that writes half a file
    and raises ENOSPC): the script's exit code 3 stands, each failure is one line on stderr, and
    no truncated or 0-byte file is left."""
    from torchscope.capture.profiler import profile

    def full_export(self: object, path: str, use_python_export: bool = False) -> None:
        Path(path).write_bytes(b'{"traceEvents": [')
        raise _enospc()

    write_bytes = Path.write_bytes

    def full_page(self: Path, data: bytes) -> int:  # the page's own write fills the disk
        if not self.name.endswith("report.html"):
            return write_bytes(self, data)
        write_bytes(self, data[: len(data) // 2])
        raise _enospc()

    monkeypatch.setattr(profile, "export_chrome_trace", full_export)
    monkeypatch.setattr(Path, "write_bytes", full_page)
    out = tmp_path / "full"
    assert main(["run", "--out", str(out), str(SCRIPTS / "exits.py"), "3"]) == 3
    err = capsys.readouterr().err
    ours = [line for line in err.splitlines() if line.startswith("torchscope run: error:")]
    assert any("could not write" in line and "No space left on device" in line for line in ours)
    assert any(line.endswith("report.html: No space left on device") or "report" in line for line in ours)
    # in the order they happened: the cycles' files were written before the page
    first_trace = next(i for i, line in enumerate(ours) if ".pt.trace.json" in line)
    assert all(i > first_trace for i, line in enumerate(ours) if "report.html" in line)
    assert "Traceback" not in err
    left = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    assert left == ["run.json"]  # no partial trace, no half report, no hidden temporaries
    assert json.loads((out / "run.json").read_text())["exit_code"] == 3


def test_the_summary_sends_the_user_to_report_html_only_when_it_was_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The disk fills as the page is written: the cycles' line said "each in report.html" of a
    page that was never written."""
    write_bytes = Path.write_bytes

    def full_page(self: Path, data: bytes) -> int:
        if self.name.endswith("report.html"):
            raise _enospc()
        return write_bytes(self, data)

    out = tmp_path / "nopage"
    args = ["run", "--out", str(out), "--sample-ms", "0", str(SCRIPTS / "linear_steps.py"), "45"]
    assert main(args) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert "cycles (3; the last is shown above, each in report.html)" in err
    monkeypatch.setattr(Path, "write_bytes", full_page)
    assert main(args) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert "report.html: No space left on device" in err and not (out / "report.html").exists()
    assert "cycles (3; the last is shown above)" in err


@pytest.fixture
def tiny_disk(tmp_path: Path):  # type: ignore[no-untyped-def]
    """A 256 KiB tmpfs, where this machine lets us mount one (root in a container); else skip."""
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mnt)], capture_output=True, check=False
    )
    if made.returncode != 0:
        pytest.skip("cannot mount a tmpfs here: the ENOSPC fake above covers the same paths")
    yield mnt
    subprocess.run(["umount", str(mnt)], check=False)


def test_a_real_full_disk_keeps_the_exit_code(tiny_disk: Path) -> None:
    out = tiny_disk / "run"
    done = _run_cli("--out", str(out), str(SCRIPTS / "linear_steps.py"), "3")
    assert done.returncode == 0 and "trained 3 steps" in done.stdout
    ours = [line for line in done.stderr.splitlines() if line.startswith("torchscope run: error:")]
    assert ours and all("No space left on device" in line for line in ours)
    assert "Traceback" not in done.stderr
    for f in out.rglob("*"):
        if f.is_file():
            assert not f.name.startswith(".partial-") and f.stat().st_size > 0
            if f.suffix == ".json":
                json.loads(f.read_text())  # whole, or absent


def test_a_disk_the_script_fills_still_gets_the_run_s_end_and_its_lost_cycles(
    tmp_path: Path, tiny_disk: Path
) -> None:
    """The script fills the disk after step 10 and exits 0: every later write fails, run.json's
    final record too (its temporary needs room beside the record of the start), and run.json
    stayed "running", which the report reads as a run killed by SIGKILL. The room the run kept
    for that record lets it say the script's exit and the cycles it could not write."""
    script = tmp_path / "fills.py"
    script.write_text(
        "import os, sys, torch\n"
        "model = torch.nn.Linear(8, 1)\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for i in range(45):\n"
        "    opt.zero_grad(); model(torch.randn(4, 8)).sum().backward(); opt.step()\n"
        "    if i == 10:\n"
        "        fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT)\n"
        "        try:\n"
        "            while os.write(fd, b'x' * 4096): pass\n"
        "        except OSError: pass\n"
    )
    out = tiny_disk / "run"
    done = _run_cli("--out", str(out), "--sample-ms", "0", str(script), str(tiny_disk / "filler"))
    assert done.returncode == 0, done.stderr[-2000:]
    facts = json.loads((out / "run.json").read_text())
    assert facts["state"] == "ended" and facts["exit_code"] == 0
    lost = [Path(p).name for p in facts["traces_not_written"]]
    assert lost[-2:] == ["step_22.pt.trace.json", "step_40.pt.trace.json"]  # step_4 was before the filler
    assert not (out / ".run.json-room").exists()


def test_run_json_names_the_cycles_a_full_disk_lost(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only step_22's write fails: its file is missing and no file said it was recorded."""
    from torchscope.capture.profiler import profile

    export = profile.export_chrome_trace

    def full_once(self: object, path: str, use_python_export: bool = False) -> None:
        if "step_22" in path:
            raise _enospc()
        export(self, path)  # type: ignore[arg-type]

    monkeypatch.setattr(profile, "export_chrome_trace", full_once)
    out = tmp_path / "lost"
    assert main(["run", "--out", str(out), "--no-summary", str(SCRIPTS / "linear_steps.py"), "45"]) == 0
    facts = json.loads((out / "run.json").read_text())
    assert [Path(p).name for p in facts["traces"]] == ["step_4.pt.trace.json", "step_40.pt.trace.json"]
    assert facts["traces_not_written"] == [str(out / "traces" / "step_22.pt.trace.json")]
    assert "could not write" in capsys.readouterr().err
    # and a report of the folder says which cycle is missing (it showed "2 cycles" and no more)
    from torchscope.job.discover import scan

    assert scan(out)[1] == [
        "run.json: 1 recorded cycle could not be written (a full disk?), so it is missing: step_22.pt.trace.json"
    ]


def test_tensorboard_trace_handler_on_a_full_disk_leaves_no_partial_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    from torchscope import profile, schedule, tensorboard_trace_handler
    from torchscope.capture import kineto

    def full(self: object, path: str) -> None:
        Path(path).write_bytes(b'{"traceEvents": [')
        raise _enospc()

    monkeypatch.setattr(kineto.Cycle, "export", full)
    logs = tmp_path / "tb"
    handler = tensorboard_trace_handler(str(logs))
    prof = profile(schedule=schedule(wait=0, warmup=0, active=1), on_trace_ready=handler)
    # as torch's handler: the cycle's file is lost with a warning, the profiled run goes on
    with pytest.warns(UserWarning, match="No space left on device; this cycle's trace is lost"), prof:
        torch.randn(4, 4).relu()
        prof.step()
    assert list(logs.iterdir()) == []


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (["--wait", "-1"], "--wait must be 0 or more steps, not -1"),
        (["--warmup", "-1"], "--warmup must be 0 or more steps, not -1"),
        (["--active", "0"], "--active must be 1 or more steps, not 0"),
        (["--repeat", "-2"], "--repeat must be 0 (until the end) or more cycles, not -2"),
        (["--skip-first", "-1"], "--skip-first must be 0 or more steps, not -1"),
        (["--cap-mb", "0"], "--cap-mb must be more than 0 MB, not 0"),
        (["--sample-ms", "-1"], "--sample-ms must be 0 (off) or more, not -1"),
        (["--all", "--repeat", "2"], "--all records the whole run; leave out --repeat/--skip-first"),
        (  # a new user's `--repeat 0` (until the end) recorded the default 3 cycles, silently
            ["--repeat", "0"],
            "--repeat and --skip-first shape a schedule: give --wait/--warmup/--active with them "
            "(e.g. --wait 14 --warmup 1 --active 3 --repeat 0), or use --all to record everything",
        ),
        (
            ["--skip-first", "10"],
            "--repeat and --skip-first shape a schedule: give --wait/--warmup/--active with them "
            "(e.g. --wait 14 --warmup 1 --active 3 --repeat 0), or use --all to record everything",
        ),
    ],
)
def test_an_invalid_schedule_value_is_one_line_and_exit_2_before_the_script_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], option: list[str], message: str
) -> None:
    """Finding 8: ``--wait -1`` ended in an AssertionError traceback (exit 1), ``--active 0`` was
    taken silently and profiled one step."""
    out = tmp_path / "bad"
    assert main(["run", "--out", str(out), *option, str(SCRIPTS / "exits.py"), "0"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""  # the script never ran
    assert captured.err == f"torchscope run: error: {message}\n"
    assert not out.exists()


def test_back_to_back_cycles_start_after_the_optimizer_s_range_and_keep_their_steps(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--active N`` alone records cycles back to back. Starting the next recording inside
    torch's ``record_function`` around ``optimizer.step()`` (where the runner's hook runs) let
    torch's profiler write that range's end into the ended cycle's freed events: a segfault in
    6 of 20 runs. The start waits for the next forward; each cycle still holds its N steps."""
    from torchscope.trace.loader import load

    out = tmp_path / "b2b"
    args = ["run", "--out", str(out), "--sample-ms", "0", "--active", "3", "--repeat", "3"]
    assert main([*args, str(SCRIPTS / "linear_steps.py"), "9"]) == 0
    paths = [Path(p) for p in _report(out)["run"]["traces"]]
    assert [p.name for p in paths] == ["step_2.pt.trace.json", "step_5.pt.trace.json", "step_8.pt.trace.json"]
    for path, first in zip(paths, (0, 3, 6), strict=True):
        trace = load(path)
        assert trace.steps["step"].to_list() == [first, first + 1, first + 2]  # type: ignore[union-attr]


def test_no_warmup_is_said_in_our_words_not_torchs_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--active 2`` alone has no warmup step: torch's UserWarning (with our file's path) used
    to reach the user; the summary now says what it means."""
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        args = ["run", "--out", str(tmp_path / "w"), "--sample-ms", "0", "--active", "2", "--repeat", "1"]
        assert main([*args, str(SCRIPTS / "linear_steps.py"), "4"]) == 0
    assert [str(w.message) for w in caught if "warmup" in str(w.message)] == []
    err = capsys.readouterr().err
    assert "torchscope run: no warmup step (--warmup 0): the first recorded step of each cycle" in err
    assert "UserWarning" not in err and "schedule.py" not in err
    assert len(_report(tmp_path / "w")["report"]["steps"]) == 2


def _stopped_when_ready(run_args: list[str], sig: int) -> tuple[int, str]:
    """``torchscope run RUN_ARGS`` in a child, sent ``sig`` once its script prints "ready":
    the exit code and stderr."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "torchscope", "run", *run_args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=300)
    finally:
        proc.kill()
    return proc.returncode, err


def test_ctrl_c_shows_the_scripts_traceback_exits_130_and_keeps_the_trace(tmp_path: Path) -> None:
    """Finding 8: the KeyboardInterrupt traceback began in torchscope/runner/target.py and
    <frozen runpy>; it is now the script's own, as for any other raise."""
    import signal

    script = tmp_path / "interrupted.py"
    script.write_text(
        "import time\n"
        "import torch\n"
        "model = torch.nn.Linear(8, 8)\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "def train():\n"
        "    for i in range(10**9):\n"
        "        opt.zero_grad()\n"
        "        model(torch.randn(4, 8)).sum().backward()\n"
        "        opt.step()\n"
        "        if i == 3:\n"
        "            print('ready', flush=True)\n"
        "        time.sleep(0.005)\n"
        "train()\n"
    )
    out = tmp_path / "run"
    returncode, err = _stopped_when_ready(["--out", str(out), str(script)], signal.SIGINT)
    assert returncode == 130
    tb = err[err.index("Traceback (most recent call last):") : err.index("KeyboardInterrupt")]
    # by location, not by name: torch's frames live in a venv inside a checkout named torchscope
    assert str(Path(torchscope.__file__).parent) not in tb and "runpy" not in tb
    assert tb.splitlines()[1] == f'  File "{script}", line 13, in <module>'
    facts = json.loads((out / "run.json").read_text())
    assert facts["exit_code"] == 130 and facts["error"] == "KeyboardInterrupt"
    assert facts["optimizer_steps"] >= 4 and Path(facts["traces"][0]).is_file()
    assert (out / "report.html").is_file()
    assert "torchscope run: interrupted: saving what was recorded" in err  # before the long part


@pytest.mark.parametrize("signame", ["SIGTERM", "SIGHUP"])
def test_a_stop_signal_saves_what_was_recorded_as_ctrl_c_does(tmp_path: Path, signame: str) -> None:
    """``timeout``, Slurm's scancel, Kubernetes and preemption send SIGTERM; a closed terminal
    SIGHUP. Their default action ended the run at once: an empty traces/ folder, no run.json,
    no report, no word. They now take Ctrl-C's path and exit 128 + the signal."""
    import signal

    script = tmp_path / "stopped.py"
    script.write_text(
        "import time\n"
        "import torch\n"
        "model = torch.nn.Linear(8, 8)\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for i in range(10**9):\n"
        "    opt.zero_grad()\n"
        "    model(torch.randn(4, 8)).sum().backward()\n"
        "    opt.step()\n"
        "    if i == 3:\n"
        "        print('ready', flush=True)\n"
        "    time.sleep(0.005)\n"
    )
    out = tmp_path / "run"
    sig = getattr(signal, signame)
    returncode, err = _stopped_when_ready(["--all", "--out", str(out), str(script)], sig)
    assert returncode == 128 + sig
    assert f"torchscope run: {signame} received: saving what was recorded and writing the report" in err
    # the traceback ends at the script's line the signal came at, not in our handler, and says
    # the signal as a user knows it, not as our module path ("torchscope.runner.target.Terminated")
    assert "raise_terminated" not in err, err
    assert f"\nTerminated: {signame}\n" in err and "torchscope.runner" not in err
    facts = json.loads((out / "run.json").read_text())
    assert facts["exit_code"] == 128 + sig and facts["error"] == signame
    assert facts["optimizer_steps"] >= 4 and Path(facts["traces"][0]).is_file()
    assert (out / "report.html").is_file()


def test_a_pool_the_script_terminates_ends_as_quietly_as_under_python(tmp_path: Path) -> None:
    """A ``multiprocessing.Pool`` in a ``with`` block is terminated with SIGTERM at its end: its
    forked workers inherited our handler and each printed a ``Terminated: SIGTERM`` traceback
    (8 for a new user's 4 pools of 2). A forked child gets the default handlers back."""
    script = tmp_path / "pool.py"
    script.write_text(
        "import multiprocessing as mp\n"
        "def work(n):\n"
        "    return sum(i * i for i in range(n))\n"
        "if __name__ == '__main__':\n"
        "    ctx = mp.get_context('fork')\n"
        "    for _ in range(3):\n"
        "        with ctx.Pool(2) as pool:\n"
        "            total = sum(pool.map(work, [20_000] * 4))\n"
        "    print('total', total)\n"
    )
    out = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "torchscope", "run", "--no-summary", "--out", str(out), str(script)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "total 10665866680000" in done.stdout
    assert "Traceback" not in done.stderr and "Terminated" not in done.stderr, done.stderr[-3000:]


def test_a_stop_signal_while_saving_after_the_script_failed_lets_the_save_finish(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A rank whose peer failed under torchrun fails too, and torchrun then sends it SIGTERM
    while it saves: it stopped at once, with no report, and run.json said "exit 143,
    interrupted: stopped saving", the script's own error lost. The first signal while saving
    after the script ended on its own is now said and the save goes on; the second stops."""
    import os
    import signal

    from torchscope.cli.run import RunCommand

    script = tmp_path / "fails.py"
    script.write_text(
        "import torch\n"
        "model = torch.nn.Linear(8, 8)\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for i in range(6):\n"
        "    model(torch.randn(4, 8)).sum().backward()\n"
        "    opt.step()\n"
        "raise RuntimeError('Connection closed by peer')\n"
    )
    report = RunCommand._report

    def terminated_while_saving(self: RunCommand, *args: object) -> None:
        os.kill(os.getpid(), signal.SIGTERM)  # torchrun's, as the report is being built
        report(self, *args)

    monkeypatch.setattr(RunCommand, "_report", terminated_while_saving)
    out = tmp_path / "run"
    assert main(["run", "--out", str(out), "--sample-ms", "0", str(script)]) == 1
    err = " ".join(capsys.readouterr().err.split())
    assert "SIGTERM received while saving: finishing the traces and the report" in err
    facts = json.loads((out / "run.json").read_text())
    assert facts["exit_code"] == 1 and facts["error"].startswith("RuntimeError: Connection closed by peer")
    assert facts["signals_while_saving"] == ["SIGTERM"]
    assert (out / "report.html").is_file()
    # the handlers are ours no more: a later SIGTERM is the default's again
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_a_second_ctrl_c_while_saving_says_what_is_on_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A second Ctrl-C during the save (a long cycle took 29 s) ended the command without a
    word, no report and no list of what was kept; the report's build is where it lands."""
    from torchscope.cli.run import RunCommand

    def interrupted(*args: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(RunCommand, "_report", interrupted)
    out = tmp_path / "run"
    assert main(["run", "--out", str(out), str(SCRIPTS / "adam_loop.py"), "10"]) == 130
    err = capsys.readouterr().err
    assert f"interrupted: stopped saving; 1 trace file(s) in {out / 'traces'}, no report" in err
    assert not (out / "report.html").exists()


def test_hot_spots_of_a_module_level_adam_loop_name_step_and_backward(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Finding 9 end to end: the report's hot spots charge opt.step() and backward() at the
    script's lines, not all self time to <module>."""
    script = SCRIPTS / "adam_loop.py"
    lines = script.read_text().splitlines()
    out = tmp_path / "adam"
    assert main(["run", "--out", str(out), "--all", str(script), "60"]) == 0
    hot = {(r["function"], r["file"], r["line"]): r for r in _report(out)["hotspots"]}
    step = hot[("Adam.step", str(script), lines.index("    opt.step()") + 1)]
    backward = hot[("Tensor.backward", str(script), lines.index("    loss.backward()") + 1)]
    module = next(r for (name, _, _), r in hot.items() if name == "<module>")
    # the record_function the optimizer opens around step() is part of the opt.step() call
    assert not [key for key in hot if key[0].startswith("record_function")]
    assert step["self_ns"] > 0 and backward["self_ns"] > 0
    assert module["self_ns"] < step["self_ns"] + backward["self_ns"] <= module["total_ns"]
    assert "Adam.step" in capsys.readouterr().err


def test_hot_spots_of_an_adamw_loop_say_adamw(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """torch's AdamW inherits ``Adam.step``: its hot spot row said ``Adam.step`` where the op
    table says ``Optimizer.step#AdamW.step``."""
    script = tmp_path / "adamw_loop.py"
    script.write_text((SCRIPTS / "adam_loop.py").read_text().replace("optim.Adam(", "optim.AdamW("))
    out = tmp_path / "adamw"
    assert main(["run", "--out", str(out), "--all", str(script), "60"]) == 0
    functions = {r["function"] for r in _report(out)["hotspots"]}
    assert "AdamW.step" in functions and "Adam.step" not in functions
    assert "AdamW.step" in capsys.readouterr().err


def test_a_run_killed_by_sigkill_says_so_in_its_directorys_report(tmp_path: Path) -> None:
    """The out-of-memory killer sends SIGKILL: nothing in the process runs after it, so the
    run's record is written when it starts and replaced when it ends. A report of a killed
    run's directory says it never recorded its end (it showed the traces and no word)."""
    script = _dies_after_45_steps(tmp_path / "killed.py", "import os, signal", "os.kill(os.getpid(), signal.SIGKILL)")
    out = tmp_path / "out"
    proc = _run_cli("--out", str(out), str(script))
    assert proc.returncode == -signal.SIGKILL
    facts = json.loads((out / "run.json").read_text())
    assert facts["state"] == "running" and facts["exit_code"] is None
    assert facts["command"] == ["torchscope", "run", "--out", str(out), str(script)]  # as typed
    assert sorted(p.name for p in (out / "traces").iterdir()) == [
        "step_22.pt.trace.json",
        "step_4.pt.trace.json",
        "step_40.pt.trace.json",
    ]
    said = _report_warnings(out)
    assert any(w.startswith("run.json: the run never recorded how it ended (killed by SIGKILL") for w in said)


def _dies_after_45_steps(script: Path, imports: str, death: str) -> Path:
    """A training script of 45 optimizer steps (the default schedule's three cycles), then ``death``."""
    script.write_text(
        f"{imports}\n"
        "import torch\n"
        "model = torch.nn.Linear(8, 1)\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for _ in range(45):\n"
        "    opt.zero_grad(); model(torch.randn(4, 8)).sum().backward(); opt.step()\n"
        f"{death}\n"
    )
    return script


def _report_warnings(out: Path) -> list[str]:
    """The warnings of ``torchscope report OUT --json``, run as a user runs it."""
    command = [sys.executable, "-m", "torchscope", "report", str(out), "--json"]
    report = subprocess.run(command, capture_output=True, text=True, timeout=300, check=True)
    return json.loads(report.stdout)["warnings"]  # type: ignore[no-any-return]


def test_a_run_that_crashes_in_native_code_leaves_its_stacks_and_says_it_crashed(tmp_path: Path) -> None:
    """A segfault leaves no record of the run's end either: its report said "killed by SIGKILL".
    Python's faulthandler writes the stacks to crash.txt, and the report says it crashed."""
    script = _dies_after_45_steps(tmp_path / "segv.py", "import ctypes", "ctypes.string_at(0)")
    out = tmp_path / "out"
    proc = _run_cli("--out", str(out), str(script))
    assert proc.returncode == -signal.SIGSEGV
    crash = (out / "crash.txt").read_text()
    assert crash.startswith("Fatal Python error: Segmentation fault") and f'File "{script}", line 7' in crash
    said = _report_warnings(out)
    assert "run.json: the run crashed (Fatal Python error: Segmentation fault; the Python stacks at the crash are in crash.txt)" in " ".join(said)
    # a run that ends well leaves no crash.txt
    fine = tmp_path / "fine"
    assert _run_cli("--out", str(fine), "--sample-ms", "0", str(SCRIPTS / "exits.py"), "0").returncode == 0
    assert not (fine / "crash.txt").exists() and (fine / "run.json").is_file()


def test_a_schedule_over_a_script_with_no_optimizer_says_why_nothing_was_recorded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "infer.py"
    script.write_text("import torch\nm = torch.nn.Linear(8, 2)\nfor _ in range(20):\n    m(torch.randn(4, 8)).sum()\n")
    out = tmp_path / "out"
    schedule = ["--wait", "1", "--warmup", "1", "--active", "4", "--sample-ms", "0"]
    assert main(["run", "--out", str(out), *schedule, str(script)]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert "the schedule never reached an active step (its steps are the script's optimizer.step() calls, and it made none" in err


def test_a_run_still_going_is_said_to_be_going(tmp_path: Path) -> None:
    from torchscope.job.discover import scan

    started = {"exit_code": None, "state": "running", "pid": os.getpid(), "host": socket.gethostname()}
    (tmp_path / "run.json").write_text(json.dumps({**started, "wall_s": None}))
    assert scan(tmp_path)[1] == [f"run.json: the run is still going (process {os.getpid()}): its traces so far"]
    # the number reused by a process that began after the run's record: not the run
    (tmp_path / "run.json").write_text(json.dumps({**started, "started": "2000-01-01T00:00:00+00:00", "wall_s": None}))
    assert scan(tmp_path)[1][0].startswith("run.json: the run never recorded how it ended (killed by SIGKILL")
    # killed and not yet reaped by its parent (a zombie): not going
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    child.kill()
    time.sleep(0.5)
    (tmp_path / "run.json").write_text(json.dumps({**started, "pid": child.pid, "wall_s": None}))
    assert scan(tmp_path)[1][0].startswith("run.json: the run never recorded how it ended (killed by SIGKILL")
    child.wait()
    # another machine's run: nobody here can tell
    (tmp_path / "run.json").write_text(json.dumps({**started, "host": "node-7", "wall_s": None}))
    assert scan(tmp_path)[1][0].startswith("run.json: the run on node-7 has not recorded how it ended: it is still going there, or")
    finished = {"exit_code": 0, "state": "ended", "wall_s": 1.0}
    (tmp_path / "run.json").write_text(json.dumps(finished))
    assert scan(tmp_path)[1] == []


def test_steps_after_the_last_cycle_keep_no_marks(tmp_path: Path) -> None:
    """The runner marks each step's wall time to align the trace with the hot-spot samples; it
    marked every optimizer step of the run, recorded or not (150 bytes a step: a run's memory
    grew ~200 MB an hour after its last cycle). Only steps a trace may hold are marked."""
    from torchscope.runner.session import RunOptions, profile_target
    from torchscope.runner.target import Target

    options = RunOptions(out=tmp_path / "out", wait=1, warmup=1, active=2, repeat=1, sample_interval_s=0.0)
    result = profile_target(Target(str(SCRIPTS / "linear_steps.py"), ("300",)), options)
    assert result.exit_code == 0 and result.steps == 300
    assert len(result.trace_paths) == 1
    # the first iteration, the warm-up step and the two recorded steps: not 300
    assert [n for n, _ in result.step_marks] == [0, 1, 2, 3]


def test_each_optimizer_step_ends_inside_its_profiler_step(tmp_path: Path) -> None:
    """The runner stepped the profiler from torch's post-hook, inside the ``Optimizer.step#``
    range torch opens around ``step()``: each one ended 30-170 us into the next
    ``ProfilerStep`` (overlapping instead of nesting), and the cycle's last one held the
    profiler's own stop, 1,000 us where its ops took 180 (a new user's 8-step MLP)."""
    import polars as pl

    import torchscope

    script = tmp_path / "mlp.py"
    script.write_text(
        "import torch\n"
        "model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.01)\n"
        "sched = torch.optim.lr_scheduler.StepLR(opt, 2)\n"
        "for i in range(8):\n"
        "    opt.zero_grad()\n"
        "    model(torch.randn(16, 64)).sum().backward()\n"
        "    opt.step()\n"
        "    sched.step()\n"
    )
    out = tmp_path / "run"
    assert main(["run", "--out", str(out), str(script)]) == 0
    (cycle,) = (out / "traces").iterdir()
    ev = torchscope.load(cycle).events.with_columns(pl.col("name").cast(pl.String))
    steps = ev.filter(pl.col("name").str.starts_with("ProfilerStep#")).sort("start_ns")
    opts = ev.filter(pl.col("name").str.starts_with("Optimizer.step#")).sort("start_ns")
    # the first step is taken from inside the first step() (the wrapper is set up there); every
    # later range ends inside its step, the last one too: stepped (and the cycle stopped) from
    # inside the range, its ProfilerStep ended before it (no timing compared: order only)
    assert opts.height == steps.height >= 4
    ends = (steps["start_ns"] + steps["dur_ns"]).to_list()[1:]
    opt_ends = (opts["start_ns"] + opts["dur_ns"]).to_list()[1:]
    assert all(o <= s for o, s in zip(opt_ends, ends, strict=True))


def test_a_second_run_into_the_same_out_sets_the_first_aside(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--out`` an earlier run's directory: its cycles stayed beside the new ones, and
    ``torchscope report DIR`` read "2 runs" (its advice from the stale one) while report.json
    listed only the new trace."""
    out = tmp_path / "same"
    script = [str(SCRIPTS / "linear_steps.py"), "30"]
    assert main(["run", "--out", str(out), "--no-summary", *script]) == 0
    first = sorted(p.name for p in (out / "traces").iterdir())
    assert main(["run", "--out", str(out), "--no-summary", "--all", *script]) == 0
    err = capsys.readouterr().err
    (aside,) = out.glob(".earlier-*")
    assert f"torchscope run: {out} held an earlier run: its files are now in {aside}" in err
    assert sorted(p.name for p in (aside / "traces").iterdir()) == first
    assert (aside / "report.json").is_file() and (aside / "run.json").is_file()
    assert len(list((out / "traces").iterdir())) == 1  # the new run's alone
    assert main(["report", str(out), "--json", "--no-html"]) == 0
    assert json.loads(capsys.readouterr().out)["kind"] != "job"  # one trace read, not two runs


def test_a_script_that_ends_in_a_warmup_writes_no_empty_cycle(tmp_path: Path) -> None:
    """A run that ended while the schedule warmed up wrote a cycle of the work after the last
    step alone ("step_700: no step, 156 us, 3 events"), named after a step that never ran and
    taking one of the report's eight slots."""
    out = tmp_path / "wu"
    schedule = ["--wait", "2", "--warmup", "2", "--active", "2", "--repeat", "0"]
    assert main(["run", "--out", str(out), "--no-summary", *schedule, str(SCRIPTS / "linear_steps.py"), "9"]) == 0
    assert [p.name for p in (out / "traces").iterdir()] == ["step_5.pt.trace.json"]  # steps 4-5; 8 is warmup
    assert len(_report(out)["runs"]) == 1


def test_the_cycles_left_out_of_the_report_are_named_in_run_json_and_on_the_page(tmp_path: Path) -> None:
    """With more cycles than the report holds, the terminal alone said so: the page's cycle
    picker simply lacked the others, and run.json said nothing."""
    out = tmp_path / "many"
    schedule = ["--wait", "0", "--warmup", "1", "--active", "1", "--repeat", "0"]
    assert main(["run", "--out", str(out), "--no-summary", *schedule, str(SCRIPTS / "linear_steps.py"), "22"]) == 0
    written = sorted(p.name for p in (out / "traces").iterdir())
    assert len(written) == 11  # a cycle every 2 steps
    note = next(n for n in json.loads((out / "run.json").read_text())["notes"] if "cycles were written" in n)
    assert note.startswith(f"11 cycles were written to {out / 'traces'}; the report holds 8 (the first and the latest), not ")
    assert note.endswith(f"not step_3, step_5, step_7: torchscope report {out / 'traces'} reads them all")
    assert note in (out / "report.html").read_text()  # the page's "This run" box says it


def test_a_script_that_ends_as_a_cycle_begins_writes_no_empty_cycle(tmp_path: Path) -> None:
    """The default schedule on a 20-step script: step 20 begins a cycle after the last
    optimizer step, and "step_20: no step, 11 events" took a report slot."""
    out = tmp_path / "edge"
    assert main(["run", "--out", str(out), "--no-summary", str(SCRIPTS / "linear_steps.py"), "20"]) == 0
    assert [p.name for p in (out / "traces").iterdir()] == ["step_4.pt.trace.json"]


def test_a_cycle_cut_by_the_script_s_end_is_named_by_its_last_step(tmp_path: Path) -> None:
    """A 40-step script ends inside the default schedule's last cycle (steps 38-40): its last
    step is 39, and the work after it is no step. The file was named step_40 (the step the
    profiler had opened when the script ended), where docs/cli.md says "step_N: the cycle that
    ended at step N"."""
    from torchscope.trace.loader import load

    out = tmp_path / "cut"
    quiet = ["--no-summary", "--sample-ms", "0"]
    assert main(["run", "--out", str(out), *quiet, str(SCRIPTS / "linear_steps.py"), "40"]) == 0
    names = [Path(p).name for p in json.loads((out / "run.json").read_text())["traces"]]
    assert names == ["step_4.pt.trace.json", "step_22.pt.trace.json", "step_39.pt.trace.json"]
    trace = load(out / "traces" / "step_39.pt.trace.json")
    assert isinstance(trace, torchscope.Trace)
    assert trace.steps["step"].to_list() == [38, 39]


@pytest.mark.parametrize("options", [[], ["--memory", "--stack"]])
def test_each_cycle_s_trace_name_is_the_path_it_was_saved_as(tmp_path: Path, options: list[str]) -> None:
    """Kineto ends its file with the path it wrote, our temporary: every saved cycle said
    "traceName": "/tmp/torchscope-cycles-HOST-.../cycle-1.pt.trace.json", a file long gone."""
    out = tmp_path / "named"
    schedule = ["--wait", "0", "--warmup", "1", "--active", "2", "--repeat", "2", *options]
    assert main(["run", "--out", str(out), "--no-summary", *schedule, str(SCRIPTS / "linear_steps.py")]) == 0
    saved = sorted((out / "traces").iterdir())
    assert len(saved) == 2
    for path in saved:
        assert json.loads(path.read_text())["traceName"] == str(path)


@pytest.mark.parametrize("gz", [False, True])
def test_a_copied_kineto_file_names_its_copy(tmp_path: Path, gz: bool) -> None:
    """The copy of Kineto's file (plain, or gzip-compressed as it is copied) names itself; the
    events before the name are copied byte for byte, however far back they start."""
    import gzip

    from torchscope.capture.kineto import _copy_file

    events = ",".join(f'{{"ph": "X", "name": "op{i}", "ts": {i}, "dur": 1}}' for i in range(400))
    source = tmp_path / "cycle-1.pt.trace.json"
    kinetos = "/tmp/torchscope-cycles-x/cycle-1.pt.trace.json"
    source.write_text(f'{{"traceEvents": [{events}],"traceName": "{kinetos}" }}')
    target = tmp_path / ("step_4.pt.trace.json.gz" if gz else "step_4.pt.trace.json")
    _copy_file(source, target, gz, "/runs/a/traces/step_4.pt.trace.json")
    text = gzip.decompress(target.read_bytes()) if gz else target.read_bytes()
    doc = json.loads(text)
    assert doc["traceName"] == "/runs/a/traces/step_4.pt.trace.json"
    assert doc["traceEvents"] == json.loads(source.read_text())["traceEvents"]


def test_a_relative_out_stays_where_it_was_named_when_the_script_changes_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--out relout and a script that calls os.chdir: the traces and the report went under the
    script's new directory, and relout kept a run.json saying 'running'."""
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "moves.py").write_text(
        f"import os, runpy\nos.chdir({str(tmp_path / 'elsewhere')!r})\n"
        f"runpy.run_path({str(SCRIPTS / 'linear_steps.py')!r}, run_name='__main__')\n"
    )
    monkeypatch.chdir(tmp_path)
    assert main(["run", "--out", "relout", "--no-summary", "moves.py"]) == 0
    assert json.loads((tmp_path / "relout" / "run.json").read_text())["state"] == "ended"
    assert (tmp_path / "relout" / "report.json").is_file() and any((tmp_path / "relout" / "traces").iterdir())
    assert not (tmp_path / "elsewhere" / "relout").exists()


def test_a_users_own_files_in_out_are_not_taken_for_an_earlier_run(tmp_path: Path) -> None:
    """A folder with the user's own report.html (no run.json, no traces) was 'an earlier run',
    and the file was hidden away in .earlier-*."""
    out = tmp_path / "mine"
    out.mkdir()
    (out / "report.json").write_text('{"mine": 1}')
    assert main(["run", "--out", str(out), "--no-summary", str(SCRIPTS / "linear_steps.py"), "5"]) == 0
    assert not list(out.glob(".earlier-*"))


def test_with_stack_the_runs_own_threads_stay_out_of_the_scripts_tables(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """torch's Python tracer records every thread alive when a cycle starts: from the second
    cycle on, the sampler's and the memory cap's lock waits were most of the Python events and
    topped ``torchscope table`` (a 3-step cycle of 86 ms read 261 ms of self CPU). Each cycle
    names those threads; the file keeps their events as Kineto wrote them, the Trace does not."""
    out = tmp_path / "stacks"
    args = ["run", "--out", str(out), "--stack", "--wait", "1", "--warmup", "1", "--active", "2"]
    # steps of ~30 ms: the sampler (1 ms) surely calls during the second cycle
    assert main([*args, "--repeat", "2", str(SCRIPTS / "busy_python_steps.py")]) == 0
    capsys.readouterr()
    second = Path(json.loads((out / "run.json").read_text())["traces"][1])
    doc = json.loads(second.read_text())
    tool = doc["torchscope_tool_threads"]
    assert len(tool["tids"]) == 2 and tool["pid"] not in tool["tids"]  # the sampler and the cap's
    python_tids = {e["tid"] for e in doc["traceEvents"] if e.get("cat") == "python_function"}
    assert set(tool["tids"]) & python_tids  # recorded in the file: the tracer saw them
    trace = torchscope.load(second)
    assert not set(tool["tids"]) & set(trace.events["tid"].to_list())
    assert not set(tool["tids"]) & set(trace.threads["tid"].to_list())
    # the frames of a thread that made no call in the cycle carry no thread id (tid 0): the
    # cap's watcher, if it slept through the cycle (50 ms); under pytest-xdist, execnet's idle
    # threads land there too, and stay (they are not ours); what is left of the runner's code
    # ran on the script's thread (its step hook)
    python = trace.events.filter(pl.col("kind") == "python_function")
    silent = [e["name"] for e in doc["traceEvents"] if e.get("cat") == "python_function" and e["tid"] == 0]
    assert [n for n in silent if "torchscope/" in n] == [
        n for n in silent if n.startswith(("torchscope/runner/tool_thread.py(", "torchscope/runner/bounds.py("))
    ]
    # (whether the watcher woke during these 2 ms is chance: tests/trace/test_reader.py reads
    # its silent frames from a file made for it)
    left = python.filter(pl.col("tid") == 0)["name"].cast(pl.String)
    assert not left.str.contains("torchscope/").any()
    assert set(python["tid"].to_list()) <= {tool["pid"], 0}
    assert python["name"].cast(pl.String).str.contains("busy_python_steps.py").any()
