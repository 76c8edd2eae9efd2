"""``torchscope.load`` reads and inflates a file on a thread while the reader's modules import.

The early read must change nothing a user sees: the same Trace, the same warnings for a
damaged gzip stream, the same one-line errors; and the modules it needs first must really be
light (if they imported polars, there would be nothing left to overlap).
"""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
from pathlib import Path

import pytest

import torchscope
from torchscope.errors import TraceError
from torchscope.trace import read_chrome
from torchscope.trace.files import Prefetch, TextStream, prefetch

from .conftest import TRACES

SMALL = TRACES / "cuda" / "nccl_rank0_of_2.json.gz"


def test_the_early_read_imports_nothing_heavy() -> None:
    code = (
        "import sys, torchscope.trace.files as f, torchscope.trace as t\n"
        "heavy = sorted(m for m in ('polars', 'numpy', 'msgspec', 'torch') if m in sys.modules)\n"
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


@pytest.mark.parametrize(
    "name",
    [
        "cuda/nccl_rank0_of_2.json.gz",  # scanned whole on the early thread
        "other_devices/mtia_training_large.json.gz",  # 87 MB of text: its first block read there
    ],
)
def test_load_gives_the_same_trace_as_reading_the_file_directly(name: str) -> None:
    early = prefetch(TRACES / name)
    assert early is not None
    text, _ = early.take()
    if name.startswith("cuda"):
        assert early.scanned is not None and early.scanned[1] is not None  # the scanner ran early
    else:
        assert isinstance(text, TextStream)  # streamed: scanned as the reader cuts it
    got, direct = torchscope.load(TRACES / name), read_chrome(TRACES / name)
    assert got.equals(direct) and got.meta == direct.meta


def test_a_damaged_file_gives_the_same_warnings_through_load(tmp_path: Path) -> None:
    # a copy cut short: what inflates is read, and the warning says what was lost
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(SMALL.read_bytes()[: SMALL.stat().st_size // 2])
    early, direct = torchscope.load(cut), read_chrome(cut)
    assert early.equals(direct)
    assert early.meta.warnings == direct.meta.warnings
    assert any("the gzip stream is truncated" in w for w in early.meta.warnings)


@pytest.mark.parametrize("fraction", [0.5, 0.999])
def test_a_file_cut_short_is_cut_and_scanned_on_the_early_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fraction: float
) -> None:
    """A file cut short (a killed process) is cut after its last event and scanned beside the
    imports; the reader takes that scan as it is: the same Trace and warnings as a direct read,
    and no second cut on the caller's thread."""
    from torchscope.trace import reader

    text = gzip.decompress(SMALL.read_bytes())
    cut = tmp_path / "cut.json"
    cut.write_bytes(text[: int(len(text) * fraction)])
    early = prefetch(cut)
    assert early is not None
    early.take()
    assert early.scanned is not None and early.scanned[0] == "cut short"
    direct = read_chrome(cut)

    def again(*args: object, **kwargs: object) -> None:
        raise AssertionError("the reader cut the file again")

    monkeypatch.setattr(reader, "scan_cut_short", again)
    got = torchscope.load(cut)
    assert got.equals(direct) and got.meta == direct.meta
    assert any("the file ends mid-event (truncated?)" in w for w in got.meta.warnings)


def test_an_unreadable_file_is_the_same_one_line_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json.gz"
    bad.write_bytes(b"\x1f\x8b" + b"\x00" * 40)  # gzip magic, nothing that inflates
    with pytest.raises(TraceError) as early:
        torchscope.load(bad)
    with pytest.raises(TraceError) as direct:
        read_chrome(bad)
    assert str(early.value) == str(direct.value) and str(early.value).startswith(
        f"{bad}: corrupt or truncated gzip"
    )


def test_only_a_regular_file_is_read_early(tmp_path: Path) -> None:
    assert prefetch(tmp_path) is None and prefetch(tmp_path / "missing.json") is None
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(b'{"traceEvents": []}'))
    early = prefetch(path)
    assert isinstance(early, Prefetch)
    assert early.take() == (b'{"traceEvents": []}', [])
    with pytest.raises(RuntimeError, match="twice"):
        early.take()


@pytest.mark.parametrize(
    "argv",
    [
        ["table", "{f}"],
        ["report", "{f}", "--json"],
        ["export", "{f}", "--to", "stacks", "-o", "{out}"],
        ["diff", "{f}", "{f}", "--json"],
    ],
    ids=lambda argv: argv[0],
)
def test_each_command_starts_reading_before_polars_imports(argv: list[str], tmp_path: Path) -> None:
    # the command's module and argument parsing must stay light too: a command that imported
    # polars first (export did) waited ~0.2 s for the read after its imports instead of overlapping
    args = [a.format(f=SMALL, out=tmp_path / "out.folded") for a in argv]
    code = (
        "import sys, torchscope.trace.files as f\n"
        "heavy_at_read = []\n"
        "original = f.prefetch\n"
        "def spy(path):\n"
        "    heavy_at_read.append([m for m in ('polars', 'numpy') if m in sys.modules])\n"
        "    return original(path)\n"
        "f.prefetch = spy\n"
        "from torchscope.cli.main import main\n"
        "import io, contextlib\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    rc = main({args!r})\n"
        "print(rc, heavy_at_read)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    reads = 2 if argv[0] == "diff" else 1
    assert out.stdout.strip().splitlines()[-1] == "0 " + repr([[]] * reads)


def test_a_load_pauses_garbage_collection_and_restores_it() -> None:
    # collection resumes after a load, also after one that failed; a caller's own choice holds
    import gc

    seen: list[bool] = []
    original = Prefetch._read

    def spy(self: Prefetch) -> None:
        seen.append(gc.isenabled())
        original(self)

    Prefetch._read = spy  # type: ignore[method-assign]
    try:
        torchscope.load(SMALL)
        assert seen == [False] and gc.isenabled()
        with pytest.raises(TraceError):
            torchscope.load(TRACES / "no such file.json")
        assert gc.isenabled()
        gc.disable()
        torchscope.load(SMALL)
        assert not gc.isenabled()
    finally:
        gc.enable()
        Prefetch._read = original  # type: ignore[method-assign]


@pytest.mark.parametrize(
    ("argv", "blas_threads"),
    [(["table", "{f}"], "1"), (["report", "{f}", "--json"], "1"), (["demo", "--help"], None)],
    ids=lambda v: v[0] if isinstance(v, list) else str(v),
)
def test_commands_that_only_read_traces_start_no_blas_threads(argv: list[str], blas_threads: str | None) -> None:
    # NumPy's OpenBLAS spins a thread per core for ~0.1 s at import; commands that never
    # multiply matrices ask for none, but not those that run a model or a user's script
    args = [a.format(f=SMALL) for a in argv]
    code = (
        "import os, gc, io, contextlib\n"
        "from torchscope.cli.main import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    try:\n"
        f"        rc = main({args!r})\n"
        "    except SystemExit as exc:\n"
        "        rc = exc.code\n"
        "print(rc, os.environ.get('OPENBLAS_NUM_THREADS'), gc.isenabled())"
    )
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert out.stdout.strip().splitlines()[-1] == f"0 {blas_threads} True"
    # a user's own setting wins
    env["OPENBLAS_NUM_THREADS"] = "3"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert out.stdout.strip().splitlines()[-1] == "0 3 True"


def test_a_damaged_gzip_says_what_is_wrong_with_the_gzip(tmp_path: Path) -> None:
    """The first bytes of a .json.gz said only "not valid JSON" (or "no 'traceEvents' key"),
    and a copy with bytes flipped "corrupt or truncated gzip", though a truncated one is read."""
    raw = SMALL.read_bytes()
    head = tmp_path / "head.json.gz"
    head.write_bytes(raw[:200])
    with pytest.raises(TraceError, match=r"head\.json\.gz: the gzip stream is truncated: read the \d+ bytes it inflates"
                       r" to, which are not a trace: "):
        torchscope.load(head)
    for at in (-8, -2):  # the trailer's CRC-32, then its length: every byte inflates, none can be trusted
        wrong = bytearray(raw)
        wrong[at] ^= 0xFF
        damaged = tmp_path / "damaged.json.gz"
        damaged.write_bytes(bytes(wrong))
        with pytest.raises(TraceError) as caught:
            torchscope.load(damaged)
        assert str(caught.value) == f"{damaged}: corrupt gzip: what it inflates to does not match its checksum (a damaged copy?)"
