"""Events split by kind once per trace, so analyses filter small frames, not the whole trace.

Filtering a 200k-row, 31-column events table copies every column; the report runs a few
hundred such filters. Partitioning by kind once and handing out the parts (a cheap concat when
several kinds are asked for) makes the whole report a fraction of the load time. The cache is
keyed by the trace object and dies with it; ``memo`` keeps whole analyses the same way.
"""

from __future__ import annotations

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
