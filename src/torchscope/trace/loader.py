"""``torchscope.load``: one entry point for every trace a user has.

A file is read as Kineto/Chrome JSON (``.json`` or ``.json.gz``); a directory is either our
own store (``meta.json`` + Parquet tables, see ``trace.store``) or a folder of traces (a
TensorBoard log dir of ``*.pt.trace.json[.gz]`` files, or per-rank files), which loads as a
``TraceSet`` keyed by rank or worker name with the files read in parallel.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from multiprocessing import get_context
from pathlib import Path

from torchscope.errors import TraceError
from torchscope.trace.model import Trace, TraceSet
from torchscope.trace.progress import LoadProgress
from torchscope.trace.reader import read_chrome

TRACE_SUFFIXES = (".json", ".json.gz")
# above this many bytes in all, ranks are read in worker processes rather than threads
_PROCESS_THRESHOLD = 48 * 1024 * 1024


def load(path: str | Path, *, progress: bool | None = None) -> Trace | TraceSet:
    """Open a trace file, our store directory, or a directory of traces (one per rank/worker).

    ``progress``: show a progress bar on stderr when loading takes more than a second
    (default: only when stderr is a terminal).
    """
    p = Path(path).expanduser()
    if not p.exists():
        raise TraceError(str(p), "no such file or directory")
    if p.is_dir():
        if is_store(p):
            from torchscope.trace.store import load_trace

            return load_trace(p)
        return load_dir(p, progress=progress)
    with LoadProgress(p.name, enabled=progress) as bar:
        return read_chrome(p, on_phase=bar.phase)


def is_store(path: Path) -> bool:
    """Whether ``path`` is a directory written by ``Trace.save``."""
    return (path / "meta.json").is_file() and (path / "events.parquet").is_file()


def trace_files(directory: Path) -> list[Path]:
    """The trace files under a directory: ``*.pt.trace.json[.gz]`` if any, else any ``*.json[.gz]``."""
    found = sorted(
        f
        for f in directory.rglob("*")
        if f.name.endswith(TRACE_SUFFIXES) and f.is_file() and not is_store(f.parent)
    )
    tb = [f for f in found if ".pt.trace." in f.name]
    return tb or found


_RANK = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)
_TB = re.compile(r"^(?P<worker>.+?)\.\d+\.pt\.trace\.json(\.gz)?$")


def _key(path: Path, trace: Trace, root: Path) -> str:
    if trace.meta.rank is not None:
        return f"rank{trace.meta.rank}"
    m = _RANK.search(path.name)
    if m:
        return f"rank{int(m.group(1))}"
    m = _TB.match(path.name)
    if m:
        return m.group("worker")
    rel = path.relative_to(root).as_posix()
    for suffix in (".pt.trace.json.gz", ".pt.trace.json", ".json.gz", ".json"):
        if rel.endswith(suffix):
            return rel[: -len(suffix)]
    return rel


def load_dir(
    directory: Path, read: Callable[[Path], Trace] = read_chrome, *, progress: bool | None = None
) -> TraceSet:
    """Every trace under ``directory``, read in parallel, keyed by rank or worker."""
    files = trace_files(directory)
    stores = sorted(d for d in directory.iterdir() if d.is_dir() and is_store(d))
    if not files and not stores:
        raise TraceError(
            str(directory), "no trace files (*.json, *.json.gz) or saved traces in this directory"
        )
    traces: list[tuple[Path, Trace]] = []
    if files:
        total = sum(f.stat().st_size for f in files)
        workers = min(len(files), os.cpu_count() or 1)
        pool: Executor
        if workers > 1 and total > _PROCESS_THRESHOLD:
            pool = ProcessPoolExecutor(workers, mp_context=get_context("spawn"))
        else:
            pool = ThreadPoolExecutor(max(workers, 1))
        with pool, LoadProgress(directory.name or str(directory), total=len(files), enabled=progress) as bar:
            futures = [pool.submit(read, f) for f in files]
            for f, fut in zip(files, futures, strict=True):
                traces.append((f, fut.result()))
                bar.advance(f.name)
    if stores:
        from torchscope.trace.store import load_trace

        traces.extend((d, load_trace(d)) for d in stores)
    keyed: dict[str, Trace] = {}
    for path, trace in traces:
        key = _key(path, trace, directory)
        if key in keyed:
            key = path.relative_to(directory).as_posix()
        keyed[key] = trace
    return TraceSet(traces=dict(sorted(keyed.items(), key=lambda kv: _natural(kv[0]))), source=str(directory))


def _natural(key: str) -> tuple[object, ...]:
    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", key))
