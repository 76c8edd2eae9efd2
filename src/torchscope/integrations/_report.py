"""The report every integration ends with: read the traces a framework's run wrote, write the
dashboard beside them (whole or not at all), and give the terminal summary as text, which each
framework then prints through its own logging."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any


def start_profiler(traces_dir: Path, worker: str, schedule: dict[str, int], options: dict[str, Any]) -> Any:
    """A started ``torchscope.profile`` on ``schedule`` writing each cycle to
    ``traces_dir/WORKER.<time>.pt.trace.json`` (``tensorboard_trace_handler``'s layout)."""
    from torchscope.capture.handlers import tensorboard_trace_handler
    from torchscope.capture.profiler import profile
    from torchscope.capture.schedule import schedule as make_schedule

    prof = profile(
        schedule=make_schedule(**schedule),
        on_trace_ready=tensorboard_trace_handler(str(traces_dir), worker_name=worker),
        **options,
    )
    prof.start()
    return prof


def summary_text(payload: dict[str, Any], width: int = 120) -> str:
    """``torchscope report``'s terminal summary of ``payload``, as plain text (a job's summary
    for a directory of several ranks or cycles, as ``torchscope report DIR`` prints it)."""
    from rich.console import Console

    from torchscope.render.console import print_summary

    job = _job_of(payload)
    if job is not None:
        from torchscope.job.cli import single_run_detail
        from torchscope.job.render import job_lines

        return "".join(line + "\n" for line in job_lines(job, detail=single_run_detail(job)))

    buffer = io.StringIO()
    print_summary(payload, Console(file=buffer, width=width, force_terminal=False, color_system=None))
    return buffer.getvalue()


def report_traces(traces: Path, html: Path, title: str) -> tuple[dict[str, Any], Path]:
    """Read ``traces`` (a file or a directory of cycles and ranks), build the report and write
    ``html``; returns the payload and the page's path.

    A directory of several ranks or cycles is read as ``torchscope report DIR`` reads it, as a
    job: rank by rank, reduced to one summary, so a long run's many cycles or a large job never
    sit in the training process's memory at once. The ranks are read here, one after another
    (``local:1``): worker processes started with ``spawn`` would import the training script
    again as their ``__main__``, and a script without a main guard would train again in each.
    """
    from torchscope.job.cli import job_directory
    from torchscope.render.html import write_html

    found = job_directory(str(traces))
    if found is not None:
        from torchscope.job.pipeline import analyse_job
        from torchscope.job.render import job_payload, view_dir_for

        # one rank's cycles (a single-device run with repeat > 1): each cycle's full dashboard is
        # written beside the job's page and linked from it, as `report DIR --rank-views` does;
        # with many ranks the job page alone stays small
        views = view_dir_for(html) if len(found.rank_files) == 1 else None
        job = analyse_job(traces, engine="local:1", progress=False, found=found, view_dir=views)
        payload = job_payload(job, title)
    else:
        from torchscope.render.payload import build_payload
        from torchscope.trace.loader import load

        payload = build_payload(load(traces), title=title)
    write_html(payload, html)
    return payload, html


def _job_of(payload: dict[str, Any]) -> dict[str, Any] | None:
    report = payload.get("report")
    return report if isinstance(report, dict) and report.get("kind") == "job" else None


def headline(payload: dict[str, Any]) -> dict[str, Any]:
    """The numbers a training log shows: mean step time (ms), events and the top finding, read
    from the report (one trace, or each rank's report of a set) as the terminal and page show them."""
    from torchscope.analysis import keys as K

    job = _job_of(payload)
    if job is not None:
        return _job_headline(job)
    report = payload.get("report") or {}
    parts = list((report.get(K.RANKS) or {}).values()) if report.get(K.KIND) == "traceset" else [report]
    step_us = []
    for part in parts:
        total = (part.get(K.BREAKDOWN_US) or {}).get("Total") or (part.get(K.HOST_BREAKDOWN_US) or {}).get(
            "Total"
        )
        if total:
            step_us.append(float(total))
    recs = report.get(K.RECOMMENDATIONS) or []
    return {
        "step_time_ms": round(sum(step_us) / len(step_us) / 1e3, 3) if step_us else None,
        "events": sum(int((part.get(K.META) or {}).get("events") or 0) for part in parts),
        "top_finding": recs[0].get("rule") if recs else None,
        "top_finding_message": recs[0].get("message") if recs else None,
    }


def _job_headline(job: dict[str, Any]) -> dict[str, Any]:
    """The headline of a job: its (first) run's median step over ranks and its top finding."""
    from torchscope.analysis import keys as K

    runs = job.get(K.JOB_RUNS) or []
    run = runs[0] if runs else {}
    median = (run.get(K.JOB_STEP_NS) or {}).get("median")
    recs = run.get(K.RECOMMENDATIONS) or []
    return {
        "step_time_ms": round(float(median) / 1e6, 3) if median else None,
        "events": sum(int(r.get("events") or 0) for r in run.get(K.JOB_PER_RANK) or []),
        "top_finding": recs[0].get("rule") if recs else None,
        "top_finding_message": recs[0].get("message") if recs else None,
    }
