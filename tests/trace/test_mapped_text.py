"""Reading a trace through a read-only map of its file (``mmap``), as live capture does.

The map must give the Trace the bytes give on every path: the scanner taking the whole file,
the scanner in pieces, the scanner declining to msgspec (a duration written as a string), and
events of an unknown category whose verbatim args are read from the text; and the map must be
closable afterwards (nothing of the Trace may point into it).
"""

from __future__ import annotations

import gzip
import json
import mmap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from torchscope.trace import Trace, reader
from torchscope.trace.files import OwnedMap

from .conftest import TRACES
from .test_fuzz import SMALL

# a user's map, and ours (live capture's), whose pages the reader unmaps behind the scan
MAPS = pytest.mark.parametrize("kind", [mmap.mmap, OwnedMap], ids=["mmap", "owned"])


@contextmanager
def mapped(tmp_path: Path, data: bytes, kind: type[mmap.mmap] = mmap.mmap) -> Iterator[mmap.mmap]:
    path = tmp_path / "cycle.pt.trace.json"
    path.write_bytes(data)
    with open(path, "rb") as f, kind(f.fileno(), 0, access=mmap.ACCESS_READ) as text:
        yield text  # closing it raises BufferError if anything still exports its buffer


def _both(tmp_path: Path, data: bytes, kind: type[mmap.mmap]) -> tuple[Trace, Trace]:
    from_bytes = reader.read_chrome_document(data, "cycle")
    with mapped(tmp_path, data, kind) as text:
        from_map = reader.read_chrome_document(text, "cycle")
    return from_bytes, from_map


def _small() -> bytes:
    return gzip.decompress((TRACES / SMALL).read_bytes())


@MAPS
def test_a_mapped_trace_reads_like_its_bytes(tmp_path: Path, kind: type[mmap.mmap]) -> None:
    from_bytes, from_map = _both(tmp_path, _small(), kind)
    assert from_map.events.height == 870
    assert from_map.equals(from_bytes) and from_map.meta.warnings == from_bytes.meta.warnings


@MAPS
def test_a_mapped_trace_read_in_pieces(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: type[mmap.mmap]
) -> None:
    data = _small()
    whole = reader.read_chrome_document(data, "cycle")
    monkeypatch.setattr(reader, "CHUNK_BYTES", 4096)
    with mapped(tmp_path, data, kind) as text:
        pieces = reader.read_chrome_document(text, "cycle")
    assert pieces.equals(whole)


@MAPS
def test_a_mapped_trace_the_scanner_declines_goes_through_msgspec(
    tmp_path: Path, kind: type[mmap.mmap]
) -> None:
    doc = json.loads(_small())
    event = doc["traceEvents"][5]
    event["dur"] = "7"  # a duration written as a string: msgspec parses it, the scanner declines
    data = json.dumps(doc).encode()
    if reader._scan is not None:
        assert reader._scan.scan_trace(data) is None
    from_bytes, from_map = _both(tmp_path, data, kind)
    assert from_map.equals(from_bytes)
    ev = from_map.events
    assert ev.filter((ev["name"] == event["name"]) & (ev["dur_ns"] == 7000)).height == 1


@MAPS
def test_verbatim_args_of_unknown_categories_come_from_a_map(tmp_path: Path, kind: type[mmap.mmap]) -> None:
    doc = {
        "traceEvents": [
            {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 1, "dur": 5},
            {
                "ph": "X",
                "cat": "vendor_thing",
                "name": "dma",
                "pid": 1,
                "tid": 1,
                "ts": 2,
                "dur": 1,
                "args": {"queue": 3, "note": "kept as written"},
            },
        ]
    }
    from_bytes, from_map = _both(tmp_path, json.dumps(doc).encode(), kind)
    assert from_map.equals(from_bytes)
    other = from_map.events.filter(from_map.events["kind"] == "other")
    assert json.loads(other["args"][0]) == {"queue": 3, "note": "kept as written"}


def test_live_capture_reads_its_saved_cycle_through_a_map(tmp_path: Path) -> None:
    from torchscope.capture.kineto import LIVE_SOURCE, _read_saved
    from torchscope.errors import TraceError

    data = _small()
    path = tmp_path / "cycle-1.pt.trace.json"
    path.write_bytes(data)
    assert _read_saved(path).equals(reader.read_chrome_document(data, LIVE_SOURCE))
    path.write_bytes(b"")  # an empty file cannot be mapped: read, and named as what it is
    with pytest.raises(TraceError, match="live capture: file is empty"):
        _read_saved(path)


def test_pages_are_released_only_for_maps_we_own(tmp_path: Path) -> None:
    """Unmapping pages of memory Python allocated would zero it: the scanner refuses."""
    from torchscope.trace import _scan

    data = gzip.decompress((TRACES / "cuda" / "diff_control_rank3_of_8.json.gz").read_bytes())  # 34 MB
    with pytest.raises(ValueError, match="release_pages needs an mmap.mmap"):
        _scan.scan_document(data, release_pages=True)
    with pytest.raises(ValueError, match="release_pages needs an mmap.mmap"):
        _scan.scan_trace(data, release_pages=True)
    with pytest.raises(ValueError, match="release_pages needs an mmap.mmap"):
        _scan.scan_events(data, 0, 10, release_pages=True)
    with mapped(tmp_path, data, OwnedMap) as text:
        # the event list's pages are unmapped behind the scan; read again, they are the file's
        doc = _scan.scan_document(text, release_pages=True)
        assert doc is not None and doc == _scan.scan_document(data)
        lo, hi, _ = doc
        assert text[:] == data
        assert _scan.scan_events(text, lo, hi, release_pages=True) == _scan.scan_events(data, lo, hi)
        assert text[:] == data
        whole = reader.read_chrome_document(text, "cycle")  # scan_trace, releasing its pages
        assert text[:] == data
    assert whole.equals(reader.read_chrome_document(data, "cycle"))
