"""Turn what the portable collector recorded into a Kineto-format Chrome trace document.

Kept apart from the hot path: everything here runs once, at ``stop()``. The document uses the
categories and argument names Kineto writes (``cpu_op`` with ``External id``/``Input Dims``,
``user_annotation``, ``cuda_runtime``, ``kernel`` with ``correlation``/``device``/``stream``,
``ac2g`` flows, ``[memory]`` instants), so every reader of Kineto traces, ours included, reads
it unchanged. Timestamps follow Kineto: ``ts`` in microseconds (3 decimals, so ns survive)
relative to the top-level ``baseTimeNanoseconds`` (Unix epoch ns).
"""

from __future__ import annotations

import bisect
import contextlib
import os
import socket
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from torchscope.trace.dialect import PORTABLE_TRACE_NAME

if TYPE_CHECKING:
    from torchscope.capture.portable import PortableCollector

_DTYPE_NAMES = {
    "float32": "float",
    "float64": "double",
    "float16": "c10::Half",
    "bfloat16": "c10::BFloat16",
    "int64": "long int",
    "int32": "int",
    "int16": "short int",
    "int8": "signed char",
    "uint8": "unsigned char",
    "bool": "bool",
    "complex64": "c10::complex<float>",
    "complex128": "c10::complex<double>",
}


def dtype_name(dtype: Any) -> str:
    """Kineto's spelling of a tensor dtype in ``Input type`` (c10 TypeMeta names)."""
    text = str(dtype).removeprefix("torch.")
    return _DTYPE_NAMES.get(text, text)


def op_name(func: Any) -> str:
    """``aten::sum`` for the overload ``aten::sum.dim_IntList``: Kineto names ops without overload."""
    return str(func.name()).split(".", 1)[0]


def _format_input(desc: tuple[Any, ...]) -> tuple[Any, str, Any, str]:
    """(Input Dims, Input type, Input Strides, Concrete Inputs) of one described input."""
    tag = desc[0]
    if tag == "T":
        return list(desc[1]), dtype_name(desc[2]), list(desc[3]), ""
    if tag == "TL":
        return [list(s) for s in desc[1]], "TensorList", [list(s) for s in desc[2]], ""
    if tag == "SL":
        return [], "ScalarList", [], desc[1]
    if tag == "S":
        return [], "Scalar", [], desc[1]
    if tag == "O":
        return [], "", [], desc[1]
    return [], "", [], ""


def _describe_default(value: Any) -> tuple[Any, ...]:
    if value is None:
        return ("N",)
    if isinstance(value, (bool, int, float, complex)):
        return ("S", str(value))
    if isinstance(value, (list, tuple)):
        return ("SL", str(list(value)))
    return ("O", str(value))


def shape_args(func: Any, shapes: tuple[list[Any], dict[str, Any]]) -> dict[str, Any]:
    """Kineto's per-input lists, in schema order with unspecified defaults filled in."""
    args, kwargs = shapes
    described: list[tuple[Any, ...]] = list(args)
    schema = getattr(func, "_schema", None)
    if schema is not None:
        for i, arg in enumerate(schema.arguments):
            if i < len(args):
                continue
            if arg.name in kwargs:
                described.append(kwargs[arg.name])
            elif arg.has_default_value():
                described.append(_describe_default(arg.default_value))
            else:
                described.append(("N",))
    else:
        described.extend(kwargs.values())
    cols = [_format_input(d) for d in described]
    return {
        "Concrete Inputs": [c[3] for c in cols],
        "Input type": [c[1] for c in cols],
        "Input Strides": [c[2] for c in cols],
        "Input Dims": [c[0] for c in cols],
    }


def _device_properties(devices: list[tuple[str, int]]) -> list[dict[str, Any]]:
    props: list[dict[str, Any]] = []
    try:
        import torch
    except ImportError:  # pragma: no cover - capture always has torch
        return props
    for dtype, index in devices:
        entry: dict[str, Any] = {"id": index, "type": dtype}
        backend = getattr(torch, dtype, None)
        get_name = getattr(backend, "get_device_name", None)
        if callable(get_name):
            with contextlib.suppress(RuntimeError, AssertionError, TypeError):
                entry["name"] = str(get_name(index))
        get_props = getattr(backend, "get_device_properties", None)
        if callable(get_props):
            try:
                p = get_props(index)
                total = getattr(p, "total_memory", None)
                if total is not None:
                    entry["totalGlobalMem"] = int(total)
                sms = getattr(p, "multi_processor_count", None)
                if sms is not None:
                    entry["numSms"] = int(sms)
            except (RuntimeError, AssertionError, TypeError):
                pass
        props.append(entry)
    return props


def _device_annotations(
    annotations: list[tuple[str, int, int, int, int]],
    launched: list[tuple[int, int, int, int, int, int]],
    ts: Callable[[int], float],
    dur: Callable[[int, int], float],
) -> list[dict[str, Any]]:
    """Kineto's ``gpu_user_annotation``: each label's span over the device work launched in it.

    One event per (label, device, stream), from the first device start to the last device end
    of the ops launched on the label's thread inside it, so device-side views of a step or a
    ``record_function`` range work as on CUDA.
    """
    by_tid: dict[int, list[tuple[int, int, int, int, int]]] = {}
    for tid, op_start, device, stream, start, end in launched:
        by_tid.setdefault(tid, []).append((op_start, device, stream, start, end))
    for rows in by_tid.values():
        rows.sort()
    out: list[dict[str, Any]] = []
    for name, tid, t0, t1, ext in annotations:
        ops = by_tid.get(tid, [])
        lo = bisect.bisect_left(ops, (t0,))
        hi = bisect.bisect_right(ops, (t1, 1 << 62))
        spans: dict[tuple[int, int], list[int]] = {}
        for _, device, stream, start, end in ops[lo:hi]:
            span = spans.setdefault((device, stream), [start, end])
            span[0], span[1] = min(span[0], start), max(span[1], end)
        for (device, stream), (start, end) in sorted(spans.items()):
            out.append(
                {
                    "ph": "X",
                    "cat": "gpu_user_annotation",
                    "name": name,
                    "pid": device,
                    "tid": stream,
                    "ts": ts(start),
                    "dur": dur(start, end),
                    "args": {"External id": ext},
                }
            )
    return out


def build_document(c: PortableCollector) -> dict[str, Any]:
    """The Kineto-format document of one finished collection."""
    pid = os.getpid()
    base = (c._epoch_at_start // 1_000_000_000) * 1_000_000_000
    shift = c._epoch_at_start - c._t_start - base  # host perf ns + shift = ns since base

    def ts(ns: int) -> float:
        return round((ns + shift) / 1000.0, 3)

    def dur(a: int, b: int) -> float:
        return round(max(0, b - a) / 1000.0, 3)

    events: list[dict[str, Any]] = []
    tids: set[int] = set()
    names: dict[Any, str] = {}
    ops_by_ext: dict[int, tuple[Any, ...]] = {}
    for rec in c._ops:
        func, tid, t0, t1, i0, i1, ext, shapes, stack, dev, stream, corr = rec
        name = names.get(func)
        if name is None:
            name = names[func] = op_name(func)
        tids.add(tid)
        args: dict[str, Any] = {"External id": ext, "Record function id": 0}
        if shapes is not None:
            args.update(shape_args(func, shapes))
        if stack:
            args["Call stack"] = ";".join(f"{f}({line}): {fn}" for f, line, fn in stack)
        events.append(
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": name,
                "pid": pid,
                "tid": tid,
                "ts": ts(t0),
                "dur": dur(t0, t1),
                "args": args,
            }
        )
        if dev is not None:
            ops_by_ext[ext] = rec
            events.append(
                {
                    "ph": "X",
                    "cat": "cuda_runtime",
                    "name": "portable::launch",
                    "pid": pid,
                    "tid": tid,
                    "ts": ts(i0),
                    "dur": dur(i0, i1),
                    "args": {"External id": ext, "correlation": corr},
                }
            )
            events.append(
                {"ph": "s", "id": corr, "pid": pid, "tid": tid, "ts": ts(i0), "cat": "ac2g", "name": "ac2g"}
            )

    for name, tid, t0, t1, ext in c._annotations:
        tids.add(tid)
        events.append(
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": name,
                "pid": pid,
                "tid": tid,
                "ts": ts(t0),
                "dur": dur(t0, t1),
                "args": {"External id": ext, "Record function id": 0},
            }
        )
    for name, tid, t0, t1 in c._scopes:
        tids.add(tid)
        events.append(
            {
                "ph": "X",
                "cat": "python_function",
                "name": name,
                "pid": pid,
                "tid": tid,
                "ts": ts(t0),
                "dur": dur(t0, t1),
                "args": {},
            }
        )

    streams: set[tuple[int, int]] = set()
    calibrations: list[dict[str, Any]] = []
    stats: dict[str, Any] = {}
    launched: list[tuple[int, int, int, int, int, int]] = []  # tid, op start, device, stream, start, end
    for (dtype, index), batcher in c._batchers.items():
        keys, starts, ends = batcher.host_times()
        early = early_ns = 0
        for ext, s, e in zip(keys.tolist(), starts.tolist(), ends.tolist(), strict=True):
            found = ops_by_ext.get(ext)
            if found is None:
                continue
            rec = found
            stream = rec[10]
            streams.add((index, stream))
            launched.append((rec[1], rec[2], index, stream, s, e))
            args = {"External id": ext, "device": index, "stream": stream, "correlation": rec[11], "portable": 1}
            if s < rec[5]:
                # the device reached the op's start event before the host had returned from
                # launching it: it may have waited inside the pair, whose time is then an
                # upper bound of the op's device time (docs/portable.md)
                args["begun_before_launch"] = 1
                early += 1
                early_ns += e - s
            events.append(
                {
                    "ph": "X",
                    "cat": "kernel",
                    "name": names[rec[0]],
                    "pid": index,
                    "tid": stream,
                    "ts": ts(s),
                    "dur": dur(s, e),
                    "args": args,
                }
            )
            events.append(
                {
                    "ph": "f",
                    "id": rec[11],
                    "pid": index,
                    "tid": stream,
                    "ts": ts(s),
                    "cat": "ac2g",
                    "name": "ac2g",
                    "bp": "e",
                }
            )
        calibrations.extend(
            {
                "device": f"{dtype}:{index}",
                "ts": ts(p.host_ns),
                "device_ns": p.device_ns,
                "uncertainty_ns": p.uncertainty_ns,
            }
            for p in batcher.clock.points
        )
        held, held_ns = c._holds.get((dtype, index), (0, 0))  # hold_idle_device's spins
        stats[f"{dtype}:{index}"] = {
            "resolved": len(batcher.resolved_keys),
            "peak_outstanding": batcher.peak_outstanding,
            "waits": batcher.waits,
            "begun_before_launch": early,
            "begun_before_launch_ns": int(early_ns),
            "held_idle": held,
            "held_idle_ns": held_ns,
            "host_per_device_ns": [round(r, 9) for r in batcher.clock.ratios],
        }

    events.extend(_device_annotations(c._annotations, launched, ts, dur))

    for t, tid, dtype_code, dev_id, addr, nbytes, total, reserved in c._memory:
        tids.add(tid)
        events.append(
            {
                "ph": "i",
                "cat": "cpu_instant_event",
                "s": "t",
                "name": "[memory]",
                "pid": pid,
                "tid": tid,
                "ts": ts(t),
                "args": {
                    "Total Reserved": reserved,
                    "Total Allocated": total,
                    "Bytes": nbytes,
                    "Device Id": dev_id,
                    "Device Type": dtype_code,
                    "Addr": addr,
                },
            }
        )

    t_meta = ts(c._t_start)
    meta: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "ts": t_meta, "pid": pid, "tid": 0, "args": {"name": "python"}},
        {"ph": "M", "name": "process_labels", "ts": t_meta, "pid": pid, "tid": 0, "args": {"labels": "CPU"}},
        {
            "ph": "M",
            "name": "process_sort_index",
            "ts": t_meta,
            "pid": pid,
            "tid": 0,
            "args": {"sort_index": pid},
        },
    ]
    for tid in sorted(tids):
        meta.append(
            {
                "ph": "M",
                "name": "thread_name",
                "ts": t_meta,
                "pid": pid,
                "tid": tid,
                "args": {"name": f"thread {tid} (python)"},
            }
        )
        meta.append(
            {
                "ph": "M",
                "name": "thread_sort_index",
                "ts": t_meta,
                "pid": pid,
                "tid": tid,
                "args": {"sort_index": tid},
            }
        )
    device_keys = sorted(c._batchers)
    for dtype, index in device_keys:
        label = f"{dtype.upper()} {index}"
        meta.append(
            {
                "ph": "M",
                "name": "process_name",
                "ts": t_meta,
                "pid": index,
                "tid": 0,
                "args": {"name": "python"},
            }
        )
        meta.append(
            {
                "ph": "M",
                "name": "process_labels",
                "ts": t_meta,
                "pid": index,
                "tid": 0,
                "args": {"labels": label},
            }
        )
        meta.append(
            {
                "ph": "M",
                "name": "process_sort_index",
                "ts": t_meta,
                "pid": index,
                "tid": 0,
                "args": {"sort_index": index},
            }
        )
    for index, stream in sorted(streams):
        meta.append(
            {
                "ph": "M",
                "name": "thread_name",
                "ts": t_meta,
                "pid": index,
                "tid": stream,
                "args": {"name": f"stream {stream}"},
            }
        )
        meta.append(
            {
                "ph": "M",
                "name": "thread_sort_index",
                "ts": t_meta,
                "pid": index,
                "tid": stream,
                "args": {"sort_index": stream},
            }
        )

    span = {
        "ph": "X",
        "cat": "Trace",
        "name": "PyTorch Profiler (0)",
        "pid": "Spans",
        "tid": "PyTorch Profiler",
        "ts": t_meta,
        "dur": dur(c._t_start, c._t_stop),
        "args": {"Op count": 0},
    }
    try:
        import torch

        torch_version: str | None = str(torch.__version__)
    except ImportError:  # pragma: no cover
        torch_version = None
    return {
        "schemaVersion": 1,
        "deviceProperties": _device_properties([k for k in device_keys if k[0] != "cpu"]),
        "record_shapes": int(c.record_shapes),
        "with_stack": int(c.with_stack),
        "profile_memory": int(c.profile_memory),
        "with_modules": int(c.with_modules),
        "host_name": socket.gethostname(),
        "displayTimeUnit": "ms",
        "baseTimeNanoseconds": base,
        "traceName": PORTABLE_TRACE_NAME,
        "torch_version": torch_version,
        "portable": {
            "collector": "torchscope.capture.portable",
            "device_timing": bool(c._batchers),
            "devices": [f"{d}:{i}" for d, i in device_keys],
            "calibrations": calibrations,
            "batches": stats,
            "skipped_in_graph_capture": c._capturing_skips,
        },
        "traceEvents": meta + events + [span],
    }


def device_ops_total(doc: dict[str, Any]) -> dict[str, float]:
    """Per-op-name total device microseconds of the portable device events in ``doc``."""
    totals: dict[str, float] = {}
    for e in doc.get("traceEvents", []):
        if e.get("cat") == "kernel" and e.get("args", {}).get("portable"):
            totals[e["name"]] = totals.get(e["name"], 0.0) + float(e.get("dur", 0.0))
    return dict(sorted(totals.items(), key=lambda kv: -kv[1]))
