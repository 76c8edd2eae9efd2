"""Read Chrome/Kineto trace JSON (any dialect, 2021 to today) into a columnar ``Trace``.

Why it is built this way: a 50 MB trace has ~200k events, and one Python dict per event is
what makes ``json.loads`` + pandas slow and memory hungry. We decode straight into msgspec
``Struct`` objects that hold only the fields we model (``trace.events``; every other key is
skipped by the decoder without being materialized), pull each column out with one C-level
``map`` (``trace.columns``), and hand the columns to Polars. Large files are decoded in pieces
cut at event boundaries so that only one piece of objects is alive at a time. Linking and
nesting happen afterwards, vectorized, in ``trace.derive``.

Best-effort repairs (a duration written as a string, an event without ``ts``) never raise:
they are applied and listed in ``TraceMeta.warnings``. Anything that is not a trace raises
``TraceError(source, problem)``.
"""

from __future__ import annotations

import ast
import functools
import mmap
import os
import re
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeAlias, TypeVar

import msgspec
import numpy as np
import numpy.typing as npt
import polars as pl

from torchscope.errors import TraceError
from torchscope.process_memory import return_free_memory
from torchscope.trace import batch as raw
from torchscope.trace.columns import (
    Ids,
    flow_frame,
    may_keep_raw_args,
    metadata_frame,
    span_frames,
    threads_frame,
)
from torchscope.trace.cut import cut_before_device_work
from torchscope.trace.derive import derive, in_id_order
from torchscope.trace.dialect import TOOL_FRAME_PATTERN, TOOL_THREADS_KEY
from torchscope.trace.events import Args, Document, Event, RawArgsDocument, RawArgsEvent
from torchscope.trace.files import OwnedMap, Prefetch, TextStream, Unstreamable, open_text, read_bytes
from torchscope.trace.json_repair import (
    cut_after_last_event,
    describe,
    escape_raw_strings,
    flatten_deep_values,
    not_a_document,
    repair_values,
    replace_invalid_utf8,
    replace_lone_surrogates,
)
from torchscope.trace.model import Later, Trace, TraceMeta
from torchscope.trace.schema import (
    EVENTS_SCHEMA,
    FLOWS_SCHEMA,
    MEMORY_SCHEMA,
    THREADS_SCHEMA,
    conform,
    step_annotations,
)
from torchscope.trace.short import (
    BYTE,
    REFUSALS,
    TAIL_FILL,
    Place,
    cut_warning,
    ends_early,
    mid_event_warning,
    said_cut,
    scan_cut_short,
)
from torchscope.trace.stream_pieces import Cut, StreamPieces, head_document, separator_of

I64 = npt.NDArray[np.int64]


try:  # our C scanner (optional: the package works without a compiler, only slower)
    from torchscope.trace import _scan
except ImportError:  # pragma: no cover - depends on the build
    _scan = None  # type: ignore[assignment]

# Tests turn this off to compare the scanner with the msgspec path on the same input.
SCANNER_ENABLED = True
# threads that scan a large file's pieces at once (the scanner releases the GIL): the cores
# this process may use
SCAN_THREADS = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)

_EVENTS_DECODER = msgspec.json.Decoder(list[Event], strict=False)
_DOC_DECODER = msgspec.json.Decoder(Document, strict=False)
_EVENT_DECODER = msgspec.json.Decoder(Event, strict=False)
_RAW_ARGS_DECODER = msgspec.json.Decoder(list[RawArgsEvent], strict=False)
_RAW_ARGS_DOC_DECODER = msgspec.json.Decoder(RawArgsDocument, strict=False)
_ANY_DECODER = msgspec.json.Decoder()


class Timings:
    """Wall time per phase of one read (for ``benchmarks/load.py``), and progress callbacks."""

    def __init__(
        self, on_phase: Callable[[str], None] | None = None, on_piece: Callable[[int, int], None] | None = None
    ) -> None:
        self.phases: dict[str, float] = {}
        self._t = time.perf_counter()
        self._on_phase = on_phase
        self._on_piece = on_piece
        self.pieces = 0  # how many pieces a large file is read in (0: read whole)

    def mark(self, phase: str) -> None:
        now = time.perf_counter()
        self.phases[phase] = self.phases.get(phase, 0.0) + now - self._t
        self._t = now
        if self._on_phase is not None:
            self._on_phase(phase)

    def piece(self, done: int) -> None:
        """``done`` of the file's ``pieces`` are read (a large file's progress, piece by piece)."""
        if self._on_piece is not None and self.pieces > 1:
            self._on_piece(done, self.pieces)


LAST_TIMINGS: dict[str, float] = {}


# The JSON text: bytes, or a read-only map of a file we own (live capture's saved cycle). The C
# scanner and slicing take either; the msgspec paths get bytes (``_as_bytes``).
Text: TypeAlias = bytes | mmap.mmap


# -- public API ------------------------------------------------------------------------------
def read_chrome(
    path: str | Path,
    on_phase: Callable[[str], None] | None = None,
    *,
    early: Prefetch | None = None,
    on_piece: Callable[[int, int], None] | None = None,
) -> Trace:
    """Read a Kineto/Chrome trace file (``.json`` or ``.json.gz``) into a Trace.

    ``on_phase`` is called with the name of each finished phase (inflate, decode, columns,
    derive), for progress displays; ``on_piece(done, total)`` after each piece of a file large
    enough to be read in pieces. ``early``: the file's bytes, already being read
    (``files.prefetch``); its wait is the "inflate" phase.
    """
    timings = Timings(on_phase, on_piece)
    warnings: list[str] = []
    scanned = None
    if early is not None:
        text, warnings = early.take()
        scanned, early.scanned = early.scanned, None
    else:
        text = open_text(path, warnings, 4 * CHUNK_BYTES, CHUNK_BYTES)
    said = list(warnings)
    box: list[Text | TextStream] = [text]  # handed over: the text is freed once decoded
    del text
    timings.mark("inflate")
    try:
        try:
            trace = _read(box, str(path), timings, warnings, scanned)
        except Unstreamable:  # read whole, as a smaller file is, with its repairs and warnings
            warnings = said
            box = [read_bytes(path, warnings)]
            trace = _read(box, str(path), timings, warnings)
    except TraceError as exc:
        # what a damaged gzip stream gave is not a trace: the damage comes first (the first KB
        # of a 170 MB .json.gz said only "not a trace: no 'traceEvents' key")
        salvaged = next((w for w in warnings if w.startswith("the gzip stream")), None)
        if salvaged is None:
            raise
        problem = exc.problem.removeprefix("not a trace: ")
        raise TraceError(exc.source, f"{salvaged}, which are not a trace: {problem}") from None
    if trace.events.height == 0 and trace.memory.height == 0:
        # a file that yields nothing to analyse is not a trace: say so rather than print empty
        # tables and exit 0 (a live document may be empty: an empty profiled region is fine)
        said = [w for w in trace.meta.warnings if w != "the trace has no events"]  # said already
        skipped = f" ({'; '.join(said)})" if said else ""
        raise TraceError(str(path), f"not a trace: no events{skipped}")
    return trace


def read_chrome_document(
    data: bytes | mmap.mmap | str | dict[str, Any] | list[Any] | Any,
    source: str = "",
    *,
    followed: Followed | None = None,
) -> Trace:
    """Read a Kineto JSON document (bytes, text, a parsed dict, or a bare event list).

    A ``mmap.mmap`` is read in place (no copy of the text); the caller keeps it open until this
    returns and must own the file: a map of a file another process truncates faults.
    ``followed``: the pieces a ``_scan.Follower`` scanned while the file was written
    (``_followed_batches``).
    """
    timings = Timings()
    raw: Text
    if isinstance(data, str):
        raw = data.encode()
    elif isinstance(data, mmap.mmap):
        raw = data
    elif isinstance(data, (bytes, bytearray, memoryview)):
        raw = bytes(data)
    else:
        try:
            raw = msgspec.json.encode(data)
        except (TypeError, ValueError, OverflowError) as exc:
            raise TraceError(source, f"document cannot be encoded as JSON ({exc})") from None
    return _read([raw], source, timings, scanned=None if followed is None else ("followed", followed))


# -- decoding ---------------------------------------------------------------------------------
def _read(
    box: list[Text | TextStream],
    source: str,
    timings: Timings,
    warnings: list[str] | None = None,
    scanned: tuple[str, Any] | None = None,
) -> Trace:
    """Read the JSON text in ``box`` (taken out of it, so that it can be freed early; a
    ``TextStream`` is read piece by piece, and raises ``Unstreamable`` if it cannot be);
    ``warnings`` may hold what reading the file already found, ``scanned`` what the scanner
    already made of the text (``files.Prefetch``)."""
    warnings = [] if warnings is None else warnings
    top: dict[str, Any] = {}
    try:
        trace = _build(box, top, warnings, timings, source, scanned)
    except RecursionError:
        raise TraceError(source, "JSON nested too deeply to be a trace") from None
    LAST_TIMINGS.clear()
    LAST_TIMINGS.update(timings.phases)
    return trace


# Files with more than 4 x CHUNK_BYTES (64 MB) of JSON are decoded in pieces of about
# CHUNK_BYTES, so that only a few pieces' columns are being built at a time: peak memory
# follows the columnar result, not the text or the scanner's buffers of the whole file. Smaller
# files are decoded whole, which is faster (pieces cost ~15% on 35-55 MB files). Each piece
# pays a fixed cost (its own string tables, ~60 small queries to make its frames), which
# grows with the distinct names in it: with_stack's Python frames made 8 MB pieces of a 142 MB
# cycle read in 0.90-1.03 s against 0.60-0.74 s for 16 MB pieces (2 cores; 87 MB of MTIA
# events, few names, did not care).
CHUNK_BYTES = 16 * 1024 * 1024


def _read_whole(data: Text) -> bool:
    """Whether ``data`` is small enough to decode in one piece (up to 4 x CHUNK_BYTES, the
    prefetch's ``files.WHOLE_BYTES``).

    A live cycle's map (``OwnedMap``) is read whole up to twice that, its pages unmapped
    behind the scan: with_stack's 107 MB cycle (366k events), read beside Kineto's results
    still in memory, took 0.37 s to the table whole against 0.43-0.45 s in pieces, and peaked
    20 MB lower.
    """
    return len(data) <= 4 * CHUNK_BYTES * (2 if isinstance(data, OwnedMap) else 1)


def _decode_chunks(
    data: bytes, source: str, warnings: list[str], top: dict[str, Any], whole: bool = False
) -> Iterator[list[Event]]:
    """The typed events, one piece at a time; fills ``top`` with the top-level keys.
    ``whole``: decode it in one piece whatever its size (a document of two event lists)."""
    layout = None if whole or _read_whole(data) else _layout(data)
    head_doc = _head_keys(data, layout) if layout is not None else None
    if layout is None or head_doc is False:  # (False: "traceEvents" inside another value)
        whole_top, events = _decode(data, source, warnings)
        top.update(whole_top)
        yield events
        return
    start, cuts, _ = layout
    # pieces are sliced one at a time, so that only one copy of one piece exists at a time;
    # the last one is decoded with the rest of the document (its top-level keys)
    for lo, hi in _pieces(start + 1, cuts, len(data))[:-1]:
        yield _decode_piece(data, lo, hi, source, warnings)
    yield _decode_tail(data, layout, head_doc, source, warnings, top)


Layout: TypeAlias = tuple[int, list[tuple[int, int]], bool]


def _event_lists(data: Text) -> int:
    """How many ``"traceEvents"`` keys ``data`` holds (a quote inside a JSON string is escaped,
    so this counts keys). A document of two is read as JSON readers read it, the last one
    winning, whole: read in pieces, the pieces of the first list and the second's events were
    mixed (68,200 of 100,000 events and the second list's one)."""
    key = b'"traceEvents"'
    n, at = 0, data.find(key)
    while at >= 0:  # (a map has no ``count``)
        n, at = n + 1, data.find(key, at + len(key))
    return n


def _head_keys(data: Text, layout: Layout) -> Document | None | Literal[False]:
    """The top-level keys before the event list of a file read in pieces (None: a bare list);
    False when what ``_layout`` took for the list's ``[`` is inside another value."""
    start, _, bare = layout
    if bare:
        return None
    try:
        head_doc = _DOC_DECODER.decode(data[: start + 1] + b"]}")
    except (msgspec.ValidationError, *REFUSALS):
        return False
    return head_doc if head_doc.traceEvents == [] else False


def _decode_tail(
    data: Text,
    layout: Layout,
    head_doc: Document | None,
    source: str,
    warnings: list[str],
    top: dict[str, Any],
) -> list[Event]:
    """The events of the last piece, decoded with the rest of the document (its keys after the
    list go to ``top``, with ``head_doc``'s), repaired as a whole document is: a file cut short
    ends there."""
    bare = layout[2]
    tail, place = _tail_text(data, layout)
    rest: dict[str, Any] = {}
    try:
        if bare:
            events = _EVENTS_DECODER.decode(tail)
        else:
            doc = _DOC_DECODER.decode(tail)
            events = doc.traceEvents or []
            rest = _top_fields(doc)
    except msgspec.ValidationError:
        rest, events = _lenient(tail, source, warnings, place)
    except REFUSALS as exc:
        rest, events = _decode(_repaired(tail, source, warnings, exc, place), source, warnings, place)
    del tail
    if head_doc is not None:
        top.update(_top_fields(head_doc))
    top.update(rest)
    return events


def _tail_text(data: Text, layout: Layout) -> tuple[bytes, Place]:
    """The last piece of a file read in pieces with the rest of the document, as a document of
    its own (the list's head put back), and where it sits in the file."""
    _, cuts, bare = layout
    head = b"[" if bare else b'{"traceEvents":['
    return head + data[cuts[-1][1] :], Place(cuts[-1][1] - len(head), len(data))


def _decode_piece(data: Text, lo: int, hi: int, source: str, warnings: list[str]) -> list[Event]:
    """The events of ``data[lo:hi]``, a run of comma-separated events cut from the list."""
    piece = b"[" + data[lo:hi] + b"]"
    place = Place(lo - 1, len(data))
    try:
        return _EVENTS_DECODER.decode(piece)
    except msgspec.ValidationError:
        return _lenient(piece, source, warnings, place)[1]
    except REFUSALS as exc:
        return _decode(_repaired(piece, source, warnings, exc, place), source, warnings, place)[1]


_TRAILING_AT = re.compile(r"trailing characters \(byte (\d+)\)")


def _not_json_after(count: int) -> str:
    """The warning for a document followed by ``count`` bytes that are not JSON (left out)."""
    return f"the JSON document is followed by {count:,} bytes that are not JSON: not read"


def _document_end(message: str, data: bytes) -> int | None:
    """Where the document in ``data`` ends when a decoder refused it only for the bytes after
    it (``message`` says "trailing characters"): a log line appended, padding; else None."""
    after = _TRAILING_AT.search(message)
    if after is not None and 0 < (at := int(after.group(1)) - 1) < len(data):  # (msgspec says one past)
        return at
    return None


def _repaired(
    data: bytes, source: str, warnings: list[str], exc: Exception, place: Place | None = None
) -> bytes:
    """``data`` repaired (``json_repair``) for the refusal ``exc``, with a warning that says
    what was changed; the one-line error for ``exc`` when no repair applies. ``place``: where
    ``data`` sits in the file, when it is a piece of it.

    One repair per call, chosen by the refusal: the caller decodes the result again and comes
    back if something else is wrong, so every repair is applied only when needed (a valid file
    never pays for one) and each class of repair, finding nothing more, ends the loop.
    """
    message = str(exc)
    if (at := _document_end(message, data)) is not None:
        # a whole document and then bytes that are not JSON (a log line appended, padding):
        # the document is kept, as a gzip stream followed by other bytes is
        warnings.append(_not_json_after(len(data) - at))
        return data[:at]
    if isinstance(exc, UnicodeDecodeError):
        fixed, note = replace_invalid_utf8(data)
        if note is not None:
            warnings.append(note)
            return fixed
    if isinstance(exc, RecursionError):
        fixed, note = flatten_deep_values(data)
        if note is not None:
            warnings.append(note)
            return fixed
        raise TraceError(source, "JSON nested too deeply to be a trace") from None
    if "surrogate" in message or "truncated" in message or "hex escape" in message:
        # msgspec calls a lone surrogate escape near the end of the text "truncated", and one
        # followed by another character in a string it skips "unexpected end of hex escape"
        fixed, note = replace_lone_surrogates(data)
        if note is not None:
            warnings.append(note)
            return fixed
    fixed, values = escape_raw_strings(data)
    if values:
        warnings.append(describe(values))
        return fixed
    short = ends_early(message, data)
    if short:
        cut = cut_after_last_event(data.rstrip(TAIL_FILL))
        if cut is not None:
            warnings.append(cut_warning(cut, data, place or Place(0, len(data))))
            return cut.text
    if not isinstance(exc, UnicodeDecodeError):
        fixed, notes = repair_values(data)
        if notes:
            warnings.extend(notes)
            return fixed
    if short:  # "invalid number" for a first event cut after its "."
        message = "Input data was truncated"
    raise TraceError(source, f"not valid JSON ({_in_file(_first_line(message), place)})") from None


def _in_file(message: str, place: Place | None) -> str:
    """A decoder's message with its "(byte N)" counted in the file, not in the piece decoded
    (a bad byte 236 MB into a 472 MB file was said to be at byte 1,237,364), and written one
    way whichever path read it (a whole file's said "byte 17412642", a piece's "byte
    43,470,384 of the file")."""
    shift = 0 if place is None else place.shift
    return BYTE.sub(lambda m: f"(byte {int(m.group(1)) + shift:,})", message)


_COUNT = re.compile(r"(\d[\d,]*)( \w+)?")


def merge_counted(lines: list[str]) -> list[str]:
    """Warnings that differ only in their count (their first number), as one line with the sum,
    in first-seen order: each ~8 MB piece of a large file says "dropped malformed fields of 12
    events" for its own events, and a 105 MB file printed 24 such lines. Lines without a number
    stay as they are."""
    groups: dict[str, list[tuple[int, str]]] = {}
    for line in lines:
        first = _COUNT.search(line)
        if first is None:
            groups.setdefault(line, []).append((0, line))
            continue
        # the noun after the count, singular: "1 event" and "12 events" are one kind of line
        key = line[: first.start()] + "#" + (first.group(2) or "").removesuffix("s") + line[first.end() :]
        groups.setdefault(key, []).append((int(first.group(1).replace(",", "")), line))
    out = []
    for members in groups.values():
        if len(members) == 1:
            out.append(members[0][1])
            continue
        total = sum(n for n, _ in members)
        plural = next((line for n, line in members if n != 1), None)
        line = plural or members[0][1]
        count = _COUNT.search(line)
        if count is None:  # the same line without a number, said by several pieces
            out.append(line)
            continue
        noun = count.group(2) or ""
        if plural is None and total != 1 and noun and not noun.endswith("s"):
            noun += "s"  # every piece said "1 event"
        out.append(f"{line[: count.start()]}{total:,}{noun}{line[count.end() :]}")
    return out


def _first_line(message: str) -> str:
    return message.splitlines()[0] if message else "refused by the decoder"


def _as_bytes(data: Text) -> bytes:
    """``data`` as bytes: itself, or a copy of a map (for msgspec, whose raw values would keep
    pointers into the map)."""
    return data if isinstance(data, bytes) else data[:]


def _scanned_batches(
    data: Text,
    source: str,
    warnings: list[str],
    top: dict[str, Any],
    scanned: tuple[str, Any] | None,
    finish: Callable[[pl.DataFrame], _Part],
    timings: Timings,
) -> Iterator[pl.DataFrame | _Part] | None:
    """What our C scanner reads, or None when it is not built or declines the document.

    Files up to 4 x CHUNK_BYTES are scanned whole in one pass (``scan_trace``) into one raw
    batch; if the scanner declines anything in them (a value outside the exactly-typed subset
    it handles, such as a duration written as a string), msgspec reads the whole file instead,
    with its repairs, unless its only fault is that it ends early (``scan_cut_short``: then
    it is scanned cut after its last complete event, ~4x faster than msgspec's path). Larger
    files are scanned in pieces, each made into its tables (``finish``) on the thread that
    scanned it; a declined piece is decoded by msgspec alone.
    ``scanned``: a scan of ``data`` already made (``files.Prefetch``), used when it is the one
    this text calls for.
    """
    if _scan is None or not SCANNER_ENABLED:
        return None
    kind, done = scanned if scanned is not None else ("", None)
    if kind == "followed" and done is not None:
        followed = _followed_batches(data, done, source, warnings, top, finish)
        if followed is not None:
            return followed
        kind, done = "", None  # what the follower saw does not hold: read the text as any other
    if _read_whole(data):  # the document and its events in one pass
        whole = None
        if kind == "trace":
            whole = done
        elif kind != "cut short":
            whole = _scan.scan_trace(data, release_pages=isinstance(data, OwnedMap))
        text = data
        if whole is None:
            # a file cut short is scanned up to its last complete event; anything else is
            # msgspec's, with its repairs, or it says what is wrong (done already: "cut short")
            got = (
                done
                if kind == "cut short"
                else scan_cut_short(_as_bytes(data), Place(0, len(data)), refused=True)
            )
            if got is None:
                return None
            whole, text, note = got
            if note is not None:
                warnings.append(note)
        (_, _, keys), columns = whole
        _top_values(text, keys, top, source, warnings)
        return iter([raw.from_scan(columns, warnings=warnings)])
    # a live cycle's map has its pages unmapped behind each scan (``OwnedMap``): the pieces map
    # them in again, one by one
    doc = done if kind == "document" else _scan.scan_document(data, release_pages=isinstance(data, OwnedMap))
    if doc is None or doc[0] < 0:
        # not a trace, or JSON the scanner does not take as a whole (a file cut short, one bad
        # value): its pieces are scanned all the same, the last decoded with its repairs; but
        # a document of two event lists is msgspec's, whole (its tail would read the second)
        if _event_lists(data) > 1:
            return None
        return _damaged_pieces(data, source, warnings, top, finish, timings)
    lo, hi, keys = doc
    _top_values(data, keys, top, source, warnings)
    pieces = _pieces(lo, _cut_points(data, lo, hi), hi)
    timings.pieces = len(pieces)
    return _scan_pieces(data, pieces, source, warnings, finish)


def _damaged_pieces(
    data: Text,
    source: str,
    warnings: list[str],
    top: dict[str, Any],
    finish: Callable[[pl.DataFrame], _Part],
    timings: Timings,
) -> Iterator[_Part] | None:
    """A large file the scanner does not take whole, read in Kineto's pieces all the same: every
    piece but the last by the scanner (a piece it declines, by msgspec with its repairs), the
    last with the document's tail (``_decode_tail``: where a file cut short is repaired).
    None when it has no such pieces: msgspec reads it whole and says what is wrong.

    A 472 MB trace cut short took 10 s through msgspec alone, against 3 s for the whole file.
    """
    layout = _layout(data)
    head_doc = _head_keys(data, layout) if layout is not None else False
    if layout is None or head_doc is False:
        return None
    start, cuts, _ = layout
    pieces = _pieces(start + 1, cuts, len(data))[:-1]
    timings.pieces = len(pieces) + 1  # and the tail

    def parts() -> Iterator[_Part]:
        yield from _scan_pieces(data, pieces, source, warnings, finish)
        scanned = _scanned_tail(data, layout, head_doc, source, warnings, top, finish)
        if scanned is None:
            scanned = finish(
                raw.from_events(_decode_tail(data, layout, head_doc, source, warnings, top), warnings)
            )
        yield scanned

    return parts()


def _scanned_tail(
    data: Text,
    layout: Layout,
    head_doc: Document | None,
    source: str,
    warnings: list[str],
    top: dict[str, Any],
    finish: Callable[[pl.DataFrame], _Part],
) -> _Part | None:
    """The last piece by the scanner, cut after its last complete event when the file was cut
    short (msgspec's events of that piece and their repairs took 1.3 s of a 70 MB cut file's
    2 s); None when the scanner does not take it even so (``_decode_tail`` then reads it)."""
    if layout[2]:  # a bare list: msgspec's (the scanner reads documents)
        return None
    text, place = _tail_text(data, layout)
    got = scan_cut_short(text, place)
    if got is None:
        return None
    whole, text, note = got
    (_, _, keys), columns = whole
    if head_doc is not None:
        top.update(_top_fields(head_doc))
    _top_values(text, keys, top, source, warnings)
    if note is not None:
        warnings.append(note)
    return _scanned_part(columns, finish, place.shift)


# What a ``_scan.Follower`` scanned while Kineto wrote the file: where the event list starts,
# the pieces (begin, end, columns or None when declined), and where the unscanned events start.
Followed: TypeAlias = tuple[int, list[tuple[int, int, dict[str, Any] | None]], int]
# the head a piece of the event list is given to be scanned as a document of its own
_LIST_HEAD = b'{"traceEvents":['


def _followed_batches(
    data: Text,
    followed: Followed,
    source: str,
    warnings: list[str],
    top: dict[str, Any],
    finish: Callable[[pl.DataFrame], _Part],
) -> Iterator[_Part] | None:
    """The tables of a file a ``_scan.Follower`` scanned while it was written: its pieces, then
    the rest of the events scanned here with the top-level keys after them. None when anything
    does not hold (the caller then reads the text as any other, with its checks and repairs).

    The follower saw neither the head nor the tail whole; together with its pieces they are
    the whole document, checked as ``scan_document`` checks it: the head up to the list's
    ``[`` must be a document whose events list starts there (so "traceEvents" was that key),
    the tail must scan as a list of events closing the document, and no top-level key may
    appear in both (a duplicate ``scan_document`` refuses).
    """
    whole = followed_document(data, followed)
    if whole is None:
        return None
    (head_text, head_keys), (tail_text, tail_keys, tail_columns), scanned = whole
    _top_values(head_text, head_keys, top, source, warnings)
    _top_values(tail_text, tail_keys, top, source, warnings)
    rest = followed[2]
    batches = [(got, 0) for got in scanned] + [(tail_columns, rest - len(_LIST_HEAD))]
    del whole, tail_columns, scanned
    return _ahead(batches, lambda batch: _scanned_part(batch[0], finish, batch[1]))


def followed_document(data: Text, followed: Followed) -> tuple[Any, Any, list[dict[str, Any]]] | None:
    """The document a follower saw, checked whole: the head (its text and top-level key
    spans), the tail (text, keys, and its events scanned) and the pieces' columns; None when
    it does not hold as ``scan_document`` would hold it (see ``_followed_batches``). That it
    holds also says what ``scan_document`` would: the file is JSON our scanner takes."""
    lo, pieces, rest = followed
    scanned = [got for _, _, got in pieces if got is not None]
    if len(scanned) < len(pieces) or not 0 < lo <= rest <= len(data):
        return None
    head = head_document(data[:lo])
    tail = None if head is None else _tail_document(data[rest:], head[1])
    if head is None or tail is None:
        return None
    return head, tail, scanned


def _tail_document(
    rest: bytes, head_keys: dict[str, tuple[int, int]]
) -> tuple[bytes, dict[str, tuple[int, int]], dict[str, Any]] | None:
    """``rest``, the events from one on and the document's end, scanned as a document: its
    text, top-level key spans and events; None when the scanner declines it (a file cut
    short) or it repeats a key of the head (a duplicate ``scan_document`` refuses)."""
    text = _LIST_HEAD + rest
    tail = _scan.scan_trace(text)
    if tail is None or head_keys.keys() & tail[0][2].keys():
        return None
    return text, tail[0][2], tail[1]


_T = TypeVar("_T")
_R = TypeVar("_R")


def _ahead(items: list[_T] | Iterator[_T], work: Callable[[_T], _R]) -> Iterator[_R]:
    """``work`` of each item, in order, done on every core (``SCAN_THREADS``): at most one
    item per thread, plus the one being consumed, is done ahead, so memory stays that of a few
    pieces whatever the file's size. Items are dropped from a list as they are taken; an
    iterator is advanced only as far as that (a ``TextStream``'s pieces, inflated on demand)."""
    threads = min(SCAN_THREADS, len(items)) if isinstance(items, list) else SCAN_THREADS
    taken = _taken(items) if isinstance(items, list) else items
    if threads <= 1:
        yield from map(work, taken)
        return
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="torchscope-scan") as pool:
        ahead: deque[Future[_R]] = deque()
        try:
            for item in taken:
                ahead.append(pool.submit(work, item))
                del item
                if len(ahead) > threads:
                    yield ahead.popleft().result()
            while ahead:
                yield ahead.popleft().result()
        finally:  # the consumer stopped early (an error): do not do what nobody will read
            for future in ahead:
                future.cancel()


def _taken(items: list[_T]) -> Iterator[_T]:
    """The items of ``items``, each removed from it as it is handed out."""
    while items:
        yield items.pop(0)


# -- a file too large to hold whole: read as it inflates -----------------------------------------
def _streamed_parts(
    stream: TextStream,
    source: str,
    warnings: list[str],
    top: dict[str, Any],
    finish: Callable[[pl.DataFrame], _Part],
    timings: Timings,
    ahead: StreamPieces | Exception | None = None,
) -> Iterator[_Part]:
    """The tables of a ``TextStream``, piece by piece as it inflates: its text is never whole.

    The head (up to the event list's ``[``) and the tail (the last events, the list's end and
    the keys after it) are checked as ``followed_document`` checks a followed file's; the
    pieces between are cut where ``_cut_points`` cuts, and scanned on every core while the
    next block inflates. Raises ``Unstreamable`` at anything the scanner declines (the reader
    then reads the file whole, with the repairs only that path makes): a file cut short, a
    layout without Kineto's one event a line, a bare list, a second event list. A piece whose
    values the scanner does not take is decoded by msgspec (``_decoded_cut``).
    ``ahead``: the stream's pieces as the prefetch began them, its first pieces scanned beside
    the imports (``StreamPieces.scan_ahead``), or what stopped it there.
    """
    if _scan is None or not SCANNER_ENABLED:
        raise Unstreamable("the scanner is off")
    if isinstance(ahead, Exception):
        raise ahead
    pieces = ahead if ahead is not None else StreamPieces(stream, CHUNK_BYTES)
    pieces.piece_bytes = CHUNK_BYTES
    pieces.on_cut = lambda done: _estimate_pieces(timings, stream, done)
    head_text, head_keys = pieces.head
    _top_values(head_text, head_keys, top, source, warnings)
    del head_text
    done = 0
    for cut, got in _ahead(pieces.pieces(), _scanned_cut(finish)):
        yield got if got is not None else _decoded_cut(cut, source, warnings, finish)
        done += 1
    timings.pieces = done + 1  # known now: the pieces and the tail
    rest = pieces.tail.pop()
    if _event_lists(rest):  # a second event list after the first: read whole (it says so)
        raise Unstreamable("two event lists")
    if (damage := stream.damage()) is not None:
        warnings.insert(0, damage)  # where reading the file whole says it: first
    whole = _tail_document(rest, head_keys) or _repaired_tail(rest, head_keys, pieces, warnings)
    del rest
    if whole is None:
        raise Unstreamable("a tail the scanner declines")
    text, keys, columns = whole
    del whole
    _top_values(text, keys, top, source, warnings)
    yield _with_raw_args(_scanned_part(columns, finish), text)


def _repaired_tail(
    rest: bytes, head_keys: dict[str, tuple[int, int]], pieces: StreamPieces, warnings: list[str]
) -> tuple[bytes, dict[str, tuple[int, int]], dict[str, Any]] | None:
    """``_tail_document`` of a text that ends early (a writer killed, a copy or gzip stream cut
    short) or goes on after the document (a log line appended): its events up to the last
    complete one, or the document without what follows it, and the warning reading the file
    whole gives, in the file's places. So such a file is not held whole: a 1.3 GB trace cut at
    80% peaked at 2.6 GB against the whole file's 1.25 GB. None when the tail has another
    fault: the whole read repairs it or says what is wrong."""
    size = pieces.tail_at + len(rest)
    text = _LIST_HEAD + rest
    # ``refused``: ``_tail_document`` scanned this text already
    got = scan_cut_short(text, Place(pieces.tail_at - len(_LIST_HEAD), size), refused=True)
    if got is not None:
        whole, cut, note = got
        if note is not None:
            warnings.append(note)
        return _tail_of(cut, whole, head_keys)
    try:
        msgspec.json.decode(text, type=msgspec.Raw)
        return None  # valid JSON the scanner does not take: msgspec's, whole
    except REFUSALS as exc:
        message = str(exc)
    if (at := _document_end(message, text)) is not None:
        whole = _scan.scan_trace(text[:at])
        if whole is None:
            return None
        warnings.append(_not_json_after(len(text) - at))
        return _tail_of(text[:at], whole, head_keys)
    if pieces.separator in rest or not pieces.pieces_end or not ends_early(message, text):
        return None
    # the tail is one event cut short (the last piece ended at the last separator read): the
    # events read end where that piece's did
    empty = _LIST_HEAD + b"]}"
    whole = _scan.scan_trace(empty)
    if whole is None:
        return None
    warnings.append(mid_event_warning(pieces.pieces_end, size))
    return _tail_of(empty, whole, head_keys)


def _tail_of(
    text: bytes, whole: Any, head_keys: dict[str, tuple[int, int]]
) -> tuple[bytes, dict[str, tuple[int, int]], dict[str, Any]] | None:
    """A repaired tail's text, top-level keys and events; None when it repeats a key of the
    head (a duplicate the whole read refuses)."""
    (_, _, keys), columns = whole
    return None if head_keys.keys() & keys.keys() else (text, keys, columns)


def _scanned_cut(
    finish: Callable[[pl.DataFrame], _Part],
) -> Callable[[tuple[Cut, Future[Any] | None]], tuple[Cut, _Part | None]]:
    """Scanning a piece into its tables, on a worker thread (None: the scanner declines it);
    a piece scanned ahead (its ``Future``) is waited for instead."""

    def scanned(item: tuple[Cut, Future[Any] | None]) -> tuple[Cut, _Part | None]:
        cut, early = item
        got = early.result() if early is not None else _scan.scan_events(cut.text, 0, cut.end)
        return cut, None if got is None else _with_raw_args(_scanned_part(got, finish), cut.text)

    return scanned


def _decoded_cut(cut: Cut, source: str, warnings: list[str], finish: Callable[[pl.DataFrame], _Part]) -> _Part:
    """A piece the scanner declines, decoded by msgspec with the repairs of values a whole read
    makes (a duration written as a string: one such value sent a 1.5 GB file to the whole read,
    at 8x the memory). JSON msgspec refuses is no run of events (a second event list, a file
    cut short): ``Unstreamable``, and the whole read says what is wrong."""
    piece = b"[" + cut.text[: cut.end] + b"]"
    try:
        events = _EVENTS_DECODER.decode(piece)
    except msgspec.ValidationError:
        events = _lenient_events(piece, source, warnings)
    except REFUSALS:
        raise Unstreamable("a piece msgspec refuses") from None
    return _with_raw_args(finish(raw.from_events(events, warnings)), piece)


def _lenient_events(piece: bytes, source: str, warnings: list[str]) -> list[Event]:
    """``_lenient``'s events of a piece that is valid JSON (its repairs of the JSON itself would
    cut a piece short without saying it was the file's end: those are ``Unstreamable``)."""
    try:
        _ANY_DECODER.decode(piece)
    except REFUSALS:
        raise Unstreamable("a piece msgspec refuses") from None
    return _lenient(piece, source, warnings)[1]


def _with_raw_args(part: _Part, text: bytes) -> _Part:
    """``part`` with the verbatim args of its events of categories we do not model, cut from
    ``text`` (the one its scan's ``args_at`` count in) while it is still held."""
    ev = part.events
    if ev.height and "args_at" in ev.columns and (ev["kind"] == "other").any():
        part.events = _attach_raw_args(ev, text, part.n_spans, part.warnings)
    return part


def _estimate_pieces(timings: Timings, stream: TextStream, done: int) -> None:
    """How many pieces the stream will make, from how much of the file ``done`` took (for the
    progress bar: the text's size is not known before it is inflated). It only grows, until
    the last piece makes it exact (it went 49, 50, 52, 51, 52, 53, 52 on a 1.25 GB file)."""
    timings.pieces = max(timings.pieces, done + 1, round(done * stream.size / max(stream.used, 1)))


def _scan_piece(data: Text, begin: int, end: int, finish: Callable[[pl.DataFrame], _Part]) -> _Part | None:
    """One piece scanned and made into its tables (None: the scanner declined it). Runs on a
    worker thread: the scan releases the GIL, and so does most of the columnar work."""
    got = _scan.scan_events(data, begin, end, release_pages=isinstance(data, OwnedMap))
    return None if got is None else _scanned_part(got, finish)


def _scanned_part(got: dict[str, Any], finish: Callable[[pl.DataFrame], _Part], args_shift: int = 0) -> _Part:
    """A scan's events made into their tables (``got`` is emptied as it is read); what the
    scan said (numbers read as null) is the part's own warning, so that parts built on
    several threads report in file order."""
    said: list[str] = []
    part = finish(raw.from_scan(got, args_shift, said))
    part.warnings[:0] = said  # first, as the decoder's repairs say theirs before the columns'
    return part


def _scan_pieces(
    data: Text,
    pieces: list[tuple[int, int]],
    source: str,
    warnings: list[str],
    finish: Callable[[pl.DataFrame], _Part],
) -> Iterator[_Part]:
    """The pieces' tables in file order, scanned and built on every core (``SCAN_THREADS``).

    At most one piece per thread, plus the one being consumed, is done ahead, so memory stays
    that of a few pieces whatever the file's size; a piece the scanner declines is decoded by
    msgspec here, on the consuming thread, with its repairs and warnings.
    """
    scanned = _ahead(list(pieces), lambda piece: (piece, _scan_piece(data, *piece, finish)))
    for (begin, end), got in scanned:
        yield _or_decoded(got, data, begin, end, source, warnings, finish)


def _or_decoded(
    got: _Part | None,
    data: Text,
    begin: int,
    end: int,
    source: str,
    warnings: list[str],
    finish: Callable[[pl.DataFrame], _Part],
) -> _Part:
    """The scanned piece's tables, or the piece decoded by msgspec when the scanner declined it."""
    if got is not None:
        return got
    return finish(raw.from_events(_decode_piece(data, begin, end, source, warnings), warnings))


# The top-level keys we keep (``Document``'s), whichever decoder read them; absent = null.
_TOP_KEYS = tuple(k for k in Document.__struct_fields__ if k != "traceEvents")


def _top_values(
    data: Text, keys: dict[str, tuple[int, int]], top: dict[str, Any], source: str, warnings: list[str]
) -> None:
    """The kept top-level keys, decoded from the spans the scanner found in ``data`` (the
    scanner checks their syntax, not the UTF-8 of strings it skips: those are repaired)."""
    for key in _TOP_KEYS:
        if key in keys:
            start, end = keys[key]
            if (value := _decode_repaired(data[start:end], source, warnings)) is not None:
                top[key] = value


def _decode_repaired(
    text: bytes, source: str, warnings: list[str], decoder: msgspec.json.Decoder[Any] = _ANY_DECODER
) -> Any:
    """``text`` decoded, repaired as the reader repairs documents (a few passes at most)."""
    for _ in range(8):
        try:
            return decoder.decode(text)
        except REFUSALS as exc:
            text = _repaired(text, source, warnings, exc)
    raise TraceError(source, "not valid JSON (beyond repair)")


def _top_fields(doc: Document) -> dict[str, Any]:
    return {k: v for k in _TOP_KEYS if (v := getattr(doc, k)) is not None}


def _layout(data: Text) -> Layout | None:
    """Where to cut the event list into pieces of about CHUNK_BYTES, or None to read it whole.

    Returns the index of the list's ``[``, the cuts (see ``_cut_points``), and whether the
    file is a bare list.
    """
    bare = data[:64].lstrip().startswith(b"[")
    if bare:
        start = data.find(b"[")
    else:
        key = data.find(b'"traceEvents"')
        start = data.find(b"[", key) if key >= 0 else -1
    if start < 0:
        return None
    cuts = _cut_points(data, start + 1, len(data))
    return (start, cuts, bare) if cuts else None


def _cut_points(data: Text, lo: int, hi: int) -> list[tuple[int, int]]:
    """Event boundaries about CHUNK_BYTES apart in the list content ``data[lo:hi]``.

    Kineto writes one event per line: ``},`` then a newline and the same indentation before
    every event's ``{``. We cut only at that exact separator (the one between ``[`` and the
    first event), and only when it contains a newline: a raw newline never occurs inside a
    JSON string, and nested objects inside ``args`` sit deeper. Each cut is (index of the
    closing ``}``, index of the next ``{``).

    Only the last line of what precedes the first event is its indentation: torch 2.13's
    Kineto writes a line of spaces after the ``[`` (where 2.11 on CUDA writes none) that no
    later event has, and taking it into the separator left every large CPU cycle of torch
    2.13 in one piece, on one core (a 142 MB one peaked at 401 MB instead of 302 MB).
    """
    first = data.find(b"{", lo, min(hi, lo + 256))  # indentation is a few bytes, not padding
    separator = separator_of(data[lo:first] if first > 0 else b"")
    if separator is None:
        return []
    cuts: list[tuple[int, int]] = []
    pos = lo + CHUNK_BYTES
    while pos < hi - CHUNK_BYTES // 2:
        k = data.find(separator, pos, hi)
        if k < 0:
            break
        cuts.append((k, k + len(separator) - 1))
        pos = k + CHUNK_BYTES
    return cuts


def _pieces(lo: int, cuts: list[tuple[int, int]], hi: int) -> list[tuple[int, int]]:
    """The (start, end) of each piece of the list content ``[lo, hi)`` cut at ``cuts``."""
    starts = [lo] + [begin for _, begin in cuts]
    ends = [close + 1 for close, _ in cuts] + [hi]
    return list(zip(starts, ends, strict=True))


_NOT_SPACE = re.compile(rb"[^ \t\r\n]")


def _decode(
    data: bytes, source: str, warnings: list[str], place: Place | None = None
) -> tuple[dict[str, Any], list[Event]]:
    """Top-level keys and the typed events, in one typed pass (a lenient one if that fails);
    ``place``: where ``data`` sits in the file, when it is a piece of it."""
    first = _NOT_SPACE.search(data)  # (no copy of the text, however much padding leads it)
    if first is None:
        raise TraceError(source, "file is empty" if not data else "file holds only white space")
    head = data[first.start() : first.start() + 64]
    if head[:1] not in (b"{", b"["):
        rest = data[first.start() : first.start() + 8192]
        raise TraceError(source, not_a_document(rest, whole=first.start() + len(rest) == len(data), name=source))
    try:
        if head.startswith(b"["):
            return {}, _EVENTS_DECODER.decode(data)
        doc = _DOC_DECODER.decode(data)
    except msgspec.ValidationError:
        return _lenient(data, source, warnings, place)
    except REFUSALS as exc:
        return _decode(_repaired(data, source, warnings, exc, place), source, warnings, place)
    if doc.traceEvents is None:
        raise TraceError(source, "not a trace: no 'traceEvents' key")
    return _top_fields(doc), doc.traceEvents


def _lenient(
    data: bytes, source: str, warnings: list[str], place: Place | None = None
) -> tuple[dict[str, Any], list[Event]]:
    """Slow path for files the typed decoder rejects: repair event by event."""
    try:
        doc = _ANY_DECODER.decode(data)
    except REFUSALS as exc:
        return _lenient(_repaired(data, source, warnings, exc, place), source, warnings, place)
    top: dict[str, Any] = {}
    if isinstance(doc, dict):
        if "traceEvents" not in doc:
            raise TraceError(source, "not a trace: no 'traceEvents' key")
        items = doc.pop("traceEvents")
        # the same top-level keys as the typed path keeps (``Document``), whatever the events hold
        top = {k: v for k in _TOP_KEYS if (v := doc.get(k)) is not None}
    else:
        items = doc
    if not isinstance(items, list):
        raise TraceError(source, "not a trace: the event list is not a list")
    events: list[Event] = []
    bad_shape = bad_fields = 0
    which: dict[str, None] = {}  # the fields repaired, in first-seen order
    for item in items:
        if not isinstance(item, dict):
            bad_shape += 1
            continue
        try:
            events.append(_EVENT_DECODER.decode(msgspec.json.encode(item)))
            continue
        except (msgspec.ValidationError, msgspec.DecodeError, TypeError, ValueError, OverflowError):
            pass
        repaired: dict[str, None] = {}
        fixed = _repair(item, repaired)
        try:
            events.append(_EVENT_DECODER.decode(msgspec.json.encode(fixed)))
            # an unusable ts or dur is said where the columns are built, with what it cost (the
            # event dropped, read as 0): said here too, it was three lines for two events
            said = [k for k in repaired if k not in ("ts", "dur")]
            bad_fields += bool(said)
            which.update(dict.fromkeys(said))
        except (msgspec.ValidationError, msgspec.DecodeError, TypeError, ValueError, OverflowError):
            bad_shape += 1
    if bad_shape:
        warnings.append(f"skipped {bad_shape} entries of traceEvents that are not events")
    if bad_fields:
        named = ", ".join(list(which)[:6]) + (f" and {len(which) - 6} more" if len(which) > 6 else "")
        warnings.append(f"dropped malformed fields of {bad_fields} events" + (f" ({named})" if named else ""))
    return top, events


def _repair(item: dict[str, Any], which: dict[str, None]) -> dict[str, Any]:
    """Keep the fields of one event that have a usable type; drop the rest. ``which`` gets the
    name of each field dropped or read as text (``ts``, ``args.External id``)."""
    fixed = {k: v for k, v in item.items() if k in Event.__struct_fields__ and k != "args"}
    for key in ("ts", "dur"):
        v = fixed.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or abs(v) >= 2**63):
            fixed.pop(key)
            which[key] = None
    for key in ("cat", "name", "ph", "bp"):
        if key in fixed and not isinstance(fixed[key], str):
            fixed[key] = str(fixed[key]) if fixed[key] is not None else None
            which[key] = None
    for key in ("pid", "tid", "id"):
        v = fixed.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, str))):
            fixed[key] = str(v)
            which[key] = None
        if isinstance(v, int) and not isinstance(v, bool) and abs(v) >= 2**63:
            fixed[key] = str(v)
            which[key] = None
    args = item.get("args")
    if isinstance(args, dict):
        good = {}
        for k, v in args.items():
            try:
                _ARGS_DECODER.decode(msgspec.json.encode({k: v}))
                good[k] = v
            except (msgspec.ValidationError, msgspec.DecodeError, TypeError, ValueError, OverflowError):
                which[f"args.{k}"] = None
        fixed["args"] = good
    return fixed


_ARGS_DECODER = msgspec.json.Decoder(Args, strict=False)


# -- columns ------------------------------------------------------------------------------------
@dataclass
class _Part:
    """The tables of one batch of raw events (one piece of a file, or the whole of it)."""

    events: pl.DataFrame
    memory: pl.DataFrame
    flows: pl.DataFrame
    meta: pl.DataFrame
    n_events: int
    n_spans: int
    other_ph: int
    warnings: list[str]


def _part(batch: pl.DataFrame, ids: Ids) -> _Part:
    """``batch`` made into its tables; the warnings are the part's own, so that parts built on
    several threads report in file order."""
    warnings: list[str] = []
    phase = batch["ph"]
    is_span = phase.is_in(["X", "i", "I"]).to_numpy()
    # each table selects the few columns it needs before taking its rows (no wide copies)
    flows = batch.select(raw.FLOW_COLUMNS).filter(phase.is_in(["s", "f", "t"]))
    metas = batch.select(raw.META_COLUMNS).filter(phase == "M")
    span_rows = None if is_span.all() else np.flatnonzero(is_span)
    n_spans = int(is_span.sum())
    meta = metadata_frame(metas, ids)
    n_events = batch.height
    other_ph = batch.height - n_spans - flows.height - metas.height
    del metas
    events, memory = span_frames(batch, span_rows, ids, warnings)
    return _Part(
        events, memory, flow_frame(flows, ids, warnings), meta, n_events, n_spans, other_ph, warnings
    )


def _text_chunks(
    data: Text,
    source: str,
    warnings: list[str],
    top: dict[str, Any],
    finish: Callable[[pl.DataFrame], _Part],
    timings: Timings,
    scanned: tuple[str, Any] | None,
) -> tuple[Iterator[pl.DataFrame | _Part], Text | None]:
    """The batches of a text held whole, and the text itself when events of categories we do
    not model need their verbatim args from it (None: it can be freed now)."""
    chunks: Iterator[pl.DataFrame | _Part] | None = _scanned_batches(
        data, source, warnings, top, scanned, finish, timings
    )
    if chunks is None:
        data = _as_bytes(data)
        if (lists := _event_lists(data)) > 1:
            warnings.append(
                f'the document has {lists} "traceEvents" keys: read the last one\'s events, as JSON'
                " readers do (the others' are not read)"
            )
        decoded = _decode_chunks(data, source, warnings, top, whole=lists > 1)
        chunks = (raw.from_events(events, warnings) for events in decoded)
    kept_text: Text | None = data  # for the verbatim args of events we do not model
    if _read_whole(data):
        # one piece: decode it first, then free the JSON text before the columns are built,
        # unless events of categories we do not model need their verbatim args from it
        batches = list(chunks)
        chunks = iter(batches)
        raw_batches = [b for b in batches if isinstance(b, pl.DataFrame)]
        # (parts already built, as a follower's pieces, may need it: the text is then a map)
        if len(raw_batches) == len(batches) and not any(may_keep_raw_args(b) for b in raw_batches):
            kept_text = None
        del raw_batches
        del batches  # ``chunks`` alone holds them now, and is deleted before linking
    return chunks, kept_text


def _build(
    box: list[Text | TextStream],
    top: dict[str, Any],
    warnings: list[str],
    timings: Timings,
    source: str,
    scanned: tuple[str, Any] | None = None,
) -> Trace:
    data = box.pop()
    ids = Ids()
    finish = functools.partial(_part, ids=ids)
    chunks: Iterator[pl.DataFrame | _Part]
    if isinstance(data, TextStream):  # each piece's verbatim args are cut from it as it is read
        ahead = scanned[1] if scanned is not None and scanned[0] == "stream" else None
        chunks, kept_text = _streamed_parts(data, source, warnings, top, finish, timings, ahead), None
    else:
        chunks, kept_text = _text_chunks(data, source, warnings, top, finish, timings, scanned)
    del data
    return_free_memory()  # the scanner's buffers and (when not kept) the JSON text
    ev_parts: list[pl.DataFrame] = []
    mem_parts: list[pl.DataFrame] = []
    flow_parts: list[pl.DataFrame] = []
    meta_parts: list[pl.DataFrame] = []
    n_events = n_spans = other_ph = 0
    before = len(warnings)
    for chunk in chunks:
        timings.mark("decode")
        part = chunk if isinstance(chunk, _Part) else finish(chunk)
        del chunk
        warnings.extend(part.warnings)
        ev_parts.append(part.events.with_columns(pl.col("raw_row") + n_spans))
        timings.piece(len(ev_parts))
        mem_parts.append(part.memory)
        flow_parts.append(part.flows)
        meta_parts.append(part.meta)
        n_events += part.n_events
        n_spans += part.n_spans
        other_ph += part.other_ph
        del part
        timings.mark("columns")
    warnings[before:] = merge_counted(warnings[before:])  # a large file's pieces say each once
    if other_ph:
        warnings.append(f"skipped {other_ph} events with phases other than X, i, s, f, t, M")
    if not n_events:
        warnings.append("the trace has no events")
    ev = pl.concat(ev_parts, how="diagonal_relaxed") if len(ev_parts) > 1 else ev_parts[0]
    memory = pl.concat(mem_parts, how="diagonal_relaxed") if len(mem_parts) > 1 else mem_parts[0]
    flow_df = pl.concat(flow_parts, how="diagonal_relaxed") if len(flow_parts) > 1 else flow_parts[0]
    del ev_parts, mem_parts, flow_parts
    meta = _meta(top, source)
    metas = pl.concat(meta_parts).unique(["what", "pid", "tid"], keep="last")
    if (tool := _tool_threads(meta)) is not None:
        pid, tids = tool
        ours = (pl.col("pid") == pid) & pl.col("tid").is_in(tids)
        memory, flow_df, metas = (df.filter(~ours) for df in (memory, flow_df, metas))
        ev = ev.filter(~(ours | _tool_frames_without_tid(ev, pid)))
    threads = threads_frame(metas, ev, ids)
    del chunks
    if kept_text is not None and ev.height and (ev["kind"] == "other").any():
        ev = _attach_raw_args(ev, kept_text, n_spans, warnings)
    ev = ev.drop("args_at", strict=False)  # 8 bytes an event: gone before linking
    del kept_text  # the JSON text is not needed any more: free it before linking
    return_free_memory()
    timings.mark("columns")

    box_ev = [ev]
    del ev
    ev, memory, flows = derive(in_id_order(box_ev), memory, flow_df)
    del flow_df
    return_free_memory()  # derive's temporaries (24 MB of 366k events' RSS after the read)
    _check_clocks(ev, warnings)
    _check_step_names(ev, warnings)
    if said_cut(warnings):
        cut_before_device_work(ev, meta, warnings)
    timings.mark("derive")
    if warnings:
        meta = TraceMeta(**{**meta.__dict__, "warnings": tuple(warnings)})
    return Trace(
        events=conform(ev, EVENTS_SCHEMA),
        memory=conform(memory, MEMORY_SCHEMA),
        flows=conform(flows, FLOWS_SCHEMA) if isinstance(flows, pl.DataFrame) else _conformed(flows),
        threads=conform(threads, THREADS_SCHEMA),
        meta=meta,
    )


def _conformed(later: Later) -> Later:
    """The flows ``derive`` left to bind when first read, in their schema."""
    return lambda events: conform(later(events), FLOWS_SCHEMA)


def _check_step_names(ev: pl.DataFrame, warnings: list[str]) -> None:
    """Say which ``ProfilerStep#`` annotations are no steps (``schema.step_number``): their
    number is not a whole number 0..2^31-1. They were read as step -1294967296, or ended the
    report with a cast error. And say which numbers occur more than once: each is one step,
    its first span (a trace holding steps 0-2 twice read "3 steps" and nothing else)."""
    annotated = step_annotations(ev)
    repeated = annotated.drop_nulls("step").group_by("step").len().filter(pl.col("len") > 1).sort("step")
    if repeated.height:
        numbers = ", ".join(f"#{n}" for n in repeated["step"].head(3).to_list())
        more = " …" if repeated.height > 3 else ""
        extra = int(repeated["len"].sum()) - repeated.height
        warnings.append(
            f"{repeated.height:,} ProfilerStep number{'s' if repeated.height != 1 else ''} ({numbers}{more})"
            f" {'occur' if repeated.height != 1 else 'occurs'} more than once: each number is one step,"
            f" its first span; the {extra:,} later span{'s are' if extra != 1 else ' is'} in no step"
        )
    bad = annotated.filter(pl.col("step").is_null())["name"].cast(pl.String)
    if bad.len():
        names = ", ".join(repr(n) for n in bad.unique(maintain_order=True).head(3).to_list())
        warnings.append(
            f"{bad.len():,} ProfilerStep annotation{'s' if bad.len() != 1 else ''} ({names})"
            f" {'have' if bad.len() != 1 else 'has'} no step number in 0..2147483647, so"
            f" {'they are not steps' if bad.len() != 1 else 'it is not a step'}"
        )


def _check_clocks(ev: pl.DataFrame, warnings: list[str]) -> None:
    """Warn when device timestamps look offset from host ones (work starting before its launch)."""
    launcher = ev["launcher"].to_numpy()
    dev = np.flatnonzero(launcher >= 0)
    if dev.size == 0:
        return
    start = ev["start_ns"].to_numpy()
    early = start[launcher[dev]] - start[dev]
    bad = early > 0
    if bad.sum() > max(1, dev.size // 100):
        warnings.append(
            f"{int(bad.sum())} of {dev.size} device events start before the call that launched them"
            f" (median {int(np.median(early[bad])) / 1e3:.1f} us early): host and device clocks disagree"
        )


def _raw_args_events(text: bytes) -> list[RawArgsEvent] | None:
    """The events of ``text`` with their verbatim ``args``; a text the reader had to repair is
    repaired the same way again, so that its events keep their args."""
    first = _NOT_SPACE.search(text[:4096])
    bare = first is not None and first.group(0) == b"["
    try:
        got = _decode_repaired(text, "", [], _RAW_ARGS_DECODER if bare else _RAW_ARGS_DOC_DECODER)
    except (msgspec.ValidationError, TraceError):
        return None
    return got if bare else (got.traceEvents or [])  # type: ignore[no-any-return]


def _args_text(text: Text, at: int) -> bytes:
    """The args value at ``at``, as JSON: NaN and inf written null, as the decoder's repairs
    write them (the scanner takes them where a number goes, and counted them already)."""
    end, nonfinite = _scan.value_end(text, at)
    return repair_values(text[at:end])[0] if nonfinite else text[at:end]


def _attach_raw_args(ev: pl.DataFrame, text: Text, n_spans: int, warnings: list[str]) -> pl.DataFrame:
    """Keep the verbatim ``args`` of events whose category we do not model (the decoders skip
    the keys they do not model without reading them: bytes there that are not UTF-8 surface
    here, and are replaced by U+FFFD with a warning).

    The scanner noted where each event's args start (``args_at``): those are cut from the text.
    Events msgspec decoded (-1) need the whole document decoded again (``_raw_args_events``),
    which on a 143 MB trace took a third of its load: only a declined document pays for that.
    """
    other = ev.filter((pl.col("kind") == "other") & pl.col("args_at").is_not_null())
    if not other.height:
        return ev
    rows, starts = other["raw_row"].to_list(), other["args_at"].to_list()
    del other
    verbatim = {r: _args_text(text, at) for r, at in zip(rows, starts, strict=True) if at >= 0}
    if -1 in starts:
        raw = _raw_args_events(_as_bytes(text))
        kept = None if raw is None else [r for r in raw if r.ph == "X" or r.ph == "i" or r.ph == "I"]
        if kept is not None and len(kept) == n_spans:
            verbatim.update((r, bytes(kept[r].args)) for r, at in zip(rows, starts, strict=True) if at < 0)
        else:  # never silently: the events are kept, their args are not
            lost = starts.count(-1)
            warnings.append(
                f"could not keep the args of {lost:,} event{'s' if lost != 1 else ''} of categories"
                " torchscope does not model (the document needed repairs)"
            )
    texts = {}
    invalid = 0
    for r, a in verbatim.items():
        if len(a):
            try:
                texts[r] = a.decode()
            except UnicodeDecodeError:
                texts[r] = a.decode("utf-8", "replace")
                invalid += 1
    if invalid:
        warnings.append(f"replaced bytes that are not UTF-8 with U+FFFD in the args of {invalid:,} events")
    # placed by gathering from the few texts, with a null for every other row: ``replace_strict``
    # with a null default left those rows' string views pointing at a text, and Polars' string
    # functions (``str.len_chars``) then read that text once per null row (one 4 MB args value
    # among 123k events: 6.3 s in the dashboard's details, 50 MB: minutes)
    where = np.full(n_spans, len(texts), dtype=np.int64)
    where[list(texts)] = np.arange(len(texts))
    values = pl.Series([*texts.values(), None], dtype=pl.String)
    return ev.with_columns(values.gather(where[ev["raw_row"].to_numpy()]).alias("args"))


# -- metadata -----------------------------------------------------------------------------------
def _tool_threads(meta: TraceMeta) -> tuple[int, list[int]] | None:
    """The process and thread ids of ``torchscope run``'s own threads
    (``dialect.TOOL_THREADS_KEY``), or None when the trace names none (or names them badly).

    The sampler and the memory-cap watcher are the tool, not the script: with ``with_stack``
    their lock waits were most of a cycle's Python events and of its self time."""
    got = meta.extra.get(TOOL_THREADS_KEY)
    if not isinstance(got, dict):
        return None
    pid, tids = got.get("pid"), got.get("tids")
    if not isinstance(pid, int) or not raw.is_i64(pid):
        return None
    if not isinstance(tids, list) or not tids or not all(map(raw.is_i64, tids)):
        return None
    return pid, tids


def _tool_frames_without_tid(ev: pl.DataFrame, pid: int) -> pl.Expr:
    """The frames of a tool thread that made no call during the cycle: torch writes them with
    tid 0, with any other idle thread's; ours are told by where they are (``runner.tool_thread``),
    their distinct names tested, never each row's."""
    silent = (pl.col("pid") == pid) & (pl.col("tid") == 0) & (pl.col("kind") == "python_function")
    names = ev.filter(silent)["name"].unique()
    ours = names.filter(names.cast(pl.String).str.contains(TOOL_FRAME_PATTERN))
    return silent & pl.col("name").is_in(ours.implode()) if ours.len() else pl.lit(False)


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
