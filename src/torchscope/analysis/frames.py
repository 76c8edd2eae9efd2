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

import numpy as np
import polars as pl

from torchscope.trace.dialect import RUN_KEY
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


def names_text(trace: Trace) -> pl.Series:
    """Every event's name as text, cast once per trace: the report's analyses each cast the
    whole Categorical column (123k rows, ~2 ms each, seven times on nccl_rank1_of_2)."""
    return memo(trace, "names_text", lambda: trace.events["name"].cast(pl.String))


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
# (regular expressions both Python's re and Polars' str.contains read, for vectorized filters)
# torchscope's own code: what it calls before the user's script starts is the tool's too
OWN_FRAME_PATTERN = (
    r"((^|/)torchscope/(runner|cli|capture|analysis|render|trace|accuracy)/\w+\.py\(\d+\)"
    r"|(^|/)torchscope/__main__\.py\(\d+\))"
)
# Python's module runner and the console script: never the user's frames, but what they run
# is (``python -m pytest`` runs the user's tests, ``python -m torchscope`` our CLI)
# The console script is named by its path relative to its own folder, which Python puts first on
# sys.path (``torchscope(8): <module>``), or by a longer path when torch cannot shorten it.
LAUNCHER_FRAME_PATTERN = r"((^|/)torchscope\(\d+\): <module>$|(^|/)runpy\.py\(\d+\)|<frozen runpy>)"
TOOL_FRAME_PATTERN = f"({OWN_FRAME_PATTERN}|{LAUNCHER_FRAME_PATTERN})"
_TOOL_FRAME = re.compile(TOOL_FRAME_PATTERN)
# the frames that run the script (ours, runpy's): the ``<module>`` they run is the user's. They
# call it through ``exec``, a C call that torch records only when the profile was already on:
# a cycle that begins in the middle of a run sees the script's ``<module>`` right under them
ENTRY_CALLER_PATTERN = (
    r"((^|/)torchscope/runner/target\.py\(\d+\): _exec_script|(runpy\.py|<frozen runpy>)\(\d+\): _run_code)$"
)
# our wrapper around the user's ``optimizer.step`` (``runner.after_step``): a frame of ours, but
# what it calls is the user's step (torch's optimizer code, run for the user), not the tool's
USER_CALL_WRAPPER_PATTERN = r"(^|/)torchscope/runner/after_step\.py\(\d+\): step$"
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


def tool_frame_rows(events: pl.DataFrame) -> np.ndarray:
    """Per event row: whether it is a Python frame of the tool, for vectorized filters.

    A tool frame (``is_tool_frame``), and every frame torchscope's own code called (the torch
    profiler it starts, the imports it makes, the ``compile`` and ``exec`` with which the
    runner runs the script), down to the script's own code: the ``<module>`` frame that a
    tool frame's ``exec`` runs. Below it everything is the user's run, torch's frames included.
    runpy's frames are always dropped, but at the root of a process (``python -m pytest``)
    they pass nothing on: what they run is the user's code. ``events`` is a trace's whole
    events table (rows indexed by ``id``).
    """
    n = events.height
    py = (events["kind"] == "python_function").to_numpy()
    tool = np.zeros(n, bool)
    if not py.any():
        return tool
    name = events["name"].cast(pl.String)
    py_names = name.filter(pl.Series(py))
    own = np.zeros(n, bool)
    own[py] = py_names.str.contains(OWN_FRAME_PATTERN).to_numpy()
    tool[py] = py_names.str.contains(TOOL_FRAME_PATTERN).to_numpy()
    pattern = tool.copy()
    entry_caller = np.zeros(n, bool)
    entry_caller[py] = py_names.str.contains(ENTRY_CALLER_PATTERN).to_numpy()
    wrapper = np.zeros(n, bool)
    wrapper[py] = py_names.str.contains(USER_CALL_WRAPPER_PATTERN).to_numpy()
    is_exec = py & (name == "<built-in function exec>").fill_null(False).to_numpy()
    is_module = py & name.str.ends_with("): <module>").fill_null(False).to_numpy()
    parent = events["parent"].fill_null(-1).to_numpy().astype(np.int64)
    # the nearest Python frame above each Python frame (spans and ops may sit between)
    nearest = np.full(n, -1, np.int64)
    rows = np.flatnonzero(py)
    cur = parent[rows]
    for _ in range(256):
        live = cur >= 0
        if not live.any():
            break
        hit = np.zeros(rows.size, bool)
        hit[live] = py[cur[live]]
        nearest[rows[hit]] = cur[hit]
        keep = live & ~hit
        rows, cur = rows[keep], parent[cur[keep]]
    # parents before children: a frame is under our code when its parent is (our frames, what
    # they call, runpy's frames included) unless it is the script's entry; a built-in that a
    # launcher calls directly (runpy's exec) is launcher mechanics
    builtin = py & name.str.starts_with("<built-in").fill_null(False).to_numpy()
    under = own.copy()
    py_rows = np.flatnonzero(py)
    depth = events["depth"].fill_null(0).cast(pl.Int64).to_numpy()[py_rows]
    order = py_rows[np.argsort(depth, kind="stable")]
    levels = np.searchsorted(np.sort(depth), np.unique(depth))
    for a, b in zip(levels, [*levels[1:], order.size], strict=True):
        r = order[a:b]
        p = nearest[r]
        has = p >= 0
        pc = np.maximum(p, 0)
        pp = np.where(has, nearest[pc], -1)
        exec_by_tool = is_exec[pc] & (pp >= 0) & pattern[np.maximum(pp, 0)]
        entry = is_module[r] & has & (exec_by_tool | entry_caller[pc])
        under[r] |= has & under[pc] & ~entry & ~wrapper[pc]
        tool[r] |= under[r] | (builtin[r] & has & pattern[pc])
    return tool


def tool_frames(trace: Trace) -> np.ndarray:
    """``tool_frame_rows`` of the trace's events, once per trace (the page's flame graphs, the
    advice and the stacks export each asked: 35 ms a time on 104k frames)."""
    return memo(trace, "tool_frames", lambda: tool_frame_rows(trace.events))


def ran_under_torchscope_run(trace: Trace) -> bool:
    """Whether the trace was recorded by ``torchscope run`` (its mark, its spans or its
    runner's frames)."""

    def compute() -> bool:
        if trace.meta.extra.get(RUN_KEY) == "1":
            return True
        ann = kinds(trace, "user_annotation", "python_function")
        if ann.height == 0:
            return False
        n = ann["name"].cast(pl.String)
        return bool((n.str.starts_with(TOOL_SPAN_PREFIX) | n.str.contains(r"torchscope/runner/")).any())

    return memo(trace, "ran_under_torchscope_run", compute)
