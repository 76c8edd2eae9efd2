"""Kernels: what ran on the device, who launched it, and why the device sat idle.

The TensorBoard plugin's kernel view (per name, per name + launching op, with blocks per SM,
occupancy and Tensor Core use) plus HTA's device-side analyses: kernel type breakdown
(computation / communication / memory and their overlaps), temporal breakdown, communication
and computation overlap, kernel launch statistics (short kernels, launch delay), idle time
split into host wait, kernel wait and other, and queue length per stream. All vectorized.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import polars as pl

from torchscope.analysis import intervals as iv
from torchscope.analysis import names
from torchscope.analysis.frames import kinds, memo, names_text
from torchscope.trace import dialect
from torchscope.trace.model import Trace

DEVICE_KINDS = ["kernel", "memcpy", "memset"]
# runtime calls that start a whole captured graph of device work
GRAPH_LAUNCHES = ["cudaGraphLaunch", "cudaGraphLaunch_v10000", "cuGraphLaunch", "hipGraphLaunch"]


def _device(trace: Trace) -> pl.DataFrame:
    return kinds(trace, *DEVICE_KINDS)


def device_in_scope(trace: Trace) -> pl.DataFrame:
    """Device events that belong to a step before the last ``ProfilerStep`` (HTA's scope).

    The last profiled step is usually cut short (its kernels are still running when the
    profiler stops), so with two or more steps the device-side breakdowns leave it out, as HTA
    does: an event counts when the call that launched it started before the last step did.
    An event no call launched (an MTIA DMA, a device-side annotation) counts by its own start.
    HTA leaves those out too, which made a two-step MTIA trace's breakdown 100 % computation:
    its memory transfers, 5 % of the device time, had vanished with the last step (docs/analyses.md).
    With fewer steps: all.
    """
    return memo(trace, "device_in_scope", lambda: _device_in_scope(trace))


def _device_in_scope(trace: Trace) -> pl.DataFrame:
    from torchscope.analysis.overview import profiler_steps

    dev = _device(trace)
    steps = profiler_steps(trace)
    if steps.height < 2:
        return dev
    last = int(steps["start_ns"].max())  # type: ignore[arg-type]
    li = dev["launcher"].fill_null(-1).to_numpy().astype(np.int64)
    launched = li >= 0
    started = dev["start_ns"].to_numpy().copy()
    started[launched] = trace.events["start_ns"].to_numpy()[li[launched]]
    return dev.filter(pl.Series(started < last))


def _typed(trace: Trace) -> pl.DataFrame:
    """The in-scope device events with HTA's kernel type in ``ktype`` (computed once)."""
    return memo(
        trace, "typed_device", lambda: device_in_scope(trace).with_columns(names.kernel_type().alias("ktype"))
    )


def kernel_stats(trace: Trace, by_op: bool = False) -> pl.DataFrame:
    """Per kernel name (and launching op): count, total/mean/min/max ns, blocks/SM, occupancy, TC.

    Sorted by total time. ``op`` is the innermost op or annotation that launched the kernel.
    """
    k = kinds(trace, "kernel")
    if by_op:
        names_arr = names_text(trace)
        op_idx = k["op"].fill_null(-1)
        op_name = (
            names_arr.gather(op_idx.clip(0, None)).zip_with(
                op_idx >= 0, pl.Series([None] * k.height, dtype=pl.String)
            )
            if k.height
            else pl.Series([], dtype=pl.String)
        )
        k = k.with_columns(op_name.alias("op_name"))
    keys = ["name", "op_name"] if by_op else ["name"]
    w = pl.col("dur_ns").cast(pl.Float64)
    return (
        k.group_by(keys)
        .agg(
            pl.len().alias("count"),
            pl.col("dur_ns").sum().alias("total_ns"),
            pl.col("dur_ns").mean().alias("mean_ns"),
            pl.col("dur_ns").min().alias("min_ns"),
            pl.col("dur_ns").max().alias("max_ns"),
            (
                (pl.col("blocks_per_sm") * w).sum() / w.filter(pl.col("blocks_per_sm").is_not_null()).sum()
            ).alias("blocks_per_sm"),
            (
                (pl.col("occupancy_pct") * w).sum() / w.filter(pl.col("occupancy_pct").is_not_null()).sum()
            ).alias("occupancy_pct"),
        )
        # by the group's name, so the pattern meets each distinct name once
        .with_columns(pl.col("name").cast(pl.String), names.TENSOR_CORE_KERNEL.alias("tensor_core"))
        .sort(["total_ns", *keys], descending=[True] + [False] * len(keys), nulls_last=True)
    )


def kernel_type_breakdown(trace: Trace, include_memory: bool = False) -> pl.DataFrame:
    """Time by kernel type and by overlap of types (HTA's kernel type breakdown): kernel_type, ns, pct."""
    dev = _typed(trace)
    types = ["COMPUTATION", "COMMUNICATION"] + (["MEMORY"] if include_memory else [])
    spans = {
        t: iv.merge(
            *(lambda d: (d["start_ns"].to_numpy(), (d["start_ns"] + d["dur_ns"]).to_numpy()))(
                dev.filter(pl.col("ktype") == t)
            )
        )
        for t in types
    }
    rows: list[tuple[str, int]] = []
    # each elementary segment gets the set of types running in it
    pts = (
        np.unique(np.concatenate([np.concatenate(s) for s in spans.values()]))
        if spans
        else np.empty(0, np.int64)
    )
    if pts.size >= 2:
        left, seg = pts[:-1], np.diff(pts)
        code = np.zeros(left.size, np.int64)
        for i, t in enumerate(types):
            s, e = spans[t]
            inside = np.searchsorted(s, left, side="right") > np.searchsorted(e, left, side="right")
            code |= inside.astype(np.int64) << i
        sums = np.bincount(code, weights=seg, minlength=1 << len(types))
        for c in range(1, 1 << len(types)):
            if sums[c] > 0:
                label = " overlapping ".join(t for i, t in enumerate(types) if c >> i & 1)
                rows.append((label, int(sums[c])))
    df = pl.DataFrame(rows, schema={"kernel_type": pl.String, "ns": pl.Int64}, orient="row")
    tot = df["ns"].sum() or 1
    return df.with_columns((pl.col("ns") / tot * 100).alias("pct")).sort(
        ["ns", "kernel_type"], descending=[True, False]
    )


@dataclass(frozen=True)
class TemporalBreakdown:
    """HTA's temporal breakdown for one rank (ns): the span from first to last device event."""

    idle_ns: int
    compute_ns: int
    non_compute_ns: int
    span_ns: int

    def pct(self) -> dict[str, float]:
        s = self.span_ns or 1
        return {
            "idle": 100 * self.idle_ns / s,
            "compute": 100 * self.compute_ns / s,
            "non_compute": 100 * self.non_compute_ns / s,
        }


def temporal_breakdown(trace: Trace) -> TemporalBreakdown:
    dev = _typed(trace)
    if dev.height == 0:
        return TemporalBreakdown(0, 0, 0, 0)
    s = dev["start_ns"].to_numpy()
    allm = iv.merge(s, s + dev["dur_ns"].to_numpy())
    span = int(allm[1][-1] - allm[0][0])
    busy = iv.total(allm)
    comp = dev.filter(pl.col("ktype") == "COMPUTATION")
    cs = comp["start_ns"].to_numpy()
    compute = iv.total(iv.merge(cs, cs + comp["dur_ns"].to_numpy()))
    return TemporalBreakdown(
        idle_ns=span - busy, compute_ns=compute, non_compute_ns=busy - compute, span_ns=span
    )


def comm_comp_overlap(trace: Trace) -> float | None:
    """Share of communication kernel time overlapped by computation kernels (HTA's definition)."""
    dev = _typed(trace)

    def spans(t: str) -> iv.Spans:
        d = dev.select("ktype", "start_ns", "dur_ns").filter(pl.col("ktype") == t)
        return iv.merge(d["start_ns"].to_numpy(), (d["start_ns"] + d["dur_ns"]).to_numpy())

    comm = spans("COMMUNICATION")
    if comm[0].size == 0:
        return None
    return iv.total(iv.intersect(comm, spans("COMPUTATION"))) / iv.total(comm)


def _with_launch(trace: Trace) -> pl.DataFrame:
    return memo(trace, "with_launch", lambda: __with_launch(trace))


def __with_launch(trace: Trace) -> pl.DataFrame:
    ev = trace.events
    dev = device_in_scope(trace).filter(pl.col("launcher").fill_null(-1) >= 0)
    li = dev["launcher"].to_numpy().astype(np.int64)
    rs = ev["start_ns"].to_numpy()[li]
    rd = ev["dur_ns"].to_numpy()[li]
    return dev.with_columns(
        pl.Series("runtime_start_ns", rs, dtype=pl.Int64),
        pl.Series("runtime_ns", rd, dtype=pl.Int64),
        ev["name"].gather(li).cast(pl.String).alias("runtime_name"),
    ).with_columns(
        # HTA's definition (device start minus the launch call's end), clamped at 0 as HTA does:
        # a kernel that starts before its launch call returns has waited for nothing
        (pl.col("start_ns") - pl.col("runtime_start_ns") - pl.col("runtime_ns"))
        .clip(0, None)
        .alias("launch_delay_ns"),
        (pl.col("start_ns") - pl.col("runtime_start_ns") - pl.col("runtime_ns") < 0).alias("early_start"),
    )


@dataclass(frozen=True)
class LaunchStats:
    """HTA's kernel launch statistics, summarized (ns)."""

    launched: int  # device events with a known launching runtime call, graph launches aside
    short_kernels: int  # device time shorter than the host time spent launching it
    short_kernel_ns: int
    runtime_outliers: int  # launch calls longer than runtime_cutoff
    launch_delay_outliers: int  # kernels starting more than delay_cutoff after their launch returned
    median_launch_delay_ns: float | None  # of the delays clamped at 0 (see negative_launch_delays)
    p95_launch_delay_ns: float | None
    per_kernel: (
        pl.DataFrame
    )  # the same launches: name, stream, start_ns, dur_ns, runtime_ns, launch_delay_ns (>= 0, as HTA)
    # kernels that start before their launch call returns (a negative raw delay, counted as 0):
    # usual on an idle stream, and what a synchronous submit does
    negative_launch_delays: int = 0
    # kernels that start before their launch call even began: only host/device clock skew does that
    clock_skewed: int = 0
    # kernels that end before their launch call returns: a synchronous submit (MTIA's
    # runFunction waits for the job), whose call time is not launch overhead
    synchronous_launches: int = 0
    # kernels shorter than their launch call, leaving out the synchronous ones
    short_async_kernels: int = 0
    # device events run by a CUDA/HIP graph launch: one call starts many of them, so they have no
    # launch of their own to measure and are left out of the numbers above (HTA leaves them out too)
    graph_launched: int = 0


def launch_stats(
    trace: Trace, runtime_cutoff_ns: int = 50_000, delay_cutoff_ns: int = 100_000
) -> LaunchStats:
    """HTA's launch statistics over the device events launched one call each.

    Work started by a graph launch (``cudaGraphLaunch``) is counted in ``graph_launched`` only:
    its one call starts hundreds of kernels, so comparing each kernel with that call's length
    or end would call graph-captured kernels "shorter than their launch" and delayed, the very
    cure ``launch_bound`` recommends.
    """
    launched = _with_launch(trace)
    graph = launched["runtime_name"].is_in(GRAPH_LAUNCHES)
    d = launched.select(  # the columns read below, before the rows are taken (no wide copy)
        "name", "device", "stream", "start_ns", "dur_ns", "runtime_name", "runtime_start_ns",
        "runtime_ns", "launch_delay_ns", "early_start",
    ).filter(~graph)
    short = d.filter(pl.col("dur_ns") < pl.col("runtime_ns"))
    delay = d["launch_delay_ns"]
    sync = (d["start_ns"] + d["dur_ns"]) <= (d["runtime_start_ns"] + d["runtime_ns"])
    return LaunchStats(
        launched=d.height,
        short_kernels=short.height,
        short_kernel_ns=int(short["dur_ns"].sum()),
        runtime_outliers=int((d["runtime_ns"] > runtime_cutoff_ns).sum()),
        launch_delay_outliers=int((delay > delay_cutoff_ns).sum()),
        median_launch_delay_ns=float(delay.median()) if d.height else None,  # type: ignore[arg-type]
        p95_launch_delay_ns=float(delay.quantile(0.95)) if d.height else None,  # type: ignore[arg-type]
        per_kernel=d.select(
            pl.col("name").cast(pl.String),
            "device",
            "stream",
            "start_ns",
            "dur_ns",
            "runtime_name",
            "runtime_ns",
            "launch_delay_ns",
        ),
        negative_launch_delays=int(d["early_start"].sum()),
        clock_skewed=int((d["start_ns"] < d["runtime_start_ns"]).sum()),
        synchronous_launches=int(sync.sum()),
        short_async_kernels=int(((d["dur_ns"] < d["runtime_ns"]) & ~sync).sum()),
        graph_launched=int(graph.sum()),
    )


def idle_time(trace: Trace, consecutive_kernel_delay_ns: int = 30_000) -> pl.DataFrame:
    """Per device and stream: idle time split into host_wait / kernel_wait / other (HTA's rule).

    A gap before a kernel is host wait when the kernel's launch began after the previous
    kernel on the stream ended; otherwise kernel wait when shorter than the delay; else other.
    A kernel that starts before the previous one on its stream ends (overlapping records, as on
    MTIA, or clock skew) leaves no gap: it counts 0, never a negative wait. Computed once per
    trace and delay (the report and the launch_bound rule both ask).
    """
    return memo(
        trace,
        f"idle_time/{consecutive_kernel_delay_ns}",
        lambda: _idle_time(trace, consecutive_kernel_delay_ns),
    )


def _idle_time(trace: Trace, consecutive_kernel_delay_ns: int) -> pl.DataFrame:
    d = _classified_gaps(trace, consecutive_kernel_delay_ns)
    out = (
        d.group_by("device", "stream")
        .agg(
            pl.col("gap").filter(pl.col("category") == "host_wait").sum().alias("host_wait_ns"),
            pl.col("gap").filter(pl.col("category") == "kernel_wait").sum().alias("kernel_wait_ns"),
            pl.col("gap").filter(pl.col("category") == "other").sum().alias("other_ns"),
        )
        .with_columns(
            (pl.col("host_wait_ns") + pl.col("kernel_wait_ns") + pl.col("other_ns")).alias("idle_ns")
        )
        .sort("device", "stream")
    )
    return out


def host_wait_ns(trace: Trace, lo: int, hi: int, consecutive_kernel_delay_ns: int = 30_000) -> dict[int, int]:
    """Per device: how long, inside ``[lo, hi)``, the whole device sat idle waiting on the host.

    ``idle_time`` is per stream, and summing it over streams counts the same instant once per
    stream (a rank's compute and NCCL streams both wait while the host is busy), which gave
    shares above 100 %. This is a union over time: an instant counts when some stream is in a
    host-wait gap and no kernel runs on any stream of the device, so it can never exceed the
    device's idle time (1 - utilization, over the same window).
    """
    d = _classified_gaps(trace, consecutive_kernel_delay_ns).filter(pl.col("category") == "host_wait")
    busy_all = device_in_scope(trace)
    window = (np.array([lo], np.int64), np.array([hi], np.int64))
    out: dict[int, int] = {}
    for dev in sorted(d["device"].unique().to_list()):
        g = d.filter(pl.col("device") == dev)
        gaps = iv.merge(g["prev_end"].to_numpy(), g["start_ns"].to_numpy())
        k = busy_all.filter(pl.col("device") == dev)
        ks = k["start_ns"].to_numpy()
        busy = iv.merge(ks, ks + k["dur_ns"].to_numpy())
        out[int(dev)] = iv.total(iv.intersect(iv.subtract(gaps, busy), window))
    return out


def _classified_gaps(trace: Trace, consecutive_kernel_delay_ns: int) -> pl.DataFrame:
    """Each gap between kernels, classified (idle time and the host-wait share read the same)."""
    return memo(
        trace,
        f"classified_gaps_{consecutive_kernel_delay_ns}",
        lambda: _classified_gaps_uncached(trace, consecutive_kernel_delay_ns),
    )


def _classified_gaps_uncached(trace: Trace, consecutive_kernel_delay_ns: int) -> pl.DataFrame:
    """Every gap between consecutive device events on a stream, with HTA's idle category."""
    d = device_in_scope(trace).sort("device", "stream", "start_ns")
    ev = trace.events
    li = d["launcher"].fill_null(-1).to_numpy().astype(np.int64)
    rs = np.where(li >= 0, ev["start_ns"].to_numpy()[np.maximum(li, 0)], np.iinfo(np.int64).min)
    d = d.with_columns(pl.Series("runtime_start_ns", rs, dtype=pl.Int64))
    d = d.with_columns(
        (pl.col("start_ns") + pl.col("dur_ns")).shift(1).over("device", "stream").alias("prev_end")
    )
    d = d.filter(pl.col("prev_end").is_not_null()).with_columns(
        (pl.col("start_ns") - pl.col("prev_end")).clip(0, None).alias("gap")
    )
    d = d.with_columns(
        pl.when(pl.col("runtime_start_ns") > pl.col("prev_end"))
        .then(pl.lit("host_wait"))
        .when(pl.col("gap") < consecutive_kernel_delay_ns)
        .then(pl.lit("kernel_wait"))
        .otherwise(pl.lit("other"))
        .alias("category")
    )
    return d


def queue_length(trace: Trace, graph_launches: bool = True) -> pl.DataFrame:
    """Per device and stream: work launched but not yet started (HTA's queue length): max, mean, time-weighted mean.

    Work a graph launch (``cudaGraphLaunch``) submits is queued from that call on, so it counts
    (``graph_launches=False`` leaves it out, as HTA does).
    """
    d = _with_launch(trace)
    if not graph_launches:
        d = d.filter(~pl.col("runtime_name").is_in(GRAPH_LAUNCHES))
    if d.height == 0:
        return pl.DataFrame(
            schema={
                "device": pl.Int32,
                "stream": pl.Int64,
                "max": pl.Int64,
                "mean": pl.Float64,
                "time_weighted_mean": pl.Float64,
            }
        )
    ups = d.select("device", "stream", pl.col("runtime_start_ns").alias("t"), pl.lit(1).alias("delta"))
    downs = d.select("device", "stream", pl.col("start_ns").alias("t"), pl.lit(-1).alias("delta"))
    s = (
        pl.concat([ups, downs])
        # a launch and a start at the same instant: the launch first, as HTA orders them (with
        # microsecond clocks "same instant" is common, and the queue then peaks one higher)
        .sort(["device", "stream", "t", "delta"], descending=[False, False, False, True])
        .with_columns(pl.col("delta").cum_sum().over("device", "stream").alias("q"))
        .with_columns((pl.col("t").shift(-1).over("device", "stream") - pl.col("t")).fill_null(0).alias("dt"))
    )
    return (
        s.group_by("device", "stream")
        .agg(
            pl.col("q").max().alias("max"),
            pl.col("q").mean().alias("mean"),
            ((pl.col("q") * pl.col("dt")).sum() / pl.col("dt").sum()).alias("time_weighted_mean"),
        )
        .sort("device", "stream")
    )


# -- CUPTI range profiler --------------------------------------------------------------------
def profiler_ranges(trace: Trace) -> pl.DataFrame:
    """CUPTI range-profiler counters, one row per range (one profiled kernel), in trace order.

    A trace recorded with the range profiler (``cuda_profiler_range`` events) replays each
    kernel alone to read its performance counters: it has ranges instead of kernel events, and
    their timestamps are the replay's, not the run's. Columns: ``range`` (0..n-1), ``kernel``
    (null where CUPTI gave no name), ``start_ns``, ``dur_ns``, ``op`` (the op whose
    ``cudaLaunchKernel`` made it: the n-th range is the n-th launch, as HTA matches them; null
    when the counts differ), then one Float64 column per counter (``smsp__...sum``...).
    """
    return memo(trace, "profiler_ranges", lambda: _profiler_ranges(trace))


def _profiler_ranges(trace: Trace) -> pl.DataFrame:
    cats = list(dialect.PROFILER_RANGE_CATEGORIES)
    rng = (
        kinds(trace, "other")
        .filter(pl.col("cat").cast(pl.String).str.to_lowercase().is_in(cats))
        .sort("start_ns", maintain_order=True)
    )
    counters = [json.loads(a) if a else {} for a in rng["args"].to_list()]
    names_ = sorted({k for c in counters for k, v in c.items() if isinstance(v, int | float)})
    ev = trace.events
    launches = (
        kinds(trace, "runtime")
        .filter(pl.col("name").cast(pl.String).str.starts_with("cudaLaunchKernel"))
        .sort("start_ns", maintain_order=True)
    )
    op: list[str | None] = [None] * rng.height
    if launches.height == rng.height and rng.height:
        parent = launches["parent"].fill_null(-1).to_list()
        all_names = ev["name"].cast(pl.String)
        op = [str(all_names[int(p)]) if p >= 0 else None for p in parent]
    kernel = rng["name"].cast(pl.String)
    return pl.DataFrame(
        {
            "range": pl.Series(range(rng.height), dtype=pl.Int64),
            "kernel": kernel.replace(dialect.PROFILER_RANGE_UNNAMED, None),
            "start_ns": rng["start_ns"],
            "dur_ns": rng["dur_ns"],
            "op": pl.Series(op, dtype=pl.String),
            **{n: pl.Series([c.get(n) for c in counters], dtype=pl.Float64) for n in names_},
        }
    )


def kernel_counters(trace: Trace) -> pl.DataFrame:
    """Range-profiler counters per kernel name: ``kernel``, ``ranges`` (how many times it was
    profiled), then each counter summed over its ranges; largest first by the first counter
    total. Empty when the trace was not range-profiled."""
    r = profiler_ranges(trace)
    counters = [c for c in r.columns if c not in ("range", "kernel", "start_ns", "dur_ns", "op")]
    if r.height == 0:
        return pl.DataFrame(schema={"kernel": pl.String, "ranges": pl.UInt32})
    out = r.group_by("kernel").agg(pl.len().alias("ranges"), *[pl.col(c).sum() for c in counters])
    total = pl.sum_horizontal(*[pl.col(c) for c in counters]) if counters else pl.lit(0)
    return out.sort([total, pl.col("kernel")], descending=[True, False], nulls_last=True)


def is_range_profiled(trace: Trace) -> bool:
    """Whether the trace carries CUPTI range-profiler ranges (see ``profiler_ranges``)."""
    return profiler_ranges(trace).height > 0
