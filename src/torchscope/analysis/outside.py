"""Time outside torch ops: one definition shared by the ``python_outside_ops`` rule and the
overview's "Python outside ops" host category, so the advice and the breakdown never disagree.

An instant of the host is *accounted for* when some thread is inside a torch op (so backward,
run in C++ on the autograd thread while the main thread waits, is accounted for), inside a
collective (``gloo:``/``nccl:`` work and its waits are communication), inside a runtime call, a
DataLoader or optimizer span, or when the device is busy (the host waiting on the device is
not Python). What is left is time the process spent outside all of that: Python, when the
trace recorded Python stacks it is named; without them it is all that can be measured.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from torchscope.analysis import intervals as iv
from torchscope.analysis import names
from torchscope.analysis.frames import kinds, memo
from torchscope.trace.model import Trace


def accounted_spans(trace: Trace) -> iv.Spans:
    """Merged spans when the host is inside an op, a collective, a runtime call, the DataLoader
    or the optimizer, or the device is busy."""
    return memo(trace, "accounted_spans", lambda: _accounted(trace))


def _accounted(trace: Trace) -> iv.Spans:
    host = kinds(trace, "cpu_op", "user_annotation", "collective", "runtime").filter(
        ~names.PROFILER_STEP
        & (
            pl.col("kind").is_in(["cpu_op", "runtime"])
            | names.HOST_COLLECTIVE
            | names.DATALOADER
            | names.OPTIMIZER
        )
    )
    dev = kinds(trace, "kernel", "memcpy", "memset")
    starts = np.concatenate([host["start_ns"].to_numpy(), dev["start_ns"].to_numpy()])
    ends = np.concatenate(
        [(host["start_ns"] + host["dur_ns"]).to_numpy(), (dev["start_ns"] + dev["dur_ns"]).to_numpy()]
    )
    return iv.merge(starts, ends)


def outside_per_window(trace: Trace, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Per window [start, end): the ns not accounted for (see the module docstring)."""
    s = np.asarray(starts, dtype=np.int64)
    e = np.asarray(ends, dtype=np.int64)
    return (e - s) - iv.overlap_per_window(accounted_spans(trace), s, e)
