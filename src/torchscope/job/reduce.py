"""The reduce step: rank summaries of a run -> one job summary (small data only).

Step time per rank as a distribution with its outlier ranks, the median rank's breakdown and
the outliers' differences by category, the collectives aligned across ranks and the straggler,
one line per cycle, and the advisor's findings deduplicated across ranks and cycles ("on 31 of
32 ranks", with the worst rank's evidence). Everything here is a JSON-ready dict.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from statistics import median
from typing import Any

from torchscope.analysis.overview import BREAKDOWN_CATEGORIES, HOST_CATEGORIES
from torchscope.analysis.report_model import units_of
from torchscope.job.straggler import align, implausible, per_step, run_steps, straggler, wait_per_step
from torchscope.render.units import fmt_ns
from torchscope.runner import cycle_names
from torchscope.trace.dialect import CUT_BY

OUTLIER_MADS = 3.0  # a rank is an outlier when its step is this many MADs from the median
OUTLIER_MIN_SHARE = 0.05  # ... and at least 5% away from it (a tight job has a tiny MAD)
MAX_OUTLIERS = 5


def _evidence_units(findings: list[dict[str, Any]]) -> dict[str, str]:
    """The unit of each key of the findings' evidence (``report_model.units_of``), and no other."""
    evidence = [f.get("evidence") or {} for f in findings]
    keys = {k for e in evidence for k in e}
    return {k: u for k, u in units_of(*evidence).items() if k in keys}


def rank_step_ns(rank: dict[str, Any]) -> float:
    """A rank's median step time over all its cycles (0 when it has none)."""
    steps = [s for c in rank["cycles"] for s in c["step_ns"]]
    return float(median(steps)) if steps else 0.0


def all_exit(cycle: dict[str, Any]) -> bool:
    """Whether the cycle holds nothing but the profile's exit (``summarize.exit_step``): the
    file a scheduled ``with profile(...)`` left mid-cycle writes after the last ``step()``."""
    return bool(cycle.get("exit_step")) and not cycle["steps"]


def _stepless(cycle: dict[str, Any], cycles: list[dict[str, Any]]) -> bool:
    """A cycle without ``ProfilerStep`` among cycles with them: its whole span is no step
    (``torchscope run``'s last cycle when the script ended mid-cycle: the work after the last
    ``optimizer.step()``, which the run's own summary calls "no step")."""
    return not cycle["steps_from_trace"] and any(c["steps_from_trace"] for c in cycles)


def setup_cycle(cycle: dict[str, Any]) -> bool:
    """Whether the cycle is ``torchscope run``'s setup-only one (``cycle_names.SETUP_CYCLE``:
    ours, ended before the script's first optimizer step when the script's own profiler took
    over). Its whole span is the setup, no step, as the run's own summary says ("run: no step"),
    also beside cycles without ``ProfilerStep`` (each then one whole-cycle step): read as a step,
    it made the run's median step 13 ms among 0.4 ms ones."""
    return cycle_names.is_setup_cycle(_file_name(cycle))


def _file_name(cycle: dict[str, Any]) -> str:
    return Path(str(cycle.get("file", ""))).name


def _reported(cycles: list[dict[str, Any]]) -> list[bool]:
    """Which cycles hold the steps the run reports, in one numbering (``cycle_names.reported``)."""
    return cycle_names.reported([_file_name(c) for c in cycles])


def counted(rank: dict[str, Any]) -> dict[str, Any]:
    """The rank with only the cycles its medians, averages and findings are over: not those
    that hold only the exit, the setup (``setup_cycle``) or no step at all, when it has others.
    A one-step run's log dir showed its exit (92 µs, "Python outside ops 100 %") as the median
    cycle and averaged it into the step."""
    cycles = rank["cycles"]
    reported = _reported(cycles)
    kept = [c for c, r in zip(cycles, reported, strict=True) if r and not all_exit(c) and not _stepless(c, cycles)]
    return {**rank, "cycles": kept} if kept and len(kept) < len(cycles) else rank


def cycle_note(cycles: list[dict[str, Any]], left_out: bool, script_took_over: bool = False) -> str | None:
    """What the cycle line and the page's Cycles table say of a cycle's exit step (or of the
    step the profiled block's error or torchscope run's memory cap cut, when our profiler says so),
    or of a ``torchscope run`` cycle the run does not report (``cycle_names.reported``):
    ``script_took_over``, the run holds cycles of the script's own profiler."""
    cut_by = next((CUT_BY[c["ended_by"]] for c in cycles if c.get("ended_by") in CUT_BY), None)
    if all(setup_cycle(c) for c in cycles):
        said = "torchscope run's setup before the first optimizer step (no step)"
        return said + (": left out of the run's steps and findings" if left_out else "")
    if script_took_over and left_out and not any(cycle_names.is_script_cycle(_file_name(c)) for c in cycles):
        return (
            "torchscope run's, before the script's own profiler took over: its steps count the run's"
            " optimizer steps, the script's cycles their own step() calls, so it is left out of the"
            " run's steps and findings"
        )
    if all(all_exit(c) for c in cycles):
        what = f"only the step {cut_by} cut" if cut_by else "only the profile's exit"
        return f"{what} (no step)" + (": left out of the run's steps and findings" if left_out else "")
    if left_out:
        return "no step in it (the work after the last step): left out of the run's steps and findings"
    if any(c.get("exit_step") and c["steps"] for c in cycles):
        return f"its last step, cut by {cut_by}, left out" if cut_by else "its last step, the profile's exit, left out"
    return None


def _breakdown(rank: dict[str, Any]) -> dict[str, float]:
    return per_step({"cycles": rank["cycles"]}, "breakdown_ns")


def outliers(values: dict[int, float]) -> list[int]:
    """Ranks far from the median (MAD rule), the farthest first."""
    if len(values) < 3:
        return []
    med = median(values.values())
    mad = median(abs(v - med) for v in values.values())
    far = [
        r
        for r, v in values.items()
        if abs(v - med) > OUTLIER_MADS * mad and abs(v - med) > OUTLIER_MIN_SHARE * med
    ]
    far.sort(key=lambda r: (-abs(values[r] - med), r))
    return far[:MAX_OUTLIERS]


def dedupe_findings(ranks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One finding per rule: on how many ranks and cycles it fired, with the worst one's words."""
    by_rule: dict[str, list[tuple[int, int, dict[str, Any]]]] = defaultdict(list)
    for r in ranks:
        for c in r["cycles"]:
            for f in c["findings"]:
                by_rule[f["rule"]].append((r["rank"], c["cycle"], f))
    out = []
    for rule, hits in by_rule.items():
        rank_ids = sorted({h[0] for h in hits})
        worst_rank, worst_cycle, worst = max(hits, key=lambda h: (h[2].get("impact", 0.0), -h[0], -h[1]))
        out.append(
            {
                "rule": rule,
                "message": worst["message"],
                "fix": worst["fix"],
                "evidence": worst["evidence"],
                "impact": worst.get("impact", 0.0),
                "ranks": rank_ids,
                "on_ranks": len(rank_ids),
                "of_ranks": len(ranks),
                "on_cycles": len({(h[0], h[1]) for h in hits}),
                "worst_rank": worst_rank,
                "worst_cycle": worst_cycle,
            }
        )
    out.sort(key=lambda f: (-f["impact"], -f["on_ranks"], f["rule"]))
    return out


def step_spread(pairs: list[tuple[int, int, int]]) -> dict[str, Any]:
    """Shortest, median and longest of the steps themselves (``(step_ns, rank, cycle)`` each),
    with the rank and cycle of the longest: an outlier step stays visible, where per-rank
    medians hide it."""
    if not pairs:
        return {"count": 0, "min": 0.0, "median": 0.0, "max": 0.0, "max_rank": None, "max_cycle": None}
    longest = max(pairs, key=lambda p: (p[0], -p[1], -p[2]))
    return {
        "count": len(pairs),
        "min": float(min(p[0] for p in pairs)),
        "median": float(median(p[0] for p in pairs)),
        "max": float(longest[0]),
        "max_rank": longest[1],
        "max_cycle": longest[2],
    }


def cycle_table(ranks: list[dict[str, Any]], counted_ranks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per cycle: its steps (on every rank) as shortest, median and longest step, the
    rank of the longest, findings fired, and what was left out of it (``cycle_note``): the
    cycles not in ``counted_ranks`` (``counted``)."""
    kept = {(r["rank"], c["cycle"]) for r in counted_ranks for c in r["cycles"]}
    script_took_over = any(cycle_names.is_script_cycle(_file_name(c)) for r in ranks for c in r["cycles"])
    rows = []
    for cyc in sorted({c["cycle"] for r in ranks for c in r["cycles"]}):
        per = [(r["rank"], c) for r in ranks for c in r["cycles"] if c["cycle"] == cyc]
        spread = step_spread([(s, rk, cyc) for rk, c in per for s in c["step_ns"]])
        rows.append(
            {
                "cycle": cyc,
                "ranks": len(per),
                "steps": max(c["steps"] for _, c in per),
                "min_step_ns": spread["min"],
                "median_step_ns": spread["median"],
                "max_step_ns": spread["max"],
                "slowest_rank": spread["max_rank"],
                "file": per[0][1]["file"] if len(per) == 1 else None,  # a one-rank cycle's trace
                "findings": _by_impact(f for _, c in per for f in c["findings"]),
                # out of the run's medians, averages and findings (``counted``)
                "left_out": (out := not any((rk, cyc) in kept for rk, _ in per)),
                "note": cycle_note([c for _, c in per], out, script_took_over),
            }
        )
    return rows


def _by_impact(findings: Any) -> list[str]:
    """Rule ids, the largest impact (over ranks) first: a line that shows a few shows the worst."""
    worst: dict[str, float] = {}
    for f in findings:
        worst[f["rule"]] = max(worst.get(f["rule"], 0.0), float(f.get("impact", 0.0)))
    return sorted(worst, key=lambda r: (-worst[r], r))


def _straggler_finding(s: dict[str, Any], step_ns: float, of_ranks: int) -> dict[str, Any]:
    # its two largest ops and its largest kernel, by excess: ops alone hid a straggler whose
    # extra time is on the device (multirank: a kernel +16.9 ms/step, its top op +13.0 ms)
    cause = sorted(s["ops"][:2] + s["kernels"][:1], key=lambda c: -float(c["excess_ns"]))
    from torchscope.job.render import fmt_ns, short_name

    what = ", ".join(f"{short_name(c['name'])} (+{fmt_ns(c['excess_ns'])}/step)" for c in cause)
    return {
        "rule": "straggler",
        "message": (
            f"Rank {s['rank']} arrives last at {s['last']} of {s['matched']} collectives; the job waits "
            f"{fmt_ns(s['wait_per_step_ns'])} per step for it ({100 * s['wait_per_step_ns'] / max(step_ns, 1):.0f}% "
            "of a step)" + (f"; it spends more than the other ranks on {what}." if what else ".")
        ),
        "fix": (
            "Even out the work across ranks: look at what the straggler does more of (above); check its "
            "input shard sizes, data loading and host (CPU contention, thermal throttling, a slower link)."
        ),
        "evidence": {k: s[k] for k in ("rank", "last", "matched", "wait_per_step_ns", "mean_lag_ns")},
        "impact": min(1.0, s["wait_per_step_ns"] / max(step_ns, 1)),
        "ranks": [s["rank"]],
        "on_ranks": 1,
        "of_ranks": of_ranks,
        "on_cycles": s["cycles"],
        "scope": "job",  # a finding about the job as a whole, not one fired per rank
        "worst_rank": s["rank"],
        "worst_cycle": 0,
    }


# a rank's communication is "waiting for the straggler" when its waits in the aligned collectives
# are at least this share of its communication time
WAITING_SHARE = 0.5


def _waiting_for(
    strag: dict[str, Any], finding: dict[str, Any], aligned: dict[str, Any], ranks: list[dict[str, Any]]
) -> dict[str, Any]:
    """``communication_heavy`` reworded when its rank mostly waits in the collectives for the
    straggler: that time is the straggler's extra work, which a bucket size or compression hook
    would not shorten. The finding keeps its share, says how much of it is the wait, points to the
    straggler first, and ranks by the communication that remains."""
    rank = finding["worst_rank"]
    if finding["rule"] != "communication_heavy" or rank == strag["rank"]:
        return finding
    wait_ns = next((float(w["wait_ns"]) for w in aligned["ranks"] if w["rank"] == rank), 0.0)
    steps = next((sum(c["steps"] for c in r["cycles"]) for r in ranks if r["rank"] == rank), 0) or 1
    comm_ns = float(finding["evidence"].get("communication_us_per_step", 0.0)) * 1e3
    share = min(1.0, wait_ns / steps / comm_ns) if comm_ns > 0 else 0.0
    if share < WAITING_SHARE:
        return finding
    return {
        **finding,
        "message": (
            f"{finding['message']} {share:.0%} of it is rank {rank} waiting in the collectives for rank "
            f"{strag['rank']}, the straggler: that time is its extra work, not the communication."
        ),
        "fix": f"Even out rank {strag['rank']}'s work first (see straggler); for what remains: {finding['fix']}",
        "evidence": {**finding["evidence"], "waiting_for_straggler_share": share, "straggler": strag["rank"]},
        "impact": finding["impact"] * (1.0 - share),
    }


def _top(values: dict[str, float], n: int) -> dict[str, float]:
    return dict(sorted(values.items(), key=lambda kv: (-kv[1], kv[0]))[:n])


def collective_table(aligned: dict[str, Any]) -> list[dict[str, Any]]:
    """Per group and collective name: count, median duration, mean and max arrival skew, mean wait."""
    acc: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for c in aligned["collectives"]:
        acc[(c["group"], c["name"])].append(c)
    rows = [
        {
            "group": g,
            "name": n,
            "count": len(cs),
            "median_duration_ns": float(median(c["duration_ns"] for c in cs)),
            "mean_skew_ns": sum(c["skew_ns"] for c in cs) / len(cs),
            "max_skew_ns": max(c["skew_ns"] for c in cs),
            "mean_wait_ns": sum(c["mean_wait_ns"] for c in cs) / len(cs),
        }
        for (g, n), cs in acc.items()
    ]
    rows.sort(key=lambda r: (-r["mean_wait_ns"] * r["count"], r["group"], r["name"]))
    return rows


def one_category_system(ranks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ranks with every cycle's breakdown in one category system: the device's when any
    cycle of the run had device work, else the host's. A cycle without device work (a short or
    truncated one) is summarized in the host's; averaged with the others' device categories,
    both halves were shown and the shares summed to about 50 %."""
    cycles = [c for r in ranks for c in r["cycles"]]
    if not all("device_breakdown_ns" in c for c in cycles):
        return ranks  # summaries without both systems: nothing to choose
    device = any(c["device_worked"] for c in cycles)
    cats = list(BREAKDOWN_CATEGORIES if device else HOST_CATEGORIES)
    key = "device_breakdown_ns" if device else "host_breakdown_ns"
    return [
        {**r, "cycles": [{**c, "categories": cats, "breakdown_ns": c[key]} for c in r["cycles"]]}
        for r in ranks
    ]


def mixed_devices(ranks: list[dict[str, Any]]) -> list[str]:
    """A note when the ranks' traces name different device models: one job's ranks run on one
    kind of machine, so these are likely traces of several jobs (an A100 job's ranks beside a
    V100 job's were compared, their collectives paired, without a word)."""
    by_model: dict[tuple[str, ...], list[int]] = {}
    for r in ranks:
        named = {d for c in r["cycles"] for d in c.get("devices", [])}
        if named:
            by_model.setdefault(tuple(sorted(named)), []).append(r["rank"])
    if len(by_model) < 2:
        return []
    said = "; ".join(
        f"{' and '.join(models)} on rank{'s' if len(rks) > 1 else ''} {', '.join(map(str, rks[:4]))}"
        + (", ..." if len(rks) > 4 else "")
        for models, rks in sorted(by_model.items(), key=lambda kv: kv[1][0])
    )
    return [f"its ranks ran on different devices ({said}): traces of different jobs? They are read as one job"]


def reduce_run(name: str, ranks: list[dict[str, Any]]) -> dict[str, Any]:
    """The job summary of one run from its rank summaries."""
    ranks = one_category_system(sorted(ranks, key=lambda r: r["rank"]))
    live = [r for r in ranks if r["cycles"]]
    # the medians, averages and findings leave out the cycles that hold only the profile's
    # exit; the cycle table and collectives keep them
    kept = {r["rank"]: counted(r) for r in live}
    steps = {rk: rank_step_ns(r) for rk, r in kept.items()}
    med_step = float(median(steps.values())) if steps else 0.0
    med_rank = min(steps, key=lambda k: (abs(steps[k] - med_step), k)) if steps else None
    far = outliers(steps)
    breakdowns = {rk: _breakdown(r) for rk, r in kept.items()}
    base = breakdowns.get(med_rank, {}) if med_rank is not None else {}
    categories = next(
        (c["categories"] for r in live for c in r["cycles"] if c.get("categories")),
        list(BREAKDOWN_CATEGORIES),
    )
    aligned = align(live)
    strag = straggler(live, aligned, med_step)
    # why ``straggler`` named none, when it is that the waits exceed a step (say it)
    if strag is None and aligned["matched"] and implausible(cost := wait_per_step(aligned, run_steps(live)), med_step):
        aligned["notes"].append(
            f"the ranks wait in the collectives {fmt_ns(cost)} per step, longer than the median step"
            f" ({fmt_ns(med_step)}): their collectives do not line up (traces of different jobs or"
            " steps?), so no straggler is named"
        )
    findings = dedupe_findings(list(kept.values()))
    if strag is not None:
        findings = [_waiting_for(strag, f, aligned, live) for f in findings]
        findings.sort(key=lambda f: (-f["impact"], -f["on_ranks"], f["rule"]))
        findings.insert(0, _straggler_finding(strag, med_step, len(live)))
    return {
        "run": name,
        # the ranks read; those none of whose files could be read are named apart (a folder of 64
        # ranks, half of them damaged, was "64 ranks" while every finding said "of 32 ranks")
        "ranks": len(live),
        "ranks_unread": [r["rank"] for r in ranks if not r["cycles"]],
        "world_size": max([r.get("world_size") or 0 for r in ranks] + [len(ranks)]),
        "backend": next((r["backend"] for r in ranks if r.get("backend")), None),
        "cycles": max((len(r["cycles"]) for r in ranks), default=0),
        "step_ns": {
            "min": min(steps.values(), default=0.0),
            "median": med_step,
            "max": max(steps.values(), default=0.0),
            "min_rank": min(steps, key=lambda k: (steps[k], k)) if steps else None,
            "max_rank": max(steps, key=lambda k: (steps[k], -k)) if steps else None,
        },
        # the steps themselves over every rank and cycle (the line above is per-rank medians)
        "steps_ns": step_spread(
            [(s, rk, c["cycle"]) for rk, r in kept.items() for c in r["cycles"] for s in c["step_ns"]]
        ),
        "categories": categories,
        "median_rank": med_rank,
        "outliers": [
            {
                "rank": rk,
                "step_ns": steps[rk],
                "vs_median_pct": 100.0 * (steps[rk] / med_step - 1.0) if med_step else None,
                "by_category_ns": {
                    c: breakdowns[rk].get(c, 0.0) - base.get(c, 0.0)
                    for c in categories
                    if abs(breakdowns[rk].get(c, 0.0) - base.get(c, 0.0)) > 0
                },
            }
            for rk in far
        ],
        "median_breakdown_ns": base,
        "collectives": collective_table(aligned),
        "rank_waits": aligned["ranks"],
        "straggler": strag,
        "cycle_table": cycle_table(live, list(kept.values())),
        # every cycle holds only the profile's exit (else a run without steps recorded none)
        "only_exits": bool(live) and all(all_exit(c) for r in live for c in r["cycles"]),
        "recommendations": findings,
        # the unit of each number in the findings' evidence, as a trace's report has them
        "units": _evidence_units(findings),
        "per_rank": [
            {
                "rank": r["rank"],
                "cycles": len(r["cycles"]),
                "steps": sum(c["steps"] for c in r["cycles"]),
                "events": sum(c.get("events", 0) for c in r["cycles"]),
                "step_ns": steps.get(r["rank"]),
                "breakdown_ns": breakdowns.get(r["rank"], {}),
                "comm_overlap_ns": per_step(kept[r["rank"]], "comm_overlap_ns") if r["cycles"] else {},
                "top_ops_ns": _top(per_step(kept.get(r["rank"], r), "ops_ns"), 10),
                "files": [c["file"] for c in r["cycles"]],
                "views": r.get("views", []),
                "findings": sorted({f["rule"] for c in r["cycles"] for f in c["findings"]}),
            }
            for r in ranks
        ],
        "skipped": [s for r in ranks for s in r["skipped"]],
        "notes": [f"{name}: {note}" for note in (*mixed_devices(live), *aligned["notes"])],
    }
