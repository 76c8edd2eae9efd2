"""``torchscope.profiler``: ``torch.profiler``'s public names, so a mechanical rename works.

``from torch.profiler import profile, schedule, ...`` becomes ``from torchscope.profiler import
profile, schedule, ...``, and ``import torch.profiler as tp; tp.profile(...)`` becomes
``import torchscope.profiler as tp``: a search-and-replace of ``torch.profiler`` failed with
``ModuleNotFoundError`` before. The names are the same objects as ``torchscope``'s own
(``torchscope.profiler.profile is torchscope.profile``), resolved on first use, so importing
this module does not import torch.

``__all__`` is ``torch.profiler.__all__`` (torch 2.13) less ``NOT_OFFERED``: the names of it that
torchscope does not implement, which are not faked here (today none). A torch name outside its
``__all__`` (``itt``, ``KinetoStepTracker``, ...) is torch's own: asking for it says so.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# torch.profiler.__all__ of torch 2.13, every one of which torchscope implements
__all__ = [
    "DeviceType",
    "ExecutionTraceObserver",
    "ProfilerAction",
    "ProfilerActivity",
    "kineto_available",
    "profile",
    "record_function",
    "schedule",
    "supported_activities",
    "tensorboard_trace_handler",
]

# names in torch.profiler.__all__ that torchscope does not offer (tests/test_profiler_module.py
# fails when torch adds one, so that it is implemented or listed here, and documented)
NOT_OFFERED: frozenset[str] = frozenset()

if TYPE_CHECKING:  # pragma: no cover
    from torchscope.capture.handlers import tensorboard_trace_handler
    from torchscope.capture.profiler import (
        DeviceType,
        ExecutionTraceObserver,
        ProfilerActivity,
        kineto_available,
        profile,
        record_function,
        supported_activities,
    )
    from torchscope.capture.schedule import ProfilerAction, schedule


def __getattr__(name: str) -> Any:
    if name in __all__:
        value = getattr(importlib.import_module("torchscope"), name)
        globals()[name] = value
        return value
    raise AttributeError(
        f"module 'torchscope.profiler' has no attribute {name!r}: it offers torch.profiler's public "
        f"names ({', '.join(__all__)}); for torch's own, use torch.profiler.{name}"
    )


def __dir__() -> list[str]:
    return sorted([*__all__, "NOT_OFFERED"])
