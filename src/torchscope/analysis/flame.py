"""Flame graphs: where the time went, as a tree of call paths with a total and a self time each.

Five trees come out of one shape (``Flame``, parallel numpy arrays, parents before children):

* ``host_flame``: host time by call stack. Every host event (Python frames of a ``with_stack``
  trace, ops, annotations, runtime calls) nested per thread, merged by path: the same path
  called a thousand times is one node with the summed time. ``ProfilerStep#N`` is merged into
  ``ProfilerStep#*`` so the steps add up instead of splitting the graph.
* ``module_flame``: host time by ``nn.Module`` path (the ``nn.Module: X`` scopes only).
* ``device_flame``: device time (kernels, memcpy, memset) by the op that launched it, under
  that op's host call stack, the kernel's name as the leaf. Time on parallel streams adds up.
* ``sampled_flame``: the Python stacks ``torchscope run``'s sampler caught, weighted by time.
* ``diff_flame``: B's tree with A's value at the same path beside each node (colour by change).

``folded_stacks`` writes the host tree in the text format other flame-graph tools read
(``export --to stacks``).

No Python object per event: paths are merged level by level with ``np.unique`` on
(parent node, name) keys, totals summed bottom-up with ``np.add.at``. A node's self time is
its events' duration minus their children's (never below zero), and its total is its self plus
its children's totals, so ``total == self + sum(children)`` holds exactly on every node.

Bounded size: ``fold`` keeps the nodes whose total is at least ``min_fraction`` of the root's
(and at most ``max_nodes`` of them) and adds up the rest of each parent's children into one
``(other)`` child, so the page stays small on the largest trace.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import polars as pl

from torchscope.analysis.frames import tool_frames
from torchscope.analysis.modules import MODULE_PREFIX
from torchscope.trace.derive import overhead_holders, profiler_overhead
from torchscope.trace.model import Trace
from torchscope.trace.schema import DEVICE_KINDS, HOST_KINDS
from torchscope.trace.tree import by_level, depths, nearest_ancestor

if TYPE_CHECKING:
    from torchscope.runner.sampler import HotSpots

I64 = npt.NDArray[np.int64]
OTHER = "(other)"
NO_OP = "(no launching op)"
MIN_FRACTION = 0.0005  # nodes below 0.05 % of the root fold into "(other)"
MAX_NODES = 5000  # and never more than this many, whatever the trace


@dataclass(frozen=True)
class Flame:
    """A flame tree: node ``i`` is called ``names[name[i]]``, its parent is ``parent[i]``
    (``-1`` for the root, node 0), and parents come before their children."""

    title: str
    names: tuple[str, ...]
    name: I64
    parent: I64
    total: I64  # ns in this node and everything under it
    self_: I64  # ns in this node itself: total minus the children's totals
    base: I64 | None = None  # diff graphs: A's total at the same path (B's is ``total``)
    events: int = 0  # how many events (or samples) the tree was made of

    @property
    def size(self) -> int:
        return int(self.name.size)

    def label(self, node: int) -> str:
        return self.names[int(self.name[node])]

    def path(self, node: int) -> tuple[str, ...]:
        """The names from the root's child down to ``node``."""
        out: list[str] = []
        while node > 0:
            out.append(self.label(node))
            node = int(self.parent[node])
        return tuple(reversed(out))

    def find(self, *path: str) -> int:
        """The node at ``path`` (names below the root), or -1."""
        node = 0
        for part in path:
            kids = np.flatnonzero(self.parent == node)
            match = [k for k in kids.tolist() if self.label(k) == part]
            if not match:
                return -1
            node = match[0]
        return node

    def to_json(self) -> dict[str, Any]:
        """The page's form: the name table once, then one integer list per column."""
        out: dict[str, Any] = {
            "title": self.title,
            "unit": "ns",
            "events": self.events,
            "names": list(self.names),
            "name": self.name.tolist(),
            "parent": self.parent.tolist(),
            "total": self.total.tolist(),
            "self": self.self_.tolist(),
        }
        if self.base is not None:
            out["base"] = self.base.tolist()
        return out


# -- building a tree from rows that form a forest ---------------------------------------------


class _Builder:
    """Nodes appended level by level; ``node_of`` merges rows with the same path."""

    def __init__(self, title: str) -> None:
        self.title = title
        self.names: list[str] = ["all"]
        self.name_index: dict[str, int] = {"all": 0}
        self.name_parts: list[I64] = [np.zeros(1, np.int64)]
        self.parent_parts: list[I64] = [np.full(1, -1, np.int64)]
        self.count = 1

    def intern(self, table: list[str]) -> I64:
        """Indices of ``table``'s names in the builder's name table (one entry per distinct name)."""
        out = np.empty(len(table), np.int64)
        for i, n in enumerate(table):
            out[i] = self.name_index.setdefault(n, len(self.names))
            if out[i] == len(self.names):
                self.names.append(n)
        return out

    def add(self, parent_node: I64, name: I64) -> I64:
        """The node of each (parent node, name) pair, creating the new ones: one node per path."""
        if parent_node.size == 0:
            return np.zeros(0, np.int64)
        key = parent_node * (len(self.names) + 1) + name
        uniq, first, inverse = np.unique(key, return_index=True, return_inverse=True)
        nodes = self.count + np.arange(uniq.size, dtype=np.int64)
        self.parent_parts.append(parent_node[first])
        self.name_parts.append(name[first])
        self.count += uniq.size
        return nodes[inverse.reshape(-1)]

    def add_forest(self, top: I64, parent: I64, name: I64) -> I64:
        """Merge a forest of rows (``parent``: row index or -1, whose roots hang under the nodes
        ``top``) into nodes by path; returns each row's node."""
        node_of = np.full(parent.size, -1, np.int64)
        for rows in by_level(depths(parent)):
            par = parent[rows]
            pnode = np.where(par >= 0, node_of[np.maximum(par, 0)], top[rows])
            node_of[rows] = self.add(pnode, name[rows])
        return node_of

    def finish(self, self_ns: I64, events: int) -> Flame:
        """Totals bottom-up, zero-time nodes dropped, siblings biggest first."""
        parent = np.concatenate(self.parent_parts)
        name = np.concatenate(self.name_parts)
        self_full = np.zeros(self.count, np.int64)
        self_full[: self_ns.size] = self_ns
        return _ordered(self.title, tuple(self.names), name, parent, self_full, events)


def _ordered(
    title: str,
    names: tuple[str, ...],
    name: I64,
    parent: I64,
    self_ns: I64,
    events: int,
    base: I64 | None = None,
) -> Flame:
    """A Flame with totals summed, empty nodes removed and nodes in level order, each level's
    nodes grouped by parent, biggest first (the page lays them out in that order)."""
    levels = by_level(depths(parent))
    total = self_ns.copy()
    for rows in reversed(levels[1:]):
        np.add.at(total, parent[rows], total[rows])
    keep = total > 0
    keep[0] = True
    new_pos = np.full(parent.size, -1, np.int64)
    new_pos[0] = 0
    placed = [np.zeros(1, np.int64)]
    count = 1
    for level in levels[1:]:
        rows = level[keep[level]]
        if rows.size == 0:
            break
        # parent's new position, then biggest first, then name: a stable, deterministic order
        rows = rows[np.lexsort((name[rows], -total[rows], new_pos[parent[rows]]))]
        new_pos[rows] = count + np.arange(rows.size)
        placed.append(rows)
        count += rows.size
    old = np.concatenate(placed)
    new_parent = np.where(parent[old] >= 0, new_pos[np.maximum(parent[old], 0)], -1)
    new_parent[0] = -1
    return Flame(
        title=title,
        names=names,
        name=name[old],
        parent=new_parent,
        total=total[old],
        self_=self_ns[old],
        base=None if base is None else base[old],
        events=events,
    )


def _row_self(rows_parent: I64, dur: I64) -> I64:
    """Each row's duration minus its children's (clamped at zero)."""
    kids = np.flatnonzero(rows_parent >= 0)
    child_sum = np.zeros(dur.size, np.int64)
    np.add.at(child_sum, rows_parent[kids], dur[kids])
    return np.maximum(dur - child_sum, 0)


def _name_codes(names: pl.Series) -> tuple[I64, list[str]]:
    """Per row, an index into a table of its (normalized) name: steps merge into ``#*`` and
    object addresses in Python frame names are dropped, so runs and processes compare.

    Normalized once per distinct name, not per row (a trace repeats a few thousand names
    over its 100k+ rows): the dense rank of a text depends only on the set of texts.
    """
    rows = pl.DataFrame({"name": names})
    distinct = rows.unique().with_columns(
        pl.col("name")
        .cast(pl.String)
        .fill_null("?")
        .str.replace(r"^ProfilerStep#\d+$", "ProfilerStep#*")
        .str.replace_all(r" at 0x[0-9a-fA-F]+", "")  # "<built-in method ... at 0x7f..>": per process
        .alias("text")
    )
    distinct = distinct.with_columns((pl.col("text").rank("dense") - 1).cast(pl.Int64).alias("code"))
    codes = rows.join(distinct, on="name", how="left", maintain_order="left", nulls_equal=True)["code"]
    return codes.to_numpy().astype(np.int64), distinct["text"].unique().sort().to_list()


def _thread_label(trace: Trace) -> dict[tuple[int, int], str]:
    """Each thread's name without its id ("thread 2568503 (python3.8)" -> "python3.8"): ids
    differ from run to run, so a diff matches threads by name; same-named threads merge."""
    labels: dict[tuple[int, int], str] = {}
    for pid, tid, tname in trace.threads.select("pid", "tid", "thread_name").iter_rows():
        if tname:
            labels[(pid, tid)] = _THREAD_ID.sub(r"\1", tname).strip() or "thread"
    return labels


_THREAD_ID = re.compile(r"^thread -?\d+\s*\((.*)\)$|^thread -?\d+$")


def _local_parent(parent_rows: I64, rows: I64, n: int) -> I64:
    """``parent_rows`` (trace row ids) as indices into ``rows``, -1 where not in ``rows``."""
    where = np.full(n, -1, np.int64)
    where[rows] = np.arange(rows.size)
    return np.where(parent_rows >= 0, where[np.maximum(parent_rows, 0)], -1)


def _host_nodes(trace: Trace, b: _Builder) -> tuple[I64, I64, I64]:
    """Host rows merged into ``b`` under one node per thread: (rows, their node, their self ns).

    torchscope's own Python frames (``frames.tool_frames``: the runner that executes a
    ``torchscope run`` script, the CLI and the console script above it) are left out and what
    they hold hangs from their nearest kept ancestor: every stack of a run began with eight of
    them before the script's ``<module>``; key-averages tables leave them out too."""
    ev = trace.events
    is_host = ev["kind"].is_in(list(HOST_KINDS)).to_numpy() & (ev["dur_ns"].to_numpy() > 0)
    is_host &= ~tool_frames(trace)
    rows = np.flatnonzero(is_host)
    if rows.size == 0:
        return rows, rows, rows
    host = ev[rows]
    all_parent = ev["parent"].fill_null(-1).to_numpy().astype(np.int64)
    parent = _local_parent(nearest_ancestor(all_parent, rows, is_host), rows, ev.height)
    pid, tid = host["pid"].to_numpy(), host["tid"].to_numpy()
    pids, pid_code = np.unique(pid, return_inverse=True)
    tids, tid_code = np.unique(tid, return_inverse=True)
    keys, thread_code = np.unique(
        pid_code.reshape(-1) * tids.size + tid_code.reshape(-1), return_inverse=True
    )
    thread_code = thread_code.reshape(-1).astype(np.int64)
    labels = _thread_label(trace)
    thread_names = [
        labels.get((int(pids[k // tids.size]), int(tids[k % tids.size])), "thread") for k in keys.tolist()
    ]
    thread_nodes = b.add(np.zeros(len(thread_names), np.int64), b.intern(thread_names))
    codes, table = _name_codes(host["name"])
    node = b.add_forest(thread_nodes[thread_code], parent, b.intern(table)[codes])
    # the Trace's self time: each instant once, where a span straddling a frame (a run's
    # ProfilerStep#N, begun inside optimizer.step()) made its duration less its children's
    # twice the thread's time (``derive._less_straddled``)
    return rows, node, host["self_ns"].fill_null(0).to_numpy().astype(np.int64)


def host_flame(trace: Trace) -> Flame:
    """Host time by call stack: per thread, every host event under its enclosing ones."""
    b = _Builder("Host time by call stack")
    rows, node, self_ns = _host_nodes(trace, b)
    node_self = np.zeros(b.count, np.int64)
    np.add.at(node_self, node, self_ns)
    return b.finish(node_self, int(rows.size))


def module_flame(trace: Trace) -> Flame:
    """Host time by ``nn.Module`` path: each module's time beyond its submodules is its self."""
    ev = trace.events
    is_mod = (
        ev["kind"].is_in(["python_function", "user_annotation"])
        & ev["name"].cast(pl.String).str.starts_with(MODULE_PREFIX)
    ).to_numpy()
    b = _Builder("Host time by nn.Module")
    rows = np.flatnonzero(is_mod)
    if rows.size == 0:
        return b.finish(np.zeros(1, np.int64), 0)
    all_parent = ev["parent"].fill_null(-1).to_numpy().astype(np.int64)
    parent = _local_parent(nearest_ancestor(all_parent, rows, is_mod), rows, ev.height)
    names = ev["name"][rows].cast(pl.String).str.strip_prefix(MODULE_PREFIX)
    codes, table = _name_codes(names)
    node = b.add_forest(np.zeros(rows.size, np.int64), parent, b.intern(table)[codes])
    dur = ev["dur_ns"].to_numpy()[rows].astype(np.int64)
    node_self = np.zeros(b.count, np.int64)
    np.add.at(node_self, node, _row_self(parent, dur))
    return b.finish(node_self, int(rows.size))


def device_flame(trace: Trace) -> Flame:
    """Device time by the op that launched it: the op's host stack, then the kernel's name."""
    ev = trace.events
    b = _Builder("Device time by launching op")
    dev = np.flatnonzero(ev["kind"].is_in(list(DEVICE_KINDS[:3])).to_numpy())
    if dev.size == 0:
        return b.finish(np.zeros(1, np.int64), 0)
    host_rows, host_node, _ = _host_nodes(trace, b)
    node_of_row = np.full(ev.height, -1, np.int64)
    node_of_row[host_rows] = host_node
    op = ev["op"].fill_null(-1).to_numpy().astype(np.int64)[dev]
    under = np.where(op >= 0, node_of_row[np.maximum(op, 0)], -1)
    orphan = under < 0
    if orphan.any():
        no_op = b.add(np.zeros(1, np.int64), b.intern([NO_OP]))
        under[orphan] = no_op[0]
    codes, table = _name_codes(ev["name"][dev])
    leaf = b.add(under, b.intern(table)[codes])
    node_self = np.zeros(b.count, np.int64)
    np.add.at(node_self, leaf, ev["dur_ns"].to_numpy()[dev].astype(np.int64))
    return b.finish(node_self, int(dev.size))


def sampled_flame(hotspots: HotSpots) -> Flame:
    """The sampler's Python stacks (``torchscope run``), each sample weighing its time.

    Built from the distinct stacks the sampler interned (one row per frame of each), never
    from the samples one by one: a stack's weight is the summed time of its samples.
    """
    from torchscope.runner.sampler import PROFILER_FRAME

    b = _Builder("Sampled Python time")
    if hotspots.samples == 0:
        return b.finish(np.zeros(1, np.int64), 0)
    weight = np.bincount(
        hotspots.stack_ids, weights=hotspots.weights_ns.astype(np.float64), minlength=len(hotspots.stacks)
    ).astype(np.int64)
    labels: list[str] = []
    parent: list[int] = []
    leaf_weight: list[int] = []
    for sid, stack in enumerate(hotspots.stacks):
        if not stack or weight[sid] <= 0:
            continue
        if stack[0] == PROFILER_FRAME:
            # our cycle stop and save ran inside the user's optimizer.step(): one node of its
            # own, as the hot-spot table's row, never frames (polars, Kineto) under the user's
            stack = (PROFILER_FRAME,)
        for depth, (filename, func, line) in enumerate(reversed(stack)):  # root first
            parent.append(len(labels) - 1 if depth else -1)
            labels.append(f"{func} ({filename.rsplit('/', 1)[-1]}:{line})")
            leaf_weight.append(0)
        leaf_weight[-1] = int(weight[sid])
    table = sorted(set(labels))
    index = {n: i for i, n in enumerate(table)}
    codes = b.intern(table)[np.array([index[n] for n in labels], np.int64)]
    rows_parent = np.array(parent, np.int64)
    node = b.add_forest(np.zeros(rows_parent.size, np.int64), rows_parent, codes)
    node_self = np.zeros(b.count, np.int64)
    np.add.at(node_self, node, np.array(leaf_weight, np.int64))
    return b.finish(node_self, hotspots.samples)


# -- bounding and comparing -------------------------------------------------------------------


def fold(flame: Flame, min_fraction: float = MIN_FRACTION, max_nodes: int = MAX_NODES) -> Flame:
    """Keep the nodes worth a pixel: those with at least ``min_fraction`` of the root's total,
    about ``max_nodes`` at most; each parent's other children become one ``(other)`` child.

    A child's total never exceeds its parent's, so the kept set is closed under ancestors.
    """
    if flame.size <= 1:
        return flame
    threshold = max(1.0, min_fraction * float(flame.total[0]))
    half = max(1, max_nodes // 2)  # each kept node may gain one "(other)" child
    if flame.size > half:  # the half-th biggest total bounds the count (ties aside)
        threshold = max(threshold, float(np.partition(flame.total, flame.size - half)[flame.size - half]))
    keep = flame.total >= threshold
    keep[0] = True
    has_parent = flame.parent >= 0
    dropped = np.flatnonzero(~keep & has_parent & keep[np.maximum(flame.parent, 0)])
    other = np.zeros(flame.size, np.int64)
    np.add.at(other, flame.parent[dropped], flame.total[dropped])
    kept = np.flatnonzero(keep)
    owners = np.flatnonzero(other > 0)
    names = flame.names if OTHER in flame.names else (*flame.names, OTHER)
    pos = np.full(flame.size, -1, np.int64)
    pos[kept] = np.arange(kept.size)
    parent = np.concatenate(
        (np.where(flame.parent[kept] >= 0, pos[np.maximum(flame.parent[kept], 0)], -1), pos[owners])
    )
    name = np.concatenate((flame.name[kept], np.full(owners.size, names.index(OTHER), np.int64)))
    self_ns = np.concatenate((flame.self_[kept], other[owners]))
    base = None
    if flame.base is not None:
        base_other = np.zeros(flame.size, np.int64)
        np.add.at(base_other, flame.parent[dropped], flame.base[dropped])
        base = np.concatenate((flame.base[kept], base_other[owners]))
    return _ordered(flame.title, names, name, parent, self_ns, flame.events, base)


def diff_flame(a: Flame, b: Flame) -> Flame:
    """B's tree (its widths) with ``base``: A's total at the same path, 0 where A has none.

    Paths are matched level by level on (B's node of the parent, name), vectorized. A path
    only A has gets no node (it has no width in B); its time still counts in its parent's A value.
    """
    b_index = {n: i for i, n in enumerate(b.names)}
    a_name_in_b = np.array([b_index.get(n, -1) for n in a.names], np.int64)[a.name]
    width = len(b.names) + 1
    b_keys = np.where(b.parent >= 0, b.parent * width + b.name, -1)
    order = np.argsort(b_keys, kind="stable")
    sorted_keys = b_keys[order]
    match = np.full(a.size, -1, np.int64)  # A node -> B node at the same path
    match[0] = 0
    for rows in by_level(depths(a.parent))[1:]:
        pb = match[a.parent[rows]]
        key = np.where((pb >= 0) & (a_name_in_b[rows] >= 0), pb * width + a_name_in_b[rows], -2)
        at = np.minimum(np.searchsorted(sorted_keys, key), sorted_keys.size - 1)
        found = sorted_keys[at] == key
        match[rows[found]] = order[at[found]]
    base = np.zeros(b.size, np.int64)
    hit = match >= 0
    base[match[hit]] = a.total[hit]
    return Flame(f"{b.title}: change from A", b.names, b.name, b.parent, b.total, b.self_, base, b.events)


# -- the dashboard's entry points -----------------------------------------------------------


FLAMES = (("host", host_flame), ("modules", module_flame), ("device", device_flame))


def flame_graphs(
    trace: Trace, min_fraction: float = MIN_FRACTION, max_nodes: int = MAX_NODES
) -> dict[str, Any]:
    """The page's flame graphs of one trace, by key (``host``, ``modules``, ``device``); a tree
    the trace has no data for is left out."""
    out: dict[str, Any] = {}
    for key, build in FLAMES:
        flame = build(trace)
        if flame.size > 1:
            out[key] = fold(flame, min_fraction, max_nodes).to_json()
    return out


def flame_diff(
    a: Trace, b: Trace, min_fraction: float = MIN_FRACTION, max_nodes: int = MAX_NODES
) -> dict[str, Any]:
    """Diff flame graphs (B's widths, A's value per node) for host time and device time."""
    out: dict[str, Any] = {}
    for key, build in FLAMES:
        fa, fb = build(a), build(b)
        if fb.size > 1:
            out[key] = fold(diff_flame(fa, fb), min_fraction, max_nodes).to_json()
    return out


def sampled_flame_json(hotspots: HotSpots | None) -> dict[str, Any] | None:
    """``torchscope run``'s sampled flame graph for the page, or None without samples."""
    if hotspots is None or hotspots.samples == 0:
        return None
    return fold(sampled_flame(hotspots)).to_json()


# Folded stacks hold every distinct path whole, so their size grows with the square of the
# depth: a recursion 100,000 frames deep would be ~60 GB of text (a 2,000-deep one is ~30 MB).
# Frames below this depth are one frame, ``DEEPER``, that holds their self time.
STACK_DEPTH_CAP = 2000
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
DEEPER = "(deeper frames)"


def folded_stacks(trace: Trace) -> list[tuple[str, int]]:
    """Host self time per call path, ``(path, self_us)``, paths as ``root;...;leaf`` per thread,
    frames named as the page's flame graph names them (``ProfilerStep#*``, no addresses), and
    at most ``STACK_DEPTH_CAP`` deep (what lies below is one ``DEEPER`` frame).

    Every host event is a frame, the runtime calls too (``cudaStreamSynchronize`` under an
    ``.item()``, ``cudaMemcpyAsync`` under a copy: their time is not their op's self time, so
    leaving them out lost it), and so is Kineto's own buffer request, under the op it ran in."""
    every = trace.events
    host = every["kind"].is_in(HOST_KINDS)
    nesting = every["parent"].fill_null(-1).to_numpy().astype(np.int64)
    rows, held_by = overhead_holders(every, host.to_numpy(), nesting)
    nesting[rows] = held_by  # Kineto's buffer request: under the op it ran in
    # torchscope's own frames left out, as in the page's graph (``_host_nodes``)
    keep = (host | profiler_overhead(every)).to_numpy() & ~tool_frames(trace)
    kept = np.flatnonzero(keep)
    nesting[kept] = nearest_ancestor(nesting, kept, keep)
    ev = every.with_columns(pl.Series("parent", nesting)).filter(pl.Series(keep))
    if ev.height == 0:
        return []
    ids = ev["id"].to_numpy()
    pos = {int(i): k for k, i in enumerate(ids.tolist())}
    parent = ev["parent"].fill_null(-1).to_list()
    # the page's names: steps merge into ProfilerStep#* (each step's paths were lines of their
    # own: a line per event of a trace of many steps), object addresses dropped
    codes, table = _name_codes(ev["name"])
    # ";" separates frames and a line ends the path: a name holding either (or another control
    # character) would break the format, so they are written ":" and " "
    texts = [_CONTROL.sub(" ", t.replace(";", ":")) for t in table]
    names = [texts[c] for c in codes.tolist()]
    tid = ev["tid"].to_list()
    # each event's call path as a node of a tree of paths ((parent node, name) -> node), so
    # that memory follows the distinct paths, not the events times their depth: a path string
    # per event held a 40,000-deep recursion's 800 million frames at once
    node_of: dict[tuple[int, str], int] = {}
    up_of: list[int] = []
    name_of: list[str] = []
    depth_of: list[int] = []
    node = np.empty(ev.height, np.int64)
    for k in range(ev.height):  # rows are sorted by start: a parent precedes its children
        up = pos.get(parent[k], -1) if parent[k] is not None and parent[k] >= 0 else -1
        if up >= 0 and name_of[node[up]] == DEEPER:  # below the cap: one frame for all of it
            node[k] = node[up]
            continue
        key = (int(node[up]), names[k]) if up >= 0 else (-1, f"thread {tid[k]};{names[k]}")
        if up >= 0 and depth_of[node[up]] >= STACK_DEPTH_CAP:
            key = (int(node[up]), DEEPER)
        found = node_of.get(key)
        if found is None:
            found = node_of[key] = len(up_of)
            up_of.append(key[0])
            name_of.append(key[1])
            depth_of.append(depth_of[key[0]] + 1 if key[0] >= 0 else 1)
        node[k] = found
    self_ns = np.zeros(len(up_of), np.int64)
    np.add.at(self_ns, node, ev["self_ns"].fill_null(0).to_numpy().astype(np.int64))
    paths: dict[int, str] = {}

    def path(n: int) -> str:  # iterative: a recursion 40,000 frames deep is a real trace
        chain = []
        while n >= 0 and n not in paths:
            chain.append(n)
            n = up_of[n]
        text = paths.get(n, "")
        for m in reversed(chain):
            text = paths[m] = f"{text};{name_of[m]}" if text else name_of[m]
        return text

    # only the paths written (1 us of self time or more) and their ancestors are spelled out
    return sorted((path(n), int(ns // 1000)) for n, ns in enumerate(self_ns.tolist()) if ns >= 1000)
