"""A large file's event list cut into pieces as it inflates, the first ones scanned at once.

A ``files.TextStream`` (a text over 64 MB) is read piece by piece: its head up to the event
list's ``[``, then pieces of about ``piece_bytes`` cut after the last event read so far, then
the tail. Nothing here needs Polars, so the prefetch's thread starts this while the reader's
modules import (~0.19 s, most of it Polars' own import): it inflates the first pieces and
scans them (``_scan.scan_events``, on one more thread: zlib and the scanner release the GIL),
where it only inflated before, and the reader takes over the rest (``reader._streamed_parts``).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, NamedTuple

from torchscope.errors import TraceError
from torchscope.trace.files import TextStream, Unstreamable

try:  # our C scanner (optional: without it a stream is read whole, by msgspec)
    from torchscope.trace import _scan
except ImportError:  # pragma: no cover - depends on the build
    _scan = None  # type: ignore[assignment]

Keys = dict[str, tuple[int, int]]


class Cut(NamedTuple):
    """A piece of a streamed event list: events from ``text[0]`` to ``text[end]``."""

    text: bytes
    end: int


def separator_of(lead: bytes) -> bytes | None:
    """The bytes between two events, from ``lead``, those between the list's ``[`` and its first
    event: ``},``, the line end (CR LF in a file written on Windows: such a file was read whole),
    then the indentation of the last line of ``lead``; None when ``lead`` is not a line end
    and indentation (events written on one line: nowhere safe to cut)."""
    if b"\n" not in lead or lead.strip():
        return None
    line_end = b"\r\n" if b"\r\n" in lead else b"\n"
    return b"}," + line_end + lead[lead.rfind(b"\n") + 1 :] + b"{"


def head_document(prefix: bytes) -> tuple[bytes, Keys] | None:
    """``prefix``, a document up to its event list's ``[``, closed and scanned: its text and
    top-level key spans; None when the scanner declines it or "traceEvents" is not that
    list's key."""
    text = prefix + b"]}"
    head = _scan.scan_document(text)
    if head is None or head[0] != len(prefix) or head[1] != len(prefix):
        return None
    return text, head[2]


class StreamPieces:
    """The head, pieces and tail of a ``TextStream``'s event list, in file order.

    Built from the stream's first blocks (the head: raises ``Unstreamable`` when the scanner
    declines it or the events are not one a line, and ``TraceError`` when the file cannot be
    read). ``scan_ahead`` cuts and scans the first pieces early; ``pieces`` hands out every
    piece once, with its scan when one was made (a ``Future``), and the tail is in ``tail``
    after the last. A failure met while scanning ahead is raised where ``pieces`` reaches it.
    """

    def __init__(self, stream: TextStream, piece_bytes: int) -> None:
        self.piece_bytes = piece_bytes  # the reader sets its own when it takes over
        self.on_cut: Callable[[int], None] | None = None  # told how many pieces are cut
        self.tail: list[bytes] = []  # what follows the last piece, once the blocks end
        # where, in the text, the tail begins, and the last piece's events end (after its last
        # "}"): the places a warning about a text cut short names
        self.tail_at = 0
        self.pieces_end = 0
        self._stream = stream
        try:
            self.head, rest, separator = self._head()
        except BaseException:
            stream.close()  # the reader reads the file whole
            raise
        self.separator = separator
        self._cuts = self._cut(rest, separator)
        self._early: deque[tuple[Cut, Future[Any] | None]] = deque()
        self._failed: Exception | None = None

    def _head(self) -> tuple[tuple[bytes, Keys], bytes, bytes]:
        """The document's head (its text closed after the list's ``[``, and its top-level
        keys), the text from the first event on, and the separator between two events."""
        text = b""
        while (more := self._stream.extend(text)) is not None:
            text = more
            key = text.find(b'"traceEvents"')
            start = text.find(b"[", key) if key >= 0 else -1
            first = text.find(b"{", start + 1, start + 257) if start >= 0 else -1
            if first >= 0:
                break
            if len(text) > 4 * self.piece_bytes:
                break
        else:
            raise Unstreamable("no event list")
        separator = separator_of(text[start + 1 : first]) if first >= 0 else None
        if separator is None:
            raise Unstreamable("not one event a line")  # as ``reader._cut_points`` would not cut it
        head = head_document(text[: start + 1])
        if head is None:
            raise Unstreamable("a head the scanner declines")
        self.tail_at = first
        return head, text[first:], separator

    def _cut(self, text: bytes, separator: bytes) -> Iterator[Cut]:
        """Pieces of ``piece_bytes`` or more, each ending at the last ``separator`` in what
        has been read; what follows the last one when the blocks end goes into ``tail``. Each
        block is read after the text left from the one before (``TextStream.extend``: our
        filler writes it there without the GIL, where joining the two held it)."""
        done = 0
        try:
            while (more := self._stream.extend(text)) is not None:
                text = more
                del more
                if len(text) < self.piece_bytes:
                    continue
                k = text.rfind(separator)
                if k < 0:
                    if len(text) > 16 * self.piece_bytes:  # one event this large is not Kineto's
                        raise Unstreamable("no event boundary")
                    continue
                yield Cut(text, k + 1)
                self.pieces_end = self.tail_at + k + 1
                self.tail_at += k + len(separator) - 1
                text = text[k + len(separator) - 1 :]
                done += 1
                if self.on_cut is not None:
                    self.on_cut(done)
        finally:  # given up on (``Unstreamable``): the reader reads the file whole
            self._stream.close()
        self.tail.append(text)

    def scan_ahead(self, up_to: int, stop: threading.Event) -> None:
        """Cut pieces until ``up_to`` bytes of text are held or ``stop`` is set, each scanned on
        one more thread as soon as it is cut, while the next one inflates here."""
        held = 0
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="torchscope-scan-ahead")
        try:
            for cut in self._cuts:
                scan = None if stop.is_set() else pool.submit(_scan.scan_events, cut.text, 0, cut.end)
                self._early.append((cut, scan))
                held += len(cut.text)
                if held >= up_to or stop.is_set():
                    break
        except (Unstreamable, TraceError) as exc:  # raised where ``pieces`` reaches it
            self._failed = exc
        finally:
            pool.shutdown(wait=False)  # the scans go on; whoever takes a piece waits for its own

    def pieces(self) -> Iterator[tuple[Cut, Future[Any] | None]]:
        """Every piece in order, once, with its scan when ``scan_ahead`` made one."""
        while self._early:
            yield self._early.popleft()
        if self._failed is not None:
            raise self._failed
        for cut in self._cuts:
            yield cut, None
