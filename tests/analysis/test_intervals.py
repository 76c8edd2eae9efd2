"""The interval algebra against a brute-force model on integer time lines."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from torchscope.analysis import intervals as iv

spans = st.lists(st.tuples(st.integers(0, 60), st.integers(0, 20)), max_size=12)


def _mask(pairs: list[tuple[int, int]]) -> np.ndarray:
    m = np.zeros(100, bool)
    for s, d in pairs:
        m[s : s + d] = True
    return m


def _from(pairs: list[tuple[int, int]]) -> iv.Spans:
    return iv.merge([s for s, _ in pairs], [s + d for s, d in pairs])


def _to_mask(sp: iv.Spans) -> np.ndarray:
    m = np.zeros(100, bool)
    for s, e in zip(sp[0].tolist(), sp[1].tolist(), strict=True):
        m[s:e] = True
    return m


@settings(max_examples=150, deadline=None)
@given(spans, spans, st.integers(0, 90), st.integers(0, 30))
def test_union_intersection_difference_and_windows_match_brute_force(
    a: list[tuple[int, int]], b: list[tuple[int, int]], w0: int, wl: int
) -> None:
    A, B = _from(a), _from(b)
    assert (_to_mask(A) == _mask(a)).all()
    assert (_to_mask(iv.intersect(A, B)) == (_mask(a) & _mask(b))).all()
    assert (_to_mask(iv.subtract(A, B)) == (_mask(a) & ~_mask(b))).all()
    assert iv.total(A) == int(_mask(a).sum())
    got = iv.overlap_per_window(A, [w0], [w0 + wl])
    assert int(got[0]) == int(_mask(a)[w0 : w0 + wl].sum())
    # merged spans are sorted and disjoint (touching spans are joined)
    assert (A[0][1:] > A[1][:-1]).all()
