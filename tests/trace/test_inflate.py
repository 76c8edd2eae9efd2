"""``_inflate.Filler``: a large file's text a block at a time, each written after the text it
continues (``files.TextStream.extend``), the same text Python's zlib gives, or the same error.

Every stream test in ``test_streamed.py`` runs with it (where built) and without it
(``python_zlib``); these check the filler's own contract against ``zlib``/``gzip``.
"""

from __future__ import annotations

import gzip
import io
import random
import shutil
import sysconfig
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest

from torchscope.trace import files

_inflate = files._inflate
needs_filler = pytest.mark.skipif(_inflate is None, reason="the C filler was not built (no zlib header)")


def test_the_filler_is_built_where_the_machine_can_build_it() -> None:
    """Its build is optional (no compiler, no zlib header: Python's zlib does the work); where
    both are here, a missing filler is a broken build, not a machine without the means."""
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    headers = [
        Path(d) / "zlib.h" for d in ("/usr/include", "/usr/local/include", sysconfig.get_path("include"))
    ]
    if shutil.which(compiler) is None or not any(h.exists() for h in headers):
        pytest.skip("no C compiler or no zlib header here")
    assert _inflate is not None


def _reader(data: bytes, size: int) -> Callable[[], bytes]:
    f = io.BytesIO(data)
    return lambda: f.read(size)


def _text(n: int, seed: int = 0) -> bytes:
    rng = random.Random(seed)
    lines = [
        f'{{"ph": "X", "name": "op{rng.randrange(500)}", "ts": {i}, "dur": {rng.randrange(9)}}}'
        for i in range(n)
    ]
    return ",\n".join(lines).encode()


def _all(filler: object, more: Callable[[], bytes], block: int, keep: int = 0) -> bytes:
    """The whole text from ``filler``, each block asked for after the last ``keep`` bytes of
    the one before (as the pieces' reader carries an event cut in two), then joined back."""
    out, carry = [], b""
    while (got := filler.fill(carry, block, more)) is not None:  # type: ignore[attr-defined]
        assert got.startswith(carry) and len(got) <= len(carry) + block
        new = got[len(carry) :]
        out.append(new)
        carry = got[-keep:] if keep else b""
    return b"".join(out)


@needs_filler
@pytest.mark.parametrize(
    ("block", "read", "keep"), [(4096, 1000, 0), (65536, 7, 100), (1 << 20, 1 << 16, 5000)]
)
def test_the_text_of_several_gzip_members_comes_out_whole_whatever_the_sizes(
    block: int, read: int, keep: int
) -> None:
    text = _text(30000)
    cuts = sorted(random.Random(1).sample(range(1, len(text)), 3))
    parts = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
    data = b"".join(
        gzip.compress(p, compresslevel=level) for p, level in zip(parts, (1, 6, 9, 0), strict=True)
    )
    filler = _inflate.Filler(True)
    assert _all(filler, _reader(data, read), block, keep) == text
    assert filler.unconsumed == 0 and filler.fill(b"x", block, _reader(b"", 1)) is None


@needs_filler
def test_a_plain_file_is_copied_as_it_is() -> None:
    text = _text(5000)
    assert _all(_inflate.Filler(False), _reader(text, 3333), 1000, keep=10) == text


@needs_filler
def test_corrupt_gzip_raises_what_pythons_zlib_would_say() -> None:
    data = gzip.compress(_text(20000))
    data = data[:5000] + bytes(200) + data[5200:]
    with pytest.raises(_inflate.InflateError, match=r"^corrupt gzip \("):  # then zlib's words
        _all(_inflate.Filler(True), _reader(data, 4096), 65536)
    with pytest.raises((EOFError, OSError)):  # and Python's gzip refuses it too
        gzip.decompress(data)


@needs_filler
@pytest.mark.parametrize("damage", ["cut", "garbage after", "zeros after", "two members cut"])
def test_a_stream_cut_short_or_followed_by_other_bytes_ends_with_what_inflated(damage: str) -> None:
    """The text is what Python's zlib inflates of it, and the filler says what ended it: a
    stream cut short (``truncated``), or bytes after it that are not gzip (``after``, and
    whether they are zeros), as reading the whole file says (``files._inflate_salvage``)."""
    text = _text(20000)
    one = gzip.compress(text)
    data = {
        "cut": one[: len(one) // 2],
        "garbage after": one + b"INFO: profiler done\n",
        "zeros after": one + bytes(4096),
        "two members cut": one + gzip.compress(text)[: len(one) // 3],
    }[damage]
    filler = _inflate.Filler(True)
    got = _all(filler, _reader(data, 4096), 65536, keep=50)
    expected = b""
    rest = data
    while rest[:2] == b"\x1f\x8b":  # member after member, each as far as it inflates
        member = zlib.decompressobj(wbits=31)
        expected += member.decompress(rest)
        rest = member.unused_data if member.eof else b""
    assert got == expected and len(got) > 0
    assert filler.truncated == damage.endswith("cut")
    assert filler.after == {"garbage after": 20, "zeros after": 4096}.get(damage, 0)
    assert filler.after_zeros == (damage == "zeros after")


@needs_filler
def test_what_the_file_read_has_not_given_yet_is_counted() -> None:
    """``unconsumed``: what ``more()`` returned and the text does not hold yet (the stream's
    progress is what it read less this)."""
    text = _text(20000)
    data = gzip.compress(text)
    filler = _inflate.Filler(True)
    got = filler.fill(b"", 1000, _reader(data, len(data)))  # all the file read at once
    assert got == text[:1000]
    assert 0 < filler.unconsumed < len(data)


@needs_filler
def test_a_reader_error_comes_through_and_the_stream_can_say_so() -> None:
    def broken() -> bytes:
        raise OSError(5, "Input/output error")

    with pytest.raises(OSError, match="Input/output"):
        _inflate.Filler(True).fill(b"", 100, broken)
    with pytest.raises(TypeError, match="must return bytes"):
        _inflate.Filler(True).fill(b"", 100, lambda: "text")  # type: ignore[arg-type, return-value]
