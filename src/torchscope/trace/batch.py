"""A batch of raw trace events as one Polars frame: the meeting point of our two JSON decoders.

Why: a trace is decoded either by our C scanner (``trace._scan``, which writes every field
straight into typed column buffers) or, when the scanner is not built or declines an input
it does not handle exactly (a duration written as a string, a float where an id belongs),
by msgspec into per-event Structs. Both end here, in the same frame with the same columns,
so everything after (``trace.columns``) has one code path and the two decoders can be
tested for equality on every input (``tests/trace/test_batch.py``).

Columns (one row per JSON event, in file order):
- ``ph``, ``cat``, ``name`` (Categorical), ``arg_name``: text (null when absent; ``ph`` "")
- ``pid``, ``tid``, ``id``, ``stream``, ``stream_id``: ints, with ``*_text`` holding the value
  when the file wrote it as a string ("stream 7"); both null when absent
- ``ts``, ``dur``: the value as a float (null when absent) and ``ts_int``/``dur_int`` when it
  was written as an integer, so that integer microseconds convert to ns exactly; a value
  written with decimals also has ``ts_exact_ns``/``dur_exact_ns``, its nanoseconds from the
  decimal text (a double cannot hold ``1712195495502094.565`` to the nanosecond)
- one column per modelled ``args`` key (``events.Args``): ints, floats, and the JSON text of
  ``input_dims``, ``input_types``, ``concrete_inputs``, ``grid``, ``block`` as Kineto writes
  it (``tidy_json_texts``: a file a JSON tool re-indented gets the same text)
- ``args_at``: where the event's ``args`` object starts in the decoded text (the scanner; null
  when the event has none), or -1 for an event with args that msgspec decoded: the reader
  reads the verbatim args of the few events it does not model from there (``reader``)

Columns read only by some kinds of event (device attributes, memory-event attributes,
metadata attributes) are read by ``trace.columns`` only on those rows, so the msgspec path
fills them only there (it is per-event Python work) while the scanner fills them everywhere.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from decimal import ROUND_HALF_EVEN, Decimal
from operator import attrgetter
from typing import Any

import msgspec
import numpy as np
import numpy.typing as npt
import polars as pl

from torchscope.trace import dialect
from torchscope.trace.events import EMPTY_ARGS, Event
from torchscope.trace.json_repair import nonfinite_note

INT_ARGS = (
    "external_id",
    "external_id_2021",
    "correlation",
    "device",
    "seq",
    "fwd_tid",
    "registers_per_thread",
    "shared_memory",
    "bytes",
    "device_type",
    "device_id",
    "addr",
    "mem_bytes",
    "total_allocated",
    "total_reserved",
    "sort_index",
)
FLOAT_ARGS = ("blocks_per_sm", "warps_per_sm", "occupancy_pct")
RAW_ARGS = ("input_dims", "input_types", "concrete_inputs", "grid", "block")
TEXT = ("ph", "cat", "name", "arg_name")
INT_OR_TEXT = ("pid", "tid", "id", "stream", "stream_id")
NUMBERS = ("ts", "dur")

# text with few distinct values, compared and grouped but never edited: Categorical from the
# start (the scanner's codes become its codes; a String column gathered its text per row)
CATEGORICAL_TEXT = ("ph", "cat", "name")
SCHEMA: dict[str, type[pl.DataType]] = {
    **{c: pl.Categorical if c in CATEGORICAL_TEXT else pl.String for c in TEXT},
    **{c: pl.Int64 for c in INT_OR_TEXT},
    **{f"{c}_text": pl.String for c in INT_OR_TEXT},
    **{c: pl.Float64 for c in NUMBERS},
    **{f"{c}_int": pl.Int64 for c in NUMBERS},
    **{f"{c}_exact_ns": pl.Int64 for c in NUMBERS},
    **{c: pl.Int64 for c in INT_ARGS},
    **{c: pl.Float64 for c in FLOAT_ARGS},
    **{c: pl.String for c in RAW_ARGS},
    "args_at": pl.Int64,
}

FLOW_COLUMNS = ("cat", "ph", "id", "id_text", "pid", "pid_text", "tid", "tid_text", "ts", "ts_int", "ts_exact_ns")
META_COLUMNS = ("name", "pid", "pid_text", "tid", "tid_text", "arg_name", "sort_index")

# args read on every span row; the rest only on the rows of ``ROW_GROUPS``
COMMON_ARGS = ("external_id", "seq", "fwd_tid", "input_dims", "input_types", "concrete_inputs")
DEVICE_ARGS = (
    "external_id_2021",
    "correlation",
    "device",
    "stream",
    "stream_id",
    "registers_per_thread",
    "shared_memory",
    "blocks_per_sm",
    "warps_per_sm",
    "occupancy_pct",
    "bytes",
    "grid",
    "block",
)
MEMORY_ARGS = ("device_type", "device_id", "addr", "mem_bytes", "total_allocated", "total_reserved")
META_ARGS = ("arg_name", "sort_index")

_ARG_FIELD = {"arg_name": "name"}  # batch column -> events.Args attribute, where they differ


def device_rows(cat: pl.Series) -> pl.Series:
    """Rows whose category can carry device attributes (device work, runtime and sync calls)."""
    cats = [c for c in cat.drop_nulls().unique().to_list() if _carries_device_args(c)]
    return cat.is_in(cats).fill_null(False)


def _carries_device_args(cat: str) -> bool:
    low = cat.lower()
    return low in dialect.DEVICE_CATEGORIES or dialect.CATEGORY_KIND.get(low) in ("runtime", "sync")


def memory_rows(ph: pl.Series, name: pl.Series) -> pl.Series:
    return ((name == dialect.MEMORY_EVENT_NAME) & (ph != "X")).fill_null(False)


# -- from msgspec Structs -----------------------------------------------------------------------
def _col(items: Sequence[Any], field: str) -> list[Any]:
    """One attribute of every item (a C-level loop: ``map`` + ``attrgetter``)."""
    return list(map(attrgetter(field), items))


def is_i64(v: object) -> bool:
    """An int (not a bool) that fits int64."""
    return type(v) is int and -(2**63) <= v < 2**63


def _ints(values: list[Any]) -> pl.Series:
    """Ints with nulls; values of another type (a str stream "0x0", a huge int) become null."""
    try:
        return pl.Series(values, dtype=pl.Int64, strict=False)
    except (TypeError, ValueError, OverflowError, pl.exceptions.PolarsError):
        return pl.Series([v if is_i64(v) else None for v in values], dtype=pl.Int64)


def _floats(values: list[Any]) -> pl.Series:
    try:
        return pl.Series(values, dtype=pl.Float64, strict=False)
    except (TypeError, ValueError, OverflowError, pl.exceptions.PolarsError):
        return pl.Series(
            [float(v) if isinstance(v, (int, float)) else None for v in values], dtype=pl.Float64
        )


def _int_or_text(values: list[Any]) -> tuple[pl.Series, pl.Series]:
    """An int column and the text of the values that are not int64 (strings, huge ints)."""
    ints = _ints(values)
    text: list[str | None] = [None] * len(values)
    if ints.null_count():
        for i in np.flatnonzero(ints.is_null().to_numpy()).tolist():
            v = values[i]
            if v is not None:
                text[i] = str(v)
    return ints, pl.Series(text, dtype=pl.String)


def _number(values: list[Any]) -> tuple[pl.Series, pl.Series, pl.Series, int]:
    """A float column; where the value is an int64, the exact int; where it was written with
    decimals (msgspec gives a ``Decimal``), its exact nanoseconds, as the scanner reads them.

    A number too large for a double (``1E400``) is null, as the repair of a float field makes
    it; the last item says how many there were, for the same warning."""
    decimals: list[Decimal | None] = []
    floats: list[Any] = []
    overflowed = 0
    for v in values:
        if type(v) is Decimal:
            f = float(v)
            if v.is_finite() and math.isinf(f):
                overflowed += 1
                decimals.append(None)
                floats.append(None)
            else:
                decimals.append(v)
                floats.append(f)
        else:
            decimals.append(None)
            floats.append(v)
    return (
        _floats(floats),
        _ints([v if type(v) is int else None for v in values]),
        _ints([None if v is None else _exact_ns(v) for v in decimals]),
        overflowed,
    )


def _exact_ns(us: Decimal) -> int | None:
    """Microseconds to nanoseconds, rounded half to even (None when not finite or too large)."""
    if not us.is_finite():
        return None
    ns = int((us * 1000).to_integral_value(rounding=ROUND_HALF_EVEN))
    return ns if -(2**63) <= ns < 2**63 else None


_SEP = b"\x1f"  # a control character cannot appear unescaped in JSON text

# what Kineto never writes in a shape, a type list or a grid: a line break, a tab, two spaces, a
# space inside a bracket or before a comma, a comma with no space after it
_NOT_KINETOS = re.compile(r"[\t\n\r]|  |\[ | \]| ,|,(?! )")


def tidy_json_texts(texts: list[str]) -> list[str]:
    """The JSON texts (``Input Dims``, ...) written as Kineto writes them: ``[[3, 224, 224], []]``.

    A trace re-indented by a JSON tool (``json.dump(..., indent=2)``) wrote each shape over
    several lines, which broke the table's rows and grouped the same shapes apart from the
    original file's; a compact one (``separators=(",", ":")``) grouped them apart too. Texts
    Kineto could have written are kept as they are, in one search of them all.
    """
    if not texts or not _NOT_KINETOS.search(_SEP.decode().join(texts)):
        return texts
    return [_as_kineto_writes(t) if _NOT_KINETOS.search(t) else t for t in texts]


def _as_kineto_writes(text: str) -> str:
    try:
        return json.dumps(json.loads(text), ensure_ascii=False)  # ", " between items, as Kineto
    except ValueError:
        return text


def _raw_text(values: list[msgspec.Raw]) -> pl.Series:
    """JSON text of each value (null when absent), split apart in one C/Rust pass and tidied
    (``tidy_json_texts``) once per distinct text."""
    if not values:
        return pl.Series(values=[], dtype=pl.String)
    joined = _SEP.join(values).decode("utf-8", errors="replace")
    parts = pl.Series([joined]).str.split(_SEP.decode()).explode()
    distinct = parts.unique().drop_nulls().to_list()
    tidy = tidy_json_texts(distinct)
    if tidy is not distinct:
        parts = parts.replace(distinct, tidy)
    return parts.replace("", None)


def _arg_series(column: str, values: list[Any]) -> pl.Series:
    if column in RAW_ARGS:
        return _raw_text(values)
    if column in FLOAT_ARGS:
        return _floats(values)
    if column in INT_ARGS:
        return _ints(values)
    return pl.Series(values, dtype=pl.String)  # arg_name


def from_events(events: list[Event], warnings: list[str] | None = None) -> pl.DataFrame:
    """The batch of msgspec-decoded events (the fallback decoder); ``warnings`` gets what was
    read as null (a time too large for a double)."""
    n = len(events)
    overflowed = 0
    cols: dict[str, pl.Series] = {}
    for c in ("ph", "cat", "name"):
        cols[c] = pl.Series(_col(events, c), dtype=pl.String)
    for c in ("pid", "tid", "id"):
        cols[c], cols[f"{c}_text"] = _int_or_text(_col(events, c))
    for c in NUMBERS:
        cols[c], cols[f"{c}_int"], cols[f"{c}_exact_ns"], k = _number(_col(events, c))
        overflowed += k
    if (note := nonfinite_note(overflowed)) and warnings is not None:
        warnings.append(note)
    given = _col(events, "args")
    cols["args_at"] = pl.Series([None if a is None else -1 for a in given], dtype=pl.Int64)
    args = [EMPTY_ARGS if a is None else a for a in given]
    for c in COMMON_ARGS:
        cols[c] = _arg_series(c, _col(args, c))
    groups: list[tuple[npt.NDArray[np.int64], tuple[str, ...]]] = [
        (np.flatnonzero(device_rows(cols["cat"]).to_numpy()), DEVICE_ARGS),
        (np.flatnonzero(memory_rows(cols["ph"], cols["name"]).to_numpy()), MEMORY_ARGS),
        (np.flatnonzero((cols["ph"] == "M").fill_null(False).to_numpy()), META_ARGS),
    ]
    for rows, names in groups:
        some = list(map(args.__getitem__, rows.tolist()))
        for c in names:
            values = _col(some, _ARG_FIELD.get(c, c))
            if c in ("stream", "stream_id"):
                ints, text = _int_or_text(values)
                cols[c] = _scatter(ints, rows, n)
                cols[f"{c}_text"] = _scatter(text, rows, n)
            else:
                cols[c] = _scatter(_arg_series(c, values), rows, n)
    return _conform(cols, n)


def _scatter(values: pl.Series, rows: npt.NDArray[np.int64], n: int) -> pl.Series:
    """``values`` placed at ``rows`` of an all-null column of length ``n``."""
    if rows.size == n:
        return values
    where = np.full(n, rows.size, dtype=np.int64)
    where[rows] = np.arange(rows.size)
    return values.append(pl.Series([None], dtype=values.dtype)).gather(where)


def _conform(cols: dict[str, pl.Series], n: int) -> pl.DataFrame:
    """The batch in ``SCHEMA``'s columns and dtypes, in one query: column by column, each
    missing column and each cast was a query of its own (300 for a file of 10 pieces)."""

    def column(name: str, dtype: type[pl.DataType]) -> pl.Expr:
        if name not in cols:
            expr = pl.repeat(None, n, dtype=dtype).alias(name)  # not a literal: n rows even alone
        else:
            expr = pl.col(name) if cols[name].dtype == dtype else pl.col(name).cast(dtype)
        return expr.fill_null("") if name == "ph" else expr

    present = pl.DataFrame([s.alias(name) for name, s in cols.items()]) if cols else pl.DataFrame(height=n)
    return present.select(column(name, dtype) for name, dtype in SCHEMA.items())


# -- from the C scanner ---------------------------------------------------------------------------
def _masked(values: npt.NDArray[Any], present: npt.NDArray[np.bool_]) -> pl.Series:
    """A column with nulls where ``present`` is false (a NumPy masked array converts in one pass)."""
    if present.all():
        return pl.Series(values)
    return pl.Series(np.ma.masked_array(values, mask=~present))


def _texts(codes: bytes, uniques: list[str], dtype: type[pl.DataType] = pl.String) -> pl.Series:
    """Codes into a table of unique strings (-1 = absent) as a text column of ``dtype``."""
    idx = np.frombuffer(codes, dtype=np.int32).astype(np.int64)
    idx[idx < 0] = len(uniques)
    return pl.Series(uniques + [None], dtype=pl.String).cast(dtype).gather(idx)


def from_scan(result: dict[str, Any], args_shift: int = 0, warnings: list[str] | None = None) -> pl.DataFrame:
    """The batch of events the C scanner read (``_scan.scan_events``' dict of buffers).

    Consumes ``result``: each buffer is popped as it is converted, so that it can be freed.
    ``args_shift``: added to ``args_at``, for events scanned from a text that is not the file's
    (a piece given a head of its own: its offsets must count from the file's start).
    ``warnings`` gets how many numbers the scanner read as null (NaN, inf: ``nonfinite``).
    """
    if (note := nonfinite_note(result.pop("nonfinite", 0))) and warnings is not None:
        warnings.append(note)
    n = int(result.pop("n"))
    cols: dict[str, pl.Series] = {}
    for name in TEXT + RAW_ARGS:
        if (got := result.pop(name, None)) is not None:
            codes, uniques = got
            if name in RAW_ARGS:
                uniques = tidy_json_texts(uniques)
            cols[name] = _texts(codes, uniques, SCHEMA[name])
    for name in INT_OR_TEXT:
        if (got := result.pop(name, None)) is not None:
            values, kind, codes, uniques = got
            k = np.frombuffer(kind, dtype=np.uint8)
            cols[name] = _masked(np.frombuffer(values, dtype=np.int64), k == 1)
            if (k == 2).any():
                cols[f"{name}_text"] = _texts(codes, uniques)
    for name in NUMBERS:
        if (got := result.pop(name, None)) is not None:
            ints, floats, kind = got
            k = np.frombuffer(kind, dtype=np.uint8)
            cols[name] = _masked(np.frombuffer(floats, dtype=np.float64), k != 0)
            cols[f"{name}_int"] = _masked(np.frombuffer(ints, dtype=np.int64), k == 1)
            if (k == 3).any():  # written with decimals: the exact ns the scanner read
                cols[f"{name}_exact_ns"] = _masked(np.frombuffer(ints, dtype=np.int64), k == 3)
    for name in (*INT_ARGS, "args_at"):
        if (got := result.pop(name, None)) is not None:
            values, present = got
            ints = np.frombuffer(values, dtype=np.int64)
            if name == "args_at" and args_shift:
                ints = ints + args_shift
            cols[name] = _masked(ints, np.frombuffer(present, dtype=np.bool_))
    for name in FLOAT_ARGS:
        if (got := result.pop(name, None)) is not None:
            cols[name] = pl.Series(np.frombuffer(got, dtype=np.float64), nan_to_null=True)
    return _conform(cols, n)
