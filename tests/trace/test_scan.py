"""The C scanner (``torchscope.trace._scan``) against msgspec, the decoder it stands in for.

The scanner's promise is narrow: for every input it accepts, each column equals what msgspec
gives with the Structs in ``events.py`` (``strict=False``); for anything else it returns None
and the msgspec path takes over. So every test here decodes the same bytes both ways: the real
traces, the traces cut into pieces, generated event lists with right and wrong types, and
byte-level mutations of a real trace.
"""

from __future__ import annotations

import gzip
import json
import math
import random
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from operator import attrgetter
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from torchscope.trace.events import EMPTY_ARGS, Args, Document, Event, RawArgsEvent

_scan = pytest.importorskip(
    "torchscope.trace._scan",
    reason="the optional C extension torchscope.trace._scan did not build (no C compiler?)",
)

EVENTS = msgspec.json.Decoder(list[Event], strict=False)
DOCUMENT = msgspec.json.Decoder(Document, strict=False)
EVENTS = msgspec.json.Decoder(list[Event], strict=False)
RAW_ARGS_EVENTS = msgspec.json.Decoder(list[RawArgsEvent], strict=False)

# output column -> (kind, where msgspec keeps it: an Event or an Args attribute)
COLUMNS: dict[str, tuple[str, str, str]] = {
    "ph": ("str", "event", "ph"),
    "cat": ("str", "event", "cat"),
    "name": ("str", "event", "name"),
    "pid": ("intstr", "event", "pid"),
    "tid": ("intstr", "event", "tid"),
    "ts": ("num", "event", "ts"),
    "dur": ("num", "event", "dur"),
    "id": ("intstr", "event", "id"),
    "bp": ("str", "event", "bp"),
    "external_id": ("int", "args", "external_id"),
    "external_id_2021": ("int", "args", "external_id_2021"),
    "correlation": ("int", "args", "correlation"),
    "device": ("int", "args", "device"),
    "stream": ("intstr", "args", "stream"),
    "stream_id": ("intstr", "args", "stream_id"),
    "seq": ("int", "args", "seq"),
    "fwd_tid": ("int", "args", "fwd_tid"),
    "input_dims": ("raw", "args", "input_dims"),
    "input_types": ("raw", "args", "input_types"),
    "concrete_inputs": ("raw", "args", "concrete_inputs"),
    "grid": ("raw", "args", "grid"),
    "block": ("raw", "args", "block"),
    "registers_per_thread": ("int", "args", "registers_per_thread"),
    "shared_memory": ("int", "args", "shared_memory"),
    "blocks_per_sm": ("float", "args", "blocks_per_sm"),
    "warps_per_sm": ("float", "args", "warps_per_sm"),
    "occupancy_pct": ("float", "args", "occupancy_pct"),
    "bytes": ("int", "args", "bytes"),
    "device_type": ("int", "args", "device_type"),
    "device_id": ("int", "args", "device_id"),
    "addr": ("int", "args", "addr"),
    "mem_bytes": ("int", "args", "mem_bytes"),
    "total_allocated": ("int", "args", "total_allocated"),
    "total_reserved": ("int", "args", "total_reserved"),
    "arg_name": ("str", "args", "name"),
    "sort_index": ("int", "args", "sort_index"),
    "labels": ("str", "args", "labels"),
}


# -- both sides as plain Python lists, one per column ---------------------------------------
def expected_columns(events: list[Event]) -> dict[str, list[Any]]:
    """What msgspec says, column by column (None for a missing value; raw fields as text)."""
    args: list[Args] = [EMPTY_ARGS if e.args is None else e.args for e in events]
    out: dict[str, list[Any]] = {}
    for column, (kind, where, attr) in COLUMNS.items():
        values = list(map(attrgetter(attr), events if where == "event" else args))
        if kind == "raw":
            values = [bytes(v).decode() if len(v) else None for v in values]
        if kind == "num":  # a number written with decimals: its double and its exact ns
            values = [(float(v), int((v * 1000).to_integral_value())) if type(v) is Decimal else v for v in values]
        out[column] = values
    return out


def _objects(values: np.ndarray, missing: np.ndarray) -> np.ndarray:
    out = values.astype(object)
    out[missing] = None
    return out


def scanned_columns(result: dict[str, Any]) -> dict[str, list[Any]]:
    """The scanner's buffers read back the way the loader reads them (np.frombuffer)."""
    n = result["n"]
    out: dict[str, list[Any]] = {}
    for column, (kind, _, _) in COLUMNS.items():
        value = result[column]
        if value is None:
            out[column] = [""] * n if column == "ph" else [None] * n
            continue
        if kind in ("str", "raw"):
            codes = np.frombuffer(value[0], np.int32)
            assert len(codes) == n and len(set(value[1])) == len(value[1]), "uniques are unique"
            table = np.array([*value[1], "" if column == "ph" else None], dtype=object)
            out[column] = table[codes].tolist()  # code -1 picks the last entry
        elif kind == "int":
            ints, present = np.frombuffer(value[0], np.int64), np.frombuffer(value[1], np.uint8)
            assert set(np.unique(present).tolist()) <= {0, 1} and not ints[present == 0].any()
            out[column] = _objects(ints, present == 0).tolist()
        elif kind == "float":
            floats = np.frombuffer(value, np.float64)
            out[column] = _objects(floats, np.isnan(floats)).tolist()
        elif kind == "intstr":
            ints, flag = np.frombuffer(value[0], np.int64), np.frombuffer(value[1], np.uint8)
            codes = np.frombuffer(value[2], np.int32)
            assert ((codes >= 0) == (flag == 2)).all()
            obj = _objects(ints, flag == 0)
            table = np.array([*value[3], None], dtype=object)
            obj[flag == 2] = table[codes[flag == 2]]
            out[column] = obj.tolist()
        else:  # num: kind 1 an int (exact in ints), 2 a float, 3 a float with its exact ns in ints
            ints, floats = np.frombuffer(value[0], np.int64), np.frombuffer(value[1], np.float64)
            flag = np.frombuffer(value[2], np.uint8)
            assert (floats[flag == 1] == ints[flag == 1].astype(np.float64)).all()
            assert not ints[(flag == 0) | (flag == 2)].any() and np.isnan(floats[flag == 0]).all()
            obj = _objects(ints, flag == 0)
            for k in np.flatnonzero(flag >= 2).tolist():
                obj[k] = (float(floats[k]), int(ints[k]) if flag[k] == 3 else None)
            out[column] = obj.tolist()
    return out


def assert_same(result: dict[str, Any], events: list[Event]) -> None:
    assert result["n"] == len(events)
    got, want = scanned_columns(result), expected_columns(events)
    for column, (kind, _, _) in COLUMNS.items():
        assert got[column] == want[column], column
        if kind in ("intstr", "num"):  # 1 == 1.0 in Python: the kind must match too
            assert list(map(type, got[column])) == list(map(type, want[column])), column


def scanned_args(result: dict[str, Any], data: bytes) -> list[bytes | None]:
    """Each event's verbatim args, cut from ``data`` where the scanner says they are."""
    if result["args_at"] is None:
        return [None] * result["n"]
    ints, present = np.frombuffer(result["args_at"][0], np.int64), np.frombuffer(result["args_at"][1], np.uint8)
    return [data[at : _scan.value_end(data, at)[0]] if ok else None for at, ok in zip(ints.tolist(), present.tolist(), strict=True)]


def expected_args(events: list[RawArgsEvent]) -> list[bytes | None]:
    """msgspec's verbatim args of each event: None when absent or null (no args to keep)."""
    return [bytes(e.args) if len(e.args) and bytes(e.args) != b"null" else None for e in events]


def check_events(body: bytes) -> dict[str, Any] | None:
    """Scan ``body`` (the inside of an event array); if accepted, it must agree with msgspec."""
    result = _scan.scan_events(body, 0, len(body))
    try:
        events = EVENTS.decode(b"[" + body + b"]")
    except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError, RecursionError):
        assert result is None, "accepted what msgspec refuses"
        return None
    if result is not None:
        assert_same(result, events)
        assert scanned_args(result, body) == expected_args(RAW_ARGS_EVENTS.decode(b"[" + body + b"]"))
    return result


# -- the real traces ------------------------------------------------------------------------
TRACES = Path(__file__).resolve().parents[2].parent / "shared" / "traces"


def _traces() -> list[Path]:
    return sorted(p for p in TRACES.rglob("*") if p.name.endswith((".json", ".json.gz")))


def _read(path: Path) -> bytes:
    raw = path.read_bytes()
    return gzip.decompress(raw) if path.name.endswith(".gz") else raw


@pytest.mark.parametrize("path", _traces(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_real_trace_columns_equal_msgspec(path: Path, traces_dir: Path) -> None:
    data = _read(path)
    doc = _scan.scan_document(data)
    assert doc is not None, "every real trace is in the subset we scan"
    lo, hi, keys = doc
    top = msgspec.json.decode(data, type=dict[str, msgspec.Raw])
    assert set(keys) == set(top) - {"traceEvents"}
    for key, (start, end) in keys.items():
        assert data[start:end] == bytes(top[key]), key
    assert (lo, hi) != (-1, -1)
    assert bytes(top["traceEvents"]) == data[lo - 1 : hi + 1]  # '[' ... ']'

    result = _scan.scan_events(data, lo, hi)
    assert result is not None, "every real trace is in the subset we scan"
    document = DOCUMENT.decode(data)
    assert document.traceEvents is not None
    assert_same(result, document.traceEvents)
    assert scanned_args(result, data) == expected_args(RAW_ARGS_EVENTS.decode(data[lo - 1 : hi + 1]))

    one_pass = _scan.scan_trace(data)  # the same document and columns, in one pass
    assert one_pass is not None
    assert one_pass[0] == (lo, hi, keys)
    assert_same(one_pass[1], document.traceEvents)


def test_diff_control_trace_values_a_user_checks(traces_dir: Path) -> None:
    """Spot values of the 109k-event NCCL trace, read off the JSON text by eye."""
    data = _read(traces_dir / "cuda" / "diff_control_rank3_of_8.json.gz")
    lo, hi, keys = _scan.scan_document(data)
    assert sorted(keys) == ["deviceProperties", "distributedInfo", "schemaVersion"]
    result = _scan.scan_events(data, lo, hi)
    assert result is not None and result["n"] == 109123
    cols = scanned_columns(result)
    first = {c: cols[c][0] for c in ("ph", "cat", "name", "pid", "tid", "ts", "dur", "external_id")}
    assert first == {
        "ph": "X",
        "cat": "cpu_op",
        "name": "aten::zeros",
        "pid": 3113936,
        "tid": 3113936,
        "ts": 1661203462598738,
        "dur": 19,
        "external_id": 1,
    }
    assert cols["input_dims"][0] == "[[], [], [], [], []]"
    assert cols["input_types"][0] == '["", "", "", "", "Scalar"]'


def _pieces(body: bytes, parts: int) -> list[tuple[int, int]]:
    """Cut the inside of an event array between top-level events, as the loader's threads do:
    each piece starts just after a separating comma and ends just after an event's ``}``."""
    ends, pos = [], 0
    for raw in msgspec.json.decode(b"[" + body + b"]", type=list[msgspec.Raw]):
        pos = body.index(bytes(raw), pos) + len(raw)
        ends.append(pos)
    step = len(ends) // parts
    cuts = [ends[k * step - 1] for k in range(1, parts)]
    starts = [0] + [body.index(b",", c) + 1 for c in cuts]
    return list(zip(starts, [*cuts, len(body)], strict=True))


@pytest.mark.parametrize("name", ["cuda/rank0_ns_resolution.pt.trace.json.gz", "multirank/rank-0.json.gz"])
def test_pieces_concatenated_equal_the_whole(name: str, traces_dir: Path) -> None:
    data = _read(traces_dir / name)
    lo, hi, _ = _scan.scan_document(data)
    whole = scanned_columns(_scan.scan_events(data, lo, hi))
    body = data[lo:hi]
    pieces = _pieces(body, 7)
    assert len(pieces) == 7
    joined: dict[str, list[Any]] = {c: [] for c in COLUMNS}
    joined_args: list[bytes | None] = []
    for a, b in pieces:
        part = _scan.scan_events(data, lo + a, lo + b)
        assert part is not None
        for column, values in scanned_columns(part).items():
            joined[column] += values
        joined_args += scanned_args(part, data)  # offsets count from the buffer, not the piece
    assert joined == whole
    assert joined_args == scanned_args(_scan.scan_events(data, lo, hi), data)
    assert sum(a is not None for a in joined_args) > 1000


def test_buffer_layout_marks_missing_values() -> None:
    """The exact buffers the loader reads: codes -1, kind 0 and NaN where a field is absent,
    and None for a column no event has."""
    body = b'{"ph": "X", "ts": 1.5, "dur": 3, "args": {"stream": "s7", "External id": 7}}, {"cat": "c"}'
    got = _scan.scan_events(body, 0, len(body))
    assert got is not None and got["n"] == 2

    def arr(buf: bytes, dtype: type) -> list[Any]:
        return np.frombuffer(buf, dtype).tolist()

    assert (arr(got["ph"][0], np.int32), got["ph"][1]) == ([0, -1], ["X"])
    assert (arr(got["cat"][0], np.int32), got["cat"][1]) == ([-1, 0], ["c"])
    ints, floats, kind = got["ts"]  # 1.5 us: the double, and its exact ns (kind 3)
    assert arr(ints, np.int64) == [1500, 0] and arr(kind, np.uint8) == [3, 0]
    assert arr(floats, np.float64)[0] == 1.5 and math.isnan(arr(floats, np.float64)[1])
    ints, floats, kind = got["dur"]
    assert arr(ints, np.int64) == [3, 0] and arr(kind, np.uint8) == [1, 0]
    values, kind, codes, uniques = got["stream"]
    assert arr(values, np.int64) == [0, 0] and arr(kind, np.uint8) == [2, 0]
    assert arr(codes, np.int32) == [0, -1] and uniques == ["s7"]
    assert [arr(b, t) for b, t in zip(got["external_id"], (np.int64, np.uint8), strict=True)] == [
        [7, 0],
        [1, 0],
    ]
    assert got["name"] is None and got["blocks_per_sm"] is None and got["input_dims"] is None


def test_nonfinite_numbers_are_missing_and_counted() -> None:
    """NaN and Infinity (Python's json), inf and nan (C++ streams: Kineto wrote a memcpy's
    ``"memory bandwidth (GB/s)": inf``) are read where a number goes: a modelled field is
    missing, as null is, an unmodelled one skipped, and the result counts every one, for the
    reader's warning. A file holding one was refused (inf) or read ~4x slower (NaN)."""
    body = (
        b'{"ph": "X", "ts": NaN, "dur": -Infinity, "pid": nan, "tid": 1,'
        b' "args": {"memory bandwidth (GB/s)": inf, "est. achieved occupancy %": -nan, "x": [1, -inf]}},'
        b' {"ph": "X", "ts": 2, "dur": 3, "pid": 1, "tid": 1, "args": {"External id": Infinity}}'
    )
    got = _scan.scan_events(body, 0, len(body))
    assert got is not None and got["n"] == 2 and got["nonfinite"] == 7

    def arr(buf: bytes, dtype: type) -> list[Any]:
        return np.frombuffer(buf, dtype).tolist()

    assert arr(got["ts"][2], np.uint8) == [0, 1] and arr(got["dur"][2], np.uint8) == [0, 1]
    assert arr(got["pid"][1], np.uint8) == [0, 1]
    assert got["occupancy_pct"] is None and got["external_id"] is None  # no event has one
    clean = b'{"ph": "X", "ts": 2, "dur": 3}'
    assert "nonfinite" not in _scan.scan_events(clean, 0, len(clean))


def test_nonfinite_numbers_outside_the_events_decline_the_document() -> None:
    """Top-level values are decoded by msgspec after the scan: one with NaN sends the whole
    document to the decoder that repairs it."""
    assert _scan.scan_trace(b'{"traceEvents": [], "deviceProperties": [{"x": NaN}]}') is None
    got = _scan.scan_trace(b'{"traceEvents": [{"ph": "X", "ts": 1, "dur": nan}], "a": 1}')
    assert got is not None and got[1]["nonfinite"] == 1


def test_threads_scan_the_same_columns(traces_dir: Path) -> None:
    """The scan runs without the GIL (the loader reads ranks in threads): no shared state."""
    data = _read(traces_dir / "cuda" / "nccl_rank0_of_2.json.gz")
    lo, hi, _ = _scan.scan_document(data)
    want = _scan.scan_events(data, lo, hi)
    assert want is not None and want["n"] > 10_000
    with ThreadPoolExecutor(3) as pool:
        results = list(pool.map(lambda _: _scan.scan_events(data, lo, hi), range(3)))
    assert all(r == want for r in results)


def test_bounds_outside_the_data_raise_value_error() -> None:
    data = b'[{"ph": "X"}]'
    for lo, hi in [(-1, 5), (3, 2), (0, len(data) + 1), (len(data) + 1, len(data) + 1)]:
        with pytest.raises(ValueError, match="is not a range within the 13 bytes"):
            _scan.scan_events(data, lo, hi)
    assert _scan.scan_events(data, 1, 1) == {"n": 0, **dict.fromkeys(COLUMNS), "args_at": None}


def test_args_start_where_the_text_says() -> None:
    """``args_at`` counts from the buffer's start, also for a piece; null and absent args have
    none; ``value_end`` refuses an offset with no JSON value."""
    body = b'{"ph": "X", "args": {"a": [1, {"b": "}"}]}}, {"args": null}, {"ph": "i", "args": {}}'
    got = _scan.scan_events(b"xx" + body, 2, 2 + len(body))
    assert scanned_args(got, b"xx" + body) == [b'{"a": [1, {"b": "}"}]}', None, b"{}"]
    assert np.frombuffer(got["args_at"][0], np.int64)[0] == 2 + body.index(b'{"a"')
    for at in (-1, len(body), body.index(b"]")):
        with pytest.raises(ValueError, match="no JSON value at"):
            _scan.value_end(body, at)


# -- documents ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "want"),
    [
        (b' {"a": 1, "traceEvents": [ {} ], "b": {"c": [1, "x"]}}\n', (26, 30, {"a": (7, 8), "b": (38, 53)})),
        (b"[]", (1, 1, {})),
        (b'{"x": null}', (-1, -1, {"x": (6, 10)})),
        (b"{}", (-1, -1, {})),
    ],
)
def test_document_spans(text: bytes, want: tuple[int, int, dict[str, tuple[int, int]]]) -> None:
    assert _scan.scan_document(text) == want


@pytest.mark.parametrize(
    "text",
    [
        b"5",
        b'"traceEvents"',
        b'{"traceEvents": {}}',
        b'{"traceEvents": null}',
        b'{"a": 1, "a": 2}',
        b'{"traceEvents": [], "traceEvents": []}',
        b'{"tr\\u0061ceEvents": []}',
        b'{"traceEvents": []} x',
        b'{"traceEvents": [}',
        b'{"a": 01}',
        b'{"a": "\x01"}',
        b'{"\xff": 1}',
        b"",
        b"[" * 300 + b"]" * 300,
    ],
)
def test_document_declines(text: bytes) -> None:
    assert _scan.scan_document(text) is None


# -- hand-picked events: the edges of each kind ---------------------------------------------
@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"  \n ",
        b'{"ph": "X", "ts": 1.5, "dur": 2, "pid": "stream 7", "tid": -3}',
        b'{"ts": 9223372036854775807, "dur": -9223372036854775808}',
        b'{"ts": 1e-4, "dur": -0.0}, {"ts": 0.1, "dur": 123456789012345678e-30}',
        b'{"args": {"blocks per SM": 1e-400, "warps per SM": 123456789012345678e-30}}',
        b'{"name": "a\\u00e9\\ud83d\\ude00\\n\\"\\/\\\\", "cat": ""}, {"name": "a\xc3\xa9\xf0\x9f\x98\x80\\n\\"/\\\\"}',
        b'{"args": null}, {"args": {}}, {"args": {"Input Dims": null, "grid": [1, 2,  3]}}',
        b'{"args": {"blocks per SM": 3, "warps per SM": 2.5e1, "stream": "0x0", "name": "x"}}',
        b'{"zz": [[{"a": [true, false, null, -1.5e+3, "\\t"]}]], "args": {"other": {"x": {}}}}',
    ],
)
def test_accepted_edges_agree(body: bytes) -> None:
    assert check_events(body) is not None


@pytest.mark.parametrize(
    "body",
    [
        b"{},",  # trailing comma
        b"[]",  # not an object
        b'{"ph": null}',
        b'{"ph": "X", "ph": "X"}',
        b'{"args": {"correlation": 1, "correlation": 1}}',
        b'{"\\u0070h": "X"}',
        b'{"ts": 9223372036854775808}',
        b'{"ts": -9223372036854775809}',
        b'{"ts": 1e400}',
        b'{"ts": true}',
        b'{"pid": 1.0}',
        b'{"args": {"External id": "12"}}',
        b'{"args": {"External id": 1.0}}',
        b'{"args": {"blocks per SM": 92233720368547758080}}',
        b'{"args": []}',
        b'{"name": "\xff"}',
        b'{"name": "\\ud800"}',
        b'{"zz": "\\udc00"}',
        b'{"zz": "\x1f"}',
        b'{"zz": ' + b"[" * 300 + b"]" * 300 + b"}",
        b'{"ts": 01}',
        b'{"ts": 1.}',
        b'{"name": NaN}',  # text: the decoder's repair makes it null, which msgspec refuses
        b'{"ph": inf}',
        b'{"args": {"Input Dims": [[NaN]]}}',  # kept verbatim: its text must be the repaired one
        b'{"ts": Inf}',
        b'{"ts": infinity}',
        b'{"ts": +inf}',
    ],
)
def test_declines(body: bytes) -> None:
    assert _scan.scan_events(body, 0, len(body)) is None
    check_events(body)


# -- generated event lists ------------------------------------------------------------------
_INT64 = st.integers(-(2**63), 2**63 - 1)
_INT_EDGES = st.sampled_from([2**63 - 1, -(2**63), 2**63, -(2**63) - 1, 2**64, 0, -0.0])
_NUMBER_TEXT = st.from_regex(r"-?(0|[1-9][0-9]{0,17})(\.[0-9]{1,20})?([eE][+-]?[0-9]{1,2})?", fullmatch=True)
_ODD_NUMBER_TEXT = st.from_regex(
    r"-?(0|[1-9][0-9]{0,25})(\.[0-9]{1,25})?([eE][+-]?[0-9]{1,4})?", fullmatch=True
)


class Text(str):
    """Already JSON text (a number spelled a particular way)."""


_SCALAR = st.one_of(
    st.none(),
    st.booleans(),
    _INT64,
    _INT_EDGES,
    st.floats(allow_nan=False, allow_infinity=False),
    _ODD_NUMBER_TEXT.map(Text),
    st.text(max_size=6),
)
_ANY = st.recursive(
    _SCALAR,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6,
)
_FLOATS = st.one_of(st.floats(allow_nan=False, allow_infinity=False), _NUMBER_TEXT.map(Text))
_RIGHT: dict[str, st.SearchStrategy[Any]] = {
    "str": st.one_of(st.none(), st.text(max_size=8), st.sampled_from(["X", "cpu_op", "kernel"])),
    "raw": _ANY,
    "int": st.one_of(st.none(), _INT64),
    "float": st.one_of(st.none(), _INT64, _FLOATS),
    "intstr": st.one_of(st.none(), _INT64, st.text(max_size=8)),
    "num": st.one_of(st.none(), _INT64, _FLOATS),
}
_EVENT_KEYS = {"ph": "str", "cat": "str", "name": "str", "pid": "intstr", "tid": "intstr", "ts": "num"}
_EVENT_KEYS |= {"dur": "num", "id": "intstr", "bp": "str"}
_ARGS_KEYS = {
    "External id": "int",
    "external id": "int",
    "correlation": "int",
    "stream": "intstr",
    "Input Dims": "raw",
    "grid": "raw",
    "blocks per SM": "float",
    "est. achieved occupancy %": "float",
    "Bytes": "int",
    "name": "str",
    "labels": "str",
}


class Obj(list[tuple[str, Any]]):
    """An object as its members in order, so that a key can repeat."""


def _members(keys: dict[str, str], wrong: bool) -> st.SearchStrategy[Obj]:
    def value_for(key: str) -> st.SearchStrategy[Any]:
        kind = keys.get(key)
        if kind is None:
            return _ANY
        return _RIGHT[kind] if not wrong else st.one_of(_RIGHT[kind], _ANY)

    # an escaped key (a non-ASCII one written with ensure_ascii) is declined: mostly plain keys
    other = st.text(max_size=5) if wrong else st.text(alphabet="abcXYZ _-.%#0", max_size=5)
    key = st.one_of(st.sampled_from(sorted(keys)), other)
    pairs = st.lists(key.flatmap(lambda k: st.tuples(st.just(k), value_for(k))), max_size=6)
    # a repeated modelled key is declined: keep the first of each mostly, all of them sometimes
    return pairs.map(lambda p: Obj(dict(p).items()) if not wrong else Obj(p))


@st.composite
def event_lists(draw: st.DrawFn) -> bytes:
    wrong = draw(st.sampled_from([False, False, True]))  # a third of the lists carry wrong types
    events = []
    for _ in range(draw(st.integers(0, 4))):
        members = draw(_members(_EVENT_KEYS, wrong))
        if draw(st.booleans()):
            other = _ANY if wrong else st.none()
            args = draw(st.one_of(_members(_ARGS_KEYS, wrong), st.none(), other))
            members.append(("args", args))
        events.append(members)
    ascii_only = draw(st.booleans())
    space = draw(st.sampled_from(["", " ", "\n  ", "\t"]))
    return (("," + space).join(_emit(e, ascii_only) for e in events) + space).encode()


def _emit(value: Any, ascii_only: bool) -> str:
    """JSON text, with the spellings a writer may choose (escapes, number forms)."""
    if isinstance(value, Text):
        return str(value)
    if isinstance(value, dict):
        value = Obj(value.items())
    if isinstance(value, Obj):
        return "{" + ", ".join(f"{_emit(k, ascii_only)}: {_emit(v, ascii_only)}" for k, v in value) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_emit(v, ascii_only) for v in value) + "]"
    if isinstance(value, str):
        text = json.dumps(value, ensure_ascii=ascii_only)
        return text.replace("/", "\\/") if ascii_only else text
    return json.dumps(value)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(event_lists())
@example(b'{"ph": "X", "ts": 2.5, "args": {"blocks per SM": 0.1, "grid": [1, 1, 1]}}')
def test_generated_events_agree_with_msgspec(body: bytes) -> None:
    check_events(body)


def test_generated_events_are_mostly_accepted() -> None:
    """The generator must exercise acceptance, not only declines. Derandomized: a random draw
    of 60 accepts 34-48 as a rule, and once took 19 (a threshold on chance is a flaky test)."""
    accepted = 0

    @settings(max_examples=60, deadline=None, database=None, derandomize=True)
    @given(event_lists())
    def run(body: bytes) -> None:
        nonlocal accepted
        accepted += check_events(body) is not None

    run()
    assert accepted > 20


# -- byte-level mutations of a real trace ---------------------------------------------------
def _small_trace() -> bytes:
    return (TRACES / "cuda" / "backward_thread_small.json").read_bytes()


_MUTATIONS: dict[str, Callable[[bytes, int, int], bytes]] = {
    "truncate": lambda d, i, _: d[:i],
    "flip": lambda d, i, b: d[:i] + bytes([b]) + d[i + 1 :],
    "comma": lambda d, i, _: d[:i] + b"," + d[i:],
    "drop": lambda d, i, _: d[:i] + d[i + 1 :],
}


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(sorted(_MUTATIONS)), st.integers(0, 10**6), st.integers(0, 255))
@example("flip", 581060, 128)  # a byte that is not UTF-8 in distributedInfo, after the events
def test_mutated_trace_never_crashes_and_agrees(how: str, where: int, byte: int) -> None:
    data = _small_trace()
    text = _MUTATIONS[how](data, where % len(data), byte)
    doc = _scan.scan_document(text)
    try:
        document: Document | None = DOCUMENT.decode(text)
    except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError, RecursionError):
        document = None
    if doc is None:
        return
    lo, hi, keys = doc
    if lo < 0:
        assert document is None or document.traceEvents is None
        return
    result = _scan.scan_events(text, lo, hi)
    if document is None:
        # the damage may lie outside the event list (a metadata key): what counts is whether
        # msgspec refuses the events themselves, the only bytes scan_events reads
        try:
            EVENTS.decode(b"[" + text[lo:hi] + b"]")
            events_refused = False
        except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError, RecursionError):
            events_refused = True
        assert result is None or not events_refused, "accepted what msgspec refuses"
    elif result is not None:
        assert document.traceEvents is not None
        assert_same(result, document.traceEvents)
    # one pass accepts exactly what the two passes accept, with the same columns
    one_pass = _scan.scan_trace(text)
    assert (one_pass is None) == (result is None)
    if one_pass is not None and result is not None:
        assert one_pass[0] == doc
        assert scanned_columns(one_pass[1]) == scanned_columns(result)


def test_many_decimals_round_exactly() -> None:
    """Our own exact rounding (up to 19 digits: modern Kineto's "1712195495519689.047") against
    Python's correctly rounded float(), on random decimals, exact ties and near-ties."""
    rng = random.Random(7)
    texts = []
    for _ in range(15_000):
        digits = str(rng.randrange(1, 10 ** rng.randint(1, 19)))
        cut = rng.randint(1, len(digits))
        text = digits[:cut] + "." + (digits[cut:] or "0")
        texts.append(
            ("-" if rng.random() < 0.3 else "") + text + rng.choice(["", f"e{rng.randint(-25, 22)}"])
        )
    for _ in range(5_000):  # halfway between two doubles (ties to even) and just off it
        texts.append(f"{2 ** rng.randint(53, 63) + rng.choice([-1, 1, 2, 3])}.5")
        m = str(rng.randrange(2**53, 10**19))
        texts.append(m[:-3] + "." + m[-3:])
    body = ",".join(f'{{"args": {{"blocks per SM": {t}}}}}' for t in texts).encode()
    result = _scan.scan_events(body, 0, len(body))
    assert result is not None
    assert np.frombuffer(result["blocks_per_sm"], np.float64).tolist() == [float(t) for t in texts]


def test_times_with_decimals_give_their_exact_nanoseconds() -> None:
    """Kineto's ns-resolution times (1712195495521133.783 us) are beyond a double's precision:
    the scanner reads their nanoseconds from the digits, rounding half to even past the third
    decimal; a time it cannot read exactly (too many digits) is left to msgspec's Decimal."""
    texts = ["1712195495521133.783", "0.0005", "0.0015", "-2.5e-3", "1.2345e3", "131.797", "7e2"]
    body = ", ".join(f'{{"ts": {t}}}' for t in texts).encode()
    result = check_events(body)
    assert result is not None
    ints, _, kind = result["ts"]
    assert np.frombuffer(kind, np.uint8).tolist() == [3] * len(texts)
    assert np.frombuffer(ints, np.int64).tolist() == [1712195495521133783, 0, 2, -2, 1234500, 131797, 700000]
    long = b'{"ts": 0.12345678901234567890123}'
    assert _scan.scan_events(long, 0, len(long)) is None


def test_float_text_rounds_like_msgspec() -> None:
    """Hard-to-round decimals (ties, 17+ digits, subnormals) take the exact slow path."""
    texts = [
        "0.1",
        "2.2250738585072011e-308",
        "9007199254740993.0",
        "1.7976931348623157e308",
        "4.9406564584124654e-324",
        "123456789012345678901234567890.5",
        "0.30000000000000004",
        "1661203462598738.123",
    ]
    body = ", ".join(f'{{"args": {{"blocks per SM": {t}}}}}' for t in texts).encode()
    result = check_events(body)
    assert result is not None
    floats = np.frombuffer(result["blocks_per_sm"], np.float64)
    assert floats.tolist() == [float(t) for t in texts]
    assert not any(math.isnan(v) for v in floats)
