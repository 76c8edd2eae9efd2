"""No input makes the reader raise anything but TraceError, hang, or lose events silently.

Two sources of bad input: hypothesis-generated JSON shaped like traces, and mutations of a
real trace (truncation, byte flips, fields deleted or replaced by wrong types).
"""

from __future__ import annotations

import contextlib
import faulthandler
import gzip
import json
import os
import random
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from torchscope.errors import TraceError
from torchscope.trace import Trace, read_chrome, read_chrome_document

SMALL = "cuda/alexnet_benchmark.json.gz"

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)
event = st.fixed_dictionaries(
    {},
    optional={
        "ph": st.sampled_from(["X", "i", "s", "f", "t", "M", "B", "E", "", 1]),
        "cat": st.one_of(
            st.sampled_from(["cpu_op", "kernel", "cuda_runtime", "Operator", "gpu_memcpy", "ac2g"]), scalars
        ),
        "name": st.one_of(
            st.sampled_from(["[memory]", "ProfilerStep#1", "thread_name", "process_name"]), scalars
        ),
        "pid": st.one_of(st.integers(-5, 5), st.sampled_from(["Spans", "stream 7", "12"]), scalars),
        "tid": st.one_of(st.integers(-5, 5), st.sampled_from(["Spans", "stream 7", "12"]), scalars),
        "ts": st.one_of(st.integers(0, 10**6), st.floats(0, 1e6), scalars),
        "dur": st.one_of(st.integers(0, 10**4), st.floats(0, 1e4), scalars),
        "id": st.one_of(st.integers(0, 5), scalars),
        "bp": st.sampled_from(["e", "s"]),
        "args": st.one_of(
            st.fixed_dictionaries(
                {},
                optional={
                    "correlation": st.one_of(st.integers(0, 5), scalars),
                    "External id": st.one_of(st.integers(0, 5), scalars),
                    "stream": st.one_of(st.integers(0, 8), scalars),
                    "device": st.one_of(st.integers(0, 2), scalars),
                    "grid": values,
                    "Input Dims": values,
                    "Bytes": st.one_of(st.integers(-100, 100), scalars),
                    "name": scalars,
                    "sort_index": scalars,
                },
            ),
            values,
        ),
    },
)
documents = st.one_of(
    st.lists(st.one_of(event, values), max_size=12),
    st.fixed_dictionaries(
        {"traceEvents": st.lists(st.one_of(event, values), max_size=12)},
        optional={
            "distributedInfo": values,
            "deviceProperties": values,
            "baseTimeNanoseconds": values,
            "schemaVersion": values,
        },
    ),
    values,
)


def _check(result: Trace) -> None:
    ev = result.events
    assert ev["id"].to_list() == list(range(ev.height))
    assert (ev["self_ns"] >= 0).all() and (ev["dur_ns"] >= 0).all()


@settings(
    max_examples=int(__import__("os").environ.get("FUZZ_EXAMPLES", "150")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(documents)
def test_generated_documents_raise_only_trace_error(doc: Any) -> None:
    try:
        _check(read_chrome_document(doc, "fuzz"))
    except TraceError as exc:
        assert "\n" not in str(exc)


def _mutations(text: str, rng: random.Random) -> list[bytes]:
    doc = json.loads(text)
    out: list[bytes] = []
    data = text.encode()
    for _ in range(6):
        cut = rng.randrange(len(data))
        out.append(data[:cut])
        flipped = bytearray(data)
        for _ in range(5):
            i = rng.randrange(len(flipped))
            flipped[i] = rng.randrange(256)
        out.append(bytes(flipped))
    bad_values: list[Any] = [None, "x", -1, 2**80, 1.5e300, [], {}, True, "123"]
    for _ in range(12):
        mutated = json.loads(text)
        for e in rng.sample(mutated["traceEvents"], 20):
            if not isinstance(e, dict):
                continue
            key = rng.choice(["ts", "dur", "pid", "tid", "ph", "cat", "name", "args", "id"])
            if rng.random() < 0.5:
                e.pop(key, None)
            else:
                e[key] = rng.choice(bad_values)
            if isinstance(e.get("args"), dict) and e["args"]:
                k = rng.choice(list(e["args"]))
                e["args"][k] = rng.choice(bad_values)
        if rng.random() < 0.3:
            mutated["traceEvents"] += rng.sample(mutated["traceEvents"], 10)  # duplicates
        out.append(json.dumps(mutated).encode())
    del doc
    return out


def test_mutated_real_trace_raises_only_trace_error(traces_dir: Path, tmp_path: Path) -> None:
    import gzip

    text = gzip.decompress((traces_dir / SMALL).read_bytes()).decode()
    rng = random.Random(1234)
    outcomes = {"trace": 0, "error": 0}
    for i, data in enumerate(_mutations(text, rng)):
        path = tmp_path / f"m{i}.json"
        path.write_bytes(data)
        try:
            trace = read_chrome(path)
        except TraceError as exc:
            assert str(path) in str(exc) and "\n" not in str(exc)
            outcomes["error"] += 1
            continue
        _check(trace)
        outcomes["trace"] += 1
    assert outcomes["trace"] > 0 and outcomes["error"] > 0


def test_duplicate_events_are_kept_not_merged(traces_dir: Path) -> None:
    import gzip

    doc = json.loads(gzip.decompress((traces_dir / SMALL).read_bytes()))
    kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    doc["traceEvents"] += kernels
    trace = read_chrome_document(doc, "dup")
    assert trace.kernels.height == 2 * len(kernels)
    assert trace.kernels.filter(pl.col("launcher") >= 0).height == 2 * len(kernels)


# -- hostile trace text: well-formed events among damaged ones ----------------------------------
class Token:
    """Text written into the document as it is: a literal JSON does not allow (NaN, 1E400), a
    string holding bytes that are not UTF-8, raw control characters or lone surrogate escapes,
    or nesting thousands of levels deep."""

    def __init__(self, text: bytes) -> None:
        self.text = text

    def __repr__(self) -> str:
        return f"Token({self.text[:40]!r})"


def encode(value: Any) -> bytes:
    if isinstance(value, Token):
        return value.text
    if isinstance(value, dict):
        return b"{" + b", ".join(encode(k) + b": " + encode(v) for k, v in value.items()) + b"}"
    if isinstance(value, list):
        return b"[" + b", ".join(encode(v) for v in value) + b"]"
    return json.dumps(value).encode()


BAD_LITERALS = [b"NaN", b"Infinity", b"-Infinity", b"inf", b"-nan", b"1E400", b"-1e+999", b"1e-400", b"1" * 400]
STRING_BYTES = [
    b"\xff",
    b"\xc3",  # a lead byte without its continuation
    b"\xed\xa0\x80",  # a surrogate half encoded as bytes
    b"\\ud800",
    b"\\udc00",
    b"\\ud83d\\ude00",  # a valid pair
    b"\x00",
    b"\x1b[31m",
    b"\x1b]8;;x\x07",
    b"\t",
    b"\n",
    b"\x7f",
    "é日".encode(),
    b"\\u2028",
    b"\\\\ud800",  # an escaped backslash, then text
    b"ok",
]
bad_strings = st.lists(st.sampled_from(STRING_BYTES), min_size=1, max_size=4).map(
    lambda parts: Token(b'"' + b"".join(parts) + b'"')
)
bad_numbers = st.sampled_from(BAD_LITERALS).map(Token)
deep = st.integers(201, 1200).map(lambda n: Token(b"[" * n + b"]" * n))
bad_values = st.one_of(scalars, bad_strings, bad_numbers, deep, st.just([]), st.just({"a": [1]}))
FIELDS = ["ph", "cat", "name", "pid", "tid", "ts", "dur", "id", "args"]


@st.composite
def hostile_documents(draw: Any) -> tuple[bytes, list[tuple[str, int, int, int]]]:
    """A trace as bytes, and each well-formed event in it: (name, ts, its first byte, its end)."""
    n = draw(st.integers(1, 14))
    items: list[Any] = []
    for i in range(n):
        event: dict[str, Any] = {
            "ph": "X",
            "cat": "cpu_op",
            "name": f"keep-{i}",
            "pid": 1,
            "tid": draw(st.integers(1, 2)),
            "ts": 10 * i,
            "dur": draw(st.integers(0, 30)),
            "args": {"External id": i, "Input Dims": [[2, 3]]},
        }
        if draw(st.booleans()):  # damage this one: it may be skipped, but nothing else may be
            event["name"] = f"damaged-{i}"
            for field in draw(st.lists(st.sampled_from(FIELDS), min_size=1, max_size=4, unique=True)):
                if field == "args" and draw(st.booleans()):
                    event["args"] = {
                        "External id": i,
                        draw(st.sampled_from(["x", "Input Dims", "grid"])): draw(bad_values),
                    }
                else:
                    event[field] = draw(bad_values)
        items.append(event)
    for _ in range(draw(st.integers(0, 3))):  # entries that are not events at all
        items.insert(draw(st.integers(0, len(items))), draw(bad_values))
    bare = draw(st.booleans())
    head = (
        b"[\n"
        if bare
        else b'{"schemaVersion": 1, "deviceProperties": ' + encode(draw(bad_values)) + b', "traceEvents": [\n'
    )
    body = bytearray(head)
    kept: list[tuple[str, int, int, int]] = []
    for k, item in enumerate(items):
        start = len(body)
        body += encode(item)
        if isinstance(item, dict) and str(item.get("name", "")).startswith("keep-"):
            kept.append((item["name"], item["ts"], start, len(body)))
        body += b",\n" if k < len(items) - 1 else b"\n"
    body += b"]" if bare else b"]}"
    return bytes(body), kept


@contextlib.contextmanager
def no_hang(seconds: int) -> Iterator[None]:
    """Fail the run (a traceback of every thread, then exit) if the block takes longer than
    ``seconds``: a watchdog thread in C, so it fires even while the reader is in C code. This
    bounds a hang; it is not a speed assertion (the bound is far above any case's time)."""
    faulthandler.dump_traceback_later(seconds, exit=True)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


def _read_file(data: bytes, suffix: str) -> Trace:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / f"fuzz{suffix}"
        path.write_bytes(data)
        with no_hang(120):
            return read_chrome(path)


def _kept(trace: Trace, kept: list[tuple[str, int, int, int]]) -> None:
    ops = trace.events.filter(pl.col("name").cast(pl.String).str.starts_with("keep-"))
    got = sorted(zip(ops["name"].to_list(), ops["start_ns"].to_list(), strict=True))
    assert got == sorted((name, ts * 1000) for name, ts, _, _ in kept)


# Hostile cases run the same examples every time (CI stays reproducible); FUZZ_RANDOM=1 explores
# new ones, FUZZ_EXAMPLES=N more of them.
HOSTILE = settings(
    max_examples=int(os.environ.get("FUZZ_EXAMPLES", "150")),
    deadline=None,
    derandomize=os.environ.get("FUZZ_RANDOM") != "1",
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@HOSTILE
@given(hostile_documents(), st.sampled_from(["plain", "gzip", "gzip+garbage"]), st.booleans())
def test_hostile_documents_keep_every_well_formed_event(
    document: tuple[bytes, list[tuple[str, int, int, int]]], packing: str, pieces: bool
) -> None:
    """Bad bytes, bad numbers, wrong types and absurd nesting in some events: every well-formed
    event is still read, and the only exception is TraceError (a document of damage only).
    ``pieces``: read as a large file is, the event list cut into pieces of a few events."""
    from torchscope.trace import reader

    data, kept = document
    if packing != "plain":
        data = gzip.compress(data, mtime=0) + (b"\x00garbage" if packing == "gzip+garbage" else b"")
    chunk = reader.CHUNK_BYTES
    reader.CHUNK_BYTES = 256 if pieces else chunk
    try:
        trace = _read_file(data, ".json.gz" if packing != "plain" else ".json")
    except TraceError as exc:
        assert "\n" not in str(exc)
        assert not kept, f"{len(kept)} well-formed events lost: {exc}"
        return
    finally:
        reader.CHUNK_BYTES = chunk
    _check(trace)
    _kept(trace, kept)


@HOSTILE
@given(hostile_documents(), st.data())
def test_truncated_and_flipped_hostile_documents(
    document: tuple[bytes, list[tuple[str, int, int, int]]], data: st.DataObject
) -> None:
    """Cut anywhere: the well-formed events that end before the cut are read. Bytes flipped
    anywhere: a Trace or a TraceError, never another exception, never a hang."""
    from torchscope.trace import reader

    text, kept = document
    cut = data.draw(st.integers(1, len(text) - 1), label="cut")
    chunk = reader.CHUNK_BYTES
    reader.CHUNK_BYTES = 256 if data.draw(st.booleans(), label="pieces") else chunk
    try:
        trace = _read_file(text[:cut], ".json")
    except TraceError as exc:
        assert "\n" not in str(exc)
        trace = None
    finally:
        reader.CHUNK_BYTES = chunk
    before = [k for k in kept if k[3] <= cut]
    if trace is not None:
        _check(trace)
        _kept(trace, before) if before else None
    flipped = bytearray(text)
    for _ in range(data.draw(st.integers(1, 6), label="flips")):
        flipped[data.draw(st.integers(0, len(flipped) - 1))] = data.draw(st.integers(0, 255))
    try:
        _check(_read_file(bytes(flipped), ".json"))
    except TraceError as exc:
        assert "\n" not in str(exc)
