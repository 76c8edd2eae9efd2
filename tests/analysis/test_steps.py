"""Step windows: a step is its host span stretched over the device work it launched, and it
never starts after its own host span ended (issue 15)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import torchscope
from torchscope.analysis.overview import overview, step_windows
from torchscope.trace.model import Trace

SHARED = [
    "cpu/cpu_only_gloo_rank34.pt.trace.json.gz",
    "cuda/alexnet_benchmark.json.gz",
    "cuda/backward_thread_small.json",
    "cuda/cuda_event_sync_multi_stream.json.gz",
    "cuda/diff_control_rank3_of_8.json.gz",
    "cuda/diff_test_rank1_of_2.json.gz",
    "cuda/nccl_rank0_of_2.json.gz",
    "cuda/nccl_rank1_of_2_profile_memory.json.gz",
    "cuda/rank0_ns_resolution.pt.trace.json.gz",
    "cuda/triton_kernel.json.gz",
    "multirank/rank-0.json.gz",
    "multirank/rank-1.json.gz",
    "other_devices/amd_mi250_rocm6.json.gz",
    "other_devices/mtia_inference.json.gz",
    "other_devices/mtia_training_large.json.gz",
    "tensorboard_samples/resnet50_num_workers_0.pt.trace.json.gz",
    "tensorboard_samples/resnet50_num_workers_4.pt.trace.json.gz",
]


def test_the_list_is_every_shared_trace(traces_dir: Path) -> None:
    on_disk = {str(p.relative_to(traces_dir)) for p in traces_dir.rglob("*.json*")}
    assert on_disk == set(SHARED)


@pytest.mark.parametrize("rel", SHARED)
def test_no_step_starts_after_its_host_end(load_trace: Callable[[str], Trace], rel: str) -> None:
    win, _ = step_windows(load_trace(rel))
    assert win.height > 0
    late = win.filter(win["start_ns"] > win["host_end_ns"])
    assert late.height == 0, late


def _kernel(name: str, ts_us: float, dur_us: float, corr: int | None) -> dict[str, Any]:
    args: dict[str, Any] = {"device": 0, "stream": 7}
    if corr is not None:
        args["correlation"] = corr
    return {
        "ph": "X",
        "cat": "kernel",
        "name": name,
        "pid": 0,
        "tid": 7,
        "ts": ts_us,
        "dur": dur_us,
        "args": args,
    }


def _host(name: str, cat: str, ts_us: float, dur_us: float, corr: int | None = None) -> dict[str, Any]:
    ev: dict[str, Any] = {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts_us, "dur": dur_us}
    if corr is not None:
        ev["args"] = {"correlation": corr}
    return ev


def _load(tmp: Path, name: str, events: list[dict[str, Any]]) -> Trace:
    path = tmp / f"{name}.json"
    path.write_text(json.dumps({"traceEvents": events}))
    t = torchscope.load(path)
    assert isinstance(t, Trace)
    return t


def test_unlaunched_device_work_ending_after_the_host_span_does_not_start_the_step(tmp_path: Path) -> None:
    """The issue's case: a 100 ms host step whose only launched kernel runs at 160 ms, and a
    kernel whose launch is not in the file ending at 157 ms, before the step's first kernel.
    The step was reported as 135 us starting 57 ms after its host end."""
    t0 = 1_000_000.0
    host = [
        _host("ProfilerStep#3", "user_annotation", t0, 100_000.0),
        _host("aten::mm", "cpu_op", t0 + 10, 50.0),
        _host("cudaLaunchKernel", "cuda_runtime", t0 + 20, 10.0, corr=41),
    ]
    device = [
        _kernel("unlaunched_kernel", t0 + 150_000, 7_000, None),  # ends at 157 ms
        _kernel("gemm_kernel", t0 + 160_000, 135, 41),
    ]
    t = _load(tmp_path, "late_kernel", host + device)
    win, from_trace = step_windows(t)
    assert from_trace and win.height == 1
    row = win.row(0, named=True)
    assert row["start_ns"] == int(t0 * 1e3)  # the host start, not the unlaunched kernel's end
    assert row["end_ns"] == int((t0 + 160_135) * 1e3)  # stretched to its own kernel's end
    assert overview(t).breakdown_ns["Total"] == pytest.approx(160_135e3)


def test_device_work_before_the_first_step_still_delays_its_start(tmp_path: Path) -> None:
    """The plugin's rule is kept where it applies: work from before the step (no launch in the
    file) that ends inside the host span starts the step when the device is free."""
    t0 = 1_000_000.0
    host = [
        _host("ProfilerStep#0", "user_annotation", t0, 1_000.0),
        _host("cudaLaunchKernel", "cuda_runtime", t0 + 20, 10.0, corr=5),
    ]
    device = [_kernel("previous_step_kernel", t0 - 100, 400, None), _kernel("mine", t0 + 600, 100, 5)]
    t = _load(tmp_path, "early_kernel", host + device)
    row = step_windows(t)[0].row(0, named=True)
    assert row["start_ns"] == int((t0 + 300) * 1e3)
    assert row["end_ns"] == int((t0 + 1_000) * 1e3)



def test_overlapping_step_annotations_without_device_work_do_not_overlap(tmp_path: Path) -> None:
    """Two profilers' steps in one file (annotations 0-100 and 50-150 us, no device work): the
    steps overlapped and the 50 us both held were counted twice; with device work they never did."""
    host = [
        _host("ProfilerStep#1", "user_annotation", 0.0, 100.0),
        _host("ProfilerStep#2", "user_annotation", 50.0, 100.0),
        _host("aten::mm", "cpu_op", 60.0, 5.0),
    ]
    win = step_windows(_load(tmp_path, "overlap", host))[0]
    assert win.select("step", "start_ns", "end_ns").rows() == [(1, 0, 100_000), (2, 100_000, 150_000)]
    ov = overview(_load(tmp_path, "overlap", host))
    assert ov.host_breakdown_ns["Total"] == pytest.approx(75_000)  # 150 us over two steps, once

def test_a_deep_launch_queue_does_not_push_a_step_past_its_host_end(tmp_path: Path) -> None:
    """GPU-bound steps: step 0's kernel (launched at 1 ms) runs 5-30 ms, past step 1's whole
    host span (10-20 ms). Step 1 starts by its host end (20 ms), not at 30 ms; the steps stay
    contiguous, so the breakdown still adds up to the span."""
    host = [
        _host("ProfilerStep#0", "user_annotation", 0.0, 10_000.0),
        _host("cudaLaunchKernel", "cuda_runtime", 1_000.0, 10.0, corr=1),
        _host("ProfilerStep#1", "user_annotation", 10_000.0, 10_000.0),
        _host("cudaLaunchKernel", "cuda_runtime", 11_000.0, 10.0, corr=2),
    ]
    device = [_kernel("long", 5_000.0, 25_000.0, 1), _kernel("next", 30_000.0, 10_000.0, 2)]
    t = _load(tmp_path, "deep_queue", host + device)
    win, _ = step_windows(t)
    assert win["start_ns"].to_list() == [0, 20_000_000]
    assert win["end_ns"].to_list() == [20_000_000, 40_000_000]
    assert (win["start_ns"] <= win["host_end_ns"]).all()


def test_device_work_no_call_launched_stays_in_the_breakdowns_of_a_multi_step_trace() -> None:
    """With two or more steps the device breakdowns leave out the last (cut short), as HTA does;
    HTA also drops every device event no call launched, so a new user's two-step MTIA trace
    showed 100 % computation (its DMA transfers, 5 %, gone). Such an event counts by its own
    start: here the memcpy of steps 1 and 2 stay, the last step's kernel and memcpy do not."""
    from torchscope.analysis.kernels import kernel_type_breakdown
    from torchscope.trace import read_chrome_document

    events: list[dict[str, Any]] = []
    for k in range(3):
        t = 100 * k
        events += [
            {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{k + 1}", "pid": 1, "tid": 1, "ts": t, "dur": 100},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": t + 10, "dur": 5,
             "args": {"correlation": k + 1}},
            {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": t + 20, "dur": 30,
             "args": {"correlation": k + 1, "stream": 7, "device": 0}},
            {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD", "pid": 0, "tid": 7, "ts": t + 60, "dur": 10,
             "args": {"stream": 7, "device": 0}},
        ]
    breakdown = kernel_type_breakdown(read_chrome_document({"traceEvents": events}), include_memory=True)
    assert dict(breakdown.select("kernel_type", "ns").iter_rows()) == {"COMPUTATION": 60_000, "MEMORY": 20_000}


def _many_steps(n: int) -> Trace:
    """``n`` ProfilerSteps, each one op; step k lasts 100 + k % 7 us."""
    events: list[dict[str, Any]] = []
    t = 0
    for k in range(n):
        dur = 100 + k % 7
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{k + 3}", "pid": 1, "tid": 1, "ts": t, "dur": dur})
        events.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": t + 1, "dur": 50})
        t += dur
    from torchscope.trace.reader import read_chrome_document

    return read_chrome_document({"traceEvents": events}, "steps.json")


def test_a_report_of_many_steps_lists_runs_of_consecutive_steps(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """200,000 steps, a row each, took a report 17 s and 1.8 GB for a 49 MB trace, and its page
    was 81 MB. Above MAX_STEP_ROWS the rows are runs of consecutive steps with their means; the
    step count, first and last steps and the average step stay exact."""
    from torchscope.analysis import report_model as M
    from torchscope.analysis.report import report_model
    from torchscope.render.console import print_report

    monkeypatch.setattr(M, "MAX_STEP_ROWS", 100)
    rep = report_model(_many_steps(1050))
    rows = rep.steps
    assert len(rows) == 100 and sum(r.steps for r in rows) == 1050
    assert (rows[0].step, rows[-1].last_step) == (3, 1052)
    assert all(a.last_step + 1 == b.step for a, b in zip(rows, rows[1:], strict=False))
    # each row: the mean of its steps' durations; from the first one's start to the last one's end
    first = rows[0]
    durs = [100 + k % 7 for k in range(first.steps)]
    assert first.dur_us == pytest.approx(sum(durs) / len(durs), abs=1e-3)
    assert first.end_us - first.start_us == sum(durs)
    assert rows[-1].end_us == sum(100 + k % 7 for k in range(1050))
    mean = sum(100 + k % 7 for k in range(1050)) / 1050
    assert sum(r.dur_us * r.steps for r in rows) / 1050 == pytest.approx(mean, abs=1e-3)
    from rich.console import Console

    print_report(M.plain(rep), Console(width=200))
    out = capsys.readouterr().out
    assert "1050 steps" in out and "100 runs of consecutive steps" in out


def test_a_report_of_few_steps_lists_each_step() -> None:
    from torchscope.analysis.report import report_model

    rows = report_model(_many_steps(40)).steps
    assert [(r.step, r.last_step, r.steps) for r in rows] == [(k + 3, k + 3, 1) for k in range(40)]
    assert [r.dur_us for r in rows] == [100 + k % 7 for k in range(40)]
    assert all(r.end_us == r.start_us + r.dur_us for r in rows)


def _stepped(
    last_us: float,
    *,
    inside: str | None = None,
    ops: bool = True,
    ended: str | None = None,
    per_step: int = 1,
    inside_count: int = 1,
    step_us: int = 100_000,
) -> Any:
    """A CPU trace of three ProfilerSteps of 100 ms (the first two running ``per_step`` ops
    each) and a last one of ``last_us``, with ``inside_count`` ops or annotations ``inside``
    it, and our profiler's mark."""
    from torchscope.trace import read_chrome_document

    events: list[dict[str, Any]] = []
    for k, (ts, dur) in enumerate([(0, step_us), (step_us, step_us), (2 * step_us, last_us)]):
        step = {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{k}", "ts": ts, "dur": dur}
        events.append({**step, "pid": 1, "tid": 1})
        for j in range(per_step if k < 2 and ops else 0):
            op = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": ts + 1 + j * step_us // 50, "dur": 1}
            events.append({**op, "pid": 1, "tid": 1})
    for j in range(inside_count if inside is not None else 0):
        events.append({"ph": "X", "cat": inside, "name": "work", "ts": 2 * step_us + 1 + 2 * j, "dur": 1, "pid": 1, "tid": 1})
    doc: dict[str, Any] = {"traceEvents": events, **({"torchscope_cycle_ended_by": ended} if ended else {})}
    return read_chrome_document(doc, "t.json")


@pytest.mark.parametrize(
    ("last_us", "options", "steps"),
    [
        (30, {}, 2),  # torch's exit: no op, tens of µs
        (5_000, {}, 3),  # a real step that only waited 5 ms at the end of a cycle or an epoch
        (30, {"inside": "cpu_op"}, 3),  # an op ran in it, and a working step runs one
        (30, {"inside": "cpu_op", "inside_count": 2, "per_step": 40}, 2),  # a loss.item() after the loop
        (30, {"inside": "cpu_op", "inside_count": 5, "per_step": 40}, 3),  # an eighth of a step's ops
        # fast steps (0.5 ms): a 127 µs loss.item() exit is under half a step, 300 µs is not
        (127, {"inside": "cpu_op", "inside_count": 2, "per_step": 40, "step_us": 500}, 2),
        (300, {"inside": "cpu_op", "inside_count": 2, "per_step": 40, "step_us": 500}, 3),
        (30, {"inside": "user_annotation"}, 3),  # a data wait's record_function
        (30, {"ops": False}, 3),  # no step ran an op: nothing to tell it from
        (30, {"ended": "schedule"}, 3),  # ours says the schedule ended it
        (5_000, {"ended": "stop"}, 2),  # ours says stop() did: its last step is the exit
    ],
)
def test_the_profiles_exit_step_is_left_out_only_when_it_is_one(last_us: float, options: Any, steps: int) -> None:
    """Leaving a scheduled ``with profile`` block mid-cycle makes its last ProfilerStep the
    exit (from the last step() to stop()): it is no step of the run (docs/analyses.md)."""
    ov = overview(_stepped(last_us, **options))
    assert ov.steps.height == steps
    assert ov.exit_step_left_out is (steps == 2)
    assert ov.steps["step"].to_list() == list(range(steps))
