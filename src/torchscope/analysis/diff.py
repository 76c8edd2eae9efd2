"""Diff two runs: what got slower, and which ops and kernels explain it, largest first.

"Why is this version slow?" answers itself when the ops and kernels that appeared, vanished or
changed are listed by how much step time they moved: a run with cuDNN/oneDNN switched off shows
``aten::thnn_conv2d`` / ``_slow_conv2d_forward`` appearing at the top.

Like is compared with like. Both sides are measured over the same steps: by default the
``ProfilerStep`` numbers both runs kept (the overview's steps, so a tail step cut short by the
profiler is out on both sides), or the first ``min(n_a, n_b)`` kept steps of each when the runs
numbered their steps differently; ``steps_a``/``steps_b`` pick the iterations, as HTA's
``TraceDiff.compare_traces(control_iteration=, test_iteration=)`` does. Step time and its
breakdown are the mean over those steps; an op or kernel counts on a side when it belongs to one
of them (``Trace.events.step``: launched inside the step), divided by the number of steps, so
every value is per step. A run without ``ProfilerStep`` annotations is one whole-trace step, and
so is the other side then (steps cannot be matched with nothing). Op time is self time (host +
device), so a parent does not repeat its children's change; HTA sums each op's inclusive
duration instead (``tests/analysis/test_diff.py`` shows both). Either side may be a ``TraceSet``:
the step set is the steps every rank kept, and ranks are averaged.

The categories are the report's: the device breakdown when either run has device work, else the
host breakdown (Operators, Communication, Optimizer, Python outside ops, ...), so the same time
has the same name in ``report`` and ``diff``. Changes are ranked so that what changed for sure
leads: ops and kernels that appeared, vanished or changed their call count (a count does not
jitter), then same-count time changes above the noise floor (``NOISE_FLOOR`` of the step time),
then the rest, each by |delta|. On a shared CPU a same-count op's time jitters by more than a
small real change costs, so ranking by |delta| alone put noise first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import polars as pl

from torchscope.analysis import keys as K
from torchscope.analysis import names
from torchscope.analysis.frames import kinds
from torchscope.analysis.operators import _device_time_per_row
from torchscope.analysis.overview import BREAKDOWN_CATEGORIES, HOST_CATEGORIES, overview
from torchscope.analysis.report import records
from torchscope.trace.model import Trace, TraceSet

_TABLE: dict[str, Any] = {"name": pl.String(), "calls": pl.Float64(), "ns": pl.Float64()}
DEVICE_WORK = ("Kernel", "Memcpy", "Memset")
# a same-count op's change below this share of the step time is ranked as noise (listed last)
NOISE_FLOOR = 0.01
STRUCTURAL = ("appeared", "vanished", "count_changed")


@dataclass(frozen=True)
class Side:
    source: str
    steps: int  # how many steps the values are averaged over (1 for a whole-trace comparison)
    step_ns: float
    breakdown_ns: dict[str, float]
    host_breakdown_ns: dict[str, float]
    ops: pl.DataFrame  # name, calls, ns (per step; host self + device self)
    kernels: pl.DataFrame  # name, calls, ns (per step)
    step_numbers: tuple[int, ...] = ()  # the ProfilerStep numbers compared; () for the whole trace


def _traces(t: Trace | TraceSet) -> list[Trace]:
    return list(t.values()) if isinstance(t, TraceSet) else [t]


def _kept_steps(t: Trace | TraceSet) -> list[int] | None:
    """The step numbers every trace of the side kept (in order), or None when any has none."""
    kept: list[int] | None = None
    for tr in _traces(t):
        ov = overview(tr)
        if not ov.steps_from_trace or ov.steps.height == 0:
            return None
        mine = [int(s) for s in ov.steps["step"].to_list()]
        kept = mine if kept is None else [s for s in kept if s in set(mine)]
    return kept


def choose_steps(
    a: Trace | TraceSet,
    b: Trace | TraceSet,
    steps_a: Sequence[int] | None = None,
    steps_b: Sequence[int] | None = None,
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The steps each side is measured over (see the module docstring); ``()`` means the whole
    trace. A step asked for that a side did not keep is a ``ValueError`` naming it."""
    ka, kb = _kept_steps(a), _kept_steps(b)
    if steps_a is not None or steps_b is not None:
        want_a = list(steps_a if steps_a is not None else steps_b or [])
        want_b = list(steps_b if steps_b is not None else want_a)
        for side, want, kept in (("A", want_a, ka), ("B", want_b, kb)):
            missing = [s for s in want if s not in (kept or [])]
            if missing or not want:
                have = ", ".join(map(str, kept)) if kept else "none (no ProfilerStep annotations)"
                raise ValueError(f"run {side} has no step {missing or want}: the steps it kept are {have}")
        return tuple(want_a), tuple(want_b)
    if not ka or not kb:
        return (), ()
    common = [s for s in ka if s in set(kb)]
    if common:
        return tuple(common), tuple(common)
    n = min(len(ka), len(kb))
    return tuple(ka[:n]), tuple(kb[:n])


def _side(t: Trace | TraceSet, steps: tuple[int, ...]) -> Side:
    traces = _traces(t)
    source = t.source if isinstance(t, TraceSet) else t.meta.source
    n_tr = max(len(traces), 1)
    n = max(len(steps), 1)
    ops, kers, step_ns = [], [], 0.0
    br = dict.fromkeys(BREAKDOWN_CATEGORIES, 0.0)
    hb = dict.fromkeys(HOST_CATEGORIES, 0.0)
    for tr in traces:
        ov = overview(tr)
        win = ov.steps.filter(pl.col("step").is_in(list(steps))) if steps else ov.steps
        hwin = ov.host_steps.filter(pl.col("step").is_in(list(steps))) if steps else ov.host_steps
        w = max(win.height, 1) if steps else 1  # whole trace: all its steps are one
        step_ns += float(win["dur_ns"].sum()) / w / n_tr
        for c in BREAKDOWN_CATEGORIES:
            br[c] += float(win[c].sum()) / w / n_tr
        for c in HOST_CATEGORIES:
            hb[c] += float(hwin[c].sum()) / w / n_tr
        in_steps = pl.col("step").is_in(list(steps)) if steps else pl.lit(True)
        self_dev, _ = _device_time_per_row(tr)
        o = kinds(tr, "cpu_op").filter(in_steps & ~names.PROFILER_STEP)
        o = o.with_columns(pl.Series("device_self_ns", self_dev[o["id"].to_numpy()]))
        ops.append(
            o.group_by(pl.col("name").cast(pl.String)).agg(
                (pl.len().cast(pl.Float64) / n / n_tr).alias("calls"),
                ((pl.col("self_ns") + pl.col("device_self_ns")).sum().cast(pl.Float64) / n / n_tr).alias(
                    "ns"
                ),
            )
        )
        # a kernel belongs to a step through its launch (HTA's rule); one whose launch is not in
        # the file (queued before the profiler started) is in no step, whenever it ran
        launched = (pl.col("launcher") >= 0) | (pl.col("op") >= 0)
        k = kinds(tr, "kernel").filter(in_steps & launched if steps else in_steps)
        kers.append(
            k.group_by(pl.col("name").cast(pl.String)).agg(
                (pl.len().cast(pl.Float64) / n / n_tr).alias("calls"),
                (pl.col("dur_ns").sum().cast(pl.Float64) / n / n_tr).alias("ns"),
            )
        )

    def total(frames: list[pl.DataFrame]) -> pl.DataFrame:
        if not frames:
            return pl.DataFrame(schema=_TABLE)
        both = pl.concat([f.select(pl.col(c).cast(dt) for c, dt in _TABLE.items()) for f in frames])
        return both.group_by("name").agg(pl.col("calls").sum(), pl.col("ns").sum())

    return Side(source, len(steps) if steps else 1, step_ns, br, hb, total(ops), total(kers), steps)


def _compare(a: pl.DataFrame, b: pl.DataFrame, what: str) -> pl.DataFrame:
    j = a.join(b, on="name", how="full", suffix="_b", coalesce=True).with_columns(
        pl.col("calls").fill_null(0.0).alias("a_calls"),
        pl.col("calls_b").fill_null(0.0).alias("b_calls"),
        pl.col("ns").fill_null(0.0).alias("a_ns"),
        pl.col("ns_b").fill_null(0.0).alias("b_ns"),
    )
    # calls per step are sums of 1/n: compare them at a precision no real count difference has
    same_calls = (pl.col("a_calls") - pl.col("b_calls")).abs() < 1e-9
    return (
        j.with_columns(
            pl.lit(what).alias("what"),
            (pl.col("b_ns") - pl.col("a_ns")).alias("delta_ns"),
            pl.when(pl.col("a_calls") == 0)
            .then(pl.lit("appeared"))
            .when(pl.col("b_calls") == 0)
            .then(pl.lit("vanished"))
            .when(~same_calls)
            .then(pl.lit("count_changed"))
            .when(pl.col("b_ns") != pl.col("a_ns"))
            .then(pl.lit("time_changed"))
            .otherwise(pl.lit("unchanged"))
            .alias("status"),
        )
        .select("what", "name", "status", "a_calls", "b_calls", "a_ns", "b_ns", "delta_ns")
        .sort([pl.col("delta_ns").abs(), pl.col("name")], descending=[True, False])
    )


@dataclass(frozen=True)
class TraceDiff:
    """Per-step comparison of run ``a`` (baseline) and run ``b`` over the same steps."""

    a: Side
    b: Side
    operators: pl.DataFrame  # what, name, status, a_calls, b_calls, a_ns, b_ns, delta_ns (per step)
    kernels: pl.DataFrame

    @property
    def noise_floor_ns(self) -> float:
        """Same-count changes smaller than this (``NOISE_FLOOR`` of the longer step) are noise."""
        return NOISE_FLOOR * max(self.a.step_ns, self.b.step_ns)

    @property
    def changes(self) -> pl.DataFrame:
        """Ops and kernels that changed, real changes first (see the module docstring): tier 0
        appeared, vanished or count changed (a count is never noise, however small the time); tier 1 same-count time changes above the noise
        floor; tier 2 (``noise``) the rest. Within a tier by |delta|, kernels first on ties (they
        are where time goes). Unchanged rows (same calls, same time) are left out."""
        both = pl.concat([self.kernels, self.operators]).filter(pl.col("status") != "unchanged")
        impact = pl.col("delta_ns").abs()
        tier = (
            pl.when(pl.col("status").is_in(STRUCTURAL))
            .then(0)
            .when(impact >= self.noise_floor_ns)
            .then(1)
            .otherwise(2)
        )
        return (
            both.with_columns(tier.alias("_tier"), impact.alias("_impact"))
            .sort(["_tier", "_impact", "what", "name"], descending=[False, True, False, False])
            .with_columns((pl.col("_tier") == 2).alias("noise"))
            .drop("_tier", "_impact")
        )

    @property
    def categories(self) -> tuple[str, ...]:
        """The report's categories for these runs: the device breakdown when either has device
        work, else the host breakdown (render.console chooses the same way)."""
        device = any(s.breakdown_ns[c] for s in (self.a, self.b) for c in DEVICE_WORK)
        return BREAKDOWN_CATEGORIES if device else HOST_CATEGORIES

    @property
    def breakdown_delta_ns(self) -> dict[str, float]:
        """Per category, B - A per step, largest change first: where the step time moved."""
        cats = self.categories
        a, b = self._breakdown(self.a), self._breakdown(self.b)
        d = {c: b[c] - a[c] for c in cats}
        return dict(sorted(d.items(), key=lambda kv: -abs(kv[1])))

    def _breakdown(self, side: Side) -> dict[str, float]:
        return side.breakdown_ns if self.categories is BREAKDOWN_CATEGORIES else side.host_breakdown_ns

    def to_dict(self, top: int = 50) -> dict[str, Any]:
        """The JSON of ``torchscope diff``; categories and changes are ordered by |delta|, so
        what changed leads."""
        a, b = self.a, self.b
        return {
            K.VERSION: K.REPORT_VERSION,
            K.DIFF_A: {"source": a.source, "steps": a.steps, "step_numbers": list(a.step_numbers)},
            K.DIFF_B: {"source": b.source, "steps": b.steps, "step_numbers": list(b.step_numbers)},
            K.DIFF_STEP: {
                "a": a.step_ns / 1e3,
                "b": b.step_ns / 1e3,
                "delta": (b.step_ns - a.step_ns) / 1e3,
                "ratio": (b.step_ns / a.step_ns) if a.step_ns else None,
                "noise_floor": self.noise_floor_ns / 1e3,
            },
            K.DIFF_BREAKDOWN: {
                c: {"a": self._breakdown(a)[c] / 1e3, "b": self._breakdown(b)[c] / 1e3, "delta": d / 1e3}
                for c, d in self.breakdown_delta_ns.items()
            },
            K.DIFF_CHANGES: records(self.changes, top),
            K.DIFF_OPERATORS: records(self.operators, top),
            K.DIFF_KERNELS: records(self.kernels, top),
        }


DiffResult = TraceDiff  # the name the report's renderers know it by


def diff_traces(
    a: Trace | TraceSet,
    b: Trace | TraceSet,
    steps_a: Sequence[int] | None = None,
    steps_b: Sequence[int] | None = None,
) -> TraceDiff:
    """Compare baseline ``a`` with ``b`` over the same steps: step time, breakdown, ops and
    kernels per step. ``steps_a``/``steps_b`` pick the ``ProfilerStep`` numbers of each side
    (one given: the same numbers on both)."""
    ia, ib = choose_steps(a, b, steps_a, steps_b)
    sa, sb = _side(a, ia), _side(b, ib)
    return TraceDiff(sa, sb, _compare(sa.ops, sb.ops, "operator"), _compare(sa.kernels, sb.kernels, "kernel"))
