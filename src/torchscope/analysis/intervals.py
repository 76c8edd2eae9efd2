"""Interval algebra on numpy arrays: the one tool every time breakdown is built from.

Step breakdowns, device utilization, idle time and communication overlap are all unions,
intersections and differences of ``[start, end)`` intervals. Doing them with sorted numpy
arrays and ``searchsorted`` (never a Python loop per event) is what keeps the analyses fast
on traces with hundreds of thousands of events. An interval set is a pair ``(starts, ends)``
of int64 arrays, sorted and disjoint after ``merge``.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

Arr = npt.NDArray[np.int64]
Spans = tuple[Arr, Arr]

_EMPTY: Spans = (np.empty(0, np.int64), np.empty(0, np.int64))


def empty() -> Spans:
    return (_EMPTY[0].copy(), _EMPTY[1].copy())


def merge(starts: npt.ArrayLike, ends: npt.ArrayLike) -> Spans:
    """Union of possibly overlapping intervals, as sorted disjoint intervals."""
    s = np.asarray(starts, dtype=np.int64)
    e = np.asarray(ends, dtype=np.int64)
    keep = e > s
    s, e = s[keep], e[keep]
    if s.size == 0:
        return empty()
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    run_end = np.maximum.accumulate(e)
    # a new group starts where an interval begins after everything before it ended
    new = np.empty(s.size, dtype=bool)
    new[0] = True
    new[1:] = s[1:] > run_end[:-1]
    first = np.flatnonzero(new)
    last = np.append(first[1:], s.size) - 1
    return s[first], run_end[last]


def total(spans: Spans) -> int:
    return int((spans[1] - spans[0]).sum())


def intersect(a: Spans, b: Spans) -> Spans:
    """Intersection of two disjoint sorted interval sets, in O((|a| + |b|) log)."""
    (as_, ae), (bs, be) = a, b
    if as_.size == 0 or bs.size == 0:
        return empty()
    # the b intervals overlapping a[i] are the contiguous run lo[i]:hi[i]
    lo = np.searchsorted(be, as_, side="right")
    hi = np.searchsorted(bs, ae, side="left")
    n = np.maximum(hi - lo, 0)
    if n.sum() == 0:
        return empty()
    ai = np.repeat(np.arange(as_.size), n)
    offs = np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n)
    bj = np.repeat(lo, n) + offs
    s = np.maximum(as_[ai], bs[bj])
    e = np.minimum(ae[ai], be[bj])
    keep = e > s
    return s[keep], e[keep]


_LO = np.iinfo(np.int64).min // 4
_HI = np.iinfo(np.int64).max // 4


def complement(b: Spans) -> Spans:
    """Everything not in ``b`` (bounded by very large sentinels)."""
    bs, be = b
    return np.concatenate([[_LO], be]).astype(np.int64), np.concatenate([bs, [_HI]]).astype(np.int64)


def subtract(a: Spans, b: Spans) -> Spans:
    """``a`` minus ``b`` for disjoint sorted interval sets."""
    if a[0].size == 0 or b[0].size == 0:
        return a
    s, e = intersect(a, complement(b))
    keep = e > s
    return s[keep], e[keep]


def covered_before(spans: Spans, t: npt.ArrayLike) -> Arr:
    """For each time ``t``: how much of ``spans`` (disjoint, sorted) lies before ``t``."""
    s, e = spans
    tt = np.asarray(t, dtype=np.int64)
    if s.size == 0:
        return np.zeros(tt.shape, np.int64)
    cum = np.concatenate([[0], np.cumsum(e - s)])
    i = np.searchsorted(s, tt, side="right")  # intervals starting at or before t
    done = cum[np.maximum(i - 1, 0)]
    partial = np.where(i > 0, np.minimum(tt, e[np.maximum(i - 1, 0)]) - s[np.maximum(i - 1, 0)], 0)
    return np.where(i > 0, done + partial, 0).astype(np.int64)


def overlap_per_window(spans: Spans, win_starts: npt.ArrayLike, win_ends: npt.ArrayLike) -> Arr:
    """Length of ``spans`` inside each window ``[win_starts[i], win_ends[i])``."""
    return covered_before(spans, win_ends) - covered_before(spans, win_starts)
