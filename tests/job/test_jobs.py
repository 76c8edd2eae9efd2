"""Jobs: discovery of runs/ranks/cycles, the straggler of a real gloo job, bounded output."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch

import torchscope
from torchscope import ProfilerActivity, profile, schedule, tensorboard_trace_handler
from torchscope.cli.main import main
from torchscope.job import analyse_job, discover
from torchscope.job.render import MAX_LINES, job_lines


def _train(out: Path, worker: str, width: int) -> None:
    """Our own profile + tensorboard_trace_handler, 3 cycles (repeat=3) of 2 active steps."""
    model = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU(), torch.nn.Linear(width, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(8, width)
    sched = schedule(wait=0, warmup=1, active=2, repeat=3)
    with profile(
        activities=[ProfilerActivity.CPU],
        schedule=sched,
        on_trace_ready=tensorboard_trace_handler(str(out), worker_name=worker),
    ) as prof:
        for _ in range(9):
            opt.zero_grad()
            model(x).sum().backward()
            opt.step()
            prof.step()


def test_two_runs_two_ranks_three_cycles(tmp_path: Path) -> None:
    root = tmp_path / "tb"
    for run, width in (("baseline", 16), ("bigger", 64)):
        for rank in (0, 1):
            _train(root / run, f"rank{rank}", width)
    found = discover(root)
    assert [r.name for r in found.runs] == ["baseline", "bigger"]
    assert [[(rf.rank, rf.cycles, rf.rank_from) for rf in r.ranks] for r in found.runs] == [
        [(0, 3, "name"), (1, 3, "name")]
    ] * 2
    job = analyse_job(root, engine="local:1")
    assert [(r["run"], r["ranks"], r["cycles"]) for r in job["runs"]] == [
        ("baseline", 2, 3),
        ("bigger", 2, 3),
    ]
    assert [len(r["cycle_table"]) for r in job["runs"]] == [3, 3]
    assert all(row["steps"] == 2 for r in job["runs"] for row in r["cycle_table"])


def test_worker_with_pid_is_not_a_rank_and_bad_files_are_named(traces_dir: Path, tmp_path: Path) -> None:
    src = traces_dir / "cuda/triton_kernel.json.gz"  # no distributedInfo
    for stamp in (1, 2):  # one process (host_4242), two cycles
        shutil.copy(src, tmp_path / f"host_4242.{stamp}.pt.trace.json.gz")
    (tmp_path / "host_4242.3.pt.trace.json").write_text("not json")
    (tmp_path / "host_4242.4.pt.trace.json.gz").write_bytes(b"not gzip")
    found = discover(tmp_path)
    assert [(rf.run, rf.rank, rf.cycles, rf.rank_from) for rf in found.rank_files] == [
        (tmp_path.name, 0, 2, "single")
    ]
    assert sorted(s.split(":")[0] for s in found.skipped) == [
        "skipped host_4242.3.pt.trace.json",
        "skipped host_4242.4.pt.trace.json.gz",
    ]
    assert main(["report", str(tmp_path), "--engine", "spark", "--no-html"]) == 2  # named, not a traceback


def test_torchrun_layout_and_distributed_info(traces_dir: Path, tmp_path: Path) -> None:
    """torchrun's OUT/rank-N/ folders are ranks of one run; distributedInfo wins over names."""
    for n in (0, 1):
        d = tmp_path / "out" / f"rank-{n}"
        d.mkdir(parents=True)
        shutil.copy(traces_dir / f"multirank/rank-{n}.json.gz", d / "trace.json.gz")
    found = discover(tmp_path / "out")
    # the files' distributedInfo says which of the 128 ranks these are
    got = [(rf.run, rf.rank, rf.world_size, rf.rank_from) for rf in found.rank_files]
    heads = []
    for n in (0, 1):
        with gzip.open(traces_dir / f"multirank/rank-{n}.json.gz", "rt") as fh:
            heads.append(json.load(fh)["distributedInfo"]["rank"])
    assert got == [("out", r, 128, "distributedInfo") for r in sorted(heads)]


def test_demo_twice_then_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["demo", "--steps", "5", "--size", "32"]) == 0
    assert main(["demo", "--steps", "5", "--size", "32"]) == 0
    capsys.readouterr()
    assert main(["report", "torchscope-out/demo/log", "--json"]) == 0
    job = json.loads(capsys.readouterr().out)
    assert job["warnings"] == []
    assert [(r["run"], r["ranks"], r["cycles"]) for r in job["runs"]] == [("log", 1, 2)]
    assert main(["report", "torchscope-out/demo/log", "--no-html"]) == 0
    text = capsys.readouterr().out
    assert "cycles (2): one line each" in text and "SchemaError" not in text
    # the TraceSet path (torchscope.load + build_report) over the same folder: no dtype error
    from torchscope.analysis.report import build_report
    from torchscope.trace.loader import load

    # two runs of the demo are one worker's two cycles, not two ranks (they were ranks 0 and 1)
    both = load(tmp_path / "torchscope-out/demo/log")
    assert both.members == "cycles" and len(both) == 2
    report = build_report(both)
    assert report["distributed"]["ranks"] == [] and len(report["ranks"]) == 2


def test_gloo_straggler_named_with_its_extra_op(gloo_job: Path) -> None:
    job = analyse_job(gloo_job, engine="local:1")
    (run,) = job["runs"]
    assert (run["ranks"], run["backend"]) == (2, "gloo")
    assert run["collectives"][0]["name"] == "allreduce" and run["collectives"][0]["count"] == 4
    s = run["straggler"]
    assert s is not None and s["rank"] == 1
    # the ops it does that rank 0 does not: the matmul chain (aten::mm under aten::matmul) and tanh_
    # (within the first three: an op both ranks run, preempted on a loaded machine, once came
    # second, with a few ms more on rank 1)
    assert s["ops"][0]["name"] == "aten::mm" and "aten::tanh_" in {o["name"] for o in s["ops"][:3]}
    assert job["runs"][0]["recommendations"][0]["rule"] == "straggler"
    # the fast rank is the one that waits (the straggler waits too now and then, when the
    # machine is loaded and rank 0 reaches a collective last: 0.95 ms once under the full suite)
    waits = {w["rank"]: w["wait_ns"] for w in run["rank_waits"]}
    assert waits[0] > 4 * waits[1]
    # rank 0's "communication" is that wait: said so, pointed at the straggler, ranked after it
    comm = next(f for f in run["recommendations"] if f["rule"] == "communication_heavy")
    assert comm["worst_rank"] == 0 and comm["evidence"]["straggler"] == 1
    assert comm["evidence"]["waiting_for_straggler_share"] > 0.5
    assert "waiting in the collectives for rank 1, the straggler" in comm["message"]
    assert comm["fix"].startswith("Even out rank 1's work first")
    assert comm["impact"] < run["recommendations"][0]["impact"]


def test_communication_that_is_not_waiting_keeps_its_words() -> None:
    from torchscope.job.reduce import _waiting_for

    strag = {"rank": 1}
    finding = {
        "rule": "communication_heavy",
        "worst_rank": 0,
        "message": "m",
        "fix": "f",
        "impact": 0.4,
        "evidence": {"communication_us_per_step": 1000.0, "share": 0.4},
    }
    ranks = [{"rank": 0, "cycles": [{"steps": 10}]}, {"rank": 1, "cycles": [{"steps": 10}]}]
    # 0.3 ms of waiting per step out of 1 ms of communication: most of it is real communication
    aligned = {"ranks": [{"rank": 0, "wait_ns": 3_000_000.0}, {"rank": 1, "wait_ns": 0.0}]}
    assert _waiting_for(strag, finding, aligned, ranks) is finding
    aligned["ranks"][0]["wait_ns"] = 8_000_000.0  # 0.8 ms of it: the wait explains it
    reworded = _waiting_for(strag, finding, aligned, ranks)
    assert reworded["impact"] == pytest.approx(0.4 * 0.2)
    assert reworded["evidence"]["waiting_for_straggler_share"] == pytest.approx(0.8)


def _copy_as_rank(src: Path, dst: Path, rank: int, world: int) -> None:
    data = json.loads(src.read_text())
    data["distributedInfo"] = {**data["distributedInfo"], "rank": rank, "world_size": world}
    dst.write_text(json.dumps(data))


def test_terminal_and_page_bounded_at_many_ranks(
    gloo_job: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ranks = 40
    files = sorted(gloo_job.glob("*.json"))
    slow = next(f for f in files if '"rank": 1' in f.read_text()[:2000])
    fast = next(f for f in files if f != slow)
    job_dir = tmp_path / "big"
    job_dir.mkdir()
    for r in range(ranks):
        _copy_as_rank(slow if r == 7 else fast, job_dir / f"rank{r}.pt.trace.json", r, ranks)
    html = tmp_path / "big.html"
    assert main(["report", str(job_dir), "--html", str(html)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) <= MAX_LINES
    assert lines[0].startswith(f"== big: {ranks} ranks")
    assert any(line.startswith("straggler: rank 7 ") for line in lines)
    assert html.stat().st_size < 10 * 1024 * 1024
    assert main(["report", str(job_dir), "--json", "--no-html"]) == 0
    job = json.loads(capsys.readouterr().out)
    assert [p["rank"] for p in job["runs"][0]["per_rank"]] == list(range(ranks))


def test_ray_engine_gives_the_local_json(gloo_job: Path) -> None:
    ray = pytest.importorskip("ray")
    try:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    except Exception as exc:  # Ray's own start-up gives its raylet 30 s, hard-coded
        if "timed out during startup" in str(exc):  # a starved machine, not a result of ours
            pytest.skip(f"Ray could not start its node here: {exc}")
        raise
    try:
        assert analyse_job(gloo_job, engine="ray") == analyse_job(gloo_job, engine="local:2")
    finally:
        ray.shutdown()


def test_rank_views_are_sibling_pages(
    gloo_job: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    html = tmp_path / "gloo.html"
    assert (
        main(["report", str(gloo_job), "--html", str(html), "--rank-views", "--json", "--engine", "local:1"])
        == 0
    )
    job = json.loads(capsys.readouterr().out)
    views = [v for p in job["runs"][0]["per_rank"] for v in p["views"]]
    assert views == ["gloo.ranks/job-rank0.html", "gloo.ranks/job-rank1.html"]
    assert all((tmp_path / v).stat().st_size > 0 for v in views)
    page = html.read_text()
    assert '"job":' in page and "gloo.ranks/job-rank1.html" in page


def test_torchrun_torchscope_run_names_the_straggler(
    tmp_path: Path, port: int, capsys: pytest.CaptureFixture[str]
) -> None:
    """The issue's workflow: torchrun -m torchscope run on a gloo DDP script, then report OUT."""
    import subprocess
    import sys

    out = tmp_path / "prof"
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(port),
        "-m", "torchscope", "run", "--out", str(out), "--wait", "1", "--warmup", "1", "--active", "3",
        "--repeat", "2", "--no-summary", str(Path(__file__).parent / "ddp_script.py"),
    ]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    found = discover(out)
    assert [(rf.run, rf.rank, rf.cycles) for rf in found.rank_files] == [("prof", 0, 2), ("prof", 1, 2)]
    assert main(["report", str(out), "--json", "--no-html"]) == 0
    (run,) = json.loads(capsys.readouterr().out)["runs"]
    assert run["straggler"]["rank"] == 1
    ops = run["straggler"]["ops"]
    assert ops[0]["name"] == "aten::mm" and "aten::tanh_" in {o["name"] for o in ops[:3]}


def test_many_runs_stay_within_the_line_bound(
    gloo_job: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "tb"
    for i in range(12):
        run = root / f"lr{i}"
        run.mkdir(parents=True)
        for f in gloo_job.glob("*.json"):
            shutil.copy(f, run / f.name)
    assert main(["report", str(root), "--no-html"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) <= MAX_LINES
    assert lines[0] == f"12 runs in {root}:"
    assert lines[1].startswith("  lr0: 2 ranks, 1 cycle, median step ") and lines[1].endswith(
        ", straggler rank 1"
    )
    assert any(line.startswith("... ") and "more run blocks not shown" in line for line in lines)


def test_files_without_rank_or_worker_stamp_are_runs_of_their_own(traces_dir: Path) -> None:
    """Two TensorBoard samples (no distributedInfo, no rank, no timestamp) are two runs, not two
    cycles of one."""
    found = discover(traces_dir / "tensorboard_samples")
    assert [(r.name, len(r.ranks), r.cycles) for r in found.runs] == [
        ("tensorboard_samples/resnet50_num_workers_0", 1, 1),
        ("tensorboard_samples/resnet50_num_workers_4", 1, 1),
    ]


# -- the new user's findings 1, 4 and 10 ---------------------------------------------------------
def test_every_trace_of_a_directory_is_read_or_named(traces_dir: Path, tmp_path: Path) -> None:
    """Finding 1: one *.pt.trace.json beside other traces no longer hides them."""
    found = discover(traces_dir / "cuda")
    names = sorted(f.name for rf in found.rank_files for f in rf.files)
    assert names == sorted(
        p.name for p in (traces_dir / "cuda").iterdir() if p.name.endswith((".json", ".gz"))
    )
    assert len(found.runs) == 9  # unrelated traces (two claim rank 0) are runs of their own
    assert {r.name for r in found.runs} >= {"cuda/nccl_rank0_of_2", "cuda/rank0_ns_resolution"}
    assert found.skipped == ()

    root = tmp_path / "mixed"
    (root / "run1").mkdir(parents=True)
    shutil.copy(traces_dir / "cuda/backward_thread_small.json", root / "run1/step_8.pt.trace.json")
    shutil.copy(traces_dir / "cuda/triton_kernel.json.gz", root / "triton_kernel.json.gz")
    (root / "cut.pt.trace.json").write_text("not json")
    found = discover(root)
    assert sorted((r.name, r.ranks[0].files[0].name) for r in found.runs) == [
        ("mixed", "triton_kernel.json.gz"),  # the folder's only trace: its run is the folder
        ("run1", "step_8.pt.trace.json"),
    ]
    assert [s.split(":")[0] for s in found.skipped] == ["skipped cut.pt.trace.json"]
    job = analyse_job(root, engine="local:1")
    assert [r["run"] for r in job["runs"]] == ["mixed", "run1"]
    assert job["warnings"][0].startswith("skipped cut.pt.trace.json: ")

    from torchscope.trace.loader import load_dir

    loaded = load_dir(root)  # the single-trace loader finds the same files, and says it holds two runs
    assert len(loaded.traces) == 2 and loaded.skipped == (
        *found.skipped,
        "holds 2 runs (mixed, run1): read side by side as one set, not compared as runs"
        " (torchscope report DIR keeps them apart)",
    )


def _log_dir(out: Path, slow_step: int) -> None:
    """Our profile + tensorboard_trace_handler, schedule(wait=1, warmup=1, active=3, repeat=2),
    CPU only, with one step (``slow_step``) on a batch 16x larger: an outlier step."""
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=1, warmup=1, active=3, repeat=2),
        on_trace_ready=tensorboard_trace_handler(str(out)),
        profile_memory=True,
    ) as prof:
        for i in range(12):
            x = torch.randn(4096 if i == slow_step else 256, 64)
            opt.zero_grad()
            model(x).sum().backward()
            opt.step()
            prof.step()


def test_cycle_lines_are_the_steps_themselves(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Finding 4: each cycle's shortest/median/longest step is that cycle's trace's, as
    ``report FILE --json`` gives them; the longest step is the outlier, not a median; a CPU-only
    run speaks in host categories and keeps its single-trace detail (top ops, memory)."""
    from statistics import median

    from torchscope.render.console import fmt_ns

    root = tmp_path / "log"
    _log_dir(root, slow_step=8)
    (root / "config.json").write_text(json.dumps({"lr": 0.1}))  # not a trace: left out silently
    files = sorted(root.glob("*.pt.trace.json"), key=lambda f: int(f.name.split(".")[1]))
    assert len(files) == 2
    per_file = []
    for f in files:
        assert main(["report", str(f), "--json", "--no-html"]) == 0
        per_file.append([round(s["dur_us"] * 1000) for s in json.loads(capsys.readouterr().out)["steps"]])
    job = analyse_job(root, engine="local:1")
    assert job["warnings"] == []
    (run,) = job["runs"]
    rows = run["cycle_table"]
    for row, steps in zip(rows, per_file, strict=True):
        assert row["steps"] == len(steps) == 3
        assert row["min_step_ns"] == pytest.approx(min(steps), abs=1)
        assert row["median_step_ns"] == pytest.approx(median(steps), abs=1)
        assert row["max_step_ns"] == pytest.approx(max(steps), abs=1)
    every = [s for steps in per_file for s in steps]
    longest = max(every)
    assert run["steps_ns"]["max"] == pytest.approx(longest, abs=1)
    assert run["steps_ns"]["max_cycle"] == next(i for i, s in enumerate(per_file) if longest in s)
    assert run["steps_ns"]["max"] > run["step_ns"]["median"]  # the outlier is seen, not the median
    assert run["categories"][0] == "Operators"  # the host categories of a CPU-only trace

    assert main(["report", str(root), "--no-html"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) <= MAX_LINES
    for i, steps in enumerate(per_file):
        want = (
            f"  cycle {i}: 1 rank, 3 steps: shortest {fmt_ns(min(steps))}, median {fmt_ns(median(steps))}, "
        )
        assert any(line.startswith(want + f"longest {fmt_ns(max(steps))};") for line in lines), want
    assert any(line.startswith("mean step by category: Operators") for line in lines)
    assert not any("CPU Exec" in line for line in lines)
    assert any(line.startswith("median cycle ") for line in lines)
    assert any("top ops (by host time)" in line for line in lines)
    assert any(line.startswith("memory cpu: peak allocated ") for line in lines)


def _exit_log_dir(out: Path, profiler: Any, steps: int, **sched: int) -> list[Path]:
    """A scheduled profile (repeat=0) left mid-cycle: ``tensorboard_trace_handler``'s files in
    cycle order, the last one ending in the profile's exit step."""
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    x = torch.randn(256, 64)
    with profiler.profile(
        activities=[ProfilerActivity.CPU],
        schedule=profiler.schedule(**sched),
        on_trace_ready=profiler.tensorboard_trace_handler(str(out)),
    ) as prof:
        for _ in range(steps):
            model(x).sum().backward()
            prof.step()
    return sorted(out.glob("*.pt.trace.json"), key=lambda f: int(f.name.split(".")[1]))


def _step_ns(files: list[Path], capsys: pytest.CaptureFixture[str]) -> list[list[int]]:
    """Each file's steps as ``report FILE --json`` gives them."""
    out = []
    for f in files:
        assert main(["report", str(f), "--json", "--no-html"]) == 0
        out.append([round(s["dur_us"] * 1000) for s in json.loads(capsys.readouterr().out)["steps"]])
    return out


def test_the_profiles_exit_step_is_not_a_step_of_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Leaving a scheduled ``with profile`` mid-cycle ends the last cycle in stop(): its last
    step runs from the last step() to the exit (tens of µs), and a file may hold nothing else.
    A one-step run's log dir showed that file as the median cycle, "Python outside ops 100 %",
    averaged it into the run's step and advised on it. Ours marks such a cycle; in torch's, a
    last step in which no op began is the exit. The steps before it stay."""
    import torch.profiler as torch_profiler

    # ours: cycles [0, 1], [2, 3], [4, exit]: only the mark tells the exit apart
    ours = _exit_log_dir(tmp_path / "ours", torchscope, 5, wait=0, warmup=0, active=2)
    ended = [json.loads(f.read_text()).get("torchscope_cycle_ended_by") for f in ours]
    assert ended == ["schedule", "schedule", "stop"]
    per_file = _step_ns(ours, capsys)
    assert [len(steps) for steps in per_file] == [2, 2, 1]  # report FILE leaves our exit out too
    (run,) = analyse_job(tmp_path / "ours", engine="local:1")["runs"]
    rows = run["cycle_table"]
    assert [(r["steps"], r["left_out"], r["note"]) for r in rows] == [
        (2, False, None),
        (2, False, None),
        (1, False, "its last step, the profile's exit, left out"),
    ]
    kept = [step for steps in per_file for step in steps]
    assert run["steps_ns"]["count"] == 5 and run["per_rank"][0]["steps"] == 5
    assert run["steps_ns"]["min"] == pytest.approx(min(kept), abs=1)
    assert rows[2]["max_step_ns"] == pytest.approx(per_file[2][0], abs=1)

    # torch's: cycles [0, 1, 2], [3, exit]: the exit is the last step in which no op began
    theirs = _exit_log_dir(tmp_path / "torch", torch_profiler, 4, wait=0, warmup=0, active=3)
    assert not any("torchscope_cycle_ended_by" in json.loads(f.read_text()) for f in theirs)
    per_file = _step_ns(theirs, capsys)
    assert [len(steps) for steps in per_file] == [3, 1]  # report FILE leaves it out too
    (run,) = analyse_job(tmp_path / "torch", engine="local:1")["runs"]
    assert [(r["steps"], r["note"]) for r in run["cycle_table"]] == [
        (3, None),
        (1, "its last step, the profile's exit, left out"),
    ]
    assert run["steps_ns"]["count"] == 4
    assert run["steps_ns"]["min"] == pytest.approx(min([*per_file[0], per_file[1][0]]), abs=1)

    # one step a cycle: the last file holds only the exit, and is left out of everything
    for profiler, name in ((torchscope, "one"), (torch_profiler, "torch_one")):
        files = _exit_log_dir(tmp_path / name, profiler, 2, wait=0, warmup=0, active=1)
        assert len(files) == 3
        (run,) = analyse_job(tmp_path / name, engine="local:1")["runs"]
        assert [r["left_out"] for r in run["cycle_table"]] == [False, False, True], name
        assert run["steps_ns"]["count"] == 2
        assert not any(f["worst_cycle"] == 2 for f in run["recommendations"])
    assert main(["report", str(tmp_path / "one"), "--no-html"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "  cycle 2: 1 rank, only the profile's exit (no step): left out of the run's steps and findings" in lines
    # the exit-only file on its own is shown, says what it is, and is not advised on (a new
    # user's find: "python_outside_ops: 100% of the steps" on a 24 us exit)
    exit_only = sorted((tmp_path / "one").glob("*.pt.trace.json"), key=lambda f: int(f.name.split(".")[1]))[2]
    assert main(["report", str(exit_only), "--json", "--no-html"]) == 0
    alone = json.loads(capsys.readouterr().out)
    assert alone["recommendations"] == [] and len(alone["steps"]) == 1
    assert alone["meta"]["notes"] == [
        "this trace is only the profile's exit (from the last step() to the end of the profile):"
        " no step of the run, so no recommendations"
    ]
    assert main(["report", str(ours[2]), "--json", "--no-html"]) == 0
    assert json.loads(capsys.readouterr().out)["meta"]["notes"] == [
        "its last step is left out of the steps: it is the profile's exit (from the last step() to the end)"
    ]
    assert main(["report", str(ours[0]), "--json", "--no-html"]) == 0
    assert json.loads(capsys.readouterr().out)["meta"]["notes"] == []
    (picked,) = [line for line in lines if line.startswith("median cycle ")]
    assert files[2].name not in picked and "cycle 2" not in picked

    # a run that never got past its warm-ups (twice): its files are exits, and it says so
    for _ in range(2):
        _exit_log_dir(tmp_path / "short", torchscope, 2, wait=1, warmup=1, active=3)
    assert main(["report", str(tmp_path / "short"), "--no-html"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "no step recorded: each cycle holds only the profile's exit after its last step()" in lines
    assert not any("python_outside_ops" in line for line in lines)


def test_a_step_without_ops_is_a_step_and_not_the_exit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A step that runs no op (a stall, a data wait) is a step of the run, in a cycle the
    schedule ended and as the last step before the exit; only the exit (no op, and under a
    tenth of the working steps) is left out of a torch file's last cycle."""
    import time

    import torch.profiler as torch_profiler

    model = torch.nn.Linear(64, 64)
    out = tmp_path / "log"
    with torch_profiler.profile(
        activities=[ProfilerActivity.CPU],
        schedule=torch_profiler.schedule(wait=0, warmup=0, active=3),
        on_trace_ready=torch_profiler.tensorboard_trace_handler(str(out)),
    ) as prof:
        for i in range(5):  # cycles [0, 1, 2] and [3, 4, exit]; steps 2 and 4 only wait
            if i in (2, 4):
                time.sleep(0.02)
            else:
                model(torch.randn(32, 64)).sum().backward()
            prof.step()
    files = sorted(out.glob("*.pt.trace.json"), key=lambda f: int(f.name.split(".")[1]))
    per_file = _step_ns(files, capsys)
    assert [len(steps) for steps in per_file] == [3, 2]  # report FILE leaves the exit out too
    assert min(per_file[0][2], per_file[1][1]) >= 20_000_000  # the waits
    (run,) = analyse_job(out, engine="local:1")["runs"]
    assert [(r["steps"], r["note"]) for r in run["cycle_table"]] == [
        (3, None),
        (2, "its last step, the profile's exit, left out"),
    ]
    assert run["steps_ns"]["count"] == 5
    kept = [*per_file[0], *per_file[1]]
    assert run["steps_ns"]["min"] == pytest.approx(min(kept), abs=1)
    assert run["steps_ns"]["max"] == pytest.approx(max(kept), abs=1)


def test_the_step_a_crash_cut_is_left_out_and_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A scheduled block that raises mid-cycle ends in the step its error cut: our profiler
    marks the cycle "error", and the log dir's report leaves that step out and says why."""
    model = torch.nn.Linear(64, 64)
    out = tmp_path / "log"
    with pytest.raises(RuntimeError, match="boom"), profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=0, warmup=0, active=3),
        on_trace_ready=tensorboard_trace_handler(str(out)),
    ) as prof:
        for i in range(8):
            model(torch.randn(32, 64)).sum().backward()
            if i == 4:
                raise RuntimeError("boom")
            prof.step()
    files = sorted(out.glob("*.pt.trace.json"), key=lambda f: int(f.name.split(".")[1]))
    assert [json.loads(f.read_text())["torchscope_cycle_ended_by"] for f in files] == ["schedule", "error"]
    assert [len(steps) for steps in _step_ns(files, capsys)] == [3, 1]  # steps 3; 4 was cut
    (run,) = analyse_job(out, engine="local:1")["runs"]
    assert [(r["steps"], r["note"]) for r in run["cycle_table"]] == [
        (3, None),
        (1, "its last step, cut by the script's error, left out"),
    ]
    assert run["steps_ns"]["count"] == 4
    # the file alone names what it left out (the terminal, --json and the page read that note)
    assert main(["report", str(files[1]), "--json", "--no-html"]) == 0
    assert json.loads(capsys.readouterr().out)["meta"]["notes"] == [
        "its last step is left out of the steps: the script's error cut it"
    ]
    assert main(["report", str(files[1]), "--no-html"]) == 0
    assert "note its last step is left out of the steps: the script's error cut it" in capsys.readouterr().out


def test_a_torchscope_run_cycle_without_a_step_is_no_step_of_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``torchscope run``'s cycles keep their last step (the runner renames only the span after
    it, and writes no exit mark); a script that ends just as a cycle begins leaves no cycle of
    no step (it wrote one, which the run's summary called "no step" and the log dir's report
    left out)."""
    script = tmp_path / "train.py"
    script.write_text(
        "import torch\n"
        "m = torch.nn.Linear(64, 10)\n"
        "opt = torch.optim.SGD(m.parameters(), lr=0.1)\n"
        "for _ in range(12):\n"
        "    m(torch.randn(16, 64)).sum().backward()\n"
        "    opt.step()\n"
        "    opt.zero_grad()\n"
    )
    out = tmp_path / "run"
    schedule = ["--wait", "1", "--warmup", "1", "--active", "3", "--repeat", "0"]
    assert main(["run", "--out", str(out), *schedule, str(script)]) == 0
    capsys.readouterr()
    files = sorted((out / "traces").glob("*.pt.trace.json"))
    assert not any("torchscope_cycle_ended_by" in json.loads(f.read_text()) for f in files)
    # every cycle says it is the run's, one in the middle too (no setup span, no tail): its
    # advice points at the run's sampler, never at the tool that made it
    assert [json.loads(f.read_text()).get("torchscope_run") for f in files] == ["1"] * 2
    (run,) = analyse_job(out, engine="local:1")["runs"]
    assert not any("profile with `torchscope run`" in f["fix"] for f in run["recommendations"])
    rows = run["cycle_table"]
    assert [(r["steps"], r["left_out"]) for r in rows] == [(3, False), (3, False)]
    assert run["steps_ns"]["count"] == 6 and run["per_rank"][0]["cycles"] == 2


def test_config_and_our_own_outputs_are_not_runs(
    traces_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Finding 10: a config, torchscope run's run.json/report.json and a `report --json` output
    beside traces are no runs and are not named; a file that looked like a trace is named."""
    root = tmp_path / "mixed"
    root.mkdir()
    for name in ("a.json.gz", "b.json.gz"):
        shutil.copy(traces_dir / "cuda/triton_kernel.json.gz", root / name)
    (root / "config.json").write_text('{"lr": 0.1, "layers": [1, 2]}')
    (root / "run.json").write_text(json.dumps({"exit_code": 0, "error": None, "wall_s": 1.5}, indent=1))
    # a report.json larger than the head that discovery reads: told apart by its first keys
    big = {"version": 2, "title": "torchscope run x.py", "runs": [{"name": "x" * 100_000}]}
    (root / "report.json").write_text(json.dumps(big, indent=1))
    assert main(["report", str(traces_dir / "cuda/triton_kernel.json.gz"), "--json", "--no-html"]) == 0
    (root / "machine.json").write_text(capsys.readouterr().out)  # `report FILE --json`, itself
    (root / "empty.pt.trace.json").write_text("{}")
    found = discover(root)
    assert [r.name for r in found.runs] == ["mixed/a", "mixed/b"]
    assert found.skipped == ("skipped empty.pt.trace.json: no 'traceEvents' key: not a trace",)


def test_torchscope_run_cycles_are_one_run(traces_dir: Path, tmp_path: Path) -> None:
    """torchscope run's OUT/traces/step_N.pt.trace.json are one run's cycles in step order (not a
    run per file), and its run.json/report.json beside them are left out silently."""
    out = tmp_path / "out"
    (out / "traces").mkdir(parents=True)
    for n in (10, 2, 1):
        shutil.copy(
            traces_dir / "cuda/backward_thread_small.json", out / "traces" / f"step_{n}.pt.trace.json"
        )
    (out / "run.json").write_text(json.dumps({"exit_code": 0, "error": None, "wall_s": 1.0}, indent=1))
    (out / "report.json").write_text(json.dumps({"version": 2, "title": "torchscope run x.py"}, indent=1))
    found = discover(out)
    assert [(r.name, [f.name for f in r.ranks[0].files]) for r in found.runs] == [
        ("out", ["step_1.pt.trace.json", "step_2.pt.trace.json", "step_10.pt.trace.json"])
    ]  # named by the run's folder, not its "traces" sub-folder
    assert found.skipped == ()
    # beside other runs, each is named by its own folder
    shutil.copytree(out, tmp_path / "other")
    assert [r.name for r in discover(tmp_path).runs] == ["other", "out"]


def test_a_run_none_of_whose_files_reads_is_a_warning_not_a_run(traces_dir: Path, tmp_path: Path) -> None:
    root = tmp_path / "t"
    root.mkdir()
    shutil.copy(traces_dir / "cuda" / "backward_thread_small.json", root / "a.pt.trace.json")
    shutil.copy(traces_dir / "cuda" / "nccl_rank0_of_2.json.gz", root / "b.pt.trace.json.gz")
    (root / "bad.pt.trace.json").write_text('{"traceEvents": [')
    # Kineto's header without its events, under a name without "trace": a damaged trace (it
    # was dropped without a word), named beside the others and counted in the header
    (root / "rank0.json").write_text(json.dumps({"schemaVersion": 1, "deviceProperties": [], "distributedInfo": {"rank": 0}}))
    job = analyse_job(root, engine="local:1")
    assert [r["run"] for r in job["runs"]] == ["t/a", "t/b"]
    # a file that fails in the rank's reading is named relative to the job's directory too
    assert "skipped bad.pt.trace.json: not valid JSON (Input data was truncated)" in job["warnings"]
    assert "skipped rank0.json: Kineto's header but no 'traceEvents' key: a trace that lost its events" in job["warnings"]
    assert job["files_skipped"] == 2
    assert job_lines(job)[0] == f"2 runs in {root} (2 files skipped: see the warnings):"


def test_an_op_outside_the_others_top_ops_is_not_called_zero_on_them() -> None:
    # each rank keeps its top 40 ops; an op the straggler runs for 148 us a step that the other
    # rank ran for 131 us (outside its top 40, whose smallest was 200 us) was "0 ns on the others"
    from torchscope.job.straggler import _excess

    def rank(ops: dict[str, float], floor: float) -> dict:
        return {"cycles": [{"steps": 2, "ops_ns": ops, "ops_floor_ns": floor}]}

    straggler = rank({"aten::mm": 900.0, "aten::add_": 148.0}, floor=148.0)
    other = rank({"aten::mm": 500.0, **{f"op{i}": 300.0 for i in range(39)}}, floor=200.0)
    rows = {r["name"]: r for r in _excess(straggler, [other], "ops_ns")}
    assert rows["aten::mm"] == {
        "name": "aten::mm",
        "rank_ns": 900.0,
        "median_ns": 500.0,
        "excess_ns": 400.0,
        "median_is_bound": False,
    }
    assert "aten::add_" not in rows  # at most 200 on the other: no excess can be claimed
    # a table that was not full leaves nothing out: absent is truly 0
    rows = {r["name"]: r for r in _excess(straggler, [rank({"aten::mm": 500.0}, floor=0.0)], "ops_ns")}
    assert rows["aten::add_"]["median_ns"] == 0.0 and rows["aten::add_"]["median_is_bound"] is False
    rows = {r["name"]: r for r in _excess(rank({"aten::add_": 250.0}, 0.0), [other], "ops_ns")}
    assert rows["aten::add_"]["median_ns"] == 200.0 and rows["aten::add_"]["median_is_bound"] is True


def test_a_cycle_without_device_work_is_reduced_in_the_runs_categories() -> None:
    # a truncated cycle had no kernels, so it was summarized in the host's categories; averaged
    # with the device categories of the other cycles, both systems were shown, each halved
    from torchscope.analysis.overview import BREAKDOWN_CATEGORIES, HOST_CATEGORIES
    from torchscope.job.reduce import one_category_system

    def cycle(device: bool, kernel: float) -> dict:
        dev = {c: 0.0 for c in (*BREAKDOWN_CATEGORIES, "Total")} | {"Kernel": kernel, "CPU Exec": 10.0}
        host = {c: 0.0 for c in (*HOST_CATEGORIES, "Total")} | {"Operators": 10.0 + kernel}
        chosen = dev if device else host
        return {
            "steps": 1,
            "categories": list(BREAKDOWN_CATEGORIES if device else HOST_CATEGORIES),
            "breakdown_ns": chosen,
            "device_worked": device,
            "device_breakdown_ns": dev,
            "host_breakdown_ns": host,
        }

    ranks = [{"rank": 0, "cycles": [cycle(True, 90.0), cycle(False, 0.0)]}]
    (rank,) = one_category_system(ranks)
    assert [c["categories"] for c in rank["cycles"]] == [list(BREAKDOWN_CATEGORIES)] * 2
    assert [set(c["breakdown_ns"]) for c in rank["cycles"]] == [{*BREAKDOWN_CATEGORIES, "Total"}] * 2
    assert [c["breakdown_ns"]["Kernel"] for c in rank["cycles"]] == [90.0, 0.0]
    # a run no cycle of which had device work stays in the host's categories
    (host_only,) = one_category_system([{"rank": 0, "cycles": [cycle(False, 0.0)]}])
    assert host_only["cycles"][0]["categories"] == list(HOST_CATEGORIES)


@pytest.fixture
def pools_of_two_cores(tmp_path: Path, traces_dir: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, list[int]]:
    """A copy of ``multirank/`` and the sizes of the worker pools started, on a machine of 2
    cores (``default_workers``), whatever this one has."""
    import concurrent.futures

    from torchscope.job import engine

    root = tmp_path / "job"
    shutil.copytree(traces_dir / "multirank", root)
    pools: list[int] = []
    real_pool = concurrent.futures.ProcessPoolExecutor

    def counting_pool(n: int, **kw: object) -> object:
        pools.append(n)
        return real_pool(n, **kw)  # type: ignore[arg-type]

    # the engine imports the pool when it starts one (not at import: ``report`` of one file)
    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", counting_pool)
    monkeypatch.setattr(engine, "default_workers", lambda: 2)
    return root, pools


def test_a_small_job_runs_without_worker_processes(pools_of_two_cores: tuple[Path, list[int]]) -> None:
    # a spawned worker imports Polars again: for a job of a few hundred KB that cost more than the
    # work; asking for workers (local:N) still gets them, and the results are the same either way
    from torchscope.job import engine

    root, pools = pools_of_two_cores
    here = analyse_job(root)
    assert pools == [] and engine.job_bytes([{"files": [str(f) for f in root.iterdir()]}]) < engine.SMALL_JOB_BYTES
    assert analyse_job(root, engine="local:2") == here and pools == [2]


def test_load_of_a_log_dir_keeps_cycles_and_ranks_apart(tmp_path: Path) -> None:
    # torchscope.load(DIR) read every cycle as a rank: two ranks of three cycles gave six
    # "ranks", rank 0 three times in the distributed view, one cycle named by another's file
    import torchscope
    from torchscope.analysis.report import build_report

    run = tmp_path / "tb"
    for rank in (0, 1):
        _train(run, f"rank{rank}", 16)
    ts = torchscope.load(run)
    assert ts.members == "ranks" and list(ts) == ["rank0", "rank1"]
    last = {rf.rank: rf.files[-1] for rf in discover(run).rank_files}
    assert all(ts[f"rank{r}"].equals(torchscope.load(last[r])) for r in (0, 1))
    assert [s.split(":")[0] for s in ts.skipped] == ["rank 0 of tb", "rank 1 of tb"]
    assert all("read its last cycle" in s and "not the 2 before it" in s for s in ts.skipped)
    ranks = build_report(ts)["distributed"]["ranks"]
    assert [(r["rank"], r["name"]) for r in ranks] == [(0, "rank0"), (1, "rank1")]

    # one process's cycles are cycles, each under its file's name
    one = tmp_path / "one"
    _train(one, "worker", 16)
    cycles = torchscope.load(one)
    assert cycles.members == "cycles" and len(cycles) == 3 and cycles.skipped == ()
    assert sorted(cycles) == sorted(f.name.removesuffix(".pt.trace.json") for f in one.iterdir())


@pytest.mark.parametrize("engine", ["local:0", "local:-1", "local:x"])
def test_a_number_of_workers_below_one_is_refused(engine: str, capsys: pytest.CaptureFixture[str]) -> None:
    # local:0 ran with the default pool, local:x was a traceback
    src = Path(__file__).resolve().parents[2].parent / "shared" / "traces" / "multirank"
    assert main(["report", str(src), "--engine", engine, "--no-html"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"torchscope report: error: --engine {engine}: local:N takes a number of workers of at least 1"
    )


@pytest.mark.parametrize(
    ("engine", "why"),
    [("local:0", "local:N takes a number of workers of at least 1"), ("ray://", "unknown engine: use local, local:N, ray or ray://HOST:PORT")],
)
def test_an_engine_is_checked_for_a_single_file_too(engine: str, why: str, capsys: pytest.CaptureFixture[str]) -> None:
    # a single file does not use it, and a typo once waited for the day the input was a folder
    one = Path(__file__).resolve().parents[2].parent / "shared" / "traces" / "cuda" / "backward_thread_small.json"
    assert main(["report", str(one), "--engine", engine, "--no-html"]) == 2
    assert capsys.readouterr().err.strip() == f"torchscope report: error: --engine {engine}: {why}"


def test_files_of_different_jobs_in_one_folder_are_said(tmp_path: Path) -> None:
    # a trace of a 2-rank job copied beside a 128-rank job's ranks was merged into it silently
    shared = Path(__file__).resolve().parents[2].parent / "shared" / "traces"
    root = tmp_path / "ws"
    shutil.copytree(shared / "multirank", root)
    shutil.copy(shared / "cuda" / "nccl_rank0_of_2.json.gz", root / "rank-2.json.gz")
    assert analyse_job(root)["warnings"] == [
        "ws: its traces name different world sizes (2, 128): files of different jobs in one folder?"
        " They are read as one job",
        "ws: 1 file is named for another rank than its distributedInfo says (rank-2.json.gz: named rank 2,"
        " says rank 0); read as the rank the trace says (a rank with several files reads them as its cycles)",
        # the stranger file sorts as rank 0's second cycle
        "ws: its ranks wrote different numbers of cycles (rank 0: 2, rank 1: 1); cycles are paired by"
        " their order, so a cycle's ranks may come from different steps",
    ]
    assert analyse_job(shared / "multirank")["warnings"] == []


def test_uneven_cycles_several_runs_and_dot_paths_are_said(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torchscope
    from torchscope.analysis.report import build_report

    # rank 1 wrote three cycles, rank 0 one: the cycles are paired by order, which is said
    run = tmp_path / "tb"
    _train(run, "rank1", 16)
    _train(tmp_path / "r0", "rank0", 16)
    shutil.copy(max((tmp_path / "r0").iterdir()), run)
    assert analyse_job(run)["warnings"] == [
        "tb: its ranks wrote different numbers of cycles (rank 0: 1, rank 1: 3); cycles are paired by"
        " their order, so a cycle's ranks may come from different steps"
    ]
    # a folder given as "." is named by itself, not "."
    monkeypatch.chdir(run)
    assert [r["run"] for r in analyse_job(Path("."))["runs"]] == ["tb"]
    # two runs loaded as one set: said, and a member without a rank takes a number no rank has
    both = tmp_path / "both"
    shutil.copytree(run, both / "ddp")
    _train(both / "solo", "worker", 16)
    ts = torchscope.load(both)
    assert ts.skipped[0] == (
        "holds 2 runs (ddp, solo): read side by side as one set, not compared as runs"
        " (torchscope report DIR keeps them apart)"
    )
    ranks = build_report(ts)["distributed"]["ranks"]
    assert sorted(r["rank"] for r in ranks) == [0, 1, 2]


def test_a_cut_ranks_warning_comes_before_the_skipped_ones(traces_dir: Path, tmp_path: Path) -> None:
    """A new user's job of damaged ranks: the terminal showed three "skipped" warnings and hid
    the cut rank's, whose partial data is in the job's numbers. What a reader kept of a damaged
    file is said first."""
    from torchscope.job.render import job_lines

    root = tmp_path / "job"
    root.mkdir()
    shutil.copy(traces_dir / "multirank/rank-0.json.gz", root / "rank-0.json.gz")
    whole = (traces_dir / "multirank/rank-1.json.gz").read_bytes()
    (root / "rank-1.json.gz").write_bytes(whole[: len(whole) * 3 // 4])  # a copy cut short
    for rank in range(2, 6):
        (root / f"rank-{rank}.json").write_text("not json")
    job = analyse_job(root, engine="local:1")
    assert job["warnings"][0].startswith("rank-1.json.gz: the gzip stream is truncated")
    assert sum(w.startswith("skipped rank-") for w in job["warnings"]) == 4
    shown = [line for line in job_lines(job) if line.startswith("warning: ")]
    assert shown[0].startswith("warning: rank-1.json.gz: the gzip stream is truncated") and len(shown) == 5


def test_more_workers_than_cores_run_one_per_core_and_say_so(pools_of_two_cores: tuple[Path, list[int]]) -> None:
    """``local:64`` on 2 cores started 64 processes, each holding a rank's trace: past 10 GB
    within 27 s, and slower than the default. Capped at the cores, with a warning."""
    root, pools = pools_of_two_cores
    job = analyse_job(root, engine="local:64")
    assert pools == [2]
    assert job["warnings"] == [
        "--engine local:64: ran 2 worker processes, one per core of this machine"
        " (each holds one rank's trace; more would only take more memory)"
    ]
    assert analyse_job(root, engine="local:2")["warnings"] == [] and pools == [2, 2]


def test_ranks_with_the_same_step_time_are_not_called_fastest_and_slowest(
    traces_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Eight copies of one rank read "fastest 615.120 ms (rank 0), ... slowest 615.120 ms
    (rank 0)", as if rank 0 were both."""
    with gzip.open(traces_dir / "multirank/rank-0.json.gz", "rt") as fh:
        doc = json.load(fh)
    for rank in (0, 1):
        doc["distributedInfo"] = {**doc["distributedInfo"], "rank": rank}
        (tmp_path / f"rank-{rank}.json").write_text(json.dumps(doc))
    assert main(["report", str(tmp_path), "--no-html"]) == 0
    out = capsys.readouterr().out
    assert "step time per rank (each rank's median step): 615.120 ms on every rank" in out
    assert "fastest" not in out


def test_a_small_cut_gzip_rank_is_read_as_it_is_alone(traces_dir: Path, tmp_path: Path) -> None:
    """A rank's .json.gz cut after 5,000 bytes (56 KB inflated, under the 64 KB head read to
    find its rank) was skipped as "not a readable gzip file" by the directory, which became a
    one-rank job, while `torchscope table` read the same file with a warning."""
    shutil.copy(traces_dir / "multirank/rank-0.json.gz", tmp_path / "rank-0.json.gz")
    raw = (traces_dir / "multirank/rank-1.json.gz").read_bytes()
    (tmp_path / "rank-1.json.gz").write_bytes(raw[:5000])
    ts = torchscope.load(tmp_path)
    assert len(ts.traces) == 2 and not ts.skipped
    cut = ts.traces["rank1"]
    assert cut.meta.warnings[0] == "the gzip stream is truncated: read the 58,952 bytes it inflates to"
    assert cut.meta.warnings[1].startswith("the file ends mid-event (truncated?)")
    assert cut.events.height == 186


def test_a_dangling_link_or_a_fifo_named_like_a_trace_is_named(traces_dir: Path, tmp_path: Path) -> None:
    """Every other bad file of a log dir got a line; these two were left out without a word."""
    import os

    shutil.copy(traces_dir / "multirank/rank-0.json.gz", tmp_path / "rank-0.json.gz")
    shutil.copy(traces_dir / "multirank/rank-1.json.gz", tmp_path / "rank-1.json.gz")
    (tmp_path / "gone.pt.trace.json").symlink_to(tmp_path / "missing.json")
    os.mkfifo(tmp_path / "fifo.pt.trace.json")
    found = discover(tmp_path)
    assert list(found.skipped) == [
        "skipped fifo.pt.trace.json: not a regular file (a FIFO)",
        "skipped gone.pt.trace.json: a symbolic link to a file that does not exist",
    ]
    assert len(found.runs) == 1 and len(found.runs[0].ranks) == 2  # the two traces still read


def test_a_report_of_a_crashed_runs_directory_says_how_it_ended(
    traces_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``torchscope report RUNDIR`` of a run whose script raised showed its traces and said
    nothing of the crash that run.json records."""
    (tmp_path / "traces").mkdir()
    shutil.copy(traces_dir / "multirank/rank-0.json.gz", tmp_path / "traces/step_4.pt.trace.json.gz")
    shutil.copy(traces_dir / "multirank/rank-0.json.gz", tmp_path / "traces/step_22.pt.trace.json.gz")
    facts = {"exit_code": 1, "error": "RuntimeError: boom", "wall_s": 3.2, "optimizer_steps": 25}
    (tmp_path / "run.json").write_text(json.dumps(facts, indent=2))
    assert main(["report", str(tmp_path), "--no-html"]) == 0
    out = capsys.readouterr().out
    assert "run.json: the script exited 1 (RuntimeError: boom): its traces end where it stopped" in out


def test_a_cut_rank_keeps_its_per_step_op_times(
    traces_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """rank-1 cut at 80 % of its gzip read 266.855 ms/step of aten::_foreach_mul_ against
    133.428 whole: the whole trace's op totals were divided by the steps its breakdown kept.
    Its collectives are left out of the matching (a cut file's device events end early: matched
    by order, a cut rank was named the straggler at 174 % of a step), and that is said."""
    shutil.copy(traces_dir / "multirank/rank-0.json.gz", tmp_path / "rank-0.json.gz")
    raw = (traces_dir / "multirank/rank-1.json.gz").read_bytes()
    (tmp_path / "rank-1.json.gz").write_bytes(raw[: len(raw) * 8 // 10])
    assert main(["report", str(tmp_path), "--no-html"]) == 0
    out = capsys.readouterr().out
    assert "warning: rank-1.json.gz: the file ends mid-event (truncated?)" in out
    run = analyse_job(tmp_path, engine="local:1")["runs"][0]
    assert [p["top_ops_ns"]["aten::_foreach_mul_"] for p in run["per_rank"]] == [120_476_500.0, 133_427_500.0]
    assert run["straggler"] is None and run["notes"] == [
        f"{tmp_path.name}: rank 1's cycle 0 was cut short (a damaged file): left out of the collectives'"
        " matching and the straggler"
    ]


def test_a_run_that_wrote_no_trace_is_not_said_to_have_traces(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "traces").mkdir()
    facts = {"exit_code": 130, "state": "ended", "error": "interrupted again: stopped saving", "traces": []}
    (tmp_path / "run.json").write_text(json.dumps(facts))
    assert main(["report", str(tmp_path), "--no-html"]) == 2
    err = capsys.readouterr().err
    assert err.strip().endswith(
        "run.json: the script exited 130 (interrupted again: stopped saving): it wrote no trace"
    )


def _multirank_copies(traces_dir: Path, out: Path, ranks: int, edit: Any = None) -> None:
    """``ranks`` copies of the two real multirank traces (even ranks rank 0's, odd rank 1's),
    each with its own rank in ``distributedInfo``; ``edit(rank, doc)`` changes a copy."""
    out.mkdir()
    for r in range(ranks):
        with gzip.open(traces_dir / "multirank" / f"rank-{r % 2}.json.gz") as fh:
            doc = json.load(fh)
        doc["distributedInfo"] = {**doc["distributedInfo"], "rank": r, "world_size": ranks}
        if edit is not None:
            edit(r, doc)
        (out / f"rank-{r}.json").write_text(json.dumps(doc))


def test_a_rank_with_other_stream_ids_is_matched_and_said(
    traces_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # stream ids are numbered per process: one rank whose NCCL streams were 1084/1203 where the
    # others had 84/203 shared no group with them, and the collectives and straggler vanished
    def renumber(rank: int, doc: dict[str, Any]) -> None:
        if rank != 3:
            return
        for e in doc["traceEvents"]:
            args = e.get("args") or {}
            if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and args.get("stream") in (84, 203):
                args["stream"] += 1000
                e["tid"] = args["stream"]

    plain, renumbered = tmp_path / "plain", tmp_path / "renumbered"
    _multirank_copies(traces_dir, plain, 4)
    _multirank_copies(traces_dir, renumbered, 4, renumber)
    want, got = (analyse_job(d, engine="local:1") for d in (plain, renumbered))
    run = got["runs"][0]
    assert [c["count"] for c in run["collectives"]] == [c["count"] for c in want["runs"][0]["collectives"]]
    assert sum(c["count"] for c in run["collectives"]) == 10
    assert run["notes"] == [
        "renumbered: the ranks' communication groups differ (rank 0: stream 203, stream 84; rank 3: stream"
        " 1084, stream 1203): paired by the order of their first collective, and named as rank 0's"
    ]
    assert run["notes"][0] in got["warnings"]
    assert want["runs"][0]["notes"] == []


def test_ranks_last_together_are_no_straggler(
    traces_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the odd ranks are copies of one trace: they arrive last together at 7 of the 10
    # collectives. Credited to the lowest of them only, rank 1 was "the straggler" the other
    # odd ranks (as late as it, to the nanosecond) were "also late" behind
    _multirank_copies(traces_dir, tmp_path / "copies", 8)
    assert main(["report", str(tmp_path / "copies"), "--no-html"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "straggler: none (ranks 1, 3, 5, 7 (4 ranks) arrive last together, at 7 of 10 collectives each)" in lines
    job = analyse_job(tmp_path / "copies", engine="local:1")
    run = job["runs"][0]
    assert run["straggler"] is None
    assert [w["last"] for w in run["rank_waits"]] == [3, 7] * 4


def test_ranks_that_could_not_be_read_are_not_counted_as_read(
    traces_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # half the ranks' files damaged: the header said "4 ranks" and the findings "of 2 ranks"
    _multirank_copies(traces_dir, tmp_path / "half", 4)
    for r in (0, 2):
        path = tmp_path / "half" / f"rank-{r}.json"
        text = path.read_text()
        path.write_text(text[:3000] + "@" + text[3000:])  # not JSON from its 3,000th byte on
    assert main(["report", str(tmp_path / "half"), "--no-html"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "== half: 2 ranks read (2 more could not be: see the warnings), 1 cycle, nccl"
    run = analyse_job(tmp_path / "half", engine="local:1")["runs"][0]
    assert (run["ranks"], run["ranks_unread"]) == (2, [0, 2])


def test_ranks_on_different_devices_are_said(traces_dir: Path, tmp_path: Path) -> None:
    # the two nccl traces are ranks 0 and 1 of two different jobs (A100s, V100s): read as one
    # job, their collectives were paired without a word about it
    root = tmp_path / "mixed"
    root.mkdir()
    shutil.copy(traces_dir / "cuda" / "nccl_rank0_of_2.json.gz", root / "rank-0.json.gz")
    shutil.copy(traces_dir / "cuda" / "nccl_rank1_of_2_profile_memory.json.gz", root / "rank-1.json.gz")
    run = analyse_job(root, engine="local:1")["runs"][0]
    assert run["notes"] == [
        "mixed: its ranks ran on different devices (NVIDIA A100-PG509-200 on rank 0; Tesla V100-SXM2-32GB on"
        " rank 1): traces of different jobs? They are read as one job",
        "mixed: the ranks' communication groups differ (rank 0: stream 40; rank 1: stream 14): paired by the"
        " order of their first collective, and named as rank 0's",
    ]


def test_a_plain_trace_named_gz_and_a_rank_outside_the_world_are_read_and_said(
    traces_dir: Path, tmp_path: Path
) -> None:
    # `torchscope report FILE` reads a plain JSON trace named .json.gz (gzip is told by its
    # magic number); in a folder it was skipped as "not a readable gzip file". A rank numbered
    # past the world size its trace names was accepted without a word.
    def renumber(rank: int, doc: dict[str, Any]) -> None:
        if rank == 2:
            doc["distributedInfo"]["rank"] = 99

    _multirank_copies(traces_dir, tmp_path / "odd", 4, renumber)
    (tmp_path / "odd" / "rank-1.json").rename(tmp_path / "odd" / "rank-1.json.gz")
    job = analyse_job(tmp_path / "odd", engine="local:1")
    assert [p["rank"] for p in job["runs"][0]["per_rank"]] == [0, 1, 3, 99]
    assert job["warnings"] == [
        "odd: 1 file is named for another rank than its distributedInfo says (rank-2.json: named rank 2,"
        " says rank 99); read as the rank the trace says (a rank with several files reads them as its cycles)",
        "odd: rank 99 is outside the world size its traces name (ranks 0 to world size - 1): a trace of"
        " another job?",
    ]


def test_ranks_that_arrive_together_everywhere_are_said_so(
    traces_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # three copies of one rank: no collective has a last rank (each counted last for every rank
    # once, and "16 ranks arrive last together" was said of ranks that are never late)
    root = tmp_path / "same"
    root.mkdir()
    with gzip.open(traces_dir / "multirank" / "rank-0.json.gz") as fh:
        doc = json.load(fh)
    for r in range(3):
        doc["distributedInfo"] = {**doc["distributedInfo"], "rank": r, "world_size": 3}
        (root / f"rank-{r}.json").write_text(json.dumps(doc))
    assert main(["report", str(root), "--no-html"]) == 0
    assert "straggler: none (the ranks arrive together at every collective)" in capsys.readouterr().out.splitlines()
    assert [w["last"] for w in analyse_job(root, engine="local:1")["runs"][0]["rank_waits"]] == [0, 0, 0]


def test_a_trace_of_instants_is_not_called_the_profiles_exit(
    traces_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A trace holding one instant event read "each cycle holds only the profile's exit after its
    last step()" in a directory, and alone printed its header and nothing else; a trace whose
    one op lasts 0 ns printed "mean step by category: " with nothing after it."""
    root = tmp_path / "few"
    root.mkdir()
    instant = {"ph": "i", "cat": "cpu_instant_event", "name": "mark", "pid": 1, "tid": 1, "ts": 5, "s": "t"}
    (root / "instant.json").write_text(json.dumps({"traceEvents": [instant]}))
    zero = {"ph": "X", "cat": "cpu_op", "name": "aten::empty", "pid": 1, "tid": 1, "ts": 5, "dur": 0}
    (root / "zero.json").write_text(json.dumps({"traceEvents": [zero]}))
    shutil.copy(traces_dir / "cuda" / "backward_thread_small.json", root / "real.json")
    lines = job_lines(analyse_job(root, engine="local:1"))
    assert "no step recorded: no op, annotation or device work with a duration in the trace" in lines
    assert "mean step by category: nothing recorded in the steps (every event lasts 0 ns)" in lines
    assert not any("profile's exit" in line for line in lines)
    assert main(["report", str(root / "instant.json"), "--no-html"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["instant", "1", "event", "over", "0", "ns"]
    assert out[1] == "no step recorded: no op, annotation or device work with a duration in the trace"
