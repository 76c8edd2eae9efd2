"""Helpers every subcommand shares: loading input, progress on a terminal, JSON output.

Kept here so each subcommand module reads as its own intent: what it takes, what it prints.
Progress goes to stderr and only when stderr is a terminal, so pipes and ``--json`` stay clean.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from torchscope.errors import TraceError
from torchscope.trace.model import Trace, TraceSet


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


def load_input(path: str | Path) -> Trace | TraceSet:
    """``torchscope.load`` with progress; a missing path is bad input (exit code 2)."""
    from torchscope.trace.loader import load

    p = Path(path)
    if not p.exists():
        raise TraceError(str(path), "no such file or directory")
    with progress(f"reading {p.name}"):
        return load(p)


def load_single(path: str | Path) -> Trace:
    """One trace; a directory holding exactly one trace is accepted too."""
    loaded = load_input(path)
    if isinstance(loaded, TraceSet):
        if len(loaded) != 1:
            names = ", ".join(list(loaded)[:5])
            raise TraceError(str(path), f"holds {len(loaded)} traces ({names}); name one file")
        return next(iter(loaded.values()))
    return loaded


def print_json(data: Any) -> None:
    """``data`` as indented JSON on stdout; a reader that stops early (``| head``) is no error."""
    try:
        json.dump(data, sys.stdout, indent=1, allow_nan=False, default=str)
        sys.stdout.write("\n")
        sys.stdout.flush()
    except BrokenPipeError:
        # the reader is gone: send what is left nowhere, so the interpreter's flush at exit
        # does not raise again (Python's documented recipe for SIGPIPE)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
