"""The NumPy key lookup ``derive`` links launches and External ids with (trace.keys)."""

from __future__ import annotations

import numpy as np
import polars as pl

from torchscope.trace.keys import lookup

# correlation ids of five runtime calls (rows 0..4); 5 and 3 are each written twice
KEYS = np.array([5, 3, 5, 7, 3], np.int64)
ROWS = np.arange(5, dtype=np.int64)


def test_each_probe_gets_the_first_or_last_row_of_its_key_or_minus_one() -> None:
    probes = np.array([3, 5, 7, 9, -1, 5], np.int64)
    assert lookup(KEYS, ROWS, probes, keep="first").tolist() == [1, 0, 3, -1, -1, 0]
    assert lookup(KEYS, ROWS, probes, keep="last").tolist() == [4, 2, 3, -1, -1, 2]


def test_nothing_to_find_in_or_nothing_to_look_for() -> None:
    empty = np.array([], np.int64)
    assert lookup(empty, empty, np.array([1, 2], np.int64), keep="first").tolist() == [-1, -1]
    assert lookup(KEYS, ROWS, empty, keep="last").tolist() == []


def test_agrees_with_the_polars_join_it_replaced() -> None:
    # random keys with many repeats, probes half of which have no key: the unique-then-join
    # ``derive`` ran before (keep the first or last row of each key, inner join)
    rng = np.random.default_rng(3)
    keys = rng.integers(0, 500, 4000)
    rows = np.arange(keys.size, dtype=np.int64)
    probes = rng.integers(0, 1000, 3000)
    for keep in ("first", "last"):
        table = pl.DataFrame({"key": keys, "row": rows}).unique("key", keep=keep)
        joined = pl.DataFrame({"probe": np.arange(probes.size), "key": probes}).join(table, on="key", how="left")
        expected = joined.sort("probe")["row"].fill_null(-1).to_numpy()
        assert (lookup(keys, rows, probes, keep=keep) == expected).all()
