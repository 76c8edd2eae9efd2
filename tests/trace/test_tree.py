"""The call-tree walks every analysis shares (trace.tree)."""

from __future__ import annotations

import numpy as np
import pytest

from torchscope.trace.tree import by_level, depths, nearest_ancestor, subtree_sum

# 0 step ── 1 op ── 2 op ── 3 runtime
#        └─ 4 python ── 5 runtime;   6 a root of its own
PARENT = np.array([-1, 0, 1, 2, 0, 4, -1], np.int64)
IS_OP = np.array([False, True, True, False, False, False, False])


def test_nearest_ancestor_is_the_innermost_match_or_minus_one() -> None:
    rows = np.array([3, 5, 6, 2], np.int64)
    assert nearest_ancestor(PARENT, rows, IS_OP).tolist() == [2, -1, -1, 1]


def test_nearest_ancestor_of_rows_settling_at_different_depths() -> None:
    # with_stack's shape: ops under chains of Python frames of every length, where each step
    # climbs only the rows still looking; it must agree with walking each row up by hand
    rng = np.random.default_rng(7)
    n = 3000
    parent = np.array([-1] + [int(rng.integers(max(0, i - 40), i)) for i in range(1, n)], np.int64)
    mask = rng.random(n) < 0.05
    rows = rng.choice(n, 500, replace=False)

    def walk(row: int) -> int:
        up = int(parent[row])
        while up >= 0 and not mask[up]:
            up = int(parent[up])
        return up

    got = nearest_ancestor(parent, rows, mask)
    assert got.tolist() == [walk(int(r)) for r in rows]
    assert (got >= 0).sum() > 100 and (got == -1).sum() > 10  # both outcomes are exercised


def test_subtree_sum_adds_each_value_to_every_ancestor() -> None:
    values = np.array([0, 0, 5, 7, 0, 11, 3], np.int64)
    assert subtree_sum(values, PARENT).tolist() == [23, 12, 12, 7, 11, 11, 3]


def test_depths_and_levels_of_a_forest() -> None:
    depth = depths(PARENT)
    assert depth.tolist() == [0, 1, 2, 3, 1, 2, 0]
    assert [level.tolist() for level in by_level(depth)] == [[0, 6], [1, 4], [2, 5], [3]]


def test_depths_of_a_recursion_40000_frames_deep_and_of_a_cycle() -> None:
    # a new user's recursive script under with_stack: one numpy step per level made its
    # dashboard's flame graphs take 4.7 s; a chain this deep is now ~16 doublings
    chain = np.arange(-1, 39_999, dtype=np.int64)
    assert depths(chain).tolist() == list(range(40_000))
    with pytest.raises(ValueError, match="cycle"):
        depths(np.array([1, 2, 0, -1], np.int64))
