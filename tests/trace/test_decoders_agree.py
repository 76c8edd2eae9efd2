"""Our two JSON decoders (the C scanner and msgspec) give the same Trace, or the same error.

The scanner handles an exactly-typed subset of the JSON and declines the rest to msgspec;
these tests read the same input both ways (``reader.SCANNER_ENABLED``) and compare the whole
Trace (all four tables and the metadata) and the warnings, on every real trace, on
hypothesis-generated documents and on mutations of a real trace.
"""

from __future__ import annotations

import gzip
import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from torchscope.errors import TraceError
from torchscope.trace import Trace, reader

from .conftest import ALL_TRACES, TRACES
from .test_fuzz import SMALL, _mutations, documents

needs_scanner = pytest.mark.skipif(reader._scan is None, reason="the C scanner was not built (no compiler)")


def _read(data: bytes, *, scanner: bool) -> Trace | str:
    saved = reader.SCANNER_ENABLED
    reader.SCANNER_ENABLED = scanner
    try:
        return reader.read_chrome_document(data, "input.json")
    except TraceError as exc:
        return str(exc)
    finally:
        reader.SCANNER_ENABLED = saved


def _assert_same(data: bytes) -> Trace | str:
    fast, slow = _read(data, scanner=True), _read(data, scanner=False)
    if isinstance(slow, str) or isinstance(fast, str):
        assert fast == slow
        return fast
    assert fast.equals(slow), "the scanner's Trace differs from msgspec's"
    assert fast.meta.warnings == slow.meta.warnings
    return fast


@pytest.fixture
def _scanned_documents_are_counted(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Count the pieces the scanner accepted, so a test can tell that it really ran."""
    accepted: list[int] = []
    pieces, whole = reader._scan.scan_events, reader._scan.scan_trace

    def counting_pieces(data: bytes, lo: int, hi: int, *, release_pages: bool = False) -> Any:
        got = pieces(data, lo, hi, release_pages=release_pages)
        if got is not None:
            accepted.append(int(got["n"]))
        return got

    def counting_whole(data: bytes, *, release_pages: bool = False) -> Any:
        got = whole(data, release_pages=release_pages)
        if got is not None:
            accepted.append(int(got[1]["n"]))
        return got

    monkeypatch.setattr(reader._scan, "scan_events", counting_pieces)
    monkeypatch.setattr(reader._scan, "scan_trace", counting_whole)
    yield accepted


@needs_scanner
@pytest.mark.parametrize("path", ALL_TRACES, ids=lambda p: str(p.relative_to(TRACES)))
def test_every_real_trace_reads_the_same_both_ways(
    path: Path, _scanned_documents_are_counted: list[int]
) -> None:
    raw = path.read_bytes()
    data = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
    trace = _assert_same(data)
    assert isinstance(trace, Trace) and trace.events.height > 0
    # the scanner took the whole file: every event came through it, none through msgspec
    assert sum(_scanned_documents_are_counted) == len(json.loads(data)["traceEvents"])


@needs_scanner
def test_pieces_of_a_large_file_read_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    """Files over 8 x CHUNK_BYTES are scanned in pieces cut at event boundaries."""
    data = gzip.decompress((TRACES / SMALL).read_bytes())
    whole = _read(data, scanner=True)
    monkeypatch.setattr(reader, "CHUNK_BYTES", 4096)
    assert len(data) > 8 * 4096
    pieces = _read(data, scanner=True)
    assert isinstance(whole, Trace) and isinstance(pieces, Trace)
    assert pieces.equals(whole)


@needs_scanner
@pytest.mark.parametrize("pieces", [False, True], ids=["whole", "pieces"])
def test_nonfinite_numbers_read_the_same_both_ways(
    monkeypatch: pytest.MonkeyPatch, pieces: bool, _scanned_documents_are_counted: list[int]
) -> None:
    """NaN, inf and -nan in modelled fields (a duration, a thread id, an occupancy) and in
    unmodelled ones: the scanner's nulls are msgspec's after its repairs, the warnings the
    same and in the same order, in one document and in pieces."""
    import re

    data = gzip.decompress((TRACES / SMALL).read_bytes())
    events = len(json.loads(data)["traceEvents"])
    for field, literal in ((rb'"dur"', b"NaN"), (rb'"tid"', b"-nan"), (rb'"ts"', b"inf")):
        data = re.sub(field + rb": [0-9.]+", field + b": " + literal, data, count=2)
    if pieces:
        monkeypatch.setattr(reader, "CHUNK_BYTES", 4096)
    trace = _assert_same(data)
    assert isinstance(trace, Trace)
    assert trace.meta.warnings[0] == "read 6 numbers JSON has no value for (NaN, Infinity, inf, out of range) as null"
    assert sum(_scanned_documents_are_counted) == events  # read by the scanner, all of them


@needs_scanner
def test_nonfinite_numbers_in_args_kept_verbatim_read_the_same_both_ways() -> None:
    """An event of a category we do not model keeps its args as JSON text: its NaN and inf are
    written null by both decoders (the scanner's text was "NaN", not JSON), strings untouched."""
    args = b'{"x": NaN, "y": inf, "z": [1, -nan], "s": "NaN inf"}'
    doc = (
        b'{"traceEvents": [{"ph": "X", "cat": "weird", "name": "w", "pid": 1, "tid": 1, "ts": 1, "dur": 2,'
        b' "args": ' + args + b'}, {"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 5, "dur": 1}]}'
    )
    trace = _assert_same(doc)
    assert isinstance(trace, Trace)
    assert trace.events["args"].to_list() == ['{"x": null, "y": null, "z": [1, null], "s": "NaN inf"}', None]
    assert trace.meta.warnings == ("read 3 numbers JSON has no value for (NaN, Infinity, inf, out of range) as null",)


@needs_scanner
@settings(
    max_examples=int(__import__("os").environ.get("FUZZ_EXAMPLES", "150")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(documents)
def test_generated_documents_read_the_same_both_ways(doc: Any) -> None:
    _assert_same(json.dumps(doc).encode())  # NaN and Infinity too: both read them as null


@needs_scanner
def test_mutated_real_trace_reads_the_same_both_ways() -> None:
    text = gzip.decompress((TRACES / SMALL).read_bytes()).decode()
    outcomes = {"trace": 0, "error": 0}
    for data in _mutations(text, random.Random(99)):
        got = _assert_same(data)
        outcomes["error" if isinstance(got, str) else "trace"] += 1
    assert outcomes["trace"] > 0 and outcomes["error"] > 0


@needs_scanner
def test_well_typed_variations_are_scanned_and_read_the_same(
    _scanned_documents_are_counted: list[int],
) -> None:
    """Missing fields, extra keys with nested values, nulls, duplicates: all inside what the scanner takes."""
    doc = json.loads(gzip.decompress((TRACES / SMALL).read_bytes()))
    rng = random.Random(7)
    for _ in range(6):
        events = [dict(e) for e in doc["traceEvents"]]
        for e in rng.sample(events, 60):
            key = rng.choice(["ts", "dur", "pid", "tid", "cat", "name", "args", "id"])
            choice = rng.random()
            if choice < 0.4:
                e.pop(key, None)
            elif choice < 0.7:
                e[key] = None
            else:
                e["extra " + key] = {"nested": [1, 2.5, "x", None, {"deep": [True, False]}]}
        events += rng.sample(events, 10)
        data = json.dumps({**doc, "traceEvents": events}, indent=rng.choice([None, 1])).encode()
        _assert_same(data)
    assert len(_scanned_documents_are_counted) == 6, "the scanner declined a well-typed document"


@needs_scanner
@pytest.mark.parametrize(
    "event",
    [
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": "stream 7", "ts": "12", "dur": 3},
        {"ph": "X", "cat": "cpu_op", "name": "op", "pid": 1.5, "tid": 1, "ts": 1.25, "dur": 2},
        {"ph": "X", "cat": "cpu_op", "name": "op", "pid": 1, "tid": 1, "ts": 2**70, "dur": 1},
        {"ph": "X", "cat": "cpu_op", "name": "op", "pid": 1, "tid": 1, "ts": 5, "dur": True},
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 5, "dur": 1, "args": []},
        {
            "ph": "X",
            "cat": "kernel",
            "name": "k",
            "pid": 0,
            "tid": 7,
            "ts": 5,
            "dur": 1,
            "args": {"stream": 7.0},
        },
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": 'caf\u00e9 \ud83d\ude00 "q"',
            "pid": 1,
            "tid": 1,
            "ts": 5,
            "dur": 1,
        },
    ],
)
def test_hand_picked_awkward_events_read_the_same(event: dict[str, Any]) -> None:
    good = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1.5, "dur": 2.25}
    doc = {"schemaVersion": 1, "traceEvents": [good, event], "custom_top_level_key": {"a": 1}}
    trace = _assert_same(json.dumps(doc).encode())
    assert isinstance(trace, Trace)
    assert "aten::mm" in trace.events["name"].cast(str).to_list()


def test_the_scanner_is_built_wherever_a_c_compiler_is() -> None:
    """A failed compile is allowed (the install must not fail), but not silently on our CI."""
    import shutil
    import sysconfig

    headers = Path(sysconfig.get_paths()["include"]) / "Python.h"
    if shutil.which("cc") and headers.exists():
        assert reader._scan is not None, "cc and Python.h are here, yet torchscope.trace._scan was not built"


@pytest.mark.parametrize("scanner", [True, False])
@pytest.mark.parametrize(
    ("layout", "dumps"),
    [
        ("re-indented", lambda doc: json.dumps(doc, indent=2)),
        ("compact", lambda doc: json.dumps(doc, separators=(",", ":"))),
    ],
)
def test_shapes_of_a_trace_a_json_tool_rewrote_read_as_kineto_wrote_them(
    scanner: bool, layout: str, dumps: Any
) -> None:
    """A trace re-indented (or compacted) by a JSON tool has the original's shape texts: the
    table's rows stay one line and the same shapes group together."""
    original = gzip.decompress(
        (TRACES / "tensorboard_samples" / "resnet50_num_workers_0.pt.trace.json.gz").read_bytes()
    )
    rewritten = dumps(json.loads(original)).encode()
    assert rewritten != original
    before, after = _read(original, scanner=scanner), _read(rewritten, scanner=scanner)
    assert isinstance(before, Trace) and isinstance(after, Trace)
    dims = after.events["input_dims"].drop_nulls()
    assert not dims.str.contains("\n").any()
    assert "[[3, 224, 224], [3, 224, 224], []]" in dims.to_list()
    assert dims.to_list() == before.events["input_dims"].drop_nulls().to_list()
    assert after.events["input_types"].drop_nulls().to_list() == before.events["input_types"].drop_nulls().to_list()


def test_a_pretty_printed_shared_trace_has_one_line_shapes() -> None:
    """``backward_thread_small.json`` is itself indented: its shapes were read over several lines."""
    trace = _assert_same((TRACES / "cuda" / "backward_thread_small.json").read_bytes())
    assert isinstance(trace, Trace)
    dims = set(trace.events["input_dims"].drop_nulls().to_list())
    assert {"[[2048, 2048]]", "[[2048, 2048], [2048, 256]]"} <= dims
    assert not any("\n" in d for d in dims)
