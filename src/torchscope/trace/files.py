"""A trace file's bytes: only a regular file, inflated when gzip, read early when it helps.

``torchscope.load`` starts reading, inflating and scanning the file (``Prefetch``) on a thread
before it imports the reader and its columnar stack: inflating and our C scanner release the
GIL, and importing polars and NumPy (~0.15 s) holds it while doing little else, so they overlap
instead of adding up. The scanner needs no polars (it returns plain buffers); the reader turns
them into columns once its imports are done. This module therefore imports nothing beyond the
standard library, our error type and the scanner. A file too large to hold whole is a
``TextStream`` instead: its first block is read there, the rest as its pieces are cut
(``stream_pieces``: the first of them on the prefetch's thread, when the scanner is built).
"""

from __future__ import annotations

import errno
import gzip
import mmap
import os
import stat
import threading
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from torchscope.errors import TraceError

try:  # our C scanner (optional: without a compiler the reader decodes with msgspec)
    from torchscope.trace import _scan
except ImportError:  # pragma: no cover - depends on the build
    _scan = None  # type: ignore[assignment]
try:  # a large file's blocks made without the GIL (optional: Python's zlib without it)
    from torchscope.trace import _inflate
except ImportError:  # pragma: no cover - depends on the build
    _inflate = None  # type: ignore[assignment]

# Texts up to this size are scanned whole, in one pass; larger ones in pieces (the reader's
# ``_read_whole``, which decides: a scan made for the other case is not used). A larger file
# is not read whole at all: it is a ``TextStream``.
WHOLE_BYTES = 64 * 1024 * 1024
# the text a ``TextStream`` hands out at a time, and the compressed bytes it reads at a time
BLOCK_BYTES = 16 * 1024 * 1024
_RAW_BYTES = 4 * 1024 * 1024
_GZIP_MAGIC = b"\x1f\x8b"


def read_bytes(path: str | Path, warnings: list[str] | None = None) -> bytes:
    """The JSON text of ``path``, inflated when it is gzip (by magic number, not by name).

    Only a regular file is read: a FIFO or a device is refused at once (opened without
    blocking, checked on the descriptor), never waited on. A gzip stream cut short (a copy
    interrupted, a writer killed) or followed by bytes that are not gzip is an error, unless
    ``warnings`` is given: then what inflates is returned and a warning says what was lost.
    """
    p = Path(path)
    return _text_of(_read_regular(p), p, warnings)


def _text_of(raw: bytes, p: Path, warnings: list[str] | None) -> bytes:
    """The JSON text of the bytes ``raw`` of the file ``p`` (``read_bytes``)."""
    if raw[:2] == _GZIP_MAGIC:
        try:
            raw = _gunzip(raw)
        except (OSError, EOFError, zlib.error) as exc:
            salvaged = _inflate_salvage(raw) if warnings is not None else None
            if salvaged is None or warnings is None:
                if "incorrect data check" in str(exc) or "incorrect length check" in str(exc):
                    # inflated to its end, and its checksum or length does not match
                    raise TraceError(
                        str(p), "corrupt gzip: what it inflates to does not match its checksum (a damaged copy?)"
                    ) from None
                raise TraceError(str(p), f"corrupt or truncated gzip ({exc})") from None
            raw, problem = salvaged
            warnings.append(problem)
    # a UTF-8 byte order mark, as Windows editors and PowerShell's Out-File write: not JSON
    # text, but nothing is lost by reading past it (a copy, on this rare path only)
    return raw[3:] if raw[:3] == b"\xef\xbb\xbf" else raw


_NOT_REGULAR = (
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _read_regular(p: Path) -> bytes:
    """The bytes of the regular file ``p``; a one-line TraceError for anything else."""
    with _open_regular(p) as f:
        return _read_rest(f, p)


def _unreadable(p: Path, exc: OSError) -> TraceError:
    """The one-line error for a file the OS would not let us open or read."""
    return TraceError(str(p), f"cannot read file: {exc.strerror or exc}")


def _read_rest(f: BinaryIO, p: Path) -> bytes:
    """The rest of the open file ``p``; a one-line TraceError when it cannot be read."""
    try:
        return f.read()
    except OSError as exc:
        raise _unreadable(p, exc) from None


def _open_regular(p: Path) -> BinaryIO:
    """The regular file ``p`` opened to read; a one-line TraceError for anything else."""
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except IsADirectoryError:
        raise TraceError(str(p), "is a directory; use torchscope.load() for log directories") from None
    except OSError as exc:
        raise _unreadable(p, exc) from None
    # checked on the descriptor before wrapping it: ``open(fd)`` of a directory raises
    # IsADirectoryError naming the descriptor number, not the file
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        if stat.S_ISDIR(mode):
            raise TraceError(str(p), "is a directory; use torchscope.load() for log directories")
        what = next((name for test, name in _NOT_REGULAR if test(mode)), "not a regular file")
        raise TraceError(str(p), f"is {what}, not a trace file")
    return open(fd, "rb", closefd=True)


def _gunzip(raw: bytes) -> bytes:
    """Inflate gzip into one buffer sized from the trailer, so no growing copies (peak memory).

    The trailer's ISIZE is the length of the last member mod 2**32; a file of several members
    (or over 4 GB, or truncated) does not match it and goes through ``gzip.decompress``.
    """
    size = int.from_bytes(raw[-4:], "little")
    if not 0 < size <= 100 * len(raw):  # a truncated file's "trailer" is compressed data
        return gzip.decompress(raw)
    text = zlib.decompress(raw, wbits=31, bufsize=size)
    if len(text) != size:
        return gzip.decompress(raw)
    return text


def _inflate_salvage(raw: bytes) -> tuple[bytes, str] | None:
    """What a damaged gzip file inflates to, and a warning saying what was lost: a stream that
    ends early, or gzip members followed by bytes that are not gzip (a file appended to, a
    copy padded). None when not even the first member inflates."""
    parts: list[bytes] = []
    rest = raw
    while True:
        stream = zlib.decompressobj(wbits=31)
        try:
            parts.append(stream.decompress(rest))
        except zlib.error:
            if not parts:
                return None
            problem = f"the gzip stream is followed by {len(rest):,} bytes that do not inflate"
            break
        if not stream.eof:
            if not any(parts):
                return None
            problem = _TRUNCATED
            break
        rest = stream.unused_data
        if not rest.strip(b"\x00"):  # padding with zeros (as tar and some copiers write)
            return b"".join(parts), f"the gzip stream is followed by {len(rest):,} zero bytes of padding"
        if rest[:2] != b"\x1f\x8b":
            problem = _not_gzip_after(len(rest))
            break
    text = b"".join(parts)
    return text, _read_of(problem, len(text))


_TRUNCATED = "the gzip stream is truncated"


def _not_gzip_after(count: int) -> str:
    return f"the gzip stream is followed by {count:,} bytes that are not gzip"


def _read_of(problem: str, inflated: int) -> str:
    """A damaged gzip stream's warning: what is wrong with it, and how much text was read, as
    reading it whole (``_inflate_salvage``) and as a stream (``TextStream.damage``) say it."""
    return f"{problem}: read the {inflated:,} bytes it inflates to"


class Unstreamable(Exception):
    """A ``TextStream`` met something only the whole text's reader handles (a damaged gzip
    stream, padding after it, a layout the pieces cannot be cut from): the reader reads the
    file whole instead, with its repairs and warnings."""


class TextStream:
    """The text of a file too large to hold at once, handed out a block at a time.

    A 1.2 GB trace read whole held its text and the columns built from it at once (2.1 GB
    peak; a 10 GB one needs its 10 GB of text besides), and inflated it all before scanning
    any of it. The reader cuts these blocks into pieces between two events and scans them
    while the next block inflates (``zlib`` and our scanner both release the GIL), so only a
    few pieces of text are alive at any time. Only a clean stream is handed out: anything
    unusual raises ``Unstreamable`` while reading, and the reader starts over with
    ``read_bytes``.
    """

    def __init__(self, path: Path, f: BinaryIO, gzipped: bool, block: int) -> None:
        self.path = path
        self.size = os.fstat(f.fileno()).st_size  # bytes on disk (compressed, when gzip)
        self.read = 0  # of which read so far
        self.used = 0  # of which inflated so far (read less what waits to be): the progress
        self.text_bytes = 0  # the text handed out so far (a byte order mark included)
        # a gzip stream cut short, or followed by bytes that are not gzip: the text ends with
        # what inflated, and ``damage`` says so in the words of the whole file's read
        self._truncated = False
        self._after = 0
        self._after_zeros = False
        self._file = f
        self._block = block
        # our C filler, which writes each block after the text it continues without the GIL
        # (``_inflate.c`` says why); Python's zlib and a join without it
        self._filler = None if _inflate is None else _inflate.Filler(gzipped)
        self._raw_size = _RAW_BYTES if gzipped else block
        self._blocks = (
            None if self._filler is not None else self._inflated(block) if gzipped else self._plain(block)
        )
        # the first block, read here (on the prefetch's thread, beside the imports): a stream
        # that fails at once is no stream (``open_text`` reads the file whole)
        first = self._fill(b"") or b""
        self._first: bytes | None = first[3:] if first[:3] == b"\xef\xbb\xbf" else first

    def extend(self, text: bytes) -> bytes | None:
        """``text`` followed by the text's next block (a piece's text is the rest of the block
        before it, then this one), or None when the text is done; the file is closed then, or
        when reading it fails."""
        first, self._first = self._first, None
        if first is not None:
            return text + first if text else first
        try:
            got = self._fill(text)
        except BaseException:
            self.close()
            raise
        if got is None:
            self.close()
        return got

    def blocks(self) -> Iterator[bytes]:
        """The text's blocks in order (once); the file is closed when they end."""
        if self._first is None:
            raise RuntimeError("TextStream.blocks() called twice")
        try:
            while (block := self.extend(b"")) is not None:
                yield block
        finally:
            self.close()

    def close(self) -> None:
        """Close the file (a stream given up on: the reader reads the file whole instead)."""
        self._file.close()

    def damage(self) -> str | None:
        """What a damaged gzip stream lost, once the text is done, worded as reading the file
        whole words it (``_inflate_salvage``): a stream cut short, or bytes after it that are
        not gzip; None for a clean stream, or one followed by zeros (padding, which Python's
        gzip reads without a word)."""
        if self._truncated:
            return _read_of(_TRUNCATED, self.text_bytes)
        if self._after and not self._after_zeros:  # zeros are padding, as Python's gzip reads it
            return _read_of(_not_gzip_after(self._after), self.text_bytes)
        return None

    def _fill(self, text: bytes) -> bytes | None:
        """``text`` and the next block after it (None at the text's end)."""
        if self._filler is None:
            assert self._blocks is not None
            block = next(self._blocks, None)
            if block is not None:
                self.text_bytes += len(block)
            return None if block is None else text + block if text else block
        try:
            got = self._filler.fill(text, self._block, self._more)
        except _inflate.InflateError as exc:
            raise Unstreamable(str(exc)) from None
        self.used = self.read - self._filler.unconsumed
        if got is None:
            self._truncated = self._filler.truncated
            self._after, self._after_zeros = self._filler.after, self._filler.after_zeros
        else:
            self.text_bytes += len(got) - len(text)
        return got

    def _more(self) -> bytes:
        return self._raw(self._raw_size)

    def _raw(self, size: int = _RAW_BYTES) -> bytes:
        """Up to ``size`` more bytes of the file (b"" at its end)."""
        try:
            got = self._file.read(size)
        except OSError as exc:
            raise _unreadable(self.path, exc) from None
        self.read += len(got)
        return got

    def _plain(self, block: int) -> Iterator[bytes]:
        while got := self._raw(block):
            self.used = self.read
            yield got

    def _inflated(self, block: int) -> Iterator[bytes]:
        """Inflate member after member, ``block`` bytes of text at most at a time (what our
        filler does, without it): a stream cut short, or bytes after the last member that are
        not gzip, end the text (``damage``)."""
        inflater = zlib.decompressobj(wbits=31)
        pending = b""
        while True:
            if not pending:
                pending = self._raw()
                if not pending:
                    self._truncated = True
                    return
            try:
                out = inflater.decompress(pending, block)
            except zlib.error as exc:
                raise Unstreamable(f"corrupt gzip ({exc})") from None
            pending = inflater.unconsumed_tail
            self.used = self.read - len(pending)
            if out:
                yield out
            if inflater.eof:
                pending = inflater.unused_data or self._raw()
                if not pending:
                    return
                if pending[:2] != _GZIP_MAGIC:  # padding or bytes that are not gzip: left out
                    self._after_zeros = True
                    while pending:
                        self._after += len(pending)
                        self._after_zeros = self._after_zeros and not pending.strip(b"\x00")
                        pending = self._raw()
                    return
                inflater = zlib.decompressobj(wbits=31)


def open_text(
    path: str | Path, warnings: list[str], whole_up_to: int | None = None, block: int | None = None
) -> bytes | TextStream:
    """``read_bytes(path, warnings)``, or a ``TextStream`` when the text is over ``whole_up_to``
    bytes (default ``WHOLE_BYTES``): a plain file by its size, a gzip file by the size its
    trailer gives (the last member's, mod 2**32) or a compressed size that large (the trailer
    then may have wrapped). ``block``: the stream's (default ``BLOCK_BYTES``)."""
    whole_up_to = WHOLE_BYTES if whole_up_to is None else whole_up_to
    p = Path(path)
    f = _open_regular(p)  # once: the stream keeps it, or the whole text is read from it
    handed = False
    try:
        try:
            size = os.fstat(f.fileno()).st_size
            gzipped = f.read(2) == _GZIP_MAGIC
            if gzipped and size > whole_up_to // 1024:  # the most deflate packs in (1032:1)
                f.seek(-4, os.SEEK_END)
                last = int.from_bytes(f.read(4), "little")
                # a trailer smaller than the file is no whole text's: several members (files
                # joined with cat), whose last may be small, or a stream cut short; from
                # 1 MB on disk, such a text may be any size, and a stream is what holds any
                large = last > whole_up_to or size > whole_up_to or (last < size and size > whole_up_to // 64)
            else:
                large = size > whole_up_to and not gzipped
            f.seek(0)
        except OSError as exc:
            raise _unreadable(p, exc) from None
        if large:
            try:
                stream = TextStream(p, f, gzipped, BLOCK_BYTES if block is None else block)
            except Unstreamable:  # its first block already: read whole, with the repairs
                f.seek(0)
            else:
                handed = True  # the stream's now
                return stream
        raw = _read_rest(f, p)
    finally:
        if not handed:
            f.close()
    return _text_of(raw, p, warnings)


class Prefetch:
    """``open_text(path)`` running on a thread from construction; ``take`` waits for it.

    The warnings it collects (a damaged gzip stream) and any error it raised are the caller's:
    ``take`` returns the first and re-raises the second, on the caller's thread.
    """

    def __init__(self, path: Path, *, scan: bool = True) -> None:
        self.path = path
        self.warnings: list[str] = []
        # what the scanner made of the text, for the reader to use or ignore: ("trace", the
        # whole file's ``scan_trace``), ("cut short", ``short.scan_cut_short`` of a whole file
        # the scanner declined: most often one cut short), ("document", ``scan_document``:
        # a large file's layout) or ("stream", ``stream_pieces.StreamPieces`` of a stream,
        # its first pieces scanned, or the exception that stopped it)
        self.scanned: tuple[str, Any] | None = None
        self._scan_too = scan and _scan is not None
        self._text: bytes | TextStream | None = None
        self._error: BaseException | None = None
        self._taken = threading.Event()  # the reader is here: a stream's scanning ahead stops
        self._thread = threading.Thread(target=self._read, name="torchscope-read", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            self._text = text = open_text(self.path, self.warnings)
            if isinstance(text, TextStream):
                # without the scanner the reader reads it whole (``reader._streamed_parts``):
                # nothing to do ahead
                if self._scan_too:
                    self._scan_ahead(text)
                return
            if self._scan_too:
                if len(text) > WHOLE_BYTES:
                    self.scanned = ("document", _scan.scan_document(text))
                elif (whole := _scan.scan_trace(text)) is not None:
                    self.scanned = ("trace", whole)
                else:
                    self.scanned = ("cut short", self._cut_short(text))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread by take()
            self._error = exc

    def _scan_ahead(self, stream: TextStream) -> None:
        """A stream's first pieces cut and scanned beside the imports, up to WHOLE_BYTES of
        text or until the reader takes them (``stream_pieces``): the 87 MB MTIA trace only
        inflated here, and all its scanning waited for Polars' import. What stops the stream
        (a head the scanner declines, a file that cannot be read) is the reader's to raise."""
        from torchscope.trace.stream_pieces import StreamPieces  # no Polars: beside the imports

        try:
            pieces = StreamPieces(stream, BLOCK_BYTES)  # the reader's pieces too, by default
        except (Unstreamable, TraceError) as exc:
            self.scanned = ("stream", exc)
            return
        self.scanned = ("stream", pieces)
        pieces.scan_ahead(WHOLE_BYTES, self._taken)

    @staticmethod
    def _cut_short(text: bytes) -> Any:
        """``short.scan_cut_short`` of a text the scanner declined, here beside the imports: for
        a file cut short, its syntax check, cut and second scan (~0.15 s of 35 MB) came after
        them. Anything it raises is left for the reader, which tries the same again."""
        from torchscope.trace.short import Place, scan_cut_short  # msgspec: only on this path

        try:
            return scan_cut_short(text, Place(0, len(text)), refused=True)
        except Exception:  # noqa: BLE001 - the reader's own attempt says what is wrong
            return None

    def take(self) -> tuple[bytes | TextStream, list[str]]:
        """The file's text (a stream, when large) and the warnings reading it gave (once: the
        text is handed over); ``scanned`` is final once this returns."""
        self._taken.set()
        self._thread.join()
        if self._error is not None:
            raise self._error
        text, self._text = self._text, None
        if text is None:
            raise RuntimeError("Prefetch.take() called twice")
        return text, self.warnings


class OwnedMap(mmap.mmap):
    """A read-only map (``mmap.ACCESS_READ``) of a file this process owns and nobody writes,
    such as a live cycle Kineto saved into our scratch directory.

    The scanner unmaps its pages behind each scan (``madvise(MADV_DONTNEED)``): they would all
    count in the process's RSS until the map closes, and a live cycle is read while Kineto's
    results are still in memory. A page read again comes back from the page cache with the
    same bytes. Any other map (a user's, possibly a private copy they changed) is left alone.
    """


def why_missing(p: Path) -> str | None:
    """Why ``p`` cannot be opened as a path at all, or None when it exists: a symbolic link
    that loops, or points nowhere, is said as such (both read "no such file or directory")."""
    try:
        os.stat(p)
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "a symbolic link loop"
        if os.path.islink(p):
            return f"a symbolic link to {os.readlink(p)}, which does not exist"
        if exc.errno == errno.ENOENT:
            return "no such file or directory"
        return exc.strerror or str(exc)


def prefetch(path: str | Path) -> Prefetch | None:
    """A ``Prefetch`` of ``path`` when it is a regular file; None for anything else (a
    directory, a store, a missing path: the loader says what it is)."""
    p = Path(path).expanduser()
    try:
        regular = stat.S_ISREG(os.stat(p).st_mode)
    except OSError:
        return None
    return Prefetch(p) if regular else None
