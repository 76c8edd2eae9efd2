"""``torchscope diff A B``: what changed between two runs, op by op, in the terminal and as HTML.

The op table is computed here from both traces; the analyses' own diff
(``analysis.diff.diff_traces``) is shown beside it when it is available.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from torchscope.cli.base import EXIT_OK
from torchscope.cli.common import load_single, print_json, progress


class DiffCommand:
    name = "diff"
    help = "Compare two traces: which ops got slower or faster."
    epilog = """examples:
  torchscope diff before.json.gz after.json.gz
  torchscope diff before.json.gz after.json.gz --html diff.html
  torchscope diff before.json.gz after.json.gz --json"""

    def configure(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("a", metavar="A", help="the baseline trace")
        parser.add_argument("b", metavar="B", help="the trace to compare with it")
        parser.add_argument("--html", metavar="FILE", help="also write the dashboard with its Diff view")
        parser.add_argument("--json", action="store_true", help="print the diff as JSON")
        parser.add_argument("--top", type=int, default=15, help="rows in the terminal table (default 15)")

    def run(self, args: argparse.Namespace) -> int:
        from torchscope.render.payload import build_payload

        a, b = load_single(args.a), load_single(args.b)
        with progress("comparing"):
            payload = build_payload(a, compare=b, title=f"{Path(args.a).name} vs {Path(args.b).name}")
        if args.html:
            from torchscope.render.html import write_html

            write_html(payload, args.html)
        diff = payload["diff"]
        if args.json:
            print_json(diff)
            return EXIT_OK
        from rich.console import Console
        from rich.markup import escape
        from rich.table import Table

        from torchscope.render.console import fmt_ns

        console = Console(file=sys.stdout)
        sa, sb = diff["summary_a"] or {}, diff["summary_b"] or {}
        console.print(
            f"A {escape(diff['a'])}: {fmt_ns(sa.get('span_ns'))} · B {escape(diff['b'])}: {fmt_ns(sb.get('span_ns'))}"
        )
        t = Table(title="ops by change in self time (B - A)", title_justify="left")
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
                f"{r['calls_a']:,}",
                f"{r['calls_b']:,}",
                fmt_ns(r["self_ns_a"]),
                fmt_ns(r["self_ns_b"]),
                f"{sign}{fmt_ns(r['delta_ns'])}",
            )
        console.print(t)
        if args.html:
            console.print(f"dashboard: {args.html}")
        return EXIT_OK


COMMAND = DiffCommand()
