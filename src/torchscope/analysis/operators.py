"""Operators: host and device time by op name (and by input shape), stacks, FLOPs.

The TensorBoard plugin's operator view and ``key_averages`` answer "which op is expensive";
this module answers it as a DataFrame with device time attached to the op that launched the
work (self) and to every op above it (total), so a user sees that ``aten::conv2d`` owns the
cuDNN kernels its children launched. FLOPs are counted from recorded input shapes for the
ops whose cost the shapes determine (matrix products and attention).
"""

from __future__ import annotations

import json

import numpy as np
import polars as pl

from torchscope.analysis import names
from torchscope.analysis.frames import kinds, memo, tool_frames
from torchscope.analysis.key_averages import FILTERED_NAMES, ROW_KINDS
from torchscope.trace.model import Trace
from torchscope.trace.tree import nearest_ancestor

OP_KINDS = ["cpu_op", "user_annotation"]
DEVICE_WORK = ["kernel", "memcpy", "memset"]  # what an op's device time is made of


def _device_time_per_row(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    """(self, total) device ns per event row: self at the launching op, total up the tree."""
    return memo(trace, "device_time_per_row", lambda: _device_time_uncached(trace))


def _device_time_uncached(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    ev = trace.events
    n = ev.height
    dev = kinds(trace, *DEVICE_WORK).filter(pl.col("op") >= 0)
    self_ns = np.zeros(n, np.int64)
    total_ns = np.zeros(n, np.int64)
    if dev.height == 0:
        return self_ns, total_ns
    op = dev["op"].to_numpy().astype(np.int64)
    dur = dev["dur_ns"].to_numpy()
    np.add.at(self_ns, op, dur)
    parent = ev["parent"].fill_null(-1).to_numpy().astype(np.int64)
    cur = op
    for _ in range(512):  # deeper than any real stack
        np.add.at(total_ns, cur, dur)
        cur = parent[cur]
        keep = cur >= 0
        if not keep.any():
            break
        cur, dur = cur[keep], dur[keep]
    return self_ns, total_ns


def _self_calls(trace: Trace) -> np.ndarray:
    """Events that are the only child of a parent of the same name (``aten::std`` calling
    ``aten::std``): torch's ``_remove_dup_nodes`` folds them into the parent, so its table, ours
    and the operator view count such a call once. Children are counted as key_averages counts
    its rows (the profiler's bookkeeping ops are not children). Read by the operator view, its
    kernel chain and the diff: computed once per trace."""
    return memo(trace, "self_calls", lambda: _self_calls_uncached(trace))


def _self_calls_uncached(trace: Trace) -> np.ndarray:
    ev = trace.events
    parent = ev["parent"].fill_null(-1).to_numpy().astype(np.int64)
    code = ev["name"].to_physical().to_numpy()
    child = (ev["kind"].is_in(ROW_KINDS) & ~ev["name"].is_in(FILTERED_NAMES)).to_numpy() & (parent >= 0)
    nchild = np.bincount(parent[child], minlength=ev.height)
    safe = np.maximum(parent, 0)
    return child & (code == code[safe]) & (nchild[safe] == 1)


def _op_rows(trace: Trace, fold_self_calls: bool = False) -> pl.DataFrame:
    """Op rows with their device self/total time (the operator view, flops and diffs read them)."""
    return memo(trace, f"op_rows_{fold_self_calls}", lambda: _op_rows_uncached(trace, fold_self_calls))


def _op_rows_uncached(trace: Trace, fold_self_calls: bool) -> pl.DataFrame:
    self_dev, total_dev = _device_time_per_row(trace)
    # ProfilerStep#N spans steps, not an op; torchscope#... are the runner's setup/tail spans
    rows = kinds(trace, *OP_KINDS).filter(~names.PROFILER_STEP & ~names.TORCHSCOPE_SPAN)
    if fold_self_calls and (folded := _self_calls(trace)).any():
        # the folded call's self times go to its outermost same-named ancestor
        host_self = trace.events["self_ns"].fill_null(0).to_numpy().astype(np.int64)
        self_dev = self_dev.copy()
        dup = np.flatnonzero(folded)
        parent = trace.events["parent"].fill_null(-1).to_numpy().astype(np.int64)
        top = nearest_ancestor(parent, dup, ~folded)
        np.add.at(host_self, top, host_self[dup])
        np.add.at(self_dev, top, self_dev[dup])
        rows = rows.filter(~pl.Series(folded[rows["id"].to_numpy()]))
        rows = rows.with_columns(pl.Series("self_ns", host_self[rows["id"].to_numpy()]))
    idx = rows["id"].to_numpy()
    return rows.with_columns(
        pl.Series("device_self_ns", self_dev[idx]), pl.Series("device_total_ns", total_dev[idx])
    )


def operators(trace: Trace, by_input_shape: bool = False) -> pl.DataFrame:
    """One row per op name (and input shape): calls, host self/total/avg/max, device self/total, ns.

    Sorted by device total time, then host total time, then name. The report, the terminal
    and the dashboard all show these rows, in this order.
    """
    keys = ["name", "input_dims"] if by_input_shape else ["name"]
    rows = _op_rows(trace, fold_self_calls=True)
    return (
        rows.group_by(keys)
        .agg(
            pl.col("kind").first().cast(pl.String).alias("kind"),
            pl.len().alias("calls"),
            pl.col("self_ns").sum().alias("host_self_ns"),
            pl.col("dur_ns").sum().alias("host_total_ns"),
            pl.col("dur_ns").max().alias("host_max_ns"),
            pl.col("device_self_ns").sum(),
            pl.col("device_total_ns").sum(),
        )
        .with_columns(
            pl.col("name").cast(pl.String),
            names.TENSOR_CORE_ELIGIBLE_OP.alias("tensor_core_eligible"),
            (pl.col("host_total_ns") / pl.col("calls")).alias("host_avg_ns"),
        )
        .sort(
            ["device_total_ns", "host_total_ns", *keys],
            descending=[True, True] + [False] * len(keys),
            nulls_last=True,
        )
    )


STACK_FRAMES = 32  # a stack deeper than this keeps its innermost frames and the user's own
STACK_INNER = 12  # innermost frames always kept (the library code that ran the op)
STACK_CHARS = 1500  # at most, so the page (which cuts a string at 1,600) shows it whole
STACK_SEP = " <- "
_LIBRARY = ("site-packages/", "dist-packages/", "/lib/python", "/torch/", "<built-in", "<frozen")


def is_user_frame(frame: str) -> bool:
    """Whether a Python frame is the user's code: not torch, an installed package, the
    standard library, a builtin, or an ``nn.Module:`` scope marker."""
    return not (frame.startswith(("torch/", "nn.Module: ")) or any(m in frame for m in _LIBRARY))


def stack_text(frames: list[str], depth: int = STACK_FRAMES, chars: int = STACK_CHARS) -> str:
    """Frames (innermost first) as one line: all of them when they fit ``depth`` frames and
    ``chars`` characters; else the innermost ``STACK_INNER``, then the user's own frames
    further out (innermost first), with "… N frames …" for each run left out.

    The innermost frames say which library code ran the op; the user's frames hold their call
    site (their model's forward, the training loop), which on a model built of nn.Modules sits
    20-40 frames out, past pytest, Lightning or runpy frames: keeping only the innermost 8
    (before) never showed it.
    """
    line = STACK_SEP.join(frames)
    if len(frames) <= depth and len(line) <= chars:
        return line
    inner = min(STACK_INNER, depth)
    user = [i for i in range(inner, len(frames)) if is_user_frame(frames[i])][: depth - inner]
    while True:
        keep = list(range(inner)) + user
        parts, last = [], -1
        for i in [*keep, len(frames)]:
            if i > last + 1:
                n = i - last - 1
                parts.append(f"… {n} frame{'s' if n > 1 else ''} …")
            if i < len(frames):
                parts.append(frames[i])
            last = i
        line = STACK_SEP.join(parts)
        if len(line) <= chars or inner + len(user) <= 2:
            return line
        if user and len(user) >= inner // 2:
            user.pop()  # the outermost user frame first: the call site nearest the op stays
        else:
            inner -= 1


def call_stacks(trace: Trace, op_name: str | None = None, depth: int = STACK_FRAMES) -> pl.DataFrame:
    """Python call stacks leading to ops (needs ``with_stack``): name, input_dims, stack, calls, host ns.

    One row per op name, input shape (as ``operators(by_input_shape=True)`` groups them) and
    stack, so a shape row of the operators view drills down to the code that called it.
    ``stack`` is the Python frames, innermost first, joined by " <- ": all of them up to
    ``depth`` frames (and ``STACK_CHARS`` characters), else the innermost and the user's own
    (``stack_text``), so the user's call site shows however deep the model nests.
    """
    ev = trace.events
    rows = kinds(trace, "cpu_op")
    if op_name is not None:
        rows = rows.filter(pl.col("name").cast(pl.String) == op_name)
    if rows.height == 0 or not (ev["kind"] == "python_function").any():
        return pl.DataFrame(
            schema={
                "name": pl.String,
                "input_dims": pl.String,
                "stack": pl.String,
                "calls": pl.UInt32,
                "host_total_ns": pl.Int64,
                "host_self_ns": pl.Int64,
            }
        )
    parent = ev["parent"].fill_null(-1).to_numpy().astype(np.int64)
    # torchscope's own frames (the console script, CLI and runner under a run's script) are no
    # frames of the user's stacks: every stack of a run ended in a dozen of them
    is_py = (ev["kind"] == "python_function").to_numpy() & ~tool_frames(trace)
    name_arr = ev["name"].cast(pl.String).to_numpy()
    idx = rows["id"].to_numpy().astype(np.int64)
    # keep only top-level ops: their parent chain reaches Python before another op
    frames: list[list[int]] = [[] for _ in range(idx.size)]  # event rows of the frames, innermost first
    cur = parent[idx]
    alive = np.arange(idx.size)
    for _ in range(256):
        ok = cur >= 0
        alive, cur = alive[ok], cur[ok]
        if alive.size == 0:
            break
        py = is_py[cur]
        for a, c in zip(alive[py].tolist(), cur[py].tolist(), strict=True):
            frames[a].append(c)
        cur = parent[cur]
    # many calls share a stack: build each distinct one's text once
    texts: dict[tuple[int, ...], str] = {}
    stacks = []
    for f in frames:
        key = tuple(f)
        if key not in texts:
            texts[key] = stack_text([str(name_arr[c]) for c in f], depth)
        stacks.append(texts[key])
    return (
        rows.select(pl.col("name").cast(pl.String), "input_dims", "dur_ns", "self_ns")
        .with_columns(pl.Series("stack", stacks, dtype=pl.String))
        .filter(pl.col("stack") != "")
        .group_by("name", "input_dims", "stack")
        .agg(
            pl.len().alias("calls"),
            pl.col("dur_ns").sum().alias("host_total_ns"),
            pl.col("self_ns").sum().alias("host_self_ns"),
        )
        .sort(
            ["host_total_ns", "name", "input_dims", "stack"],
            descending=[True, False, False, False],
            nulls_last=True,
        )
    )


def _flops(name: str, dims_json: str | None) -> float | None:
    """Floating point operations of one call from its input shapes, when they determine it."""
    if not dims_json:
        return None
    try:
        dims = json.loads(dims_json)
    except ValueError:
        return None
    shapes = [d for d in dims if isinstance(d, list)]
    try:
        if name in ("aten::mm", "aten::matmul") and len(shapes) >= 2:
            a, b = shapes[0], shapes[1]
            if len(a) >= 2 and len(b) == 2:
                m = float(np.prod(a[:-1]))
                return 2.0 * m * a[-1] * b[-1]
            if len(a) == 3 and len(b) == 3:
                return 2.0 * a[0] * a[1] * a[2] * b[2]
        if name == "aten::addmm" and len(shapes) >= 3:
            a, b = shapes[1], shapes[2]
            return 2.0 * a[0] * a[1] * b[1]
        if name in ("aten::bmm",) and len(shapes) >= 2:
            a, b = shapes[0], shapes[1]
            return 2.0 * a[0] * a[1] * a[2] * b[2]
        if name == "aten::baddbmm" and len(shapes) >= 3:
            a, b = shapes[1], shapes[2]
            return 2.0 * a[0] * a[1] * a[2] * b[2]
        if name == "aten::linear" and len(shapes) >= 2:
            x, w = shapes[0], shapes[1]
            return 2.0 * float(np.prod(x[:-1])) * x[-1] * w[0]
        if (
            name
            in (
                "aten::scaled_dot_product_attention",
                "aten::_scaled_dot_product_flash_attention",
                "aten::_scaled_dot_product_efficient_attention",
                "aten::_scaled_dot_product_flash_attention_for_cpu",
            )
            and len(shapes) >= 3
        ):
            q, k = shapes[0], shapes[1]
            batch = float(np.prod(q[:-2]))
            return 4.0 * batch * q[-2] * k[-2] * q[-1]
    except (IndexError, TypeError):
        return None
    return None


def torch_flops(name: str, dims_json: str | None, concrete_json: str | None) -> float | None:
    """FLOPs of one call exactly as torch's ``with_flops`` counts them: matrix products as
    ``_flops``, ``aten::conv2d`` as ``conv_flops``, and ``aten::mul`` / ``aten::add`` as the
    element count of their first input (torch's rule, whatever the broadcast output)."""
    if name == "aten::conv2d":
        return conv_flops(dims_json, concrete_json)
    if name in ("aten::mul", "aten::add"):
        try:
            first = json.loads(dims_json or "")[0]
        except (ValueError, IndexError, TypeError):
            return None
        return float(np.prod(first)) if isinstance(first, list) else None
    return _flops(name, dims_json)


CONV_OPS = ("aten::conv1d", "aten::conv2d", "aten::conv3d", "aten::convolution", "aten::_convolution")


def conv_flops(dims_json: str | None, concrete_json: str | None) -> float | None:
    """FLOPs of one convolution: 2 * N * out_channels * prod(out spatial) * in_channels/groups * prod(kernel).

    Needs the stride, padding and dilation Kineto writes as "Concrete Inputs"; without them the
    output size is unknown and so is the cost.
    """
    if not dims_json or not concrete_json:
        return None
    try:
        dims, conc = json.loads(dims_json), json.loads(concrete_json)
        x, w = dims[0], dims[1]
        k = len(x) - 2
        stride, pad, dil = (json.loads(conc[i]) if conc[i] else [1] * k for i in (3, 4, 5))
        stride, pad, dil = ([v] * k if isinstance(v, int) else v for v in (stride, pad, dil))
        out = [(x[2 + i] + 2 * pad[i] - dil[i] * (w[2 + i] - 1) - 1) // stride[i] + 1 for i in range(k)]
        return 2.0 * x[0] * w[0] * float(np.prod(out)) * w[1] * float(np.prod(w[2:]))
    except (IndexError, TypeError, ValueError):
        return None


FLOP_OPS = (
    "aten::mm",
    "aten::matmul",
    "aten::addmm",
    "aten::bmm",
    "aten::baddbmm",
    "aten::linear",
    "aten::scaled_dot_product_attention",
    "aten::_scaled_dot_product_flash_attention",
    "aten::_scaled_dot_product_efficient_attention",
    "aten::_scaled_dot_product_flash_attention_for_cpu",
)


def flops(trace: Trace) -> pl.DataFrame:
    """FLOPs and achieved FLOP/s by op name and input shape, where shapes determine the cost.

    Achieved rate uses device self+children time when the op launched device work, else host time.
    Nested matmul ops (``linear`` calling ``addmm``) are each listed; do not add rows across levels.
    """
    # convolutions too when the trace kept Kineto's "Concrete Inputs" (stride, padding, dilation)
    has_conc = "concrete_inputs" in trace.events.columns
    wanted = FLOP_OPS + (("aten::conv1d", "aten::conv2d", "aten::conv3d") if has_conc else ())
    rows = _op_rows(trace).filter(pl.col("name").cast(pl.String).is_in(wanted))
    if not has_conc:
        rows = rows.with_columns(pl.lit(None, pl.String).alias("concrete_inputs"))
    empty = pl.DataFrame(
        schema={
            "name": pl.String,
            "input_dims": pl.String,
            "calls": pl.UInt32,
            "flops": pl.Float64,
            "time_ns": pl.Int64,
            "flops_per_s": pl.Float64,
        }
    )
    if rows.height == 0:
        return empty
    g = (
        rows.group_by("name", "input_dims", "concrete_inputs")
        .agg(
            pl.len().alias("calls"),
            pl.col("dur_ns").sum().alias("host_ns"),
            pl.col("device_total_ns").sum().alias("device_ns"),
        )
        .with_columns(pl.col("name").cast(pl.String))
    )
    per_call = [
        conv_flops(d, c) if n in CONV_OPS else _flops(n, d)
        for n, d, c in zip(
            g["name"].to_list(), g["input_dims"].to_list(), g["concrete_inputs"].to_list(), strict=True
        )
    ]
    g = g.with_columns(pl.Series("flop_per_call", per_call, dtype=pl.Float64)).drop_nulls("flop_per_call")
    return (
        g.with_columns(
            (pl.col("flop_per_call") * pl.col("calls")).alias("flops"),
            pl.when(pl.col("device_ns") > 0)
            .then(pl.col("device_ns"))
            .otherwise(pl.col("host_ns"))
            .alias("time_ns"),
        )
        .with_columns((pl.col("flops") / (pl.col("time_ns") / 1e9)).alias("flops_per_s"))
        .select("name", "input_dims", "calls", "flops", "time_ns", "flops_per_s")
        .sort(["flops", "name", "input_dims"], descending=[True, False, False], nulls_last=True)
    )


def kernels_by_op(trace: Trace) -> pl.DataFrame:
    """Device work by op name, input shape and kernel name: the plugin's "kernel by op", inclusive.

    A kernel (or memcpy/memset) is credited to the op that launched it and to every op enclosing
    that one on its thread, as the device total of ``operators`` counts it: so for each (name,
    input_dims) the rows' ``total_ns`` add up to that op row's ``device_total_ns`` and their
    ``self_total_ns`` (the part launched by the op itself, innermost) to its ``device_self_ns``.
    An op that calls itself (``aten::div`` -> ``aten::div``, the inner call the only child) is one
    call, as torch's ``key_averages`` and ``operators`` count it: its kernels are credited once.
    """
    return memo(trace, "kernels_by_op_chain", lambda: _kernels_by_op(trace))


def _kernels_by_op(trace: Trace) -> pl.DataFrame:
    ev = trace.events
    dev = kinds(trace, *DEVICE_WORK).filter(pl.col("op") >= 0)
    schema = {
        "name": pl.String,
        "input_dims": pl.String,
        "kernel": pl.String,
        "count": pl.UInt32,
        "total_ns": pl.Int64,
        "min_ns": pl.Int64,
        "max_ns": pl.Int64,
        "self_count": pl.UInt32,
        "self_total_ns": pl.Int64,
    }
    if dev.height == 0:
        return pl.DataFrame(schema=schema)
    is_op = np.zeros(ev.height, bool)
    op_rows = kinds(trace, *OP_KINDS).filter(~names.PROFILER_STEP & ~names.TORCHSCOPE_SPAN)
    is_op[op_rows["id"].to_numpy()] = True
    is_op &= ~_self_calls(trace)  # folded into their same-named parent, as in operators()
    parent = ev["parent"].fill_null(-1).to_numpy().astype(np.int64)
    launcher = dev["op"].to_numpy().astype(np.int64)
    # (device event, enclosing op row, is the launcher) for every op on the launching stack; the
    # launcher is the first op row met (a folded self-call's outermost same-named ancestor)
    which, rows, innermost = [], [], []
    d = np.arange(dev.height)
    credited = np.zeros(dev.height, bool)
    cur = launcher
    for _ in range(512):  # deeper than any real stack
        hit = is_op[cur]
        which.append(d[hit])
        rows.append(cur[hit])
        innermost.append(~credited[d[hit]])
        credited[d[hit]] = True
        cur = parent[cur]
        keep = cur >= 0
        if not keep.any():
            break
        d, cur = d[keep], cur[keep]
    pairs = pl.DataFrame(
        {"dev": np.concatenate(which), "row": np.concatenate(rows), "innermost": np.concatenate(innermost)}
    )
    # rows gathered first, names grouped as interned and turned into text once per group: a
    # cast of the whole event table's names first was most of this function's time
    key = ev.select("name", "input_dims")[pairs["row"]]
    info = dev.select(pl.col("name").alias("kernel"), "dur_ns")[pairs["dev"]]
    pairs = pl.concat([pairs, key, info], how="horizontal")
    return (
        pairs.group_by("name", "input_dims", "kernel")
        .agg(
            pl.len().alias("count"),
            pl.col("dur_ns").sum().alias("total_ns"),
            pl.col("dur_ns").min().alias("min_ns"),
            pl.col("dur_ns").max().alias("max_ns"),
            pl.col("innermost").sum().cast(pl.UInt32).alias("self_count"),
            pl.col("dur_ns").filter(pl.col("innermost")).sum().alias("self_total_ns"),
        )
        .cast(schema)  # type: ignore[arg-type]
        .sort(
            ["total_ns", "name", "input_dims", "kernel"],
            descending=[True, False, False, False],
            nulls_last=True,
        )
    )
