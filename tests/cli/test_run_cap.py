"""The cap ends the cycle it catches, not the run: a first step that keeps a model's worth of
memory alive passed the cap and used to stop all recording, so a real ResNet-18 run of 150 s
kept only its first step; the default schedule's steady-state cycles must still be recorded."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import torchscope
from torchscope.analysis.report import build_report

SCRIPTS = Path(__file__).parent / "scripts"


def test_the_cap_ends_one_cycle_and_the_schedule_records_the_later_ones(tmp_path: Path) -> None:
    out = tmp_path / "run"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "torchscope",
            "run",
            "--out",
            str(out),
            "--cap-mb",
            "32",
            "--no-summary",
            str(SCRIPTS / "big_first_step.py"),
            "45",
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "stepped 45 times, kept 152 MiB" in done.stdout
    facts = json.loads((out / "run.json").read_text())
    assert any(n.startswith("a cycle stopped at the cap") for n in facts["notes"])
    # the cap cut the first step, which holds the script's own memory: the first cycle records
    # again from its end (steps 1-4, measured from the step's peak), and the schedule's sentence
    # counts the whole steps the cycles hold
    said = "recorded 10 of the run's 45 steps (1–4, with step 0 cut by the memory cap; 20–22; 38–40)"
    assert said in facts["notes"][0]
    traces = [Path(p) for p in facts["traces"]]
    assert len(traces) == 4  # the capped first step, then steps 1-4, 20-22 and 38-40
    later = [sorted(torchscope.load(p).steps["step"].to_list()) for p in traces[1:]]
    assert later == [[1, 2, 3, 4], [20, 21, 22], [38, 39, 40]]
    # the capped cycle says the cap cut its step (it was counted as a whole 1.1 s step)
    ended = [json.loads(p.read_text()).get("torchscope_cycle_ended_by") for p in traces]
    assert ended == ["cap", None, None, None]
    capped = build_report(torchscope.load(traces[0]))["meta"]
    assert capped["only_cut_step"] is True
    assert capped["notes"] == ["its one step was cut by the memory cap: its time is not a whole step's"]
    # the run's report counts the whole steps alone, as its summary does (the cut step 0 was
    # one of 11 steps in report.json, and its 1.1 s weighed in the run's mean step)
    report = json.loads((out / "report.json").read_text())["report"]
    assert report["steps"] == 10
    cut = traces[0].name.split(".")[0]
    whole = [s for name, cycle in report["ranks"].items() if name != cut for s in cycle["steps"]]
    mean_us = sum(s["dur_us"] for s in whole) / len(whole)
    assert report["breakdown_us"]["Total"] == pytest.approx(mean_us, rel=1e-6)


def test_a_device_runtime_starting_inside_a_cycle_is_not_the_recordings_memory() -> None:
    """Creating a CUDA context added 253 MB to an H200 run's first cycle, which the cap read as
    the profiler's and stopped the cycle before the first step. The cap now waits (briefly) for a
    starting runtime and measures the cycle again from the moment it has started."""
    import time

    from torchscope.runner import bounds

    rss = [100.0]
    ready = [False]
    stopped: list[float] = []
    session = object()
    cap = bounds.RecordingCap(
        50, lambda: session, stopped.append, interval_s=0.01, runtime_ready=lambda: ready[0]
    )
    original = bounds.rss_mb
    bounds.rss_mb = lambda: rss[0]  # type: ignore[assignment]
    try:
        cap.start()
        time.sleep(0.05)
        rss[0] = 400.0  # the context is being created: far over the cap, runtime not ready yet
        time.sleep(0.1)
        ready[0] = True  # it has started: the cycle is measured from here
        time.sleep(0.1)
        cap.fire_if_due()
        assert stopped == []
        # the first step loads the runtime's libraries and kernels: allowed before it ends
        rss[0] = 400.0 + 2 * 50 + bounds.RUNTIME_FIRST_STEP_MB - 1
        time.sleep(0.1)
        cap.fire_if_due()
        assert stopped == []
        cap.first_step()  # from the first step on, the plain cap, measured from there
        time.sleep(0.05)
        rss[0] += 50 + 1  # now the recording itself grows past the cap
        deadline = time.monotonic() + 2
        while not stopped and time.monotonic() < deadline:
            time.sleep(0.02)
            cap.fire_if_due()
        assert stopped and stopped[0] == pytest.approx(51.0)
    finally:
        cap.stop_watching()
        bounds.rss_mb = original  # type: ignore[assignment]


def test_a_steps_activations_are_the_scripts_memory_not_the_recordings() -> None:
    """A CNN training on the CPU holds ~200 MB of activations in each forward pass and frees them
    in backward: measured from a step's end, every cycle of a new user's 104-step run passed the
    96 MB cap in its first forward pass, and the run kept no whole step. A cycle is measured
    from the peak the step before it reached, and what a warm-up step grows is the script's."""
    import time

    from torchscope.runner import bounds

    rss = [1000.0]
    session: list[object | None] = [None]
    warm = [False]
    stopped: list[float] = []
    cap = bounds.RecordingCap(
        50,
        lambda: session[0],
        stopped.append,
        interval_s=0.01,
        runtime_ready=lambda: None,
        warming=lambda: warm[0],
    )

    def step(activations: float) -> None:
        rss[0] += activations
        time.sleep(0.15)
        rss[0] -= activations
        time.sleep(0.1)
        cap.step_ended()

    def settle() -> None:
        time.sleep(0.1)
        cap.fire_if_due()

    original = bounds.rss_mb
    bounds.rss_mb = lambda: rss[0]  # type: ignore[assignment]
    try:
        cap.start()
        step(200)
        cap.first_step()
        step(200)
        # a cycle with a warm-up step, then three recorded ones: the same activations each step
        session[0], warm[0] = object(), True
        step(200)
        warm[0] = False
        for _ in range(3):
            step(200)
        settle()
        assert stopped == []
        # a cycle that begins straight after a step, measured from that step's peak
        session[0] = object()
        for _ in range(3):
            step(200)
        settle()
        assert stopped == []
        # the recording itself grows past the cap and the steps' jitter (a tenth of the peak,
        # 120 MB): seen at the next step's peak
        rss[0] += 180
        step(200)
        deadline = time.monotonic() + 2
        while not stopped and time.monotonic() < deadline:
            settle()
        assert stopped and stopped[0] == pytest.approx(180.0)
    finally:
        cap.stop_watching()
        bounds.rss_mb = original  # type: ignore[assignment]


def test_a_cycle_begins_with_a_schedule_that_gives_torchs_actions() -> None:
    """After the cap ends a cycle, the run records the schedule's next one when it begins.
    ``--wait/--warmup/--active`` build the schedule with ``torchscope.schedule``, whose actions
    are torch's own enum: compared with ours, no step ever began a cycle."""
    import torch.profiler as tp

    from torchscope.runner.bounds import DefaultSchedule
    from torchscope.runner.session import _StepHook

    class Prof:
        def __init__(self, schedule: object) -> None:
            self.schedule = schedule

    user = torchscope.schedule(wait=2, warmup=1, active=2)
    assert isinstance(user(3), tp.ProfilerAction)
    hook = _StepHook(Prof(user), [], [])
    assert [s for s in range(12) if hook._cycle_begins(s)] == [2, 7]  # each cycle's warm-up step
    hook = _StepHook(Prof(DefaultSchedule()), [], [])  # ours: the same answer
    assert [s for s in range(30) if hook._cycle_begins(s)] == [0, 19]


def test_the_default_schedule_says_what_share_of_the_run_it_recorded() -> None:
    from torchscope.runner.bounds import DefaultSchedule

    assert "recorded 11 of the run's 3,000 steps (0–4, 20–22, 38–40)" in DefaultSchedule().describe(3000)
    # a run that ends inside the second cycle: steps 0-4 and 20-21 were recorded
    assert "recorded 7 of the run's 22 steps (0–4, 20–21)" in DefaultSchedule().describe(22)
    assert "recorded 5 of the run's 8 steps (0–4)," in DefaultSchedule().describe(8)  # no span it never reached
    # a cycle the memory cap ended holds only the steps before the cut, whole
    cut_once = DefaultSchedule().describe(7, cuts=(3,))
    assert "recorded 3 of the run's 7 steps (0–2, with step 3 cut by the memory cap)," in cut_once
    cut_twice = DefaultSchedule().describe(3000, cuts=(4, 21))
    assert "(0–3, with step 4 cut by the memory cap; 20, with step 21" in cut_twice
    # a cut in a cycle's warm-up step leaves that cycle nothing; one resumed holds its steps after
    in_warmup = DefaultSchedule().describe(3000, cuts=(19,))
    assert "recorded 8 of the run's 3,000 steps (0–4; none of 20–22: the memory cap cut step 19; 38–40)" in in_warmup
    resumed = DefaultSchedule().describe(7, cuts=(0,), resumed=(1,))
    assert "recorded 4 of the run's 7 steps (1–4, with step 0 cut by the memory cap)," in resumed


def test_a_step_the_cap_cuts_is_left_out_of_its_cycles_steps(tmp_path: Path) -> None:
    """A new user's 6000-step run hit the default cap at step 7: the cut step (10.7 ms against
    27-32 ms) was one of the cycle's steps and its "shortest". It is left out, and said."""
    out = tmp_path / "run"
    args = ["--cap-mb", "100", "--wait", "0", "--warmup", "1", "--active", "300", "--repeat", "1", "--no-summary"]
    done = subprocess.run(
        [sys.executable, "-m", "torchscope", "run", "--out", str(out), *args, str(SCRIPTS / "growing_steps.py")],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (path,) = (Path(p) for p in json.loads((out / "run.json").read_text())["traces"])
    assert json.loads(path.read_text())["torchscope_cycle_ended_by"] == "cap"
    trace = torchscope.load(path)
    recorded = sorted(trace.steps["step"].to_list())  # as the trace holds them, the cut one too
    report = build_report(trace)
    assert [s["step"] for s in report["steps"]] == recorded[:-1]
    assert report["meta"]["notes"] == ["its last step is left out of the steps: the memory cap cut it"]
    assert min(s["dur_us"] for s in report["steps"]) > 80_000  # each whole step sleeps 80 ms
