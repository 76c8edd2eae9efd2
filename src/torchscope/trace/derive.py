"""Derive the linked columns of a Trace once, vectorized: nesting, self time, steps, launches.

Every reader (JSON, live capture) produces raw columns; this module turns them into the
relations analyses need, without a Python loop per event:

* ``parent``/``depth``: the innermost enclosing host event on the same thread. With rows of a
  thread ordered by (start, -dur), the parent of a row is the nearest earlier row whose end is
  not before its end (a "previous greater element" problem), solved by pointer jumping in
  O(n log n) numpy work.
* ``self_ns``: duration minus the *union* of the children's intervals. torch's "Self CPU"
  subtracts the plain sum, which goes negative when children overlap (Python frames,
  partially nested ranges); ours never does.
* ``step``: the ``ProfilerStep#N`` whose window contains the event's start; device work takes
  the step of the host call that launched it (kernels often run after their step ended).
* ``launcher``/``op``: device work -> runtime call by correlation id (or by an ac2g flow when
  the device event carries no correlation, as on MTIA); runtime call -> innermost enclosing
  ``cpu_op``/``user_annotation`` on its thread, else the op with the same External id.
* memory ``op``: innermost enclosing op on the allocating thread at the instant.
* flows: each ``s``/``f`` endpoint binds to the innermost event enclosing it on its track.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import polars as pl

from torchscope.trace.keys import lookup
from torchscope.trace.model import Later
from torchscope.trace.schema import DEVICE_KINDS, HOST_KINDS, KIND, step_spans
from torchscope.trace.tree import climb, depths, nearest_ancestor

try:  # our C extension (optional: NumPy computes the same without it)
    from torchscope.trace import _scan
except ImportError:  # pragma: no cover - depends on the build
    _scan = None  # type: ignore[assignment]

I64 = npt.NDArray[np.int64]
Mask = npt.NDArray[np.bool_]

OP_KINDS = ("cpu_op", "user_annotation", "collective")
LAUNCH_FLOWS = ("ac2g", "async", "async_cpu_to_gpu", "ac2d")


def in_id_order(box: list[pl.DataFrame]) -> pl.DataFrame:
    """The events in ``box`` (taken out of it) in id order: start, then longest first, then
    file order, as ``derive`` takes them.

    A large table is sorted a column at a time, each freed once gathered, so that memory
    holds the events once plus one column, not twice: ``DataFrame.sort`` of a large file's
    pieces (one chunk each) first joined every column into one chunk and then gathered a
    sorted copy, and inside ``derive`` the caller's unsorted frame lived on beside it (a
    1.9M-event trace of 394 MB peaked at 1.5 GB, now 1.2 GB; the sort takes 0.35 s instead
    of 0.25 s). Up to ``_SORTED_WHOLE_UP_TO`` one sort is faster, and the copy small."""
    ev = box.pop()
    keys = ["start_ns", "dur_ns"] + (["raw_row"] if "raw_row" in ev.columns else [])
    descending = [False, True] + [False] * (len(keys) - 2)
    if ev.n_chunks() == 1 or ev.estimated_size() < _SORTED_WHOLE_UP_TO:
        # one sort is faster (the 87 MB MTIA trace's 5 pieces: 9 ms against 17-20 ms); rows
        # already in file order keep it among equal keys by a stable sort on two keys (6 ms)
        if len(keys) == 3 and ev["raw_row"].is_sorted():
            return ev.sort(keys[:2], descending=descending[:2], maintain_order=True)
        return ev.sort(keys, descending=descending)
    order = ev.select(pl.arg_sort_by(keys, descending=descending)).to_series()
    columns = ev.get_columns()
    del ev
    ordered: list[pl.Series] = []
    while columns:  # a few columns at a time: gathered in parallel, and freed as a few
        few = pl.DataFrame(columns[:_SORTED_AT_ONCE])
        del columns[:_SORTED_AT_ONCE]
        ordered += few.select(pl.all().gather(order)).get_columns()
        del few
    return pl.DataFrame(ordered)


_SORTED_AT_ONCE = 4
# events tables up to this size are sorted in one go, a copy beside them (a file's pieces
# joined); larger ones a few columns at a time, so that the copy is never whole
_SORTED_WHOLE_UP_TO = 256 * 1024 * 1024


def derive(
    ev: pl.DataFrame, memory: pl.DataFrame, flows: pl.DataFrame
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame | Later]:
    """Fill the derived columns of all three tables; ``ev`` is in id order (``in_id_order``).

    The flows come back bound to their events only when device work needed them to find its
    launch; otherwise as the function that binds them (``model.Deferred``: a Trace makes
    them when they are first read)."""
    ev = ev.with_columns(
        pl.int_range(ev.height, dtype=pl.Int32).alias("id"),
        pl.col("kind").cast(KIND),
    )
    n = ev.height
    kind = ev["kind"].to_physical().to_numpy().astype(np.int8)
    pid = ev["pid"].to_numpy()
    tid = ev["tid"].to_numpy()
    start = ev["start_ns"].to_numpy()
    end = start + ev["dur_ns"].to_numpy()

    host = np.isin(kind, _codes(HOST_KINDS))
    parent, depth, self_ns = _call_tree(np.flatnonzero(host), pid, tid, start, end, n)
    _overhead_out_of_self(ev, host, parent, self_ns)

    is_op = np.isin(kind, _codes(OP_KINDS))
    device = np.isin(kind, _codes(DEVICE_KINDS))
    launcher = _launchers(ev, kind, device)
    bound: pl.DataFrame | Later
    if _flows_launch(flows, device, launcher):
        bound = _bind_flows(flows, ev, parent, start, end)
        _launch_by_flows(launcher, kind, device, bound)
    else:
        bound = _bind_later(flows)
    op = _ops(ev, kind, parent, launcher, is_op, device)
    step = _steps(ev, start, launcher, op, device)

    ev = ev.with_columns(
        pl.Series("parent", parent.astype(np.int32)),
        pl.Series("depth", depth.astype(np.int16)),
        pl.Series("self_ns", self_ns),
        pl.Series("step", step.astype(np.int32)),
        pl.Series("launcher", launcher.astype(np.int32)),
        pl.Series("op", op.astype(np.int32)),
    )
    memory = _memory_ops(memory, ev, parent, is_op, start, end)
    return ev, memory, bound


def profiler_overhead(ev: pl.DataFrame) -> pl.Series:
    """Kineto's own work in the profiled process (``cat: overhead``: "Activity Buffer Request",
    CUPTI asking for a buffer, ~2 ms, usually inside the session's first CUDA calls)."""
    return (ev["kind"] == "other") & (ev["cat"] == "overhead")  # categorical: no cast of every row


def _main_thread(ev: pl.DataFrame, host: Mask) -> int | None:
    """The thread torch gives Kineto's overhead events: the process's main thread (tid == pid),
    else the thread of the earliest host event."""
    rows = np.flatnonzero(host)
    if rows.size == 0:
        return None
    tid = ev["tid"].to_numpy()[rows]
    main = rows[tid == ev["pid"].to_numpy()[rows]]
    return int(ev["tid"][int(main[0] if main.size else rows[0])])


def overhead_holders(ev: pl.DataFrame, host: Mask, parent: npt.NDArray[np.integer]) -> tuple[I64, I64]:
    """Kineto's overhead events, and for each the innermost ``host`` event of the main thread
    that holds it (-1 where none does).

    Kineto writes a buffer request on a track of its own (pid -1), but it ran inside the call
    that needed the buffer: torch nests it there (seen with torch 2.11 on an H200, under
    ``aten::copy_`` and ``aten::cudnn_convolution``). Rows must be in id order (start order).
    """
    rows = np.flatnonzero(profiler_overhead(ev).to_numpy())
    holder = np.full(rows.size, -1, np.int64)
    tid = _main_thread(ev, host) if rows.size else None
    if tid is None:
        return rows.astype(np.int64), holder
    start = ev["start_ns"].to_numpy()
    end = start + ev["dur_ns"].fill_null(0).to_numpy()
    on_main = np.flatnonzero(host & (ev["tid"].to_numpy() == tid))
    # the last main-thread event to start before each overhead event, then up its ancestors
    last = np.searchsorted(start[on_main], start[rows], "right") - 1
    for k, (row, i) in enumerate(zip(rows.tolist(), last.tolist(), strict=True)):
        cur = int(on_main[i]) if i >= 0 else -1
        while cur >= 0 and not (host[cur] and end[cur] >= end[row]):
            cur = int(parent[cur])
        holder[k] = cur
    return rows.astype(np.int64), holder


def _overhead_out_of_self(ev: pl.DataFrame, host: Mask, parent: I64, self_ns: I64) -> None:
    """The time of Kineto's own work leaves the self time of the event it ran inside, so that a
    copy is not shown 2 ms slower than it was (in place)."""
    rows, holder = overhead_holders(ev, host, parent)
    dur = ev["dur_ns"].fill_null(0).to_numpy()
    for row, h in zip(rows.tolist(), holder.tolist(), strict=True):
        if h >= 0:
            self_ns[h] = max(0, int(self_ns[h]) - int(dur[row]))


def _codes(kinds: tuple[str, ...]) -> list[int]:
    cats = KIND.categories.to_list()
    return [cats.index(k) for k in kinds]


# -- nesting ------------------------------------------------------------------------------------
def _call_tree(rows: I64, pid: I64, tid: I64, start: I64, end: I64, n: int) -> tuple[I64, I64, I64]:
    """``parent``, ``depth`` and ``self_ns`` of every row (host rows ``rows`` nest).

    Our C extension does it in one pass with a stack per thread (``_scan.nest``); without it,
    NumPy does the same by pointer jumping, level by level (a test checks they agree on every
    shared trace and on random intervals). Deep Python stacks (``with_stack``) made the NumPy way
    ~0.1 s of 366k events; its straddles (``_less_straddled``) 20-70 ms more of 100k host rows.
    """
    if _scan is None:
        parent = _nesting(rows, pid, tid, start, end, n)
        self_ns = _less_straddled(_self_time(parent, start, end), rows, parent, pid, tid, start, end)
        return parent, depths(parent), self_ns
    order = rows[np.lexsort((tid[rows], pid[rows]))]  # stable: id order inside a thread
    got = _scan.nest(
        order.astype(np.int64, copy=False),
        *(np.ascontiguousarray(a, dtype=np.int64) for a in (start, end, pid, tid)),
    )
    parent, depth, covered = (np.frombuffer(memoryview(b), dtype=np.int64) for b in got)
    return parent, depth, np.maximum(end - start - covered, 0)  # straddles included: one pass


def _less_straddled(self_ns: I64, rows: I64, parent: I64, pid: I64, tid: I64, start: I64, end: I64) -> I64:
    """``self_ns`` less the part of each row that a later row on its thread covers while not
    nested in it: one that starts inside the row and ends after it (a straddle).

    Spans that a ``with`` does not scope straddle Python frames: a ``ProfilerStep#N`` that
    ``step()`` begins inside a function and ends in its next call (``torchscope run`` steps at
    ``optimizer.step()``, a framework's callback stepping the profiler). Nesting gives the
    straddler neither as the row's child nor the row as its parent, so the time they share was
    self time of both: a 978 ms cycle's table read 1.78 s of self CPU, ``ProfilerStep*`` first
    with the whole of ``train_step`` again. torch's tables count it twice too (its tree is this
    one); ours count each instant once. The row's children all start before the straddler
    (anything after is nested in it), so what it covers beyond them is the end of the row
    from the straddler's start or the children's last end, whichever is later.
    """
    if rows.size < 2:
        return self_ns
    order = rows[np.lexsort((tid[rows], pid[rows]))]  # thread by thread, in id (start) order
    s, e = start[order], end[order]
    m = order.size
    same = np.zeros(m, bool)
    same[:-1] = (pid[order][1:] == pid[order][:-1]) & (tid[order][1:] == tid[order][:-1])
    # the next later row on the thread that ends after each row (m: none), by pointer jumping:
    # every row skipped ends no later than the one jumped from, hence no later than this one
    # (a chain never leaves its thread: a thread's last row has none)
    nxt = np.where(same, np.arange(1, m + 1), m)
    active = np.flatnonzero(nxt < m)
    while active.size:
        active = active[e[nxt[active]] <= e[active]]
        nxt[active] = nxt[nxt[active]]
        active = active[nxt[active] < m]
    k = np.flatnonzero(nxt < m)
    k = k[s[nxt[k]] < e[k]]  # starting inside it
    if k.size == 0:
        return self_ns
    j = nxt[k]
    rows_k = order[k]
    # the last end of each row's children (clipped to the row), where the straddle's cover starts
    last = np.full(self_ns.size, np.iinfo(np.int64).min, np.int64)
    kids = rows[parent[rows] >= 0]
    np.maximum.at(last, parent[kids], np.minimum(end[kids], end[parent[kids]]))
    cover = e[k] - np.maximum(s[j], last[rows_k])
    out = self_ns.copy()
    out[rows_k] = np.maximum(out[rows_k] - np.maximum(cover, 0), 0)
    return out


def _nesting(rows: I64, pid: I64, tid: I64, start: I64, end: I64, n: int) -> I64:
    """Parent id of every row in ``rows`` (ids sorted by start, -dur); -1 elsewhere."""
    parent = np.full(n, -1, np.int64)
    if rows.size == 0:
        return parent
    order = rows[np.lexsort((tid[rows], pid[rows]))]  # stable: keeps (start, -dur) inside a thread
    s, e = start[order], end[order]
    first = np.ones(order.size, bool)
    first[1:] = (pid[order][1:] != pid[order][:-1]) | (tid[order][1:] != tid[order][:-1])
    cand = np.arange(-1, order.size - 1, dtype=np.int64)
    cand[first] = -1
    result = np.full(order.size, -1, np.int64)
    active = np.flatnonzero(cand >= 0)
    while active.size:
        c = cand[active]
        contains = (e[c] >= e[active]) & ((e[c] > s[active]) | (s[c] == s[active]))
        result[active[contains]] = c[contains]
        active = active[~contains]
        # pointer jump: every row between cand[c] and c ends before c, hence before us
        nxt = cand[cand[active]]
        cand[active] = nxt
        active = active[nxt >= 0]
    parent[order] = np.where(result >= 0, order[np.maximum(result, 0)], -1)
    return parent


def _self_time(parent: I64, start: I64, end: I64) -> I64:
    """Duration minus the union of the children's intervals (clipped to the parent)."""
    self_ns = end - start
    kids = np.flatnonzero(parent >= 0)  # ascending id = ascending start
    if kids.size == 0:
        return self_ns
    kids = kids[np.argsort(parent[kids], kind="stable")]  # grouped by parent, by start inside
    p = parent[kids]
    s = start[kids]
    e = np.minimum(end[kids], end[p])
    first = np.ones(kids.size, bool)
    first[1:] = p[1:] != p[:-1]
    group = np.cumsum(first) - 1
    # running max of the ends inside each group: lift every group above the previous one
    t0 = int(min(s.min(), e.min()))
    width = int(max(s.max(), e.max())) - t0 + 1
    if width * (int(group[-1]) + 1) < 2**62:
        lift = group.astype(np.int64) * width
        run = np.maximum.accumulate(e - t0 + lift) - lift + t0
    else:  # pragma: no cover - a trace spanning centuries
        run = pl.DataFrame({"g": group, "e": e}).select(pl.col("e").cum_max().over("g"))["e"].to_numpy()
    prev = np.empty_like(run)
    prev[1:] = run[:-1]
    prev[first] = s[first]
    covered = np.maximum(e - np.maximum(s, prev), 0)
    sums = np.zeros(self_ns.size, np.int64)
    np.add.at(sums, p, covered)
    return np.maximum(self_ns - sums, 0)


# -- binding points to events -------------------------------------------------------------------
def _enclosing(
    probes: pl.DataFrame, ev: pl.DataFrame, parent: I64, target: Mask, start: I64, end: I64
) -> I64:
    """For each probe (pid, tid, ts_ns): the innermost ``target`` event on its track enclosing ts.

    The latest-starting event at or before ts on the probe's track (the innermost of equal
    starts: the last in id order) is a descendant of every event enclosing ts, so walking up
    its parents finds the innermost enclosing target. ``ev`` holds the candidate rows (an
    ``id`` column into the full arrays), in id order, hence sorted by start: one as-of join
    per track finds that latest start, hashing the tracks instead of sorting the events.
    """
    out = np.full(probes.height, -1, np.int64)
    if probes.height == 0 or ev.height == 0:
        return out
    left = probes.select("pid", "tid", "ts_ns").with_row_index("probe").sort("ts_ns")
    right = ev.select("pid", "tid", "start_ns", pl.col("id").cast(pl.Int64))
    found = left.join_asof(
        right,
        left_on="ts_ns",
        right_on="start_ns",
        by=["pid", "tid"],
        strategy="backward",  # the last of equal starts: the innermost
        check_sortedness=False,  # both sides are sorted on the join key (events by id)
    )
    out[found["probe"].to_numpy()] = found["id"].fill_null(-1).to_numpy()
    ts = probes["ts_ns"].to_numpy()

    def encloses(which: I64, node: I64) -> Mask:
        return target[node] & (start[node] <= ts[which]) & (ts[which] <= end[node])

    return climb(parent, out, encloses, 4096)


def _bind_later(flows: pl.DataFrame) -> Later:
    """``_bind_flows`` run later, from the events ``derive`` made (their ``parent`` column)."""

    def bind(ev: pl.DataFrame) -> pl.DataFrame:
        start = ev["start_ns"].to_numpy()
        parent = ev["parent"].to_numpy().astype(np.int64)
        return _bind_flows(flows, ev, parent, start, start + ev["dur_ns"].to_numpy())

    return bind


def _bind_flows(flows: pl.DataFrame, ev: pl.DataFrame, parent: I64, start: I64, end: I64) -> pl.DataFrame:
    if flows.height == 0:
        return pl.DataFrame(schema={"kind": pl.String, "flow_id": pl.Int64, "src": pl.Int32, "dst": pl.Int32})
    everything = np.ones(ev.height, bool)
    bound = _enclosing(flows, ev, parent, everything, start, end)
    _by_correlation(flows, ev, bound)
    ends = flows.with_columns(pl.Series("row", bound))
    src = ends.filter(pl.col("ph") == "s").unique(["cat", "flow_id"], keep="first", maintain_order=True)
    dst = ends.filter(pl.col("ph") == "f")
    linked = dst.select("cat", "flow_id", pl.col("row").alias("dst")).join(
        src.select("cat", "flow_id", pl.col("row").alias("src")),
        on=["cat", "flow_id"],
        how="full",
        coalesce=True,
    )
    return linked.select(
        pl.col("cat").alias("kind"),
        "flow_id",
        pl.col("src").fill_null(-1).cast(pl.Int32),
        pl.col("dst").fill_null(-1).cast(pl.Int32),
    ).sort("kind", "flow_id", "src", "dst")


def _by_correlation(flows: pl.DataFrame, ev: pl.DataFrame, bound: I64) -> None:
    """A launch flow's end binds to the event on its track whose correlation id is the flow's
    id, where one encloses the end's time (in place, over ``bound``).

    Kineto's launch flows carry the runtime call's correlation id, and time alone is ambiguous
    at the microsecond: a ``cudaFuncSetAttribute`` of no duration written at the same time as
    the ``cudaLaunchKernel`` after it is the innermost event there, and 63 of diff_control's
    kernels had a flow starting on it while their ``launcher`` (by correlation) was the launch.
    """
    launch = flows["cat"].is_in(list(LAUNCH_FLOWS))
    if not launch.any():
        return
    ends = (
        flows.with_row_index("end")
        .filter(launch)
        .select("end", "pid", "tid", "ts_ns", pl.col("flow_id").alias("correlation"))
    )
    owners = ev.filter(pl.col("correlation").is_not_null()).select(
        "pid", "tid", "correlation", "id", "start_ns", "dur_ns"
    )
    found = (
        ends.join(owners, on=["pid", "tid", "correlation"], how="inner")
        .filter((pl.col("start_ns") <= pl.col("ts_ns")) & (pl.col("ts_ns") <= pl.col("start_ns") + pl.col("dur_ns")))
        .group_by("end")
        .agg(pl.col("id").max())  # of two, the innermost (ids are in start order)
    )
    bound[found["end"].to_numpy()] = found["id"].to_numpy()


# -- launches and ops ---------------------------------------------------------------------------
def _launchers(ev: pl.DataFrame, kind: npt.NDArray[np.int8], device: Mask) -> I64:
    """The runtime call that launched each device event, by correlation id (-1: none found);
    of two runtime calls with one id, the first."""
    launcher = np.full(ev.height, -1, np.int64)
    if not device.any():
        return launcher
    correlation = ev["correlation"]
    known = correlation.is_not_null().to_numpy()
    corr = correlation.fill_null(0).to_numpy()
    (rt_code,) = _codes(("runtime",))
    runtime = np.flatnonzero((kind == rt_code) & known)
    dev = np.flatnonzero(device & known)
    launcher[dev] = lookup(corr[runtime], runtime, corr[dev], keep="first")
    return launcher


def _flows_launch(flows: pl.DataFrame, device: Mask, launcher: I64) -> bool:
    """Whether a launch flow may name the launch of device work its correlation id did not
    (MTIA's device events have none; a ``ac2g`` flow links them): else binding the flows can
    wait until they are read."""
    if flows.height == 0:
        return False
    return bool((device & (launcher < 0)).any()) and bool(flows["cat"].is_in(list(LAUNCH_FLOWS)).any())


def _launch_by_flows(launcher: I64, kind: npt.NDArray[np.int8], device: Mask, flows: pl.DataFrame) -> None:
    """Device work without a launch found by correlation takes its launch flow's runtime call."""
    (rt_code,) = _codes(("runtime",))
    f = flows.filter(pl.col("kind").is_in(list(LAUNCH_FLOWS)) & (pl.col("src") >= 0) & (pl.col("dst") >= 0))
    src = f["src"].to_numpy().astype(np.int64)
    dst = f["dst"].to_numpy().astype(np.int64)
    ok = device[dst] & (kind[src] == rt_code) & (launcher[dst] < 0)
    launcher[dst[ok]] = src[ok]


def _ops(
    ev: pl.DataFrame, kind: npt.NDArray[np.int8], parent: I64, launcher: I64, is_op: Mask, device: Mask
) -> I64:
    n = ev.height
    op = np.full(n, -1, np.int64)
    needs = np.isin(kind, _codes(("runtime", "sync")))
    op[np.flatnonzero(needs)] = nearest_ancestor(parent, np.flatnonzero(needs), is_op)
    has_l = device & (launcher >= 0)
    op[has_l] = op[launcher[has_l]]
    # External id: the op whose External id the runtime call / device event carries
    missing = (needs | device) & (op < 0)
    if missing.any():
        external = ev["external_id"]
        known = external.is_not_null().to_numpy()
        ext = external.fill_null(0).to_numpy()
        owners = np.flatnonzero(is_op & known)
        want = np.flatnonzero(missing & known)
        # of two ops with one External id, the last (the innermost: ids are in start order)
        op[want] = lookup(ext[owners], owners, ext[want], keep="last")
    return op


def _steps(ev: pl.DataFrame, start: I64, launcher: I64, op: I64, device: Mask) -> I64:
    n = ev.height
    step = np.full(n, -1, np.int64)
    # a number repeated is one step, its first span: the later spans' events are in no step
    # (the reader says so)
    steps = step_spans(ev)
    if steps.height == 0:
        return step
    s0 = steps["start_ns"].to_numpy()
    s1 = s0 + steps["dur_ns"].to_numpy()
    num = steps["step"].to_numpy()
    idx = np.searchsorted(s0, start, side="right") - 1
    inside = (idx >= 0) & (start <= s1[np.maximum(idx, 0)])
    step[inside] = num[idx[inside]]
    via_l = device & (launcher >= 0)
    step[via_l] = step[launcher[via_l]]
    via_op = device & (launcher < 0) & (op >= 0)
    step[via_op] = step[op[via_op]]
    return step


def _memory_ops(
    memory: pl.DataFrame, ev: pl.DataFrame, parent: I64, is_op: Mask, start: I64, end: I64
) -> pl.DataFrame:
    if memory.height == 0:
        return memory.with_columns(pl.lit(-1, dtype=pl.Int32).alias("op"))
    owner = _enclosing(memory, ev.filter(pl.Series(is_op)), parent, is_op, start, end)
    return memory.with_columns(pl.Series("op", owner.astype(np.int32)))
