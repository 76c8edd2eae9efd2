"""Rules about what the profiled window holds, before any advice about the model applies.

A profile that starts with the program's first CUDA call records the driver creating its
context (hundreds of milliseconds to tens of seconds inside whatever runtime call comes first,
often ``cudaFree`` or ``cudaDeviceGetStreamPriorityRange``), and the first launch of each kernel
loading its module. None of the peers says so: they report the device as idle and the step as
slow, and a user tunes a model whose "slow step" is start-up.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from torchscope.analysis import intervals as iv
from torchscope.analysis import names
from torchscope.analysis.advisor.base import Context, Finding
from torchscope.analysis.frames import kinds, memo

# a single runtime call this long, with the device idle meanwhile, is start-up work; with the
# device busy it is a wait (a sync, or a synchronous submit such as MTIA's runFunction)
STARTUP_CALL_NS = 100_000_000
_WAIT = names.SYNC_OP | names.name_matches(r"Synchronize|Wait|Query")
_BUSY_SHARE = 0.1
# from this share of the window on, start-up is a finding of its own
STARTUP_SHARE = 0.25


def _in_steps(ctx: Context, starts: np.ndarray) -> np.ndarray:
    steps = ctx.overview.steps
    s = steps["start_ns"].to_numpy()
    if s.size == 0:
        return np.zeros(starts.size, bool)
    e = s + steps["dur_ns"].to_numpy()
    at = np.searchsorted(s, starts, side="right") - 1
    return (at >= 0) & (starts < e[np.maximum(at, 0)])


def startup_calls(ctx: Context) -> pl.DataFrame:
    """The runtime calls inside the steps that are start-up work (computed once per trace)."""
    return memo(ctx.trace, "startup_calls", lambda: _startup_calls(ctx))


def _startup_calls(ctx: Context) -> pl.DataFrame:
    from torchscope.analysis.kernels import is_range_profiled

    long_calls = kinds(ctx.trace, "runtime").filter((pl.col("dur_ns") >= STARTUP_CALL_NS) & ~_WAIT)
    if is_range_profiled(ctx.trace):
        # the range profiler replays each kernel inside its launch call: long launches are the
        # replay, not start-up (the trace has no device timeline to tell them apart either)
        long_calls = long_calls.filter(~pl.col("name").cast(pl.String).str.contains("Launch"))
    if long_calls.height == 0:
        return long_calls
    s = long_calls["start_ns"].to_numpy()
    e = s + long_calls["dur_ns"].to_numpy()
    dev = kinds(ctx.trace, "kernel", "memcpy", "memset")
    ds = dev["start_ns"].to_numpy()
    busy = iv.overlap_per_window(iv.merge(ds, ds + dev["dur_ns"].to_numpy()), s, e)
    idle = busy < _BUSY_SHARE * (e - s)
    return long_calls.filter(pl.Series(_in_steps(ctx, s) & idle))


def startup_share(ctx: Context) -> float:
    """The share of the steps (the whole window without steps) that start-up calls take."""
    return float(startup_calls(ctx)["dur_ns"].sum()) / ctx.host_span_ns


def startup_in_window(ctx: Context) -> list[Finding]:
    long_calls = startup_calls(ctx)
    share = startup_share(ctx)
    if share < STARTUP_SHARE:
        return []
    by_name = (
        long_calls.group_by(pl.col("name").cast(pl.String))
        .agg(pl.col("dur_ns").sum())
        .sort(["dur_ns", "name"], descending=[True, False])
    )
    calls = {n: ns / 1e9 for n, ns in by_name.iter_rows()}
    listed = ", ".join(f"{n} {s:.1f} s" for n, s in list(calls.items())[:3])
    return [
        Finding(
            rule="startup_in_window",
            message=f"{share:.0%} of the profiled time is device start-up, not the model: {listed}.",
            fix=(
                "Profile the steady state: run one iteration before profiling, or use "
                "schedule(wait=1, warmup=1, active=3) and call prof.step() each iteration. The "
                "first CUDA call creates the context and each kernel's first launch loads its module."
            ),
            evidence={"share": share, "seconds_by_call": calls, "calls": long_calls.height},
            impact=share,
            share=share,
        )
    ]


def range_profiled(ctx: Context) -> list[Finding]:
    """A CUPTI range-profiler trace: its kernels were replayed one at a time for their counters,
    so it has no kernel timeline and its times are not the run's. Said first, with the counters'
    place, so that "kernel time 0" is not read as an idle device."""
    from torchscope.analysis.kernels import kernel_counters, profiler_ranges

    ranges = profiler_ranges(ctx.trace)
    if ranges.height == 0:
        return []
    per_kernel = kernel_counters(ctx.trace)
    counters = [c for c in per_kernel.columns if c not in ("kernel", "ranges")]
    return [
        Finding(
            rule="range_profiled",
            message=(
                f"This trace was recorded with the CUPTI range profiler: {ranges.height} kernel ranges "
                f"({per_kernel.height} kernels) carry {len(counters)} performance counters, and there is "
                "no kernel timeline (each kernel was replayed alone), so device time and utilization "
                "are not measured here."
            ),
            fix="Read the counters per kernel (analysis.kernels.kernel_counters / profiler_ranges); "
            "profile again without the range profiler (experimental_config profiler_metrics unset) "
            "for kernel times.",
            evidence={
                "ranges": ranges.height,
                "kernels": per_kernel.height,
                "counters": counters,
                "launches_matched": bool(ranges["op"].is_not_null().any()),
            },
            impact=1.0,  # it changes how every other number reads
        )
    ]
