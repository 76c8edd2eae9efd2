"""Helpers every subcommand shares: loading input, progress on a terminal, JSON output.

Kept here so each subcommand module reads as its own intent: what it takes, what it prints.
Progress goes to stderr and only when stderr is a terminal, so pipes and ``--json`` stay clean.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torchscope.errors import TraceError

if TYPE_CHECKING:  # imported when used: a command starts reading its trace before polars imports
    from torchscope.trace.files import Prefetch
    from torchscope.trace.model import Trace, TraceSet


def whole_number(text: str) -> int:
    """An argparse type: a whole number, however large (capped at ``sys.maxsize``, which is
    every row there can be: an int beyond it overflowed the table's slicing)."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    return min(n, sys.maxsize)


def at_least_one(text: str) -> int:
    """An argparse type for a count of rows: a whole number of at least 1."""
    n = whole_number(text)
    if n < 1:
        raise argparse.ArgumentTypeError(f"{n} is less than 1")
    return n


def html_target(html: str | Path, *inputs: str | Path) -> Path:
    """The ``--html`` path, refused when it is one of the inputs: writing the page there would
    overwrite the trace it was made from."""
    return output_target("--html", html, *inputs)


def output_target(option: str, html: str | Path, *inputs: str | Path) -> Path:
    """The path an ``option`` names for output, refused when it is one of the inputs (the same
    file by any name: a link, ``./``) before any work: writing there would destroy the trace."""
    from torchscope.errors import UsageError

    out = Path(html).expanduser()
    for given in inputs:
        try:
            same = (
                out.exists() and Path(given).expanduser().exists() and out.samefile(Path(given).expanduser())
            )
        except OSError:
            same = False
        if same:
            raise UsageError(
                f"{option} {html} is the input trace {given}: it would be overwritten; name another file"
            )
    return out


def stderr_is_tty() -> bool:
    return bool(getattr(sys.stderr, "isatty", lambda: False)())


@contextmanager
def progress(message: str) -> Iterator[None]:
    """A spinner with ``message`` on stderr while the block runs (terminals only)."""
    if not stderr_is_tty():
        yield
        return
    from rich.console import Console

    with Console(stderr=True).status(message):
        yield


def load_input(path: str | Path, early: Prefetch | None = None) -> Trace | TraceSet:
    """``torchscope.load`` with its progress line; a missing path is bad input (exit code 2).
    ``early``: the file's read, started by the command before its imports (``trace.files.prefetch``).

    No spinner of the command's own: the loader's line (its phase, after a second) and a
    spinner both drew on one terminal line, alternating on every frame of a 15 s read.
    """
    from torchscope.trace import load

    return load(Path(path), early=early)  # a missing path is one line naming it (loader)


def read_early(path: str | Path, at_most: int | None = None) -> Prefetch | None:
    """Start reading ``path`` on a thread (``trace.files.prefetch``): a command calls this
    before importing its analyses, so that inflating and scanning the file overlaps the
    ~0.2 s of polars/NumPy imports instead of following them. ``at_most``: only a file up
    to this many bytes on disk (None when larger: it is read when loaded)."""
    from torchscope.trace.files import prefetch

    if at_most is not None:
        try:
            if os.stat(Path(path).expanduser()).st_size > at_most:
                return None
        except OSError:
            return None  # the loader says what is wrong with it
    return prefetch(path)


def load_single(path: str | Path, early: Prefetch | None = None) -> Trace:
    """One trace; a directory holding exactly one trace is accepted too. ``early``: the
    file's read, started before the command's imports (``read_early``)."""
    from torchscope.trace.model import TraceSet

    loaded = load_input(path, early)
    if isinstance(loaded, TraceSet):
        if len(loaded) != 1:
            names = ", ".join(list(loaded)[:5])
            raise TraceError(str(path), f"holds {len(loaded)} traces ({names}); name one file")
        return next(iter(loaded.values()))
    return loaded


def input_warnings(loaded: Trace | TraceSet) -> list[str]:
    """What reading ``loaded`` repaired or skipped, one line each (a file of a directory named):
    the lines ``report`` prints, for commands whose stdout is a table or JSON."""
    from torchscope.trace.model import TraceSet

    if not isinstance(loaded, TraceSet):
        return [f"{loaded.meta.source}: {w}" for w in loaded.meta.warnings]
    return loaded.warnings()


def warn_on_stderr(command: str, lines: list[str]) -> None:
    """``lines`` as ``torchscope COMMAND: warning: ...`` on stderr (stdout stays a clean table)."""
    for line in lines:
        print(f"torchscope {command}: warning: {line}", file=sys.stderr)


def exact_json(data: Any) -> str:
    """``data`` as indented JSON, microseconds that are not whole (``report_model.Us``) written
    exactly as the trace's nanoseconds say (``1712195495502094.565``, not ``...094.5``).

    Each such value goes through ``json`` as a token unique to this call, then the token's
    quoted text is replaced by the exact number, so no string in the data can pose as one."""
    from torchscope.analysis.report_model import Us

    token = f"us-{os.urandom(8).hex()}:"  # secrets.token_hex without importing secrets
    exact: list[str] = []

    def swap(value: Any) -> Any:
        if isinstance(value, Us):
            exact.append(value.exact())
            return f"{token}{len(exact) - 1}"
        if isinstance(value, dict):
            return {k: swap(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [swap(v) for v in value]
        return value

    text = json.dumps(swap(data), indent=1, allow_nan=False, default=str)
    if not exact:
        return text
    return re.sub(f'"{re.escape(token)}(\\d+)"', lambda m: exact[int(m.group(1))], text)


def print_json(data: Any) -> None:
    """``data`` as indented JSON on stdout; a reader that stops early (``| head``) is no error."""
    try:
        sys.stdout.write(exact_json(data))
        sys.stdout.write("\n")
        sys.stdout.flush()
    except BrokenPipeError:
        # the reader is gone: send what is left nowhere, so the interpreter's flush at exit
        # does not raise again (Python's documented recipe for SIGPIPE)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
