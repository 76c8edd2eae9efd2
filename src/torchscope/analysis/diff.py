"""Diff two runs: what got slower, and which ops and kernels explain it, largest first.

"Why is this version slow?" answers itself when the ops and kernels that appeared, vanished or
changed are listed by how much step time they moved: a run with cuDNN/oneDNN switched off shows
``aten::thnn_conv2d`` / ``_slow_conv2d_forward`` appearing at the top.

Like is compared with like. Both sides are measured over the same steps: by default the
``ProfilerStep`` numbers both runs kept (the overview's steps, so a tail step cut short by the
profiler is out on both sides), or the first ``min(n_a, n_b)`` kept steps of each when the runs
numbered their steps differently (they share under half of the fewer kept steps: two schedules
that meet by chance); ``steps_a``/``steps_b`` pick the iterations, as HTA's
``TraceDiff.compare_traces(control_iteration=, test_iteration=)`` does. Step time and its
breakdown are the mean over those steps; an op or kernel counts on a side when it belongs to one
of them (``Trace.events.step``: launched inside the step), divided by the number of steps, so
every value is per step. A run without ``ProfilerStep`` annotations is one whole-trace step, and
so is the other side then (steps cannot be matched with nothing). Op time is self time (host +
device), so a parent does not repeat its children's change; HTA sums each op's inclusive
duration instead (``tests/analysis/test_diff.py`` shows both). Either side may be a ``TraceSet``:
a directory is read as ``report`` reads it (``job.discover``: runs, ranks, cycles), so each
rank's steps are those of all its cycles (the same step number in two cycles counts twice), the
step set is the steps every rank kept, and ranks are averaged (the ranks both sides have, when
they share any). A cycle file is never a rank, nor a whole cycle one step.

The categories are the report's: the device breakdown when either run has device work, else the
host breakdown (Operators, Communication, Optimizer, Python outside ops, ...), so the same time
has the same name in ``report`` and ``diff``. Changes are ranked so that what changed for sure
leads: ops and kernels that appeared, vanished or changed their call count (a count does not
jitter), with same-count changes of ``SURE_FLOORS`` noise floors or more (``NOISE_FLOOR`` of the
step time); then the other same-count time changes above the floor, then the rest, each by
|delta|. On a shared CPU a same-count op's time jitters by more than a small real change costs,
so ranking by |delta| alone put noise first; ranking every structural change before every time
change put fifteen kernels of 1-100 us that appeared or vanished above ``aten::mm`` getting
1.7 ms faster per step (a new user's fp32 -> bf16 diff).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import polars as pl

from torchscope.analysis import keys as K
from torchscope.analysis import names
from torchscope.analysis.frames import kinds
from torchscope.analysis.operators import _device_time_per_row, _self_calls
from torchscope.analysis.overview import BREAKDOWN_CATEGORIES, HOST_CATEGORIES, Overview, overview
from torchscope.analysis.report import records
from torchscope.analysis.report_model import us_of
from torchscope.trace.model import Trace, TraceSet

if TYPE_CHECKING:
    from torchscope.job.discover import Discovery

_TABLE: dict[str, Any] = {"what": pl.String(), "name": pl.String(), "calls": pl.Float64(), "ns": pl.Float64()}
DEVICE_WORK = ("Kernel", "Memcpy", "Memset")
# a same-count op's change below this share of the step time is ranked as noise (listed last)
NOISE_FLOOR = 0.01
# a same-count change this many noise floors large is as sure as a count change: ranked with them
SURE_FLOORS = 10
STRUCTURAL = ("appeared", "vanished", "count_changed")
_R = TypeVar("_R")


@dataclass(frozen=True)
class Side:
    source: str
    steps: int  # how many steps (of one rank) the values are averaged over (a whole trace: 1 per cycle)
    step_ns: float
    breakdown_ns: dict[str, float]
    host_breakdown_ns: dict[str, float]
    ops: pl.DataFrame  # name, calls, ns (per step; host self + device self)
    kernels: pl.DataFrame  # what (kernel, memcpy, memset), name, calls, ns (per step)
    step_numbers: tuple[int, ...] = ()  # the ProfilerStep numbers compared; () for the whole trace
    cycles: int = 1  # cycle files (of one rank) the compared steps came from
    kept: int = 0  # steps the side kept in all (of one rank): more than ``steps`` when some were left out
    ranks: int = 1
    # the shortest, median and longest compared step of any rank (None: compared whole)
    step_spread_ns: tuple[float, float, float] | None = None
    devices: tuple[str, ...] = ()  # the device names its trace lists (none: a CPU trace)


Ranks = dict[str, list[Any]]  # rank -> its cycles (Traces, or files of a ``JobDir``) in the order written


@dataclass
class JobDir:
    """A directory of ranks and cycles read one file at a time, as ``report DIR`` reads it: a
    TraceSet held every rank at once (a diff of two 32-rank folders peaked at 2.8 GB, 43 MB a
    rank pair, where ``report`` of each took 0.5 GB). Each file is read twice, for the steps
    every rank kept and then for the compared steps' rows; ``said`` collects what reading them
    repaired (once per file), ``skipped`` what discovery left out."""

    path: Path
    ranks: Ranks
    skipped: tuple[str, ...] = ()
    said: list[str] = field(default_factory=list)
    unreadable: set[Path] = field(default_factory=set)

    @classmethod
    def of(cls, path: str | Path, found: Discovery | None = None) -> JobDir:
        """The directory's ranks; ``found``: its discovery, when the caller made it already
        (a discovery walks the folder and reads every file's head)."""
        from torchscope.job.discover import discover, mixed_world_sizes

        root = Path(path).expanduser()
        found = found or discover(root)
        runs = {rf.run for rf in found.rank_files}
        ranks: Ranks = {}
        for rf in found.rank_files:
            key = str(rf.rank) if len(runs) == 1 else f"{rf.run}/{rf.rank}"
            # a file naming no rank beside files of rank 0 is a rank of its own, as in ``report``;
            # torchscope run's setup-only cycle holds no step to compare (``RankFiles.step_files``)
            ranks[key if key not in ranks else f"{key}+{len(ranks)}"] = list(rf.step_files)
        # said with the folder: a diff has two, and the same file may be skipped in each
        return cls(root, ranks, tuple(f"{root}: {line}" for line in (*found.skipped, *mixed_world_sizes(found))))

    def read(self, cycle: Any) -> Trace | None:
        """A cycle's Trace, read from its file; what the reading repaired is said once. None for
        a file that does not read: skipped with a line, as a directory's load skips it."""
        if isinstance(cycle, Trace):
            return cycle
        from torchscope.errors import TraceError
        from torchscope.trace.reader import read_chrome

        try:
            trace = read_chrome(cycle)
        except TraceError as exc:
            if cycle not in self.unreadable:
                self.unreadable.add(cycle)
                self.said.append(f"skipped {cycle}: {exc.problem}")
            return None
        self.said.extend(f"{cycle}: {w}" for w in trace.meta.warnings if f"{cycle}: {w}" not in self.said)
        return trace

    def readable(self, ranks: Ranks) -> Ranks:
        """``ranks`` without the files that did not read, and without ranks left with none."""
        kept = {rank: [c for c in cycles if c not in self.unreadable] for rank, cycles in ranks.items()}
        return {rank: cycles for rank, cycles in kept.items() if cycles}


def _read(side: Any, cycle: Any) -> Trace | None:
    return side.read(cycle) if isinstance(side, JobDir) else cycle  # type: ignore[no-any-return]


def ranks_of(t: Trace | TraceSet | JobDir) -> Ranks:
    """The side's ranks and each rank's cycles. A directory is grouped as ``report`` groups it
    (``job.discover``); a set whose files discovery cannot name (a saved store) keeps one trace
    per rank, as before."""
    if isinstance(t, JobDir):
        return t.ranks
    if isinstance(t, Trace):
        return {"0": [t]}
    traces = list(t.values())
    root = Path(t.source)
    if root.is_dir():
        from torchscope.job.discover import discover

        by_file = {Path(tr.meta.source).resolve(): tr for tr in traces}
        found = discover(root).rank_files
        grouped: Ranks = {}
        for rf in found:
            # torchscope run's setup-only cycle holds no step to compare (``RankFiles.step_files``)
            cycles = [by_file[f.resolve()] for f in rf.step_files if f.resolve() in by_file]
            key = str(rf.rank) if len({r.run for r in found}) == 1 else f"{rf.run}/{rf.rank}"
            if cycles:
                grouped[key] = cycles
        if sum(f.resolve() in by_file for rf in found for f in rf.files) == len(traces):  # every trace placed
            return grouped
    return {k: [tr] for k, tr in t.items()}


def _steps_of(cycles: list[Any], side: Any = None) -> list[int] | None:
    """A rank's step numbers over all its cycles, in order, or None when a cycle has none."""
    mine: list[int] = []
    for cycle in cycles:
        trace = _read(side, cycle)
        if trace is None:  # a file that does not read: left out (``JobDir.readable``)
            continue
        more = _with_steps_of(mine, overview(trace))
        if more is None:
            return None
        mine = more
    return mine


def _kept_steps(ranks: Ranks, side: Any = None) -> list[int] | None:
    """The step numbers every rank of the side kept (in order), or None when any has none."""
    kept: list[int] | None = None
    for mine in _per_rank(side, lambda _, cycles: _steps_of(cycles, side), ranks):
        if mine is None:
            return None
        if kept is None:
            kept = mine
        else:  # the set once per rank, not once per step (200k steps took minutes)
            have = set(mine)
            kept = [s for s in kept if s in have]
    return kept


def choose_steps(
    a: Trace | TraceSet | Ranks,
    b: Trace | TraceSet | Ranks,
    steps_a: Sequence[int] | None = None,
    steps_b: Sequence[int] | None = None,
    sides: tuple[Any, Any] = (None, None),
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The steps each side is measured over (see the module docstring); ``()`` means the whole
    trace. A step asked for that a side did not keep is a ``ValueError`` naming it. ``sides``:
    the ``JobDir`` each side's files are read through, when they are files."""
    ka, kb = _kept_steps(_as_ranks(a), sides[0]), _kept_steps(_as_ranks(b), sides[1])
    if steps_a is not None or steps_b is not None:
        want_a = list(steps_a if steps_a is not None else steps_b or [])
        want_b = list(steps_b if steps_b is not None else want_a)
        for side, want, kept in (("A", want_a, ka), ("B", want_b, kb)):
            have_kept = set(kept or ())
            missing = [s for s in want if s not in have_kept]
            if missing or not want:
                have = ", ".join(map(str, kept)) if kept else "none (no ProfilerStep annotations)"
                # an empty list asks for no step at all ("run A has no step []" said otherwise)
                asked = f" has no step {missing}" if missing else ": no steps given (an empty list)"
                raise ValueError(f"run {side}{asked}: the steps it kept are {have}")
        return tuple(want_a), tuple(want_b)
    if not ka or not kb:
        return (), ()
    in_b = set(kb)
    common = [s for s in ka if s in in_b]
    n = min(len(ka), len(kb))
    # the same step numbers, unless the two schedules share them only by chance: a default
    # schedule (steps 0-4, 20-22, 38-40) against --wait 5 --active 3 met at step 38 alone, and
    # one step of 11 and 28 made the headline ratio
    if common and 2 * len(common) >= n:
        return tuple(common), tuple(common)
    return tuple(ka[:n]), tuple(kb[:n])


def _as_ranks(t: Trace | TraceSet | Ranks) -> Ranks:
    return t if isinstance(t, dict) else ranks_of(t)


def _common_ranks(a: Ranks, b: Ranks) -> tuple[Ranks, Ranks]:
    """The ranks both sides have, when they share any; else every rank of each. A single trace
    (its rank unknown here) is compared with every rank of the other side."""
    if len(a) == 1 or len(b) == 1:
        return a, b
    both = [k for k in a if k in b]
    return ({k: a[k] for k in both}, {k: b[k] for k in both}) if both else (a, b)


@dataclass
class _RankPart:
    """One rank's share of a side, each value already divided by its steps and the side's ranks
    (as the sums were: the side adds the parts up in rank order, so the floats are the same)."""

    n: int
    matched_cycles: int
    kept: list[int] | None
    step_ns: list[float]  # per cycle
    step_durs: list[float]  # each compared step's own duration (none when compared whole)
    devices: tuple[str, ...]  # the device names the rank's first cycle lists
    breakdown: list[dict[str, float]]  # per cycle
    host_breakdown: list[dict[str, float]]  # per cycle
    ops: list[pl.DataFrame]
    kernels: list[pl.DataFrame]


def _rank_part(t: Any, cycles: list[Any], steps: tuple[int, ...], n_tr: int, first: bool) -> _RankPart:
    """A rank's per-step means over ``steps``, its cycles read one at a time (when files) and
    each reduced to sums before the next: a process of 50 cycles held all 50 (1.7 GB). The
    sums are divided once the rank's step count is known, value by value as before."""
    sums: list[tuple[float, dict[str, float], dict[str, float]]] = []
    ops: list[pl.DataFrame] = []
    kers: list[pl.DataFrame] = []
    n_rows = matched = 0
    kept: list[int] | None = []
    durs: list[float] = []
    devices: tuple[str, ...] | None = None
    for cycle in cycles:
        tr = _read(t, cycle)
        if tr is None:  # gone since the first read
            continue
        if devices is None:
            devices = tr.meta.device_models
        ov = overview(tr)
        win = ov.steps.filter(pl.col("step").is_in(list(steps))) if steps else ov.steps
        hwin = ov.host_steps.filter(pl.col("step").is_in(list(steps))) if steps else ov.host_steps
        n_rows += win.height
        matched += 1 if win.height or not steps else 0
        if steps:
            durs += map(float, win["dur_ns"].to_list())
        sums.append(
            (
                float(win["dur_ns"].sum()),
                {c: float(win[c].sum()) for c in BREAKDOWN_CATEGORIES},
                {c: float(hwin[c].sum()) for c in HOST_CATEGORIES},
            )
        )
        _rank_rows(tr, steps, ops, kers)
        if first and kept is not None:
            kept = _with_steps_of(kept, ov)
        del tr, ov, win, hwin
    # the rank's step count: matched step rows over all cycles (a whole trace is one step)
    n = max(n_rows, 1) if steps else max(len(cycles), 1)
    div = n * n_tr
    return _RankPart(
        n,
        matched,
        kept if first else None,
        [dur / n / n_tr for dur, _, _ in sums],
        durs,
        devices or (),
        [{c: v / n / n_tr for c, v in br.items()} for _, br, _ in sums],
        [{c: v / n / n_tr for c, v in hb.items()} for _, _, hb in sums],
        [f.with_columns(pl.col("calls") / div, pl.col("ns") / div) for f in ops],
        [f.with_columns(pl.col("calls") / div, pl.col("ns") / div) for f in kers],
    )


def _with_steps_of(kept: list[int], ov: Overview) -> list[int] | None:
    """``kept`` and then the step numbers of one more cycle not in it yet, in order; None when
    that cycle has no ``ProfilerStep`` steps (the rank is then one whole-trace step a cycle)."""
    if not ov.steps_from_trace or ov.steps.height == 0:
        return None
    have = set(kept)
    out = list(kept)
    for s in map(int, ov.steps["step"].to_list()):
        if s not in have:
            have.add(s)
            out.append(s)
    return out


def _per_rank(t: Any, work: Callable[[int, list[Any]], _R], ranks: Ranks) -> list[_R]:
    """``work(i, cycles)`` for each rank, in rank order. A ``JobDir``'s ranks are read two at a
    time (the scan and most of the columnar work release the GIL), so at most two ranks' traces
    are in memory; in-memory traces one after the other."""
    items = list(enumerate(ranks.values()))
    if not isinstance(t, JobDir) or len(items) < 2:
        return [work(i, cycles) for i, cycles in items]
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="torchscope-diff") as pool:
        return list(pool.map(lambda item: work(*item), items))


def _side(t: Trace | TraceSet | JobDir, steps: tuple[int, ...], ranks: Ranks | None = None) -> Side:
    """Per-step means over ``steps`` of each rank (all its cycles), averaged over ranks."""
    ranks = ranks_of(t) if ranks is None else ranks
    source = str(t.path) if isinstance(t, JobDir) else t.source if isinstance(t, TraceSet) else t.meta.source
    n_tr = max(len(ranks), 1)
    parts = _per_rank(t, lambda i, cycles: _rank_part(t, cycles, steps, n_tr, first=i == 0), ranks)
    ops: list[pl.DataFrame] = []
    kers: list[pl.DataFrame] = []
    step_ns = 0.0
    br = dict.fromkeys(BREAKDOWN_CATEGORIES, 0.0)
    hb = dict.fromkeys(HOST_CATEGORIES, 0.0)
    for part in parts:  # in rank order, cycle by cycle: the sums of the one-rank-at-a-time loop
        for k, dur in enumerate(part.step_ns):
            step_ns += dur
            for c in BREAKDOWN_CATEGORIES:
                br[c] += part.breakdown[k][c]
            for c in HOST_CATEGORIES:
                hb[c] += part.host_breakdown[k][c]
        ops += part.ops
        kers += part.kernels
    first = parts[0] if parts else _RankPart(0, 0, None, [], [], (), [], [], [], [])
    durs = [d for part in parts for d in part.step_durs]
    kept = first.kept

    def total(frames: list[pl.DataFrame]) -> pl.DataFrame:
        if not frames:
            return pl.DataFrame(schema=_TABLE)
        both = pl.concat([f.select(pl.col(c).cast(dt) for c, dt in _TABLE.items()) for f in frames])
        return both.group_by("what", "name").agg(pl.col("calls").sum(), pl.col("ns").sum())

    return Side(
        source,
        first.n,  # without ProfilerSteps: one whole-trace step per cycle
        step_ns,
        br,
        hb,
        total(ops),
        total(kers),
        steps,
        cycles=first.matched_cycles,
        kept=len(kept) if kept else first.n,  # a side compared whole still says its steps
        ranks=len(ranks),
        step_spread_ns=(min(durs), statistics.median(durs), max(durs)) if durs else None,
        devices=first.devices,
    )


def _rank_rows(tr: Trace, steps: tuple[int, ...], ops: list[pl.DataFrame], kers: list[pl.DataFrame]) -> None:
    """One cycle's ops and kernels in ``steps``: calls and ns as sums (the rank divides them
    by its steps and the side's ranks)."""
    in_steps = pl.col("step").is_in(list(steps)) if steps else pl.lit(True)
    self_dev, _ = _device_time_per_row(tr)
    o = kinds(tr, "cpu_op").filter(in_steps & ~names.PROFILER_STEP)
    # an op calling itself is one call (torch's tables, ours and the report fold it); its time
    # is under the same name either way
    folded = _self_calls(tr)[o["id"].to_numpy()]
    o = o.with_columns(pl.Series("device_self_ns", self_dev[o["id"].to_numpy()]), pl.Series("folded", folded))
    ops.append(
        o.group_by(pl.lit("operator").alias("what"), pl.col("name").cast(pl.String)).agg(
            (~pl.col("folded")).sum().cast(pl.Float64).alias("calls"),
            (pl.col("self_ns") + pl.col("device_self_ns")).sum().cast(pl.Float64).alias("ns"),
        )
    )
    # a kernel belongs to a step through its launch (HTA's rule); one whose launch is not in
    # the file (queued before the profiler started) is in no step, whenever it ran. Copies and
    # memsets are device work too: a diff whose Memcpy category fell 1.3 ms named no copy
    launched = (pl.col("launcher") >= 0) | (pl.col("op") >= 0)
    k = kinds(tr, "kernel", "memcpy", "memset").filter(in_steps & launched if steps else in_steps)
    kers.append(
        k.group_by(pl.col("kind").cast(pl.String).alias("what"), pl.col("name").cast(pl.String)).agg(
            pl.len().cast(pl.Float64).alias("calls"),
            pl.col("dur_ns").sum().cast(pl.Float64).alias("ns"),
        )
    )


def _compare(a: pl.DataFrame, b: pl.DataFrame) -> pl.DataFrame:
    j = a.join(b, on=["what", "name"], how="full", suffix="_b", coalesce=True).with_columns(
        pl.col("calls").fill_null(0.0).alias("a_calls"),
        pl.col("calls_b").fill_null(0.0).alias("b_calls"),
        pl.col("ns").fill_null(0.0).alias("a_ns"),
        pl.col("ns_b").fill_null(0.0).alias("b_ns"),
    )
    # calls per step are sums of 1/n: compare them at a precision no real count difference has
    same_calls = (pl.col("a_calls") - pl.col("b_calls")).abs() < 1e-9
    return (
        j.with_columns(
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
        appeared, vanished or count changed (a count is never noise, however small the time) and
        same-count changes of ``SURE_FLOORS`` noise floors or more; tier 1 the other same-count
        time changes above the floor; tier 2 (``noise``) the rest. Within a tier by |delta|,
        kernels first on ties (they are where time goes). Unchanged rows (same calls, same time)
        are left out."""
        both = pl.concat([self.kernels, self.operators]).filter(pl.col("status") != "unchanged")
        impact = pl.col("delta_ns").abs()
        structural, above = pl.col("status").is_in(STRUCTURAL), impact >= self.noise_floor_ns
        sure = structural | (impact >= SURE_FLOORS * self.noise_floor_ns)
        tier = pl.when(sure).then(0).when(above).then(1).otherwise(2)
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

    @property
    def within_spread(self) -> bool:
        """Whether the step time's change is smaller than the spread of either side's steps
        (longest less shortest): a run whose steps took 2.2-70.2 ms came out 11 ms faster than
        one of 26.9-45.4 ms although a slowdown had been added to it."""
        spans = [spread for spread in (self.a.step_spread_ns, self.b.step_spread_ns) if spread is not None]
        spreads = [longest - shortest for shortest, _, longest in spans]
        return bool(spreads) and abs(self.b.step_ns - self.a.step_ns) < max(spreads)

    def _breakdown(self, side: Side) -> dict[str, float]:
        return side.breakdown_ns if self.categories is BREAKDOWN_CATEGORIES else side.host_breakdown_ns

    def to_dict(self, top: int | None = None) -> dict[str, Any]:
        """The JSON of ``torchscope diff``; categories and changes are ordered by |delta|, so
        what changed leads. Every row of each table (``top``: the first rows only); times in
        µs to the nanosecond, as the report writes them (``us_of``)."""
        a, b = self.a, self.b
        return {
            K.VERSION: K.REPORT_VERSION,
            K.DIFF_A: _side_dict(a),
            K.DIFF_B: _side_dict(b),
            K.DIFF_STEP: {
                "a": us_of(a.step_ns),
                "b": us_of(b.step_ns),
                "delta": us_of(b.step_ns - a.step_ns),
                "ratio": (b.step_ns / a.step_ns) if a.step_ns else None,
                "noise_floor": us_of(self.noise_floor_ns),
                # each side's shortest, median and longest compared step: a change within
                # their spread may be the machine's jitter (None: a side compared whole)
                "a_steps": _spread_us(a.step_spread_ns),
                "b_steps": _spread_us(b.step_spread_ns),
                "within_spread": self.within_spread,
            },
            K.DIFF_BREAKDOWN: {
                c: {"a": us_of(self._breakdown(a)[c]), "b": us_of(self._breakdown(b)[c]), "delta": us_of(d)}
                for c, d in self.breakdown_delta_ns.items()
            },
            K.DIFF_CHANGES: records(self.changes, top),
            K.DIFF_OPERATORS: records(self.operators, top),
            K.DIFF_KERNELS: records(self.kernels, top),
        }


def _spread_us(spread: tuple[float, float, float] | None) -> dict[str, float | None] | None:
    if spread is None:
        return None
    return dict(zip(("shortest", "median", "longest"), map(us_of, spread), strict=True))


def _side_dict(s: Side) -> dict[str, Any]:
    """What a side's numbers are over: ``steps`` compared (per rank) out of ``kept``, from
    ``cycles`` cycle files, averaged over ``ranks``."""
    return {
        "source": s.source,
        "steps": s.steps,
        "step_numbers": list(s.step_numbers),
        "kept": s.kept,
        "cycles": s.cycles,
        "ranks": s.ranks,
        "devices": list(s.devices),
    }


DiffResult = TraceDiff  # the name the report's renderers know it by


def diff_traces(
    a: Trace | TraceSet | JobDir,
    b: Trace | TraceSet | JobDir,
    steps_a: Sequence[int] | None = None,
    steps_b: Sequence[int] | None = None,
) -> TraceDiff:
    """Compare baseline ``a`` with ``b`` over the same steps: step time, breakdown, ops and
    kernels per step. ``steps_a``/``steps_b`` pick the ``ProfilerStep`` numbers of each side
    (one given: the same numbers on both). A ``JobDir`` side is read one file at a time."""
    ra, rb = _common_ranks(ranks_of(a), ranks_of(b))
    ia, ib = choose_steps(ra, rb, steps_a, steps_b, sides=(a, b))
    ra, rb = (side.readable(r) if isinstance(side, JobDir) else r for side, r in ((a, ra), (b, rb)))
    for side, ranks in ((a, ra), (b, rb)):
        if isinstance(side, JobDir) and not ranks:
            from torchscope.errors import TraceError

            raise TraceError(str(side.path), "no readable trace among its files; " + "; ".join(side.said))
    sa, sb = _side(a, ia, ra), _side(b, ib, rb)
    return TraceDiff(sa, sb, _compare(sa.ops, sb.ops), _compare(sa.kernels, sb.kernels))
