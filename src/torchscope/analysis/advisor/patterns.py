"""torch's profiler pattern matcher's anti-patterns and HTA's launch-bound check, over a Trace."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import polars as pl

from torchscope.analysis import names
from torchscope.analysis.advisor.base import Context, Finding
from torchscope.analysis.advisor.plugin import DATALOADER_SHARE, dataloader_share
from torchscope.analysis.frames import kinds
from torchscope.analysis.kernels import host_wait_ns
from torchscope.analysis.operators import _device_time_per_row
from torchscope.trace.tree import nearest_ancestor

MATMUL_OPS = ["aten::mm", "aten::bmm", "aten::addmm", "aten::baddbmm"]


def _op_rows(ctx: Context, names_: list[str]) -> pl.DataFrame:
    return kinds(ctx.trace, "cpu_op").filter(pl.col("name").cast(pl.String).is_in(names_))


def tf32_matmul(ctx: Context) -> list[Finding]:
    props = ctx.trace.meta.device_properties
    major = props[0].get("computeMajor") if props else None
    if major is None or int(major) < 8:
        return []
    k = kinds(ctx.trace, "kernel").filter(pl.col("op").fill_null(-1) >= 0)
    op_name = ctx.names.gather(k["op"])
    k = k.with_columns(op_name.alias("op_name"))
    fp32 = k.filter(pl.col("op_name").is_in(MATMUL_OPS) & names.FP32_GEMM_KERNEL)
    if fp32.height == 0:
        return []
    share = float(fp32["dur_ns"].sum()) / ctx.host_span_ns
    return [
        Finding(
            rule="tf32_matmul",
            message=f"{fp32.height} float32 matmul kernels ran without TF32 on a compute-capability {major}.x device.",
            fix="Allow TF32: torch.backends.cuda.matmul.allow_tf32 = True (or torch.set_float32_matmul_precision('high')).",
            evidence={"kernels": fp32.height, "example": str(fp32["name"][0]), "share": share},
            impact=share,
            share=share,
        )
    ]


def optimizer_foreach(ctx: Context) -> list[Finding]:
    single = kinds(ctx.trace, "python_function").filter(
        pl.col("name").cast(pl.String).str.contains(r"_single_tensor_\w+")
    )
    if single.height == 0:
        return []
    which = sorted(set(single["name"].cast(pl.String).str.extract(r"(_single_tensor_\w+)").to_list()))
    return [
        Finding(
            rule="optimizer_foreach",
            message=f"The optimizer updates one tensor at a time ({', '.join(which)}).",
            fix="Construct the optimizer with foreach=True (or fused=True on CUDA) to update all parameters in a few kernels.",
            evidence={
                "calls": single.height,
                "functions": which,
                "share": float(single["dur_ns"].sum()) / ctx.host_span_ns,
            },
            impact=float(single["dur_ns"].sum()) / ctx.host_span_ns,
            share=float(single["dur_ns"].sum()) / ctx.host_span_ns,
        )
    ]


def zero_grad_set_to_none(ctx: Context) -> list[Finding]:
    ev = ctx.trace.events
    zg = ev.select("id", "kind").filter(
        ctx.names.str.contains(r"zero_grad") & pl.col("kind").is_in(["user_annotation", "python_function"])
    )
    if zg.height == 0:
        return []
    parent = ev["parent"].fill_null(-1).to_numpy().astype(np.int64)
    zeros = kinds(ctx.trace, "cpu_op").filter(
        pl.col("name").cast(pl.String).is_in(["aten::zero_", "aten::fill_"])
    )
    in_zero_grad = np.zeros(ev.height, bool)
    in_zero_grad[zg["id"].to_numpy()] = True
    rows = zeros["id"].to_numpy().astype(np.int64)
    hits = int((nearest_ancestor(parent, rows, in_zero_grad) >= 0).sum())
    if hits == 0:
        return []
    return [
        Finding(
            rule="zero_grad_set_to_none",
            message=f"zero_grad fills {hits} gradient tensors with zeros instead of dropping them.",
            fix="Call optimizer.zero_grad(set_to_none=True) (the default since torch 2.0) or model.zero_grad(set_to_none=True).",
            evidence={"zero_fills": hits},
            impact=0.01,
        )
    ]


def conv_bias_before_batchnorm(ctx: Context) -> list[Finding]:
    ops = kinds(ctx.trace, "cpu_op").filter(
        pl.col("name").cast(pl.String).is_in(["aten::conv2d", "aten::batch_norm"])
    )
    ops = ops.sort("tid", "start_ns").with_columns(
        pl.col("name").cast(pl.String).shift(-1).over("tid").alias("next")
    )
    convs = ops.filter(
        (pl.col("name").cast(pl.String) == "aten::conv2d") & (pl.col("next") == "aten::batch_norm")
    )
    with_bias: list[tuple[int, str]] = []  # (step, the shapes without the batch dimension)
    for step, dims in zip(convs["step"].to_list(), convs["input_dims"].to_list(), strict=True):
        try:
            d = json.loads(dims) if dims else []
        except ValueError:
            continue
        if len(d) > 2 and isinstance(d[2], list) and len(d[2]) > 0:
            inputs = d[0][1:] if isinstance(d[0], list) else d[0]
            with_bias.append((-1 if step is None else int(step), json.dumps([inputs, *d[1:]])))
    calls = len(with_bias)
    if calls == 0:
        return []
    n = _layers(with_bias)
    # "5 convolutions" for one layer over five steps sent users looking for layers that do not exist
    return [
        Finding(
            rule="conv_bias_before_batchnorm",
            message=(
                f"{n} convolution layer{'s' if n != 1 else ''} with a bias feed{'s' if n == 1 else ''}"
                f" straight into BatchNorm, which cancels the bias ({calls} call{'s' if calls != 1 else ''})."
            ),
            fix="Create those Conv2d layers with bias=False.",
            evidence={"convolutions": n, "calls": calls},
            impact=0.01,
        )
    ]


def _layers(calls: list[tuple[int, str]]) -> int:
    """How many layers made these calls (``step``, shapes): a layer runs once a step, so the
    count most steps show (the fewer on a tie); without steps, the distinct shapes, the batch
    dimension left out. Counting every distinct shape read "4 layers" for a model of 2 whose
    evaluation (another batch size) ran in one of the steps, and one layer for ResNet's
    identical blocks."""
    per_step = Counter(step for step, _ in calls if step >= 0)
    if not per_step:
        return len({shapes for _, shapes in calls})
    counts = Counter(per_step.values())
    return min(counts, key=lambda n: (-counts[n], n))


def _device_or_host_ns(ctx: Context, ops: pl.DataFrame) -> int:
    """What ``ops`` cost: the device time of the work they launched, when they launched any;
    else their host time."""
    self_dev, _ = _device_time_per_row(ctx.trace)
    device = int(self_dev[ops["id"].to_numpy()].sum())
    return device if device else int(ops["dur_ns"].sum())


def matmul_dims_not_multiple_of_8(ctx: Context) -> list[Finding]:
    """Half-precision matrix products whose dimensions are not multiples of 8 (Tensor Cores want
    them). Only the products themselves are looked at (``aten::linear`` and ``aten::matmul`` call
    one), and the finding carries their time, so a classifier head of 10 classes on a model that
    spends its time elsewhere is not worth a line (seen on an H200: 0.6 % of a step)."""
    rows = _op_rows(ctx, MATMUL_OPS).filter(
        pl.col("input_types").fill_null("").str.contains(r"c10::(Half|BFloat16)")
    )
    bad: list[int] = []
    example = ""
    for op_id, dims in rows.select("id", "input_dims").iter_rows():
        try:
            d = [x for x in json.loads(dims or "[]") if isinstance(x, list) and len(x) >= 2]
        except ValueError:
            continue
        if any(v % 8 for shape in d[:3] for v in shape[-2:]):
            bad.append(int(op_id))
            example = example or str(dims)
    if not bad:
        return []
    share = _device_or_host_ns(ctx, rows.filter(pl.col("id").is_in(bad))) / ctx.host_span_ns
    return [
        Finding(
            rule="matmul_dims_not_multiple_of_8",
            message=f"{len(bad)} half-precision matmuls have dimensions that are not multiples of 8, so they miss Tensor Cores ({share:.1%} of the profiled time).",
            fix="Pad the matrix dimensions (hidden size, vocabulary, batch) to multiples of 8.",
            evidence={"calls": len(bad), "example_input_dims": example, "share": share},
            impact=share,
            share=share,
        )
    ]


FACTORY_OPS = [
    "aten::zeros",
    "aten::ones",
    "aten::full",
    "aten::empty",
    "aten::arange",
    "aten::rand",
    "aten::randn",
    "aten::randint",
    "aten::tensor",
    "aten::scalar_tensor",
    "aten::zeros_like",
    "aten::ones_like",
    "aten::full_like",
    "aten::eye",
    "aten::linspace",
]


def cpu_tensor_copied_to_device(ctx: Context) -> list[Finding]:
    """A tensor made by a factory op on the CPU and moved right after (torch's extra-copy pattern)."""
    ev = ctx.trace.events
    h2d = kinds(ctx.trace, "memcpy").filter(names.HOST_TO_DEVICE_COPY)
    if h2d.height == 0:
        return []
    parent = ev["parent"].fill_null(-1).to_numpy().astype(np.int64)
    is_to = ctx.names.is_in(["aten::to", "aten::_to_copy", "aten::copy_"]).to_numpy()
    # the outermost aten::to / _to_copy / copy_ above each copy: all copies walk up at once, one
    # level a step (a per-copy Python walk over every event's name as an object was 50 ms)
    cur = h2d["op"].fill_null(-1).to_numpy().astype(np.int64)
    top = np.full(cur.size, -1, np.int64)
    while (live := cur >= 0).any():
        here = np.where(live, cur, 0)
        top = np.where(live & is_to[here], cur, top)
        cur = np.where(live, parent[here], -1)
    tos_arr = top[top >= 0]
    if tos_arr.size == 0:
        return []
    # siblings under the nearest enclosing event that is not a Python frame: with stacks
    # recorded, torch.ones(...) and .to(...) each sit under a frame of their own
    # (``<built-in method ones ...>``)
    ops = kinds(ctx.trace, "cpu_op").select("id", "tid", "start_ns", pl.col("name").cast(pl.String))
    not_frame = (ev["kind"] != "python_function").to_numpy()
    ops = ops.with_columns(pl.Series("op_parent", nearest_ancestor(parent, ops["id"].to_numpy(), not_frame)))
    ops = ops.sort("tid", "op_parent", "start_ns").with_columns(
        pl.col("name").shift(1).over("tid", "op_parent").alias("prev")
    )
    hits = ops.filter(pl.col("id").is_in(tos_arr.tolist()) & pl.col("prev").is_in(FACTORY_OPS))
    if hits.height == 0:
        return []
    made = hits.group_by("prev").len().sort(["len", "prev"], descending=[True, False])
    factory = "torch." + str(made["prev"][0]).removeprefix("aten::")
    return [
        Finding(
            rule="cpu_tensor_copied_to_device",
            message=f"{hits.height} tensors are created on the CPU ({', '.join(made['prev'].head(3).to_list())}) and then copied to the device.",
            fix=f"Create them on the device directly: {factory}(..., device='cuda') instead of {factory}(...).to('cuda').",
            evidence={
                "copies": hits.height,
                "factories": {k: int(v) for k, v in made.iter_rows()},
                "example_stack": ctx.stack_of(int(hits["id"][0])),
            },
            impact=0.01,
        )
    ]


def _direction(copies: int, to_device: int) -> str:
    if to_device == copies:
        return "copies from pageable host memory to the device"
    if to_device == 0:
        return "copies from the device to pageable host memory"
    return f"copies between the device and pageable host memory ({to_device} to the device)"


def pageable_memcpy(ctx: Context) -> list[Finding]:
    """Copies between the device and *pageable* host memory, which the host waits for.

    CUDA copies from pageable memory through a staging buffer, synchronously, at a fraction of
    the link's speed (12 GB/s for a 16 MB batch on an H200, where pinned memory goes several
    times faster), and ``non_blocking=True`` cannot overlap it with compute. The plugin and
    HTA show such copies as "Memcpy" time without saying why or what to do.
    """
    copies = kinds(ctx.trace, "memcpy").filter(names.PAGEABLE_COPY)
    if copies.height == 0:
        return []
    busy = int(copies["dur_ns"].sum())
    share = busy / ctx.host_span_ns
    nbytes = int(copies["bytes"].fill_null(0).sum())
    to_device = copies.filter(names.HOST_TO_DEVICE_COPY)
    largest = copies.sort("dur_ns", descending=True).row(0, named=True)
    launcher = largest["op"] if largest["op"] is not None and largest["op"] >= 0 else None
    user_frame = ctx.user_frame_of(int(launcher)) if launcher is not None else None
    where = f"; the largest at {user_frame}" if user_frame else ""
    rate = nbytes / busy if busy else 0.0  # bytes per ns = GB/s
    return [
        Finding(
            rule="pageable_memcpy",
            message=(
                f"{copies.height} {_direction(copies.height, to_device.height)} move {nbytes / 2**20:.1f} MiB "
                f"at {rate:.1f} GB/s and take {share:.1%} of the profiled time; the host waits for each{where}."
            ),
            fix=(
                "Pin the host memory (DataLoader(pin_memory=True), or tensor.pin_memory() once) and copy with "
                ".to(device, non_blocking=True) so the copy overlaps compute; keep tensors reused every step on the device."
                if to_device.height
                else "Copy into pinned host memory (a buffer made once with torch.empty(..., pin_memory=True), then "
                "buffer.copy_(x, non_blocking=True)) and synchronize once when the values are needed, or keep them on the device."
            ),
            evidence={
                "copies": copies.height,
                "to_device": to_device.height,
                "bytes": nbytes,
                "gb_per_s": rate,
                "share": share,
                "user_frame": user_frame,
                "example_stack": ctx.stack_of(int(launcher)) if launcher is not None else [],
            },
            impact=share,
            share=share,
        )
    ]


def channels_last(ctx: Context) -> list[Finding]:
    """Convolutions whose inputs cuDNN transposes to NHWC and back, call after call.

    Tensor Core convolutions run in NHWC; a model kept in PyTorch's default NCHW makes cuDNN
    convert each input and output (``nchwToNhwcKernel``/``nhwcToNchwKernel``): 19 % of the
    kernel time of a ResNet-18 step on an H200, 9 % on ``nccl_rank0_of_2``'s V100s. Converting
    the model and its input once (``channels_last``) removes them.
    """
    k = kinds(ctx.trace, "kernel").filter(names.LAYOUT_TRANSPOSE_KERNEL)
    if k.height == 0:
        return []
    busy = int(k["dur_ns"].sum())
    share = busy / ctx.host_span_ns
    all_kernels = int(kinds(ctx.trace, "kernel")["dur_ns"].sum()) or 1
    launched = k["op"].fill_null(-1)
    by_op = (
        pl.DataFrame({"op": ctx.names.gather(launched.filter(launched >= 0))})
        .group_by("op")
        .len()
        .sort(["len", "op"], descending=[True, False])
    )
    return [
        Finding(
            rule="channels_last",
            message=(
                f"{k.height} kernels convert tensors between NCHW and NHWC around convolutions: "
                f"{busy / all_kernels:.0%} of kernel time, {share:.1%} of the profiled time "
                f"({', '.join(by_op['op'].head(2).to_list())})."
            ),
            fix=(
                "Keep the model and its input in channels_last: model = model.to(memory_format=torch.channels_last) "
                "and x = x.to(memory_format=torch.channels_last); under AMP cuDNN then needs no transposes."
            ),
            evidence={
                "kernels": k.height,
                "kernel_time_share": busy / all_kernels,
                "share": share,
                "ops": {str(a): int(b) for a, b in by_op.iter_rows()},
            },
            impact=share,
            share=share,
        )
    ]


def dataloader_num_workers(ctx: Context) -> list[Finding]:
    """A main-process DataLoader that does not cost much yet. When it does, ``dataloader_bottleneck``
    says so with the same fix (num_workers > 0) and its share: one finding, not two about one cause."""
    single = ctx.names.filter(ctx.names.str.contains(r"_SingleProcessDataLoaderIter"))
    if single.len() == 0 or dataloader_share(ctx) > DATALOADER_SHARE:
        return []
    return [
        Finding(
            rule="dataloader_num_workers",
            message=f"The DataLoader loads batches in the training process ({single.len()} batches with num_workers=0).",
            fix="Pass num_workers > 0 to the DataLoader (e.g. the number of CPU cores per device).",
            evidence={"batches": single.len()},
            impact=0.02,
        )
    ]


# a median launch delay above this means the host runs ahead of the device: kernels wait in a
# queue already, so launch overhead cannot be what keeps the device idle (HTA's delay outlier cut)
DEEP_QUEUE_DELAY_NS = 100_000


def launch_bound(ctx: Context) -> list[Finding]:
    ls = ctx.launch
    if ls.launched < 100:
        return []
    # a kernel that ends inside its launch call was submitted synchronously (the call waited for
    # it, as MTIA's runFunction does): the call's length is not launch overhead, so it does not count
    short_share = ls.short_async_kernels / ls.launched
    devices = ctx.overview.devices
    if short_share < 0.5 or not devices or min(d.utilization for d in devices) >= 0.8:
        return []
    # with a deep launch queue the idle time has another cause (the DataLoader, a synchronization):
    # the rules for those name it; CUDA graphs would not help here
    if (ls.median_launch_delay_ns or 0) >= DEEP_QUEUE_DELAY_NS:
        return []
    steps = ctx.overview.steps
    lo = int(steps["start_ns"].min())  # type: ignore[arg-type]
    hi = int((steps["start_ns"] + steps["dur_ns"]).max())  # type: ignore[arg-type]
    # a union over time on each device, over the window utilization uses: never above 1 - utilization
    waits = host_wait_ns(ctx.trace, lo, hi)
    if not waits:
        return []
    device, wait = max(waits.items(), key=lambda kv: kv[1])
    share = wait / max(hi - lo, 1)
    busy = next((d.utilization for d in devices if d.device == device), None)
    busy_text = f" (it is busy {busy:.0%})" if busy is not None else ""
    return [
        Finding(
            rule="launch_bound",
            message=(
                f"{ls.short_kernels / ls.launched:.0%} of {ls.launched} launches (kernels, copies, memsets) run shorter than their launch call, "
                f"and device {device} sits idle waiting on the host {share:.0%} of the step time{busy_text}."
            ),
            fix="Launch fewer, larger kernels: CUDA graphs (torch.compile mode='reduce-overhead'), torch.compile fusion, fused optimizers, larger batches.",
            evidence={
                "short_kernels": ls.short_kernels,
                "launched": ls.launched,
                "short_async_kernels": ls.short_async_kernels,
                "synchronous_launches": ls.synchronous_launches,
                "device": device,
                "host_wait_share": share,
                "median_launch_delay_us": (ls.median_launch_delay_ns or 0) / 1e3,
            },
            impact=share,
            share=share,
        )
    ]
