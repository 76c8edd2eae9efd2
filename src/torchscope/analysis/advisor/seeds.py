"""The seed cases no peer catches: slow convolution paths, host-device syncs, time spent in
Python outside torch ops, and double precision compute."""

from __future__ import annotations

import json
import math
import re
from typing import Any

import numpy as np
import polars as pl

from torchscope.analysis import intervals as iv
from torchscope.analysis import names
from torchscope.analysis.advisor.base import Context, Finding
from torchscope.analysis.frames import TOOL_SPAN_PREFIX, kinds, ran_under_torchscope_run, tool_frames
from torchscope.analysis.outside import accounted_spans, outside_per_window
from torchscope.trace.tree import nearest_ancestor


def slow_conv_path(ctx: Context) -> list[Finding]:
    ev = ctx.trace.events
    all_slow = kinds(ctx.trace, "cpu_op").filter(names.SLOW_CONV)
    if all_slow.height == 0:
        return []
    # count each fallback call once: thnn_conv2d wraps _slow_conv2d_forward
    parent_slow = ev.select(names.SLOW_CONV.alias("s"))["s"].gather(
        all_slow["parent"].fill_null(-1).clip(0, None)
    )
    slow = all_slow.filter(~(parent_slow & (all_slow["parent"].fill_null(-1) >= 0)))
    fast = kinds(ctx.trace, "cpu_op").filter(names.FAST_CONV)
    # the reason: the dtype of the convolutions above the fallback, when shapes were recorded
    convs = kinds(ctx.trace, "cpu_op").filter(
        pl.col("name")
        .cast(pl.String)
        .is_in(["aten::conv2d", "aten::convolution", "aten::_convolution", "aten::conv1d", "aten::conv3d"])
    )
    types = " ".join(t for t in convs["input_types"].drop_nulls().to_list()[:50])
    on_device = bool(kinds(ctx.trace, "kernel").height > 0)
    if "double" in types:
        reason = "double precision inputs (oneDNN and cuDNN have no float64 convolution)"
        fix = "Use float32 (or bf16/fp16 under autocast): drop torch.set_default_dtype(torch.float64) / .double() on the model and inputs."
    elif fast.height > 0 and not on_device:
        reason = (
            "oneDNN is on and ran the other convolutions; torch picks the reference kernel for "
            "unstrided convolutions on small batches when it runs single-threaded"
        )
        fix = "Use more intra-op threads (torch.set_num_threads) or larger batches, or channels_last inputs, so oneDNN is used."
    else:
        backend = "cuDNN" if on_device else "oneDNN (MKLDNN)"
        flag = "torch.backends.cudnn.enabled" if on_device else "torch.backends.mkldnn.enabled"
        reason = f"{backend} was not used: it is disabled ({flag} = False) or does not support these inputs"
        fix = f"Set {flag} = True and keep inputs in a supported dtype and layout."
    tot = float(slow["dur_ns"].sum())
    share = tot / ctx.host_span_ns
    example = slow.sort("dur_ns", descending=True).row(0, named=True)
    return [
        Finding(
            rule="slow_conv_path",
            message=(
                f"{slow.height} convolutions ran on the fallback kernel "
                f"{slow['name'].cast(pl.String)[0]} ({share:.0%} of the profiled time): {reason}."
            ),
            fix=fix,
            evidence={
                "ops": sorted(set(all_slow["name"].cast(pl.String).to_list())),
                "calls": slow.height,
                "time_us": tot / 1e3,
                "share": share,
                "reason": reason,
                "example_stack": ctx.stack_of(int(example["id"])),
            },
            impact=share,
            share=share,
        )
    ]


def _device_syncs(ctx: Context) -> pl.DataFrame:
    """The host's waits for the device: synchronizing runtime calls, and ``.item()``
    (``_local_scalar_dense``) calls that copied from the device (a runtime call beneath them).
    ``.item()`` of a CPU tensor (Adam's step count, a CPU run's loss) waits for nothing.

    Each wait counts once: the ``cudaStreamSynchronize`` inside an ``.item()`` is that item's
    wait, not a second one. The wait that ends a copy *to* the device from pageable memory is
    the copy's (``pageable_memcpy`` names it, with its own fix: pinned memory), not counted here;
    nor are the profiler's own waits and a wait after the last op (closing the profiled region).
    """
    sync = kinds(ctx.trace, "cpu_op", "runtime").filter(names.SYNC_OP)
    if sync.height == 0:
        return sync
    ev = ctx.trace.events
    parent = ev["parent"].fill_null(-1).to_numpy().astype(np.int64)
    scalar = sync["name"].cast(pl.String) == "aten::_local_scalar_dense"
    if scalar.any():
        copied = np.zeros(ev.height, bool)
        cur = parent[kinds(ctx.trace, "runtime")["id"].to_numpy()]
        for _ in range(8):  # .item() -> _local_scalar_dense -> cudaMemcpyAsync: a few levels at most
            cur = cur[cur >= 0]
            if cur.size == 0:
                break
            copied[cur] = True
            cur = parent[cur]
        sync = sync.filter(~scalar | pl.Series(copied[sync["id"].to_numpy()]))
    ids = sync["id"].to_numpy()
    in_sync = np.zeros(ev.height, bool)
    in_sync[ids] = True
    nested = nearest_ancestor(parent, ids, in_sync) >= 0
    op = nearest_ancestor(parent, ids, (ev["kind"] == "cpu_op").to_numpy())
    htod = (
        kinds(ctx.trace, "memcpy")
        .filter(names.HOST_TO_DEVICE_COPY & names.PAGEABLE_COPY)["op"]
        .drop_nulls()
        .to_numpy()
    )
    to_device = np.isin(op, htod[htod >= 0])
    # torchscope's own waits (its stop() synchronizes) and the one that closes the profiled
    # region after its last op (the recommended torch.cuda.synchronize() before stopping)
    ours = nearest_ancestor(parent, ids, ctx._tool_rows) >= 0
    ops = kinds(ctx.trace, "cpu_op")
    last_op_end = int((ops["start_ns"] + ops["dur_ns"]).max() or 0) if ops.height else 0  # type: ignore[operator]
    closing = sync["start_ns"].to_numpy() >= last_op_end
    return sync.filter(pl.Series(~nested & ~to_device & ~ours & ~closing))


def _library_call(ctx: Context, row: int) -> str | None:
    """The library call the user made that an event ran inside (``Optimizer.step#Adam.step``)."""
    parent = ctx.trace.events["parent"]
    cur = parent[row]
    while cur is not None and cur >= 0:
        name = str(ctx.names[cur])
        if name.startswith("Optimizer."):
            return name
        cur = parent[cur]
    return None


def host_device_sync(ctx: Context) -> list[Finding]:
    """The host waits for the device, when the steps make it wait at least once each.

    Only the host side is counted (``.item()`` that copied from the device, ``cudaStreamSynchronize``,
    synchronous ``cudaMemcpy``...): the device-side ``cuda_sync`` rows mirror the same waits. A
    run without a device is never told this. Waits inside a library call the user made (an
    optimizer's ``step``) are attributed to that call, not counted as the user's own; the
    example names the innermost frame of the user's code when stacks were recorded.
    """
    if kinds(ctx.trace, "kernel", "memcpy", "memset", "runtime").height == 0:
        return []  # no device: nothing to wait for
    sync = _device_syncs(ctx)
    steps = ctx.overview.steps.height if ctx.overview.steps_from_trace else 0
    if sync.height == 0 or sync.height < steps:
        return []
    ids = sync["id"].to_list()
    owner = [_library_call(ctx, int(i)) for i in ids]
    sync = sync.with_columns(pl.Series("library_call", owner, dtype=pl.String))
    mine = sync.filter(pl.col("library_call").is_null())
    lib = sync.filter(pl.col("library_call").is_not_null())

    def counts(df: pl.DataFrame, key: str) -> list[tuple[str, int]]:
        by = df.group_by(key).agg(pl.len().alias("calls")).sort(["calls", key], descending=[True, False])
        return [(str(k), int(c)) for k, c in by.iter_rows()]

    by_name = counts(mine.with_columns(pl.col("name").cast(pl.String)), "name")
    by_library = counts(lib, "library_call")
    first = (mine if mine.height else sync).sort("start_ns").row(0, named=True)
    share = float(sync["dur_ns"].sum()) / ctx.host_span_ns
    per_step = mine.height / steps if steps else None
    parts = []
    if mine.height:
        where = (
            f"{per_step:.1f} times per step"
            if per_step is not None
            else f"{mine.height} times in the profiled window"
        )
        parts.append(
            f"The host waits for the device {where} ({', '.join(f'{n} x{c}' for n, c in by_name[:3])})"
        )
    if lib.height:
        inside = ", ".join(f"{n} x{c}" for n, c in by_library[:3])
        parts.append(
            ("and" if mine.height else "The host waits for the device") + f" inside library calls: {inside}"
        )
    user_frame = ctx.user_frame_of(int(first["id"]))
    message = " ".join(parts) + (f"; first at {user_frame}." if user_frame else ".")
    fix = (
        "Keep values on the device: avoid .item(), .cpu(), .numpy(), print(tensor) and torch.cuda.synchronize() "
        "inside the step; compare and index with tensor ops (torch.nonzero, masking) and read results once after the loop."
    )
    if lib.height and not mine.height:
        fix = (
            "The waits are inside the library calls named: use their device-side variants "
            "(an optimizer's capturable=True or fused=True keeps its step count on the device)."
        )
    return [
        Finding(
            rule="host_device_sync",
            message=message,
            fix=fix,
            evidence={
                "calls": mine.height,
                "per_step": per_step,
                "by_name": dict(by_name),
                "in_library_calls": dict(by_library),
                "user_frame": user_frame,
                "example_stack": ctx.stack_of(int(first["id"])),
                "share": share,
            },
            impact=max(share, 0.01),
            share=share,
        )
    ]


def python_outside_ops(ctx: Context, min_share: float = 0.3, min_trace_share: float = 0.05) -> list[Finding]:
    """Labelled regions and steps whose time is mostly not accounted for by any torch op.

    "Outside ops" is ``analysis.outside``'s definition, shared with the overview's host
    breakdown: time when no thread is in an op (backward runs on the autograd thread), no
    collective or runtime call runs and the device is idle. Collective annotations
    (``gloo:all_reduce``...) are communication, never a region here. Each region is reported
    once, summed over the threads that recorded it; the steps use the overview's own numbers.
    """
    regions = (
        kinds(ctx.trace, "cpu_op", "user_annotation")
        .filter(
            (names.PROFILER_STEP | (pl.col("kind") == "user_annotation"))
            # the spans `torchscope run` adds (setup, after the last step) are not the user's regions
            & ~pl.col("name").cast(pl.String).str.starts_with(TOOL_SPAN_PREFIX)
            & ~names.DATALOADER
            & ~names.OPTIMIZER
            & ~names.HOST_COLLECTIVE
            & (pl.col("dur_ns") > 0)
        )
        .select(
            "tid",
            "start_ns",
            "dur_ns",
            pl.when(names.PROFILER_STEP)
            .then(pl.lit("ProfilerStep#*"))
            .otherwise(pl.col("name").cast(pl.String))
            .alias("region"),
        )
    )
    if regions.height == 0:
        return []
    total = ctx.host_span_ns
    rs_all = regions["start_ns"].to_numpy()
    per = regions.with_columns(
        pl.Series("outside", outside_per_window(ctx.trace, rs_all, rs_all + regions["dur_ns"].to_numpy()))
    )
    groups = per.group_by("region").agg(
        pl.col("outside").sum(), pl.col("dur_ns").sum().alias("span"), pl.len().alias("calls")
    )
    ov = ctx.overview
    if ov.steps_from_trace and groups.filter(pl.col("region") == "ProfilerStep#*").height:
        # the steps as the overview counts them (stretched to their device work), so the
        # advice and the host breakdown give the same number for the same steps
        groups = groups.with_columns(
            pl.when(pl.col("region") == "ProfilerStep#*")
            .then(pl.lit(int(ov.host_steps["Python outside ops"].sum())))
            .otherwise(pl.col("outside"))
            .alias("outside"),
            pl.when(pl.col("region") == "ProfilerStep#*")
            .then(pl.lit(int(ov.steps["dur_ns"].sum())))
            .otherwise(pl.col("span"))
            .alias("span"),
            pl.when(pl.col("region") == "ProfilerStep#*")
            .then(pl.lit(ov.steps.height, dtype=pl.UInt32))
            .otherwise(pl.col("calls"))
            .alias("calls"),
        )
    groups = groups.filter(
        (pl.col("outside") >= min_share * pl.col("span")) & (pl.col("outside") >= min_trace_share * total)
    ).sort(["outside", "region"], descending=[True, False])
    if groups.height == 0:
        return []
    covered = accounted_spans(ctx.trace)
    under_run = ran_under_torchscope_run(ctx.trace)
    py = kinds(ctx.trace, "python_function")
    out: list[Finding] = []
    for region, outside_i, span_i, calls in groups.select("region", "outside", "span", "calls").iter_rows():
        outside, span = float(outside_i), float(span_i)
        share = outside / max(span, 1.0)
        mine = per.filter(pl.col("region") == region)
        culprits: list[str] = []
        if py.height:
            inside = np.zeros(py.height, bool)
            pst = py["start_ns"].to_numpy()
            ptid = py["tid"].to_numpy()
            for (tid,), m in mine.partition_by("tid", as_dict=True).items():
                rs = m["start_ns"].to_numpy()
                spans = iv.merge(rs, rs + m["dur_ns"].to_numpy())
                k = np.searchsorted(spans[0], pst, side="right") - 1
                inside |= (ptid == tid) & (k >= 0) & (pst < spans[1][np.maximum(k, 0)])
            culprits, plumbing, torchs_own = _python_culprits(ctx, py.filter(pl.Series(inside)), covered)
            if (plumbing and not culprits) or (culprits and all(torchs_own)):
                # only the profiler's own frames, or torch's own code: its methods between their
                # Python call and their op (argument parsing, dispatch), its Python plumbing
                # (nn.Module.__getattr__, is_scripting), or the OS running something else
                # meanwhile: nothing the user can move
                continue
        label = "the steps" if region == "ProfilerStep#*" else f"'{region}'"
        unit = "step" if region == "ProfilerStep#*" else "call"
        over = f"{outside / 1e6:.1f} ms over {calls} {unit}{'s' if calls != 1 else ''}"
        if culprits:
            message = (
                f"{share:.0%} of {label} ({over}) runs Python outside "
                f"torch ops; most of it in {', '.join(culprits)}."
            )
            fix = (
                "Move that work into torch ops (e.g. torch.nonzero or boolean masking on the device instead of "
                "np.argwhere on .cpu().numpy()), or out of the step."
                if any("numpy" in c for c in culprits)
                else "Move that work into torch ops, or out of the step, or off the critical path (a DataLoader"
                " worker, a background thread)."
            )
        else:
            if under_run:  # the trace has no stacks, the run's sampler has them
                how = "the trace holds no Python stacks; the run's sampled hot spots name that code"
            elif py.height == 0:
                how = "no Python stacks were recorded, so the code that ran there is unknown"
            else:
                how = "the recorded Python stacks do not name it, so the code that ran there is unknown"
            message = (
                f"{share:.0%} of {label} ({over}) is outside every torch op, "
                f"collective, runtime call and device kernel; {how}."
            )
            fix = (
                "See the run's Python hot spots (their 'outside ops' column: in the summary the run printed,"
                " and in report.html in its run directory) for the code that runs there, then move it into"
                " torch ops or out of the step."
                if under_run
                else "Record with with_stack=True (or profile with `torchscope run`, whose sampler names the Python "
                "functions) to see which code runs there, then move it into torch ops or out of the step."
            )
        out.append(
            Finding(
                rule="python_outside_ops",
                message=message,
                fix=fix,
                evidence={
                    "region": str(region),
                    "calls": calls,
                    "outside_ops_us": outside / 1e3,
                    "region_us": span / 1e3,
                    "share": share,
                    "python_functions": culprits,
                    "python_stacks": bool(py.height),
                },
                impact=outside / total,
                share=outside / total,
            )
        )
    return out


_ADDR = re.compile(r" at 0x[0-9a-fA-F]+")
# a torch method or function called from Python, as Kineto names its Python frame: a Tensor's
# or a type's, or one of torch's C extension objects (autograd's engine: ``run_backward of
# torch._C._EngineBase``; pybind11 function records, which can have no name). Named as the
# culprit of a tiny model's steps, ``loss.backward()``'s were advice about torch's internals.
_TORCH_BUILTIN = re.compile(
    r"<built-in (method|function) \w* ?of (Tensor|type|torch\._C\.[\w.]+|pybind11_builtins\.\w+) object>$"
)
# a frame of torch's own Python source ("…/site-packages/torch/nn/modules/module.py(1954): __getattr__")
_TORCH_SOURCE = re.compile(r"(^|/)torch/[\w/]+\.py\(\d+\): ")


# Kineto's frame for an nn.Module call ("nn.Module: Linear_0"): whose code it is, torch's or the
# user's, shows in the frames it ran
_MODULE_FRAME = "nn.Module: "


def _is_torch_frame(frame: str) -> bool:
    """A torch method called from Python, or a frame of torch's own Python source."""
    return bool(_TORCH_BUILTIN.match(frame) or _TORCH_SOURCE.search(frame))


# the profiler's own Python (record_function's __enter__/__exit__, the profile object's step and
# stop, our wrapper): its time is the cost of measuring, never the user's code. On a loaded
# machine a record_function __exit__ can outlast the user's own hot spot and would be named first.
_PROFILER_PLUMBING = re.compile(
    r"(^|/)(torch/autograd/profiler(_util)?\.py|torch/profiler/|torchscope/capture/)"
)


def _python_culprits(
    ctx: Context, py: pl.DataFrame, covered: iv.Spans, top: int = 3
) -> tuple[list[str], bool, list[bool]]:
    """The calls the user wrote that spent the time: top-level Python frames of the region,
    ranked by their time outside torch ops, each with the hottest frame beneath it. The
    profiler's own frames are left out; the flag says whether any were. The last list says, for
    each culprit, whether it is torch's own code (its methods, its source, its nn modules)."""
    # torchscope's own frames (the runner executing a `torchscope run` script, the CLI, runpy)
    # are never culprits: the user's frames beneath them are the top level
    tool = tool_frames(ctx.trace)
    py = py.filter(~pl.Series(tool[py["id"].to_numpy()]))
    if py.height == 0:
        return [], False, []
    ev = ctx.trace.events
    parent = ev["parent"].fill_null(-1).to_numpy().astype(np.int64)
    rows = py["id"].to_numpy().astype(np.int64)
    # through our frames: what our wrapper of optimizer.step runs is under the user's frame that
    # called it (torch's optimizer wrapper was a culprit of its own, beside the user's train_step)
    below = rows[(parent[rows] >= 0) & tool[np.maximum(parent[rows], 0)]]
    if below.size:
        parent = parent.copy()
        parent[below] = nearest_ancestor(parent, below, ~tool)
    in_set = np.zeros(ev.height, bool)
    in_set[rows] = True
    ps = py["start_ns"].to_numpy()
    pe = ps + py["dur_ns"].to_numpy()
    outside = (pe - ps) - iv.overlap_per_window(covered, ps, pe)
    par = parent[rows]
    top_level = ~in_set[np.maximum(par, 0)] | (par < 0)
    names_ = ctx.names
    # the hottest frame (by self time) under each top-level frame
    self_ns = py["self_ns"].to_numpy()
    root = rows.copy()
    for _ in range(256):
        p = parent[root]
        step = (p >= 0) & in_set[np.maximum(p, 0)]
        if not step.any():
            break
        root = np.where(step, p, root)
    # one entry per label: the same function called several times is one culprit, its time summed
    by_label: dict[str, list[Any]] = {}  # frame -> [outside ns, torch's own, label]
    plumbing = False
    for i in np.argsort(-outside):
        if not top_level[i] or outside[i] <= 0:
            continue
        name = str(names_[int(rows[i])])
        if _PROFILER_PLUMBING.search(name):
            plumbing = True
            continue
        mine = np.flatnonzero(root == rows[i])
        if name.startswith(_MODULE_FRAME):
            # a module call names the code it ran, and is torch's when its forward is in torch's
            # source (nn.Linear) rather than the user's (their own block)
            mine = mine[rows[mine] != rows[i]]
            forwards = rows[par == rows[i]]
            own = any(_TORCH_SOURCE.search(str(names_[int(c)])) for c in forwards)
        hot = rows[mine[np.argmax(self_ns[mine])]] if mine.size else rows[i]
        frame = _ADDR.sub("", name)
        if not name.startswith(_MODULE_FRAME):
            own = _is_torch_frame(frame) and _is_torch_frame(_ADDR.sub("", str(names_[int(hot)])))
        entry = by_label.get(frame)
        if entry is None:  # its costliest call names the hottest frame beneath it
            label = frame + (f" (in {_ADDR.sub('', str(names_[int(hot)]))})" if hot != rows[i] else "")
            by_label[frame] = [float(outside[i]), own, label]
        else:
            entry[0] += float(outside[i])
    ranked = sorted(by_label.values(), key=lambda v: (-v[0], v[2]))
    # the user's calls, when there are any: beside them, torch's own frames (``backward``'s
    # engine, a ``randn``) were named as culprits of a step whose time went to a json.dumps
    if not all(v[1] for v in ranked):
        ranked = [v for v in ranked if not v[1]]
    # and each with at least a tenth of the time the named ones hold
    total = sum(v[0] for v in ranked[:top])
    ranked = [v for v in ranked[:top] if v[0] >= 0.1 * total]
    return [str(v[2]) for v in ranked], plumbing, [bool(v[1]) for v in ranked]


def _float64_tensor_input(types: str, dims: str | None) -> bool:
    """Whether an op's inputs include a float64 tensor of two or more elements. A Python float
    passed to an op is recorded as a 0-dim ``double`` (``x.mul_(0.9)`` in every optimizer
    step): that is no work in float64."""
    try:
        ty, di = json.loads(types), json.loads(dims or "[]")
    except ValueError:
        return False
    return any(
        t == "double" and isinstance(d, list) and d and all(isinstance(v, int) for v in d) and math.prod(d) > 1
        for t, d in zip(ty, di, strict=False)
    )


def double_precision(ctx: Context) -> list[Finding]:
    """Ops that compute on float64 tensors, by their share of the profiled time: the device time
    of their kernels when they launched any, else their own host time. A stray float64 op (a
    metric, a ``.double()`` left in the loss) is a few percent of a step; the rule once needed
    half of all op time in float64 and never named one (a new user's H200 run: ``aten::std`` on
    a [4096, 1000] float64 tensor, 1.3 % of the steps)."""
    ops = kinds(ctx.trace, "cpu_op").filter(pl.col("input_types").str.contains("double", literal=True))
    if ops.height == 0:
        return []
    f64 = [_float64_tensor_input(t, d) for t, d in zip(ops["input_types"], ops["input_dims"], strict=True)]
    dbl = ops.filter(pl.Series(f64, dtype=pl.Boolean))
    if dbl.height == 0:
        return []
    k = kinds(ctx.trace, "kernel", "memcpy", "memset").filter(pl.col("op").is_in(dbl["id"].implode()))
    on_device = k.height > 0
    per_op = (
        k.group_by(pl.col("op").alias("id")).agg(pl.col("dur_ns").sum().alias("ns"))
        if on_device
        else dbl.select("id", pl.col("self_ns").alias("ns"))
    )
    top = (
        dbl.select("id", pl.col("name").cast(pl.String))
        .join(per_op, on="id")
        .group_by("name")
        .agg(pl.col("ns").sum(), pl.len().alias("calls"))
        .sort(["ns", "name"], descending=[True, False])
    )
    share = float(top["ns"].sum()) / ctx.host_span_ns
    if share <= 0.0:
        return []
    where = "of their kernels on the device" if on_device else "on the host"
    listed = ", ".join(f"{n} x{c}" for n, c in top.select("name", "calls").head(3).iter_rows())
    return [
        Finding(
            rule="double_precision",
            message=f"Ops on float64 tensors take {share:.1%} of the profiled time ({where}): {listed}.",
            fix="Use float32 (torch.set_default_dtype(torch.float32), model.float(), inputs.float(), no .double()); float64 is many times slower and skips oneDNN/cuDNN/Tensor Cores.",
            evidence={"share": share, "ops": top["name"].head(5).to_list(), "device": on_device},
            impact=share,
            share=share,
        )
    ]
