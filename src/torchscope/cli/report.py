"""``torchscope report``: a trace file or log directory to a terminal summary and an HTML dashboard.

The HTML is one self-contained file (our own JS/CSS, the data embedded) that opens offline
and can be attached to a bug report.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from torchscope.analysis import keys as K
from torchscope.cli.base import EXIT_OK
from torchscope.cli.common import at_least_one, html_target, load_input, print_json, progress, read_early
from torchscope.errors import UsageError


class ReportCommand:
    name = "report"
    help = "Summarize a trace file or log directory in the terminal and as an HTML dashboard."
    epilog = """examples:
  torchscope report trace.pt.trace.json.gz
  torchscope report ./log/resnet --html resnet.html --open
  torchscope report rank-0.json.gz --json > report.json"""

    def configure(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "path", metavar="TRACE_OR_DIR", help="a trace file, our store directory, or a log directory"
        )
        parser.add_argument(
            "--html", metavar="FILE", help="where to write the dashboard (default: NAME.torchscope.html here)"
        )
        parser.add_argument(
            "--json",
            action="store_true",
            help="print the analyses as one JSON object on stdout (keys: docs/analyses.md)",
        )
        parser.add_argument("--open", action="store_true", help="open the dashboard in a browser")
        parser.add_argument("--no-html", action="store_true", help="terminal summary only")
        parser.add_argument(
            "--top", type=at_least_one, default=10, help="rows per terminal table (default 10)"
        )
        parser.add_argument(
            "--engine",
            default="local",
            help="a directory of several runs/ranks/cycles is analysed rank by rank: local (default, one "
            "process per core), local:N, ray (torchscope[ray]) or ray://HOST:PORT; see docs/jobs.md",
        )
        parser.add_argument(
            "--rank-views",
            action="store_true",
            help="for a job, also write each rank's full dashboard into NAME.ranks/ beside the job's page",
        )

    def run(self, args: argparse.Namespace) -> int:
        if args.html is not None and args.no_html:
            raise UsageError("--html and --no-html contradict each other: give one")
        if args.html is not None and not args.html.strip():
            raise UsageError("--html needs a file name")
        if args.html:
            html_target(args.html, args.path)  # never the input itself: refused before any work
        early = read_early(args.path)  # a file inflates while the modules below import
        from torchscope.job.engine import parse_engine

        try:  # checked for a single file too, where it is unused: a typo is said at once
            parse_engine(args.engine)
        except ValueError as exc:
            raise UsageError(f"--engine {args.engine}: {exc}") from None
        from torchscope.job.cli import job_directory, report_job
        from torchscope.render.payload import build_payload

        found = job_directory(args.path)
        if found is not None:  # several runs, ranks or cycles: the job path (docs/jobs.md)
            return report_job(args, found)
        subject = load_input(args.path, early)
        want_html = not args.no_html and bool(args.html or not args.json or args.open)
        with progress("analysing"):
            # the page's views (timeline, flame graphs, memory curves) only when a page is written
            payload = build_payload(subject, views=want_html)
        html_path: Path | None = None
        if want_html:
            from torchscope.render.html import write_html  # not for --json alone

            html_path = Path(args.html) if args.html else Path(f"{payload['title']}.torchscope.html")
            with progress("writing the dashboard"):
                write_html(payload, html_path)
        if args.json:
            print_json(machine_report(payload, html_path))
        else:
            from torchscope.render.console import print_summary, terminal

            console = terminal(sys.stdout)

            print_summary(payload, console, top=args.top)
            if html_path is not None:
                console.print(f"dashboard: {html_path}")
        if args.open and html_path is not None:
            import webbrowser  # only with --open: ~3 ms of imports otherwise

            webbrowser.open(html_path.resolve().as_uri())
        return EXIT_OK


def machine_report(payload: dict, html_path: Path | None) -> dict:  # type: ignore[type-arg]
    """What ``--json`` prints: ``build_report``'s object at the top level (keys named after the
    analyses, defined in ``analysis.keys``; names uncut), plus the warnings and where the
    dashboard went."""
    from torchscope.render.payload import full_report

    report = dict(full_report(payload) or {})
    report[K.WARNINGS] = [
        *report.get(K.WARNINGS, []),
        *(w for w in payload.get("warnings", []) if w not in report.get(K.WARNINGS, [])),
    ]
    if html_path is not None:
        report["html"] = str(html_path)
    return report


COMMAND = ReportCommand()
