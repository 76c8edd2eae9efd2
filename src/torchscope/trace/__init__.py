"""Trace files: the columnar ``Trace`` model, the Kineto/Chrome reader, and the loader.

``torchscope.load(path)`` (``load`` below) is the entry point users meet; live capture calls
``read_chrome`` on the JSON Kineto writes. See ``docs/trace.md`` for every column.

Importing this package imports nothing heavy: ``load`` starts reading the file before the
reader and polars are imported (``files.prefetch``), and the other names resolve on first use.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torchscope.trace.files import Prefetch
    from torchscope.trace.model import Trace, TraceMeta, TraceSet
    from torchscope.trace.reader import read_chrome, read_chrome_document

__all__ = ["Trace", "TraceMeta", "TraceSet", "load", "read_chrome", "read_chrome_document"]

_LAZY = {
    "Trace": "torchscope.trace.model",
    "TraceMeta": "torchscope.trace.model",
    "TraceSet": "torchscope.trace.model",
    "read_chrome": "torchscope.trace.reader",
    "read_chrome_document": "torchscope.trace.reader",
}


def load(
    path: str | Path, *, progress: bool | None = None, early: Prefetch | None = None
) -> Trace | TraceSet:
    """Open a trace file, our store directory, or a directory of traces (one per rank/worker).

    A file starts inflating on a thread first, while the reader's modules import (the two
    overlap: see ``files``). ``progress``: show a progress bar on stderr when loading takes
    more than a second (default: only when stderr is a terminal). ``early``: a read the caller
    started itself, before its own imports (``files.prefetch``).
    """
    from torchscope.startup import gc_paused
    from torchscope.trace.files import prefetch

    with gc_paused():  # imports and columns make no cycles worth collecting (``startup``)
        early = early or prefetch(path)
        from torchscope.trace.loader import load as load_path

        return load_path(path, progress=progress, early=early)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'torchscope.trace' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
