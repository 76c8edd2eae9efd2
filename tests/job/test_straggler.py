"""The straggler's "also late" ranks: named in a job of three or more, never in a job of two."""

from __future__ import annotations

from typing import Any

from torchscope.job.straggler import align, straggler, wait_per_step


def _rank(rank: int) -> dict[str, Any]:
    tables = {"ops_ns": {"aten::mm": 1000.0}, "kernels_ns": {}, "breakdown_ns": {"Total": 1000.0}}
    return {"rank": rank, "cycles": [{"cycle": 0, "steps": 10, **tables}]}


def _aligned(lags: dict[int, float], last: dict[int, int]) -> dict[str, Any]:
    matched = sum(last.values())
    return {
        "matched": matched,
        "collectives": [{"cycle": 0, "mean_wait_ns": 50_000.0}] * matched,
        "ranks": [
            {
                "rank": r,
                "last": last.get(r, 0),
                "last_share": last.get(r, 0) / matched,
                "mean_lag_ns": lag,
                "wait_ns": 50_000.0 * matched,  # each rank waits 50 us a collective
            }
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


def _with_collectives(rank: int, groups: dict[str, list[tuple[int, int]]]) -> dict[str, Any]:
    """A rank summary whose cycle 0 holds these collectives: group -> [(start_ns, end_ns)]."""
    import numpy as np

    summary = _rank(rank)
    summary["cycles"][0]["collectives"] = {
        g: {
            "start_ns": np.array([s for s, _ in spans], np.int64),
            "end_ns": np.array([e for _, e in spans], np.int64),
            "name_code": np.zeros(len(spans), np.uint16),
            "names": ["allreduce"],
        }
        for g, spans in groups.items()
    }
    return summary


def test_collectives_at_the_same_time_are_waited_for_once() -> None:
    # DDP's two gradient buckets all-reduce at once on gloo's two threads: rank 0 waits in one
    # or the other from 0 to 11 ms, 11 ms, not the 10 + 10 of their sum (summed, a real job's
    # rank waited 180 ms in 172 ms of steps)
    ms = 1_000_000
    early = {"thread a": [(0, 12 * ms)], "thread b": [(1 * ms, 12 * ms)]}
    late = {"thread a": [(10 * ms, 12 * ms)], "thread b": [(11 * ms, 12 * ms)]}
    aligned = align([_with_collectives(0, early), _with_collectives(1, late)])
    assert [(r["rank"], r["wait_ns"], r["last"]) for r in aligned["ranks"]] == [(0, 11 * ms, 0), (1, 0.0, 2)]
    assert wait_per_step(aligned, 1) == 5.5 * ms  # the mean over the two ranks


def test_a_collective_every_rank_reaches_together_has_no_last_rank() -> None:
    ms = 1_000_000
    same = {"stream 7": [(0, 5 * ms), (6 * ms, 8 * ms)]}
    later = {"stream 7": [(0, 5 * ms), (7 * ms, 8 * ms)]}
    aligned = align([_with_collectives(0, same), _with_collectives(1, same), _with_collectives(2, later)])
    # the first collective: all three together (no one is last); the second: rank 2
    assert [r["last"] for r in aligned["ranks"]] == [0, 0, 1]


def test_a_wait_longer_than_a_step_names_no_straggler() -> None:
    # two different jobs' traces in one folder: "the job waits 424 ms per step (150 % of a step)"
    aligned = _aligned({0: 0.0, 1: 60_000.0}, {1: 9, 0: 1})
    assert straggler([_rank(0), _rank(1)], aligned, step_ns=1e6) is not None  # 50 us a step of 1 ms
    assert straggler([_rank(0), _rank(1)], aligned, step_ns=40_000.0) is None  # more than the step
    # as long as a step, no more: the others spend their steps waiting for it (a 2-rank gloo job
    # copied to 40 ranks waited 18.044 ms a step of 18.004, and its straggler went unnamed)
    assert straggler([_rank(0), _rank(1)], aligned, step_ns=49_900.0) is not None
