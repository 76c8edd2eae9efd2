"""``torchscope diff A B``: what changed between two runs, in the terminal and as HTML.

A renderer of the analyses' diff (``analysis.diff.diff_traces``): ``--json`` prints its
``to_dict()``, the terminal shows the step time, the categories, then the ops and kernels
that explain the change; ``--html`` is the dashboard with its Diff view of the same diff.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from torchscope.analysis import keys as K
from torchscope.cli.base import EXIT_BAD_INPUT, EXIT_OK
from torchscope.cli.common import (
    at_least_one,
    html_target,
    input_warnings,
    load_input,
    print_json,
    progress,
    read_early,
    warn_on_stderr,
)
from torchscope.render.units import plural

if TYPE_CHECKING:  # imported when used: both files start reading before polars imports
    from torchscope.analysis.diff import JobDir
    from torchscope.job.discover import Discovery
    from torchscope.trace.files import Prefetch
    from torchscope.trace.model import Trace, TraceSet


EARLY_SECOND_BYTES = 32 * 1024 * 1024  # the second file is read early up to this size on disk


class DiffCommand:
    name = "diff"
    help = "Compare two traces (or two runs of several ranks): which ops got slower or faster."
    epilog = """examples:
  torchscope diff before.json.gz after.json.gz
  torchscope diff before.json.gz after.json.gz --html diff.html
  torchscope diff before.json.gz after.json.gz --json
  torchscope diff run_a/ run_b/                 # run directories: ranks averaged, each rank's cycles per step"""

    def configure(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("a", metavar="A", help="the baseline trace")
        parser.add_argument("b", metavar="B", help="the trace to compare with it")
        parser.add_argument("--html", metavar="FILE", help="also write the dashboard with its Diff view")
        parser.add_argument("--json", action="store_true", help="print the diff as JSON")
        parser.add_argument(
            "--top", type=at_least_one, default=15, help="rows in the terminal table (default 15)"
        )

    def run(self, args: argparse.Namespace) -> int:
        if args.html:
            html_target(args.html, args.a, args.b)  # never an input: refused before any work
        # both read while polars imports; B only when small, so that a large B's text does not
        # sit in memory beside all of A's work
        early_a, early_b = read_early(args.a), read_early(args.b, at_most=EARLY_SECOND_BYTES)
        found = [_one_run(path) for path in (args.a, args.b)]  # several runs: refused, not merged
        a, b = (
            _side_of(path, seen, early) for path, seen, early in zip((args.a, args.b), found, (early_a, early_b), strict=True)
        )
        # repaired or skipped files, and sides recorded by different collectors
        said = [*_warnings_of(a), *_warnings_of(b), *_collectors_differ(a, b)]
        warn_on_stderr(self.name, said)
        one_a, one_b = _one(a), _one(b)
        if args.html and (one_a is None or one_b is None):
            print(
                "torchscope diff: error: --html draws the diff of two single traces; for runs of "
                "several ranks or cycles use --json or the table",
                file=sys.stderr,
            )
            return EXIT_BAD_INPUT
        from torchscope.analysis.diff import JobDir, diff_traces

        with progress("comparing"):
            diff = diff_traces(a, b).to_dict()
        # what reading a directory's files repaired, said as they were read
        later = [line for side in (a, b) if isinstance(side, JobDir) for line in side.said]
        warn_on_stderr(self.name, later)
        if args.html and one_a is not None and one_b is not None:
            from torchscope.render.html import write_html
            from torchscope.render.payload import build_payload, distinct_labels

            write_html(
                build_payload(
                    one_a, compare=one_b, title="{} vs {}".format(*distinct_labels(args.a, args.b))
                ),
                args.html,
            )
        if args.json:
            print_json({**diff, "warnings": [*said, *later]})
            return EXIT_OK
        from torchscope.render.console import terminal
        from torchscope.render.payload import distinct_labels

        console = terminal(sys.stdout)
        print_diff(diff, console, *distinct_labels(args.a, args.b), top=args.top)
        if args.html:
            console.print(f"dashboard: {args.html}")
        return EXIT_OK


def _steps(n: int) -> str:
    return f"{n} step" if n == 1 else f"{n} steps"


def print_diff(
    diff: dict[str, Any], console: Any, name_a: str, name_b: str, *, top: int, averaged: bool = False
) -> None:
    """The diff in the terminal: step time, then the categories, then the ops and kernels that explain it."""
    from rich.table import Table

    from torchscope.analysis.diff import SURE_FLOORS
    from torchscope.render.console import _esc, cell
    from torchscope.render.units import fmt_count, fmt_us

    def signed(us: float | None) -> str:
        return "–" if us is None else ("+" if us > 0 else "") + fmt_us(us)

    step = diff[K.DIFF_STEP]
    da, db = diff[K.DIFF_A], diff[K.DIFF_B]
    sides = f"A {_esc(name_a)} ({_steps(da['steps'])}) · B {_esc(name_b)} ({_steps(db['steps'])})"
    ranks = max(da.get("ranks", 1), db.get("ranks", 1))
    console.print(sides + (" · per step, averaged over ranks" if ranks > 1 or averaged else ""))
    for line in compared_lines(da, db):
        console.print(_esc(line))
    console.print(
        f"[bold]step time[/bold] {fmt_us(step['a'])} → {fmt_us(step['b'])} ({signed(step['delta'])}"
        + (f", ×{step['ratio']:.2f}" if step.get("ratio") else "")
        + ")"
    )
    if (spread := spread_line(step)) is not None:
        console.print(_esc(spread))
    t = Table(title="step time by category, per step (B - A)", title_justify="left")
    for col in ("category", "A", "B", "change"):
        t.add_column(col, justify="left" if col == "category" else "right")
    for cat, v in diff[K.DIFF_BREAKDOWN].items():
        if v["a"] or v["b"]:
            t.add_row(cat, fmt_us(v["a"]), fmt_us(v["b"]), signed(v["delta"]))
    console.print(t)
    floor = step.get("noise_floor")
    if not diff[K.DIFF_CHANGES]:
        console.print("no op or kernel changed: the same calls and times per step")
        return
    t = Table(
        title="ops and kernels by change per step (B - A): new, gone or other call counts first (a count"
        " does not jitter), with same-count changes"
        + (
            f" over {fmt_us(SURE_FLOORS * floor)}; then the other same-count changes by size, those under"
            f" {fmt_us(floor)} (1% of the step) dimmed as noise"
            if floor
            else " by size"
        )
        + f"; --top N shows more than {top} rows, --json all",
        title_justify="left",
    )
    for col, just in (("name", "left"), ("what", "left"), ("status", "left"), ("calls A", "right"),
                      ("calls B", "right"), ("A", "right"), ("B", "right"), ("change", "right")):  # fmt: skip
        t.add_column(col, justify=just, overflow="fold")  # type: ignore[arg-type]
    for r in diff[K.DIFF_CHANGES][:top]:
        t.add_row(
            cell(r["name"]),
            r["what"],
            r["status"],
            fmt_count(r["a_calls"]),
            fmt_count(r["b_calls"]),
            fmt_us(r["a_us"]),
            fmt_us(r["b_us"]),
            signed(r["delta_us"]),
            style="dim" if r.get("noise") else None,
        )
    console.print(t)


def compared_lines(da: dict[str, Any], db: dict[str, Any]) -> list[str]:
    """What was compared, when it is not simply one trace's steps against another's: the cycles
    each side's steps came from, and the steps a side kept that were left out (the other run
    lacks their numbers, or numbered its steps differently: then the first ``min(n_a, n_b)``)."""
    lines = []
    if max(da.get("cycles", 1), db.get("cycles", 1)) > 1:
        lines.append(
            "compared per step: {} in {} vs {} in {}{}".format(
                plural(da["steps"], "step"),
                plural(da["cycles"], "cycle"),
                plural(db["steps"], "step"),
                plural(db["cycles"], "cycle"),
                " (of each rank)" if max(da.get("ranks", 1), db.get("ranks", 1)) > 1 else "",
            )
        )
    devices_a, devices_b = da.get("devices") or [], db.get("devices") or []
    if devices_a and devices_b and devices_a != devices_b:
        # an A100 against an MI250 was compared without a word: kernels are each device's own
        lines.append(
            f"A ran on {', '.join(devices_a)}, B on {', '.join(devices_b)}: their kernels are each"
            " device's own, so many appear or vanish"
        )
    if not da["step_numbers"] and not db["step_numbers"]:
        # one side has no ProfilerStep steps, so neither is compared per step: say so, or a
        # whole trace reads as one step of the other's
        stepped = [(n, d) for n, d in (("A", da), ("B", db)) if d.get("kept", 0) > d["steps"]]
        if len(stepped) == 1:
            (name, d), other = stepped[0], "B" if stepped[0][0] == "A" else "A"
            lines.append(
                f"{other} has no ProfilerStep steps, so both are compared as whole traces: "
                f"{name}'s {d['kept']} steps count as {_steps(d['steps'])}"
            )
    left = [(n, d) for n, d in (("A", da), ("B", db)) if d.get("kept", 0) > d["steps"] and d["step_numbers"]]
    if not left and da["step_numbers"] and db["step_numbers"] and da["step_numbers"] != db["step_numbers"]:
        # all of each compared, in order: steps 2, 3, 4 against 7, 8, 9 went without a word
        lines.append(
            "compared in order, their step numbers differ: A's {} with B's {}".format(
                _numbers(da["step_numbers"]), _numbers(db["step_numbers"])
            )
        )
    if left:
        same = da["step_numbers"] == db["step_numbers"]
        why = (
            "the steps both kept"
            if same
            else "the first {} of each (their step numbers differ)".format(min(da["steps"], db["steps"]))
        )
        lines.append(
            f"only {why} compared: "
            + "; ".join(f"{n} kept {d['kept']}, {d['kept'] - d['steps']} left out" for n, d in left)
        )
    return lines


def spread_line(step: dict[str, Any]) -> str | None:
    """How long each side's steps took (shortest, median, longest) and, when the change is
    smaller than that spread, that the medians may say more: a run made slower on purpose
    headlined "-11.3 ms" without a word that its steps took 2.2-70.2 ms."""
    from torchscope.render.units import fmt_us

    said = [
        f"{fmt_us(s['shortest'])}–{fmt_us(s['longest'])} in {side} (median {fmt_us(s['median'])})"
        for side in ("A", "B")
        if (s := step.get(f"{side.lower()}_steps")) and s["longest"] > s["shortest"]
    ]
    if not said:
        return None
    caveat = (
        ": the change is smaller than that spread, so it may be the machine's jitter (compare the"
        " medians, or record more steps)"
        if step.get("within_spread")
        else ""
    )
    return "steps took " + " and ".join(said) + caveat


def _numbers(steps: list[int], most: int = 6) -> str:
    """Step numbers for a line: "2, 3, 4", or the first few and how many more."""
    shown = ", ".join(str(n) for n in steps[:most])
    return shown + (f" and {len(steps) - most} more" if len(steps) > most else "")


def _one_run(path: str) -> Discovery | None:
    """Refuse a directory that holds several runs (``report`` tells them apart): its ranks would
    be averaged together as if they were one run, and the diff would mean nothing. The
    directory's discovery when it holds several traces (None for a file or a single trace)."""
    from torchscope.errors import UsageError
    from torchscope.job.cli import job_directory

    found = job_directory(path)
    if found is not None and len(found.runs) > 1:
        names = ", ".join(run.name for run in found.runs[:4]) + (", ..." if len(found.runs) > 4 else "")
        raise UsageError(
            f"{path} holds {len(found.runs)} runs ({names}): diff compares one run with another;"
            f" `torchscope report {path}` shows each"
        )
    return found


def _side_of(path: str, found: Discovery | None, early: Prefetch | None) -> Trace | TraceSet | JobDir:
    """A file (or a folder of one trace) read whole; a folder of ranks or cycles read one file at
    a time while the diff runs (``JobDir``), as ``report`` reads it."""
    if found is None:
        return load_input(path, early)
    from torchscope.analysis.diff import JobDir

    return JobDir.of(path, found)  # not discovered twice


def _collector(side: Trace | TraceSet | JobDir) -> str | None:
    """Which collector recorded a side: "the portable collector", "Kineto", or None (a
    directory read file by file: not looked at)."""
    from torchscope.trace.dialect import PORTABLE_TRACE_NAME
    from torchscope.trace.model import Trace, TraceSet

    traces = list(side.traces.values()) if isinstance(side, TraceSet) else [side] if isinstance(side, Trace) else []
    if not traces:
        return None
    portable = any(t.meta.extra.get("traceName") == PORTABLE_TRACE_NAME for t in traces)
    return "the portable collector" if portable else "Kineto"


def _collectors_differ(a: Trace | TraceSet | JobDir, b: Trace | TraceSet | JobDir) -> list[str]:
    """A warning when one side was recorded by the portable collector and the other by Kineto:
    the collector's own cost per op (~25-36 us on CPU, docs/portable.md) reads as the program's
    ("Python outside ops +2.7 ms", "Optimizer +1.3 ms" between one model's two runs)."""
    ca, cb = _collector(a), _collector(b)
    if ca is None or cb is None or ca == cb:
        return []
    return [
        f"A was recorded by {ca}, B by {cb}: the portable collector's own cost per op is in its"
        " side's times (docs/portable.md), so part of the differences is the collectors'"
    ]


def _warnings_of(side: Trace | TraceSet | JobDir) -> list[str]:
    from torchscope.analysis.diff import JobDir

    return list(side.skipped) if isinstance(side, JobDir) else input_warnings(side)


def _one(loaded: Trace | TraceSet | JobDir) -> Trace | None:
    """The trace, when there is one (a directory of one trace counts); None for several ranks or cycles."""
    from torchscope.analysis.diff import JobDir
    from torchscope.trace.model import TraceSet

    if isinstance(loaded, JobDir):
        return None
    if isinstance(loaded, TraceSet):
        return next(iter(loaded.values())) if len(loaded) == 1 else None
    return loaded


COMMAND = DiffCommand()
