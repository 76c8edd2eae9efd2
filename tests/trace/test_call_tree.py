"""The host call tree two ways: our C extension's one-pass stack (``_scan.nest``) and NumPy's
pointer jumping (used without the extension) must give every row the same parent, depth and
self time, on the shared traces and on the overlaps real traces rarely hold."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from tests.trace.conftest import ALL_TRACES

from torchscope.trace import derive, read_chrome
from torchscope.trace.schema import HOST_KINDS

pytestmark = pytest.mark.skipif(derive._scan is None, reason="the C extension is not built")


def _both(
    monkeypatch: pytest.MonkeyPatch,
    rows: np.ndarray,
    pid: np.ndarray,
    tid: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
) -> tuple[tuple[np.ndarray, ...], tuple[np.ndarray, ...]]:
    n = start.size
    fast = derive._call_tree(rows, pid, tid, start, end, n)
    with monkeypatch.context() as m:
        m.setattr(derive, "_scan", None)
        slow = derive._call_tree(rows, pid, tid, start, end, n)
    return fast, slow


@pytest.mark.parametrize("path", ALL_TRACES, ids=lambda p: p.name)
def test_both_ways_agree_on_every_shared_trace(monkeypatch: pytest.MonkeyPatch, path: Path) -> None:
    ev = read_chrome(path).events  # in id order, as derive sees them
    host = ev["kind"].cast(str).is_in(list(HOST_KINDS)).to_numpy()
    cols = [ev[c].to_numpy().astype(np.int64) for c in ("pid", "tid", "start_ns")]
    end = cols[2] + ev["dur_ns"].to_numpy()
    fast, slow = _both(monkeypatch, np.flatnonzero(host), *cols, end)
    for got, want, what in zip(fast, slow, ("parent", "depth", "self_ns"), strict=True):
        assert np.array_equal(got, want), what
    # and both are what the reader stored
    assert np.array_equal(fast[0], ev["parent"].to_numpy())
    assert np.array_equal(fast[2], ev["self_ns"].to_numpy())


def test_partial_overlaps_equal_intervals_and_zero_durations() -> None:
    # one thread: [0,10) holds [2,5) and [4,12) overlaps its end; [4,12) holds [6,8);
    # two identical [20,30); a zero-length event at 25 and one at 30 (the end of both)
    start = np.array([0, 2, 4, 6, 20, 20, 25, 30], np.int64)
    end = np.array([10, 5, 12, 8, 30, 30, 25, 30], np.int64)
    zeros = np.zeros(start.size, np.int64)
    parent, depth, self_ns = derive._call_tree(np.arange(start.size), zeros, zeros, start, end, start.size)
    assert parent.tolist() == [-1, 0, -1, 2, -1, 4, 5, -1]
    assert depth.tolist() == [0, 1, 0, 1, 0, 1, 2, 0]
    # [2,5) covers 3 of [0,10)'s 10; [4,12) is not its child, but straddles its end: [5,10) is
    # [4,12)'s, and [4,5) of [2,5) too (each instant once: the self times add up to [0,12)'s
    # 12); the first [20,30) holds the second
    assert self_ns.tolist() == [2, 2, 6, 2, 0, 10, 0, 0]


def test_random_trees_agree(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(7)
    for _ in range(50):
        n = int(rng.integers(1, 400))
        start = np.sort(rng.integers(0, 1000, n)).astype(np.int64)
        end = start + rng.integers(0, 300, n)
        # rows in id order: by start, longest first, as derive sorts them
        order = np.lexsort((-(end - start), start))
        start, end = start[order], end[order]
        pid = rng.integers(0, 2, n).astype(np.int64)
        tid = rng.integers(0, 3, n).astype(np.int64)
        rows = np.flatnonzero(rng.random(n) < 0.8)
        fast, slow = _both(monkeypatch, rows, pid, tid, start, end)
        for got, want in zip(fast, slow, strict=True):
            assert np.array_equal(got, want)
