"""The columns of a Trace: the contract between readers, live capture and every analysis.

One row per event, integer nanoseconds, names interned as Categoricals. Readers must produce
exactly these columns with exactly these dtypes (``conform`` enforces it); analyses may rely
on every column being present. Sentinels: ``-1`` for "no row" in the link columns
(``parent``, ``launcher``, ``op``) and ``-1`` for "host" in ``device``/``stream``; nulls for
"the file did not say" in the optional attribute columns.
"""

from __future__ import annotations

import polars as pl

# Normalized event kinds, shared by every dialect (Kineto 2021..now, ROCm, MTIA, portable).
KINDS: tuple[str, ...] = (
    "cpu_op",  # ATen/TorchScript ops (cpu_op, Operator)
    "user_annotation",  # record_function labels, ProfilerStep#N (user_annotation)
    "python_function",  # with_stack Python frames and nn.Module scopes
    "runtime",  # cuda/hip/xpu/mtia runtime and driver calls (cudaLaunchKernel, ...)
    "kernel",  # device kernels (kernel, Kernel, mtia_ccp_events, portable device ops)
    "memcpy",
    "memset",
    "device_annotation",  # gpu_user_annotation
    "sync",  # cuda_sync and similar
    "collective",  # host-side collective markers (record_param_comms)
    "instant",  # instant events other than memory
    "span",  # the profiler's own "PyTorch Profiler (N)" spans
    "other",  # categories we do not know: kept, never dropped
)
KIND = pl.Enum(list(KINDS))
HOST_KINDS = ("cpu_op", "user_annotation", "python_function", "runtime", "sync", "collective")
DEVICE_KINDS = ("kernel", "memcpy", "memset", "device_annotation")

EVENTS_SCHEMA: dict[str, pl.DataType] = {
    "id": pl.Int32(),  # row index, 0..n-1, rows sorted by (start_ns, -dur_ns)
    "kind": KIND,
    "cat": pl.Categorical(),  # raw category as written in the file ("" when absent)
    "name": pl.Categorical(),
    "pid": pl.Int64(),  # process id, or device index for device tracks
    "tid": pl.Int64(),  # thread id, or stream for device tracks
    "start_ns": pl.Int64(),
    "dur_ns": pl.Int64(),  # 0 for instant events
    "device": pl.Int32(),  # device index for device events, -1 on the host
    "stream": pl.Int64(),  # device stream, -1 on the host
    "correlation": pl.Int64(),  # runtime call <-> device work (null when absent)
    "external_id": pl.Int64(),  # op <-> runtime call (null when absent)
    "seq": pl.Int64(),  # autograd sequence number (forward <-> backward)
    "fwd_tid": pl.Int64(),
    "input_dims": pl.String(),  # JSON text of "Input Dims" when record_shapes was on
    "input_types": pl.String(),  # JSON text of "Input type"
    "concrete_inputs": pl.String(),  # JSON text of "Concrete Inputs" (scalar arguments' values)
    "grid": pl.String(),  # kernels: "[x, y, z]"
    "block": pl.String(),
    "registers_per_thread": pl.Int32(),
    "shared_memory": pl.Int64(),
    "blocks_per_sm": pl.Float64(),
    "warps_per_sm": pl.Float64(),
    "occupancy_pct": pl.Float64(),  # "est. achieved occupancy %"
    "bytes": pl.Int64(),  # memcpy/memset/collective payload
    "args": pl.String(),  # JSON text of args we do not model (kept for "other" events)
    # Derived once by trace.derive (vectorized):
    "parent": pl.Int32(),  # enclosing host event on the same thread, -1 at the root
    "depth": pl.Int16(),
    "self_ns": pl.Int64(),  # dur minus the union of children and of a later event straddling its end, >= 0
    "step": pl.Int32(),  # ProfilerStep#N number the event falls in, -1 outside steps
    "launcher": pl.Int32(),  # device events: the runtime call that launched it, else -1
    "op": pl.Int32(),  # device/runtime events: innermost cpu_op or annotation that launched it
}

MEMORY_SCHEMA: dict[str, pl.DataType] = {
    "ts_ns": pl.Int64(),
    "pid": pl.Int64(),
    "tid": pl.Int64(),
    "device_type": pl.Int16(),  # c10::DeviceType: 0 CPU, 1 CUDA, ...
    "device_id": pl.Int16(),  # -1 for CPU
    "addr": pl.Int64(),
    "bytes": pl.Int64(),  # > 0 allocation, < 0 free
    "total_allocated": pl.Int64(),
    "total_reserved": pl.Int64(),
    "op": pl.Int32(),  # innermost op/annotation on the same thread at ts_ns, -1 if none
}

FLOWS_SCHEMA: dict[str, pl.DataType] = {
    "kind": pl.Categorical(),  # ac2g, fwdbwd, async_cpu_to_gpu, async (2021), ...
    "flow_id": pl.Int64(),
    "src": pl.Int32(),  # event row of the flow's start ('s'), -1 if it binds to none
    "dst": pl.Int32(),  # event row of the flow's end ('f'), -1 if it binds to none
}

THREADS_SCHEMA: dict[str, pl.DataType] = {
    "pid": pl.Int64(),
    "tid": pl.Int64(),
    "process_name": pl.String(),
    "thread_name": pl.String(),
    "label": pl.String(),  # the original pid/tid text when the file used strings ("stream 7")
    "sort_index": pl.Int64(),
    "process_label": pl.String(),  # the original pid text when the file used strings ("Spans")
}


def step_number(name: pl.Expr) -> pl.Expr:
    """The N of a ``ProfilerStep#N`` name as the ``step`` column holds it (Int32), null for a
    name that is not one with a whole N in 0..2^31-1 (``ProfilerStep#-5``, ``#x``, ``#3e9``):
    such an annotation is no step. One reading for every reader of steps: a number past Int32
    wrapped silently in one and failed the report's cast in another."""
    number = name.cast(pl.String).str.extract(r"^ProfilerStep#(\d{1,10})\b", 1).cast(pl.Int64, strict=False)
    return pl.when(number <= 2**31 - 1).then(number).cast(pl.Int32)


def step_annotations(ev: pl.DataFrame) -> pl.DataFrame:
    """The ``ProfilerStep#...`` annotations of ``ev``: ``step`` (``step_number``: null where
    the name holds no step), ``name``, ``start_ns`` and ``dur_ns``, in ``ev``'s order.

    One test of what a step annotation is, for every reader of steps (the step column, the
    step table, the checks on names and cut files). Only the four columns it needs are
    filtered: a filter of the whole table gathers every column (~2 ms of 75k events a call).
    The reader files a ``ProfilerStep#`` of category ``cpu_op`` (2021 traces) as a
    ``user_annotation``, so one kind holds them all.
    """
    return (
        ev.select("kind", "name", "start_ns", "dur_ns")
        .filter((pl.col("kind") == "user_annotation") & pl.col("name").cat.starts_with("ProfilerStep#"))
        .select(step_number(pl.col("name")).alias("step"), "name", "start_ns", "dur_ns")
    )


def step_spans(ev: pl.DataFrame) -> pl.DataFrame:
    """The steps of ``ev``: each ``ProfilerStep#N`` number once, its first span, in start order
    (``step_annotations``' columns). A number that repeats (traces joined, a loop that restarts
    its count) is one step in the step table and in the events' step column alike."""
    return (
        step_annotations(ev)
        .drop_nulls("step")
        .sort("start_ns")
        .unique("step", keep="first", maintain_order=True)
    )


def empty(schema: dict[str, pl.DataType]) -> pl.DataFrame:
    """An empty frame with the given schema."""
    return pl.DataFrame(schema=schema)


def conform(df: pl.DataFrame, schema: dict[str, pl.DataType]) -> pl.DataFrame:
    """Return ``df`` with exactly ``schema``'s columns, in order, cast to its dtypes.

    Missing columns are filled with nulls; extra columns are dropped. Readers call this last,
    so every Trace has the same shape whatever dialect it came from.
    """
    cols = []
    for name, dtype in schema.items():
        if name in df.columns:
            # non-strict: a value that does not fit (an absurd device id) becomes null, not a crash
            cols.append(pl.col(name).cast(dtype, strict=False))
        else:
            cols.append(pl.lit(None, dtype=dtype).alias(name))
    return df.select(cols)
