"""Types of the optional C extension ``torchscope.trace._inflate`` (built from ``_inflate.c``)."""

from collections.abc import Callable

class InflateError(Exception):
    """Data that does not inflate (a corrupt member, or a file that is not gzip)."""

class Filler:
    """A file's text, a block at a time, each written after the text it continues without the
    GIL: gzip members inflated in turn (``gzipped``), or the bytes copied as they are."""

    def __init__(self, gzipped: bool = True) -> None: ...
    def fill(self, text: bytes, size: int, more: Callable[[], bytes], /) -> bytes | None:
        """``text`` followed by up to ``size`` more bytes of the file's text, or None when there
        are none; ``more()`` gives the file's next bytes (b"" at its end). A member cut short,
        or bytes after the last member that are not gzip, end the text (``truncated``,
        ``after``)."""

    @property
    def unconsumed(self) -> int:
        """Bytes ``more()`` gave that are not inflated (or copied) yet."""

    @property
    def truncated(self) -> bool:
        """The file ended inside a gzip member: the text is what it inflated to."""

    @property
    def after(self) -> int:
        """Bytes after the last gzip member that are not gzip (left out of the text)."""

    @property
    def after_zeros(self) -> bool:
        """Those bytes are all zeros (padding)."""
