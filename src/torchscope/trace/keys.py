"""Joins on one integer key in NumPy: each probe's row of a small table, by sorting the table.

Device work finds its runtime call by correlation id, and a runtime call its op by External
id: each a join of a few thousand keys against a few thousand probes. A polars join of frames
built for it paid ~1-2 ms a call in fixed costs (building, hashing, gathering the columns it
carried), twice per read; a sort of the keys and a binary search per probe cost ~0.1 ms.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import numpy.typing as npt

I64 = npt.NDArray[np.int64]


def lookup(keys: I64, values: I64, probes: I64, *, keep: Literal["first", "last"]) -> I64:
    """For each probe, ``values[i]`` of the row ``i`` whose ``keys[i]`` equals it (of several,
    the first or the last in row order, as ``keep`` says), or -1 where no key does."""
    out = np.full(probes.size, -1, np.int64)
    if keys.size == 0 or probes.size == 0:
        return out
    order = np.argsort(keys, kind="stable")  # equal keys stay in row order
    k, v = keys[order], values[order]
    last_of_run = np.ones(k.size, bool)
    last_of_run[:-1] = k[1:] != k[:-1]
    kept = last_of_run if keep == "last" else np.roll(last_of_run, 1)  # a run starts after one ends
    k, v = k[kept], v[kept]
    at = np.minimum(np.searchsorted(k, probes), k.size - 1)
    hit = k[at] == probes
    out[hit] = v[at[hit]]
    return out
