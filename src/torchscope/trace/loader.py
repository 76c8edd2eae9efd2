"""``torchscope.load``: one entry point for every trace a user has.

A directory's files and ranks are found as ``job.discover`` finds them (the file list, rank
names); ``torchscope report`` on a directory of several traces uses ``torchscope.job`` instead
of a ``TraceSet``, so that no step holds every rank at once.

A file is read as Kineto/Chrome JSON (``.json`` or ``.json.gz``); a directory is either our
own store (``meta.json`` + Parquet tables, see ``trace.store``) or a folder of traces (a
TensorBoard log dir of ``*.pt.trace.json[.gz]`` files, or per-rank files), which loads as a
``TraceSet`` keyed by rank or worker name with the files read in parallel.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from torchscope.errors import TraceError
from torchscope.trace.files import Prefetch, why_missing
from torchscope.trace.model import Trace, TraceSet
from torchscope.trace.progress import LoadProgress
from torchscope.trace.reader import read_chrome
from torchscope.writes import hidden

# above this much JSON in all, ranks are read in worker processes rather than threads
_PROCESS_THRESHOLD = 128 * 1024 * 1024


def load(
    path: str | Path, *, progress: bool | None = None, early: Prefetch | None = None
) -> Trace | TraceSet:
    """Open a trace file, our store directory, or a directory of traces (one per rank/worker).

    ``progress``: show a progress bar on stderr when loading takes more than a second
    (default: only when stderr is a terminal). ``early``: the file already being read
    (``torchscope.load`` starts that before importing this module).
    """
    p = Path(path).expanduser()
    missing = why_missing(p)
    if missing is not None:
        raise TraceError(str(p), missing)
    if p.is_dir():
        if is_store(p):
            from torchscope.trace.store import load_trace

            return load_trace(p)
        return load_dir(p, progress=progress)
    with LoadProgress(p.name, enabled=progress) as bar:
        return read_chrome(p, on_phase=bar.phase, early=early, on_piece=bar.piece)


def is_store(path: Path) -> bool:
    """Whether ``path`` is a directory written by ``Trace.save``."""
    return (path / "meta.json").is_file() and (path / "events.parquet").is_file()


_TB = re.compile(r"^(?P<worker>.+?)\.\d+\.pt\.trace\.json(\.gz)?$")


def _key(path: Path, trace: Trace, root: Path) -> str:
    from torchscope.job.discover import rank_in_name

    if trace.meta.rank is not None:
        return f"rank{trace.meta.rank}"
    rank = rank_in_name(path, root)
    if rank is not None:
        return f"rank{rank}"
    m = _TB.match(path.name)
    if m:
        return m.group("worker")
    return _cycle_key(path, root)


def _cycle_key(path: Path, root: Path) -> str:
    """A cycle's name: its file's path under ``root`` without the trace suffix (``step_40``)."""
    rel = path.relative_to(root).as_posix()
    for suffix in (".pt.trace.json.gz", ".pt.trace.json", ".json.gz", ".json"):
        if rel.endswith(suffix):
            return rel[: -len(suffix)]
    return rel


def load_dir(
    directory: Path, read: Callable[[Path], Trace] = read_chrome, *, progress: bool | None = None
) -> TraceSet:
    """Every trace under ``directory``, read in parallel, keyed by rank or worker.

    One process's cycles (one rank, several files: ``torchscope run``, a handler's repeats) are
    a TraceSet of cycles, keyed by file. Ranks that each wrote several cycles give their last
    one (as the TensorBoard plugin opened the latest), and ``skipped`` says which were not
    read: a flat set of cycles of several ranks would be read as that many ranks (a rank
    doubled in the distributed view, a cycle's file named as another's).
    ``torchscope report DIR`` reads every cycle of every rank (``torchscope.job``).
    """
    # imported here: a single file's load (its critical path is its imports) does not need it
    from torchscope.job.discover import discover, mixed_world_sizes, natural

    found = discover(directory)
    not_read = list(found.skipped)
    if len(found.runs) > 1:
        names = ", ".join(run.name for run in found.runs[:5]) + (", ..." if len(found.runs) > 5 else "")
        not_read.append(
            f"holds {len(found.runs)} runs ({names}): read side by side as one set, not compared as"
            " runs (torchscope report DIR keeps them apart)"
        )
    not_read += mixed_world_sizes(found)
    groups = found.rank_files
    cycles = len(groups) == 1 and groups[0].cycles > 1
    files = [f for rf in groups for f in (rf.files if cycles else rf.files[-1:])]
    for rf in groups if not cycles else ():
        if rf.cycles > 1:
            rel = rf.files[-1].relative_to(directory).as_posix()
            not_read.append(
                f"rank {rf.rank} of {rf.run}: read its last cycle ({rel}), not the {rf.cycles - 1} before it"
                " (torchscope report DIR reads every cycle)"
            )
    stores = sorted(d for d in directory.iterdir() if not hidden(d.name) and d.is_dir() and is_store(d))
    if not files and not stores:
        why = (
            "no readable trace files in this directory"
            if not_read
            else "no trace files (*.json, *.json.gz) or saved traces in this directory"
        )
        raise TraceError(str(directory), "; ".join([why, *not_read]))
    traces: list[tuple[Path, Trace]] = []
    skipped: list[tuple[Path, TraceError]] = []
    if files:
        # gzip'd traces inflate about 6x: estimate the JSON to decide how to parallelize
        total = sum(f.stat().st_size * (6 if f.name.endswith(".gz") else 1) for f in files)
        workers = min(len(files), os.cpu_count() or 1)
        in_processes = workers > 1 and total > _PROCESS_THRESHOLD
        with (
            ThreadPoolExecutor(max(workers, 1)) as pool,
            tempfile.TemporaryDirectory(prefix="torchscope-") as scratch,
            LoadProgress(directory.resolve().name or str(directory), total=len(files), enabled=progress) as bar,
        ):
            if in_processes:
                futures = [
                    pool.submit(_read_in_child, f, Path(scratch) / str(i)) for i, f in enumerate(files)
                ]
            else:
                futures = [pool.submit(read, f) for f in files]
            # counted when read, in any order: counted below, in file order, the small ranks
            # read while the first, large one was still read showed "0/4" until it was done
            name_of = {fut: f.name for f, fut in zip(files, futures, strict=True)}
            for fut in futures:
                fut.add_done_callback(lambda done: bar.advance(name_of[done]))
            for f, fut in zip(files, futures, strict=True):
                try:
                    traces.append((f, fut.result()))
                except TraceError as exc:  # one bad file must not lose the others: said, not silent
                    skipped.append((f, exc))
    if stores:
        from torchscope.trace.store import load_trace

        traces.extend((d, load_trace(d)) for d in stores)
    if not traces:  # nothing read: the first file's own error says why
        if not skipped:
            raise TraceError(str(directory), "no trace among its JSON files; " + "; ".join(not_read))
        raise skipped[0][1]
    keyed: dict[str, Trace] = {}
    for path, trace in traces:
        key = _cycle_key(path, directory) if cycles else _key(path, trace, directory)
        if key in keyed:
            key = path.relative_to(directory).as_posix()
        keyed[key] = trace
    return TraceSet(
        traces=dict(sorted(keyed.items(), key=lambda kv: natural(kv[0]))),
        source=str(directory),
        members="cycles" if cycles else "ranks",
        skipped=(
            *not_read,
            *(f"skipped {f.relative_to(directory)}: {exc.problem}" for f, exc in skipped),
        ),
    )


def _read_in_child(path: Path, scratch: Path) -> Trace:
    """``read_chrome`` in a fresh interpreter (``python -m``), handed back through our store."""
    from torchscope.trace.store import load_trace

    done = subprocess.run(
        [sys.executable, "-m", "torchscope.trace._worker", str(path), str(scratch)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode == 2:
        raise TraceError(str(path), done.stderr.strip().split(": ", 1)[-1] or "unreadable trace")
    if done.returncode != 0:  # the child could not even start (broken environment): read here
        return read_chrome(path)
    return load_trace(scratch)
