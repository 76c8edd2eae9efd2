"""The TensorBoard profiler plugin's recommendations, with its thresholds."""

from __future__ import annotations

import polars as pl

from torchscope.analysis import names
from torchscope.analysis.advisor.base import Context, Finding
from torchscope.analysis.advisor.window import STARTUP_SHARE, startup_share
from torchscope.analysis.frames import kinds, names_text
from torchscope.analysis.memory import memory_peaks

_ITERATORS = {"workers": "_MultiProcessingDataLoaderIter", "main process": "_SingleProcessDataLoaderIter"}


def _loader_kind(ctx: Context) -> tuple[str, bool]:
    """Which DataLoader iterator holds most of the trace's loading time: "workers", "main
    process" or "unknown"; and whether the other kind is there too. A run whose training loader
    had workers and whose evaluation loader had none, and spent most of its loading in the
    latter, was told its workers did not keep up."""
    dur = ctx.trace.events["dur_ns"]
    found: dict[str, int] = {}
    for kind, iterator in _ITERATORS.items():
        calls = ctx.names.str.contains(iterator)
        if calls.any():
            found[kind] = int(dur.filter(calls).sum())
    if not found:
        return "unknown", False
    return max(found, key=lambda kind: found[kind]), len(found) == 2


# above this share of the step in the DataLoader, the plugin's recommendation fires
DATALOADER_SHARE = 0.05


def dataloader_share(ctx: Context) -> float:
    """The share of the step time spent in the DataLoader (the plugin's number)."""
    b = ctx.overview.breakdown_ns
    return float(b["DataLoader"] / (b["Total"] or 1.0))


def dataloader_bottleneck(ctx: Context) -> list[Finding]:
    b = ctx.overview.breakdown_ns
    share = dataloader_share(ctx)
    if share <= DATALOADER_SHARE:
        return []
    loader, both = _loader_kind(ctx)
    if loader == "workers":  # "set num_workers > 0" would tell the user what they already did
        where = " although it already loads in worker processes"
        fix = (
            "The workers do not keep up: raise num_workers, set persistent_workers=True (else "
            "workers start again every epoch) and prefetch_factor, pin_memory=True for device "
            "copies; or make the Dataset's __getitem__ cheaper (decode and augment less, or on the device)."
        )
    else:
        where = " (it loads in the main process)" if loader == "main process" else ""
        if both:
            where = " (most of it in a DataLoader that loads in the main process; another has workers)"
        fix = (
            "Set num_workers > 0 (and pin_memory=True, persistent_workers=True) on the DataLoader "
            "so batches load in parallel with the step."
        )
    return [
        Finding(
            rule="dataloader_bottleneck",
            message=(
                f"{share:.1%} of the step time is in the DataLoader{where} "
                f"({b['DataLoader'] / 1e6:,.1f} ms of {b['Total'] / 1e6:,.1f} ms per step)."
            ),
            fix=fix,
            evidence={
                "dataloader_us_per_step": b["DataLoader"] / 1e3,
                "step_us": b["Total"] / 1e3,
                "share": share,
                "loader": loader,
            },
            impact=share,
            share=share,
        )
    ]


def enable_amp(ctx: Context) -> list[Finding]:
    props = ctx.trace.meta.device_properties
    major = props[0].get("computeMajor") if props else None
    if major is None or int(major) < 7 or not ctx.overview.devices:
        return []
    tc = [d.tensor_core_ratio for d in ctx.overview.devices if d.tensor_core_ratio is not None]
    if not tc or max(tc) > 0.0:
        return []
    k = kinds(ctx.trace, "kernel").filter(pl.col("op").fill_null(-1) >= 0)
    if k.height == 0:
        return []
    op_names = names_text(ctx.trace).gather(k["op"])
    eligible = pl.DataFrame({"name": op_names}).select(names.TENSOR_CORE_ELIGIBLE_OP).to_series()
    eligible_ns = float(k["dur_ns"].filter(eligible).sum())
    ratio = eligible_ns / float(k["dur_ns"].sum() or 1)
    if ratio <= 0.0:
        return []
    # measured as tf32_matmul is (the same kernels over the profiled time), so both pass the
    # advisor's share cut or neither: it once showed on a launch-bound loop where TF32 did not
    share = eligible_ns / ctx.host_span_ns
    return [
        Finding(
            rule="enable_amp",
            message=f"{ratio:.0%} of kernel time is launched by Tensor-Core-eligible ops, but no kernel used Tensor Cores.",
            fix="Run the model under torch.autocast (Automatic Mixed Precision, bf16/fp16) so convolutions and matmuls use Tensor Cores.",
            evidence={
                "tensor_core_eligible_kernel_share": ratio,
                "compute_capability": f"{major}.{props[0].get('computeMinor')}",
                "share": share,
            },
            impact=ratio * 0.5,
            share=share,
        )
    ]


def memory_near_capacity(ctx: Context) -> list[Finding]:
    props = ctx.trace.meta.device_properties
    if not props:
        return []
    peaks = memory_peaks(ctx.trace)
    by_id = {int(p.get("id", i)): p for i, p in enumerate(props)}
    out = []
    for dev, peak in peaks.select("device", "peak_allocated_bytes").iter_rows():
        if ":" not in dev or dev.startswith("cpu"):
            continue
        prop = by_id.get(int(dev.split(":")[1]), {})
        if not prop.get("totalGlobalMem") or peak is None:
            continue
        cap = float(prop["totalGlobalMem"])
        if peak > 0.9 * cap:
            out.append(
                Finding(
                    rule="memory_near_capacity",
                    message=f"Peak memory on {dev} is {peak / cap:.1%} of its {cap / 2**30:.1f} GiB.",
                    fix="Use activation checkpointing (torch.utils.checkpoint) or mixed precision to free memory for a larger batch.",
                    evidence={"device": dev, "peak_bytes": int(peak), "capacity_bytes": int(cap)},
                    impact=0.1,
                )
            )
    return out


def use_ddp(ctx: Context) -> list[Finding]:
    ev = ctx.trace.events
    if not (ctx.names == "DataParallel.forward").any():
        return []
    devices = ev["device"].filter(ev["device"] >= 0).n_unique()
    if devices < 2:
        return []
    return [
        Finding(
            rule="use_ddp",
            message=f"The model uses DataParallel across {devices} devices.",
            fix="Use DistributedDataParallel (one process per device) instead of DataParallel.",
            evidence={"devices": devices},
            impact=0.2,
        )
    ]


def communication_heavy(ctx: Context) -> list[Finding]:
    b = ctx.overview.breakdown_ns
    share = b["Communication"] / (b["Total"] or 1.0)
    if share <= 0.1:
        return []
    return [
        Finding(
            rule="communication_heavy",
            message=f"{share:.1%} of the step time is communication not hidden behind computation.",
            fix="Overlap or shrink communication: gradient compression hooks, gradient accumulation, a larger batch, or bucket tuning (bucket_cap_mb).",
            evidence={"communication_us_per_step": b["Communication"] / 1e3, "share": share},
            impact=share,
            share=share,
        )
    ]


def low_device_utilization(ctx: Context) -> list[Finding]:
    low = [d for d in ctx.overview.devices if d.utilization < 0.5]
    if not low:
        return []
    ids = ", ".join(str(d.device) for d in low)
    worst = min(d.utilization for d in low)
    # one decimal, as the page's card: 49.8% printed as "50%" read as the threshold itself
    message = f"Device {ids} {'is' if len(low) == 1 else 'are'} busy only {worst:.1%} of the step time."
    # idleness that start-up explains is startup_in_window's finding, and ranks before this one
    startup = startup_share(ctx)
    if startup >= STARTUP_SHARE:
        message += f" Start-up takes {startup:.0%} of that time (see startup_in_window)."
    return [
        Finding(
            rule="low_device_utilization",
            message=message,
            fix="Give the device more work per launch: increase the batch size, or remove host-side stalls (see the other findings).",
            evidence={"utilization": {str(d.device): d.utilization for d in low}},
            impact=(1 - worst) * (1 - startup if startup >= STARTUP_SHARE else 1.0),
        )
    ]
