"""The files torchscope writes for the user: whole or not at all, and never read back as traces.

Every file or directory we write for the user (a Chrome export, plain or gzip'd, the HTML
dashboard, ``torchscope run``'s report and traces, a Parquet store, an accuracy dump, folded
stacks, ``tensorboard_trace_handler``'s cycles) goes through ``write_atomically``: it is written
to a hidden temporary beside its place and renamed there once whole. On a full disk the
writers left a truncated trace, a 0-byte ``.json.gz``, a cut HTML page or an empty store
directory, and an older file of the same name was already gone; now the older file stays as it
was, nothing partial is left, and the failure is one ``WriteError`` line naming the path.

The temporaries are dot-files (``.partial-PID-N-NAME``), and ``hidden`` is the one predicate
every directory scan uses to pass over dot-files and dot-directories: a log directory copied
while a trace was being written must not show the half-written copy as another run or cycle.
Torch-free and import-light: the capture, the reader and the CLI all use it.
"""

from __future__ import annotations

import contextlib
import gzip
import itertools
import os
import re
import shutil
import stat
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from torchscope.errors import WriteError, why_unwritable

PARTIAL_PREFIX = ".partial-"
_SERIAL = itertools.count(1)  # two writes of one name in one process never share a temporary
_OS_ERROR = re.compile(r"\(os error (\d+)\)")


def hidden(relative: str | bytes | os.PathLike[str]) -> bool:
    """Whether every directory scan (``load``, ``report``, ``diff``, ``serve``) passes over this
    name, or this path relative to the scanned directory: a dot-file, or anything in a
    dot-directory. Our own temporaries are dot-files, so a log directory copied while a trace
    was being written shows no half-written extra run or cycle."""
    return any(part.startswith(".") for part in Path(os.fsdecode(relative)).parts)


def temporary_sibling(target: Path) -> Path:
    """The hidden temporary ``target`` is written to: beside it (a rename within one file
    system), ending in its name (so ``.gz`` still means gzip and ``.html`` still means a page);
    a name near the file system's 255-byte limit keeps only its last 100 characters."""
    name = target.name if len(os.fsencode(target.name)) <= 200 else target.name[-100:]
    return target.with_name(f"{PARTIAL_PREFIX}{os.getpid()}-{next(_SERIAL)}-{name}")


_TEMPORARY = re.compile(rf"{re.escape(PARTIAL_PREFIX)}\d+-\d+-(?P<name>.+)")


def destination(path: Path) -> Path:
    """The path the temporary ``path`` (``temporary_sibling``) is renamed to, ``path`` itself
    when it is no temporary: what a file written there names as its own (a trace's
    ``traceName``). A name the temporary cut (over 200 bytes) comes back cut."""
    m = _TEMPORARY.fullmatch(path.name)
    return path.with_name(m.group("name")) if m else path


def write_atomically(
    path: str | os.PathLike[str],
    write: Callable[[Path], Any],
    *,
    problem: str = "cannot write",
    marker: str | None = None,
) -> Path:
    """Call ``write(tmp)`` on a hidden temporary beside ``path``, then rename it to ``path``.

    On failure the temporary is removed, an older ``path`` is left as it was, and an ``OSError``
    (a full disk, no permission) becomes a ``WriteError`` "PATH: PROBLEM: why" (one line).
    ``write`` may make a file or a directory (a store): a directory replaces a missing one
    whole, and is moved into an existing one file by file, ``marker`` (the file that says the
    directory is complete, a store's ``meta.json``) taken out first and moved in last. A path
    that is no regular file (``/dev/stdout``, a pipe) is written in place; a link is followed
    and the file it names replaced.
    """
    target = Path(path)
    place = _place_of(target)
    if place is None:
        _raise_if_failed(target, problem, lambda: write(target))
        return target
    tmp = temporary_sibling(place)
    made = _first_missing(place.parent)
    try:
        place.parent.mkdir(parents=True, exist_ok=True)
        write(tmp)
        _move_into_place(tmp, place, marker)
    except BaseException as exc:
        _remove(tmp, made)
        failed = _os_error_in(exc)
        if failed is not None:
            raise _write_error(target, problem, failed) from None
        raise
    return target


def write_data(path: str | os.PathLike[str], data: bytes, *, compresslevel: int) -> Path:
    """``data`` written to ``path``, gzip-compressed (at ``compresslevel``) when its name ends
    in ``.gz``, whole or not at all (``write_atomically``)."""
    return write_pieces(path, (data,), compresslevel=compresslevel)


def write_pieces(path: str | os.PathLike[str], pieces: Iterable[bytes], *, compresslevel: int) -> Path:
    """``write_data`` of the concatenation of ``pieces``, each written as it comes (made by a
    generator, the whole text is never in memory at once)."""
    gz = Path(path).name.endswith(".gz")

    def write(tmp: Path) -> None:
        with gzip.open(tmp, "wb", compresslevel=compresslevel) if gz else open(tmp, "wb") as dst:
            for piece in pieces:
                dst.write(piece)

    return write_atomically(path, write)


def _os_error_in(exc: BaseException) -> OSError | None:
    """The I/O failure ``exc`` is: itself, or the one a library wraps in its own error (polars'
    ``ComputeError`` and safetensors' ``SafetensorError`` end in "(os error 28)" on a full disk,
    and ended ``export --to parquet`` in a traceback); None for any other error."""
    if isinstance(exc, OSError):
        return exc
    m = _OS_ERROR.search(str(exc)) if isinstance(exc, Exception) else None
    if m is None:
        return None
    code = int(m.group(1))
    return OSError(code, os.strerror(code))


def _place_of(target: Path) -> Path | None:
    """Where the written file goes: ``target``, or the file a link names; None for a path that
    is neither a regular file nor a directory (``/dev/stdout``, a pipe), which no rename may
    replace: it is written in place."""
    try:
        mode: int | None = os.stat(target).st_mode  # through links
    except OSError:
        mode = None  # nothing there yet (or nothing we may look at: the write will say)
    if mode is not None and not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        return None
    return Path(os.path.realpath(target)) if os.path.islink(target) else target


def _move_into_place(tmp: Path, place: Path, marker: str | None) -> None:
    """Rename the written ``tmp`` to ``place`` (see ``write_atomically``)."""
    if not (tmp.is_dir() and place.is_dir()):
        if tmp.is_file() and place.is_file():  # keep the mode of the file it replaces
            with contextlib.suppress(OSError):
                os.chmod(tmp, stat.S_IMODE(place.stat().st_mode))
        os.replace(tmp, place)
        return
    names = sorted(p.name for p in tmp.iterdir())
    if marker in names:
        names.remove(marker)
        (place / marker).unlink(missing_ok=True)
        names.append(marker)
    for name in names:
        os.replace(tmp / name, place / name)
    tmp.rmdir()


def _first_missing(directory: Path) -> Path | None:
    """The outermost of ``directory`` and its parents that does not exist yet (None: it exists)."""
    missing = None
    for d in (directory, *directory.parents):
        if os.path.exists(d):
            break
        missing = d
    return missing


def _remove(tmp: Path, made: Path | None) -> None:
    """Remove a failed write's temporary (a file or a directory), and the folders made for it
    (``made``, the outermost of them), as far as they are empty."""
    if tmp.is_dir() and not tmp.is_symlink():
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            tmp.unlink()
    if made is None:
        return
    for d in (tmp.parent, *tmp.parent.parents):
        try:
            d.rmdir()
        except OSError:
            return
        if d == made:
            return


def _raise_if_failed(target: Path, problem: str, write: Callable[[], Any]) -> None:
    """Run ``write`` (on a path written in place), its ``OSError`` a ``WriteError``."""
    try:
        write()
    except Exception as exc:
        failed = _os_error_in(exc)
        if failed is None:
            raise
        raise _write_error(target, problem, failed) from None


def _write_error(target: Path, problem: str, exc: OSError) -> WriteError:
    """The one-line error for a failed write of ``target`` (a closed pipe is raised as it is)."""
    why = why_unwritable(target, exc)
    return WriteError(str(target), f"{problem}: {why}", exc.errno, why)
