"""Memory: allocated and reserved over time, the peak and who held it, allocations by op, leaks.

Answers the memory questions of the seeds and the TensorBoard plugin's memory view from the
``[memory]`` events ``profile_memory=True`` records: the curve per device, the peak and the op
running at that moment, which ops allocate (self, and including their children), and
allocations that were never freed inside the profiled window (leak candidates).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import polars as pl

from torchscope.analysis import names
from torchscope.analysis.frames import memo, names_text
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


def device_label() -> pl.Expr:
    """``cpu``, ``cuda:1``, ``xpu:0``, ... from ``device_type`` and ``device_id`` (as torch spells devices)."""
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
    names_ = names_text(trace)
    opi = mem["op"].fill_null(-1)
    op_name = (
        names_.gather(opi.clip(0, None)) if names_.len() else pl.Series([None] * mem.height, dtype=pl.String)
    )
    out = mem.with_columns(
        device_label(),
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
    return memo(trace, "memory_peaks", lambda: _memory_peaks(trace))


def _memory_peaks(trace: Trace) -> pl.DataFrame:
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


_BY_OP_SCHEMA = {
    "name": pl.String,
    "device": pl.String,
    "allocations": pl.Int64,
    "self_allocated_bytes": pl.Int64,
    "self_freed_bytes": pl.Int64,
    "self_net_bytes": pl.Int64,
    "total_allocations": pl.Int64,
    "total_allocated_bytes": pl.Int64,
    "total_net_bytes": pl.Int64,
}


def _has_same_name_ancestor(
    rows: npt.NDArray[np.int64], parent: npt.NDArray[np.int64], name_id: npt.NDArray[np.int64]
) -> npt.NDArray[np.bool_]:
    """For each of ``rows``: whether an op above it has its name (``aten::div`` in ``aten::div``)."""
    dup = np.zeros(rows.size, bool)
    at, cur = np.arange(rows.size), parent[rows]
    while at.size:
        live = cur >= 0
        at, cur = at[live], cur[live]
        dup[at[name_id[cur] == name_id[rows[at]]]] = True
        cur = parent[cur]
    return dup


def _totals_by_name(
    op: npt.NDArray[np.int64],
    nbytes: npt.NDArray[np.int64],
    parent: npt.NDArray[np.int64],
    name_id: npt.NDArray[np.int64],
    skip: npt.NDArray[np.bool_],
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """For each name on the memory events' op stacks: allocations, allocated and net bytes.

    An event counts once per name on its stack, however often the name nests there
    (``aten::div`` inside ``aten::div`` counts its allocation once for ``aten::div``, as the
    plugin does): each op's subtree is summed, then only the outermost op of each name on a
    stack is credited (any inner one lies inside its subtree). Ops in ``skip`` are not credited.
    Returns the name ids and the three sums.
    """
    sums = []
    for values in ((nbytes > 0).astype(np.int64), np.where(nbytes > 0, nbytes, 0), nbytes):
        own = np.zeros(parent.size, np.int64)
        np.add.at(own, op, values)
        sums.append(subtree_sum(own, parent))
    touched = np.flatnonzero((sums[0] > 0) | (sums[2] != 0))
    touched = touched[~skip[touched]]
    touched = touched[~_has_same_name_ancestor(touched, parent, name_id)]
    ids, at = np.unique(name_id[touched], return_inverse=True)
    out = [np.zeros(ids.size, np.int64) for _ in sums]
    for total, s in zip(out, sums, strict=True):
        np.add.at(total, at, s[touched])
    return ids, out[0], out[1], out[2]


def allocations_by_op(trace: Trace) -> pl.DataFrame:
    """Per op name and device: what the op allocated and freed itself, and including its children.

    The TensorBoard plugin's memory view: ``allocations``/``self_*`` count the op's own
    ``[memory]`` events, ``total_*`` add those of every op nested in it, on the same device, each
    event once per name (``aten::conv2d`` allocates nothing itself and everything through its
    children, so it is listed with its totals). ``record_function`` labels are listed too (the
    DataLoader's ``__next__``, ``Optimizer.step``), ``ProfilerStep#N`` is not. Sorted by total
    allocated bytes.
    """
    # an allocation whose size the file did not say (null) cannot be added to its op's
    mem = memory_events(trace).filter((pl.col("op").fill_null(-1) >= 0) & pl.col("bytes").is_not_null())
    if mem.height == 0:
        return pl.DataFrame(schema=_BY_OP_SCHEMA)
    ev = trace.events
    parent = ev["parent"].fill_null(-1).to_numpy().astype(np.int64)
    names_ = names_text(trace)
    # the categorical codes serve as name ids (no sort of every event's name)
    name_id = ev["name"].cast(pl.Categorical).to_physical().to_numpy().astype(np.int64)
    first_of = np.full(int(name_id.max()) + 1 if name_id.size else 0, -1, np.int64)
    first_of[name_id[::-1]] = np.arange(name_id.size)[::-1]  # an event of each name id
    is_step = ev.select(names.PROFILER_STEP.fill_null(False)).to_series().to_numpy()
    totals = []
    for (device,), rows in mem.partition_by("device", as_dict=True, maintain_order=True).items():
        ids, count, allocated, net = _totals_by_name(
            rows["op"].to_numpy().astype(np.int64),
            rows["bytes"].to_numpy().astype(np.int64),
            parent,
            name_id,
            is_step,
        )
        totals.append(
            pl.DataFrame(
                {
                    "name": names_.gather(first_of[ids]),
                    "device": pl.Series([device] * ids.size, dtype=pl.String),
                    "total_allocations": count,
                    "total_allocated_bytes": allocated,
                    "total_net_bytes": net,
                }
            )
        )
    own = (
        mem.filter(~is_step[mem["op"].to_numpy().astype(np.int64)])
        .group_by(pl.col("op_name").alias("name"), "device")
        .agg(
            (pl.col("bytes") > 0).sum().cast(pl.Int64).alias("allocations"),
            pl.col("bytes").filter(pl.col("bytes") > 0).sum().alias("self_allocated_bytes"),
            (-pl.col("bytes").filter(pl.col("bytes") < 0)).sum().alias("self_freed_bytes"),
            pl.col("bytes").sum().alias("self_net_bytes"),
        )
    )
    return (
        pl.concat(totals)
        .join(own, on=["name", "device"], how="full", coalesce=True)
        .with_columns(pl.exclude("name", "device").fill_null(0))
        .select(list(_BY_OP_SCHEMA))
        .cast(_BY_OP_SCHEMA)  # type: ignore[arg-type]
        .sort(["total_allocated_bytes", "name", "device"], descending=[True, False, False], nulls_last=True)
    )


def outstanding_allocations(trace: Trace) -> pl.DataFrame:
    """Allocations never freed by the end of the trace: device, ts_ns, bytes, addr, op_name.

    An allocation is outstanding when no later event touches its address: a free ends it, and
    so does a later allocation at the same address (the allocator hands an address out again
    only after it was freed, even when the profiler missed the free). Events are taken in the
    order the profiler recorded them, never re-sorted among equal timestamps: microsecond
    traces put a free and the next allocation of the same block at one timestamp.
    """
    ev = memory_events(trace).with_row_index("_order")
    cols = ["device", "ts_ns", "bytes", "addr", "op_name"]
    if ev.height == 0:
        return ev.select(cols)
    nxt = pl.col("bytes").shift(-1).over("device", "addr", order_by="_order")
    return ev.lazy().filter((pl.col("bytes") > 0) & nxt.is_null()).select(cols).collect()


def leak_candidates(trace: Trace) -> pl.DataFrame:
    """Possible leaks: memory never freed by the end of the trace that grows step after step.

    With two or more ``ProfilerStep``s, an op's outstanding allocations
    (``outstanding_allocations``) are a possible leak only when it left some in two or more
    steps before the last: a steady per-step pattern frees what it allocates, optimizer state
    and lazily created buffers are allocated once and kept, and the last step's tensors are
    still alive when the profiler stops; none of them is a leak, while a list that gains a
    tensor every step is. The last step's allocations of such an op are listed too when their
    size is one it leaked before. With fewer than three steps nothing can show that growth, so
    there is no candidate: what is outstanding at the end of a stepless trace is the model's live
    state (an H200 MLP step's 14 gradient buffers were listed as leaks before).
    Columns: device, ts_ns, bytes, addr, op_name, largest first.
    """
    out = outstanding_allocations(trace)
    from torchscope.analysis.overview import profiler_steps

    steps = profiler_steps(trace)
    if steps.height < 3:
        out = out.clear()
    elif out.height:
        starts = steps["start_ns"].to_numpy()
        last = steps.height - 1
        step_of = np.searchsorted(starts, out["ts_ns"].to_numpy(), side="right") - 1
        group = ["device", "op_name"]
        earlier = (pl.col("_step") >= 0) & (pl.col("_step") < last)
        out = (
            out.with_columns(pl.Series("_step", step_of))
            .with_columns(
                pl.col("_step").filter(earlier).n_unique().over(group).alias("_steps"),
                earlier.any().over([*group, "bytes"]).alias("_seen"),
            )
            .filter((pl.col("_steps") >= 2) & (earlier | (pl.col("_step") == last) & pl.col("_seen")))
            .drop("_step", "_steps", "_seen")
        )
    return out.sort(["bytes", "device", "ts_ns", "addr"], descending=[True, False, False, False])
