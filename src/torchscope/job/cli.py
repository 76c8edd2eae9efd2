"""``torchscope report DIR`` for a directory of several runs, ranks or cycles (the job path)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from torchscope.cli.base import EXIT_OK
from torchscope.cli.common import print_json, stderr_is_tty
from torchscope.job.discover import Discovery, discover
from torchscope.writes import hidden


def job_directory(path: str) -> Discovery | None:
    """The discovery of ``path`` when it is a directory holding more than one trace, else None
    (a file, our store, or a folder with one trace take the single-trace path)."""
    from torchscope.trace.loader import is_store

    p = Path(path).expanduser()
    if not p.is_dir() or is_store(p) or any(not hidden(d.name) and d.is_dir() and is_store(d) for d in p.iterdir()):
        return None
    found = discover(p)
    return found if found.is_job else None


def report_job(args: argparse.Namespace, found: Discovery) -> int:
    from torchscope.job.pipeline import analyse_job
    from torchscope.job.render import job_lines, job_payload, view_dir_for
    from torchscope.render.html import write_html

    root = Path(args.path).expanduser()
    name = root.resolve().name or "job"
    html_path: Path | None = None
    if not args.no_html and (args.html or not args.json or args.open):
        html_path = Path(args.html) if args.html else Path(f"{name}.torchscope.html")
    views = view_dir_for(html_path) if html_path is not None and args.rank_views else None
    job = analyse_job(root, engine=args.engine, progress=stderr_is_tty(), view_dir=views, found=found)
    if html_path is not None:
        write_html(job_payload(job, name), html_path)
        job["html"] = str(html_path)
    if args.json:
        print_json(job)
    else:
        detail = single_run_detail(job)
        for line in job_lines(job, dashboard=str(html_path) if html_path else None, detail=detail):
            sys.stdout.write(line + "\n")
    if args.open and html_path is not None:
        import webbrowser  # only with --open: ~3 ms of imports otherwise

        webbrowser.open(html_path.resolve().as_uri())
    return EXIT_OK


def median_cycle_file(job: dict[str, Any]) -> tuple[int, str] | None:
    """For a job of one run of one rank: its median cycle (by median step) and that cycle's file,
    of the cycles the run's medians are over (not one that holds only the profile's exit)."""
    runs = job["runs"]
    if len(runs) != 1 or runs[0]["ranks"] != 1 or not runs[0]["per_rank"]:
        return None
    whole = [r for r in runs[0]["cycle_table"] if not r.get("left_out")]
    rows = sorted(whole, key=lambda r: (r["median_step_ns"], r["cycle"]))
    if not rows or not rows[0].get("file"):
        return None
    pick = rows[(len(rows) - 1) // 2]
    return pick["cycle"], pick["file"]


def single_run_detail(job: dict[str, Any]) -> list[str]:
    """A one-rank log dir loses nothing to the job view: its median cycle's single-trace summary
    (categories as ``report FILE`` chooses them, top ops, memory), read once after the job's
    reduce (one trace in memory, as in the map step)."""
    from io import StringIO

    from rich.console import Console

    from torchscope.analysis.report import build_report
    from torchscope.errors import TraceError
    from torchscope.render.console import PIPE_WIDTH, print_report
    from torchscope.trace.reader import read_chrome

    picked = median_cycle_file(job)
    if picked is None:
        return []
    cycle, file = picked
    try:
        report = build_report(read_chrome(Path(file)))
    except TraceError as exc:
        return [f"(the median cycle's detail could not be read: {exc})"]
    buf = StringIO()
    print_report(report, Console(file=buf, width=PIPE_WIDTH), name=f"median cycle {cycle}: {file}", top=5)
    return buf.getvalue().rstrip("\n").split("\n")
