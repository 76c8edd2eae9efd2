"""The report every integration ends with: read the traces a framework's run wrote, write the
dashboard beside them (whole or not at all), and give the terminal summary as text, which each
framework then prints through its own logging."""

from __future__ import annotations

import atexit
import io
from collections.abc import Callable
from pathlib import Path
from typing import Any


def start_profiler(
    traces_dir: Path, worker: str, schedule: dict[str, int], options: dict[str, Any], warn: Callable[[str], None]
) -> tuple[Any, NeverRaising] | None:
    """A started ``torchscope.profile`` on ``schedule`` writing each cycle to
    ``traces_dir/WORKER.<time>.pt.trace.json`` (``tensorboard_trace_handler``'s layout), with
    its guarded handler; None, after ``warn`` said why, when ``traces_dir`` cannot be made."""
    from torchscope.capture.handlers import tensorboard_trace_handler
    from torchscope.capture.profiler import profile
    from torchscope.capture.schedule import schedule as make_schedule

    try:
        traces_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        in_the_way = next((d for d in (traces_dir, *traces_dir.parents) if d.exists() and not d.is_dir()), None)
        why = f"{in_the_way} is a file" if in_the_way is not None else exc.strerror or str(exc)
        warn(f"torchscope: cannot write traces to {traces_dir} ({why}); profiling is off")
        return None
    guard = NeverRaising(tensorboard_trace_handler(str(traces_dir), worker_name=worker), warn)
    prof = profile(schedule=make_schedule(**schedule), on_trace_ready=guard, **options)
    prof.start()
    return prof, guard


class NeverRaising:
    """An ``on_trace_ready`` handler whose errors are said through ``warn`` (each different one
    once) instead of raised: a profiler must never end the training it watches, and torch's
    ``profile`` raises a handler's error from the framework's ``step()`` call (a directory
    that was a file, a full disk: the training died at its first recorded cycle)."""

    def __init__(self, handler: Callable[[Any], None], warn: Callable[[str], None]) -> None:
        self.handler, self.warn = handler, warn
        self.failures: list[str] = []

    def __call__(self, prof: Any) -> None:
        try:
            self.handler(prof)
        except Exception as exc:  # noqa: BLE001 - the training goes on; the loss is said
            why = f"{type(exc).__name__}: {exc}"
            if why not in self.failures:
                self.failures.append(why)
                self.warn(f"torchscope: a profiled cycle could not be written ({why}); training goes on")


def written_since(traces_dir: Path, pattern: str, started: float) -> tuple[list[Path], int]:
    """The traces matching ``pattern`` that this run wrote (modified since ``started``, a
    ``time.time()``), and how many older ones the directory holds: a run again into the same
    directory (the habit with a fixed ``output_dir``) mixed the earlier runs' cycles into its
    report and its logged step time."""
    every = sorted(traces_dir.glob(pattern))
    # a file's time is the kernel's coarse clock, at most a tick (~4 ms) behind ``time.time()``;
    # a cycle is written long after its run began, and an earlier run's before it
    mine = [f for f in every if f.stat().st_mtime >= started - 0.01]
    return mine, len(every) - len(mine)


def older_note(traces_dir: Path, older: int) -> str:
    """What a report of this run's traces says of the earlier runs' in the same directory."""
    return (
        f"torchscope: left out {older} older trace{'s' if older != 1 else ''} in {traces_dir} "
        "(written before this run started: an earlier run's); `torchscope report` of the "
        "directory reads them all"
    )


def at_interpreter_exit(call: Any) -> None:
    """Run ``call`` as the interpreter exits, while thread pools still take work: the report
    reads the trace and builds its sections on threads, and an ``atexit`` callback runs after
    ``concurrent.futures`` stopped taking any ("cannot schedule new futures after interpreter
    shutdown": the report at exit was empty). ``threading._register_atexit`` runs its callbacks
    last registered first, before those of ``atexit``; concurrent.futures registers its own on
    import, so it is imported first."""
    import concurrent.futures.thread  # noqa: F401 - its exit hook, registered before ours
    import threading

    register = getattr(threading, "_register_atexit", None)
    (register or atexit.register)(call)


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


def report_traces(
    traces: Path, html: Path, title: str, files: list[Path] | None = None
) -> tuple[dict[str, Any], Path]:
    """Read ``traces`` (a file or a directory of cycles and ranks; ``files``: only these of the
    directory), build the report and write ``html``; returns the payload and the page's path.

    A directory of several ranks or cycles is read as ``torchscope report DIR`` reads it, as a
    job: rank by rank, reduced to one summary, so a long run's many cycles or a large job never
    sit in the training process's memory at once. The ranks are read here, one after another
    (``local:1``): worker processes started with ``spawn`` would import the training script
    again as their ``__main__``, and a script without a main guard would train again in each.
    """
    from torchscope.job.cli import job_directory
    from torchscope.job.discover import discover
    from torchscope.render.html import write_html

    if files is not None and len(files) == 1:
        traces, files = files[0], None
    found = job_directory(str(traces)) if files is None else discover(traces, files)
    if found is not None and found.is_job:
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
        meta = part.get(K.META) or {}
        if meta.get("only_exit") or meta.get("only_cut_step"):  # no whole step: ended or raised first
            continue
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
