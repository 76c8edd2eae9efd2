"""Trace files: the columnar ``Trace`` model, the Kineto/Chrome reader, and the loader.

``torchscope.load(path)`` (``trace.loader.load``) is the entry point users meet; live capture
calls ``read_chrome`` on the JSON Kineto writes. See ``docs/trace.md`` for every column.
"""

from __future__ import annotations

from torchscope.trace.loader import load
from torchscope.trace.model import Trace, TraceMeta, TraceSet
from torchscope.trace.reader import read_chrome, read_chrome_document

__all__ = ["Trace", "TraceMeta", "TraceSet", "load", "read_chrome", "read_chrome_document"]
