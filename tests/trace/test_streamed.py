"""A file too large to hold whole is read as it inflates (``files.TextStream``), piece by piece.

Streaming must change nothing a user sees: the same Trace, warnings and errors as reading the
text whole. Whatever the stream cannot take (a value the scanner declines, a damaged gzip
stream, a layout it cannot cut) is read whole instead, with that path's repairs and warnings.
``CHUNK_BYTES`` is made small here so that test files stream (a file streams from
4 x CHUNK_BYTES of text, 64 MB by default).
"""

from __future__ import annotations

import gzip
import json
import zlib
from pathlib import Path

import pytest

from torchscope.trace import Trace, read_chrome, reader
from torchscope.trace.files import TextStream, Unstreamable, open_text
from torchscope.trace.stream_pieces import StreamPieces

from .conftest import TRACES

SMALL = TRACES / "other_devices" / "mtia_inference.json.gz"  # 5.6 MB of text, 14k events
CHUNK = 64 * 1024


@pytest.fixture(params=["our filler", "python's zlib"])
def filler(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Blocks made by our C filler (``_inflate``, where built) or by Python's zlib and a join
    (where it is not): the tests that use this read the same either way."""
    from torchscope.trace import files

    if request.param == "our filler" and files._inflate is None:
        pytest.skip("the C filler was not built (no zlib header)")
    if request.param == "python's zlib":
        monkeypatch.setattr(files, "_inflate", None)
    return str(request.param)


def _whole(path: Path, monkeypatch: pytest.MonkeyPatch) -> Trace:
    """``path`` read with its text held whole (the path every file took before streaming)."""
    with monkeypatch.context() as patch:
        patch.setattr(reader, "CHUNK_BYTES", 1 << 40)
        return read_chrome(path)


def _streamed(path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int = CHUNK) -> Trace:
    monkeypatch.setattr(reader, "CHUNK_BYTES", chunk)
    assert isinstance(open_text(path, [], 4 * chunk, chunk), TextStream)
    return read_chrome(path)


def _count_streamed_parts(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many parts each stream yielded (0: none; the file was then read whole)."""
    counts: list[int] = []
    real = reader._streamed_parts

    def counting(*args: object) -> object:
        counts.append(0)
        for part in real(*args):  # type: ignore[arg-type]
            counts[-1] += 1
            yield part

    monkeypatch.setattr(reader, "_streamed_parts", counting)
    return counts


def _rereads(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """The files a stream gave up on and the reader read again, whole (``Unstreamable``)."""
    calls: list[object] = []
    real = reader.read_bytes

    def counting(path: object, *args: object) -> bytes:
        calls.append(path)
        return real(path, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(reader, "read_bytes", counting)
    return calls


def test_the_large_shared_trace_streams_by_default_and_reads_the_same(
    monkeypatch: pytest.MonkeyPatch, filler: str
) -> None:
    """87 MB of MTIA events (over the 64 MB a text is held whole up to) stream as they
    inflate: the same Trace, events, metadata and top-level keys as the whole text gives."""
    path = TRACES / "other_devices" / "mtia_training_large.json.gz"
    counts = _count_streamed_parts(monkeypatch)
    streamed = read_chrome(path)
    assert counts == [5]  # 87 MB: four pieces of 16 MB or more, and the tail
    whole = _whole(path, monkeypatch)
    assert counts == [5]  # (the whole read did not stream)
    assert streamed.equals(whole) and streamed.meta == whole.meta
    assert streamed.events.height == 138_377
    assert streamed.meta.backend == "mtia:hccl,cpu:gloo"  # from the head
    assert streamed.meta.base_time_ns == 1727743122000000000  # from the tail


def test_every_shared_trace_large_enough_streams_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    from torchscope.trace import derive

    monkeypatch.setattr(reader, "SCAN_THREADS", 3)  # pieces done out of order, taken in order
    # the pieces' events put in order a few columns at a time, as a table over 256 MB is
    monkeypatch.setattr(derive, "_SORTED_WHOLE_UP_TO", 0)
    streamed_files = 0
    for path in sorted(TRACES.rglob("*.json*")):
        text = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
        if len(text) <= 4 * CHUNK:
            continue  # held whole whatever the chunk
        whole = _whole(path, monkeypatch)
        counts = _count_streamed_parts(monkeypatch)
        streamed = _streamed(path, monkeypatch, max(CHUNK, len(text) // 16))  # ~16 pieces
        assert streamed.equals(whole) and streamed.meta == whole.meta, path
        if b'"traceEvents": [\n' in text:  # Kineto's layout, one event a line: cut as it inflates
            assert counts[0] > 1, path
            streamed_files += 1
        else:  # written on one line (multirank/): read whole
            assert counts == [0], path
    assert streamed_files == 10


def _document(events: list[dict[str, object]], tail: dict[str, object] | None = None) -> bytes:
    """A document written as Kineto writes it: keys, then one event a line, then keys again."""
    body = "},\n  {".join(json.dumps(e)[1:-1] for e in events)
    after = "".join(f',\n  "{k}": {json.dumps(v)}' for k, v in (tail or {}).items())
    return ('{\n  "schemaVersion": 1,\n  "traceEvents": [\n  {' + body + "}\n  ]" + after + "\n}").encode()


def _ops(n: int, start: int = 0) -> list[dict[str, object]]:
    return [
        {"ph": "X", "cat": "cpu_op", "name": f"aten::op{i % 5}", "pid": 1, "tid": 1, "ts": 10 * i, "dur": 5}
        for i in range(start, start + n)
    ]


def test_verbatim_args_of_events_we_do_not_model_are_kept_from_each_piece(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events = _ops(6000)
    for i in range(0, 6000, 500):  # one in each few pieces, one in the tail
        events[i] = {**events[i], "cat": "weird", "args": {"n": i, "s": "é \\n", "nested": [1, {"x": None}]}}
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(_document(events, {"displayTimeUnit": "ms"})))
    whole = _whole(path, monkeypatch)
    streamed = _streamed(path, monkeypatch)
    assert streamed.equals(whole)
    kept = streamed.events.filter(streamed.events["cat"] == "weird")["args"].to_list()
    assert [json.loads(a)["n"] for a in kept] == list(range(0, 6000, 500))
    assert json.loads(kept[0])["s"] == "é \\n"


def test_a_piece_the_scanner_declines_is_decoded_with_its_repairs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One value the scanner does not take sent a 1.5 GB file to the whole read (8x the
    memory); its piece is decoded by msgspec, with the repairs and warnings of a whole read."""
    events = _ops(6000)
    events[300] = {**events[300], "dur": "x"}  # in the first piece: no number, read as 0, said
    events[301] = {**events[301], "dur": "2.5"}  # written as a string: parsed
    path = tmp_path / "t.json"
    path.write_bytes(_document(events))
    whole = _whole(path, monkeypatch)
    counts = _count_streamed_parts(monkeypatch)
    streamed = _streamed(path, monkeypatch)
    assert counts[0] > 3  # streamed to the end
    assert streamed.equals(whole) and sorted(streamed.meta.warnings) == sorted(whole.meta.warnings)
    assert "1 complete events had no usable 'dur'; read as 0" in streamed.meta.warnings
    assert streamed.events.filter(streamed.events["start_ns"] == 3010_000)["dur_ns"].to_list() == [2500]


def test_windows_line_endings_stream(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file written with CR LF line ends is cut at ``},\\r\\n`` (it was read whole: 1.85 GB
    peak for a 1.47 GB file that streams at 0.2 GB with LF)."""
    path = tmp_path / "t.json"
    path.write_bytes(_document(_ops(6000), {"displayTimeUnit": "ms"}).replace(b"\n", b"\r\n"))
    whole = _whole(path, monkeypatch)
    counts = _count_streamed_parts(monkeypatch)
    streamed = _streamed(path, monkeypatch)
    assert counts[0] > 3 and streamed.equals(whole) and streamed.events.height == 6000


def test_a_second_event_list_is_read_as_json_readers_read_it_and_said(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A document with two "traceEvents" keys: the last one wins, as in any JSON reader, at
    any size and said. Streamed, the first list's pieces and the second list were mixed
    (68,200 of 100,000 events plus the second's one), silently."""
    text = _document(_ops(6000))
    text = text[: text.rindex(b"}")] + b',\n  "traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "dup",'
    text += b' "pid": 1, "tid": 1, "ts": 1, "dur": 1}]\n}\n'
    path = tmp_path / "t.json"
    path.write_bytes(text)
    said = 'the document has 2 "traceEvents" keys: read the last one\'s events, as JSON readers do'
    for read in (lambda: _whole(path, monkeypatch), lambda: _streamed(path, monkeypatch)):
        got = read()
        assert got.events["name"].to_list() == ["dup"]
        assert got.meta.warnings[0].startswith(said)


@pytest.mark.parametrize(
    "damage",
    ["truncated", "garbage after", "zeros after", "cut short", "cut at a block's end", "two members, cut"],
)
def test_a_damaged_large_file_streams_and_says_what_the_whole_read_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damage: str, filler: str
) -> None:
    """A gzip stream cut short or followed by other bytes (padding, a log line), and a text
    that ends mid-event, are read as they stream: they were read whole (a 1.3 GB trace with 8
    bytes after its gzip stream peaked at 5.9 GB against 1.25 GB, one cut at 80% at 2.6 GB), and
    say what the whole read says, in the same places."""
    text = _document(_ops(6000), {"displayTimeUnit": "ms"})
    packed = gzip.compress(text)
    # the text cut where a block ends: its last piece is cut at the last event boundary read,
    # and the rest is one event, cut short
    at_block = text[: (len(text) // CHUNK - 1) * CHUNK]
    assert not at_block.endswith(b"}")
    data = {
        "truncated": packed[: len(packed) * 3 // 4],  # a copy interrupted
        "garbage after": packed + b"not gzip at all",
        "zeros after": packed + bytes(1000),  # padding: no warning, as Python's gzip reads it
        "cut short": gzip.compress(text[: len(text) * 3 // 4]),  # the writer was killed
        "cut at a block's end": gzip.compress(at_block),
        "two members, cut": gzip.compress(text[:20000]) + gzip.compress(text[20000:])[:-5000],
    }[damage]
    path = tmp_path / "t.json.gz"
    path.write_bytes(data)
    whole = _whole(path, monkeypatch)
    counts, rereads = _count_streamed_parts(monkeypatch), _rereads(monkeypatch)
    streamed = _streamed(path, monkeypatch)
    assert counts and counts[0] > 2 and not rereads  # streamed to its end, never read whole
    assert streamed.equals(whole) and streamed.meta.warnings == whole.meta.warnings
    assert bool(streamed.meta.warnings) == (damage != "zeros after")  # each says what was lost
    assert 0 < streamed.events.height < 6000 or damage.endswith("after")


def test_gzip_of_several_members_streams_through_all_of_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, filler: str
) -> None:
    text = _document(_ops(6000))
    third = len(text) // 3  # the trailer gives the last member's size alone: make it the larger
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(text[:third]) + gzip.compress(text[third:]))
    monkeypatch.setattr(reader, "CHUNK_BYTES", CHUNK)
    stream = open_text(path, [], len(text) // 4, CHUNK)
    assert isinstance(stream, TextStream)
    assert b"".join(stream.blocks()) == text
    streamed = read_chrome(path)
    assert streamed.equals(_whole(path, monkeypatch)) and streamed.events.height == 6000


def test_gzip_members_whose_last_is_small_stream_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The trailer gives the last member's size alone: files joined with ``cat`` whose last
    part is small (a 1.3 GB trace in 15 members peaked at 2.8 GB, read whole) stream when the
    file is too large for its trailer to be its text's size."""
    text = _document(_ops(6000))
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(text[:-100]) + gzip.compress(text[-100:]))
    stream = open_text(path, [], len(text) // 4, CHUNK)
    assert isinstance(stream, TextStream)
    assert b"".join(stream.blocks()) == text
    whole = _whole(path, monkeypatch)
    counts, rereads = _count_streamed_parts(monkeypatch), _rereads(monkeypatch)
    streamed = _streamed(path, monkeypatch)
    assert counts[0] > 2 and not rereads
    assert streamed.equals(whole) and streamed.events.height == 6000
    assert streamed.meta.warnings == whole.meta.warnings == ()


def test_a_stream_hands_out_bounded_blocks_and_counts_what_it_read(tmp_path: Path, filler: str) -> None:
    text = _document(_ops(20000))
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(text))
    stream = open_text(path, [], 4096, 4096)
    assert isinstance(stream, TextStream)
    sizes = [len(b) for b in stream.blocks()]
    assert max(sizes) <= 4096 and sum(sizes) == len(text)
    assert stream.read == path.stat().st_size


def test_a_corrupt_first_block_is_read_whole(tmp_path: Path, filler: str) -> None:
    """A stream that fails before handing anything out is not a stream: ``open_text`` reads the
    file whole, which says what is wrong the way it always did."""
    packed = bytearray(gzip.compress(_document(_ops(6000))))
    packed[20:40] = b"\xff" * 20
    path = tmp_path / "t.json.gz"
    path.write_bytes(bytes(packed))
    with pytest.raises(Exception) as got:
        open_text(path, [], 4096, 4096)
    assert "corrupt" in str(got.value) and str(path) in str(got.value)
    assert not isinstance(got.value, (Unstreamable, zlib.error))


def test_minified_json_is_read_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without Kineto's one event a line there is nowhere safe to cut: the text is held whole."""
    path = tmp_path / "t.json"
    path.write_bytes(json.dumps({"traceEvents": _ops(6000)}).encode())
    counts = _count_streamed_parts(monkeypatch)
    streamed = _streamed(path, monkeypatch)
    assert counts == [0] and streamed.events.height == 6000


def test_a_streams_first_pieces_are_scanned_beside_the_imports_and_read_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The prefetch cuts a stream's first pieces and scans them while the reader's modules
    import (the 87 MB MTIA trace's scanning all waited for Polars' import); the reader takes
    them in file order, scans the rest itself, and the Trace is the one the whole text gives."""
    import torchscope
    from torchscope.trace import files

    events = _ops(20000)
    for i in range(0, 20000, 1500):  # verbatim args in pieces scanned ahead and after
        events[i] = {**events[i], "cat": "weird", "args": {"n": i}}
    text = _document(events, {"displayTimeUnit": "ms"})
    path = tmp_path / "t.json"
    path.write_bytes(text)
    whole = _whole(path, monkeypatch)
    monkeypatch.setattr(reader, "CHUNK_BYTES", CHUNK)
    monkeypatch.setattr(files, "WHOLE_BYTES", len(text) // 3)  # a third ahead, the rest after
    monkeypatch.setattr(files, "BLOCK_BYTES", CHUNK)
    early = files.prefetch(path)
    assert early is not None
    early._thread.join()  # as when the imports outlast the read
    assert early.scanned is not None and early.scanned[0] == "stream"
    pieces = early.scanned[1]
    assert isinstance(pieces, StreamPieces)
    ahead = list(pieces._early)
    assert len(ahead) >= 3 and all(scan is not None for _, scan in ahead)
    assert sum(len(cut.text) for cut, _ in ahead) < len(text) // 2  # not the whole file
    counts = _count_streamed_parts(monkeypatch)
    loaded = torchscope.load(path, early=early)
    assert counts[0] > len(ahead) + 1  # pieces cut after the reader took over, and the tail
    assert isinstance(loaded, Trace) and loaded.equals(whole) and loaded.meta == whole.meta
    args = loaded.events.filter(loaded.events["cat"] == "weird")["args"].to_list()
    assert args == [json.dumps({"n": i}) for i in range(0, 20000, 1500)]


def test_a_damage_met_while_reading_ahead_says_what_the_whole_read_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, filler: str
) -> None:
    """``torchscope.load`` inflates and scans a stream's first pieces beside its imports;
    damage met there (data that does not inflate) is raised where the reader reaches it, and
    the file is then read whole, which says what is wrong."""
    import torchscope
    from torchscope.trace import files

    text = _document(_ops(20000), {"displayTimeUnit": "ms"})
    path = tmp_path / "t.json.gz"
    # a second member that does not inflate, after a quarter of the text
    path.write_bytes(gzip.compress(text[: len(text) // 4]) + b"\x1f\x8b" + b"\xff" * 200)
    whole = _whole(path, monkeypatch)
    monkeypatch.setattr(reader, "CHUNK_BYTES", CHUNK)
    monkeypatch.setattr(files, "WHOLE_BYTES", len(text) // 2)  # read ahead past the damage
    monkeypatch.setattr(files, "BLOCK_BYTES", CHUNK)
    early = files.prefetch(path)
    assert early is not None
    early._thread.join()  # as when the imports outlast the read: it scans ahead to its limit
    stream, _ = early.take()
    assert isinstance(stream, TextStream) and early.scanned is not None
    kind, pieces = early.scanned
    assert kind == "stream" and isinstance(pieces, StreamPieces)
    assert isinstance(pieces._failed, Unstreamable)  # met ahead, raised where the reader gets to
    loaded = torchscope.load(path)
    assert isinstance(loaded, Trace) and loaded.equals(whole) and loaded.meta.warnings == whole.meta.warnings
    assert whole.meta.warnings[0].startswith("the gzip stream is followed by 202 bytes that do not inflate")


@pytest.mark.parametrize("after", [b"garbage{{{ trailing\0\n", bytes(4096)], ids=["a log line", "zeros"])
def test_bytes_after_the_document_are_left_out_and_said_at_any_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, after: bytes
) -> None:
    """A log line appended to a trace (or padding) was "not valid JSON (trailing characters)",
    where the same bytes after a gzip stream were a warning: the document is read, and the
    warning says how many bytes were not. Zeros were taken for the fill after a file cut short,
    and its last key ("traceName") was dropped as if cut in it."""
    path = tmp_path / "t.json"
    path.write_bytes(_document(_ops(6000), {"traceName": "x"}) + after)
    said = f"the JSON document is followed by {len(after):,} bytes that are not JSON: not read"
    counts, rereads = _count_streamed_parts(monkeypatch), _rereads(monkeypatch)
    for read in (lambda: _whole(path, monkeypatch), lambda: _streamed(path, monkeypatch)):
        got = read()
        assert got.events.height == 6000 and got.meta.warnings == (said,)
        assert got.meta.extra["traceName"] == "x"
    assert counts[-1] > 2 and not rereads  # streamed (a 266 MB file was held whole: 666 MB)
