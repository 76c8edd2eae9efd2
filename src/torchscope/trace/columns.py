"""Columns from decoded Kineto events: one list comprehension per field, then Polars.

The reader decodes JSON into typed msgspec Structs; this module turns a list of them into
the raw columns of the events, memory, flows and threads tables (ids made integers, times
made integer nanoseconds, categories mapped to our kinds), without a Python loop per event
beyond one C-level ``map`` per column. Linking rows to each other happens in ``derive``.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from operator import attrgetter
from typing import Any

import msgspec
import numpy as np
import numpy.typing as npt
import polars as pl

from torchscope.trace import dialect
from torchscope.trace.events import EMPTY_ARGS, Args, Event
from torchscope.trace.schema import MEMORY_SCHEMA, THREADS_SCHEMA, conform

I64 = npt.NDArray[np.int64]


def _is_i64(v: object) -> bool:
    return type(v) is int and -(2**63) <= v < 2**63


def _decimal(text: str) -> bool:
    body = text[1:] if text.startswith("-") else text
    return body.isascii() and body.isdigit()


class Ids:
    """Integer ids for pid/tid values that may be strings ("stream 7", "Spans", "25738")."""

    def __init__(self) -> None:
        self.labels: dict[int, str] = {}
        self._by_text: dict[str, int] = {}

    def one(self, value: int | str | None) -> int:
        if _is_i64(value):
            return value  # type: ignore[return-value]
        if value is None:
            return 0
        text = str(value)
        known = self._by_text.get(text)
        if known is not None:
            return known
        stripped = text.strip()
        number: int
        digits = stripped[7:].strip() if stripped.startswith("stream ") else ""
        if _decimal(stripped) and _is_i64(int(stripped)):
            number = int(stripped)
        elif _decimal(digits) and _is_i64(int(digits)):
            number = int(digits)
            self.labels[number] = text
        else:
            # a stable negative id from the text itself, so that it does not depend on which
            # event (or which piece of a large file) named it first
            number = -2 - zlib.crc32(text.encode("utf-8", "replace"))
            while number in self.labels and self.labels[number] != text:
                number -= 1
            self.labels[number] = text
        self._by_text[text] = number
        return number

    def column(self, values: Sequence[int | str | None]) -> I64:
        """Ints pass through (parsed by Polars in Rust); only the rare strings take ``one``."""
        try:
            series = pl.Series(values, dtype=pl.Int64, strict=False)
        except (TypeError, ValueError, OverflowError, pl.exceptions.PolarsError):
            series = pl.Series([v if _is_i64(v) else None for v in values], dtype=pl.Int64)
        arr = series.fill_null(0).to_numpy().copy()
        if series.null_count():
            idx = np.flatnonzero(series.is_null().to_numpy())
            arr[idx] = [self.one(values[i]) for i in idx.tolist()]
        return arr


def _us_to_ns(
    values: Sequence[int | float | None], what: str, warnings: list[str]
) -> tuple[I64, npt.NDArray[np.bool_]]:
    """Microseconds (int, or float with ns decimals) to int64 ns, and a validity mask."""
    n = len(values)
    ints: I64 | None = None
    arr: npt.NDArray[np.float64]
    inferred: npt.NDArray[Any]
    try:
        inferred = np.array(values) if n else np.empty(0, np.float64)
    except (TypeError, ValueError, OverflowError):
        inferred = np.empty(0, object)
    if inferred.dtype == np.int64 and inferred.ndim == 1:
        ints = inferred
        arr = ints.astype(np.float64)
    elif inferred.dtype == np.float64 and inferred.ndim == 1:
        arr = inferred
    elif inferred.dtype == object and inferred.ndim == 1 and (numbers := _numeric_objects(inferred)):
        ints, arr = numbers
    else:  # strings, bools, nested lists, huge ints: the slow, careful way
        arr = np.array(
            [v if isinstance(v, (int, float)) and not isinstance(v, bool) else np.nan for v in values],
            dtype=np.float64,
        )
        if all(type(v) is int for v in values):
            try:
                ints = np.array(values, dtype=np.int64)
            except OverflowError:
                ints = None
    valid = np.isfinite(arr)
    if ints is not None:
        if np.abs(ints).max(initial=0) > np.iinfo(np.int64).max // 1000:
            valid &= np.abs(ints) <= np.iinfo(np.int64).max // 1000
            ints = np.where(valid, ints, 0)
            warnings.append(f"{(~valid).sum()} events have a {what} too large to represent; dropped")
        return ints * 1000, valid
    limit = float(np.iinfo(np.int64).max // 1000)
    big = valid & (np.abs(arr) >= limit)
    if big.any():
        warnings.append(f"{int(big.sum())} events have a {what} too large to represent; dropped")
        valid &= ~big
    safe = np.where(valid, arr, 0.0)
    whole = np.floor(safe)
    ns = whole.astype(np.int64) * 1000 + np.rint((safe - whole) * 1000.0).astype(np.int64)
    return ns, valid


def _numeric_objects(values: npt.NDArray[Any]) -> tuple[I64 | None, npt.NDArray[np.float64]] | None:
    """An object array of ints, floats and Nones (instants have no 'dur') as numbers, vectorized."""
    none: npt.NDArray[np.bool_] = values == None  # noqa: E711 - elementwise on an object array
    filled = np.where(none, 0, values)
    try:
        as_float = filled.astype(np.float64)
        as_int = filled.astype(np.int64)
    except (TypeError, ValueError, OverflowError):
        return None
    as_float[none] = np.nan
    exact = np.array_equal(as_int[~none].astype(np.float64), as_float[~none])
    return (as_int if exact else None), as_float


_SEP = b"\x1f"  # a control character cannot appear unescaped in JSON text


def _raw_text(values: list[msgspec.Raw]) -> pl.Series:
    """Verbatim JSON text of each value (null when absent), split apart in one C/Rust pass."""
    if not values:
        return pl.Series(values=[], dtype=pl.String)
    joined = _SEP.join(values).decode("utf-8", errors="replace")
    parts = pl.Series([joined]).str.split(_SEP.decode()).explode()
    return parts.replace("", None)


def col(items: Sequence[Any], field: str) -> list[Any]:
    """One attribute of every item, as a list (a C-level loop: ``map`` + ``attrgetter``)."""
    return list(map(attrgetter(field), items))


def take(items: Sequence[Any], idx: npt.NDArray[np.int64]) -> list[Any]:
    return list(map(items.__getitem__, idx.tolist()))


def _int_col(values: list[Any]) -> pl.Series:
    """Ints with nulls; values of another type (a str stream "0x0") become null."""
    try:
        return pl.Series(values, dtype=pl.Int64, strict=False)
    except (TypeError, ValueError, OverflowError, pl.exceptions.PolarsError):
        return pl.Series([v if _is_i64(v) else None for v in values], dtype=pl.Int64)


def _float_col(values: list[Any]) -> pl.Series:
    try:
        return pl.Series(values, dtype=pl.Float64, strict=False)
    except (TypeError, ValueError, OverflowError, pl.exceptions.PolarsError):
        return pl.Series([v if isinstance(v, (int, float)) else None for v in values], dtype=pl.Float64)


_DEVICE_FIELDS = {
    "correlation": ("correlation", _int_col),
    "ext_2021": ("external_id_2021", _int_col),
    "a_device": ("device", _int_col),
    "a_stream": ("stream", _int_col),
    "a_stream_id": ("stream_id", _int_col),
    "registers_per_thread": ("registers_per_thread", _int_col),
    "shared_memory": ("shared_memory", _int_col),
    "blocks_per_sm": ("blocks_per_sm", _float_col),
    "warps_per_sm": ("warps_per_sm", _float_col),
    "occupancy_pct": ("occupancy_pct", _float_col),
    "bytes": ("bytes", _int_col),
}


def span_frames(spans: list[Event], ids: Ids, warnings: list[str]) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The events table (complete and instant events) and the memory table ([memory] instants)."""
    n = len(spans)
    ph = pl.Series("ph", col(spans, "ph"), dtype=pl.String)
    name = pl.Series("name", col(spans, "name"), dtype=pl.String).fill_null("")
    cat = pl.Series("cat", col(spans, "cat"), dtype=pl.String).fill_null("")
    start, ok_ts = _us_to_ns(col(spans, "ts"), "timestamp", warnings)
    durs = col(spans, "dur")
    dur, ok_dur = _us_to_ns(durs, "duration", warnings)
    pids, tids = col(spans, "pid"), col(spans, "tid")
    missing_ids = pids.count(None) + tids.count(None)
    if missing_ids:
        warnings.append(f"{missing_ids} pid/tid values were missing; read as 0")
    pid = ids.column(pids)
    tid = ids.column(tids)
    args = [EMPTY_ARGS if a is None else a for a in col(spans, "args")]

    is_x = (ph == "X").to_numpy()
    bad_dur = is_x & ~ok_dur
    if bad_dur.any():
        warnings.append(f"{int(bad_dur.sum())} complete events had no usable 'dur'; read as 0")
    neg = ok_dur & (dur < 0)
    if neg.any():
        warnings.append(f"{int(neg.sum())} events had a negative duration; read as 0")
    dur = np.where(is_x & ok_dur & ~neg, dur, 0)
    if not ok_ts.all():
        warnings.append(f"dropped {int((~ok_ts).sum())} events without a usable 'ts'")

    is_mem = ((name == dialect.MEMORY_EVENT_NAME) & ~(ph == "X")).to_numpy()
    memory = _memory_frame(
        take(args, np.flatnonzero(is_mem & ok_ts)),
        start[is_mem & ok_ts],
        pid[is_mem & ok_ts],
        tid[is_mem & ok_ts],
    )
    keep = np.flatnonzero(~is_mem & ok_ts)
    if keep.size < n:
        ph, name, cat = ph.gather(keep), name.gather(keep), cat.gather(keep)
        start, dur, pid, tid = start[keep], dur[keep], pid[keep], tid[keep]
        args = take(args, keep)

    df = pl.DataFrame(
        {
            "cat": cat,
            "name": name,
            "ph": ph,
            "pid": pid,
            "tid": tid,
            "start_ns": start,
            "dur_ns": dur,
            "external_id": _int_col(col(args, "external_id")),
            "seq": _int_col(col(args, "seq")),
            "fwd_tid": _int_col(col(args, "fwd_tid")),
            "input_dims": _raw_text(col(args, "input_dims")),
            "input_types": _raw_text(col(args, "input_types")),
            "raw_row": keep,
        }
    )
    # device-only attributes: pulled from the (few) rows that can carry them
    dev_cats = [c for c in df["cat"].unique().to_list() if c.lower() in dialect.DEVICE_CATEGORIES]
    runtime_like = [
        c for c in df["cat"].unique().to_list() if dialect.CATEGORY_KIND.get(c.lower()) in ("runtime", "sync")
    ]
    rows = np.flatnonzero(df["cat"].is_in(dev_cats + runtime_like).to_numpy())
    dev_args = take(args, rows)
    extra: dict[str, pl.Series] = {"row": pl.Series(rows, dtype=pl.Int64)}
    for column, (field, make) in _DEVICE_FIELDS.items():
        extra[column] = make(col(dev_args, field))
    extra["grid"] = _raw_text(col(dev_args, "grid"))
    extra["block"] = _raw_text(col(dev_args, "block"))
    dev = (
        pl.DataFrame(extra)
        .with_columns(pl.coalesce("a_stream", "a_stream_id").alias("a_stream"))
        .drop("a_stream_id")
    )
    df = df.with_row_index("row").with_columns(pl.col("row").cast(pl.Int64))
    df = df.join(dev, on="row", how="left").drop("row")
    df = df.with_columns(pl.coalesce("external_id", "ext_2021").alias("external_id")).drop("ext_2021")
    return _classify(df), memory


def _classify(df: pl.DataFrame) -> pl.DataFrame:
    """Normalized kind, device and stream from the raw category and the track."""
    cats = df["cat"].unique().to_list()
    kind_of = {c: dialect.CATEGORY_KIND.get(c.lower(), "other") for c in cats}
    on_device = [c for c in cats if c.lower() in dialect.DEVICE_CATEGORIES]
    kind = (
        pl.when(pl.col("cat") == "")
        .then(pl.when(pl.col("ph") == "X").then(pl.lit("other")).otherwise(pl.lit("instant")))
        .otherwise(pl.col("cat").replace_strict(kind_of, default="other"))
    )
    kind = (
        pl.when(pl.col("name").is_in(list(dialect.COLLECTIVE_NAMES)))
        .then(pl.lit("collective"))
        # 2021 traces file ProfilerStep#N under "Operator"; it is a record_function label
        .when((kind == "cpu_op") & pl.col("name").str.starts_with("ProfilerStep#"))
        .then(pl.lit("user_annotation"))
        .otherwise(kind)
    )
    is_dev = pl.col("cat").is_in(on_device)
    return df.with_columns(
        kind.alias("kind"),
        pl.when(is_dev).then(pl.coalesce("a_device", "pid")).otherwise(-1).alias("device"),
        pl.when(is_dev).then(pl.coalesce("a_stream", "tid")).otherwise(-1).alias("stream"),
        pl.when(is_dev).then(pl.col("bytes")).otherwise(None).alias("bytes"),
    ).drop("a_device", "a_stream", "ph")


def _memory_frame(args: list[Args], ts: I64, pid: I64, tid: I64) -> pl.DataFrame:
    if not args:
        return pl.DataFrame(schema=MEMORY_SCHEMA)
    return pl.DataFrame(
        {
            "ts_ns": ts,
            "pid": pid,
            "tid": tid,
            "device_type": _int_col(col(args, "device_type")),
            "device_id": _int_col(col(args, "device_id")),
            "addr": _int_col(col(args, "addr")),
            "bytes": _int_col(col(args, "mem_bytes")),
            "total_allocated": _int_col(col(args, "total_allocated")),
            "total_reserved": _int_col(col(args, "total_reserved")),
        }
    )


def flow_frame(flows: list[Event], ids: Ids, warnings: list[str]) -> pl.DataFrame:
    schema = {
        "cat": pl.String,
        "ph": pl.String,
        "flow_id": pl.Int64,
        "pid": pl.Int64,
        "tid": pl.Int64,
        "ts_ns": pl.Int64,
    }
    if not flows:
        return pl.DataFrame(schema=schema)
    ts, ok = _us_to_ns(col(flows, "ts"), "timestamp", warnings)
    df = pl.DataFrame(
        {
            "cat": pl.Series(col(flows, "cat"), dtype=pl.String).fill_null(""),
            "ph": pl.Series(col(flows, "ph"), dtype=pl.String),
            "flow_id": ids.column(col(flows, "id")),
            "pid": ids.column(col(flows, "pid")),
            "tid": ids.column(col(flows, "tid")),
            "ts_ns": ts,
        }
    )
    if not ok.all():
        warnings.append(f"dropped {int((~ok).sum())} flow events without a usable 'ts'")
        df = df.filter(pl.Series(ok))
    return df


def metadata_frame(metas: list[Event], ids: Ids) -> pl.DataFrame:
    """The 'M' rows we use (process/thread names, sort indices), de-duplicated."""
    args = [EMPTY_ARGS if a is None else a for a in col(metas, "args")]
    return (
        pl.DataFrame(
            {
                "what": pl.Series(col(metas, "name"), dtype=pl.String),
                "pid": ids.column(col(metas, "pid")),
                "tid": ids.column(col(metas, "tid")),
                "text": pl.Series(col(args, "name"), dtype=pl.String),
                "sort_index": _int_col(col(args, "sort_index")),
            },
            schema_overrides={"pid": pl.Int64, "tid": pl.Int64},
        )
        .filter(pl.col("what").is_in(["process_name", "thread_name", "thread_sort_index"]))
        .unique(["what", "pid", "tid"], keep="last", maintain_order=True)
    )


def threads_frame(m: pl.DataFrame, ev: pl.DataFrame, ids: Ids) -> pl.DataFrame:
    """One row per (pid, tid) seen in events or named by 'M' metadata rows (``metadata_frame``)."""
    procs = (
        m.filter((pl.col("what") == "process_name") & pl.col("text").is_not_null())
        .unique("pid", keep="last")
        .select("pid", pl.col("text").alias("process_name"))
    )
    names = (
        m.filter((pl.col("what") == "thread_name") & pl.col("text").is_not_null())
        .unique(["pid", "tid"], keep="last")
        .select("pid", "tid", pl.col("text").str.strip_chars().replace("", None).alias("thread_name"))
    )
    order = (
        m.filter((pl.col("what") == "thread_sort_index") & pl.col("sort_index").is_not_null())
        .unique(["pid", "tid"], keep="last")
        .select("pid", "tid", "sort_index")
    )
    keys = pl.concat(
        [ev.select("pid", "tid"), names.select("pid", "tid"), order.select("pid", "tid")]
    ).unique()
    labels = pl.DataFrame(
        {"id": list(ids.labels), "text": list(ids.labels.values())},
        schema={"id": pl.Int64, "text": pl.String},
    )
    out = (
        keys.join(procs, on="pid", how="left")
        .join(names, on=["pid", "tid"], how="left")
        .join(order, on=["pid", "tid"], how="left")
        .join(labels.rename({"id": "tid", "text": "label"}), on="tid", how="left")
        .join(labels.rename({"id": "pid", "text": "process_label"}), on="pid", how="left")
        .with_columns(pl.coalesce("process_name", "process_label").alias("process_name"))
        .sort("pid", "tid")
    )
    return conform(out, THREADS_SCHEMA)
