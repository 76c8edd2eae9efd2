"""The Trace: one immutable, columnar, torch-free record of a profiled run.

Everything a live session knows and everything a loaded file knows ends up here, and every
analysis and renderer takes a Trace and never asks where it came from. Tables are Polars
DataFrames with the schemas in ``trace.schema``; the named accessors (``ops``, ``kernels``,
...) are cheap filtered views a user can keep working with.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, overload

import polars as pl

from torchscope.trace.schema import (
    EVENTS_SCHEMA,
    FLOWS_SCHEMA,
    MEMORY_SCHEMA,
    THREADS_SCHEMA,
    empty,
    step_spans,
)


@dataclass(frozen=True)
class TraceMeta:
    """What we know about the run besides its events."""

    source: str = ""  # where it came from: a path, or "live" for a capture session
    schema_version: int | None = None
    rank: int | None = None
    world_size: int | None = None
    backend: str | None = None  # nccl, gloo, ...
    device_properties: tuple[dict[str, Any], ...] = ()
    base_time_ns: int | None = None
    torch_version: str | None = None
    profiler_settings: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)  # other top-level keys of the file
    warnings: tuple[str, ...] = ()  # what a best-effort read skipped or repaired, one line each

    @property
    def device_models(self) -> tuple[str, ...]:
        """The distinct device names ``deviceProperties`` lists, in order (none: a CPU trace)."""
        names = (str(p["name"]) for p in self.device_properties if isinstance(p, dict) and p.get("name"))
        return tuple(dict.fromkeys(names))


# a table given as the function that makes it from the trace's events (``Deferred``)
Later = Callable[[pl.DataFrame], pl.DataFrame]


class Deferred:
    """A Trace table that may be given as a function of the trace's events, made on first read.

    The reader hands over the flows this way: binding every flow endpoint to its event was ~5 %
    of a load (17 ms of diff_control's 0.33 s), and only the Chrome writer, the store and
    torch's event list read them; ``table`` and ``report`` never do. (Device work that lacks a
    correlation id needs its flows to find its launch: those are bound in the read.) The
    table is made once and kept; two threads reading it at once may both make it, equal.
    """

    def __init__(self, schema: dict[str, pl.DataType]) -> None:
        self.schema = schema

    def __set_name__(self, owner: type, name: str) -> None:
        self.slot = f"_{name}_table"

    @overload
    def __get__(self, trace: None, owner: type | None = None) -> Deferred: ...
    @overload
    def __get__(self, trace: object, owner: type | None = None) -> pl.DataFrame: ...
    def __get__(self, trace: object, owner: type | None = None) -> pl.DataFrame | Deferred:
        if trace is None:
            return self  # the dataclass field's default: ``__set__`` makes it an empty table
        value = trace.__dict__[self.slot]
        if not isinstance(value, pl.DataFrame):
            value = trace.__dict__[self.slot] = value(trace.events)  # type: ignore[attr-defined]
        return value

    def __set__(self, trace: object, value: pl.DataFrame | Later | Deferred) -> None:
        trace.__dict__[self.slot] = empty(self.schema) if value is self else value


@dataclass(frozen=True)
class Trace:
    """A profiled run as columnar tables; see ``trace.schema`` for every column."""

    events: pl.DataFrame = field(default_factory=lambda: empty(EVENTS_SCHEMA))
    memory: pl.DataFrame = field(default_factory=lambda: empty(MEMORY_SCHEMA))
    # a DataFrame, or (from the reader) the function that binds them: see ``Deferred``
    flows: Deferred = Deferred(FLOWS_SCHEMA)
    threads: pl.DataFrame = field(default_factory=lambda: empty(THREADS_SCHEMA))
    meta: TraceMeta = field(default_factory=TraceMeta)

    def __getstate__(self) -> dict[str, Any]:
        """Pickled with its flows made (a function of the read does not pickle)."""
        self.flows  # noqa: B018 - reading makes the table
        return dict(self.__dict__)

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    # -- views a user guesses -------------------------------------------------------------
    def of_kind(self, *kinds: str) -> pl.DataFrame:
        """Events of the given normalized kinds."""
        return self.events.filter(pl.col("kind").is_in(list(kinds)))

    @property
    def ops(self) -> pl.DataFrame:
        """Host operators (``cpu_op``)."""
        return self.of_kind("cpu_op")

    @property
    def annotations(self) -> pl.DataFrame:
        """``record_function`` labels and ``ProfilerStep#N`` spans."""
        return self.of_kind("user_annotation")

    @property
    def python_functions(self) -> pl.DataFrame:
        return self.of_kind("python_function")

    @property
    def runtime(self) -> pl.DataFrame:
        """Runtime and driver calls on the host (cudaLaunchKernel, hipMemcpy, ...)."""
        return self.of_kind("runtime")

    @property
    def kernels(self) -> pl.DataFrame:
        return self.of_kind("kernel")

    @property
    def memcpy(self) -> pl.DataFrame:
        return self.of_kind("memcpy")

    @property
    def memset(self) -> pl.DataFrame:
        return self.of_kind("memset")

    @property
    def device_events(self) -> pl.DataFrame:
        """Everything that ran on a device: kernels, memcpy, memset."""
        return self.of_kind("kernel", "memcpy", "memset")

    @property
    def has_device(self) -> bool:
        return self.events.height > 0 and bool((self.events["device"] >= 0).any())

    @property
    def steps(self) -> pl.DataFrame:
        """One row per ``ProfilerStep#N``: step, start_ns, end_ns, dur_ns (empty when none)."""
        return step_spans(self.events).select(
            "step", "start_ns", (pl.col("start_ns") + pl.col("dur_ns")).alias("end_ns"), "dur_ns"
        )

    def table(self, name: str) -> pl.DataFrame:
        """Any table by name: events, memory, flows, threads, or a view (ops, kernels, ...)."""
        if name in ("events", "memory", "flows", "threads"):
            return getattr(self, name)  # type: ignore[no-any-return]
        view = getattr(type(self), name, None)
        if isinstance(view, property):
            result = view.fget(self)  # type: ignore[misc]
            if isinstance(result, pl.DataFrame):
                return result
        raise KeyError(f"no table named {name!r}")

    TABLES = (
        "events",
        "memory",
        "flows",
        "threads",
        "ops",
        "annotations",
        "python_functions",
        "runtime",
        "kernels",
        "memcpy",
        "memset",
        "device_events",
        "steps",
    )

    def __repr__(self) -> str:
        counts = self.events.group_by("kind").len().sort("kind")
        parts = ", ".join(f"{k}={n}" for k, n in counts.iter_rows())
        return f"Trace({self.meta.source or '?'}: {parts}; memory={self.memory.height})"

    def equals(self, other: Trace, *, compare_meta: bool = True) -> bool:
        """Same tables, value for value (and the same meta, ignoring ``source``/``warnings``)."""
        for name in ("events", "memory", "flows", "threads"):
            if not getattr(self, name).equals(getattr(other, name)):
                return False
        if not compare_meta:
            return True

        def key(m: TraceMeta) -> dict[str, Any]:
            return {k: v for k, v in m.__dict__.items() if k not in ("source", "warnings")}

        return key(self.meta) == key(other.meta)

    def sql(self, query: str) -> pl.DataFrame:
        """Run SQL over this trace's tables and views (needs the ``torchscope[sql]`` extra)."""
        from torchscope.trace.query import sql

        return sql(query, self)

    # -- persistence (implemented in trace.store / trace.chrome_writer) -------------------
    def save(self, path: str | Path) -> Path:
        """Write our columnar store (a directory of Parquet files plus meta.json)."""
        from torchscope.trace.store import save_trace

        return save_trace(self, Path(path))

    def to_chrome(self, path: str | Path) -> Path:
        """Write a Kineto-compatible Chrome trace JSON (``.gz`` means gzip)."""
        from torchscope.trace.chrome_writer import write_chrome

        return write_chrome(self, Path(path))


@dataclass(frozen=True)
class TraceSet(Mapping[str, Trace]):
    """Several traces keyed by rank or worker name: a log directory or a folder of ranks."""

    traces: dict[str, Trace]
    source: str = ""
    # files of the directory that were not read, one line each (the file and why): a config
    # file beside the traces, a rank whose file is broken beyond repair
    skipped: tuple[str, ...] = ()
    # "ranks" (or workers: processes side by side) or "cycles" (one process's profiling cycles,
    # one after the other: ``torchscope run``'s traces), which have no straggler to compare
    members: str = "ranks"

    def __getitem__(self, key: str) -> Trace:
        return self.traces[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.traces)

    def __len__(self) -> int:
        return len(self.traces)

    def __repr__(self) -> str:
        return f"TraceSet({self.source or '?'}: {', '.join(self.traces)})"

    def warnings(self) -> list[str]:
        """What reading the set skipped, and what reading each member repaired, named by its
        file: what ``report`` shows and what ``table``/``diff`` print on stderr."""
        return [*self.skipped, *(f"{t.meta.source}: {w}" for t in self.traces.values() for w in t.meta.warnings)]

    def save(self, path: str | Path) -> Path:
        """Save every trace to ``path/<key>/`` (our store); ``torchscope.load(path)`` reads them back."""
        root = Path(path)
        for key, trace in self.traces.items():
            trace.save(root / key.replace("/", "__"))
        return root

    def sql(self, query: str) -> pl.DataFrame:
        """SQL over all traces at once; every table has a ``trace`` column with the key."""
        from torchscope.trace.query import sql

        return sql(query, self)
