"""Op-by-op numerical comparison: find the first ATen op where a device, a dtype or a new
version diverges from a reference, forward and backward.

- ``compare(...)``: live, a context manager; every op also runs on a reference (CPU float64 by
  default) with copies of the same inputs and is compared on the spot.
- ``dump(path, ...)`` on each machine, then ``compare_dumps(a, b)`` offline (no torch needed).

Both give an ``AccuracyResult`` (first divergence, top ops, per-module summary);
``report.accuracy_section(result)`` is the dashboard's view of it. Names resolve lazily so that
comparing dumps never imports torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_LAZY: dict[str, str] = {
    "compare": "torchscope.accuracy.live",
    "dump": "torchscope.accuracy.dump",
    "compare_dumps": "torchscope.accuracy.offline",
    "Dump": "torchscope.accuracy.offline",
    "AccuracyResult": "torchscope.accuracy.result",
    "OpResult": "torchscope.accuracy.result",
    "TensorMetrics": "torchscope.accuracy.metrics",
    "accuracy_section": "torchscope.accuracy.report",
}

__all__ = [
    "AccuracyResult",
    "Dump",
    "OpResult",
    "TensorMetrics",
    "accuracy_section",
    "compare",
    "compare_dumps",
    "dump",
]

if TYPE_CHECKING:  # pragma: no cover
    from torchscope.accuracy.dump import dump
    from torchscope.accuracy.live import compare
    from torchscope.accuracy.metrics import TensorMetrics
    from torchscope.accuracy.offline import Dump, compare_dumps
    from torchscope.accuracy.report import accuracy_section
    from torchscope.accuracy.result import AccuracyResult, OpResult


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'torchscope.accuracy' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
