"""torch.profiler's per-name summary (``key_averages``), computed column-wise from a Trace.

This module is the analysis: ``event_frame`` (one row per event torch would list, with
torch's per-event metrics) and ``averages_frame`` (one row per key). The torch-compatible
objects over them (``KeyAverages``, its ``table()``, ``FunctionEvent``) live in
``torchscope.compat``.

torch builds one Python ``FunctionEvent`` per event, links parents and children object by
object, then averages; on 150k events that is most of the 12 s a user waits after ``stop()``.
Here the same numbers come from the Trace's columns: the nesting (``parent``) and self time
(``self_ns``) the Trace already derived, device time from the kernels each op launched (the
``op`` column, so a CUDA trace loaded from disk gets CUDA columns), memory by time interval,
then one Polars ``group_by``. It works the same on a live session and on any loaded file.

How we attribute time, and where that differs from torch 2.13 on purpose:

* ``self_cpu_time_total`` is an event's duration minus the *union* of its children's spans
  (``Trace.self_ns``), so it is never negative. torch subtracts the *sum* of the children's
  durations, which goes negative when children overlap (Python frames recorded by
  ``with_stack=True`` do), e.g. ``-1150.363us`` for a script's ``<module>`` frame.
  As in torch, ``Self CPU time total`` is the sum of all self times, and each CPU total %
  is relative to it.
* Memory is counted as torch does: an event's ``CPU Mem`` is the sum of the allocations and
  frees whose timestamp falls in ``[start, end]``; allocations outside every host event form
  the ``[memory]`` row.
* ``stack`` (for ``group_by_stack_n`` and the Source Location column) is the chain of
  enclosing Python frames recorded with ``with_stack=True``, innermost first. torch 2.13
  leaves ``stack`` empty for ops (so it prints no Source Location); older torch printed what
  we print.
* As torch does, an event whose parent has the same name and no other child is folded into
  that parent (``aten::div_`` calling ``aten::div_`` counts once), and the profiler's own
  bookkeeping ops (``profiler::_record_function_enter_new``, ``aten::is_leaf``, ...) are not
  rows; their time stays in their parent's self time.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec
import numpy as np
import polars as pl

from torchscope.analysis.frames import ran_under_torchscope_run, tool_frames
from torchscope.trace.derive import overhead_holders, profiler_overhead
from torchscope.trace.model import Trace
from torchscope.trace.schema import DEVICE_KINDS, HOST_KINDS
from torchscope.trace.tree import nearest_ancestor, subtree_sum

# Names torch leaves out of its tables: the profiler's own bookkeeping and trivial accessors.
FILTERED_NAMES = (
    "[memory]",
    "[OutOfMemory]",
    "profiler::_record_function_enter",
    "profiler::_record_function_enter_new",
    "profiler::_record_function_exit",
    "aten::is_leaf",
    "aten::output_nr",
    "aten::_version",
)
ROW_KINDS = (*HOST_KINDS, *DEVICE_KINDS)
# ops whose FLOPs torch's table counts and the shapes determine (not the composite aten::linear)
# the ops torch's with_flops counts (torch/csrc/profiler: computeFlops), nothing else
FLOP_COUNTED_OPS = (
    "aten::mm",
    "aten::addmm",
    "aten::bmm",
    "aten::baddbmm",
    "aten::conv2d",
    "aten::mul",
    "aten::add",
)
ANNOTATION_KINDS = ("user_annotation", "device_annotation")
# c10::DeviceType codes whose allocations count as CPU or device memory (as torch counts them).
CPU_MEMORY_DEVICES = (0, 2, 5)  # CPU, MKLDNN, IDEEP
DEVICE_MEMORY_DEVICES = (1, 6, 12, 20)  # CUDA, HIP, XPU, PrivateUse1

# the frame one row per key holds; times in microseconds like torch's attributes
# the summed times (us) and memory (bytes) of a row, in the table's order
METRIC_COLUMNS = (
    "cpu_time_total",
    "self_cpu_time_total",
    "device_time_total",
    "self_device_time_total",
    "cpu_memory_usage",
    "self_cpu_memory_usage",
    "device_memory_usage",
    "self_device_memory_usage",
)

AVERAGES_SCHEMA: dict[str, pl.DataType] = {
    "key": pl.String(),
    "overload_name": pl.String(),
    "count": pl.Int64(),
    "cpu_time_total": pl.Float64(),
    "self_cpu_time_total": pl.Float64(),
    "device_time_total": pl.Float64(),
    "self_device_time_total": pl.Float64(),
    "cpu_memory_usage": pl.Int64(),
    "self_cpu_memory_usage": pl.Int64(),
    "device_memory_usage": pl.Int64(),
    "self_device_memory_usage": pl.Int64(),
    "input_shapes": pl.String(),
    "stack": pl.List(pl.String()),
    "flops": pl.Int64(),
    "is_device": pl.Boolean(),
    "is_user_annotation": pl.Boolean(),
    "is_top_level": pl.Boolean(),
}

_STACK_FILTER = (
    ("autograd/__init__", "_make_grads"),
    ("autograd/__init__", "backward"),
    ("torch/tensor", "backward"),
    ("_internal/common_utils", "prof_callable"),
    ("_internal/common_utils", "prof_func_call"),
    ("_internal/common_utils", "prof_meth_call"),
)


def shapes_text(dims_json: pl.Expr) -> pl.Expr:
    """torch's ``str(input_shapes)`` from the Trace's JSON text: ``[[8, 32], [64], []]``."""
    return (
        dims_json.fill_null("[]")
        .str.replace_all(" ", "", literal=True)
        .str.replace_all(",", ", ", literal=True)
    )


def _without_tensor_lists(text: str) -> str:
    """``[[5, 3, 8], [[1, 3, 16], [1, 3, 16]]]`` -> ``[[5, 3, 8], []]``: torch 2.13's
    ``FunctionEvent.input_shapes`` gives ``[]`` for a tensor-list argument, whose shapes Kineto
    writes in full into the trace's ``Input Dims``."""
    try:
        value = json.loads(text)
    except ValueError:
        return text
    if not isinstance(value, list):
        return text
    shapes = [[] if isinstance(v, list) and v and isinstance(v[0], list) else v for v in value]
    return json.dumps(shapes)


def torch_input_shapes(texts: pl.Series) -> pl.Series:
    """The ``input_shapes`` texts as torch 2.13 shows them (tensor-list arguments as ``[]``).

    Parsed once per distinct text (a run has few), only for texts with a nested list."""
    nested = texts.filter(texts.str.slice(1).str.contains("[[", literal=True)).unique()
    if nested.len() == 0:
        return texts
    mapping = {t: _without_tensor_lists(t) for t in nested.to_list()}
    return texts.replace(mapping)


def input_shapes_column(dims_json: pl.Series, tensor_list_shapes: bool = False) -> pl.Series:
    """Every event's ``input_shapes`` text as torch shows it (``shapes_text``, and tensor-list
    arguments as ``[]`` unless ``tensor_list_shapes``), made once per distinct text and mapped
    back: a run repeats a few dozen shapes over hundreds of thousands of events (366k events,
    47 texts: 14 ms instead of 34 ms)."""
    dims = dims_json.fill_null("[]")
    distinct = dims.unique()
    shown = distinct.to_frame("dims").select(shapes_text(pl.col("dims")))["dims"]
    if not tensor_list_shapes:
        shown = torch_input_shapes(shown)
    mapping = dict(zip(distinct.to_list(), shown.to_list(), strict=True))
    return dims.replace_strict(mapping, return_dtype=pl.String).alias("input_shapes")


def _split_overload_names(frame: pl.DataFrame) -> pl.DataFrame:
    """``aten::add.Tensor`` -> name ``aten::add``, overload_name ``Tensor`` (ops only: an
    annotation's name may hold dots of its own, like ``Optimizer.step#SGD.step``)."""
    parts = pl.col("name").cast(pl.String).str.extract_groups(r"^(.+::[^.:]+)\.([^.:]+)$")
    split = (pl.col("kind") == "cpu_op") & parts.struct.field("1").is_not_null()
    op = pl.when(split).then(parts.struct.field("1")).otherwise(pl.col("name").cast(pl.String))
    return frame.with_columns(
        op.cast(pl.Categorical).alias("name"),
        op.cast(pl.Categorical).alias("trace_name"),
        pl.when(split).then(parts.struct.field("2")).otherwise(pl.lit("")).alias("overload_name"),
    )


def _fold_duplicates(
    codes: np.ndarray,
    alive: np.ndarray,
    parent: np.ndarray,
    added: tuple[np.ndarray, ...],
    taken: tuple[np.ndarray, ...],
) -> np.ndarray:
    """Fold each event into its parent when both have the same name and it is the only child.

    This is torch's ``_remove_dup_nodes`` (an op calling itself, like ``aten::div_`` into
    ``aten::div_``, counts once), done a level at a time: the parent gains the child's self
    values (``added``), takes its device values (``taken``), and adopts its children. Updates
    ``parent`` and the arrays in place; returns the mask of events that remain.
    """
    alive = alive.copy()
    n = alive.size
    while True:
        kids = np.nonzero(alive & (parent >= 0))[0]
        if not kids.size:
            return alive
        p = parent[kids]
        nchild = np.bincount(p, minlength=n)
        dup = kids[(codes[kids] == codes[p]) & (nchild[p] == 1)]
        if not dup.size:
            return alive
        is_dup = np.zeros(n, bool)
        is_dup[dup] = True
        dup = dup[~is_dup[parent[dup]]]  # the topmost of a chain first; the loop does the rest
        p = parent[dup]
        for arr in added:
            arr[p] += arr[dup]
        for arr in taken:
            arr[p] = arr[dup]
        alive[dup] = False
        gone = np.zeros(n, bool)
        gone[dup] = True
        moved = np.nonzero(alive & (parent >= 0))[0]
        moved = moved[gone[parent[moved]]]
        parent[moved] = parent[parent[moved]]


def _python_stacks(ev: pl.DataFrame, depth_limit: int, tool: np.ndarray) -> pl.Series:
    """For every event, the enclosing Python frames (innermost first), at most ``depth_limit``.

    Vectorized by tree level: first each event's nearest Python-frame ancestor (parents are
    resolved before children), then ``depth_limit`` hops along that chain, then names.
    """
    n = ev.height
    parent = ev["parent"].fill_null(-1).cast(pl.Int64).to_numpy()
    depth = ev["depth"].fill_null(0).cast(pl.Int64).to_numpy()
    names = ev["name"].cast(pl.String)
    framed = (ev["kind"] == "python_function").to_numpy()
    if framed.any():
        py_names = names.filter(pl.Series(framed))
        dropped = np.zeros(py_names.len(), bool)
        for a, b in _STACK_FILTER:  # torch leaves these frames out of stacks
            dropped |= (
                py_names.str.contains(a, literal=True) & py_names.str.contains(b, literal=True)
            ).to_numpy()
        framed[np.nonzero(framed)[0][dropped]] = False
        framed &= ~tool  # torchscope's own frames (the runner, the CLI: ``frames.tool_frames``)
    nearest = np.full(n, -1, np.int64)  # nearest kept Python frame above each event
    order = np.argsort(depth, kind="stable")
    bounds = np.searchsorted(depth[order], np.arange(int(depth.max(initial=0)) + 2))
    for d in range(1, bounds.size - 1):
        rows = order[bounds[d] : bounds[d + 1]]
        p = parent[rows]
        ok = p >= 0
        rows, p = rows[ok], p[ok]
        nearest[rows] = np.where(framed[p], p, nearest[p])
    hops = []
    cur = nearest
    for _ in range(max(depth_limit, 0)):
        if not (cur >= 0).any():
            break
        hops.append(cur)
        cur = np.where(cur >= 0, nearest[np.maximum(cur, 0)], -1)
    if not hops:
        # one empty list repeated (built from n Python lists it took 0.4 s for 32k events)
        return pl.Series("stack", [[]], dtype=pl.List(pl.String)).new_from_index(0, n)
    cols = {
        f"h{i}": names.gather(np.maximum(h, 0)).set(pl.Series(h < 0), None)  # type: ignore[arg-type]
        for i, h in enumerate(hops)
    }
    frame = pl.DataFrame(cols)
    return frame.select(pl.concat_list(pl.all()).list.drop_nulls().alias("stack")).to_series()


def _nest_overhead(ev: pl.DataFrame, parent: np.ndarray, host: np.ndarray) -> np.ndarray:
    """Put each overhead event under the innermost host row of the main thread holding it, as
    torch's tables do (its time already left that event's self time: ``Trace.self_ns``).
    Updates ``parent`` in place; returns the overhead rows."""
    rows, holder = overhead_holders(ev, host, parent)
    parent[rows] = holder
    return rows


def _device_time(
    ev: pl.DataFrame, parent: np.ndarray, dur: np.ndarray, is_dev: np.ndarray, is_row: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Self and total device time of every event (ns): kernels, memcpy and memset count at the
    op that launched them and at every op above it."""
    n = ev.height
    kind = ev["kind"]
    self_dev = np.zeros(n, np.int64)
    op = ev["op"].fill_null(-1).cast(pl.Int64).to_numpy()
    is_work = kind.is_in(["kernel", "memcpy", "memset"]).to_numpy()  # not device annotations
    launched = np.nonzero(is_work & (op >= 0) & is_row)[0]
    if launched.size:
        np.add.at(self_dev, op[launched], dur[launched])
    dev_total = subtree_sum(self_dev, parent)
    # a device-side annotation (gpu_user_annotation) is a range around kernels, not work: torch
    # 2.13 leaves it out of "Self CUDA time total" but keeps its length as the row's self time, so
    # its share can pass 100 % (292 ms of 165 ms on nccl_rank0_of_2). Here its self time is 0
    # (a deliberate difference, docs/analyses.md) and its length stays in CUDA total.
    return np.where(is_dev & is_work, dur, self_dev), np.where(is_dev, dur, dev_total)


def _memory_by_interval(
    mem: pl.DataFrame, start: np.ndarray, dur: np.ndarray, host_rows: np.ndarray, n: int
) -> tuple[np.ndarray, np.ndarray, pl.DataFrame]:
    """CPU and device bytes allocated inside each of the ``host_rows`` events (by its interval,
    as torch counts them), and the allocations outside every one of them (the "[memory]"
    rows). Its temporaries end with it: the table's peak is the arrays alive at its end.

    Not Kineto's own overhead spans: they run on a track of their own and allocate nothing,
    so an allocation of the user's thread inside one was counted twice (once by the op that
    made it) or taken from the "[memory]" row, and the rows no longer summed to the bytes.
    """
    cpu_mem = np.zeros(n, np.int64)
    dev_mem = np.zeros(n, np.int64)
    mem_rows = pl.DataFrame()
    if mem.height:
        mem = mem.sort("ts_ns")
        ts = mem["ts_ns"].to_numpy()
        dt = mem["device_type"].fill_null(0).to_numpy()
        nbytes = mem["bytes"].fill_null(0).to_numpy().astype(np.int64)
        cpu_b = np.where(np.isin(dt, CPU_MEMORY_DEVICES), nbytes, 0)
        dev_b = np.where(np.isin(dt, DEVICE_MEMORY_DEVICES), nbytes, 0)
        lo = np.searchsorted(ts, start[host_rows], side="left")
        hi = np.searchsorted(ts, start[host_rows] + dur[host_rows], side="right")
        cpu_cum = np.concatenate(([0], np.cumsum(cpu_b)))
        dev_cum = np.concatenate(([0], np.cumsum(dev_b)))
        cpu_mem[host_rows] = cpu_cum[hi] - cpu_cum[lo]
        dev_mem[host_rows] = dev_cum[hi] - dev_cum[lo]
        # allocations outside every host event become "[memory]" rows
        covered = np.zeros(ts.size + 1, np.int64)
        np.add.at(covered, lo, 1)
        np.add.at(covered, hi, -1)
        outside = np.cumsum(covered)[:-1] == 0
        if outside.any():
            mem_rows = pl.DataFrame(
                {
                    "start_ns": ts[outside],
                    "tid": mem["tid"].to_numpy()[outside],
                    "cpu_mem": cpu_b[outside],
                    "device_mem": dev_b[outside],
                }
            )
    return cpu_mem, dev_mem, mem_rows


def event_frame(
    trace: Trace,
    *,
    with_stack_n: int = 0,
    with_shapes: bool = True,
    tensor_list_shapes: bool = False,
    overload_names: bool = False,
    python_functions: bool = True,
) -> pl.DataFrame:
    """One row per event that torch's tables would show, with torch's per-event metrics (ns).

    Columns: id, name (``ProfilerStep#N`` -> ``ProfilerStep*``), trace_name, kind, tid,
    start_ns, dur_ns, parent (nearest row ancestor or -1), cpu_total_ns, self_cpu_ns,
    device_total_ns, self_device_ns, cpu_mem, self_cpu_mem, device_mem, self_device_mem,
    input_shapes (``""`` unless ``with_shapes``; tensor-list arguments as ``[]`` like torch's
    unless ``tensor_list_shapes``), stack, is_device, is_user_annotation, overload_name
    (``""``; with ``overload_names``, an op's ``aten::add.Tensor`` becomes name ``aten::add``
    and overload ``Tensor``: Kineto writes them joined under torch's
    ``_ExperimentalConfig(capture_overload_names=True)``).
    Names stay Categorical (cheap to group); cast them when you need text.
    """
    ev = trace.events
    n = ev.height
    kind = ev["kind"]
    overhead = profiler_overhead(ev)
    # torch 2.11 and older left Python frames out of its events and tables (2.12 put them in)
    row_kinds = ROW_KINDS if python_functions else tuple(k for k in ROW_KINDS if k != "python_function")
    host_kinds = HOST_KINDS if python_functions else tuple(k for k in HOST_KINDS if k != "python_function")
    is_row = (kind.is_in(row_kinds) & ~ev["name"].is_in(FILTERED_NAMES)) | overhead
    is_host = (kind.is_in(host_kinds) | overhead).to_numpy()
    is_dev = kind.is_in(DEVICE_KINDS).to_numpy()
    parent = ev["parent"].fill_null(-1).cast(pl.Int64).to_numpy().copy()
    dur = ev["dur_ns"].fill_null(0).to_numpy().astype(np.int64)
    start = ev["start_ns"].to_numpy().astype(np.int64)
    is_row_np = is_row.to_numpy()

    # self CPU: the Trace's self time, plus the time of filtered children torch never sees
    self_cpu = np.where(is_host, ev["self_ns"].fill_null(0).to_numpy().astype(np.int64), 0)
    if python_functions:
        nested = _nest_overhead(ev, parent, is_host & is_row_np)
        self_cpu[nested] = dur[nested]  # on a track of its own: no children
        hidden = np.nonzero(is_host & ~is_row_np & (parent >= 0))[0]
        if hidden.size:
            np.add.at(self_cpu, parent[hidden], dur[hidden])
    else:
        # the tree without the Python frames, as torch 2.11 built it: each row under its nearest
        # row ancestor, its self time its length minus its row children's
        rows = is_host & is_row_np
        parent = nearest_ancestor(parent, np.arange(n), rows)
        _nest_overhead(ev, parent, rows)
        self_cpu = np.where(rows, dur, 0)
        child = np.flatnonzero(rows & (parent >= 0))
        np.add.at(self_cpu, parent[child], -dur[child])
        self_cpu = np.maximum(self_cpu, 0)
    self_dev, dev_total = _device_time(ev, parent, dur, is_dev, is_row_np)
    host_rows = np.flatnonzero(is_host & is_row_np & ~overhead.to_numpy())
    cpu_mem, dev_mem, mem_rows = _memory_by_interval(trace.memory, start, dur, host_rows, n)
    del host_rows
    # self memory: minus what the direct row children account for
    child = np.nonzero(is_row_np & is_host & (parent >= 0))[0]
    self_cpu_mem = cpu_mem.copy()
    self_dev_mem = dev_mem.copy()
    if child.size:
        np.add.at(self_cpu_mem, parent[child], -cpu_mem[child])
        np.add.at(self_dev_mem, parent[child], -dev_mem[child])
    del child

    # torch folds an event into its same-named parent when it is that parent's only child
    alive = is_row_np & ~is_host | _fold_duplicates(
        ev["name"].to_physical().to_numpy(),
        is_row_np & is_host,
        parent,
        (self_cpu, self_cpu_mem, self_dev_mem),
        (self_dev, dev_total),
    )
    if python_functions and (kind == "python_function").any() and ran_under_torchscope_run(trace):
        # the console script, the CLI and the runner above the script (and the profiler's calls
        # in its steps) are no rows of the script's table: they topped it, at its whole time.
        # What they hold themselves goes to the row they ran under, as a hidden child's does
        tool = tool_frames(trace)
        gone = np.flatnonzero(tool & is_host & alive)
        up = nearest_ancestor(parent, gone, alive & is_host & ~tool)
        held = up >= 0
        for column in (self_cpu, self_cpu_mem, self_dev_mem, self_dev):
            np.add.at(column, up[held], column[gone[held]])
        alive &= ~tool
    cpu_total = np.where(is_host, dur, 0)  # made after the fold, which leaves it alone
    frame = pl.DataFrame(
        {
            "row_parent": parent,
            "cpu_total_ns": cpu_total,
            "self_cpu_ns": self_cpu,
            "device_total_ns": dev_total,
            "self_device_ns": self_dev,
            "cpu_mem": cpu_mem,
            "self_cpu_mem": self_cpu_mem,
            "device_mem": dev_mem,
            "self_device_mem": self_dev_mem,
        }
    )
    if with_stack_n > 0:
        frame = frame.with_columns(_python_stacks(ev, with_stack_n, tool_frames(trace)))
    else:
        frame = frame.with_columns(pl.lit([], dtype=pl.List(pl.String)).alias("stack"))
    base = pl.concat(
        [
            ev.select(
                "id",
                "kind",
                "tid",
                "start_ns",
                "dur_ns",
                pl.col("name").alias("trace_name"),
                (
                    input_shapes_column(ev["input_dims"], tensor_list_shapes)
                    if with_shapes
                    else pl.lit("").alias("input_shapes")
                ),
            ),
            frame.rename({"row_parent": "parent"}),
        ],
        how="horizontal",
    ).filter(pl.Series(alive))
    base = base.with_columns(
        pl.when(pl.col("trace_name").cat.starts_with("ProfilerStep#"))
        .then(pl.lit("ProfilerStep*").cast(pl.Categorical))
        .otherwise(pl.col("trace_name"))
        .alias("name"),
        pl.col("kind").is_in(DEVICE_KINDS).alias("is_device"),
        pl.col("kind").is_in(ANNOTATION_KINDS).alias("is_user_annotation"),
    )
    base = _split_overload_names(base) if overload_names else base.with_columns(overload_name=pl.lit(""))
    if mem_rows.height:
        extra = mem_rows.select(
            pl.lit(-1, pl.Int32).alias("id"),
            pl.lit("cpu_op").cast(base.schema["kind"]).alias("kind"),
            pl.col("tid").cast(base.schema["tid"]),
            pl.col("start_ns").cast(pl.Int64),
            pl.lit(0, pl.Int64).alias("dur_ns"),
            pl.lit("[memory]").cast(pl.Categorical).alias("trace_name"),
            pl.lit("[]").alias("input_shapes"),
            pl.lit(-1, base.schema["parent"]).alias("parent"),
            pl.lit(0, pl.Int64).alias("cpu_total_ns"),
            pl.lit(0, pl.Int64).alias("self_cpu_ns"),
            pl.lit(0, pl.Int64).alias("device_total_ns"),
            pl.lit(0, pl.Int64).alias("self_device_ns"),
            pl.col("cpu_mem").cast(pl.Int64),
            pl.col("cpu_mem").cast(pl.Int64).alias("self_cpu_mem"),
            pl.col("device_mem").cast(pl.Int64),
            pl.col("device_mem").cast(pl.Int64).alias("self_device_mem"),
            pl.lit([], dtype=pl.List(pl.String)).alias("stack"),
            pl.lit("[memory]").cast(pl.Categorical).alias("name"),
            pl.lit(False).alias("is_device"),
            pl.lit(False).alias("is_user_annotation"),
            pl.lit("").alias("overload_name"),
        )
        base = pl.concat([base, extra]).sort(
            ["start_ns", "dur_ns"], descending=[False, True], maintain_order=True
        )
    return base


def infer_device(trace: Trace) -> str | None:
    """The device name torch would use for a trace's device columns (None when host-only)."""
    settings = trace.meta.profiler_settings
    named = settings.get("use_device") if isinstance(settings, dict) else None
    if isinstance(named, str) and named:
        return named
    # the kinds and the categories compared as the few values they take, not row by row as text
    # (13 ms of a 123k-event table)
    on_device = trace.events["kind"].is_in(DEVICE_KINDS)
    if not on_device.any():
        return None
    cats = trace.events["cat"].filter(on_device).unique().cast(pl.String)
    if cats.str.contains("(?i)mtia").any():
        return "mtia"
    if cats.str.contains("(?i)xpu").any():
        return "xpu"
    return "cuda"


def flops_of(frame: pl.DataFrame, trace: Trace) -> pl.Series:
    """Per-event FLOPs as torch's ``with_flops`` counts them, from the recorded input shapes
    and, for convolutions, the scalar arguments (stride, padding, dilation)."""
    from torchscope.analysis.operators import torch_flops

    values = np.zeros(frame.height, np.int64)
    mask = frame["trace_name"].is_in(FLOP_COUNTED_OPS).to_numpy()
    if mask.any():
        idx = np.nonzero(mask)[0]
        ids = frame["id"].to_numpy()[idx]
        names = frame["trace_name"].gather(idx).cast(pl.String).to_list()  # not every row's name
        dims = trace.events["input_dims"].gather(ids).to_list()
        concrete = trace.events["concrete_inputs"].gather(ids).to_list()
        # a training loop repeats a few shapes: each distinct call is counted once (8,000 calls
        # of 1,000 steps were 0.14 s of the table, parsing the same shapes again and again)
        counted: dict[tuple[str, str | None, str | None], int] = {}
        for i, nm, d, c in zip(idx.tolist(), names, dims, concrete, strict=True):
            key = (nm, d, c)
            if key not in counted:
                f = torch_flops(nm, d, c)
                counted[key] = int(f) if f else 0
            values[i] = counted[key]
    return pl.Series("flops", values)


def trace_counts_flops(traces: list[Trace]) -> bool:
    """Whether the traces were recorded with ``with_flops`` (the header Kineto writes): a loaded
    trace's table then has the FLOPs column the live one had."""
    return any(str(t.meta.profiler_settings.get("with_flops", "")) in ("1", "True", "true") for t in traces)


def trace_uses_memory(traces: list[Trace]) -> bool:
    """Whether the traces were recorded with ``profile_memory`` (their settings, or any
    allocation in them): the table shows its memory columns then."""
    return any(t.memory.height > 0 for t in traces) or any(
        str(t.meta.profiler_settings.get("profile_memory", "")) in ("1", "True", "true") for t in traces
    )


def averages_frame(
    traces: list[Trace],
    group_by_input_shape: bool = False,
    group_by_stack_n: int = 0,
    group_by_overload_name: bool = False,
    *,
    with_flops: bool = False,
    tensor_list_shapes: bool = False,
    overload_names: bool = False,
    python_functions: bool = True,
) -> pl.DataFrame:
    """One row per key (name, and input shapes / top-N stack frames), torch's sums, in
    ``AVERAGES_SCHEMA`` (times in us, memory in bytes), over one or more Traces.

    ``tensor_list_shapes`` keeps the shapes of tensor-list arguments in the input-shape keys
    (``aten::cat``'s inputs, ``aten::lstm``'s weights); torch 2.13 shows each such argument as
    ``[]``, and so do we by default (see ``torch_input_shapes``). ``overload_names`` splits
    the overload off op names (see ``event_frame``); ``group_by_overload_name`` keys by it.
    """
    frames = []
    for t in traces:
        frame = event_frame(
            t,
            with_stack_n=group_by_stack_n,
            with_shapes=group_by_input_shape or with_flops,
            tensor_list_shapes=tensor_list_shapes,
            overload_names=overload_names,
            python_functions=python_functions,
        )
        flops = flops_of(frame, t) if with_flops else pl.lit(0, pl.Int64).alias("flops")
        frames.append(frame.with_columns(flops))
    if not frames:  # no Trace (a post-processing deadline passed before the first one)
        return pl.DataFrame(schema=AVERAGES_SCHEMA)
    events = pl.concat(frames) if len(frames) > 1 else frames[0]
    keys = ["name", "is_device", "is_user_annotation"]
    if group_by_overload_name:
        keys.append("overload_name")
    if group_by_input_shape:
        keys.append("input_shapes")
    if group_by_stack_n > 0:
        events = events.with_columns(pl.col("stack").list.head(group_by_stack_n))
        keys.append("stack")
    us = 1000.0
    grouped = events.group_by(keys, maintain_order=True).agg(
        pl.len().cast(pl.Int64).alias("count"),
        (pl.col("cpu_total_ns").sum() / us).alias("cpu_time_total"),
        (pl.col("self_cpu_ns").sum() / us).alias("self_cpu_time_total"),
        (pl.col("device_total_ns").sum() / us).alias("device_time_total"),
        (pl.col("self_device_ns").sum() / us).alias("self_device_time_total"),
        pl.col("cpu_mem").sum().alias("cpu_memory_usage"),
        pl.col("self_cpu_mem").sum().alias("self_cpu_memory_usage"),
        pl.col("device_mem").sum().alias("device_memory_usage"),
        pl.col("self_device_mem").sum().alias("self_device_memory_usage"),
        pl.col("flops").sum(),
        *([] if group_by_input_shape else [pl.col("input_shapes").first()]),
        *([] if group_by_stack_n > 0 else [pl.col("stack").first()]),
        (pl.col("parent").first() < 0).alias("is_top_level"),
    )
    frame = grouped.select(
        pl.col("name").cast(pl.String).alias("key"),
        pl.col("overload_name") if group_by_overload_name else pl.lit("").alias("overload_name"),
        "count",
        *METRIC_COLUMNS,
        pl.col("input_shapes") if group_by_input_shape else pl.lit("").alias("input_shapes"),
        pl.col("stack") if group_by_stack_n > 0 else pl.lit([], dtype=pl.List(pl.String)).alias("stack"),
        "flops",
        "is_device",
        "is_user_annotation",
        "is_top_level",
    )
    return frame.cast(AVERAGES_SCHEMA)  # type: ignore[arg-type]


def parse_shapes(text: str) -> list[Any]:
    """``input_shapes`` text back to new nested lists (``"[[8, 32], []]"`` -> ``[[8, 32], []]``):
    each caller owns its own, as each of torch's events does. msgspec's decoder: ``events()``
    parses one per event, 1 µs each where ``json.loads`` took 6."""
    if not text:
        return []
    try:
        value = _decode_json(text)
    except msgspec.DecodeError:
        return []
    return value if isinstance(value, list) else []


_decode_json = msgspec.json.Decoder().decode
