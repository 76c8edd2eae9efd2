"""The straggler's "also late" ranks: named in a job of three or more, never in a job of two."""

from __future__ import annotations

from typing import Any

from torchscope.job.straggler import straggler


def _rank(rank: int) -> dict[str, Any]:
    tables = {"ops_ns": {"aten::mm": 1000.0}, "kernels_ns": {}, "breakdown_ns": {"Total": 1000.0}}
    return {"rank": rank, "cycles": [{"cycle": 0, "steps": 10, **tables}]}


def _aligned(lags: dict[int, float], last: dict[int, int]) -> dict[str, Any]:
    matched = sum(last.values())
    return {
        "matched": matched,
        "collectives": [{"cycle": 0, "mean_wait_ns": 50_000.0}] * matched,
        "ranks": [
            {"rank": r, "last": last.get(r, 0), "last_share": last.get(r, 0) / matched, "mean_lag_ns": lag}
            for r, lag in lags.items()
        ],
    }


def test_a_third_rank_nearly_as_late_is_named() -> None:
    s = straggler(
        [_rank(0), _rank(1), _rank(2)], _aligned({0: 0.0, 1: 40_000.0, 2: 60_000.0}, {2: 7, 1: 3}), 1e6
    )
    assert s is not None and s["rank"] == 2
    assert s["also_late"] == [{"rank": 1, "mean_lag_ns": 40_000.0}] and s["also_late_count"] == 1


def test_in_a_job_of_two_the_other_rank_is_not_also_late() -> None:
    """With two ranks, the other one arrives first whenever the straggler is last: its lag is the
    time it was last itself, and naming it "also late" named the one rank there is."""
    s = straggler([_rank(0), _rank(1)], _aligned({0: 40_000.0, 1: 60_000.0}, {1: 7, 0: 3}), 1e6)
    assert s is not None and s["rank"] == 1
    assert s["also_late"] == [] and s["also_late_count"] == 0


def test_in_a_job_of_eight_a_rank_last_at_three_times_chance_and_twice_any_other_is_named() -> None:
    """8 ranks: rank 5 last at 10 of 26 collectives, no other at more than 4. The rule "last at
    half the collectives" was chance's 1/N at two ranks but missed it here."""
    last = {5: 10, 0: 4, 1: 3, 2: 3, 3: 2, 4: 2, 6: 1, 7: 1}
    lags = {r: 20_000.0 for r in range(8)} | {5: 42_800.0}
    s = straggler([_rank(r) for r in range(8)], _aligned(lags, last), 1e6)
    assert s is not None and s["rank"] == 5
    # a leader only a little ahead of the next is chance
    assert straggler([_rank(r) for r in range(8)], _aligned(lags, last | {0: 6}), 1e6) is None
