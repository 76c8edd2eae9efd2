"""``torchscope diff A B``: what changed between two runs, op by op, in the terminal and as HTML.

The op table is computed here from both traces; the analyses' own diff
(``analysis.diff.diff_traces``) is shown beside it when it is available.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from torchscope.analysis import keys as K
from torchscope.cli.base import EXIT_BAD_INPUT, EXIT_OK
from torchscope.cli.common import load_input, print_json, progress
from torchscope.trace.model import Trace, TraceSet


class DiffCommand:
    name = "diff"
    help = "Compare two traces (or two runs of several ranks): which ops got slower or faster."
    epilog = """examples:
  torchscope diff before.json.gz after.json.gz
  torchscope diff before.json.gz after.json.gz --html diff.html
  torchscope diff before.json.gz after.json.gz --json
  torchscope diff run_a/ run_b/ --json          # directories of ranks: averaged over ranks"""

    def configure(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("a", metavar="A", help="the baseline trace")
        parser.add_argument("b", metavar="B", help="the trace to compare with it")
        parser.add_argument("--html", metavar="FILE", help="also write the dashboard with its Diff view")
        parser.add_argument("--json", action="store_true", help="print the diff as JSON")
        parser.add_argument("--top", type=int, default=15, help="rows in the terminal table (default 15)")

    def run(self, args: argparse.Namespace) -> int:
        a, b = load_input(args.a), load_input(args.b)
        one_a, one_b = _one(a), _one(b)
        if one_a is not None and one_b is not None:
            diff = _diff_of_two_traces(one_a, one_b, args)
        else:
            if args.html:
                print(
                    "torchscope diff: error: --html draws the diff of two single traces; for runs of "
                    "several ranks use --json or the table",
                    file=sys.stderr,
                )
                return EXIT_BAD_INPUT
            diff = _diff_of_runs(a, b, args)
        if args.json:
            print_json(diff)
            return EXIT_OK
        from rich.markup import escape
        from rich.table import Table

        from torchscope.render.console import fmt_ns, terminal

        console = terminal(sys.stdout)
        if diff["summary_a"] is not None:
            sa, sb = diff["summary_a"], diff["summary_b"]
            console.print(
                f"A {escape(diff['a'])}: {fmt_ns(sa.get('span_ns'))} · B {escape(diff['b'])}: {fmt_ns(sb.get('span_ns'))}"
            )
            title = "ops by change in self time (B - A)"
        else:
            step = diff["report"][K.DIFF_STEP]
            console.print(
                f"A {escape(diff['a'])}: step {fmt_ns(step['a'] * 1e3)} · "
                f"B {escape(diff['b'])}: step {fmt_ns(step['b'] * 1e3)} (averaged over ranks)"
            )
            title = "ops by change in self time per step, averaged over ranks (B - A)"
        t = Table(title=title, title_justify="left")
        for col, just in (
            ("op", "left"),
            ("calls A", "right"),
            ("calls B", "right"),
            ("self A", "right"),
            ("self B", "right"),
            ("change", "right"),
        ):
            t.add_column(col, justify=just, overflow="fold")  # type: ignore[arg-type]
        for r in diff["ops"][: args.top]:
            sign = "+" if r["delta_ns"] > 0 else ""
            t.add_row(
                escape(r["name"]),
                _count(r["calls_a"]),
                _count(r["calls_b"]),
                fmt_ns(r["self_ns_a"]),
                fmt_ns(r["self_ns_b"]),
                f"{sign}{fmt_ns(r['delta_ns'])}",
            )
        console.print(t)
        if args.html:
            console.print(f"dashboard: {args.html}")
        return EXIT_OK


def _count(calls: float) -> str:
    """Calls as a whole number, or with two decimals when averaged (per step, over ranks)."""
    return f"{int(calls):,}" if float(calls).is_integer() else f"{calls:,.2f}"


def _one(loaded: Trace | TraceSet) -> Trace | None:
    """The trace, when there is one (a directory of one trace counts); None for several ranks."""
    if isinstance(loaded, TraceSet):
        return next(iter(loaded.values())) if len(loaded) == 1 else None
    return loaded


def _diff_of_two_traces(a: Trace, b: Trace, args: argparse.Namespace) -> dict[str, Any]:
    """The dashboard's diff of two traces (op table, summaries, the analyses' diff)."""
    from torchscope.render.payload import build_payload

    with progress("comparing"):
        payload = build_payload(a, compare=b, title=f"{Path(args.a).name} vs {Path(args.b).name}")
    if args.html:
        from torchscope.render.html import write_html

        write_html(payload, args.html)
    return payload["diff"]  # type: ignore[no-any-return]


def _diff_of_runs(a: Trace | TraceSet, b: Trace | TraceSet, args: argparse.Namespace) -> dict[str, Any]:
    """Two runs of several ranks: the analyses' diff, ranks averaged, in the same JSON shape
    (``ops`` per step and averaged over ranks; no per-trace summaries)."""
    from torchscope.analysis.diff import diff_traces

    with progress("comparing"):
        d = diff_traces(a, b)
    ops = [
        {
            "name": r["name"],
            "calls_a": r["a_calls"],
            "calls_b": r["b_calls"],
            "self_ns_a": r["a_ns"],
            "self_ns_b": r["b_ns"],
            "delta_ns": r["delta_ns"],
            "delta_pct": round(100.0 * r["delta_ns"] / r["a_ns"], 1) if r["a_ns"] else None,
        }
        for r in d.operators.iter_rows(named=True)
    ]
    return {
        "a": Path(args.a).name,
        "b": Path(args.b).name,
        "ops": ops,
        "summary_a": None,
        "summary_b": None,
        "report": d.to_dict(),
    }


COMMAND = DiffCommand()
