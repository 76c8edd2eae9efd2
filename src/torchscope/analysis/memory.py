"""Memory: allocated and reserved over time, the peak and who held it, allocations by op, leaks.

Answers the memory questions of the seeds and the TensorBoard plugin's memory view from the
``[memory]`` events ``profile_memory=True`` records: the curve per device, the peak and the op
running at that moment, which ops allocate (self, and including their children), and
allocations that were never freed inside the profiled window (leak candidates).
"""

from __future__ import annotations

import numpy as np
import polars as pl

from torchscope.analysis.frames import memo
from torchscope.trace.model import Trace
from torchscope.trace.tree import subtree_sum

DEVICE_TYPE_NAMES = {
    0: "CPU",
    1: "CUDA",
    2: "MKLDNN",
    3: "OPENGL",
    4: "OPENCL",
    5: "IDEAL",
    6: "HIP",
    7: "FPGA",
    8: "MAIA",
    9: "XLA",
    10: "Vulkan",
    11: "Metal",
    12: "XPU",
    13: "MPS",
    14: "Meta",
    15: "HPU",
    16: "VE",
    17: "Lazy",
    18: "IPU",
    19: "MTIA",
    20: "PrivateUse1",
}


def _device_label() -> pl.Expr:
    dt = (
        pl.col("device_type")
        .cast(pl.Int64)
        .replace_strict(DEVICE_TYPE_NAMES, default="dev", return_dtype=pl.String)
    )
    return (
        pl.when(pl.col("device_id") < 0)
        .then(dt.str.to_lowercase())
        .otherwise(pl.concat_str(dt.str.to_lowercase(), pl.lit(":"), pl.col("device_id").cast(pl.String)))
        .alias("device")
    )


def memory_events(trace: Trace) -> pl.DataFrame:
    """Every allocation and free with a device label and the name of the op that made it."""
    return memo(trace, "memory_events", lambda: _memory_events(trace))


def _memory_events(trace: Trace) -> pl.DataFrame:
    mem = trace.memory
    names_ = trace.events["name"].cast(pl.String)
    opi = mem["op"].fill_null(-1)
    op_name = (
        names_.gather(opi.clip(0, None)) if names_.len() else pl.Series([None] * mem.height, dtype=pl.String)
    )
    out = mem.with_columns(
        _device_label(),
        pl.when(opi >= 0).then(op_name).otherwise(None).alias("op_name")
        if mem.height
        else pl.lit(None, pl.String).alias("op_name"),
    ).sort("ts_ns", maintain_order=True)
    # 2021 traces record only the deltas: rebuild the allocated curve from them, per device
    return out.with_columns(
        pl.col("total_allocated").fill_null(pl.col("bytes").cum_sum().over("device")),
    )


def memory_timeline(trace: Trace) -> pl.DataFrame:
    """device, ts_ns, allocated_bytes, reserved_bytes: one point per memory event, per device."""
    return (
        memory_events(trace)
        .select(
            "device",
            "ts_ns",
            pl.col("total_allocated").alias("allocated_bytes"),
            pl.col("total_reserved").alias("reserved_bytes"),
        )
        .sort("device", "ts_ns")
    )


def memory_peaks(trace: Trace) -> pl.DataFrame:
    """Per device: peak allocated and reserved bytes, when, and the op live at the allocated peak."""
    ev = memory_events(trace)
    if ev.height == 0:
        return pl.DataFrame(
            schema={
                "device": pl.String,
                "peak_allocated_bytes": pl.Int64,
                "peak_ts_ns": pl.Int64,
                "peak_op": pl.String,
                "peak_reserved_bytes": pl.Int64,
                "allocated_bytes": pl.Int64,
                "allocations": pl.UInt32,
            }
        )
    return (
        ev.sort("ts_ns")
        .group_by("device")
        .agg(
            pl.col("total_allocated").max().alias("peak_allocated_bytes"),
            pl.col("ts_ns").get(pl.col("total_allocated").arg_max()).alias("peak_ts_ns"),
            pl.col("op_name").get(pl.col("total_allocated").arg_max()).alias("peak_op"),
            pl.col("total_reserved").max().alias("peak_reserved_bytes"),
            pl.col("bytes").filter(pl.col("bytes") > 0).sum().alias("allocated_bytes"),
            (pl.col("bytes") > 0).sum().cast(pl.UInt32).alias("allocations"),
        )
        .sort(["peak_allocated_bytes", "device"], descending=[True, False])
    )


def allocations_by_op(trace: Trace) -> pl.DataFrame:
    """Per op name and device: allocations, allocated and freed bytes, self and including children."""
    mem = trace.memory.filter(pl.col("op").fill_null(-1) >= 0)
    ev = trace.events
    if mem.height == 0:
        return pl.DataFrame(
            schema={
                "name": pl.String,
                "device": pl.String,
                "allocations": pl.UInt32,
                "self_allocated_bytes": pl.Int64,
                "self_freed_bytes": pl.Int64,
                "self_net_bytes": pl.Int64,
                "total_allocated_bytes": pl.Int64,
            }
        )
    parent = ev["parent"].fill_null(-1).to_numpy().astype(np.int64)
    op = mem["op"].to_numpy().astype(np.int64)
    b = mem["bytes"].to_numpy()
    pos = np.where(b > 0, b, 0)
    # each allocation counts for its op and every op around it
    owned = op >= 0
    tot = subtree_sum(
        np.bincount(op[owned], weights=pos[owned], minlength=ev.height).astype(np.int64), parent
    )
    names_ = ev["name"].cast(pl.String)
    self_df = (
        memory_events(trace)
        .filter(pl.col("op").fill_null(-1) >= 0)
        .group_by("op_name", "device")
        .agg(
            (pl.col("bytes") > 0).sum().cast(pl.UInt32).alias("allocations"),
            pl.col("bytes").filter(pl.col("bytes") > 0).sum().alias("self_allocated_bytes"),
            (-pl.col("bytes").filter(pl.col("bytes") < 0)).sum().alias("self_freed_bytes"),
            pl.col("bytes").sum().alias("self_net_bytes"),
        )
        .rename({"op_name": "name"})
    )
    touched = np.flatnonzero(tot)
    tot_df = (
        pl.DataFrame({"name": names_.gather(touched), "total_allocated_bytes": tot[touched]})
        .group_by("name")
        .agg(pl.col("total_allocated_bytes").sum())
    )
    return (
        self_df.join(tot_df, on="name", how="left")
        .with_columns(pl.col("total_allocated_bytes").fill_null(pl.col("self_allocated_bytes")))
        .sort(["total_allocated_bytes", "name", "device"], descending=[True, False, False], nulls_last=True)
    )


def leak_candidates(trace: Trace) -> pl.DataFrame:
    """Allocations never freed inside the profiled window: device, ts_ns, bytes, addr, op_name."""
    ev = memory_events(trace).sort("device", "addr", "ts_ns")
    if ev.height == 0:
        return ev.select("device", "ts_ns", "bytes", "addr", "op_name")
    nxt = pl.col("bytes").shift(-1).over("device", "addr")
    return (
        ev.with_columns(nxt.alias("next_bytes"))
        .filter((pl.col("bytes") > 0) & (pl.col("next_bytes").is_null() | (pl.col("next_bytes") > 0)))
        .select("device", "ts_ns", "bytes", "addr", "op_name")
        .sort(["bytes", "device", "ts_ns", "addr"], descending=[True, False, False, False])
    )
