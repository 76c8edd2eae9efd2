"""Engines that run the map step: a local process pool (default) or Ray tasks (``torchscope[ray]``).

Both run the same function (``summarize.summarize_rank``) on the same plain-data tasks and hand
the results back in task order, so the reduce step and every output are identical whichever
engine ran. No scheduler of our own: the process pool and Ray decide where and when.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from typing import Any, NamedTuple

from torchscope.errors import TraceError

Task = dict[str, Any]


class Engine(NamedTuple):
    """A parsed ``--engine``: ``local`` (``workers`` None: one per core, or in-process for a small
    job), ``local:N``, ``ray`` (``address`` None: a local Ray) or ``ray://HOST:PORT``."""

    kind: str
    workers: int | None = None
    address: str | None = None


def parse_engine(text: str) -> Engine:
    """``--engine``'s value checked before any work, whatever the input (a single file ignores
    it, but a typo should not wait for the day the input is a folder). ValueError says why;
    the caller names the value."""
    if text == "local":
        return Engine("local")
    if text.startswith("local:"):
        n = text.split(":", 1)[1]
        if not n.isdigit() or int(n) < 1:  # local:0 once ran with the default pool
            raise ValueError("local:N takes a number of workers of at least 1")
        return Engine("local", workers=int(n))
    if text == "ray":
        return Engine("ray")
    if text.startswith("ray://") and len(text) > len("ray://"):
        return Engine("ray", address=text)
    raise ValueError("unknown engine: use local, local:N, ray or ray://HOST:PORT")


def within_cores(engine: str) -> tuple[str, str | None]:
    """``engine`` with ``local:N`` capped at this machine's cores, and a warning saying so.

    Each worker holds one rank's Trace, and the work is all CPU: more workers than cores only
    multiplies the memory (a new user's ``local:64`` on 2 cores passed 10 GB within 27 s and
    was slower than the default). ValueError as ``parse_engine``.
    """
    chosen = parse_engine(engine)
    cores = default_workers()
    if chosen.kind != "local" or chosen.workers is None or chosen.workers <= cores:
        return engine, None
    return f"local:{cores}", (
        f"--engine {engine}: ran {cores} worker processes, one per core of this machine"
        f" (each holds one rank's trace; more would only take more memory)"
    )


def default_workers() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


# Below this much trace on disk in all, a job runs here, one task after the other, unless the
# user asked for workers (``local:N``): a spawned worker imports Polars and NumPy again (~0.3 s
# of CPU each), which on a small job costs more than the work (``multirank/``, 2 ranks of
# 120 KB: 0.46 s here against 0.77 s in a pool of 2, 2 cores).
SMALL_JOB_BYTES = 8 * 1024 * 1024


def job_bytes(tasks: list[Task]) -> int:
    """The size on disk of every task's files (a file gone since discovery counts 0)."""
    total = 0
    for t in tasks:
        for f in t["files"]:
            with contextlib.suppress(OSError):
                total += os.stat(f).st_size
    return total


def run_local(
    tasks: list[Task], workers: int | None = None, on_done: Callable[[Task], None] | None = None
) -> list[dict[str, Any]]:
    """Each task in a worker process (one per core by default); results in task order.

    Processes are started with ``spawn``: a forked child of a process that runs Polars' thread
    pool can deadlock. One task alone, or a small job when no number of workers was asked for
    (``SMALL_JOB_BYTES``), runs here without a pool: one task at a time, so memory stays that
    of one rank's cycle either way.
    """
    n = min(workers or default_workers(), len(tasks))
    if workers is None and job_bytes(tasks) <= SMALL_JOB_BYTES:
        n = 1
    from torchscope.job.summarize import summarize_rank  # Polars: not at the CLI's parse time

    if n <= 1 or len(tasks) <= 1:
        out = []
        for t in tasks:
            out.append(summarize_rank(t))
            if on_done:
                on_done(t)
        return out
    # here, not at the top: every ``report`` checks ``--engine`` (``parse_engine``) before its
    # read, and a single file's report never starts a pool (~5 ms of imports)
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    results: dict[int, dict[str, Any]] = {}
    with ProcessPoolExecutor(n, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = {pool.submit(summarize_rank, t): i for i, t in enumerate(tasks)}
        for fut in as_completed(futures):
            i = futures[fut]
            results[i] = fut.result()
            if on_done:
                on_done(tasks[i])
    return [results[i] for i in range(len(tasks))]


def run_ray(
    tasks: list[Task], address: str | None = None, on_done: Callable[[Task], None] | None = None
) -> list[dict[str, Any]]:
    """Each task as a Ray task (``address``: ``ray://HOST:PORT``, or None for a local Ray).

    The files must be readable where Ray runs the task (shared storage). Ray is started here when
    no instance is running and this process has not connected yet.
    """
    try:
        import ray
    except ImportError as exc:
        raise TraceError("--engine ray", "needs Ray: pip install 'torchscope[ray]'") from exc
    from torchscope.job.summarize import summarize_rank

    if not ray.is_initialized():
        ray.init(address=address, ignore_reinit_error=True, log_to_driver=False)
    remote = ray.remote(summarize_rank)
    pending = {remote.remote(t): i for i, t in enumerate(tasks)}
    results: dict[int, dict[str, Any]] = {}
    while pending:
        done, _ = ray.wait(list(pending), num_returns=1)
        for ref in done:
            i = pending.pop(ref)
            results[i] = ray.get(ref)
            if on_done:
                on_done(tasks[i])
    return [results[i] for i in range(len(tasks))]


def run_tasks(
    tasks: list[Task], engine: str = "local", on_done: Callable[[Task], None] | None = None
) -> list[dict[str, Any]]:
    """``engine``: ``local``, ``local:N`` (N worker processes), ``ray`` or ``ray://HOST:PORT``."""
    try:
        chosen = parse_engine(engine)
    except ValueError as exc:
        raise TraceError(f"--engine {engine}", str(exc)) from None
    if chosen.kind == "local":
        return run_local(tasks, chosen.workers, on_done)
    return run_ray(tasks, chosen.address, on_done)
