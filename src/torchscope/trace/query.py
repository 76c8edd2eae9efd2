"""SQL over traces through DuckDB (the optional ``torchscope[sql]`` extra).

Polars DataFrames already answer most questions; SQL is for users who think in it and for
many ranks at once. A Trace's tables are handed to DuckDB zero-copy (Arrow); a TraceSet's
are stacked with a ``trace`` column naming the rank; a directory of saved traces is queried
straight from its Parquet files without loading anything first.

Tables: ``events``, ``memory``, ``flows``, ``threads``; views: ``ops``, ``annotations``,
``python_functions``, ``runtime``, ``kernels``, ``memcpy``, ``memset``, ``device_events``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl

from torchscope.errors import TraceError, UsageError
from torchscope.trace.model import Trace, TraceSet
from torchscope.writes import hidden

TABLES = ("events", "memory", "flows", "threads")
VIEWS: dict[str, tuple[str, ...]] = {
    "ops": ("cpu_op",),
    "annotations": ("user_annotation",),
    "python_functions": ("python_function",),
    "runtime": ("runtime",),
    "kernels": ("kernel",),
    "memcpy": ("memcpy",),
    "memset": ("memset",),
    "device_events": ("kernel", "memcpy", "memset"),
}


def _duckdb() -> Any:
    """DuckDB, and the pyarrow it reads Polars frames through (a query without it was a
    ModuleNotFoundError traceback from inside Polars)."""
    try:
        import duckdb
        import pyarrow  # noqa: F401
    except ImportError as exc:
        raise TraceError("", f"SQL needs DuckDB and pyarrow ({exc.name} is missing): pip install 'torchscope[sql]'") from None
    return duckdb


def _lit(path: Path) -> str:
    return "'" + path.as_posix().replace("'", "''") + "'"


def connect(source: Trace | TraceSet | str | Path) -> Any:
    """A DuckDB connection with the trace tables and views of ``source`` defined."""
    duckdb = _duckdb()
    con = duckdb.connect()
    if isinstance(source, (str, Path)):
        path = Path(source)
        from torchscope.trace.loader import is_store, load

        stores = (
            sorted(d for d in path.iterdir() if not hidden(d.name) and d.is_dir() and is_store(d))
            if path.is_dir()
            else []
        )
        if path.is_dir() and is_store(path):
            for name in TABLES:
                con.execute(
                    f"CREATE VIEW {name} AS SELECT * FROM read_parquet({_lit(path / f'{name}.parquet')})"
                )
        elif stores:  # a folder of saved ranks: one glob per table, the folder name as `trace`
            for name in TABLES:
                files = "[" + ", ".join(_lit(d / f"{name}.parquet") for d in stores) + "]"
                con.execute(
                    f"CREATE VIEW {name} AS SELECT parse_dirpath(filename).split('/')[-1] AS trace,"
                    f" * EXCLUDE (filename) FROM read_parquet({files}, filename = true, union_by_name = true)"
                )
        else:
            return connect(load(path))
    elif isinstance(source, Trace):
        for name in TABLES:
            con.register(name, getattr(source, name).to_arrow())
    elif isinstance(source, TraceSet):
        for name in TABLES:
            frames = [getattr(t, name).with_columns(pl.lit(k).alias("trace")) for k, t in source.items()]
            stacked = pl.concat(frames, how="vertical_relaxed") if frames else pl.DataFrame()
            con.register(
                name, stacked.select(["trace", *[c for c in stacked.columns if c != "trace"]]).to_arrow()
            )
    else:
        raise UsageError(f"cannot query a {type(source).__name__}")
    for view, kinds in VIEWS.items():
        listed = ", ".join(f"'{k}'" for k in kinds)
        con.execute(f"CREATE VIEW {view} AS SELECT * FROM events WHERE CAST(kind AS VARCHAR) IN ({listed})")
    return con


def sql(query: str, source: Trace | TraceSet | str | Path) -> pl.DataFrame:
    """Run ``query`` over ``source`` and return the result as a Polars DataFrame."""
    con = connect(source)
    try:
        rel = con.sql(query)
        # DuckDB's own conversion: an empty result keeps its columns (``from_arrow`` of its
        # batch reader raised "Must pass schema, or at least one RecordBatch")
        return pl.DataFrame() if rel is None else rel.pl()
    except Exception as exc:  # duckdb's error types live in the optional dependency
        if "duckdb" in type(exc).__module__:
            raise TraceError("sql", str(exc).splitlines()[0]) from None
        raise
    finally:
        con.close()
