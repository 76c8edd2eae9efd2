"""`torchscope run` end to end on scripts we wrote: the user's zero-code path."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

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
    assert (out / "report.html").stat().st_size > 10_000
    assert "where the time goes" in captured.err and "aten::convolution_backward" in captured.err


def test_hot_spot_table_names_argwhere_that_the_op_profiler_misses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "mask"
    assert main(["run", "--out", str(out), str(SCRIPTS / "masking.py")]) == 0
    hot = _report(out)["hotspots"]
    argwhere = next(r for r in hot if r["function"] == "argwhere")
    assert argwhere["location"].startswith("numpy/")
    assert argwhere["total_pct"] > 30.0  # the run's time goes here
    assert argwhere["outside_ops_pct"] > 90.0  # and no ATen op covers it
    forward = next(r for r in hot if r["function"] == "forward" and r["file"].endswith("masking.py"))
    assert forward["total_ns"] >= argwhere["total_ns"]
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
    files = [r["file"] for r in report["hotspots"]]
    assert files and any(f.endswith("crash.py") for f in files)
    for f in files:
        assert (
            "torchscope" not in f.replace(str(SCRIPTS), "") and "traceback" not in f and "linecache" not in f
        )
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


def test_a_failing_in_memory_trace_falls_back_to_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from torchscope.capture.profiler import profile

    def broken(self: object) -> None:
        raise RuntimeError("in-memory trace unavailable")

    monkeypatch.setattr(profile, "trace", broken)
    out = tmp_path / "fallback"
    assert main(["run", "--out", str(out), "--no-summary", str(SCRIPTS / "exits.py"), "0"]) == 0
    report = _report(out)
    assert any("in-memory trace unavailable" in w for w in report["warnings"])
    assert report["report"]["meta"]["events"] > 0  # read back from traces/run.pt.trace.json


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
    assert masking["evidence"]["python_functions"][0].startswith("argwhere (numeric.py:")
    assert "the sampler caught most of it in argwhere" in masking["message"]
    assert "torchscope run" not in masking["fix"]  # no advice to use the tool the user is using
    assert "the sampler caught most of it in argwhere" in capsys.readouterr().err


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
        assert (out / f"rank-{rank}" / "traces" / f"rank-{rank}.run.pt.trace.json").is_file()
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
