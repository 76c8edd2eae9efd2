"""QA regressions on real traces: Python-outside-ops advice where no Python runs, and negative
launch delays and waits from host/device clock skew or synchronous submits (MTIA)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from torchscope.analysis.advisor import Context, advise
from torchscope.analysis.advisor.seeds import python_outside_ops
from torchscope.analysis.kernels import idle_time, launch_stats
from torchscope.analysis.overview import overview
from torchscope.analysis.report import build_report
from torchscope.trace.model import Trace

GLOO = "cpu/cpu_only_gloo_rank34.pt.trace.json.gz"
NCCL = "cuda/nccl_rank0_of_2.json.gz"
MTIA = "other_devices/mtia_training_large.json.gz"
TRITON = "cuda/triton_kernel.json.gz"


def test_collective_waits_are_not_python(load_trace: Callable[[str], Trace]) -> None:
    t = load_trace(GLOO)
    assert [f for f in advise(t) if f.rule == "python_outside_ops"] == []
    # even with no thresholds, gloo:all_reduce is never a region, and each region is listed once
    every = python_outside_ops(Context(t), min_share=0.0, min_trace_share=0.0)
    assert [f.evidence["region"] for f in every] == ["ProfilerStep#*"]
    # the step's main thread is covered by the all_reduce work on the gloo threads: 15% is left
    assert every[0].evidence["outside_ops_us"] == pytest.approx(31331.735)
    assert every[0].evidence["share"] == pytest.approx(0.1491, abs=1e-4)


def test_backward_on_the_autograd_thread_is_not_python(load_trace: Callable[[str], Trace]) -> None:
    t = load_trace(NCCL)
    assert [f for f in advise(t) if f.rule == "python_outside_ops"] == []
    every = {f.evidence["region"]: f for f in python_outside_ops(Context(t), 0.0, 0.0)}
    assert len(every) == 5  # one finding per region, not one per thread
    assert every["## backward ##"].evidence["share"] == pytest.approx(0.0944, abs=1e-3)  # was 62%


def test_without_stacks_the_advice_says_what_was_measured(load_trace: Callable[[str], Trace]) -> None:
    f = python_outside_ops(Context(load_trace(NCCL)), 0.0, 0.0)[0]
    assert f.evidence["python_stacks"] is False and f.evidence["python_functions"] == []
    assert "no Python stacks were recorded" in f.message
    assert "with_stack=True" in f.fix and "torchscope run" in f.fix
    assert "argwhere" not in f.fix


@pytest.mark.parametrize("rel", [GLOO, NCCL])
def test_host_breakdown_agrees_with_the_rule(load_trace: Callable[[str], Trace], rel: str) -> None:
    t = load_trace(rel)
    ov = overview(t)
    step = next(
        f for f in python_outside_ops(Context(t), 0.0, 0.0) if f.evidence["region"] == "ProfilerStep#*"
    )
    per_step_avg = ov.host_breakdown_ns["Python outside ops"]
    assert per_step_avg > 0
    assert step.evidence["outside_ops_us"] * 1e3 == pytest.approx(per_step_avg * ov.steps.height)


def test_mtia_launch_delays_and_waits_are_never_negative(load_trace: Callable[[str], Trace]) -> None:
    t = load_trace(MTIA)
    ls = launch_stats(t)
    assert ls.median_launch_delay_ns == 0.0 and ls.p95_launch_delay_ns == 0.0  # were -65.6 / -26.6 us
    assert ls.negative_launch_delays == 3442  # kernels that start inside their runFunction call
    assert ls.clock_skewed == 0
    assert int(ls.per_kernel["launch_delay_ns"].min()) >= 0
    assert idle_time(t)["kernel_wait_ns"].to_list() == [13944688, 12424, 0]  # was -17382704 on stream 1
    rep = build_report(t)
    assert rep["launch_stats"]["median_launch_delay_us"] == 0.0
    assert rep["launch_stats"]["negative_launch_delays"] == 3442
    assert min(r["kernel_wait_us"] for r in rep["idle_time"]) >= 0


def test_mtia_synchronous_submits_are_not_launch_bound(load_trace: Callable[[str], Trace]) -> None:
    t = load_trace(MTIA)
    ls = launch_stats(t)
    # runFunction -> mtia_ccp_events pairs: every kernel is shorter than its call, because 2285
    # of them run inside it (the call waits for the job); only 1168 are short launches
    assert ls.launched == ls.short_kernels == 3453
    assert ls.synchronous_launches == 2285 and ls.short_async_kernels == 1168
    assert "launch_bound" not in {f.rule for f in advise(t)}


def test_triton_launch_delay_is_clamped(load_trace: Callable[[str], Trace]) -> None:
    ls = launch_stats(load_trace(TRITON))
    assert ls.launched == 1 and ls.median_launch_delay_ns == 0.0  # was -2.342 us
    assert ls.negative_launch_delays == 1 and ls.clock_skewed == 0


def test_with_stacks_the_culprits_are_the_users_calls_not_torchs_own() -> None:
    """A step whose time went to a ``json.dumps`` inside the user's ``prep`` named, beside it,
    torch's ``backward`` and a ``randn`` (torch's own code, each a sliver of the time), and its
    fix was about ``np.argwhere`` (a new user's find). The user's calls are named alone, and
    the fix names NumPy only when a culprit is NumPy's."""
    from torchscope.trace.reader import read_chrome_document

    def frame(name: str, ts: int, dur: int) -> dict[str, object]:
        return {"ph": "X", "cat": "python_function", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur}

    events = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#0", "pid": 1, "tid": 1, "ts": 0, "dur": 1_000_000},
        frame("train.py(6): prep", 10, 800_000),
        frame("json/encoder.py(205): iterencode", 20, 790_000),
        frame("torch/_tensor.py(566): backward", 800_100, 60_000),
        frame("<built-in method randn of type object>", 860_200, 40_000),
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 900_300, "dur": 99_000},
    ]
    (f,) = python_outside_ops(Context(read_chrome_document({"traceEvents": events})), 0.0, 0.0)
    assert f.evidence["python_functions"] == ["train.py(6): prep (in json/encoder.py(205): iterencode)"]
    assert "argwhere" not in f.fix and f.fix.startswith("Move that work into torch ops")
