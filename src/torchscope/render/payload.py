"""The dashboard's data: the analyses' report plus the view plumbing the page draws.

One report, many renderers: the terminal summary, ``--json`` and both transports of the HTML
dashboard (the offline file and ``serve``) all read the report ``analysis.report.build_report``
made, so they cannot disagree; nothing here computes an analysis. The payload embeds that
report under ``"report"`` (long names cut for display; ``full_report`` keeps them) and adds
only what is drawing, not analysis: the memory curves (decimated, peaks kept) and the
timeline (packed typed arrays, the whole trace up to a cap, details only where present). A view that fails to build
costs that view and a warning, never the page.
"""

from __future__ import annotations

import base64
import datetime as _dt
import gzip
import json
import os
import traceback
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import polars as pl

from torchscope.analysis import keys as K
from torchscope.analysis.flame import MAX_NODES, flame_diff, flame_graphs
from torchscope.analysis.memory import memory_timeline
from torchscope.analysis.report_model import units_of
from torchscope.render.text import DISPLAY_CHARS, cut, cut_strings
from torchscope.trace.model import Trace, TraceSet

PAYLOAD_VERSION = 2  # 2: the views read the report; runs hold only curves and the timeline
MEMORY_POINTS = 1500  # per device curve
TIMELINE_EVENTS = 1_000_000  # events with a duration the embedded timeline keeps (the longest, past it)


def _jsonable(value: Any) -> Any:
    """Make analysis output JSON-safe: numpy scalars, DataFrames, dataclasses, NaN -> None."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if np.isfinite(value) else None
    if isinstance(value, np.generic):
        return _jsonable(value.item())
    if isinstance(value, np.ndarray):
        return [_jsonable(v) for v in value.tolist()]
    if isinstance(value, pl.DataFrame):
        return [_jsonable(r) for r in value.to_dicts()]
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [_jsonable(v) for v in value]
    if hasattr(value, "to_dict"):
        return _jsonable(value.to_dict())
    if hasattr(value, "__dataclass_fields__"):
        return {k: _jsonable(getattr(value, k)) for k in value.__dataclass_fields__}
    return str(value)


class _Warnings(list[str]):
    def attempt(self, what: str, fn: Callable[[], Any], default: Any = None) -> Any:
        """Run one view's builder; on failure keep the page and record why."""
        try:
            return fn()
        except ImportError as exc:
            self.append(f"{what}: not available ({exc.name or exc})")
        except Exception as exc:  # noqa: BLE001 - one failed view must not lose the others
            last = traceback.extract_tb(exc.__traceback__)[-1]
            self.append(f"{what}: {type(exc).__name__}: {exc} ({last.filename.split('/')[-1]}:{last.lineno})")
        return default


# -- view plumbing: what the page draws and the report does not hold -------------------


def _decimate(ts: np.ndarray, val: np.ndarray, points: int) -> tuple[list[int], list[int]]:
    """At most ~2*points samples of a step curve, keeping each bucket's max and min."""
    if ts.size <= 2 * points:
        return ts.tolist(), val.tolist()
    edges = np.linspace(ts[0], ts[-1], points + 1)
    bucket = np.clip(np.searchsorted(edges, ts, side="right") - 1, 0, points - 1)
    keep = np.zeros(ts.size, dtype=bool)
    df = pl.DataFrame({"b": bucket, "v": val, "i": np.arange(ts.size)})
    g = df.group_by("b").agg(
        pl.col("i").sort_by(["v", "i"]).last().alias("hi"),
        pl.col("i").sort_by(["v", "i"]).first().alias("lo"),
    )
    keep[g["hi"].to_numpy()] = True
    keep[g["lo"].to_numpy()] = True
    keep[[0, -1]] = True
    return ts[keep].tolist(), val[keep].tolist()


def memory_curves(trace: Trace, points: int = MEMORY_POINTS) -> list[dict[str, Any]]:
    """Allocated/reserved curves per device (``memory_timeline``), decimated, times in µs since
    the trace's start. The peaks and tables are the report's (``memory``), not computed here."""
    tl = memory_timeline(trace)
    if tl.height == 0:
        return []
    t0 = int(trace.events["start_ns"].min() or 0) if trace.events.height else 0  # type: ignore[arg-type]
    out = []
    for (device,), part in tl.group_by(["device"], maintain_order=True):
        ts = (part["ts_ns"].to_numpy() - t0) / 1e3
        alloc = part["allocated_bytes"].fill_null(0).to_numpy()
        reserved = part["reserved_bytes"].fill_null(0).to_numpy()
        t1, a1 = _decimate(ts, alloc, points)
        t2, r1 = _decimate(ts, reserved, points)
        out.append(
            {
                "device": str(device),
                "allocated": {"offset_us": t1, "bytes": a1},
                "reserved": {"offset_us": t2, "bytes": r1},
            }
        )
    return out


def _track_label(pid: int, tid: int, device: int, threads: dict[tuple[int, int], str]) -> str:
    if device >= 0:
        return f"stream {tid}"
    return threads.get((pid, tid)) or f"thread {tid}"


def _pack(*arrays: np.ndarray) -> str:
    """Little-endian arrays, each padded to 8 bytes, gzipped, base64: the page inflates them with
    the browser's own ``DecompressionStream`` (sorted starts and small ints compress 3-6x)."""
    parts = []
    for arr in arrays:
        raw = np.ascontiguousarray(arr).astype(arr.dtype.newbyteorder("<")).tobytes()
        parts.append(raw + b"\0" * (-len(raw) % 8))
    return base64.b64encode(_gzip(b"".join(parts))).decode()


def _gzip(data: bytes) -> bytes:
    """The page's packed data compressed fast: level 1 is ~5x faster than level 6 and ~20%
    larger (on nccl_rank1_of_2: 27 ms vs 131 ms for the details, 1.0 MB vs 0.8 MB)."""
    return gzip.compress(data, compresslevel=1, mtime=0)


# the per-event columns the details panel shows, where an event has them (the Trace's names)
DETAIL_COLUMNS = (
    "input_dims",
    "input_types",
    "concrete_inputs",
    "grid",
    "block",
    "registers_per_thread",
    "shared_memory",
    "blocks_per_sm",
    "warps_per_sm",
    "occupancy_pct",
    "bytes",
    "correlation",
    "external_id",
    "seq",
    "args",
)
# the packed arrays, in order: (field, dtype); the page decodes them by this list
TIMELINE_LAYOUT = (
    ("start", "f8"),  # ns since the trace's first event
    ("dur", "f8"),  # ns
    ("name", "u4"),  # index into names
    ("parent", "i4"),  # enclosing event's index in these arrays, -1 at the root (the stack)
    ("op", "i4"),  # device/runtime work: the launching op's index, -1 if none (the flows)
    ("track", "u2"),
    ("row", "u1"),  # row inside the track: host nesting depth; device annotations below kernels
    ("kind", "u1"),
)
MAX_ROWS = 32  # deeper host nesting is drawn on the last row


def timeline(trace: Trace, max_events: int = TIMELINE_EVENTS) -> dict[str, Any]:
    """Every event with a duration (up to ``max_events``, else the longest), as packed arrays.

    The page draws them with level of detail, searches their interned names, and shows an
    event's details (``details``: only the events that have any, inflated on first click), its
    stack (the ``parent`` chain) and its flows (``op``: device work to its launching op).
    """
    ev = trace.events.filter(pl.col("dur_ns") > 0)
    total = ev.height
    if total > max_events:
        ev = ev.top_k(max_events, by="dur_ns").sort("id")
    if ev.height == 0:
        return {"events": 0, "total": total, "t0_ns": 0, "tracks": [], "names": [], "kinds": []}
    th = trace.threads
    labels: dict[tuple[int, int], str] = {}
    procs: dict[int, str] = {}
    for r in th.iter_rows(named=True):
        text = r["label"] or r["thread_name"] or ""
        if text:
            labels[(r["pid"], r["tid"])] = text
        if r["process_name"] or r.get("process_label"):
            procs[r["pid"]] = r["process_name"] or r["process_label"]
    ev = ev.with_columns(
        pl.when(pl.col("device") < 0)
        .then(pl.col("depth").fill_null(0).clip(0, MAX_ROWS - 1))
        .when(pl.col("kind") == "device_annotation")
        .then(1)
        .otherwise(0)
        .cast(pl.UInt8)
        .alias("row")
    )
    tracks = (
        ev.group_by("pid", "tid", "device")
        .agg(pl.col("row").max().alias("rows"))
        .sort(["device", "pid", "tid"])
    )
    key = tracks.select("pid", "tid", "device").with_row_index("track")
    ev = ev.join(key, on=["pid", "tid", "device"], how="left", maintain_order="left")
    # the Trace's row ids (parent, op) to indices in these arrays
    index = np.full(trace.events.height + 1, -1, dtype=np.int64)
    ids = ev["id"].to_numpy()
    index[ids] = np.arange(ev.height)

    def to_index(col: str) -> np.ndarray:
        raw = ev[col].fill_null(-1).to_numpy().astype(np.int64)
        return np.where(raw >= 0, index[raw], -1).astype(np.int32)

    names = ev["name"].cast(pl.String)
    uniq = names.unique(maintain_order=True)
    name_idx = pl.DataFrame({"name": uniq}).with_row_index("ni")
    ni = pl.DataFrame({"name": names}).join(name_idx, on="name", how="left", maintain_order="left")["ni"]
    kinds = [str(k) for k in ev["kind"].cast(pl.String).unique(maintain_order=True).to_list()]
    kind_idx = {k: i for i, k in enumerate(kinds)}
    ki = ev["kind"].cast(pl.String).replace_strict(kind_idx, return_dtype=pl.UInt8)
    t0 = int(trace.events["start_ns"].min())  # type: ignore[arg-type]  # the trace's start, as the report's
    columns = {
        "start": (ev["start_ns"].to_numpy() - t0).astype(np.float64),
        "dur": ev["dur_ns"].to_numpy().astype(np.float64),
        "name": ni.to_numpy().astype(np.uint32),
        "parent": to_index("parent"),
        "op": to_index("op"),
        "track": ev["track"].to_numpy().astype(np.uint16),
        "row": ev["row"].to_numpy(),
        "kind": ki.to_numpy(),
    }
    return {
        "events": ev.height,
        "total": total,
        "t0_ns": t0,
        "tracks": [
            {
                "label": _track_label(r["pid"], r["tid"], r["device"], labels),
                "group": f"device {r['device']}"
                if r["device"] >= 0
                else procs.get(r["pid"]) or f"process {r['pid']}",
                "pid": r["pid"],
                "tid": r["tid"],
                "device": r["device"],
                "rows": int(r["rows"]) + 1,
            }
            for r in tracks.iter_rows(named=True)
        ],
        "names": [cut(n) for n in uniq.to_list()],
        "kinds": kinds,
        "layout": [list(f) for f in TIMELINE_LAYOUT],
        "packed": _pack(*(columns[f].astype(dt) for f, dt in TIMELINE_LAYOUT)),
        "details": _details(ev),
    }


def _details(ev: pl.DataFrame) -> str:
    """The details columns, only for the events that have one (gzipped JSON, base64):
    ``{"index": [event index...], column: [value or null, ...]}``. Strings stay strings.

    Built column by column: only the rare long strings are cut in Python, and non-finite
    floats become null in Polars (a walk over every value made this 0.4 s of a 0.6 s timeline
    on a 200k-event trace).
    """
    present = [c for c in DETAIL_COLUMNS if c in ev.columns and ev[c].null_count() < ev.height]
    if not present:
        return ""
    rows = ev.with_row_index("index").filter(pl.any_horizontal(pl.col(c).is_not_null() for c in present))
    table: dict[str, Any] = {"index": rows["index"].to_list()}
    for c in present:
        table[c] = _detail_values(rows[c])
    return base64.b64encode(_gzip(msgspec.json.encode(table))).decode()


def _detail_values(col: pl.Series) -> list[Any]:
    """One details column as JSON-able values: long strings cut, non-finite floats null."""
    if col.dtype == pl.String:
        values = col.to_list()
        # by bytes (stored with each string), never fewer than its characters: counting
        # characters reads every string, which ``cut`` then does for the few long ones only
        for i in np.flatnonzero((col.str.len_bytes() > DISPLAY_CHARS).fill_null(False).to_numpy()):
            values[i] = cut(values[i])
        return values
    if col.dtype.is_float():
        return col.set(~col.is_finite().fill_null(True), None).to_list()  # type: ignore[arg-type]
    return col.to_list()


def run_view(
    name: str,
    trace: Trace,
    warnings: _Warnings,
    *,
    with_timeline: bool = True,
    timeline_events: int = TIMELINE_EVENTS,
    views: bool = True,
) -> dict[str, Any]:
    """What the dashboard draws for one trace beside its report: memory curves, flame graphs,
    the timeline. ``views=False``: only the run's name and source, for a summary or JSON that
    draws none of them (on nccl_rank1_of_2 they were 0.18 s of ``report --json``'s 1.2 s)."""
    run: dict[str, Any] = {"name": name, "source": trace.meta.source}
    if not views:
        return run
    run["memory_curves"] = warnings.attempt(f"{name}: memory curves", lambda: memory_curves(trace), [])
    # the flame trees (analysis.flame) shrink with the timeline's share when a payload holds many runs
    nodes = max(300, MAX_NODES * timeline_events // TIMELINE_EVENTS)
    run["flame"] = warnings.attempt(
        f"{name}: flame graphs", lambda: cut_strings(flame_graphs(trace, max_nodes=nodes)), {}
    )
    if with_timeline:
        run["timeline"] = warnings.attempt(f"{name}: timeline", lambda: timeline(trace, timeline_events))
    return run


def _report(subject: Trace | TraceSet, warnings: _Warnings) -> Any:
    def build() -> Any:
        from torchscope.analysis.report import build_report

        return build_report(subject)

    return warnings.attempt("report", build)


def build_payload(
    subject: Trace | TraceSet,
    *,
    title: str | None = None,
    compare: Trace | None = None,
    extra: Mapping[str, Any] | None = None,
    with_timeline: bool = True,
    views: bool = True,
) -> dict[str, Any]:
    """The dashboard dict for a trace, a set of traces (ranks, workers), or two traces to diff.

    ``report`` is the analyses' report (``analysis.report.build_report``): every number the
    page's tables show, as ``--json`` prints it (names cut for display). ``runs`` add the
    view plumbing per trace. ``extra`` adds top-level sections (``run``: the ``torchscope
    run`` facts, ``hotspots``, ``env``, ``accuracy``); the page renders the ones it knows.
    Use ``report_of_payload`` for the full, uncut report. ``views=False`` leaves out what only
    the page draws (``run_view``): for the terminal summary and ``--json``.
    """
    warnings = _Warnings()
    items: list[tuple[str, Trace]]
    if isinstance(subject, TraceSet):
        warnings.extend(subject.skipped)  # files of the directory that were not read, and why
        items = list(subject.items())
        source = subject.source
    else:
        items = [(_short_name(subject.meta.source) or "trace", subject)]
        source = subject.meta.source
    # the page's size stays bounded however many ranks or workers there are
    per_run = max(20_000, TIMELINE_EVENTS // max(1, len(items)))
    runs = [
        run_view(name, t, warnings, with_timeline=with_timeline, timeline_events=per_run, views=views)
        for name, t in items
    ]
    report = _report(subject, warnings)
    payload: dict[str, Any] = {
        "version": PAYLOAD_VERSION,
        "title": title or _short_name(source) or "torchscope report",
        "source": source,
        "generated": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "runs": runs,
        "report": report,
        "diff": None,
    }
    if compare is not None:

        def peer_diff() -> Any:
            from torchscope.analysis.diff import diff_traces

            return _jsonable(diff_traces(items[0][1], compare).to_dict())

        d = warnings.attempt("diff", peer_diff)
        a_name, b_name = runs[0]["name"], _short_name(compare.meta.source) or "B"
        if a_name == b_name:  # two runs' traces/step_40.pt.trace.json: both were "step_40"
            a_name, b_name = distinct_labels(source, compare.meta.source)
        payload["diff"] = {
            "a": a_name,
            "b": b_name,
            "report": d,
            "units": units_of(*(d or {}).get(K.DIFF_CHANGES, [])[:1], d or {}),
            "flame": warnings.attempt(
                "flame diff", lambda: cut_strings(flame_diff(items[0][1], compare)), {}
            ),
        }
    for key, value in (extra or {}).items():
        payload[key] = _jsonable(value)
    payload["warnings"] = list(warnings)
    payload["report"] = None  # JSON-able already; not walked twice
    out = Payload(_jsonable(payload))
    # the page (offline or served) gets names cut for display; --json the full report
    out["report"] = cut_strings(report)
    out.full_report = report
    return out


class Payload(dict[str, Any]):
    """The page's dict, which also holds the uncut report (``full_report``) for ``--json``."""

    full_report: dict[str, Any] | None = None


def full_report(payload: dict[str, Any]) -> dict[str, Any] | None:
    """The report a payload was built from, long names uncut (what ``--json`` prints)."""
    if isinstance(payload, Payload) and payload.full_report is not None:
        return payload.full_report
    return payload.get("report")


def distinct_labels(a: str, b: str) -> tuple[str, str]:
    """Short names that tell A and B apart: the file names, or when those are equal (two runs'
    ``traces/step_8.pt.trace.json``) the shortest path suffixes that differ (``base/traces/...``
    vs ``slow/traces/...``, joined with ``/``)."""
    # as written, made absolute: resolved, two runs' links to one file were both "step_40"
    pa, pb = Path(os.path.abspath(a)).parts, Path(os.path.abspath(b)).parts
    for k in range(1, max(len(pa), len(pb)) + 1):
        la, lb = "/".join(pa[-k:]), "/".join(pb[-k:])
        if la != lb:
            return la, lb
    return Path(a).name, Path(b).name  # the same file twice


def _short_name(source: str) -> str:
    name = source.rstrip("/").split("/")[-1]
    for suffix in (".gz", ".json", ".pt.trace"):
        name = name.removesuffix(suffix)
    return name


def unpack_timeline(tl: Mapping[str, Any]) -> dict[str, Any]:
    """The timeline's packed arrays and details as the page decodes them (for tests and tools):
    each ``TIMELINE_LAYOUT`` field as a numpy array, and ``details`` as {event index: row}."""
    raw = gzip.decompress(base64.b64decode(tl["packed"]))
    n, off = tl["events"], 0
    out: dict[str, Any] = {}
    for field, dt in tl["layout"]:
        dtype = np.dtype("<" + dt)
        out[field] = np.frombuffer(raw, dtype=dtype, count=n, offset=off)
        off += -(-n * dtype.itemsize // 8) * 8
    details: dict[int, dict[str, Any]] = {}
    if tl.get("details"):
        table = json.loads(gzip.decompress(base64.b64decode(tl["details"])))
        for i, e in enumerate(table.pop("index")):
            details[e] = {k: v[i] for k, v in table.items() if v[i] is not None}
    out["details"] = details
    return out
