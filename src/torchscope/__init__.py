"""torchscope: a drop-in, faster torch.profiler, a reader for any Kineto trace, and analyses.

Change ``from torch.profiler import profile, ...`` to ``from torchscope import profile, ...``
(or ``torch.profiler`` to ``torchscope.profiler`` anywhere) and the same code prints the same
tables sooner. ``torchscope.load(path)`` opens any trace
file or log directory without torch. Names are resolved lazily so that importing torchscope
to analyse a trace never imports torch.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import TYPE_CHECKING, Any

from torchscope.process_memory import one_polars_arena

__version__ = "0.1.0"

one_polars_arena()  # before anything of ours imports polars (see its docstring)

if os.environ.get("TORCHSCOPE_REDIRECT"):  # a launcher asked for redirection (imports torch)
    importlib.import_module("torchscope.capture.redirect").install_from_environment()
if "IPython" in sys.modules:  # rich display of our types in a notebook (imports nothing more)
    importlib.import_module("torchscope.integrations.notebook").register_if_in_ipython()


def load_ipython_extension(shell: Any) -> None:
    """``%load_ext torchscope``: rich display and the ``%%torchscope`` cell magic."""
    importlib.import_module("torchscope.integrations.notebook").load_ipython_extension(shell)


# public name -> module that defines it
_LAZY: dict[str, str] = {
    "profile": "torchscope.capture.profiler",
    "schedule": "torchscope.capture.schedule",
    "ProfilerAction": "torchscope.capture.schedule",  # torch's enum when torch imports (its __getattr__)
    "record_function": "torchscope.capture.profiler",
    "ProfilerActivity": "torchscope.capture.profiler",
    "supported_activities": "torchscope.capture.profiler",
    "tensorboard_trace_handler": "torchscope.capture.handlers",
    "ExecutionTraceObserver": "torchscope.capture.profiler",
    "DeviceType": "torchscope.capture.profiler",
    "kineto_available": "torchscope.capture.profiler",
    "load": "torchscope.trace",
    "Trace": "torchscope.trace.model",
    "TraceSet": "torchscope.trace.model",
    "TraceMeta": "torchscope.trace.model",
    "TraceError": "torchscope.errors",
    "TorchscopeError": "torchscope.errors",
    "UsageError": "torchscope.errors",
    "ProfilerStateError": "torchscope.errors",
    "install": "torchscope.capture.redirect",
    "uninstall": "torchscope.capture.redirect",
    "show": "torchscope.integrations.notebook",
}

__all__ = [
    "DeviceType",
    "ExecutionTraceObserver",
    "ProfilerAction",
    "ProfilerActivity",
    "ProfilerStateError",
    "TorchscopeError",
    "Trace",
    "TraceError",
    "TraceMeta",
    "TraceSet",
    "UsageError",
    "__version__",
    "install",
    "kineto_available",
    "load",
    "profile",
    "record_function",
    "schedule",
    "show",
    "supported_activities",
    "tensorboard_trace_handler",
    "uninstall",
]

if TYPE_CHECKING:  # pragma: no cover
    from torchscope.errors import ProfilerStateError, TorchscopeError, TraceError, UsageError
    from torchscope.trace.model import Trace, TraceMeta, TraceSet


# ``torchscope.profiler`` mirrors ``torch.profiler``'s names (``import torchscope; torchscope.profiler.profile``)
_SUBPACKAGES = ("accuracy", "analysis", "capture", "cli", "compat", "models", "profiler", "render", "trace")


def __getattr__(name: str) -> Any:
    if name in _SUBPACKAGES:
        return importlib.import_module(f"torchscope.{name}")
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'torchscope' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
