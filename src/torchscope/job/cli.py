"""``torchscope report DIR`` for a directory of several runs, ranks or cycles (the job path)."""

from __future__ import annotations

import argparse
import sys
import webbrowser
from pathlib import Path

from torchscope.cli.base import EXIT_OK
from torchscope.cli.common import print_json, stderr_is_tty
from torchscope.job.discover import Discovery, discover


def job_directory(path: str) -> Discovery | None:
    """The discovery of ``path`` when it is a directory holding more than one trace, else None
    (a file, our store, or a folder with one trace take the single-trace path)."""
    from torchscope.trace.loader import is_store

    p = Path(path).expanduser()
    if not p.is_dir() or is_store(p) or any(d.is_dir() and is_store(d) for d in p.iterdir()):
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
        for line in job_lines(job, dashboard=str(html_path) if html_path else None):
            sys.stdout.write(line + "\n")
    if args.open and html_path is not None:
        webbrowser.open(html_path.resolve().as_uri())
    return EXIT_OK
