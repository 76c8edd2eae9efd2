"""Types of the optional C scanner ``torchscope.trace._scan`` (built from ``_scan.c``).

Buffers are ``bytes`` or ``Block`` (equal when their bytes are), in native byte order, to read
with ``np.frombuffer``:
str/raw columns ``(codes int32, uniques)``, code -1 missing (for ``ph``: -1 means "");
int ``(values int64, present uint8)``; float ``float64`` with NaN missing;
intstr ``(values int64, kind uint8 0 missing/1 int/2 str, codes int32, uniques)``;
num (ts, dur) ``(ints int64, floats float64, kind uint8 0 missing/1 int/2 float)``, where
floats is the value as a double for ints too and NaN when missing.
``args_at`` (an int column, not a key) is where each event's ``args`` object starts in ``data``.
"""

import mmap

class Block:
    """A buffer handed over without a copy (``nest``'s results; the columns, on Linux): read-only,
    freed with its last reference, equal to any buffer of the same bytes."""

    def __buffer__(self, flags: int, /) -> memoryview: ...

def scan_document(
    data: bytes | mmap.mmap, *, release_pages: bool = False
) -> tuple[int, int, dict[str, tuple[int, int]]] | None:
    """Bounds of the inside of ``traceEvents`` (-1, -1 when absent; the content of a bare event
    list) and the raw value span of every other top-level key; None outside our subset.
    ``release_pages``: ``data`` is a read-only map of a file the caller owns, whose event list's
    pages are unmapped behind the scan (never for memory Python allocated)."""

def scan_events(
    data: bytes | mmap.mmap, lo: int, hi: int, *, release_pages: bool = False
) -> dict[str, object] | None:
    """Columns of the comma-separated event objects in ``data[lo:hi]``: ``"n"`` plus one entry
    per column (None when no event has the field); None outside our subset. ValueError when
    the bounds fall outside ``data``. ``release_pages``: as for ``scan_document``, for the
    pages of ``data[lo:hi]``."""

def scan_trace(
    data: bytes | mmap.mmap, *, release_pages: bool = False
) -> tuple[tuple[int, int, dict[str, tuple[int, int]]], dict[str, object]] | None:
    """``scan_document`` and ``scan_events`` of its whole event list in one pass; None when
    either would decline, or when the document has no ``traceEvents``. ``release_pages``: as for
    ``scan_document``."""

def value_end(data: bytes | mmap.mmap, at: int, /) -> tuple[int, int]:
    """Where the JSON value starting at ``data[at]`` ends, and how many words JSON has no
    number for (NaN, inf, ...) it holds; ValueError when there is none."""

def nest(order: object, start: object, end: object, pid: object, tid: object) -> tuple[Block, Block, Block]:
    """The host call tree in one pass: ``order`` lists host rows thread by thread in id order;
    ``start``/``end``/``pid``/``tid`` hold every row's (int64 arrays). Returns each row's parent
    (-1 none), depth, and the union of its children's intervals clipped to its end."""

class Follower:
    """A native thread that scans the events of a Kineto JSON file while it is written (POSIX
    only: absent elsewhere). ``writing`` is the name Kineto writes to (its temporary), ``path``
    the one it renames it to; pieces are cut about ``chunk`` bytes apart at the separator
    between two events, as the reader cuts them."""

    def __init__(self, writing: str, path: str, chunk: int) -> None: ...
    def complete(self) -> None:
        """Say that the file is complete: the thread scans the pieces left and ends, without
        being waited for (``finish`` waits). Dropping the follower cancels the thread."""
    def finish(self) -> tuple[int, list[tuple[int, int, dict[str, object] | None]], int] | None:
        """Once the file is complete: wait for the thread and hand over ``(lo, pieces, rest)``:
        the event list starts at ``lo``, each piece is ``(begin, end, columns)`` as
        ``scan_events(data, begin, end)`` gives them, and the events not scanned start at
        ``rest``. None when no piece was scanned or the follow gave up (a head it does not
        handle, a piece the scanner declines); a second call says None."""
