"""Walks over the Trace's ``parent`` column, vectorized: one numpy step per tree level.

Several analyses ask the same two questions of the call tree: "which is the nearest enclosing
event of some sort" (the op that launched a runtime call, the module around a module, the
zero_grad around a fill) and "how much is under each event" (device time, allocated bytes).
Both are answered here once, level by level, with no Python loop per event.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

I64 = npt.NDArray[np.int64]


def nearest_ancestor(parent: I64, rows: I64, mask: npt.NDArray[np.bool_]) -> I64:
    """For each of ``rows``, its nearest strict ancestor whose ``mask`` is true, else -1."""
    cur = parent[rows].astype(np.int64, copy=True)
    for _ in range(parent.size + 1):  # a chain is never longer than the table
        climb = np.flatnonzero((cur >= 0) & ~mask[np.maximum(cur, 0)])
        if climb.size == 0:
            break
        cur[climb] = parent[cur[climb]]
    return cur


def subtree_sum(values: npt.NDArray[np.integer], parent: I64) -> I64:
    """Each row's value plus all its descendants' values."""
    total = values.astype(np.int64, copy=True)
    rows = np.flatnonzero(values)
    amounts = values[rows].astype(np.int64)
    cur = parent[rows]
    while True:
        keep = cur >= 0
        cur, amounts = cur[keep], amounts[keep]
        if not cur.size:
            return total
        np.add.at(total, cur, amounts)
        cur = parent[cur]
