"""The straggler: which rank the others wait for at the collectives, and what it does more of.

In data-parallel training every collective ends at about the same moment on every rank, so each
rank's step is equally long and per-rank step time cannot name the culprit (the slow rank waits
least). What differs is when each rank *arrives*. So: match each collective across ranks (by its
order within its group, per cycle), put the ranks on one clock (the median offset of their
collective ends, which are near-simultaneous synchronisation points), and measure per collective
the arrival skew (last arrival minus first) and per rank the wait (last arrival minus its own).
The rank that arrives last most often is the straggler; its ops and kernels whose time per step
exceeds the other ranks' median are the likely cause.
"""

from __future__ import annotations

from collections import Counter
from statistics import median
from typing import Any

import numpy as np

from torchscope.analysis import intervals as iv

# the straggler must arrive last at least this share of the collectives, and the wait it causes
# must be at least this share of the median step: otherwise arrival order is noise
MIN_LAST_SHARE = 0.5
# In a job of many ranks chance makes each last 1/N of the time: a rank last at three times
# chance, and twice as often as any other, is named too (8 ranks: rank 5 last at 10 of 26
# collectives, no other at more than 4, was "no straggler")
CHANCE_MULTIPLE = 3.0
MIN_WAIT_SHARE = 0.02
TOP_CAUSES = 5


def align(ranks: list[dict[str, Any]]) -> dict[str, Any]:
    """Collective alignment over the rank summaries of one run (see the module doc).

    Returns ``collectives`` (one row per matched collective: cycle, group, index, name, skew,
    last rank, mean wait), ``ranks`` (per rank: times last, mean lag behind the first arrival,
    total wait, clock offset), ``matched`` (collectives aligned) and ``notes`` (why some or all
    collectives could not be matched, for the job's warnings).

    A collective where several ranks arrive last together (to the nanosecond: copies of one
    rank's trace, or a microsecond clock) counts as last for each of them: credited to the
    lowest rank only, one of 64 identical ranks was named the straggler of the other 63. One
    where every rank arrives together has no last rank.

    A rank's wait is the time it spends waiting in any collective (the union of its waits):
    DDP's gradient buckets all-reduce at the same time on gloo's threads, and the sum of their
    waits said a rank waited 180 ms in 172 ms of steps. A cycle the reader had to cut
    (``cut``: a damaged file) is left out, with a note: its collectives end early, and matched
    by order they made the cut rank "the straggler" at 174 % of a step.
    """
    rank_ids = [r["rank"] for r in ranks]
    cycles = sorted({c["cycle"] for r in ranks for c in r["cycles"]})
    coll_rows: list[dict[str, Any]] = []
    last_count: Counter[int] = Counter()
    wait_total = dict.fromkeys(rank_ids, 0.0)
    lag_total = dict.fromkeys(rank_ids, 0.0)
    offsets: dict[int, list[float]] = {r: [] for r in rank_ids}
    waits: dict[int, list[tuple[np.ndarray, np.ndarray]]] = {r: [] for r in rank_ids}
    notes: dict[str, None] = {}  # in order, once each
    for cyc in cycles:
        per_rank = {}
        for r in ranks:
            c = next((c for c in r["cycles"] if c["cycle"] == cyc), None)
            if c is not None and c.get("cut") and c["collectives"]:
                notes[
                    f"rank {r['rank']}'s cycle {cyc} was cut short (a damaged file): left out of the"
                    " collectives' matching and the straggler"
                ] = None
            elif c is not None and c["collectives"]:
                per_rank[r["rank"]] = c["collectives"]
        if len(per_rank) < 2:
            continue
        per_rank, note = _shared_groups(per_rank)
        if note:
            notes[note] = None
        groups = set.intersection(*(set(cols) for cols in per_rank.values()))
        for group in sorted(groups):
            ids = sorted(per_rank)
            cols = [per_rank[rk][group] for rk in ids]
            n = min(len(c["start_ns"]) for c in cols)
            if n == 0:
                continue
            start = np.stack([c["start_ns"][:n] for c in cols]).astype(np.float64)
            end = np.stack([c["end_ns"][:n] for c in cols]).astype(np.float64)
            names = [cols[0]["names"][k] for k in cols[0]["name_code"][:n]]
            # one clock: shift each rank by the median of (its ends - the median end)
            offset = np.median(end - np.median(end, axis=0), axis=1)
            arrive = start - offset[:, None]
            last = arrive.max(axis=0)
            wait = last - arrive  # ranks x collectives, >= 0
            lag = arrive - arrive.min(axis=0)
            last_rank = np.argmax(arrive, axis=0)  # of ranks arriving last together, the lowest
            is_last = (arrive >= last[None, :]) & (arrive.min(axis=0) < last)[None, :]
            for j in range(n):
                coll_rows.append(
                    {
                        "cycle": cyc,
                        "group": group,
                        "index": j,
                        "name": names[j],
                        "skew_ns": float(last[j] - arrive[:, j].min()),
                        "last_rank": ids[int(last_rank[j])],
                        "mean_wait_ns": float(wait[:, j].mean()),
                        "duration_ns": float(np.median(end[:, j] - start[:, j])),
                    }
                )
            for i, rk in enumerate(ids):
                last_count[rk] += int(is_last[i].sum())
                waits[rk].append((arrive[i], np.broadcast_to(last, arrive[i].shape)))
                lag_total[rk] += float(lag[i].sum())
                offsets[rk].append(float(offset[i]))
    matched = len(coll_rows)
    for rk, spans in waits.items():
        if spans:  # nanoseconds on the common clock: the union of the rank's waits
            starts = np.concatenate([s for s, _ in spans])
            ends = np.concatenate([e for _, e in spans])
            wait_total[rk] = float(iv.total(iv.merge(np.round(starts), np.round(ends))))
    rows = [
        {
            "rank": rk,
            "last": last_count[rk],
            "last_share": last_count[rk] / matched if matched else 0.0,
            "wait_ns": wait_total[rk],
            "mean_lag_ns": lag_total[rk] / matched if matched else 0.0,
            "clock_offset_ns": median(offsets[rk]) if offsets[rk] else 0.0,
        }
        for rk in rank_ids
    ]
    if not matched and sum(any(c["collectives"] and not c.get("cut") for c in r["cycles"]) for r in ranks) > 1:
        notes["no collective could be matched across ranks (no communication group is on every rank), so no straggler can be named"] = None
    return {"matched": matched, "collectives": coll_rows, "ranks": rows, "notes": list(notes)}


def _shared_groups(per_rank: dict[int, dict[str, Any]]) -> tuple[dict[int, dict[str, Any]], str | None]:
    """Each rank's collective groups under names every rank shares, and a note when they differ.

    A group is a communication stream, and stream ids are numbered per process: one rank whose
    NCCL streams were 1084 and 1203 where the others had 84 and 203 shared no group, and the
    collectives and the straggler vanished without a word. Ranks with as many groups as each
    other are paired by each group's order of first use (the order the program issued them);
    otherwise only the groups every rank has are matched, and the note says which were not.
    """
    names = {rk: set(groups) for rk, groups in per_rank.items()}
    lowest = min(per_rank)
    if all(n == names[lowest] for n in names.values()):
        return per_rank, None
    differ = next(rk for rk in sorted(names) if names[rk] != names[lowest])

    def listed(rk: int) -> str:
        return ", ".join(sorted(names[rk]))

    seen = f"rank {lowest}: {listed(lowest)}; rank {differ}: {listed(differ)}"
    if len({len(n) for n in names.values()}) == 1:

        def by_first_use(groups: dict[str, Any]) -> list[str]:
            return sorted(groups, key=lambda g: (float(groups[g]["start_ns"][0]) if len(groups[g]["start_ns"]) else np.inf, g))

        labels = by_first_use(per_rank[lowest])
        paired = {
            rk: {label: groups[g] for label, g in zip(labels, by_first_use(groups), strict=True)}
            for rk, groups in per_rank.items()
        }
        return paired, (
            f"the ranks' communication groups differ ({seen}): paired by the order of their first"
            f" collective, and named as rank {lowest}'s"
        )
    unshared = names[lowest].union(*names.values()) - names[lowest].intersection(*names.values())
    return per_rank, (
        f"collectives on {', '.join(sorted(unshared)[:4])}{', ...' if len(unshared) > 4 else ''} are not"
        f" matched across ranks: not every rank has that communication group ({seen})"
    )


def run_steps(ranks: list[dict[str, Any]]) -> float:
    """The steps a rank of the run recorded (the median over its ranks; at least 1)."""
    return float(median([sum(c["steps"] for c in r["cycles"]) or 1 for r in ranks] or [1])) or 1.0


# a wait per step this many times the median step is no wait at all (``implausible``)
IMPLAUSIBLE_WAIT = 1.1


def implausible(cost_ns: float, step_ns: float) -> bool:
    """Whether a wait per step is no wait at all: the ranks wait in collectives clearly longer
    than a step lasts (two different jobs' traces in one folder said 150 % of a step). Not
    merely as long: where all but one rank spend their steps waiting for it, the waits come to
    about the median step, and a 2-rank gloo job copied to 40 ranks waited 18.044 ms a step of
    18.004, so its straggler went unnamed (once in CI)."""
    return step_ns > 0 and cost_ns >= IMPLAUSIBLE_WAIT * step_ns


def wait_per_step(aligned: dict[str, Any], steps: float) -> float:
    """The job's cost of waiting: each rank's time waiting in collectives (``align``: the union
    of its waits, so overlapping collectives count once), averaged over the ranks, per step."""
    rows = aligned["ranks"]
    return sum(float(r["wait_ns"]) for r in rows) / max(len(rows), 1) / max(steps, 1)


def straggler(ranks: list[dict[str, Any]], aligned: dict[str, Any], step_ns: float) -> dict[str, Any] | None:
    """The rank the others wait for, the wait it costs per step, and what it does more of.

    ``None`` when fewer than two ranks share collectives, or when no rank arrives last clearly
    more often than chance (``MIN_LAST_SHARE``, or ``CHANCE_MULTIPLE`` times chance and twice
    any other rank) with a wait worth naming (``MIN_WAIT_SHARE``).
    """
    if aligned["matched"] == 0 or len(ranks) < 2:
        return None
    rows = aligned["ranks"]
    worst = max(rows, key=lambda r: (r["last"], r["mean_lag_ns"], -r["rank"]))
    steps = run_steps(ranks)
    cost = wait_per_step(aligned, steps)
    runner_up = max((r["last"] for r in rows if r["rank"] != worst["rank"]), default=0)
    # ranks last as often as each other are no one straggler (``tied_last`` names them)
    clearly_last = worst["last"] > runner_up and (
        worst["last_share"] >= MIN_LAST_SHARE
        or (worst["last_share"] >= CHANCE_MULTIPLE / len(rows) and worst["last"] >= 2 * runner_up)
    )
    if not clearly_last or cost < MIN_WAIT_SHARE * step_ns or implausible(cost, step_ns):
        return None
    mine = next(r for r in ranks if r["rank"] == worst["rank"])
    # other ranks that are late too: their mean lag is at least half the straggler's. Not in a
    # job of two: the other rank is the first arrival whenever the straggler is last, and its
    # lag is only the time it arrived last itself ("also late (1 rank): rank 0" named the one
    # rank there is to compare with)
    also = (
        sorted(
            (
                r
                for r in rows
                if r["rank"] != worst["rank"] and r["mean_lag_ns"] >= 0.5 * worst["mean_lag_ns"] > 0
            ),
            key=lambda r: (-r["mean_lag_ns"], r["rank"]),
        )
        if len(rows) > 2
        else []
    )
    others = [r for r in ranks if r["rank"] != worst["rank"]]
    return {
        "rank": worst["rank"],
        "last": worst["last"],
        "matched": aligned["matched"],
        "cycles": len({c["cycle"] for c in aligned["collectives"]}),
        "last_share": worst["last_share"],
        "wait_per_step_ns": cost,
        "mean_lag_ns": worst["mean_lag_ns"],
        "also_late": [{"rank": r["rank"], "mean_lag_ns": r["mean_lag_ns"]} for r in also[:10]],
        "also_late_count": len(also),
        "ops": _excess(mine, others, "ops_ns"),
        "kernels": _excess(mine, others, "kernels_ns"),
        "categories": _excess(mine, others, "breakdown_ns", skip=("Total", "Communication")),
    }


def tied_last(rank_waits: list[dict[str, Any]]) -> tuple[list[int], int]:
    """The ranks last at the most collectives when more than one is (the ranks, that count);
    ([], 0) when one rank is last most often or none ever is."""
    top = max((int(r["last"]) for r in rank_waits), default=0)
    tied = [int(r["rank"]) for r in rank_waits if r["last"] == top]
    return (tied, top) if top and len(tied) > 1 else ([], 0)


def per_step(rank: dict[str, Any], key: str) -> dict[str, float]:
    """A rank's ``key`` table (ns per step) averaged over its cycles, weighted by their steps."""
    total: Counter[str] = Counter()
    steps = 0
    for c in rank["cycles"]:
        w = max(c["steps"], 1)
        steps += w
        for k, v in c[key].items():
            total[k] += v * w
    return {k: v / max(steps, 1) for k, v in total.items()}


def _floor_of(rank: dict[str, Any], key: str) -> float:
    """The most a name absent from the rank's cut ``key`` table had per step (``summarize``)."""
    floor = key.removesuffix("_ns") + "_floor_ns"
    return max((float(c.get(floor, 0.0)) for c in rank["cycles"]), default=0.0)


def _excess(
    mine: dict[str, Any], others: list[dict[str, Any]], key: str, skip: tuple[str, ...] = ()
) -> list[dict[str, Any]]:
    """Names whose ns per step on the straggler exceed the other ranks' median.

    Each rank keeps only its top ops and kernels (``summarize``): a name absent from a full
    table counts at that table's smallest value, an upper bound, and the row says so
    (``median_is_bound``): "0 ns on the others" was printed for an op that rank 0 ran for
    131 us a step but outside its top 40."""
    own = per_step(mine, key)
    theirs = [(per_step(o, key), _floor_of(o, key)) for o in others]
    rows: list[dict[str, Any]] = []
    for name, v in own.items():
        if name in skip:
            continue
        values = [t.get(name, floor) for t, floor in theirs]
        bound = any(name not in t and floor > 0 for t, floor in theirs)
        typical = median(values)
        if v > typical:
            rows.append(
                {
                    "name": name,
                    "rank_ns": v,
                    "median_ns": typical,
                    "excess_ns": v - typical,
                    "median_is_bound": bound,
                }
            )
    rows.sort(key=lambda r: (-float(r["excess_ns"]), str(r["name"])))
    return rows[:TOP_CAUSES]
