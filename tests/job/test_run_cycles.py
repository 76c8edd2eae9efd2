"""A ``torchscope run`` folder is one run whatever recorded its cycles: ours (``step_N``), its
setup-only cycle (``run``), or a script's own profiler (``script_profilerK.cycleN``).

A new user's script with its own profiler left ``OUT/traces/run.pt.trace.json`` and
``script_profiler1.cycle1`` .. ``cycle3``: ``report OUT`` read 4 runs (the setup as a 13 ms
step), ``diff`` refused the folder and ``serve`` listed no job. Discovery knew only ``step_N``;
the names now come from one place (``runner.cycle_names``) for the writer and the reader.
"""

from __future__ import annotations

import json
from pathlib import Path

from torchscope.job import analyse_job, discover
from torchscope.runner import cycle_names
from torchscope.runner.launch import LaunchRank

SETUP_US = 13_000  # the setup-only cycle: imports, model, data; no ProfilerStep
STEP_US = 400
ONE_THREAD = {"pid": 1, "tid": 1}


def _cycle(path: Path, steps: list[int], step_us: int = STEP_US) -> None:
    """A Kineto-like trace of ``steps`` (``ProfilerStep#N`` of ``step_us`` each, one op in
    each), or with no steps the setup span ``torchscope run`` writes before the first step."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if not steps:
        spans = [("torchscope#setup", 1000, SETUP_US)]
    else:
        spans = [(f"ProfilerStep#{s}", 1000 + i * step_us, step_us) for i, s in enumerate(steps)]
    events = []
    for name, ts, dur in spans:
        events.append({"ph": "X", "cat": "user_annotation", "name": name, "ts": ts, "dur": dur, **ONE_THREAD})
        events.append(
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": ts + 1, "dur": dur - 2, **ONE_THREAD}
        )
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))


def _script_profiler_run(out: Path) -> None:
    """What ``torchscope run`` leaves when the script's profiler (3 cycles of 2 steps) took over
    before the first optimizer step."""
    _cycle(out / "traces" / "run.pt.trace.json", [])
    for n, steps in ((1, [2, 3]), (2, [6, 7]), (3, [10, 11])):
        _cycle(out / "traces" / f"script_profiler1.cycle{n}.pt.trace.json", steps)


def test_a_scripts_own_profiler_cycles_and_the_setup_are_one_run(tmp_path: Path) -> None:
    out = tmp_path / "prof2"
    _script_profiler_run(out)
    (run,) = discover(out).runs
    assert run.name == "prof2"  # the run's folder, as for step_N files
    assert [f.name for f in run.ranks[0].files] == [
        "run.pt.trace.json",
        "script_profiler1.cycle1.pt.trace.json",
        "script_profiler1.cycle2.pt.trace.json",
        "script_profiler1.cycle3.pt.trace.json",
    ]
    (job,) = analyse_job(out, engine="local:1")["runs"]
    assert (job["ranks"], job["cycles"]) == (1, 4)
    # the setup adds no step: six steps of 400 us, not a seventh of 13 ms
    assert job["steps_ns"]["count"] == 6
    assert (job["steps_ns"]["median"], job["steps_ns"]["max"]) == (STEP_US * 1000, STEP_US * 1000)
    setup = job["cycle_table"][0]
    assert setup["left_out"] and setup["note"] == (
        "torchscope run's setup before the first optimizer step (no step): left out of the run's steps and findings"
    )


def test_the_setup_cycle_is_no_step_beside_cycles_without_steps(tmp_path: Path) -> None:
    """A script's profiler without a schedule writes cycles with no ProfilerStep, each then one
    whole-cycle step; the setup is still none of them (the median was 3 ms of 13, 2 and 3)."""
    out = tmp_path / "out"
    _cycle(out / "traces" / "run.pt.trace.json", [])
    for n, us in ((1, 2_000), (2, 3_000)):
        path = out / "traces" / f"script_profiler1.cycle{n}.pt.trace.json"
        _cycle(path, [0], step_us=us)
        path.write_text(path.read_text().replace("ProfilerStep#0", "my_block"))
    (job,) = analyse_job(out, engine="local:1")["runs"]
    assert job["steps_ns"]["count"] == 2 and job["steps_ns"]["median"] == 2_500_000


def test_cycles_are_in_the_order_written_and_ranks_keep_their_prefix(tmp_path: Path) -> None:
    """Ours by step, then the script's copies (name order put script_profiler1 before step_4);
    with torchrun each rank's files carry ``rank-N.`` and are still one run."""
    for rank in (0, 1):
        prefix = f"{LaunchRank(rank, 2, None).directory}."
        traces = tmp_path / "job" / f"rank-{rank}" / "traces"
        for name in (cycle_names.script_cycle(1, 1), cycle_names.own_cycle(10), cycle_names.own_cycle(4)):
            _cycle(traces / cycle_names.file_name(name, prefix), [4])
    (run,) = discover(tmp_path / "job").runs
    assert run.name == "job" and [rf.rank for rf in run.ranks] == [0, 1]
    assert [f.name for f in run.ranks[1].files] == [
        "rank-1.step_4.pt.trace.json",
        "rank-1.step_10.pt.trace.json",
        "rank-1.script_profiler1.cycle1.pt.trace.json",
    ]


def test_the_names_the_runner_writes_are_the_ones_discovery_reads() -> None:
    prefix = f"{LaunchRank(3, 4, None).directory}."
    for name in (cycle_names.SETUP_CYCLE, cycle_names.own_cycle(7), cycle_names.script_cycle(2, 5)):
        for written in (cycle_names.file_name(name), cycle_names.file_name(name, prefix)):
            assert cycle_names.is_cycle_file(written) and cycle_names.is_cycle_file(written + ".gz")
    assert cycle_names.is_setup_cycle(cycle_names.file_name(cycle_names.SETUP_CYCLE, prefix))
    assert not cycle_names.is_setup_cycle(cycle_names.file_name(cycle_names.own_cycle(7)))
    assert not cycle_names.is_cycle_file("mine.1712345.pt.trace.json")  # tensorboard_trace_handler's
