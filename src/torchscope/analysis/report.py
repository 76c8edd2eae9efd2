"""``build_report``: every analysis of a trace (or a folder of ranks) as one typed report.

This is the one contract of torchscope's outputs: ``torchscope report --json`` prints it, the
terminal summary and the HTML dashboard render it and compute nothing of their own. The
types are in ``analysis.report_model`` (msgspec Structs, units in the field names and in the
report's ``units`` map); the keys in ``analysis.keys``; both are documented in docs/analyses.md.
Tables are the analyses' DataFrames with nanosecond columns turned into exact microseconds
(``*_ns`` -> ``*_us``), capped at ``top`` rows.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import msgspec
import numpy as np
import polars as pl

from torchscope.analysis import keys as K
from torchscope.analysis import report_model as M
from torchscope.analysis.advisor import Context, advise
from torchscope.analysis.distributed import distributed, ranks_of
from torchscope.analysis.frames import kinds
from torchscope.analysis.kernels import (
    comm_comp_overlap,
    idle_time,
    kernel_stats,
    kernel_type_breakdown,
    queue_length,
    temporal_breakdown,
)
from torchscope.analysis.memory import allocations_by_op, leak_candidates, memory_peaks
from torchscope.analysis.modules import module_ops, module_tree
from torchscope.analysis.operators import call_stacks, flops, kernels_by_op, operators
from torchscope.analysis.overview import BREAKDOWN_CATEGORIES, HOST_CATEGORIES, Overview, exit_step, overview
from torchscope.trace.dialect import CUT_BY, CYCLE_ENDED_BY_KEY
from torchscope.trace.model import Trace, TraceSet

TOP = 200  # rows per table: the page shows exactly these rows, the terminal the first few
COMM_COLUMNS = ("computation_ns", "communication_ns", "overlap_ns", "other_ns")


def records(df: pl.DataFrame, top: int | None = None) -> list[dict[str, Any]]:
    """Rows as dicts, ``*_ns`` columns converted to ``*_us`` (exactly, ``us_of``), NaN as null.

    For the free-form tables (collectives, the diff); the report's own tables are typed rows.
    """
    if top is not None:
        df = df.head(top)
    return M.records_of(df)


def _recorded(trace: Trace, setting: str, found: bool) -> bool:
    """Whether the profiler recorded with ``setting`` on: its own word when the trace carries
    it, else whether the trace holds what the setting records (``found``)."""
    said = trace.meta.profiler_settings.get(setting)
    if said is None:
        return found
    return str(said).strip().lower() in ("1", "true")


def _exit_notes(trace: Trace, ov: Overview) -> tuple[list[str], bool, bool]:
    """What the report says of the profile's exit (``overview.ends_in_exit``, ``exit_step``),
    as a job's cycle line does: a left-out exit step, or a trace that is nothing but the exit
    (then the first flag: it has no step of the run to advise on), or whose one step the
    script's error cut (then the second: that step ran, and keeps its findings, but its time
    is not a whole step's)."""
    cut_by = CUT_BY.get(str(trace.meta.extra.get(CYCLE_ENDED_BY_KEY)))
    if ov.exit_step_left_out:
        return [
            "its last step is left out of the steps: "
            + (f"{cut_by} cut it" if cut_by else "it is the profile's exit (from the last step() to the end)")
        ], False, False
    if not exit_step(trace, ov.steps, ov.steps_from_trace, last=True):
        return [], False, False
    if cut_by:
        if not ov.steps_from_trace:  # a script without steps: the recording is what was cut
            return [f"{cut_by} cut its recording: it holds the run up to the cut, not all of it"], False, True
        return [f"its one step was cut by {cut_by}: its time is not a whole step's"], False, True
    return [
        "this trace is only the profile's exit (from the last step() to the end of the profile):"
        " no step of the run, so no recommendations"
    ], True, False


def _meta(
    trace: Trace, ov: Overview, notes: list[str] | None = None, only_exit: bool = False, only_cut_step: bool = False
) -> M.Meta:
    ev = trace.events
    m = trace.meta
    # Kineto's own markers ("Iteration Start", "Record Window End": instants without a
    # category) are left out of the span: the window's end is stamped at stop(), long after the
    # last op when the script did other work first (1.444 s shown for 80 steps ending at 0.947 s)
    timed = ~((pl.col("kind") == "instant") & (pl.col("cat").is_null() | (pl.col("cat") == "")))
    lo, hi = ev.select(
        pl.col("start_ns").filter(timed).min().alias("lo"),
        (pl.col("start_ns") + pl.col("dur_ns")).filter(timed).max().alias("hi"),
    ).row(0)
    lo, hi = (int(lo), int(hi)) if lo is not None else (0, 0)
    kinds = {str(k): int(n) for k, n in ev.group_by("kind").len().sort("kind").iter_rows()}
    return M.Meta(
        rank=m.rank,
        world_size=m.world_size,
        backend=m.backend,
        torch_version=m.torch_version,
        devices=[p.get("name") for p in m.device_properties],
        device_ids=sorted(int(d) for d in ev["device"].filter(ev["device"] >= 0).unique().to_list()),
        warnings=list(m.warnings),
        notes=notes or [],
        only_exit=only_exit,
        only_cut_step=only_cut_step,
        steps_from_trace=ov.steps_from_trace,
        record_shapes=_recorded(trace, "record_shapes", bool(ev["input_dims"].is_not_null().any())),
        with_stack=_recorded(trace, "with_stack", "python_function" in kinds),
        events=ev.height,
        event_kinds=kinds,
        memory_events=trace.memory.height,
        start_us=M.us_of(lo),  # type: ignore[arg-type]
        end_us=M.us_of(hi),  # type: ignore[arg-type]
        span_us=M.us_of(hi - lo),  # type: ignore[arg-type]
    )


def _steps(ov: Overview) -> list[M.Step]:
    """The report's step rows: one per step, or ``M.MAX_STEP_ROWS`` runs of consecutive steps
    with their means, built as columns (one dict per step took 50 µs)."""
    max_rows = M.MAX_STEP_ROWS
    steps = ov.steps.select("step", "start_ns", "end_ns", "dur_ns", *BREAKDOWN_CATEGORIES)
    host = ov.host_steps.select(pl.col(c).alias(f"host {c}") for c in HOST_CATEGORIES)
    frame = pl.concat([steps, host], how="horizontal")
    if "step" in ov.comm_overlap:
        frame = frame.join(ov.comm_overlap.select("step", *COMM_COLUMNS), on="step", how="left", maintain_order="left")
    else:
        frame = frame.with_columns(pl.lit(None, pl.Int64).alias(c) for c in COMM_COLUMNS)
    n = frame.height
    bucket = np.arange(n, dtype=np.int64) if n <= max_rows else np.arange(n, dtype=np.int64) * max_rows // n
    means = [*BREAKDOWN_CATEGORIES, *(f"host {c}" for c in HOST_CATEGORIES), *COMM_COLUMNS]
    rows = (
        frame.with_columns(pl.col(COMM_COLUMNS).fill_null(0), pl.Series("bucket", bucket))
        .group_by("bucket", maintain_order=True)
        .agg(
            pl.col("step").first(),
            pl.col("step").last().alias("last_step"),
            pl.len().alias("steps"),
            pl.col("start_ns").first(),
            pl.col("end_ns").last(),
            pl.col("dur_ns").mean() if n > max_rows else pl.col("dur_ns").first(),
            *(pl.col(c).mean() if n > max_rows else pl.col(c).first() for c in means),
        )
    )
    return [
        M.Step(
            step=int(r["step"]),
            last_step=int(r["last_step"]),
            steps=int(r["steps"]),
            start_us=M.us_of(r["start_ns"]),  # type: ignore[arg-type]
            end_us=M.us_of(r["end_ns"]),  # type: ignore[arg-type]
            dur_us=M.us_of(r["dur_ns"]),  # type: ignore[arg-type]
            breakdown_us=M.us_map({k: r[k] for k in BREAKDOWN_CATEGORIES}),
            host_breakdown_us=M.us_map({k: r[f"host {k}"] for k in HOST_CATEGORIES}),
            comm_overlap_us={k[:-3] + "_us": M.us_of(r[k]) for k in COMM_COLUMNS},  # type: ignore[misc]
        )
        for r in rows.iter_rows(named=True)
    ]


def step_count(report: M.TraceReport) -> int:
    """How many steps ``report`` covers (its rows may each stand for several)."""
    return sum(s.steps for s in report.steps)


def _kernels(trace: Trace, top: int) -> list[M.Kernel]:
    """Kernels, each with its share of all kernel time."""
    ks = kernel_stats(trace)
    total = float(ks["total_ns"].sum()) if ks.height else 0.0
    return M.Kernel.from_frame(
        ks.with_columns((100.0 * pl.col("total_ns") / (total or 1.0)).alias("share_pct")), top
    )


LAUNCHERS_PER_KERNEL = 8  # kernel_launchers: the top launching ops of each kernel, then one OTHER_OPS row


def _kernel_launchers(trace: Trace, kernels: list[M.Kernel]) -> list[M.KernelLauncher]:
    """For every kernel row the report keeps, the ops that launched it themselves (innermost),
    all of them: the top ``LAUNCHERS_PER_KERNEL`` by time, then the rest (two or more) as one OTHER_OPS row,
    and launches no host op encloses as NO_OP, so each kernel's rows add up to its row exactly."""
    if not kernels:
        return []
    order = pl.DataFrame({"name": [k.name for k in kernels]}).with_row_index("row")
    by = (
        kernel_stats(trace, by_op=True)
        .select("name", pl.col("op_name").fill_null(M.NO_OP), "count", "total_ns")
        .join(order, on="name", how="inner")
        .sort(["row", "total_ns", "op_name"], descending=[False, True, False])
        .with_columns(
            pl.int_range(pl.len(), dtype=pl.Int64).over("row").alias("rank"),
            pl.len().over("row").alias("n"),
            pl.lit(1).alias("ops"),
        )
    )
    # one launcher past the cut is shown as itself: "(other ops)" stands for two or more
    folded = (pl.col("rank") >= LAUNCHERS_PER_KERNEL) & (pl.col("n") > LAUNCHERS_PER_KERNEL + 1)
    top = by.filter(~folded)
    rest = (
        by.filter(folded)
        .group_by("row", "name")
        .agg(
            pl.lit(M.OTHER_OPS).alias("op_name"),
            pl.col("count").sum(),
            pl.col("total_ns").sum(),
            pl.lit(LAUNCHERS_PER_KERNEL, pl.Int64).alias("rank"),
            pl.len().alias("ops"),
        )
    )
    cols = ["row", "name", "op_name", "count", "total_ns", "rank", "ops"]
    rows = pl.concat([top.select(cols), rest.select(cols)], how="vertical_relaxed").sort("row", "rank")
    return M.KernelLauncher.from_frame(rows.select("name", "op_name", "count", "total_ns", "ops"))


KERNELS_PER_OP = 8  # kernels_by_op: the top kernels of each op row, then one OTHER_KERNELS row


SHAPES_PER_OP = 8  # operators_by_shape: the top input shapes of each kept op, then one OTHER_SHAPES row


def _shape_rows(ops: pl.DataFrame, by_shape: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The input-shape rows of every op row the report keeps (``ops``): each op's top
    ``SHAPES_PER_OP`` shapes (by device, then host time), then the rest (two or more) as one OTHER_SHAPES row,
    so an op's shape rows always add up to its calls and times. Also the map from each
    (name, input_dims) of the trace to the row it counts in (``shape``), for the chain below."""
    order = ops.select("name").with_row_index("op")
    ranked = (
        by_shape.join(order, on="name", how="inner")
        .with_row_index("pos")
        .with_columns(pl.int_range(pl.len(), dtype=pl.Int64).over("op", order_by="pos").alias("rank"))
    )
    # one shape past the cut is shown as itself: "(other shapes)" stands for two or more
    other = (pl.col("rank") >= SHAPES_PER_OP) & (pl.len().over("op") > SHAPES_PER_OP + 1)
    mapping = ranked.select(
        "name",
        "input_dims",
        pl.when(other).then(pl.lit(M.OTHER_SHAPES)).otherwise(pl.col("input_dims")).alias("shape"),
        "op",
        pl.when(other).then(SHAPES_PER_OP).otherwise(pl.col("rank")).alias("rank"),
    )
    rows = (
        ranked.with_columns(
            pl.when(other).then(pl.lit(M.OTHER_SHAPES)).otherwise(pl.col("input_dims")).alias("input_dims"),
            pl.when(other).then(SHAPES_PER_OP).otherwise(pl.col("rank")).alias("rank"),
        )
        .group_by("op", "rank", "name", "input_dims")
        .agg(
            pl.col("kind").first(),
            pl.col("calls").sum(),
            pl.col("host_self_ns").sum(),
            pl.col("host_total_ns").sum(),
            pl.col("host_max_ns").max(),
            pl.col("device_self_ns").sum(),
            pl.col("device_total_ns").sum(),
            pl.col("tensor_core_eligible").first(),
            pl.len().alias("shapes"),
        )
        .with_columns((pl.col("host_total_ns") / pl.col("calls")).alias("host_avg_ns"))
        .sort("op", "rank")
    )
    return rows, mapping


def _remap(df: pl.DataFrame, mapping: pl.DataFrame) -> pl.DataFrame:
    """``df``'s rows of the kept ops, their input shape replaced by the shape row they count in."""
    return (
        df.join(mapping, on=["name", "input_dims"], how="inner", nulls_equal=True)
        .drop("input_dims")
        .rename({"shape": "input_dims"})
        .with_columns((pl.col("op") * (SHAPES_PER_OP + 1) + pl.col("rank")).alias("row"))
    )


def _kernel_sums() -> list[pl.Expr]:
    """kernels_by_op's measures, summed over the rows folded into one (shapes, or kernels)."""
    return [
        pl.col("count").sum(),
        pl.col("total_ns").sum(),
        pl.col("min_ns").min(),
        pl.col("max_ns").max(),
        pl.col("self_count").sum(),
        pl.col("self_total_ns").sum(),
    ]


def _op_chain(
    trace: Trace, shapes: pl.DataFrame, mapping: pl.DataFrame
) -> tuple[list[M.KernelByOp], list[M.CallStack]]:
    """The drill-down below the shape rows the report keeps (``shapes``; ``mapping`` from
    ``_shape_rows``): the device work each launched, its top ``KERNELS_PER_OP`` kernels plus
    the rest as one row, so the rows of a shape row always add up to its device total (an
    OTHER_SHAPES row's too: its kernels are those of the shapes it stands for); and its Python
    call stacks, the top few."""
    keys = ["name", "input_dims"]
    k = _remap(kernels_by_op(trace), mapping).group_by("row", *keys, "kernel").agg(*_kernel_sums())
    k = k.sort(["row", "total_ns", "kernel"], descending=[False, True, False]).with_columns(
        pl.int_range(pl.len(), dtype=pl.Int64).over("row").alias("rank")
    )
    rest = (
        k.filter(pl.col("rank") >= KERNELS_PER_OP)
        .group_by("row", *keys)
        .agg(
            pl.lit(M.OTHER_KERNELS).alias("kernel"),
            *_kernel_sums(),
            pl.lit(KERNELS_PER_OP, pl.Int64).alias("rank"),
        )
    )
    device = shapes.select(*keys, "device_total_ns")
    chain = (
        pl.concat([k.filter(pl.col("rank") < KERNELS_PER_OP), rest.select(k.columns)])
        .join(device, on=keys, how="left", nulls_equal=True)
        .sort("row", "rank")
        .select(
            pl.col("name").alias("op_name"),
            "input_dims",
            pl.col("kernel").alias("name"),
            "count",
            "total_ns",
            (pl.col("total_ns") / pl.col("count")).alias("mean_ns"),
            "min_ns",
            "max_ns",
            "self_count",
            "self_total_ns",
            (100.0 * pl.col("total_ns") / pl.col("device_total_ns")).alias("op_share_pct"),
        )
    )
    stacks = (
        _remap(call_stacks(trace), mapping)
        .group_by("row", *keys, "stack")
        .agg(pl.col("calls").sum(), pl.col("host_total_ns").sum(), pl.col("host_self_ns").sum())
        .sort(["row", "host_total_ns", "stack"], descending=[False, True, False])
        .with_columns(pl.int_range(pl.len(), dtype=pl.Int64).over("row").alias("rank"))
        .filter(pl.col("rank") < STACKS_PER_OP)
        .sort("row", "rank")
        .select(*keys, "stack", "calls", "host_total_ns", "host_self_ns")
    )
    return M.KernelByOp.from_frame(chain), M.CallStack.from_frame(stacks)


STACKS_PER_OP = 5  # call_stacks: the top stacks (by host time) of each op row the report keeps


def _sections_aside(trace: Trace) -> dict[str, Future[Any]]:
    """The report's sections that no other section reads, started on a thread of their own.

    Polars releases the GIL while a query runs, so these overlap the overview and the advisor
    that the calling thread computes meanwhile: -37 ms median on the report of
    ``nccl_rank1_of_2_profile_memory.json.gz`` (0.634 -> 0.597 s, 2 cores). Analyses are pure
    functions of the immutable Trace; a cached intermediate both threads ask for at once
    (``frames.memo``) may be computed twice, with the same value either way.
    """
    kinds(trace)  # the partition by kind every analysis starts from, made once, before the split
    pool = ThreadPoolExecutor(1, thread_name_prefix="torchscope-report")
    aside: dict[str, Future[Any]] = {
        "memory_peaks": pool.submit(memory_peaks, trace),
        "allocations_by_op": pool.submit(allocations_by_op, trace),
        "leaks": pool.submit(leak_candidates, trace),
        "module_tree": pool.submit(module_tree, trace),
        "module_ops": pool.submit(module_ops, trace),
        "idle_time": pool.submit(idle_time, trace),
        "queue_length": pool.submit(queue_length, trace),
        "kernel_types": pool.submit(kernel_type_breakdown, trace, include_memory=True),
        "comm_comp_overlap": pool.submit(comm_comp_overlap, trace),
    }
    pool.shutdown(wait=False)  # the thread ends when the last section is done
    return aside


def report_model(trace: Trace, top: int = TOP) -> M.TraceReport:
    """The typed report of one trace."""
    aside = _sections_aside(trace)
    ctx = Context(trace)
    ov = ctx.overview
    tb = temporal_breakdown(trace)
    ls = ctx.launch
    n = max(ov.comm_overlap.height, 1)
    kernels = _kernels(trace, top)
    ops = ctx.operators.head(top)
    shapes, mapping = _shape_rows(ops, operators(trace, by_input_shape=True))
    kernels_by_op, stacks = _op_chain(trace, shapes, mapping)
    exit_notes, only_the_exit, only_a_cut_step = _exit_notes(trace, ov)
    recs = [] if only_the_exit else [M.Finding(**f.to_dict()) for f in advise(trace, ctx=ctx)]
    temporal = {
        "idle_us": M.us_of(tb.idle_ns),
        "compute_us": M.us_of(tb.compute_ns),
        "non_compute_us": M.us_of(tb.non_compute_ns),
        "span_us": M.us_of(tb.span_ns),
        **{k + "_pct": v for k, v in tb.pct().items()},
    }
    comm = {c[:-3] + "_us": M.us_of(float(ov.comm_overlap[c].sum()) / n) for c in COMM_COLUMNS}
    launch = {
        "launched": ls.launched,
        "short_kernels": ls.short_kernels,
        "short_kernel_us": M.us_of(ls.short_kernel_ns),
        "runtime_outliers": ls.runtime_outliers,
        "launch_delay_outliers": ls.launch_delay_outliers,
        "median_launch_delay_us": M.us_of(ls.median_launch_delay_ns),
        "p95_launch_delay_us": M.us_of(ls.p95_launch_delay_ns),
        "negative_launch_delays": ls.negative_launch_delays,
        "clock_skewed_launches": ls.clock_skewed,
        "synchronous_launches": ls.synchronous_launches,
        "graph_launched": ls.graph_launched,
    }
    return M.TraceReport(
        report_version=K.REPORT_VERSION,
        kind="trace",
        source=trace.meta.source,
        meta=_meta(trace, ov, exit_notes, only_the_exit, only_a_cut_step),
        steps=_steps(ov),
        breakdown_us=M.us_map(ov.breakdown_ns),
        host_breakdown_us=M.us_map(ov.host_breakdown_ns),
        devices=[
            M.Device(
                device=d.device,
                kernel_us=M.us_of(d.kernel_ns),  # type: ignore[arg-type]
                utilization=d.utilization,
                sm_efficiency=d.sm_efficiency,
                achieved_occupancy=d.achieved_occupancy,
                tensor_core_ratio=d.tensor_core_ratio,
            )
            for d in ov.devices
        ],
        comm_overlap=comm,  # type: ignore[arg-type]
        operators=M.Operator.from_frame(ops),
        operators_by_shape=M.OperatorByShape.from_frame(shapes.drop("op", "rank")),
        call_stacks=stacks,
        flops=M.Flops.from_frame(flops(trace), top),
        kernels=kernels,
        kernel_launchers=_kernel_launchers(trace, kernels),
        kernels_by_op=kernels_by_op,
        kernel_types=M.KernelType.from_frame(aside["kernel_types"].result()),
        temporal_breakdown=temporal,  # type: ignore[arg-type]
        comm_comp_overlap=aside["comm_comp_overlap"].result(),
        launch_stats=launch,
        idle_time=M.IdleTime.from_frame(aside["idle_time"].result()),
        queue_length=M.QueueLength.from_frame(aside["queue_length"].result()),
        memory=M.Memory(
            peaks=M.MemoryPeak.from_frame(aside["memory_peaks"].result()),
            by_op=M.MemoryByOp.from_frame(aside["allocations_by_op"].result(), top),
            leaks=M.Leak.from_frame(aside["leaks"].result(), top),
        ),
        modules=M.Module.from_frame(aside["module_tree"].result(), top * 5),
        module_ops=M.ModuleOp.from_frame(aside["module_ops"].result(), top * 10),
        recommendations=recs,
        units=M.units_of(launch, temporal, comm, *(f.evidence for f in recs)),
    )


def _rank_rows(ts: TraceSet, ranks: pl.DataFrame, slowest: int | None) -> list[M.RankRow]:
    names = {rank: name for name, rank in ranks_of(ts).items()}
    rows = list(ranks.iter_rows(named=True)) if ranks.height else []
    fastest = min((r["step_ns"] for r in rows), default=0.0)
    return [
        M.RankRow(
            rank=int(r["rank"]),
            name=names.get(int(r["rank"]), str(r["rank"])),
            steps=int(r["steps"]),
            step_us=M.us_of(r["step_ns"]),  # type: ignore[arg-type]
            breakdown_us=M.us_map({c: r[c] for c in BREAKDOWN_CATEGORIES}),
            computation_us=M.us_of(r["computation_ns"]),  # type: ignore[arg-type]
            communication_us=M.us_of(r["communication_ns"]),  # type: ignore[arg-type]
            overlap_us=M.us_of(r["overlap_ns"]),  # type: ignore[arg-type]
            other_us=M.us_of(r["other_ns"]),  # type: ignore[arg-type]
            vs_fastest_pct=100.0 * (r["step_ns"] / fastest - 1.0) if fastest else None,
            straggler=slowest is not None and int(r["rank"]) == slowest,
        )
        for r in rows
    ]


def _cycle_findings(ranks: dict[str, M.TraceReport]) -> list[M.Finding]:
    """One process's cycles: each rule once (the same finding in every cycle, each labelled
    "rank 0", read as several ranks). The kept one is the cycle's whose evidence measured the
    largest ``share``; for a rule whose evidence has none, the first cycle's."""
    best: dict[str, M.Finding] = {}
    for r in ranks.values():
        for rec in r.recommendations:
            kept = best.get(rec.rule)
            if kept is None or float(rec.evidence.get("share") or 0) > float(kept.evidence.get("share") or 0):
                best[rec.rule] = rec
    return list(best.values())


def report_set_model(ts: TraceSet, top: int = TOP) -> M.TraceSetReport:
    """The typed report of several ranks: each rank's report, the distributed view, averages.

    For one process's cycles (``ts.members == "cycles"``) there are no ranks to compare: no
    distributed view or straggler, averages weighted by each cycle's steps, each finding once.
    Nor with one member: a run directory of one cycle printed a "ranks" table whose one rank
    was the cycle's file (``traces/step_4``)."""
    ranks = {name: report_model(tr, top) for name, tr in ts.items()}
    cycles = ts.members == "cycles"
    dist = distributed(TraceSet({}) if cycles or len(ranks) < 2 else ts)
    weight = {name: (max(step_count(r), 1) if cycles else 1) for name, r in ranks.items()}
    # a cycle with no whole step (its one step cut by the memory cap or an error, or only the
    # profile's exit) is no step of the run while other cycles have whole ones: a run whose cap
    # cut step 0 counted that 405 ms fragment as one of 11 steps, where its summary, and
    # ``torchscope report`` of its directory, said 10
    partial = {name for name, r in ranks.items() if r.meta.only_cut_step or r.meta.only_exit}
    if cycles and partial and len(partial) < len(ranks):
        weight = {name: (0 if name in partial else w) for name, w in weight.items()}
    n = max(sum(weight.values()), 1)
    # from each member's unrounded means (its report's are rounded to the ns: averaged again,
    # a run's mean step was 1 ns off the same steps' mean in ``diff --json`` and a job's report)
    views = {name: overview(tr) for name, tr in ts.items()}
    avg = {
        c: sum(float(views[k].breakdown_ns[c]) * weight[k] for k in ranks) / n / 1e3
        for c in (*BREAKDOWN_CATEGORIES, "Total")
    }
    havg = {
        c: sum(float(views[k].host_breakdown_ns[c]) * weight[k] for k in ranks) / n / 1e3
        for c in (*HOST_CATEGORIES, "Total")
    }
    rank_numbers = ranks_of(ts)
    recs = (
        _cycle_findings({name: r for name, r in ranks.items() if weight[name]})
        if cycles
        else [
            msgspec.structs.replace(rec, rank=rank_numbers[name])
            for name, r in ranks.items()
            for rec in r.recommendations
        ]
    )
    collectives = records(dist.collectives)
    wait = records(dist.wait_for_slowest)
    return M.TraceSetReport(
        report_version=K.REPORT_VERSION,
        kind="traceset",
        source=ts.source,
        # a process's cycles add up; ranks run side by side (the most steps of any rank)
        steps=sum(step_count(r) for name, r in ranks.items() if weight[name])
        if cycles
        else max((step_count(r) for r in ranks.values()), default=0),
        breakdown_us={k: M.us_of(v * 1e3) for k, v in avg.items()},  # type: ignore[misc]
        host_breakdown_us={k: M.us_of(v * 1e3) for k, v in havg.items()},  # type: ignore[misc]
        distributed=M.DistributedView(
            ranks=_rank_rows(ts, dist.ranks, dist.slowest_rank),
            collectives=collectives,
            slowest_rank=dist.slowest_rank,
            wait_for_slowest=wait,
        ),
        ranks=ranks,
        recommendations=recs,
        warnings=ts.warnings(),  # a member's own (a cut cycle) too, named by its file
        units=M.units_of(*collectives[:1], *wait[:1], *(r.units for r in ranks.values())),
    )


def report_object(trace_or_traceset: Trace | TraceSet, top: int = TOP) -> M.TraceReport | M.TraceSetReport:
    if isinstance(trace_or_traceset, TraceSet):
        return report_set_model(trace_or_traceset, top)
    return report_model(trace_or_traceset, top)


def build_report(trace_or_traceset: Trace | TraceSet, top: int = TOP) -> dict[str, Any]:
    """Everything torchscope knows about a trace or a folder of ranks, as one JSON-ready dict
    (the typed report's encoding: what ``report --json`` prints)."""
    return M.plain(report_object(trace_or_traceset, top))  # type: ignore[no-any-return]


def report_trace(trace: Trace, top: int = TOP) -> dict[str, Any]:
    """The report of one trace, as a dict."""
    return build_report(trace, top)


def report_traceset(ts: TraceSet, top: int = TOP) -> dict[str, Any]:
    """The report of several ranks, as a dict."""
    return build_report(ts, top)
