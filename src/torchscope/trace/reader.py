"""Read Chrome/Kineto trace JSON (any dialect, 2021 to today) into a columnar ``Trace``.

Why it is built this way: a 50 MB trace has ~200k events, and one Python dict per event is
what makes ``json.loads`` + pandas slow and memory hungry. We decode straight into msgspec
``Struct`` objects that hold only the fields we model (``args`` too, as a typed Struct; every
other key is skipped by the decoder without being materialized), pull each column out with a
single comprehension, and hand the columns to Polars. Linking and nesting happen afterwards,
vectorized, in ``trace.derive``.

Best-effort repairs (a duration written as a string, an event without ``ts``) never raise:
they are applied and listed in ``TraceMeta.warnings``. Anything that is not a trace raises
``TraceError(source, problem)``.
"""

from __future__ import annotations

import ast
import gzip
import time
import zlib
from collections.abc import Callable, Iterator, Sequence
from operator import attrgetter
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import numpy.typing as npt
import polars as pl

from torchscope.errors import TraceError
from torchscope.trace import dialect
from torchscope.trace.derive import derive
from torchscope.trace.model import Trace, TraceMeta
from torchscope.trace.schema import (
    EVENTS_SCHEMA,
    FLOWS_SCHEMA,
    MEMORY_SCHEMA,
    THREADS_SCHEMA,
    conform,
)

I64 = npt.NDArray[np.int64]


_NO_RAW = msgspec.Raw(b"")


# -- the typed shape of an event: only what we model -------------------------------------------
class Args(msgspec.Struct, gc=False):
    """The ``args`` keys we model; the decoder skips every other key without building it."""

    external_id: int | None = msgspec.field(name="External id", default=None)
    external_id_2021: int | None = msgspec.field(name="external id", default=None)
    correlation: int | None = None
    device: int | None = None
    stream: int | str | None = None
    stream_id: int | str | None = None  # mtia_runtime
    seq: int | None = msgspec.field(name="Sequence number", default=None)
    fwd_tid: int | None = msgspec.field(name="Fwd thread id", default=None)
    # kept verbatim as JSON text (an empty Raw means "absent": msgspec has no Raw | None)
    input_dims: msgspec.Raw = msgspec.field(name="Input Dims", default=_NO_RAW)
    input_types: msgspec.Raw = msgspec.field(name="Input type", default=_NO_RAW)
    grid: msgspec.Raw = _NO_RAW
    block: msgspec.Raw = _NO_RAW
    registers_per_thread: int | None = msgspec.field(name="registers per thread", default=None)
    shared_memory: int | None = msgspec.field(name="shared memory", default=None)
    blocks_per_sm: float | None = msgspec.field(name="blocks per SM", default=None)
    warps_per_sm: float | None = msgspec.field(name="warps per SM", default=None)
    occupancy_pct: float | None = msgspec.field(name="est. achieved occupancy %", default=None)
    bytes: int | None = None
    # [memory] instant events
    device_type: int | None = msgspec.field(name="Device Type", default=None)
    device_id: int | None = msgspec.field(name="Device Id", default=None)
    addr: int | None = msgspec.field(name="Addr", default=None)
    mem_bytes: int | None = msgspec.field(name="Bytes", default=None)
    total_allocated: int | None = msgspec.field(name="Total Allocated", default=None)
    total_reserved: int | None = msgspec.field(name="Total Reserved", default=None)
    # 'M' metadata rows
    name: str | None = None
    sort_index: int | None = None
    labels: str | None = None


class Event(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str | None = None
    name: str | None = None
    pid: int | str | None = None
    tid: int | str | None = None
    ts: int | float | None = None
    dur: int | float | None = None
    id: int | str | None = None
    bp: str | None = None
    args: Args | None = None


class RawArgsEvent(msgspec.Struct, gc=False):
    """Second, rare pass: the verbatim ``args`` of events whose category we do not know."""

    ph: str = ""
    cat: str | None = None
    args: msgspec.Raw = _NO_RAW


class Document(msgspec.Struct):
    """A Kineto document: the events plus the top-level keys Kineto writes.

    Decoding the whole file through one typed Struct is a single pass; other top-level keys
    (cluster job names and the like) are skipped by the decoder and not kept.
    """

    traceEvents: list[Event] | None = None  # noqa: N815 - Kineto's key
    schemaVersion: Any = None  # noqa: N815
    deviceProperties: Any = None  # noqa: N815
    distributedInfo: Any = None  # noqa: N815
    baseTimeNanoseconds: Any = None  # noqa: N815
    displayTimeUnit: Any = None  # noqa: N815
    traceName: Any = None  # noqa: N815
    record_shapes: Any = None
    profile_memory: Any = None
    with_stack: Any = None
    with_flops: Any = None
    with_modules: Any = None
    cupti_version: Any = None
    cuda_runtime_version: Any = None
    cuda_driver_version: Any = None
    hip_runtime_version: Any = None
    trace_id: Any = None
    torch_version: Any = None
    pytorch_version: Any = None


class RawArgsDocument(msgspec.Struct):
    traceEvents: list[RawArgsEvent] | None = None  # noqa: N815


_EMPTY_ARGS = Args()
_EVENTS_DECODER = msgspec.json.Decoder(list[Event], strict=False)
_DOC_DECODER = msgspec.json.Decoder(Document, strict=False)
_EVENT_DECODER = msgspec.json.Decoder(Event, strict=False)
_RAW_ARGS_DECODER = msgspec.json.Decoder(list[RawArgsEvent], strict=False)
_RAW_ARGS_DOC_DECODER = msgspec.json.Decoder(RawArgsDocument, strict=False)
_ANY_DECODER = msgspec.json.Decoder()


class Timings:
    """Wall time per phase of one read (for ``benchmarks/load.py``), and progress callbacks."""

    def __init__(self, on_phase: Callable[[str], None] | None = None) -> None:
        self.phases: dict[str, float] = {}
        self._t = time.perf_counter()
        self._on_phase = on_phase

    def mark(self, phase: str) -> None:
        now = time.perf_counter()
        self.phases[phase] = self.phases.get(phase, 0.0) + now - self._t
        self._t = now
        if self._on_phase is not None:
            self._on_phase(phase)


LAST_TIMINGS: dict[str, float] = {}


# -- public API ------------------------------------------------------------------------------
def read_bytes(path: str | Path) -> bytes:
    """The JSON text of ``path``, inflated when it is gzip (by magic number, not by name)."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except IsADirectoryError:
        raise TraceError(str(p), "is a directory; use torchscope.load() for log directories") from None
    except OSError as exc:
        raise TraceError(str(p), f"cannot read file: {exc.strerror or exc}") from None
    if raw[:2] == b"\x1f\x8b":
        try:
            return gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as exc:
            raise TraceError(str(p), f"corrupt or truncated gzip ({exc})") from None
    return raw


def read_chrome(path: str | Path, on_phase: Callable[[str], None] | None = None) -> Trace:
    """Read a Kineto/Chrome trace file (``.json`` or ``.json.gz``) into a Trace.

    ``on_phase`` is called with the name of each finished phase (inflate, decode, columns,
    derive), for progress displays.
    """
    timings = Timings(on_phase)
    box = [read_bytes(path)]  # handed over, so the text can be freed as soon as it is decoded
    timings.mark("inflate")
    return _read(box, str(path), timings)


def read_chrome_document(data: bytes | str | dict[str, Any] | list[Any] | Any, source: str = "") -> Trace:
    """Read a Kineto JSON document (bytes, text, a parsed dict, or a bare event list)."""
    timings = Timings()
    if isinstance(data, str):
        raw = data.encode()
    elif isinstance(data, (bytes, bytearray, memoryview)):
        raw = bytes(data)
    else:
        try:
            raw = msgspec.json.encode(data)
        except (TypeError, ValueError, OverflowError) as exc:
            raise TraceError(source, f"document cannot be encoded as JSON ({exc})") from None
    return _read([raw], source, timings)


# -- decoding ---------------------------------------------------------------------------------
def _read(box: list[bytes], source: str, timings: Timings) -> Trace:
    """Read the JSON text in ``box`` (taken out of it, so that it can be freed early)."""
    warnings: list[str] = []
    top: dict[str, Any] = {}
    try:
        trace = _build(box, top, warnings, timings, source)
    except RecursionError:
        raise TraceError(source, "JSON nested too deeply to be a trace") from None
    LAST_TIMINGS.clear()
    LAST_TIMINGS.update(timings.phases)
    return trace


# Files larger than this are decoded in pieces of about this size, so that only one piece of
# per-event Python objects is alive at a time: peak memory follows the columnar result, not
# the object graph of the whole JSON.
CHUNK_BYTES = 32 * 1024 * 1024


def _decode_chunks(
    data: bytes, source: str, warnings: list[str], top: dict[str, Any]
) -> Iterator[list[Event]]:
    """The typed events, one piece at a time; fills ``top`` with the top-level keys."""
    layout = _layout(data) if len(data) > 2 * CHUNK_BYTES else None
    head_doc: Document | None = None
    if layout is not None and not layout[2]:
        try:
            head_doc = _DOC_DECODER.decode(data[: layout[0] + 1] + b"]}")
            if head_doc.traceEvents != []:
                layout = None
        except (msgspec.ValidationError, msgspec.DecodeError):
            layout = None  # "traceEvents" was found inside another value: read it whole
    if layout is None:
        whole_top, events = _decode(data, source, warnings)
        top.update(whole_top)
        yield events
        return
    start, cuts, bare = layout
    # pieces are sliced one at a time, so that only one copy of one piece exists at a time
    bounds = [(start + 1, cuts[0][0] + 1)] + [
        (begin, close + 1) for (_, begin), (close, _) in zip(cuts, cuts[1:], strict=False)
    ]
    for lo, hi in bounds:
        piece = b"[" + data[lo:hi] + b"]"
        try:
            events = _EVENTS_DECODER.decode(piece)
        except msgspec.ValidationError:
            events = _lenient(piece, source, warnings)[1]
        except msgspec.DecodeError as exc:
            raise TraceError(source, f"not valid JSON ({exc})") from None
        del piece
        yield events
    tail = (b"[" if bare else b'{"traceEvents":[') + data[cuts[-1][1] :]
    rest: dict[str, Any] = {}
    try:
        if bare:
            events = _EVENTS_DECODER.decode(tail)
        else:
            doc = _DOC_DECODER.decode(tail)
            events = doc.traceEvents or []
            rest = _top_fields(doc)
    except msgspec.ValidationError:
        rest, events = _lenient(tail, source, warnings)
    except msgspec.DecodeError as exc:
        raise TraceError(source, f"not valid JSON ({exc})") from None
    del tail
    if head_doc is not None:
        top.update(_top_fields(head_doc))
    top.update(rest)
    yield events


def _top_fields(doc: Document) -> dict[str, Any]:
    return {k: v for k in doc.__struct_fields__ if k != "traceEvents" and (v := getattr(doc, k)) is not None}


def _layout(data: bytes) -> tuple[int, list[tuple[int, int]], bool] | None:
    """Where to cut the event list into pieces of about CHUNK_BYTES, or None to read it whole.

    Kineto writes one event per line: ``},`` then a newline and the same indentation before
    every event's ``{``. We cut only at that exact separator (the one between ``[`` and the
    first event), and only when it contains a newline: a raw newline never occurs inside a
    JSON string, and nested objects inside ``args`` sit deeper. Returns the index of the
    list's ``[``, the cuts as (index of the closing ``}``, index of the next ``{``), and
    whether the file is a bare list.
    """
    bare = data[:64].lstrip().startswith(b"[")
    if bare:
        start = data.find(b"[")
    else:
        key = data.find(b'"traceEvents"')
        start = data.find(b"[", key) if key >= 0 else -1
    if start < 0:
        return None
    first = data.find(b"{", start)
    indent = data[start + 1 : first] if first > 0 else b""
    if b"\n" not in indent or indent.strip():
        return None
    separator = b"}," + indent + b"{"
    cuts: list[tuple[int, int]] = []
    pos = start + CHUNK_BYTES
    while pos < len(data) - CHUNK_BYTES // 2:
        k = data.find(separator, pos)
        if k < 0:
            break
        cuts.append((k, k + len(separator) - 1))
        pos = k + CHUNK_BYTES
    return (start, cuts, bare) if cuts else None


def _decode(data: bytes, source: str, warnings: list[str]) -> tuple[dict[str, Any], list[Event]]:
    """Top-level keys and the typed events, in one typed pass (a lenient one if that fails)."""
    head = data[:64].lstrip()
    if not head:
        raise TraceError(source, "file is empty")
    if head[:1] not in (b"{", b"["):
        raise TraceError(source, "not JSON (does not start with '{' or '[')")
    try:
        if head.startswith(b"["):
            return {}, _EVENTS_DECODER.decode(data)
        doc = _DOC_DECODER.decode(data)
    except msgspec.ValidationError:
        return _lenient(data, source, warnings)
    except msgspec.DecodeError as exc:
        raise TraceError(source, f"not valid JSON ({exc})") from None
    if doc.traceEvents is None:
        raise TraceError(source, "not a trace: no 'traceEvents' key")
    top = {k: v for k in doc.__struct_fields__ if k != "traceEvents" and (v := getattr(doc, k)) is not None}
    return top, doc.traceEvents


def _lenient(data: bytes, source: str, warnings: list[str]) -> tuple[dict[str, Any], list[Event]]:
    """Slow path for files the typed decoder rejects: repair event by event."""
    try:
        doc = _ANY_DECODER.decode(data)
    except msgspec.DecodeError as exc:
        raise TraceError(source, f"not valid JSON ({exc})") from None
    top: dict[str, Any] = {}
    if isinstance(doc, dict):
        if "traceEvents" not in doc:
            raise TraceError(source, "not a trace: no 'traceEvents' key")
        items = doc.pop("traceEvents")
        top = doc
    else:
        items = doc
    if not isinstance(items, list):
        raise TraceError(source, "not a trace: the event list is not a list")
    events: list[Event] = []
    bad_shape = bad_fields = 0
    for item in items:
        if not isinstance(item, dict):
            bad_shape += 1
            continue
        try:
            events.append(_EVENT_DECODER.decode(msgspec.json.encode(item)))
            continue
        except (msgspec.ValidationError, msgspec.DecodeError, TypeError, ValueError, OverflowError):
            pass
        fixed = _repair(item)
        try:
            events.append(_EVENT_DECODER.decode(msgspec.json.encode(fixed)))
            bad_fields += 1
        except (msgspec.ValidationError, msgspec.DecodeError, TypeError, ValueError, OverflowError):
            bad_shape += 1
    if bad_shape:
        warnings.append(f"skipped {bad_shape} entries of traceEvents that are not events")
    if bad_fields:
        warnings.append(f"dropped malformed fields of {bad_fields} events")
    return top, events


def _repair(item: dict[str, Any]) -> dict[str, Any]:
    """Keep the fields of one event that have a usable type; drop the rest."""
    fixed = {k: v for k, v in item.items() if k in Event.__struct_fields__ and k != "args"}
    for key in ("ts", "dur"):
        v = fixed.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or abs(v) >= 2**63):
            fixed.pop(key)
    for key in ("cat", "name", "ph", "bp"):
        if key in fixed and not isinstance(fixed[key], str):
            fixed[key] = str(fixed[key]) if fixed[key] is not None else None
    for key in ("pid", "tid", "id"):
        v = fixed.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, str))):
            fixed[key] = str(v)
        if isinstance(v, int) and not isinstance(v, bool) and abs(v) >= 2**63:
            fixed[key] = str(v)
    args = item.get("args")
    if isinstance(args, dict):
        good = {}
        for k, v in args.items():
            try:
                _ARGS_DECODER.decode(msgspec.json.encode({k: v}))
                good[k] = v
            except (msgspec.ValidationError, msgspec.DecodeError, TypeError, ValueError, OverflowError):
                pass
        fixed["args"] = good
    return fixed


_ARGS_DECODER = msgspec.json.Decoder(Args, strict=False)


# -- columns ------------------------------------------------------------------------------------
def _is_i64(v: object) -> bool:
    return type(v) is int and -(2**63) <= v < 2**63


def _decimal(text: str) -> bool:
    body = text[1:] if text.startswith("-") else text
    return body.isascii() and body.isdigit()


class _Ids:
    """Integer ids for pid/tid values that may be strings ("stream 7", "Spans", "25738")."""

    def __init__(self) -> None:
        self.labels: dict[int, str] = {}
        self._by_text: dict[str, int] = {}

    def one(self, value: int | str | None) -> int:
        if _is_i64(value):
            return value  # type: ignore[return-value]
        if value is None:
            return 0
        text = str(value)
        known = self._by_text.get(text)
        if known is not None:
            return known
        stripped = text.strip()
        number: int
        digits = stripped[7:].strip() if stripped.startswith("stream ") else ""
        if _decimal(stripped) and _is_i64(int(stripped)):
            number = int(stripped)
        elif _decimal(digits) and _is_i64(int(digits)):
            number = int(digits)
            self.labels[number] = text
        else:
            # a stable negative id from the text itself, so that it does not depend on which
            # event (or which piece of a large file) named it first
            number = -2 - zlib.crc32(text.encode("utf-8", "replace"))
            while number in self.labels and self.labels[number] != text:
                number -= 1
            self.labels[number] = text
        self._by_text[text] = number
        return number

    def column(self, values: Sequence[int | str | None]) -> I64:
        """Ints pass through (parsed by Polars in Rust); only the rare strings take ``one``."""
        try:
            series = pl.Series(values, dtype=pl.Int64, strict=False)
        except (TypeError, ValueError, OverflowError, pl.exceptions.PolarsError):
            series = pl.Series([v if _is_i64(v) else None for v in values], dtype=pl.Int64)
        arr = series.fill_null(0).to_numpy().copy()
        if series.null_count():
            idx = np.flatnonzero(series.is_null().to_numpy())
            arr[idx] = [self.one(values[i]) for i in idx.tolist()]
        return arr


def _us_to_ns(
    values: Sequence[int | float | None], what: str, warnings: list[str]
) -> tuple[I64, npt.NDArray[np.bool_]]:
    """Microseconds (int, or float with ns decimals) to int64 ns, and a validity mask."""
    n = len(values)
    ints: I64 | None = None
    arr: npt.NDArray[np.float64]
    inferred: npt.NDArray[Any]
    try:
        inferred = np.array(values) if n else np.empty(0, np.float64)
    except (TypeError, ValueError, OverflowError):
        inferred = np.empty(0, object)
    if inferred.dtype == np.int64 and inferred.ndim == 1:
        ints = inferred
        arr = ints.astype(np.float64)
    elif inferred.dtype == np.float64 and inferred.ndim == 1:
        arr = inferred
    elif inferred.dtype == object and inferred.ndim == 1 and (numbers := _numeric_objects(inferred)):
        ints, arr = numbers
    else:  # strings, bools, nested lists, huge ints: the slow, careful way
        arr = np.array(
            [v if isinstance(v, (int, float)) and not isinstance(v, bool) else np.nan for v in values],
            dtype=np.float64,
        )
        if all(type(v) is int for v in values):
            try:
                ints = np.array(values, dtype=np.int64)
            except OverflowError:
                ints = None
    valid = np.isfinite(arr)
    if ints is not None:
        if np.abs(ints).max(initial=0) > np.iinfo(np.int64).max // 1000:
            valid &= np.abs(ints) <= np.iinfo(np.int64).max // 1000
            ints = np.where(valid, ints, 0)
            warnings.append(f"{(~valid).sum()} events have a {what} too large to represent; dropped")
        return ints * 1000, valid
    limit = float(np.iinfo(np.int64).max // 1000)
    big = valid & (np.abs(arr) >= limit)
    if big.any():
        warnings.append(f"{int(big.sum())} events have a {what} too large to represent; dropped")
        valid &= ~big
    safe = np.where(valid, arr, 0.0)
    whole = np.floor(safe)
    ns = whole.astype(np.int64) * 1000 + np.rint((safe - whole) * 1000.0).astype(np.int64)
    return ns, valid


def _numeric_objects(values: npt.NDArray[Any]) -> tuple[I64 | None, npt.NDArray[np.float64]] | None:
    """An object array of ints, floats and Nones (instants have no 'dur') as numbers, vectorized."""
    none: npt.NDArray[np.bool_] = values == None  # noqa: E711 - elementwise on an object array
    filled = np.where(none, 0, values)
    try:
        as_float = filled.astype(np.float64)
        as_int = filled.astype(np.int64)
    except (TypeError, ValueError, OverflowError):
        return None
    as_float[none] = np.nan
    exact = np.array_equal(as_int[~none].astype(np.float64), as_float[~none])
    return (as_int if exact else None), as_float


_SEP = b"\x1f"  # a control character cannot appear unescaped in JSON text


def _raw_text(values: list[msgspec.Raw]) -> pl.Series:
    """Verbatim JSON text of each value (null when absent), split apart in one C/Rust pass."""
    if not values:
        return pl.Series(values=[], dtype=pl.String)
    joined = _SEP.join(values).decode("utf-8", errors="replace")
    parts = pl.Series([joined]).str.split(_SEP.decode()).explode()
    return parts.replace("", None)


def _col(items: Sequence[Any], field: str) -> list[Any]:
    """One attribute of every item, as a list (a C-level loop: ``map`` + ``attrgetter``)."""
    return list(map(attrgetter(field), items))


def _take(items: Sequence[Any], idx: npt.NDArray[np.int64]) -> list[Any]:
    return list(map(items.__getitem__, idx.tolist()))


def _int_col(values: list[Any]) -> pl.Series:
    """Ints with nulls; values of another type (a str stream "0x0") become null."""
    try:
        return pl.Series(values, dtype=pl.Int64, strict=False)
    except (TypeError, ValueError, OverflowError, pl.exceptions.PolarsError):
        return pl.Series([v if _is_i64(v) else None for v in values], dtype=pl.Int64)


def _float_col(values: list[Any]) -> pl.Series:
    try:
        return pl.Series(values, dtype=pl.Float64, strict=False)
    except (TypeError, ValueError, OverflowError, pl.exceptions.PolarsError):
        return pl.Series([v if isinstance(v, (int, float)) else None for v in values], dtype=pl.Float64)


def _any_set(values: list[Any]) -> bool:
    return any(v is not None for v in values)


def _build(
    box: list[bytes], top: dict[str, Any], warnings: list[str], timings: Timings, source: str
) -> Trace:
    data = box.pop()
    chunks = _decode_chunks(data, source, warnings, top)
    ids = _Ids()
    ev_parts: list[pl.DataFrame] = []
    mem_parts: list[pl.DataFrame] = []
    flow_parts: list[pl.DataFrame] = []
    metas: list[Event] = []
    n_events = n_spans = other_ph = 0
    for events in chunks:
        timings.mark("decode")
        phase = pl.Series(_col(events, "ph"), dtype=pl.String)
        spans = _take(events, np.flatnonzero(phase.is_in(["X", "i", "I"]).to_numpy()))
        flows = _take(events, np.flatnonzero(phase.is_in(["s", "f", "t"]).to_numpy()))
        metas += _take(events, np.flatnonzero((phase == "M").to_numpy()))
        n_events += len(events)
        other_ph += len(events) - len(spans) - len(flows) - int((phase == "M").sum())
        del events
        ev_part, mem_part = _span_frames(spans, ids, warnings)
        ev_parts.append(ev_part.with_columns(pl.col("raw_row") + n_spans))
        mem_parts.append(mem_part)
        flow_parts.append(_flow_frame(flows, ids, warnings))
        n_spans += len(spans)
        del spans, flows
        timings.mark("columns")
    if other_ph:
        warnings.append(f"skipped {other_ph} events with phases other than X, i, s, f, t, M")
    if not n_events:
        warnings.append("the trace has no events")
    ev = pl.concat(ev_parts, how="diagonal_relaxed") if len(ev_parts) > 1 else ev_parts[0]
    memory = pl.concat(mem_parts, how="diagonal_relaxed") if len(mem_parts) > 1 else mem_parts[0]
    flow_df = pl.concat(flow_parts, how="diagonal_relaxed") if len(flow_parts) > 1 else flow_parts[0]
    del ev_parts, mem_parts, flow_parts
    meta = _meta(top, source)
    threads = _threads_frame(metas, ev, ids)
    del chunks
    if ev.height and (ev["kind"] == "other").any():
        ev = _attach_raw_args(ev, data, n_spans)
    del data  # the JSON text is not needed any more: free it before linking
    timings.mark("columns")

    ev, memory, flow_df = derive(ev, memory, flow_df)
    _check_clocks(ev, warnings)
    timings.mark("derive")
    if warnings:
        meta = TraceMeta(**{**meta.__dict__, "warnings": tuple(warnings)})
    return Trace(
        events=conform(ev, EVENTS_SCHEMA),
        memory=conform(memory, MEMORY_SCHEMA),
        flows=conform(flow_df, FLOWS_SCHEMA),
        threads=conform(threads, THREADS_SCHEMA),
        meta=meta,
    )


def _check_clocks(ev: pl.DataFrame, warnings: list[str]) -> None:
    """Warn when device timestamps look offset from host ones (work starting before its launch)."""
    dev = ev.filter(pl.col("launcher") >= 0)
    if dev.height == 0:
        return
    launch = ev["start_ns"].to_numpy()[dev["launcher"].to_numpy()]
    early = launch - dev["start_ns"].to_numpy()
    bad = early > 0
    if bad.sum() > max(1, dev.height // 100):
        warnings.append(
            f"{int(bad.sum())} of {dev.height} device events start before the call that launched them"
            f" (median {int(np.median(early[bad])) / 1e3:.1f} us early): host and device clocks disagree"
        )


_DEVICE_FIELDS = {
    "correlation": ("correlation", _int_col),
    "ext_2021": ("external_id_2021", _int_col),
    "a_device": ("device", _int_col),
    "a_stream": ("stream", _int_col),
    "a_stream_id": ("stream_id", _int_col),
    "registers_per_thread": ("registers_per_thread", _int_col),
    "shared_memory": ("shared_memory", _int_col),
    "blocks_per_sm": ("blocks_per_sm", _float_col),
    "warps_per_sm": ("warps_per_sm", _float_col),
    "occupancy_pct": ("occupancy_pct", _float_col),
    "bytes": ("bytes", _int_col),
}


def _span_frames(spans: list[Event], ids: _Ids, warnings: list[str]) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The events table (complete and instant events) and the memory table ([memory] instants)."""
    n = len(spans)
    ph = pl.Series("ph", _col(spans, "ph"), dtype=pl.String)
    name = pl.Series("name", _col(spans, "name"), dtype=pl.String).fill_null("")
    cat = pl.Series("cat", _col(spans, "cat"), dtype=pl.String).fill_null("")
    start, ok_ts = _us_to_ns(_col(spans, "ts"), "timestamp", warnings)
    durs = _col(spans, "dur")
    dur, ok_dur = _us_to_ns(durs, "duration", warnings)
    pids, tids = _col(spans, "pid"), _col(spans, "tid")
    missing_ids = pids.count(None) + tids.count(None)
    if missing_ids:
        warnings.append(f"{missing_ids} pid/tid values were missing; read as 0")
    pid = ids.column(pids)
    tid = ids.column(tids)
    args = [_EMPTY_ARGS if a is None else a for a in _col(spans, "args")]

    is_x = (ph == "X").to_numpy()
    bad_dur = is_x & ~ok_dur
    if bad_dur.any():
        warnings.append(f"{int(bad_dur.sum())} complete events had no usable 'dur'; read as 0")
    neg = ok_dur & (dur < 0)
    if neg.any():
        warnings.append(f"{int(neg.sum())} events had a negative duration; read as 0")
    dur = np.where(is_x & ok_dur & ~neg, dur, 0)
    if not ok_ts.all():
        warnings.append(f"dropped {int((~ok_ts).sum())} events without a usable 'ts'")

    is_mem = ((name == dialect.MEMORY_EVENT_NAME) & ~(ph == "X")).to_numpy()
    memory = _memory_frame(
        _take(args, np.flatnonzero(is_mem & ok_ts)),
        start[is_mem & ok_ts],
        pid[is_mem & ok_ts],
        tid[is_mem & ok_ts],
    )
    keep = np.flatnonzero(~is_mem & ok_ts)
    if keep.size < n:
        ph, name, cat = ph.gather(keep), name.gather(keep), cat.gather(keep)
        start, dur, pid, tid = start[keep], dur[keep], pid[keep], tid[keep]
        args = _take(args, keep)

    df = pl.DataFrame(
        {
            "cat": cat,
            "name": name,
            "ph": ph,
            "pid": pid,
            "tid": tid,
            "start_ns": start,
            "dur_ns": dur,
            "external_id": _int_col(_col(args, "external_id")),
            "seq": _int_col(_col(args, "seq")),
            "fwd_tid": _int_col(_col(args, "fwd_tid")),
            "input_dims": _raw_text(_col(args, "input_dims")),
            "input_types": _raw_text(_col(args, "input_types")),
            "raw_row": keep,
        }
    )
    # device-only attributes: pulled from the (few) rows that can carry them
    dev_cats = [c for c in df["cat"].unique().to_list() if c.lower() in dialect.DEVICE_CATEGORIES]
    runtime_like = [
        c for c in df["cat"].unique().to_list() if dialect.CATEGORY_KIND.get(c.lower()) in ("runtime", "sync")
    ]
    rows = np.flatnonzero(df["cat"].is_in(dev_cats + runtime_like).to_numpy())
    dev_args = _take(args, rows)
    extra: dict[str, pl.Series] = {"row": pl.Series(rows, dtype=pl.Int64)}
    for column, (field, make) in _DEVICE_FIELDS.items():
        extra[column] = make(_col(dev_args, field))
    extra["grid"] = _raw_text(_col(dev_args, "grid"))
    extra["block"] = _raw_text(_col(dev_args, "block"))
    dev = (
        pl.DataFrame(extra)
        .with_columns(pl.coalesce("a_stream", "a_stream_id").alias("a_stream"))
        .drop("a_stream_id")
    )
    df = df.with_row_index("row").with_columns(pl.col("row").cast(pl.Int64))
    df = df.join(dev, on="row", how="left").drop("row")
    df = df.with_columns(pl.coalesce("external_id", "ext_2021").alias("external_id")).drop("ext_2021")
    return _classify(df), memory


def _classify(df: pl.DataFrame) -> pl.DataFrame:
    """Normalized kind, device and stream from the raw category and the track."""
    cats = df["cat"].unique().to_list()
    kind_of = {c: dialect.CATEGORY_KIND.get(c.lower(), "other") for c in cats}
    on_device = [c for c in cats if c.lower() in dialect.DEVICE_CATEGORIES]
    kind = (
        pl.when(pl.col("cat") == "")
        .then(pl.when(pl.col("ph") == "X").then(pl.lit("other")).otherwise(pl.lit("instant")))
        .otherwise(pl.col("cat").replace_strict(kind_of, default="other"))
    )
    kind = (
        pl.when(pl.col("name").is_in(list(dialect.COLLECTIVE_NAMES)))
        .then(pl.lit("collective"))
        # 2021 traces file ProfilerStep#N under "Operator"; it is a record_function label
        .when((kind == "cpu_op") & pl.col("name").str.starts_with("ProfilerStep#"))
        .then(pl.lit("user_annotation"))
        .otherwise(kind)
    )
    is_dev = pl.col("cat").is_in(on_device)
    return df.with_columns(
        kind.alias("kind"),
        pl.when(is_dev).then(pl.coalesce("a_device", "pid")).otherwise(-1).alias("device"),
        pl.when(is_dev).then(pl.coalesce("a_stream", "tid")).otherwise(-1).alias("stream"),
        pl.when(is_dev).then(pl.col("bytes")).otherwise(None).alias("bytes"),
    ).drop("a_device", "a_stream", "ph")


def _attach_raw_args(ev: pl.DataFrame, events_raw: bytes, n_spans: int) -> pl.DataFrame:
    """Keep the verbatim ``args`` of events whose category we do not model."""
    try:
        if events_raw.lstrip()[:1] == b"[":
            raw = _RAW_ARGS_DECODER.decode(events_raw)
        else:
            raw = _RAW_ARGS_DOC_DECODER.decode(events_raw).traceEvents or []
    except (msgspec.DecodeError, msgspec.ValidationError):
        return ev
    kept = [r for r in raw if r.ph == "X" or r.ph == "i" or r.ph == "I"]
    if len(kept) != n_spans:  # pragma: no cover - lenient path dropped entries
        return ev
    rows = ev.filter(pl.col("kind") == "other")["raw_row"].to_list()
    texts = {}
    for r in rows:
        a = kept[r].args
        if len(a):
            texts[r] = bytes(a).decode()
    return ev.with_columns(
        pl.col("raw_row").replace_strict(texts, default=None, return_dtype=pl.String).alias("args")
    )


def _memory_frame(args: list[Args], ts: I64, pid: I64, tid: I64) -> pl.DataFrame:
    if not args:
        return pl.DataFrame(schema=MEMORY_SCHEMA)
    return pl.DataFrame(
        {
            "ts_ns": ts,
            "pid": pid,
            "tid": tid,
            "device_type": _int_col(_col(args, "device_type")),
            "device_id": _int_col(_col(args, "device_id")),
            "addr": _int_col(_col(args, "addr")),
            "bytes": _int_col(_col(args, "mem_bytes")),
            "total_allocated": _int_col(_col(args, "total_allocated")),
            "total_reserved": _int_col(_col(args, "total_reserved")),
        }
    )


def _flow_frame(flows: list[Event], ids: _Ids, warnings: list[str]) -> pl.DataFrame:
    schema = {
        "cat": pl.String,
        "ph": pl.String,
        "flow_id": pl.Int64,
        "pid": pl.Int64,
        "tid": pl.Int64,
        "ts_ns": pl.Int64,
    }
    if not flows:
        return pl.DataFrame(schema=schema)
    ts, ok = _us_to_ns(_col(flows, "ts"), "timestamp", warnings)
    df = pl.DataFrame(
        {
            "cat": pl.Series(_col(flows, "cat"), dtype=pl.String).fill_null(""),
            "ph": pl.Series(_col(flows, "ph"), dtype=pl.String),
            "flow_id": ids.column(_col(flows, "id")),
            "pid": ids.column(_col(flows, "pid")),
            "tid": ids.column(_col(flows, "tid")),
            "ts_ns": ts,
        }
    )
    if not ok.all():
        warnings.append(f"dropped {int((~ok).sum())} flow events without a usable 'ts'")
        df = df.filter(pl.Series(ok))
    return df


def _threads_frame(metas: list[Event], ev: pl.DataFrame, ids: _Ids) -> pl.DataFrame:
    """One row per (pid, tid) seen in events or named by 'M' metadata rows."""
    args = [_EMPTY_ARGS if a is None else a for a in _col(metas, "args")]
    m = pl.DataFrame(
        {
            "what": pl.Series(_col(metas, "name"), dtype=pl.String),
            "pid": ids.column(_col(metas, "pid")),
            "tid": ids.column(_col(metas, "tid")),
            "text": pl.Series(_col(args, "name"), dtype=pl.String),
            "sort_index": _int_col(_col(args, "sort_index")),
        },
        schema_overrides={"pid": pl.Int64, "tid": pl.Int64},
    )
    procs = (
        m.filter((pl.col("what") == "process_name") & pl.col("text").is_not_null())
        .unique("pid", keep="last")
        .select("pid", pl.col("text").alias("process_name"))
    )
    names = (
        m.filter((pl.col("what") == "thread_name") & pl.col("text").is_not_null())
        .unique(["pid", "tid"], keep="last")
        .select("pid", "tid", pl.col("text").str.strip_chars().replace("", None).alias("thread_name"))
    )
    order = (
        m.filter((pl.col("what") == "thread_sort_index") & pl.col("sort_index").is_not_null())
        .unique(["pid", "tid"], keep="last")
        .select("pid", "tid", "sort_index")
    )
    keys = pl.concat(
        [ev.select("pid", "tid"), names.select("pid", "tid"), order.select("pid", "tid")]
    ).unique()
    labels = pl.DataFrame(
        {"id": list(ids.labels), "text": list(ids.labels.values())},
        schema={"id": pl.Int64, "text": pl.String},
    )
    out = (
        keys.join(procs, on="pid", how="left")
        .join(names, on=["pid", "tid"], how="left")
        .join(order, on=["pid", "tid"], how="left")
        .join(labels.rename({"id": "tid", "text": "label"}), on="tid", how="left")
        .join(labels.rename({"id": "pid", "text": "process_label"}), on="pid", how="left")
        .with_columns(pl.coalesce("process_name", "process_label").alias("process_name"))
        .sort("pid", "tid")
    )
    return conform(out, THREADS_SCHEMA)


# -- metadata -----------------------------------------------------------------------------------
def _literal(value: Any) -> Any:
    """Kineto writes some keys as Python reprs ("[{'id': 0, ...}]"); read them safely."""
    if isinstance(value, str) and value[:1] in "[{":
        try:
            return ast.literal_eval(value)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            return value
    return value


_SETTINGS = ("record_shapes", "profile_memory", "with_stack", "with_flops", "with_modules", "displayTimeUnit")


def _meta(top: dict[str, Any], source: str) -> TraceMeta:
    top = dict(top)
    dist = _literal(top.pop("distributedInfo", None))
    props = _literal(top.pop("deviceProperties", None))
    base = top.pop("baseTimeNanoseconds", None)
    version = top.pop("schemaVersion", None)
    settings = {k: top.pop(k) for k in _SETTINGS if k in top}
    dist = dist if isinstance(dist, dict) else {}
    props_t = tuple(p for p in props if isinstance(p, dict)) if isinstance(props, list) else ()

    def _int(v: Any) -> int | None:
        return v if isinstance(v, int) and not isinstance(v, bool) else None

    torch_version = top.get("torch_version") or top.get("pytorch_version")
    return TraceMeta(
        source=source,
        schema_version=_int(version),
        rank=_int(dist.get("rank")),
        world_size=_int(dist.get("world_size")),
        backend=dist.get("backend") if isinstance(dist.get("backend"), str) else None,
        device_properties=props_t,
        base_time_ns=_int(base),
        torch_version=torch_version if isinstance(torch_version, str) else None,
        profiler_settings=settings,
        extra={**top, **({"distributedInfo": dist} if dist else {})},
    )
