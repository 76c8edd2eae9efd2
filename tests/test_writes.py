"""Every file torchscope writes for the user is whole or absent, also on a full disk.

The disk is filled by fakes of the writes underneath (each writes half its data, then raises
ENOSPC, as a full file system does; polars raises its own ``ComputeError`` naming "os error
28"), so no test needs root. Each checks what a user finds afterwards: the older file of the
same name untouched, no partial or hidden file beside it, and one line naming the path.
"""

from __future__ import annotations

import errno
import gzip
import os
import shutil
from pathlib import Path
from typing import Any

import polars as pl
import pytest

import torchscope
from torchscope import writes
from torchscope.cli.main import main
from torchscope.errors import WriteError
from torchscope.writes import hidden, temporary_sibling, write_atomically

NO_SPACE = os.strerror(errno.ENOSPC)  # "No space left on device"
TRACE = "cuda/backward_thread_small.json"


def _enospc() -> OSError:
    return OSError(errno.ENOSPC, NO_SPACE)


@pytest.fixture
def full_disk(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every write of file data (plain, gzip'd, copied or Parquet) writes half of it and fails."""
    write_bytes, write_text, gz_write = Path.write_bytes, Path.write_text, gzip.GzipFile.write

    def half_bytes(self: Path, data: bytes) -> int:
        write_bytes(self, data[: len(data) // 2])
        raise _enospc()

    def half_text(self: Path, data: str, *args: Any, **kwargs: Any) -> int:
        write_text(self, data[: len(data) // 2], *args, **kwargs)
        raise _enospc()

    def half_gzip(self: gzip.GzipFile, data: Any) -> int:
        gz_write(self, bytes(data)[: len(data) // 2])
        raise _enospc()

    def half_parquet(self: pl.DataFrame, file: Any, *args: Any, **kwargs: Any) -> None:
        with open(file, "wb") as fh:
            fh.write(b"PAR1")
        raise pl.exceptions.ComputeError(
            "parquet: File out of specification: underlying IO error: No space left on device (os error 28)"
        )

    def half_copy(src: Any, dst: Any, **kwargs: Any) -> Any:  # a live cycle's export copies Kineto's file
        data = Path(src).read_bytes()
        write_bytes(Path(dst), data[: len(data) // 2])
        raise _enospc()

    class HalfFile:
        """A file ``writes`` opened for writing: the first write writes half and fails."""

        def __init__(self, fh: Any) -> None:
            self.fh = fh

        def write(self, data: bytes) -> int:
            self.fh.write(data[: len(data) // 2])
            raise _enospc()

        def __enter__(self) -> HalfFile:
            return self

        def __exit__(self, *exc: object) -> None:
            self.fh.close()

    def half_open(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:  # a file written in pieces
        fh = open(file, mode, *args, **kwargs)  # noqa: SIM115 - closed by HalfFile
        return HalfFile(fh) if "w" in mode else fh

    monkeypatch.setattr(writes, "open", half_open, raising=False)
    monkeypatch.setattr(shutil, "copyfile", half_copy)
    monkeypatch.setattr(Path, "write_bytes", half_bytes)
    monkeypatch.setattr(Path, "write_text", half_text)
    monkeypatch.setattr(gzip.GzipFile, "write", half_gzip)
    monkeypatch.setattr(pl.DataFrame, "write_parquet", half_parquet)


def _listing(directory: Path) -> dict[str, bytes]:
    """Every file under ``directory`` (hidden ones included) with its bytes."""
    return {p.relative_to(directory).as_posix(): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def test_the_helper_keeps_the_older_file_and_leaves_nothing_on_a_full_disk(tmp_path: Path) -> None:
    target = tmp_path / "x.json"
    target.write_text("OLD")

    def half_then_full(tmp: Path) -> None:
        with open(tmp, "wb") as fh:
            fh.write(b'{"traceEvents": [')
        raise _enospc()

    with pytest.raises(WriteError) as err:
        write_atomically(target, half_then_full)
    assert str(err.value) == f"{target}: cannot write: {NO_SPACE}"
    # still the OSError it was, for a script's `except OSError`
    assert isinstance(err.value, OSError) and err.value.errno == errno.ENOSPC
    assert err.value.strerror == NO_SPACE and err.value.filename == str(target)
    assert _listing(tmp_path) == {"x.json": b"OLD"}


def test_the_helper_removes_the_folders_it_made_for_a_failed_write(tmp_path: Path) -> None:
    def full(tmp: Path) -> None:
        raise _enospc()

    with pytest.raises(WriteError):
        write_atomically(tmp_path / "a" / "b" / "x.html", full)
    assert list(tmp_path.iterdir()) == []


def test_the_helper_replaces_the_file_a_link_names_and_writes_a_pipe_in_place(tmp_path: Path) -> None:
    real = tmp_path / "real.json"
    real.write_text("OLD")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    write_atomically(link, lambda tmp: tmp.write_text("NEW"))
    assert link.is_symlink() and real.read_text() == "NEW"
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        write_atomically(fifo, lambda path: path.write_bytes(b"through the pipe"))
        assert os.read(reader, 100) == b"through the pipe"
    finally:
        os.close(reader)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.json", "pipe", "real.json"]


def test_a_directory_is_merged_into_an_existing_one_marker_last(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A store saved again where one is, beside a file of the user's: the tables are replaced,
    the user's file stays, and meta.json (what says the store is whole) is moved in last."""
    store = tmp_path / "s"
    store.mkdir()
    (store / "notes.txt").write_text("mine")
    (store / "meta.json").write_text("old meta")
    moved: list[str] = []
    replace = os.replace

    def spy(src: Any, dst: Any) -> None:
        moved.append(Path(dst).name)
        replace(src, dst)

    def write(tmp: Path) -> None:
        tmp.mkdir()
        for name in ("a.parquet", "meta.json", "z.parquet"):
            (tmp / name).write_text(name)

    monkeypatch.setattr(os, "replace", spy)
    write_atomically(store, write, marker="meta.json")
    assert moved == ["a.parquet", "z.parquet", "meta.json"]
    assert _listing(tmp_path) == {
        "s/a.parquet": b"a.parquet",
        "s/meta.json": b"meta.json",
        "s/notes.txt": b"mine",
        "s/z.parquet": b"z.parquet",
    }


@pytest.mark.parametrize("name", ["x.json", "x.json.gz"])
def test_export_chrome_trace_on_a_full_disk(tmp_path: Path, request: pytest.FixtureRequest, name: str) -> None:
    """It raised OSError but left a truncated x.json, or a 0-byte x.json.gz; an older export of
    the same name was lost."""
    import torch

    with torchscope.profile(activities=[torchscope.ProfilerActivity.CPU]) as prof:
        torch.randn(8, 8).relu()
    target = tmp_path / name
    target.write_bytes(b"OLD")
    request.getfixturevalue("full_disk")
    with pytest.raises(OSError) as err:
        prof.export_chrome_trace(str(target))
    assert str(err.value) == f"{target}: cannot write: {NO_SPACE}"
    assert _listing(tmp_path) == {name: b"OLD"}


def _cli_error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    """The one stderr line of a command that must exit 2."""
    assert main(argv) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    return line


@pytest.mark.parametrize(
    ("to", "name"),
    [("chrome", "out.chrome.json"), ("chrome", "out.chrome.json.gz"), ("stacks", "out.folded"), ("parquet", "out.store")],
)
def test_cli_export_on_a_full_disk_is_one_line_and_keeps_the_older_output(
    traces_dir: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    request: pytest.FixtureRequest,
    to: str,
    name: str,
) -> None:
    """``export --to chrome`` left a 0-byte file; ``--to parquet`` ended in polars' ComputeError
    traceback (exit 1) and an empty directory. Now: exit 2, one line, the older output intact."""
    out = tmp_path / name
    assert main(["export", str(traces_dir / TRACE), "--to", to, "-o", str(out)]) == 0
    capsys.readouterr()
    before = _listing(tmp_path)
    request.getfixturevalue("full_disk")
    line = _cli_error(capsys, ["export", str(traces_dir / TRACE), "--to", to, "-o", str(out)])
    assert line == f"torchscope export: error: {out}: cannot write: {NO_SPACE}"
    assert _listing(tmp_path) == before
    if to == "parquet":
        assert torchscope.load(out).events.height == torchscope.load(traces_dir / TRACE).events.height


def test_cli_report_page_on_a_full_disk(
    traces_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], full_disk: None
) -> None:
    page = tmp_path / "r.html"
    line = _cli_error(capsys, ["report", str(traces_dir / TRACE), "--html", str(page)])
    assert line == f"torchscope report: error: {page}: cannot write the dashboard here: {NO_SPACE}"
    assert list(tmp_path.iterdir()) == []


def test_an_accuracy_dump_on_a_full_disk_leaves_no_directory(tmp_path: Path, full_disk: None) -> None:
    import torch

    from torchscope.accuracy.dump import dump

    out = tmp_path / "dump"
    with pytest.raises(WriteError) as err, dump(out):
        torch.randn(4, 4).relu()
    assert str(err.value) == f"{out}: cannot write: {NO_SPACE}"
    assert list(tmp_path.iterdir()) == []


def test_our_temporaries_are_hidden_from_every_scan(tmp_path: Path) -> None:
    tmp = temporary_sibling(tmp_path / "w.123.pt.trace.json")
    assert hidden(tmp.name) and tmp.name.endswith(".pt.trace.json")
    assert not hidden("w.123.pt.trace.json") and not hidden("run/w.1.json")
    assert hidden(".ipynb_checkpoints/w.1.json") and hidden(b".partial-1-1-w.1.json")


def test_a_name_at_the_length_limit_is_still_written(tmp_path: Path) -> None:
    """The temporary's prefix made a 250-character name too long to create."""
    target = tmp_path / ("x" * 240 + ".json.gz")
    write_atomically(target, lambda tmp: tmp.write_bytes(b"data"))
    assert [p.name for p in tmp_path.iterdir()] == [target.name] and target.read_bytes() == b"data"

