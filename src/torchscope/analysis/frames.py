"""Events split by kind once per trace, so analyses filter small frames, not the whole trace.

Filtering a 200k-row, 31-column events table copies every column; the report runs a few
hundred such filters. Partitioning by kind once and handing out the parts (a cheap concat when
several kinds are asked for) makes the whole report a fraction of the load time. The cache is
keyed by the trace object and dies with it; ``memo`` keeps whole analyses the same way. It also
says whose code a Python frame is (the tool's, torch's or the user's), so advice names the user's code.
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

import polars as pl

from torchscope.trace.model import Trace

T = TypeVar("T")
_PARTS: dict[int, dict[str, pl.DataFrame]] = {}
_MEMO: dict[int, dict[str, Any]] = {}


def _parts(trace: Trace) -> dict[str, pl.DataFrame]:
    key = id(trace)
    parts = _PARTS.get(key)
    if parts is None:
        ev = trace.events
        parts = {
            str(k): df for (k,), df in ev.partition_by("kind", as_dict=True, maintain_order=True).items()
        }
        _PARTS[key] = parts
        weakref.finalize(trace, _forget, key)
    return parts


def _forget(key: int) -> None:
    _PARTS.pop(key, None)
    _MEMO.pop(key, None)


def memo(trace: Trace, name: str, compute: Callable[[], T]) -> T:
    """``compute()`` once per trace (a Trace is immutable, so its analyses are too)."""
    _parts(trace)  # registers the finalizer that clears both caches
    store = _MEMO.setdefault(id(trace), {})
    if name not in store:
        store[name] = compute()
    return store[name]  # type: ignore[no-any-return]


def kinds(trace: Trace, *names: str) -> pl.DataFrame:
    """The events of the given kinds (in start order within each kind)."""
    parts = _parts(trace)
    got = [parts[n] for n in names if n in parts]
    if not got:
        return trace.events.clear()
    return got[0] if len(got) == 1 else pl.concat(got)


# -- Python frames: whose code is it ---------------------------------------------------------
# Kineto names a Python frame "path/file.py(line): function". torchscope's own frames (the
# runner that executes a `torchscope run` script, its sampler, the CLI, the capture skin),
# Python's runpy and the console script are the tool, never the user's code. Wherever the
# package is installed, they sit directly under ".../torchscope/<one of our subpackages>/", so
# a user's project that merely lives in a folder named "torchscope" is not taken for ours.
_TOOL_FRAME = re.compile(
    r"((^|/)torchscope/(runner|cli|capture|analysis|render|trace|accuracy)/\w+\.py\(\d+\)"
    r"|(^|/)torchscope/__main__\.py\(\d+\)"
    r"|(^|/)bin/torchscope\(\d+\)"
    r"|(^|/)runpy\.py\(\d+\)|<frozen runpy>)"
)
# torch's own Python source ("…/site-packages/torch/nn/modules/module.py(1954): _call_impl")
# and its methods called from Python ("<built-in method nonzero of type object>")
_TORCH_SOURCE = re.compile(r"(^|/)torch/[\w/]+\.py\(\d+\): ")
_TORCH_BUILTIN = re.compile(r"<built-in (method|function) \w+ of (Tensor|type) object>")
# the spans `torchscope run` adds around the script's steps (setup, after the last step)
TOOL_SPAN_PREFIX = "torchscope#"


def is_tool_frame(frame: str) -> bool:
    """A frame of torchscope itself, runpy or the console script: never the user's code."""
    return bool(_TOOL_FRAME.search(frame))


def is_torch_frame(frame: str) -> bool:
    """A frame of torch's own Python source or a torch method called from Python."""
    return bool(_TORCH_SOURCE.search(frame) or _TORCH_BUILTIN.match(frame))


def is_user_frame(frame: str) -> bool:
    """A frame of the user's code: a source frame that is neither the tool's nor torch's."""
    return (
        not is_tool_frame(frame)
        and not is_torch_frame(frame)
        and not frame.startswith(("<built-in", "nn.Module: ", "torch/"))
        and bool(re.search(r"\.py\(\d+\): ", frame))
    )


def without_tool_frames(stack: list[str]) -> list[str]:
    """``stack`` (any order) with torchscope's, runpy's and the console script's frames removed."""
    return [f for f in stack if not is_tool_frame(f)]


def ran_under_torchscope_run(trace: Trace) -> bool:
    """Whether the trace was recorded by ``torchscope run`` (its spans or its runner's frames)."""

    def compute() -> bool:
        ann = kinds(trace, "user_annotation", "python_function")
        if ann.height == 0:
            return False
        n = ann["name"].cast(pl.String)
        return bool((n.str.starts_with(TOOL_SPAN_PREFIX) | n.str.contains(r"torchscope/runner/")).any())

    return memo(trace, "ran_under_torchscope_run", compute)
