"""Diff two runs: what got slower, and which ops and kernels explain it, largest first.

"Why is this version slow?" answers itself when the ops and kernels that appeared, vanished or
changed are listed by how much step time they moved: a run with cuDNN/oneDNN switched off shows
``aten::thnn_conv2d`` / ``_slow_conv2d_forward`` appearing at the top. Times are per step (the
runs may have profiled different numbers of steps); self time is compared so that a parent op
does not repeat its children's change. Either side may be a ``TraceSet`` (ranks are averaged).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import polars as pl

from torchscope.analysis import keys as K
from torchscope.analysis.kernels import kernel_stats
from torchscope.analysis.operators import operators
from torchscope.analysis.overview import BREAKDOWN_CATEGORIES, overview
from torchscope.analysis.report import records
from torchscope.trace.model import Trace, TraceSet

_TABLE: dict[str, Any] = {"name": pl.String(), "calls": pl.Float64(), "ns": pl.Float64()}


@dataclass(frozen=True)
class Side:
    source: str
    steps: int
    step_ns: float
    breakdown_ns: dict[str, float]
    ops: pl.DataFrame  # name, calls, ns (per step; host self + device self)
    kernels: pl.DataFrame  # name, calls, ns (per step)


def _side(t: Trace | TraceSet) -> Side:
    traces = list(t.values()) if isinstance(t, TraceSet) else [t]
    source = t.source if isinstance(t, TraceSet) else t.meta.source
    n_tr = max(len(traces), 1)
    ops, kers, steps, step_ns = [], [], 0, 0.0
    br = dict.fromkeys(BREAKDOWN_CATEGORIES, 0.0)
    for tr in traces:
        ov = overview(tr)
        n = max(ov.steps.height, 1)
        steps += ov.steps.height
        step_ns += ov.breakdown_ns["Total"] / n_tr
        for c in BREAKDOWN_CATEGORIES:
            br[c] += ov.breakdown_ns[c] / n_tr
        o = operators(tr).filter(pl.col("kind") == "cpu_op")
        ops.append(
            o.select(
                "name",
                (pl.col("calls") / n / n_tr).alias("calls"),
                ((pl.col("host_self_ns") + pl.col("device_self_ns")) / n / n_tr).alias("ns"),
            )
        )
        k = kernel_stats(tr)
        kers.append(
            k.select(
                "name",
                (pl.col("count") / n / n_tr).alias("calls"),
                (pl.col("total_ns") / n / n_tr).alias("ns"),
            )
        )

    def total(frames: list[pl.DataFrame]) -> pl.DataFrame:
        if not frames:
            return pl.DataFrame(schema=_TABLE)
        both = pl.concat(
            [
                f.select(
                    pl.col("name").cast(pl.String),
                    pl.col("calls").cast(pl.Float64),
                    pl.col("ns").cast(pl.Float64),
                )
                for f in frames
            ]
        )
        return both.group_by("name").agg(pl.col("calls").sum(), pl.col("ns").sum())

    return Side(source, steps // n_tr, step_ns, br, total(ops), total(kers))


def _compare(a: pl.DataFrame, b: pl.DataFrame, what: str) -> pl.DataFrame:
    j = a.join(b, on="name", how="full", suffix="_b", coalesce=True).with_columns(
        pl.col("calls").fill_null(0.0).alias("a_calls"),
        pl.col("calls_b").fill_null(0.0).alias("b_calls"),
        pl.col("ns").fill_null(0.0).alias("a_ns"),
        pl.col("ns_b").fill_null(0.0).alias("b_ns"),
    )
    return (
        j.with_columns(
            pl.lit(what).alias("what"),
            (pl.col("b_ns") - pl.col("a_ns")).alias("delta_ns"),
            pl.when(pl.col("a_calls") == 0)
            .then(pl.lit("appeared"))
            .when(pl.col("b_calls") == 0)
            .then(pl.lit("vanished"))
            .when(pl.col("a_calls") != pl.col("b_calls"))
            .then(pl.lit("count_changed"))
            .otherwise(pl.lit("time_changed"))
            .alias("status"),
        )
        .select("what", "name", "status", "a_calls", "b_calls", "a_ns", "b_ns", "delta_ns")
        .sort([pl.col("delta_ns").abs(), pl.col("name")], descending=[True, False])
    )


@dataclass(frozen=True)
class TraceDiff:
    """Per-step comparison of run ``a`` (baseline) and run ``b``."""

    a: Side
    b: Side
    operators: pl.DataFrame  # what, name, status, a_calls, b_calls, a_ns, b_ns, delta_ns (per step)
    kernels: pl.DataFrame

    @property
    def changes(self) -> pl.DataFrame:
        """Ops and kernels together, by |delta|; kernels first on ties (they are where time goes)."""
        both = pl.concat([self.kernels, self.operators])
        return (
            both.with_columns(pl.col("delta_ns").abs().alias("_impact"))
            .sort(["_impact", "what", "name"], descending=[True, False, False])
            .drop("_impact")
        )

    def to_dict(self, top: int = 50) -> dict[str, Any]:
        a, b = self.a, self.b
        return {
            K.VERSION: K.REPORT_VERSION,
            K.DIFF_A: {"source": a.source, "steps": a.steps},
            K.DIFF_B: {"source": b.source, "steps": b.steps},
            K.DIFF_STEP: {
                "a": a.step_ns / 1e3,
                "b": b.step_ns / 1e3,
                "delta": (b.step_ns - a.step_ns) / 1e3,
                "ratio": (b.step_ns / a.step_ns) if a.step_ns else None,
            },
            K.DIFF_BREAKDOWN: {
                c: {
                    "a": a.breakdown_ns[c] / 1e3,
                    "b": b.breakdown_ns[c] / 1e3,
                    "delta": (b.breakdown_ns[c] - a.breakdown_ns[c]) / 1e3,
                }
                for c in BREAKDOWN_CATEGORIES
            },
            K.DIFF_CHANGES: records(self.changes, top),
            K.DIFF_OPERATORS: records(self.operators, top),
            K.DIFF_KERNELS: records(self.kernels, top),
        }


def diff_traces(a: Trace | TraceSet, b: Trace | TraceSet) -> TraceDiff:
    """Compare baseline ``a`` with ``b``: step time, breakdown, ops and kernels per step."""
    sa, sb = _side(a), _side(b)
    return TraceDiff(sa, sb, _compare(sa.ops, sb.ops, "operator"), _compare(sa.kernels, sb.kernels, "kernel"))
