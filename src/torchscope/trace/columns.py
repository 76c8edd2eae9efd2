"""The events, memory, flows and threads tables from batches of raw events (``trace.batch``).

Why: both JSON decoders (our C scanner and msgspec) hand over the same raw columns; this
module turns them into the Trace's tables with vectorized Polars/NumPy work only: ids made
integers, times made integer nanoseconds, categories mapped to our kinds. Linking rows to
each other happens in ``derive``.
"""

from __future__ import annotations

import threading
import zlib

import numpy as np
import numpy.typing as npt
import polars as pl

from torchscope.trace import dialect
from torchscope.trace.batch import COMMON_ARGS, DEVICE_ARGS, MEMORY_ARGS, device_rows, is_i64, memory_rows
from torchscope.trace.schema import KIND, MEMORY_SCHEMA, THREADS_SCHEMA, conform

I64 = npt.NDArray[np.int64]
_LIMIT = np.iinfo(np.int64).max // 1000  # microseconds beyond this overflow int64 nanoseconds


def _decimal(text: str) -> bool:
    body = text[1:] if text.startswith("-") else text
    return body.isascii() and body.isdigit()


class Ids:
    """Integer ids for pid/tid values that may be strings ("stream 7", "Spans", "25738").

    Shared by the threads that build a large file's pieces (``reader._scan_pieces``): a text's
    id comes from the text itself, so it does not depend on which piece names it first.
    """

    def __init__(self) -> None:
        self.labels: dict[int, str] = {}
        self._by_text: dict[str, int] = {}
        self._lock = threading.Lock()

    def one(self, value: int | str | None) -> int:
        if is_i64(value):
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
        if _decimal(stripped) and is_i64(int(stripped)):
            number = int(stripped)
        elif _decimal(digits) and is_i64(int(digits)):
            number = int(digits)
            # two spellings of one stream ("stream 7", " stream 7"): the same label whichever
            # piece's thread names it first
            known_label = self.labels.get(number)
            self.labels[number] = text if known_label is None else min(known_label, text)
        else:
            # a stable negative id from the text itself, so that it does not depend on which
            # event (or which piece of a large file) named it first
            number = -2 - zlib.crc32(text.encode("utf-8", "replace"))
            while number in self.labels and self.labels[number] != text:
                number -= 1
            self.labels[number] = text
        self._by_text[text] = number
        return number

    def column(self, ints: pl.Series, text: pl.Series) -> I64:
        """An id column from a batch's int column and the text of its string values."""
        arr = ints.fill_null(0).to_numpy().astype(np.int64, copy=False)
        if text.null_count() < text.len():  # (counted already: no pass over the rows)
            has_text = text.is_not_null()
            arr = arr.copy() if not arr.flags.writeable else arr
            idx = np.flatnonzero(has_text.to_numpy())
            texts = text.gather(idx)
            unique = texts.unique(maintain_order=True).to_list()
            with self._lock:
                mapping = {t: self.one(t) for t in unique}
            arr[idx] = texts.replace_strict(mapping, return_dtype=pl.Int64).to_numpy()
        return arr


def us_to_ns(
    floats: pl.Series, ints: pl.Series, exact: pl.Series
) -> tuple[I64, npt.NDArray[np.bool_], npt.NDArray[np.bool_]]:
    """Microseconds to int64 ns, a validity mask, and which values were not valid because they
    are too large for int64 ns (the caller says what becomes of those events, once).

    A value written as an integer converts exactly; one with decimals (Kineto writes ns as
    three decimals) has the nanoseconds both decoders read from its digits (``exact``; a double
    holds epoch microseconds only to 0.25 us). A finite number with neither is one whose ns do
    not fit int64; NaN, Infinity and absent values are not valid.
    """
    if exact.len() and not exact.null_count():  # all written with decimals, as Kineto writes ns
        return exact.to_numpy(), np.ones(exact.len(), bool), np.zeros(exact.len(), bool)
    n = floats.len()
    if not n:
        return np.zeros(0, np.int64), np.zeros(0, bool), np.zeros(0, bool)
    # every value present written one way, the others absent (instant events have no "dur"):
    # the null counts say so without a pass over the rows (1.7 ms of nccl_rank1_of_2's 28k
    # instants otherwise)
    absent = floats.null_count()
    if exact.null_count() == n and ints.null_count() == absent:  # integers, as most traces write
        whole = ints.fill_null(0).to_numpy().astype(np.int64, copy=False)
        if whole.max() <= _LIMIT and whole.min() >= -_LIMIT:
            valid = np.ones(n, bool) if not absent else ints.is_not_null().to_numpy()
            return whole * 1000, valid, np.zeros(n, bool)
    elif ints.null_count() == n and exact.null_count() == absent:  # all with decimals, some absent
        return exact.fill_null(0).to_numpy(), exact.is_not_null().to_numpy(), np.zeros(n, bool)
    f = floats.fill_null(np.nan).to_numpy().astype(np.float64, copy=False)
    is_int = ints.is_not_null().to_numpy()
    i = ints.fill_null(0).to_numpy().astype(np.int64, copy=False)
    has = exact.is_not_null().to_numpy()
    int_big = is_int & ((i > _LIMIT) | (i < -_LIMIT))
    big = int_big | (~is_int & ~has & np.isfinite(f))
    valid = (is_int & ~int_big) | has
    ns = np.where(has, exact.fill_null(0).to_numpy(), np.where(valid, i, 0) * 1000)
    return ns, valid, big


def _too_large(big: npt.NDArray[np.bool_]) -> str:
    """The part of a warning that says how many values were too large to represent."""
    return f" ({int(big.sum())} too large to represent)" if big.any() else ""


_EVENT_COLUMNS = ("cat", "ph", *COMMON_ARGS, *DEVICE_ARGS, "args_at")


def _ids(batch: pl.DataFrame, column: str, ids: Ids) -> I64:
    return ids.column(batch[column], batch[f"{column}_text"])


def _missing(batch: pl.DataFrame, column: str) -> int:
    ints, text = batch[column], batch[f"{column}_text"]
    if not ints.null_count() or not text.null_count():  # (counted already: no pass over the rows)
        return 0
    return int((ints.is_null() & text.is_null()).sum())


def span_frames(
    batch: pl.DataFrame, rows: npt.NDArray[np.int64] | None, ids: Ids, warnings: list[str]
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The events table (complete and instant events) and the memory table ([memory] instants).

    ``rows`` are the batch rows of those events (None: all of them). Only the columns each
    table needs are gathered, so no copy of the whole batch is made. The batch's time and
    track columns are dropped from it once converted (the caller selects flows and metadata
    first): on ``nccl_rank1_of_2_profile_memory.json.gz`` that took 30 MB off the load's peak.
    """

    def take(*names: str) -> pl.DataFrame:
        narrow = batch.select(names)
        return narrow if rows is None else narrow[rows]

    spans = take(
        "ph", "name", "ts", "ts_int", "ts_exact_ns", "dur", "dur_int", "dur_exact_ns",
        "pid", "pid_text", "tid", "tid_text",
    )
    n = spans.height
    at = np.arange(n) if rows is None else rows  # span row -> batch row
    ph = spans["ph"]
    name = spans["name"].fill_null("")
    start, ok_ts, big_ts = us_to_ns(spans["ts"], spans["ts_int"], spans["ts_exact_ns"])
    dur, ok_dur, big_dur = us_to_ns(spans["dur"], spans["dur_int"], spans["dur_exact_ns"])
    missing_ids = _missing(spans, "pid") + _missing(spans, "tid")
    if missing_ids:
        warnings.append(f"{missing_ids} pid/tid values were missing; read as 0")
    pid = _ids(spans, "pid", ids)
    tid = _ids(spans, "tid", ids)
    del spans
    _drop_consumed(
        batch,
        ("ts", "ts_int", "ts_exact_ns", "dur", "dur_int", "dur_exact_ns", "pid", "pid_text", "tid", "tid_text"),
    )

    is_x = (ph == "X").to_numpy()
    bad_dur = is_x & ~ok_dur
    if bad_dur.any():
        warnings.append(
            f"{int(bad_dur.sum())} complete events had no usable 'dur'{_too_large(big_dur & is_x)}; read as 0"
        )
    neg = ok_dur & (dur < 0)
    if neg.any():
        warnings.append(f"{int(neg.sum())} events had a negative duration; read as 0")
    dur = np.where(is_x & ok_dur & ~neg, dur, 0)
    if not ok_ts.all():
        warnings.append(f"dropped {int((~ok_ts).sum())} events without a usable 'ts'{_too_large(big_ts)}")

    is_mem = memory_rows(ph, name).to_numpy()
    mem_rows = np.flatnonzero(is_mem & ok_ts)
    memory = _memory_frame(
        batch.select(MEMORY_ARGS)[at[mem_rows]], start[mem_rows], pid[mem_rows], tid[mem_rows], warnings
    )
    keep = np.flatnonzero(~is_mem & ok_ts)
    kept = batch.select(_EVENT_COLUMNS)  # columns first, then rows: no copy of unused columns
    if keep.size < batch.height:
        kept = kept[at[keep]]
    if keep.size < n:
        name = name.gather(keep)
        start, dur, pid, tid = start[keep], dur[keep], pid[keep], tid[keep]

    cat = kept["cat"].fill_null("")
    on_device = device_rows(cat)
    df = kept.select(
        cat.alias("cat"),
        name.alias("name"),
        pl.col("ph"),
        pl.Series("pid", pid),
        pl.Series("tid", tid),
        pl.Series("start_ns", start),
        pl.Series("dur_ns", dur),
        pl.col(*COMMON_ARGS),
        pl.Series("raw_row", keep),
        pl.col("args_at"),
        # device-only attributes are read from the rows that can carry them
        *[pl.when(on_device).then(pl.col(c)).alias(c) for c in DEVICE_ARGS],
    ).with_columns(
        pl.coalesce("stream", "stream_id").alias("a_stream"),
        pl.coalesce("external_id", "external_id_2021").alias("external_id"),
    )
    df = df.drop("stream", "stream_id", "external_id_2021").rename({"device": "a_device"})
    return _classify(df), memory


def _drop_consumed(batch: pl.DataFrame, names: tuple[str, ...]) -> None:
    """Drop raw columns already converted from the batch (in place), so their memory is free
    while the events table is built: the batch is the reader's largest object at that point.
    They live in Polars' allocator, which reuses them; no ``malloc_trim`` is needed here (one
    measured no lower peak)."""
    for name in names:
        if name in batch.columns:
            batch.drop_in_place(name)


def may_keep_raw_args(batch: pl.DataFrame) -> bool:
    """Whether some event may be of kind "other" (``_classify``), whose verbatim args we keep.

    A cheap superset: complete or instant events (not [memory] ones) with args, of a category
    we do not model, or complete events with no category. Kineto's own "overhead" events
    (every CUDA trace has a few) have no args: they do not make the reader keep the text.
    """
    ph, cat = batch["ph"], batch["cat"].fill_null("")
    spans = ph.is_in(["X", "i", "I"]) & ~memory_rows(ph, batch["name"]) & batch["args_at"].is_not_null()
    unknown = [c for c in cat.unique().to_list() if dialect.CATEGORY_KIND.get(c.lower(), "other") == "other"]
    other = spans & (cat.is_in(unknown) & (cat != "") | (cat == "") & (ph == "X"))
    return bool(other.any())


def _classify(df: pl.DataFrame) -> pl.DataFrame:
    """Normalized kind, device and stream from the raw category and the track."""
    cats = df["cat"].unique().to_list()
    kind_of = {c: dialect.CATEGORY_KIND.get(c.lower(), "other") for c in cats}
    on_device = [c for c in cats if c.lower() in dialect.DEVICE_CATEGORIES]
    # mapped once, as a Series: inside the expression below it would be mapped twice (8 ms of
    # 16); into the kinds' Enum, so that the choices below compare and copy small integers
    by_cat = df["cat"].replace_strict(kind_of, default="other", return_dtype=KIND)

    def lit(kind: str) -> pl.Expr:
        return pl.lit(kind, dtype=KIND)

    kind = (
        pl.when(pl.col("cat") == "")
        .then(pl.when(pl.col("ph") == "X").then(lit("other")).otherwise(lit("instant")))
        .otherwise(by_cat)
    )
    kind = (
        pl.when(pl.col("name").is_in(list(dialect.COLLECTIVE_NAMES)))
        .then(lit("collective"))
        # 2021 traces file ProfilerStep#N under "Operator"; it is a record_function label
        .when((by_cat == "cpu_op") & pl.col("name").cat.starts_with("ProfilerStep#"))
        .then(lit("user_annotation"))
        .otherwise(kind)
    )
    is_dev = pl.col("cat").is_in(on_device)
    return df.with_columns(
        kind.alias("kind"),
        pl.when(is_dev).then(pl.coalesce("a_device", "pid")).otherwise(-1).alias("device"),
        pl.when(is_dev).then(pl.coalesce("a_stream", "tid")).otherwise(-1).alias("stream"),
        pl.when(is_dev).then(pl.col("bytes")).otherwise(None).alias("bytes"),
    ).drop("a_device", "a_stream", "ph")


def _memory_frame(rows: pl.DataFrame, ts: I64, pid: I64, tid: I64, warnings: list[str]) -> pl.DataFrame:
    if not rows.height:
        return pl.DataFrame(schema=MEMORY_SCHEMA)
    # an allocator's totals are never negative: such a value is not a total (read as unknown)
    negative = int(((rows["total_allocated"] < 0) | (rows["total_reserved"] < 0)).sum())
    if negative:
        warnings.append(
            f"{negative} memory events have a negative total allocated or reserved; read as unknown"
        )
    return rows.select(
        pl.Series("ts_ns", ts),
        pl.Series("pid", pid),
        pl.Series("tid", tid),
        pl.col("device_type", "device_id", "addr"),
        pl.col("mem_bytes").alias("bytes"),
        *(pl.when(pl.col(c) >= 0).then(pl.col(c)).alias(c) for c in ("total_allocated", "total_reserved")),
    )


def flow_frame(flows: pl.DataFrame, ids: Ids, warnings: list[str]) -> pl.DataFrame:
    schema = {
        "cat": pl.String,
        "ph": pl.String,
        "flow_id": pl.Int64,
        "pid": pl.Int64,
        "tid": pl.Int64,
        "ts_ns": pl.Int64,
    }
    if not flows.height:
        return pl.DataFrame(schema=schema)
    ts, ok, big = us_to_ns(flows["ts"], flows["ts_int"], flows["ts_exact_ns"])
    df = pl.DataFrame(
        {
            "cat": flows["cat"].fill_null(""),
            "ph": flows["ph"],
            "flow_id": _ids(flows, "id", ids),
            "pid": _ids(flows, "pid", ids),
            "tid": _ids(flows, "tid", ids),
            "ts_ns": ts,
        },
        schema=schema,
    )
    if not ok.all():
        warnings.append(f"dropped {int((~ok).sum())} flow events without a usable 'ts'{_too_large(big)}")
        df = df.filter(pl.Series(ok))
    return df


def metadata_frame(metas: pl.DataFrame, ids: Ids) -> pl.DataFrame:
    """The 'M' rows we use (process/thread names, sort indices), de-duplicated."""
    return (
        pl.DataFrame(
            {
                "what": metas["name"],
                "pid": _ids(metas, "pid", ids),
                "tid": _ids(metas, "tid", ids),
                "text": metas["arg_name"],
                "sort_index": metas["sort_index"],
            },
            schema={
                "what": pl.String,
                "pid": pl.Int64,
                "tid": pl.Int64,
                "text": pl.String,
                "sort_index": pl.Int64,
            },
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
