"""Our on-disk format: a directory of Parquet tables plus ``meta.json``.

Why Parquet: it is columnar like the Trace itself, so saving and loading are copies of
whole columns (no per-event parsing and no re-deriving of links), it keeps the exact dtypes
(integer nanoseconds, categoricals), and every other tool (DuckDB, pandas, Spark) reads it,
which makes a folder of saved ranks queryable with plain SQL
(``SELECT ... FROM 'runs/*/events.parquet'``).

Layout of ``trace.save(dir)``::

    dir/meta.json        TraceMeta as JSON, plus the store's format version
    dir/events.parquet   Trace.events (all derived columns included)
    dir/memory.parquet   Trace.memory
    dir/flows.parquet    Trace.flows
    dir/threads.parquet  Trace.threads
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import polars as pl

from torchscope.errors import TraceError
from torchscope.trace.model import Trace, TraceMeta
from torchscope.trace.schema import EVENTS_SCHEMA, FLOWS_SCHEMA, MEMORY_SCHEMA, THREADS_SCHEMA, conform
from torchscope.writes import write_atomically

FORMAT = "torchscope-trace"
VERSION = 1
TABLES: dict[str, dict[str, pl.DataType]] = {
    "events": EVENTS_SCHEMA,
    "memory": MEMORY_SCHEMA,
    "flows": FLOWS_SCHEMA,
    "threads": THREADS_SCHEMA,
}


def save_trace(trace: Trace, path: Path) -> Path:
    """Write ``trace`` to the directory ``path`` (created; existing tables are replaced), whole
    or not at all: the tables are written to a hidden directory beside it and moved in once all
    are written, ``meta.json`` last (``writes.write_atomically``; on a full disk, an older store
    is left as it was and a ``WriteError`` names ``path``)."""
    meta = {k: v for k, v in trace.meta.__dict__.items()}
    meta["device_properties"] = list(meta["device_properties"])
    meta["warnings"] = list(meta["warnings"])
    doc = json.dumps({"format": FORMAT, "version": VERSION, "meta": meta}, default=str, indent=1)

    def write(tmp: Path) -> None:
        tmp.mkdir()
        for name in TABLES:
            frame: pl.DataFrame = getattr(trace, name)
            frame.write_parquet(tmp / f"{name}.parquet", compression="lz4", statistics=False)
        (tmp / "meta.json").write_text(doc)  # a store without it is incomplete

    return write_atomically(path, write, marker="meta.json")


def load_trace(path: Path) -> Trace:
    """Read a directory written by ``save_trace``."""
    try:
        doc = json.loads((path / "meta.json").read_text())
    except (OSError, ValueError) as exc:
        raise TraceError(str(path), f"not a saved trace: cannot read meta.json ({exc})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise TraceError(str(path), "not a saved trace: meta.json is not torchscope's")
    if not isinstance(doc.get("version"), int) or doc["version"] > VERSION:
        raise TraceError(str(path), f"saved by a newer torchscope (format version {doc.get('version')})")

    def read(name: str) -> pl.DataFrame:
        file = path / f"{name}.parquet"
        if not file.exists():
            return pl.DataFrame(schema=TABLES[name])
        try:
            return conform(pl.read_parquet(file), TABLES[name])
        except (OSError, pl.exceptions.PolarsError) as exc:
            raise TraceError(str(file), f"unreadable table ({str(exc).splitlines()[0]})") from None

    with ThreadPoolExecutor(4) as pool:
        events, memory, flows, threads = pool.map(read, TABLES)
    return Trace(
        events=events, memory=memory, flows=flows, threads=threads, meta=_meta(doc.get("meta"), path)
    )


def _meta(raw: Any, path: Path) -> TraceMeta:
    if not isinstance(raw, dict):
        raise TraceError(str(path), "not a saved trace: meta.json has no 'meta'")
    fields = TraceMeta.__dataclass_fields__
    kwargs = {k: v for k, v in raw.items() if k in fields}
    kwargs["device_properties"] = tuple(kwargs.get("device_properties") or ())
    kwargs["warnings"] = tuple(kwargs.get("warnings") or ())
    try:
        return TraceMeta(**kwargs)
    except TypeError as exc:  # pragma: no cover - fields are checked above
        raise TraceError(str(path), f"meta.json does not describe a trace ({exc})") from None
