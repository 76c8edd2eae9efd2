"""Renderers of a job report: a terminal summary of at most ``MAX_LINES`` lines whatever the rank
and cycle count, and the dashboard's ``job`` section (bounded: no per-collective rows, no
per-rank traces; each rank's full view is a sibling file).
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from torchscope.analysis.overview import BREAKDOWN_CATEGORIES
from torchscope.job.straggler import tied_last
from torchscope.render.console import NO_TIMED_WORK, fmt_ns
from torchscope.render.units import plural as _plural

MAX_LINES = 80
TOP_COLLECTIVES = 4
TOP_FINDINGS = 6
MAX_CYCLE_LINES = 8
SHOWN_WARNINGS = 5  # the rest are in --json and on the page


def short_name(name: str, width: int = 60) -> str:
    """A kernel or op name cut to fit a line: no ``void``, no argument list, at most ``width``."""
    name = name.removeprefix("void ").replace("(anonymous namespace)::", "").split("(", 1)[0] or name
    return name if len(name) <= width else name[: width - 3] + "..."


def _cycles(rows: list[dict[str, Any]]) -> list[str]:
    if len(rows) == 1 and rows[0].get("note"):  # one cycle: no table, but what was left out
        return [f"its one cycle: {rows[0]['note']}"]
    if len(rows) <= 1:
        return []
    gap: list[dict[str, Any] | None] = [None]
    shown = list(rows) if len(rows) <= MAX_CYCLE_LINES else [*rows[:4], *gap, *rows[-3:]]
    out = [f"cycles ({len(rows)}): one line each, over that cycle's steps"]
    for r in shown:
        if r is None:
            out.append(f"  ... {len(rows) - 7} more cycles (--json has them all)")
            continue
        if r.get("left_out") or (not r["steps"] and r.get("note")):  # the exit, or no step
            out.append(f"  cycle {r['cycle']}: {_plural(r['ranks'], 'rank')}, {r['note']}")
            continue
        more = len(r["findings"]) - 3
        fired = (", ".join(r["findings"][:3]) or "-") + (f" (+{more} more)" if more > 0 else "")
        out.append(
            f"  cycle {r['cycle']}: {_plural(r['ranks'], 'rank')}, {_plural(r['steps'], 'step')}: "
            f"shortest {fmt_ns(r['min_step_ns'])}, median {fmt_ns(r['median_step_ns'])}, "
            f"longest {fmt_ns(r['max_step_ns'])}"
            + (f" (rank {r['slowest_rank']})" if r["ranks"] > 1 else "")
            + f"; {fired}"
            + (f"; {r['note']}" if r.get("note") else "")
        )
    return out


def run_lines(run: dict[str, Any], *, top: int = TOP_FINDINGS) -> list[str]:
    """The terminal block of one run (about 20-40 lines at any rank count)."""
    st = run["step_ns"]
    head = f"== {run['run']}: {_plural(run['ranks'], 'rank')}"
    unread = len(run.get("ranks_unread", []))
    if unread:
        head += f" read ({unread} more could not be: see the warnings)"
    elif run["world_size"] and run["world_size"] != run["ranks"]:
        head += f" of {run['world_size']}"
    head += f", {_plural(run['cycles'], 'cycle')}" + (f", {run['backend']}" if run["backend"] else "")
    lines = [head]
    if run["ranks"] > 1 and st["min"] == st["max"]:
        # "fastest 615 ms (rank 0) ... slowest 615 ms (rank 0)" read as if rank 0 were both
        lines.append(f"step time per rank (each rank's median step): {fmt_ns(st['min'])} on every rank")
    elif run["ranks"] > 1:
        lines.append(
            f"step time per rank (each rank's median step): fastest {fmt_ns(st['min'])} (rank {st['min_rank']}), "
            f"median {fmt_ns(st['median'])}, slowest {fmt_ns(st['max'])} (rank {st['max_rank']})"
        )
    each = run.get("steps_ns")
    if each and each["count"]:
        at = [f"rank {each['max_rank']}"] if run["ranks"] > 1 else []
        at += [f"cycle {each['max_cycle']}"] if run["cycles"] > 1 else []
        lines.append(
            f"steps ({each['count']}): shortest {fmt_ns(each['min'])}, median {fmt_ns(each['median'])}, "
            f"longest {fmt_ns(each['max'])}" + (f" ({', '.join(at)})" if at else "")
        )
    base = run["median_breakdown_ns"]
    cats = run.get("categories") or BREAKDOWN_CATEGORIES
    total = base.get("Total") or sum(base.get(c, 0.0) for c in cats) or 1.0
    parts = sorted(((c, base.get(c, 0.0)) for c in cats), key=lambda kv: -kv[1])
    whose = f"median rank's (rank {run['median_rank']}) " if run["ranks"] > 1 else ""
    if each and not each["count"] and run["cycle_table"]:
        if run.get("only_exits", True):
            # every cycle is a profile's exit (``summarize.exit_step``): nothing ran in a step
            lines.append("no step recorded: each cycle holds only the profile's exit after its last step()")
        else:  # a trace of instants: nothing in it lasts
            lines.append(NO_TIMED_WORK)
    elif not any(v > 0 for _, v in parts):
        lines.append(f"{whose}mean step by category: nothing recorded in the steps (every event lasts 0 ns)")
    else:
        lines.append(
            f"{whose}mean step by category: "
            + ", ".join(f"{c} {fmt_ns(v)} ({100 * v / total:.0f}%)" for c, v in parts if v > 0)[:300]
        )
    if run["outliers"]:
        lines.append("outlier ranks:")
        for o in run["outliers"]:
            diffs = sorted(o["by_category_ns"].items(), key=lambda kv: -abs(kv[1]))[:3]
            lines.append(
                f"  rank {o['rank']}: {fmt_ns(o['step_ns'])} ({o['vs_median_pct']:+.0f}% vs median); "
                + ", ".join(f"{c} {'+' if v >= 0 else '-'}{fmt_ns(abs(v))}" for c, v in diffs)
            )
    elif run["ranks"] > 2:
        lines.append("outlier ranks: none")
    if run["collectives"]:
        lines.append("collectives (matched across ranks by order in their group):")
        for c in run["collectives"][:TOP_COLLECTIVES]:
            lines.append(
                f"  {c['name']} [{c['group']}] x{c['count']}: median {fmt_ns(c['median_duration_ns'])}, "
                f"arrival skew mean {fmt_ns(c['mean_skew_ns'])} max {fmt_ns(c['max_skew_ns'])}, "
                f"mean wait {fmt_ns(c['mean_wait_ns'])}"
            )
        if len(run["collectives"]) > TOP_COLLECTIVES:
            lines.append(f"  ... {len(run['collectives']) - TOP_COLLECTIVES} more (--json)")
    s = run["straggler"]
    if s is not None:
        lines.append(
            f"straggler: rank {s['rank']} arrives last at {s['last']} of {s['matched']} collectives; "
            f"the job waits {fmt_ns(s['wait_per_step_ns'])} per step for it"
        )
        if s["also_late"]:
            lines.append(
                f"  also late ({_plural(s['also_late_count'], 'rank')}; behind the first arrival on average): "
                + ", ".join(f"rank {a['rank']} {fmt_ns(a['mean_lag_ns'])}" for a in s["also_late"][:5])
                + f"; the straggler {fmt_ns(s['mean_lag_ns'])}"
            )
        # the largest of each kind: the first four of ops + kernels + categories were ops only,
        # and hid a straggler whose excess is a kernel or its device time (the JSON has them all)
        causes = [
            (kind, c)
            for kind, rows in (("step time", s["categories"]), ("op", s["ops"]), ("kernel", s["kernels"]))
            for c in rows[:2]
        ]
        for kind, c in causes:
            lines.append(
                f"  {kind} {short_name(c['name'])}: {fmt_ns(c['rank_ns'])}/step vs "
                + (
                    f"at most {fmt_ns(c['median_ns'])} on the others (outside some ranks' top ops)"
                    if c.get("median_is_bound")
                    else f"{fmt_ns(c['median_ns'])} on the others"
                )
            )
    elif run["ranks"] > 1 and run["collectives"]:
        tied, last = tied_last(run["rank_waits"])
        if tied:
            shown = ", ".join(map(str, tied[:6])) + (", ..." if len(tied) > 6 else "")
            matched = sum(c["count"] for c in run["collectives"])
            lines.append(
                f"straggler: none (ranks {shown} ({len(tied)} ranks) arrive last together, at {last} of"
                f" {matched} collectives each)"
            )
        elif not any(r["last"] for r in run["rank_waits"]):
            lines.append("straggler: none (the ranks arrive together at every collective)")
        else:
            lines.append(
                "straggler: none (no rank arrives last at the collectives clearly more often than the others)"
            )
    lines.extend(_cycles(run["cycle_table"]))
    recs = run["recommendations"]
    if recs:
        lines.append(f"recommendations ({len(recs)}):")
        for i, f in enumerate(recs[:top], 1):
            per_rank = f["of_ranks"] > 1 and f.get("scope") != "job"
            where = f"on {f['on_ranks']} of {f['of_ranks']} ranks" if per_rank else ""
            if f.get("on_cycles", 1) > 1 and run["cycles"] > 1:
                cycles = (
                    f"in {f['on_cycles']} cycles"
                    if f.get("scope") == "job" or run["ranks"] == 1
                    else f"{f['on_cycles']} rank-cycles"
                )
                where += (", " if where else "") + cycles
            # the message is the worst instance's: say whose, so its numbers read as that one's
            several_cycles = f.get("on_cycles", 1) > 1 and run["cycles"] > 1
            quoted = [f"rank {f['worst_rank']}"] if per_rank else []
            if several_cycles and f.get("scope") != "job" and f.get("worst_cycle") is not None:
                quoted.append(f"cycle {f['worst_cycle']}")
            worst = f" (worst: {', '.join(quoted)})" if quoted else ""
            lines.append(f" {i}. [{f['rule']}] {f['message']}" + (f" [{where}{worst}]" if where else ""))
            lines.append(f"    fix: {f['fix']}")
        if len(recs) > top:
            lines.append(f"  ... {len(recs) - top} more (--json)")
    return lines


def job_lines(
    job: dict[str, Any],
    *,
    max_lines: int = MAX_LINES,
    dashboard: str | None = None,
    detail: Sequence[str] = (),
) -> list[str]:
    """The whole terminal summary: a line per run when there are several, then each run's block,
    then ``detail`` (a one-rank run's median cycle in full), stopping before ``max_lines``."""
    runs = job["runs"]
    out: list[str] = []
    n_skipped = job.get("files_skipped", 0)
    skipped = f" ({_plural(n_skipped, 'file')} skipped: see the warnings)" if n_skipped else ""
    if len(runs) > 1:
        out.append(f"{_plural(len(runs), 'run')} in {job['source']}{skipped}:")
        for r in runs[:10]:
            s = f", straggler rank {r['straggler']['rank']}" if r["straggler"] else ""
            stepped = (r.get("steps_ns") or {}).get("count", 1)
            step = f"median step {fmt_ns(r['step_ns']['median'])}" if stepped else "no step recorded"
            out.append(f"  {r['run']}: {_plural(r['ranks'], 'rank')}, {_plural(r['cycles'], 'cycle')}, {step}{s}")
        if len(runs) > 10:
            out.append(f"  ... {len(runs) - 10} more runs (--json)")
    elif skipped and runs and n_skipped > len(runs[0].get("ranks_unread") or []):
        # (ranks none of whose files could be read are said in the run's header already)
        out.append(f"{job['source']}: {_plural(n_skipped, 'file')} skipped, not read (see the warnings)")
    tail = [f"dashboard: {dashboard}"] if dashboard else []
    warnings = job.get("warnings") or []
    if warnings:
        tail = (
            [f"warning: {w}" for w in warnings[:SHOWN_WARNINGS]]
            + (
                [f"  ... {len(warnings) - SHOWN_WARNINGS} more warnings (--json)"]
                if len(warnings) > SHOWN_WARNINGS
                else []
            )
            + tail
        )
    budget = max_lines - len(tail)
    for i, r in enumerate(runs):
        block = run_lines(r)
        if len(out) + len(block) > budget:
            block = run_lines(r, top=2)
        if len(out) + len(block) > budget:
            out.append(f"... {len(runs) - i} more run blocks not shown (--json, or the dashboard)")
            break
        out.extend(block)
    room = budget - len(out)
    if detail and room > 2:
        out.extend(detail[:room])
    return out[: max_lines - len(tail)] + tail


def job_section(job: dict[str, Any]) -> dict[str, Any]:
    """The dashboard's ``job`` section: the job report itself (bounded by construction)."""
    return {"source": job["source"], "runs": job["runs"], "warnings": job.get("warnings", [])}


def job_payload(job: dict[str, Any], title: str) -> dict[str, Any]:
    """A dashboard payload for a job: no per-trace runs; the ``job`` section and the report."""
    return {
        "version": 1,
        "title": title,
        "source": job["source"],
        "generated": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "runs": [],
        "report": job,
        "job": job_section(job),
        "distributed": None,
        "diff": None,
        "warnings": job.get("warnings", []),
    }


def view_dir_for(html_path: Path) -> Path:
    """Where each rank's full view goes: ``NAME.ranks/`` beside ``NAME.html``."""
    return html_path.with_name(html_path.name.removesuffix(".html") + ".ranks")
