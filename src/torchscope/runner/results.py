"""After the run: load its traces, place the hot-spot samples on the trace's clock, write the report.

The sampler's clock is the wall clock (``time.time_ns``); the trace's timestamps are whatever
the reader made of Kineto's. The two are aligned from the step marks the runner took right
before each ``prof.step()`` (each matches a ``ProfilerStep#N`` start), else from Kineto's base
time, and a sample counts as "covered" when an ATen op was running on the script's thread, or
on a thread that ran backward for it: autograd runs the backward of device tensors on its own
threads while the script's thread waits in ``Tensor.backward``, which is no time the op
profiler misses.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from torchscope.analysis import names
from torchscope.analysis.flame import sampled_flame_json
from torchscope.render.text import cut_strings
from torchscope.runner.cycle_names import SCRIPT_CYCLE
from torchscope.runner.sampler import HotSpots, covered_by, hottest_line
from torchscope.runner.session import SETUP_SPAN, TAIL_SPAN, RunOptions, RunResult
from torchscope.trace.model import Trace, TraceSet


def _clock_offset(
    trace: Trace, marks: list[tuple[int, int]], samples: HotSpots, *, anywhere: bool = False
) -> int | None:
    """ns to add to a wall-clock time to get the trace's ``start_ns``; None if unknown.

    ``marks`` are the run's own step marks, for the run's own cycles only: a script's own
    profiler numbers its steps its own way. Without them, the trace's base time places it when
    the samples begin at most one trace-length before it, or (``anywhere``: a script's own cycle,
    which may come late in the run, and whose hot spots were lost) when their span meets it."""
    steps = trace.steps
    if marks and steps.height:
        starts = dict(zip(steps["step"].to_list(), steps["start_ns"].to_list(), strict=True))
        diffs = [starts[n] - wall for n, wall in marks if n in starts]
        if diffs:
            return int(np.median(diffs))
    ev = trace.events
    if ev.height == 0 or samples.samples == 0:
        return None
    lo, hi = int(ev["start_ns"].min()), int((ev["start_ns"] + ev["dur_ns"]).max())  # type: ignore[arg-type]
    s_lo, s_hi = int(samples.times_ns[0]), int(samples.times_ns[-1])
    for offset in (0, -(trace.meta.base_time_ns or 0)):
        begins = anywhere or lo - (hi - lo) <= s_lo + offset
        if begins and s_lo + offset <= hi and s_hi + offset >= lo:
            return offset
    return None


# a trace with its samples placed: their midpoints on its clock, inside it or not, an op then or not
Placed = tuple[Trace, tuple[np.ndarray, np.ndarray, np.ndarray]]


def place_samples(traces: list[Trace], result: RunResult, paths: list[Path]) -> list[Placed]:
    """The run's samples on each trace's clock (``paths``: each trace's file), once for the
    hot-spot table and the advice; traces whose clocks the samples do not meet are left out."""
    return [
        (t, placed)
        for t, path in zip(traces, paths, strict=True)
        if (placed := _on_trace_clock(t, result, own=SCRIPT_CYCLE not in path.name)) is not None
    ]


def _on_trace_clock(
    trace: Trace, result: RunResult, *, own: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """The samples' midpoints on ``trace``'s clock, whether each falls inside the trace, and
    whether an op was running on the script's thread then; None when the clocks do not meet.
    ``own``: the run's own cycle, whose steps the run's step marks place."""
    hs = result.hotspots
    if hs is None or hs.samples == 0:
        return None
    offset = _clock_offset(trace, result.step_marks if own else [], hs, anywhere=not own)
    if offset is None:
        return None
    ops = _ops_for_the_script(trace, hs.native_id)
    t = hs.midpoints_ns + offset
    lo = int(trace.events["start_ns"].min())  # type: ignore[arg-type]
    hi = int((trace.events["start_ns"] + trace.events["dur_ns"]).max())  # type: ignore[arg-type]
    inside = (t >= lo) & (t <= hi)
    starts = ops["start_ns"].to_numpy()
    return t, inside, inside & covered_by(t, starts, starts + ops["dur_ns"].to_numpy())


def _ops_for_the_script(trace: Trace, native_id: int) -> pl.DataFrame:
    """The ops that ran for the script's thread: its own, and those of the threads that ran its
    backward passes (on CUDA, 92% of ``Tensor.backward`` read "outside ops" without them); all
    ops when the script's thread recorded none."""
    ops = trace.events.filter(pl.col("kind") == "cpu_op")
    mine = pl.col("tid") == native_id
    if not ops.select(mine.any()).item():
        return ops
    backward = ops.filter(~mine & names.BACKWARD_NODE)["tid"].unique()
    return ops.filter(mine | pl.col("tid").is_in(backward.to_list()))


def hotspot_rows(placed: list[Placed], result: RunResult, limit: int = 30) -> list[dict[str, Any]]:
    """The hot-spot table with ``outside_ops_pct`` where the samples fall inside a recorded trace."""
    hs = result.hotspots
    if hs is None or hs.samples == 0:
        return []
    covered = np.zeros(hs.samples, dtype=bool)
    known = np.zeros(hs.samples, dtype=bool)
    weights = hs.weights_ns
    spans = np.zeros(hs.samples, dtype=np.int64)
    for trace, (t, inside, covered_here) in placed:
        known |= inside
        covered |= covered_here
        spans[inside] = _clipped_spans(trace, t, weights)[inside]
    if not known.any():
        return hs.table(None, limit)
    # Only samples inside a recorded window say anything about coverage, and only for the part
    # of their time inside it: a sample after a long GIL-holding call (or a gap the sampler
    # slept through) that began before the window must not bring the unrecorded time along.
    return hs.windowed(known, spans).table(covered[known], limit)


def _clipped_spans(trace: Trace, t: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Each sample's span (midpoint ``t`` on the trace's clock, length ``weights``) clipped to
    the trace's first and last event: the part of its time the trace recorded."""
    lo = int(trace.events["start_ns"].min())  # type: ignore[arg-type]
    hi = int((trace.events["start_ns"] + trace.events["dur_ns"]).max())  # type: ignore[arg-type]
    end = t + weights // 2
    return np.clip(np.minimum(end, hi) - np.maximum(end - weights, lo), 0, None)


def _region_windows(trace: Trace, region: str, tid: int) -> tuple[np.ndarray, np.ndarray]:
    """Start and end (ns) of each call of ``region`` as the advisor names it (``ProfilerStep#*``
    for the steps), on the script's thread when it has any there."""
    if region == "ProfilerStep#*":
        steps = trace.steps
        return steps["start_ns"].to_numpy(), (steps["start_ns"] + steps["dur_ns"]).to_numpy()
    ev = trace.events.filter(pl.col("name").cast(pl.String) == region)
    mine = ev.filter(pl.col("tid") == tid)
    ev = mine if mine.height else ev
    return ev["start_ns"].to_numpy(), (ev["start_ns"] + ev["dur_ns"]).to_numpy()


def _sampled_culprits(placed: list[Placed], result: RunResult, region: str, limit: int = 3) -> list[str]:
    """The functions the sampler caught while ``region`` ran and no op did, most time first
    (each with at least a tenth of that time), as ``name (file:line)``."""
    hs = result.hotspots
    if hs is None:
        return []
    weights = hs.weights_ns.astype(np.float64)
    at_line: dict[Any, dict[int, float]] = {}  # function -> its time by the line it was on
    for trace, (t, _, covered) in placed:
        starts, ends = _region_windows(trace, region, hs.native_id)
        outside = covered_by(t, starts, ends) & ~covered
        for sid, w in zip(hs.stack_ids[outside].tolist(), weights[outside].tolist(), strict=True):
            if hs.stacks[sid]:
                lines = at_line.setdefault(hs.hot_of(sid), {})
                line = hs.hot_line_of(sid)
                lines[line] = lines.get(line, 0.0) + w
    by_func = {func: sum(lines.values()) for func, lines in at_line.items()}
    total = sum(by_func.values())
    ranked = sorted(by_func.items(), key=lambda kv: (-kv[1], kv[0]))
    out = []
    for func, ns in ranked[:limit]:
        if ns >= 0.1 * total:
            out.append(f"{func[1]} ({Path(func[0]).name}:{hottest_line(at_line[func])})")
    return out


# the spans the runner adds around the steps, as a sentence says them
_OUR_SPANS = {SETUP_SPAN: "the setup before the first step", TAIL_SPAN: "the work after the last step"}


def name_sampled_culprits(
    payload: dict[str, Any], placed: list[Placed], cycles: dict[str, list[Placed]], result: RunResult
) -> None:
    """Give ``python_outside_ops`` findings the trace could not explain (no Python stacks were
    recorded) the functions the run's sampler caught there: the advice then names the code,
    instead of telling a ``torchscope run`` user to profile with ``torchscope run``.

    Both of the payload's reports get them (the page's, names cut, and the uncut one the
    terminal and ``--json`` print: the terminal had the old advice while report.json had the
    new), the run's findings from all its samples and each cycle's (``cycles``, by the name
    the report gives it) from the samples of that cycle alone.
    """
    from torchscope.render.payload import full_report

    found: dict[tuple[str, str | None], list[str]] = {}

    def name_in(findings: list[dict[str, Any]] | None, where: str | None, inside: list[Placed]) -> None:
        for finding in findings or []:
            evidence = finding.get("evidence") or {}
            if finding.get("rule") != "python_outside_ops" or evidence.get("python_functions"):
                continue
            region = str(evidence.get("region"))
            if (region, where) not in found:
                found[(region, where)] = _sampled_culprits(inside, result, region)
            if culprits := found[(region, where)]:
                _with_culprits(finding, evidence, culprits)
            elif "torchscope run" in str(finding.get("fix")):
                # a cycle in the middle of a run holds no span of ours to tell the advisor it
                # was recorded by ``torchscope run``, which was then advised to its user
                finding["fix"] = (
                    "The sampler caught no Python function there: these steps are too short for its "
                    "interval. Run again with --stack (Python stacks in the trace) or a smaller "
                    "--sample-ms to see which code runs there, then move it into torch ops or out of the step."
                )

    reports = [payload.get("report"), full_report(payload)]
    for report in [r for i, r in enumerate(reports) if r and all(r is not o for o in reports[:i])]:
        name_in(report.get("recommendations"), None, placed)
        for name, cycle in (report.get("ranks") or {}).items():
            name_in(cycle.get("recommendations"), name, cycles.get(name, []))


def _with_culprits(finding: dict[str, Any], evidence: dict[str, Any], culprits: list[str]) -> None:
    head = finding["message"].split("; ", 1)[0]
    finding["message"] = f"{head}; the sampler caught most of it in {', '.join(culprits)}."
    finding["fix"] = (
        "Those functions are in the Python hot spots (their 'outside ops' column): move their work into "
        "torch ops, or out of the step, or off the critical path (a DataLoader worker, a background thread)."
    )
    evidence["python_functions"] = culprits
    evidence["sampled"] = True
    label = _OUR_SPANS.get(str(evidence.get("region")))
    if label:
        finding["message"] = finding["message"].replace(f"'{evidence['region']}'", label)


def load_traces(paths: list[Path], problems: list[str]) -> list[tuple[Path, Trace]]:
    """The run's kept cycles, read back from their files; one that cannot be read is named in
    ``problems`` and left out."""
    from torchscope.trace.loader import load

    out: list[tuple[Path, Trace]] = []
    for p in paths:
        try:
            loaded = load(p)
        except Exception as exc:  # noqa: BLE001 - the other cycles still make a report
            problems.append(f"{p.name}: {type(exc).__name__}: {exc}")
            continue
        out.extend((p, t) for t in (loaded.values() if isinstance(loaded, TraceSet) else [loaded]))
    return out


# the most events of one cycle the report reads (a --all run of hours can hold far more): the
# report's memory stays bounded whatever was recorded; the trace file keeps everything
REPORT_EVENTS = 2_000_000


def _bounded(trace: Trace, problems: list[str], name: str) -> Trace:
    """``trace`` cut to its first REPORT_EVENTS events for the report, saying so."""
    import dataclasses

    n = trace.events.height
    if n <= REPORT_EVENTS:
        return trace
    problems.append(
        f"{name}: the report reads the first {REPORT_EVENTS:,} of its {n:,} events; "
        f"the whole trace is in the file (torchscope report can read it)"
    )
    return dataclasses.replace(trace, events=trace.events.head(REPORT_EVENTS))


def _schedule_info(options: RunOptions) -> dict[str, Any]:
    if options.record_all:
        return {"mode": "all"}
    if options.scheduled:
        return {
            "mode": "schedule",
            "wait": options.wait,
            "warmup": options.warmup,
            "active": options.active,
            "repeat": options.cycles,
            "skip_first": options.skip_first,
        }
    from torchscope.runner.bounds import DefaultSchedule

    return {"mode": "default", "recorded_steps": DefaultSchedule().recorded(), "cap_mb": options.cap_mb}


def build_run_payload(result: RunResult, options: RunOptions, command: list[str]) -> dict[str, Any]:
    """The dashboard payload of a ``torchscope run``: every kept cycle of the run plus run facts."""
    from torchscope.render.payload import build_payload

    problems = list(result.problems)
    loaded = load_traces(result.kept_paths, problems)
    paths = [p for p, _ in loaded]
    traces = [_bounded(t, problems, p.name) for p, t in loaded]
    run_info = {
        "command": command,
        "target": result.target.display,
        "args": list(result.target.args),
        "exit_code": result.exit_code,
        "error": result.error,
        "wall_s": round(result.wall_s, 3),
        "optimizer_steps": result.steps,
        "setup_s": None if result.setup_s is None else round(result.setup_s, 6),  # to the µs the card shows
        "schedule": _schedule_info(options),
        "notes": list(result.notes),
        "traces": [str(p) for p in result.trace_paths],
        "report_traces": [str(p) for p in paths],
    }
    placed = place_samples(traces, result, paths)
    extra = {
        "run": run_info,
        "env": result.env,
        "hotspots": hotspot_rows(placed, result),
        # the Flame tab's "Sampled Python time" (analysis.flame; the page shows it when present)
        "hotspots_flame": cut_strings(sampled_flame_json(result.hotspots)),
    }
    title = f"torchscope run {result.target.display}"
    if not traces:
        payload = build_payload(TraceSet({}, source=str(options.out)), title=title, extra=extra)
        payload["warnings"].extend(
            problems
            or [
                "no trace was recorded: the schedule never reached an active step"
                + (
                    " (its steps are the script's optimizer.step() calls, and it made none: --all records a"
                    " script without one whole)"
                    if result.steps == 0
                    else ""
                )
            ]
        )
        return payload
    subject: Trace | TraceSet = (
        traces[0]
        if len(traces) == 1
        else TraceSet(
            {p.name.removesuffix(".pt.trace.json"): t for p, t in zip(paths, traces, strict=False)},
            source=str(options.out),
            members="cycles",  # one process's cycles: no ranks, no straggler
        )
    )
    payload = build_payload(subject, title=title, extra=extra)
    payload["warnings"].extend(problems)
    cycles = {
        p.name.removesuffix(".pt.trace.json"): [one for one in placed if one[0] is t]
        for p, t in zip(paths, traces, strict=True)
    }
    name_sampled_culprits(payload, placed, cycles, result)
    return payload


def write_run_dir(payload: dict[str, Any], out: Path) -> dict[str, Path]:
    """``report.html`` and ``report.json``, each written whole or not at all."""
    from torchscope.render.html import write_html
    from torchscope.writes import write_atomically

    html = write_html(payload, out / "report.html")
    slim = {
        **payload,
        "runs": [{k: v for k, v in r.items() if k != "timeline"} for r in payload.get("runs") or []],
    }
    text = json.dumps(slim, indent=1, allow_nan=False)
    js = write_atomically(out / "report.json", lambda tmp: tmp.write_text(text, encoding="utf-8"))
    return {"html": html, "json": js}
