"""``build_report``: every analysis of a trace (or a folder of ranks) as one JSON-ready dict.

This is the object ``torchscope report --json`` prints and the dashboard renders. Keys come
from ``analysis.keys`` (documented in docs/analyses.md); tables become lists of records with
nanosecond columns turned into microseconds (``*_ns`` -> ``*_us``), capped at ``top`` rows.
"""

from __future__ import annotations

import math
from typing import Any

import polars as pl

from torchscope.analysis import keys as K
from torchscope.analysis.advisor import Context, advise
from torchscope.analysis.distributed import distributed, rank_of
from torchscope.analysis.kernels import (
    comm_comp_overlap,
    idle_time,
    kernel_stats,
    kernel_type_breakdown,
    queue_length,
    temporal_breakdown,
)
from torchscope.analysis.memory import allocations_by_op, leak_candidates, memory_peaks
from torchscope.analysis.modules import module_tree
from torchscope.analysis.operators import call_stacks, flops, operators
from torchscope.analysis.overview import BREAKDOWN_CATEGORIES, HOST_CATEGORIES, Overview
from torchscope.trace.model import Trace, TraceSet


def _clean(v: Any) -> Any:
    if isinstance(v, float) and (math.isnan(v) or math.isinf(v)):
        return None
    return v


def records(df: pl.DataFrame, top: int | None = None) -> list[dict[str, Any]]:
    """Rows as dicts, ``*_ns`` columns converted to ``*_us`` (float), NaN as null."""
    if top is not None:
        df = df.head(top)
    exprs = []
    for c, dt in df.schema.items():
        if c.endswith("_ns"):
            exprs.append((pl.col(c).cast(pl.Float64) / 1e3).alias(c[:-3] + "_us"))
        elif isinstance(dt, pl.Categorical | pl.Enum):
            exprs.append(pl.col(c).cast(pl.String))
        else:
            exprs.append(pl.col(c))
    return [{k: _clean(v) for k, v in row.items()} for row in df.select(exprs).iter_rows(named=True)]


def _us(d: dict[str, float]) -> dict[str, float]:
    return {k: v / 1e3 for k, v in d.items()}


def _overview_part(ov: Overview) -> dict[str, Any]:
    steps = [
        {
            "step": int(r["step"]),
            "start_us": r["start_ns"] / 1e3,
            "dur_us": r["dur_ns"] / 1e3,
            K.BREAKDOWN_US: {c: r[c] / 1e3 for c in BREAKDOWN_CATEGORIES},
            K.HOST_BREAKDOWN_US: {c: h[c] / 1e3 for c in HOST_CATEGORIES},
        }
        for r, h in zip(ov.steps.iter_rows(named=True), ov.host_steps.iter_rows(named=True), strict=True)
    ]
    n = max(ov.comm_overlap.height, 1)
    return {
        K.STEPS: steps,
        K.BREAKDOWN_US: _us(ov.breakdown_ns),
        K.HOST_BREAKDOWN_US: _us(ov.host_breakdown_ns),
        K.DEVICES: [
            {
                "device": d.device,
                "kernel_us": d.kernel_ns / 1e3,
                "utilization": d.utilization,
                "sm_efficiency": d.sm_efficiency,
                "achieved_occupancy": d.achieved_occupancy,
                "tensor_core_ratio": d.tensor_core_ratio,
            }
            for d in ov.devices
        ],
        K.COMM_OVERLAP: {
            c[:-3] + "_us": float(ov.comm_overlap[c].sum()) / n / 1e3
            for c in ("computation_ns", "communication_ns", "overlap_ns", "other_ns")
        },
    }


def report_trace(trace: Trace, top: int = 50) -> dict[str, Any]:
    """The report of one trace."""
    ctx = Context(trace)
    ov = ctx.overview
    tb = temporal_breakdown(trace)
    ls = ctx.launch
    meta = trace.meta
    out: dict[str, Any] = {
        K.VERSION: K.REPORT_VERSION,
        K.KIND: "trace",
        K.SOURCE: meta.source,
        K.META: {
            "rank": meta.rank,
            "world_size": meta.world_size,
            "backend": meta.backend,
            "torch_version": meta.torch_version,
            "devices": [p.get("name") for p in meta.device_properties],
            "warnings": list(meta.warnings),
            "steps_from_trace": ov.steps_from_trace,
        },
    }
    out.update(_overview_part(ov))
    out.update(
        {
            K.OPERATORS: records(ctx.operators, top),
            K.OPERATORS_BY_SHAPE: records(operators(trace, by_input_shape=True), top),
            K.CALL_STACKS: records(call_stacks(trace), top),
            K.FLOPS: records(flops(trace), top),
            K.KERNELS: records(kernel_stats(trace), top),
            K.KERNELS_BY_OP: records(kernel_stats(trace, by_op=True), top),
            K.KERNEL_TYPES: records(kernel_type_breakdown(trace, include_memory=True)),
            K.TEMPORAL_BREAKDOWN: {
                "idle_us": tb.idle_ns / 1e3,
                "compute_us": tb.compute_ns / 1e3,
                "non_compute_us": tb.non_compute_ns / 1e3,
                "span_us": tb.span_ns / 1e3,
                **{k + "_pct": v for k, v in tb.pct().items()},
            },
            K.COMM_COMP_OVERLAP: comm_comp_overlap(trace),
            K.LAUNCH_STATS: {
                "launched": ls.launched,
                "short_kernels": ls.short_kernels,
                "short_kernel_us": ls.short_kernel_ns / 1e3,
                "runtime_outliers": ls.runtime_outliers,
                "launch_delay_outliers": ls.launch_delay_outliers,
                "median_launch_delay_us": None
                if ls.median_launch_delay_ns is None
                else ls.median_launch_delay_ns / 1e3,
                "p95_launch_delay_us": None
                if ls.p95_launch_delay_ns is None
                else ls.p95_launch_delay_ns / 1e3,
                "negative_launch_delays": ls.negative_launch_delays,
                "clock_skewed_launches": ls.clock_skewed,
                "synchronous_launches": ls.synchronous_launches,
                "graph_launched": ls.graph_launched,
            },
            K.IDLE_TIME: records(idle_time(trace)),
            K.QUEUE_LENGTH: records(queue_length(trace)),
            K.MEMORY: {
                "peaks": records(memory_peaks(trace)),
                "by_op": records(allocations_by_op(trace), top),
                "leaks": records(leak_candidates(trace), top),
            },
            K.MODULES: records(module_tree(trace), top * 10),
            K.RECOMMENDATIONS: [f.to_dict() for f in advise(trace, ctx=ctx)],
        }
    )
    return out


def report_traceset(ts: TraceSet, top: int = 50) -> dict[str, Any]:
    """The report of several ranks: each rank's report, the distributed view, averages."""
    ranks = {name: report_trace(tr, top) for name, tr in ts.items()}
    dist = distributed(ts)
    n = max(len(ranks), 1)
    avg = {c: sum(r[K.BREAKDOWN_US][c] for r in ranks.values()) / n for c in (*BREAKDOWN_CATEGORIES, "Total")}
    havg = {
        c: sum(r[K.HOST_BREAKDOWN_US][c] for r in ranks.values()) / n for c in (*HOST_CATEGORIES, "Total")
    }
    recs = [
        {**rec, "rank": rank_of(name, ts[name])} for name, r in ranks.items() for rec in r[K.RECOMMENDATIONS]
    ]
    return {
        K.VERSION: K.REPORT_VERSION,
        K.KIND: "traceset",
        K.SOURCE: ts.source,
        K.STEPS: max((len(r[K.STEPS]) for r in ranks.values()), default=0),
        K.BREAKDOWN_US: avg,
        K.HOST_BREAKDOWN_US: havg,
        K.DISTRIBUTED: {
            "ranks": [
                {
                    "rank": r["rank"],
                    "steps": r["steps"],
                    "step_us": r["step_ns"] / 1e3,
                    K.BREAKDOWN_US: {c: r[c] / 1e3 for c in BREAKDOWN_CATEGORIES},
                    **{
                        c[:-3] + "_us": r[c] / 1e3
                        for c in ("computation_ns", "communication_ns", "overlap_ns", "other_ns")
                    },
                }
                for r in dist.ranks.iter_rows(named=True)
            ],
            "collectives": records(dist.collectives),
            "slowest_rank": dist.slowest_rank,
            "wait_for_slowest": records(dist.wait_for_slowest),
        },
        K.RANKS: ranks,
        K.RECOMMENDATIONS: recs,
    }


def build_report(trace_or_traceset: Trace | TraceSet, top: int = 50) -> dict[str, Any]:
    """Everything torchscope knows about a trace or a folder of ranks, as one JSON-ready dict."""
    if isinstance(trace_or_traceset, TraceSet):
        return report_traceset(trace_or_traceset, top)
    return report_trace(trace_or_traceset, top)
