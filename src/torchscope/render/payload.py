"""The dashboard's data: one JSON-able dict built once from a Trace (or TraceSet) and its report.

Record once, render many: the terminal summary, ``--json`` and both transports of the HTML
dashboard (the offline file and ``serve``) all read this one dict, so they cannot disagree.
It carries the analyses' report (``analysis.report.build_report``) untouched under
``"report"`` and adds what the views draw and the report does not hold: per-op and per-kernel
tables, the memory curve (decimated, peaks kept), the module tree, the timeline (typed arrays,
base64, capped to the longest events) and per-rank numbers. Every view is computed from the
Trace itself, so a report that lacks a section, or an analysis that fails, costs one view and
a warning, never the page.
"""

from __future__ import annotations

import base64
import datetime as _dt
import traceback
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import polars as pl

from torchscope.analysis.flame import MAX_NODES, flame_diff, flame_graphs
from torchscope.analysis.memory import DEVICE_TYPE_NAMES, memory_events
from torchscope.trace.model import Trace, TraceSet
from torchscope.trace.tree import nearest_ancestor

PAYLOAD_VERSION = 1
TABLE_ROWS = 500  # per-op and per-kernel rows kept for the page (sorted by time)
MEMORY_POINTS = 1500  # per device curve
TIMELINE_EVENTS = 200_000  # longest events kept for the embedded timeline
NAME = pl.col("name").cast(pl.String)


def _b64(arr: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(arr).astype(arr.dtype.newbyteorder("<")).tobytes()).decode()


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


# -- per-trace views ----------------------------------------------------------------------


def summary(trace: Trace) -> dict[str, Any]:
    ev = trace.events
    counts = {str(k): int(n) for k, n in ev.group_by("kind").len().sort("kind").iter_rows()}
    if ev.height:
        lo = int(ev["start_ns"].min())  # type: ignore[arg-type]
        hi = int((ev["start_ns"] + ev["dur_ns"]).max())  # type: ignore[arg-type]
    else:
        lo = hi = 0
    devices = sorted(int(d) for d in ev.filter(pl.col("device") >= 0)["device"].unique().to_list())
    m = trace.meta
    return {
        "events": ev.height,
        "kinds": counts,
        "start_ns": lo,
        "end_ns": hi,
        "span_ns": hi - lo,
        "steps": trace.steps.height,
        "devices": devices,
        "memory_events": trace.memory.height,
        "rank": m.rank,
        "world_size": m.world_size,
        "backend": m.backend,
        "torch_version": m.torch_version,
        "device_properties": _jsonable(list(m.device_properties)),
        "warnings": list(m.warnings),
    }


def op_table(trace: Trace, limit: int = TABLE_ROWS) -> list[dict[str, Any]]:
    """Host ops and labels by name: calls, total/self/avg/max host ns, device ns they launched."""
    ev = trace.events
    host = ev.filter(
        pl.col("kind").is_in(["cpu_op", "user_annotation"])
        & ~NAME.str.starts_with("ProfilerStep#")
        & ~NAME.str.starts_with("torchscope#")  # the runner's setup / after-last-step spans
    )
    if host.height == 0:
        return []
    dev = (
        ev.filter(pl.col("kind").is_in(["kernel", "memcpy", "memset"]) & (pl.col("op") >= 0))
        .group_by("op")
        .agg(pl.col("dur_ns").sum().alias("device_self_ns"))
        .rename({"op": "id"})
    )
    rows = (
        host.join(dev, on="id", how="left")
        .group_by("name", "kind")
        .agg(
            pl.len().alias("calls"),
            pl.col("dur_ns").sum().alias("total_ns"),
            pl.col("self_ns").sum().alias("self_ns"),
            pl.col("dur_ns").max().alias("max_ns"),
            pl.col("device_self_ns").sum().alias("device_self_ns"),
        )
        .with_columns(
            (pl.col("total_ns") // pl.col("calls")).alias("avg_ns"),
            pl.col("name").cast(pl.String),
            pl.col("kind").cast(pl.String),
        )
        .sort(["self_ns", "total_ns", "name", "kind"], descending=[True, True, False, False])
        .head(limit)
    )
    return rows.to_dicts()


def kernel_table(trace: Trace, limit: int = TABLE_ROWS) -> list[dict[str, Any]]:
    """Device work by name: calls, total/avg/min/max ns, mean occupancy, and the op that launched it."""
    ev = trace.events
    k = ev.filter(pl.col("kind").is_in(["kernel", "memcpy", "memset"]))
    if k.height == 0:
        return []
    ops = ev.select(pl.col("id").alias("op"), NAME.alias("launcher_op"))
    total = float(k["dur_ns"].sum())
    rows = (
        k.join(ops, on="op", how="left")
        .group_by("name", "kind")
        .agg(
            pl.len().alias("calls"),
            pl.col("dur_ns").sum().alias("total_ns"),
            pl.col("dur_ns").min().alias("min_ns"),
            pl.col("dur_ns").max().alias("max_ns"),
            pl.col("occupancy_pct").mean().alias("occupancy_pct"),
            # the most frequent launcher; of several as frequent, the first by name (mode's order varies)
            pl.col("launcher_op").drop_nulls().mode().sort().first().alias("op"),
            pl.col("device").first().alias("device"),
        )
        .with_columns(
            (pl.col("total_ns") // pl.col("calls")).alias("avg_ns"),
            (100.0 * pl.col("total_ns") / (total or 1.0)).round(2).alias("pct"),
            pl.col("name").cast(pl.String),
            pl.col("kind").cast(pl.String),
        )
        .sort(["total_ns", "name", "kind"], descending=[True, False, False])
        .head(limit)
    )
    return [_jsonable(r) for r in rows.to_dicts()]


def _decimate(ts: np.ndarray, val: np.ndarray, points: int) -> tuple[list[int], list[int]]:
    """At most ~2*points samples of a step curve, keeping each bucket's max and min."""
    if ts.size <= 2 * points:
        return ts.tolist(), val.tolist()
    edges = np.linspace(ts[0], ts[-1], points + 1)
    bucket = np.clip(np.searchsorted(edges, ts, side="right") - 1, 0, points - 1)
    keep = np.zeros(ts.size, dtype=bool)
    df = pl.DataFrame({"b": bucket, "v": val, "i": np.arange(ts.size)})
    g = df.group_by("b").agg(
        pl.col("i").sort_by(["v", "i"]).last().alias("hi"), pl.col("i").sort_by(["v", "i"]).first().alias("lo")
    )
    keep[g["hi"].to_numpy()] = True
    keep[g["lo"].to_numpy()] = True
    keep[[0, -1]] = True
    return ts[keep].tolist(), val[keep].tolist()


def memory_view(trace: Trace, points: int = MEMORY_POINTS, limit: int = TABLE_ROWS) -> dict[str, Any]:
    """Allocated/reserved curves per device, their peaks, and allocations by the op that made them."""
    mem = trace.memory
    if mem.height == 0:
        return {"devices": [], "ops": []}
    devices = []
    for (dtype, did), part in mem.sort("ts_ns").group_by(["device_type", "device_id"], maintain_order=True):
        ts = part["ts_ns"].to_numpy()
        alloc = part["total_allocated"].fill_null(0).to_numpy()
        from_deltas = part["total_allocated"].null_count() == part.height or not alloc.any()
        if from_deltas:
            # the file did not record running totals (2021 traces): rebuild them from the
            # deltas, relative to what was allocated when profiling started
            alloc = np.cumsum(part["bytes"].fill_null(0).to_numpy())
        reserved = part["total_reserved"].fill_null(0).to_numpy()
        t1, a1 = _decimate(ts, alloc, points)
        t2, r1 = _decimate(ts, reserved, points)
        peak_i = int(np.argmax(alloc)) if alloc.size else 0
        kind = DEVICE_TYPE_NAMES.get(int(dtype), f"device type {dtype}")  # type: ignore[call-overload]
        label = kind if int(did) < 0 or int(dtype) == 0 else f"{kind} {did}"  # type: ignore[call-overload]
        devices.append(
            {
                "device_type": int(dtype),  # type: ignore[call-overload]
                "device_id": int(did),  # type: ignore[call-overload]
                "label": label,
                "allocated": {"ts": t1, "bytes": a1},
                "reserved": {"ts": t2, "bytes": r1},
                "peak_allocated": int(alloc.max()) if alloc.size else 0,
                "peak_reserved": int(reserved.max()) if reserved.size else 0,
                "peak_ts_ns": int(ts[peak_i]) if ts.size else 0,
                "allocations": int((part["bytes"] > 0).sum()),
                "from_deltas": bool(from_deltas),
            }
        )
    ops = (
        memory_events(trace)  # with each event's op name and device label (computed once per trace)
        .with_columns(pl.col("op_name").fill_null("(no op)").alias("name"))
        .group_by("name", "device", "device_type", "device_id")
        .agg(
            (pl.col("bytes") > 0).sum().alias("allocations"),
            pl.col("bytes").filter(pl.col("bytes") > 0).sum().alias("allocated_bytes"),
            (-pl.col("bytes").filter(pl.col("bytes") < 0)).sum().alias("freed_bytes"),
            pl.col("bytes").filter(pl.col("bytes") > 0).max().alias("largest_bytes"),
        )
        .sort(["allocated_bytes", "name", "device_type", "device_id"], descending=[True, False, False, False])
        .drop("device_type", "device_id")
        .head(limit)
    )
    return {"devices": devices, "ops": _jsonable(ops)}


def module_tree(trace: Trace) -> dict[str, Any] | None:
    """``nn.Module`` scopes (``with_stack``/``with_modules`` traces) as a tree of host time."""
    ev = trace.events
    is_mod = ((pl.col("kind") == "python_function") & NAME.str.starts_with("nn.Module: ")).alias("m")
    flags = ev.select(is_mod)["m"].fill_null(False).to_numpy()
    rows = np.flatnonzero(flags)
    if rows.size == 0:
        return None
    parent = ev["parent"].fill_null(-1).to_numpy().astype(np.int64)
    anc = nearest_ancestor(parent, rows, flags)
    names = ev["name"].cast(pl.String).gather(rows).to_list()
    durs = ev["dur_ns"].gather(rows).to_numpy()
    root: dict[str, Any] = {"name": "(all)", "calls": 0, "total_ns": 0, "children": {}}
    node_of: dict[int, dict[str, Any]] = {}
    for i, (row, a) in enumerate(zip(rows.tolist(), anc.tolist(), strict=True)):
        up = node_of.get(a, root) if a >= 0 else root
        name = names[i][len("nn.Module: ") :]
        node = up["children"].get(name)
        if node is None:
            node = up["children"][name] = {"name": name, "calls": 0, "total_ns": 0, "children": {}}
        node["calls"] += 1
        node["total_ns"] += int(durs[i])
        node_of[row] = node

    def finish(n: dict[str, Any]) -> dict[str, Any]:
        kids = sorted((finish(c) for c in n["children"].values()), key=lambda c: -c["total_ns"])
        return {"name": n["name"], "calls": n["calls"], "total_ns": n["total_ns"], "children": kids}

    out = finish(root)
    out["total_ns"] = sum(c["total_ns"] for c in out["children"])
    return out


def steps_view(trace: Trace) -> dict[str, Any]:
    """Per-step duration and breakdown: the overview analysis when present, else step spans."""
    from torchscope.analysis.overview import overview

    ov = overview(trace)
    return {
        "steps": _jsonable(ov.steps),
        "breakdown_ns": _jsonable(ov.breakdown_ns),
        "host_steps": _jsonable(ov.host_steps),
        "host_breakdown_ns": _jsonable(ov.host_breakdown_ns),
        "devices": _jsonable(list(ov.devices)),
        "comm_overlap": _jsonable(ov.comm_overlap),
        "steps_from_trace": ov.steps_from_trace,
    }


def _track_label(pid: int, tid: int, device: int, threads: dict[tuple[int, int], str]) -> str:
    if device >= 0:
        return f"device {device} · stream {tid}"
    return threads.get((pid, tid)) or f"pid {pid} · thread {tid}"


def timeline(trace: Trace, max_events: int = TIMELINE_EVENTS) -> dict[str, Any]:
    """Events with a duration as typed arrays (base64): what the canvas timeline draws."""
    ev = trace.events.filter(pl.col("dur_ns") > 0)
    total = ev.height
    if total > max_events:
        ev = ev.top_k(max_events, by="dur_ns").sort("start_ns")
    if ev.height == 0:
        return {"events": 0, "total": total, "t0_ns": 0, "tracks": [], "names": [], "kinds": []}
    th = trace.threads
    labels: dict[tuple[int, int], str] = {}
    for r in th.iter_rows(named=True):
        text = r["label"] or r["thread_name"] or ""
        proc = r["process_name"] or ""
        if text or proc:
            labels[(r["pid"], r["tid"])] = " · ".join(x for x in (proc, text) if x)
    tracks = (
        ev.group_by("pid", "tid", "device")
        .agg(pl.col("start_ns").min().alias("first"), pl.col("depth").max().alias("depth"))
        .sort(["device", "pid", "tid"])
    )
    track_rows = tracks.to_dicts()
    key = tracks.select("pid", "tid", "device").with_row_index("track")
    ev = ev.join(key, on=["pid", "tid", "device"], how="left")
    names = ev["name"].cast(pl.String)
    uniq = names.unique(maintain_order=True)
    name_idx = pl.DataFrame({"name": uniq}).with_row_index("ni")
    ni = pl.DataFrame({"name": names}).join(name_idx, on="name", how="left")["ni"].to_numpy()
    kinds = [str(k) for k in ev["kind"].cast(pl.String).unique(maintain_order=True).to_list()]
    kind_idx = {k: i for i, k in enumerate(kinds)}
    ki = np.array([kind_idx[k] for k in ev["kind"].cast(pl.String).to_list()], dtype=np.uint8)
    t0 = int(ev["start_ns"].min())  # type: ignore[arg-type]
    return {
        "events": ev.height,
        "total": total,
        "t0_ns": t0,
        "tracks": [
            {
                "label": _track_label(r["pid"], r["tid"], r["device"], labels),
                "pid": r["pid"],
                "tid": r["tid"],
                "device": r["device"],
                "depth": int(r["depth"] or 0) + 1 if r["device"] < 0 else 1,
            }
            for r in track_rows
        ],
        "names": uniq.to_list(),
        "kinds": kinds,
        "start": _b64((ev["start_ns"].to_numpy() - t0).astype(np.float64)),
        "dur": _b64(ev["dur_ns"].to_numpy().astype(np.float32)),
        "track": _b64(ev["track"].to_numpy().astype(np.uint16)),
        "depth": _b64(np.clip(ev["depth"].fill_null(0).to_numpy(), 0, 255).astype(np.uint8)),
        "name": _b64(ni.astype(np.uint32)),
        "kind": _b64(ki),
    }


def run_view(
    name: str,
    trace: Trace,
    warnings: _Warnings,
    *,
    with_timeline: bool = True,
    timeline_events: int = TIMELINE_EVENTS,
) -> dict[str, Any]:
    """Everything the dashboard shows for one trace."""
    run: dict[str, Any] = {"name": name, "source": trace.meta.source}
    run["summary"] = warnings.attempt(f"{name}: summary", lambda: summary(trace), {})
    run["overview"] = warnings.attempt(f"{name}: overview", lambda: steps_view(trace))
    run["ops"] = warnings.attempt(f"{name}: operators", lambda: op_table(trace), [])
    run["kernels"] = warnings.attempt(f"{name}: kernels", lambda: kernel_table(trace), [])
    run["memory"] = warnings.attempt(
        f"{name}: memory", lambda: memory_view(trace), {"devices": [], "ops": []}
    )
    run["modules"] = warnings.attempt(f"{name}: modules", lambda: module_tree(trace))
    # the flame trees shrink with the timeline's share when a payload holds many runs
    nodes = max(300, MAX_NODES * timeline_events // TIMELINE_EVENTS)
    run["flame"] = warnings.attempt(f"{name}: flame graphs", lambda: flame_graphs(trace, max_nodes=nodes), {})
    if with_timeline:
        run["timeline"] = warnings.attempt(f"{name}: timeline", lambda: timeline(trace, timeline_events))
    return run


def _report(subject: Trace | TraceSet, warnings: _Warnings) -> Any:
    def build() -> Any:
        from torchscope.analysis.report import build_report

        return _jsonable(build_report(subject))

    return warnings.attempt("report", build)


def distributed_view(runs: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    """Per rank: mean step, computation, communication, overlap; the slowest rank is flagged."""
    rows = []
    for r in runs:
        ov = r.get("overview") or {}
        steps = ov.get("steps") or []
        co = ov.get("comm_overlap") or []
        n = max(len(steps), 1)
        rows.append(
            {
                "run": r["name"],
                "rank": (r.get("summary") or {}).get("rank"),
                "steps": len(steps),
                "step_ns": sum(s.get("dur_ns", 0) for s in steps) / n,
                "computation_ns": sum(c.get("computation_ns", 0) for c in co) / n,
                "communication_ns": sum(c.get("communication_ns", 0) for c in co) / n,
                "overlap_ns": sum(c.get("overlap_ns", 0) for c in co) / n,
            }
        )
    if len(rows) < 2:
        return None
    slow = max(rows, key=lambda x: x["step_ns"])
    fast = min(rows, key=lambda x: x["step_ns"])
    for x in rows:
        x["straggler"] = x is slow and slow["step_ns"] > 1.05 * fast["step_ns"]
        x["vs_fastest_pct"] = (
            round(100.0 * (x["step_ns"] / fast["step_ns"] - 1.0), 1) if fast["step_ns"] else None
        )
    return rows


def op_diff(a: dict[str, Any], b: dict[str, Any], limit: int = TABLE_ROWS) -> list[dict[str, Any]]:
    """Per op name: calls and self/total host time in A and B and the change, biggest first."""
    fa = {r["name"]: r for r in a.get("ops") or []}
    fb = {r["name"]: r for r in b.get("ops") or []}
    out = []
    for name in fa.keys() | fb.keys():
        ra, rb = fa.get(name, {}), fb.get(name, {})
        sa, sb = int(ra.get("self_ns") or 0), int(rb.get("self_ns") or 0)
        out.append(
            {
                "name": name,
                "calls_a": int(ra.get("calls") or 0),
                "calls_b": int(rb.get("calls") or 0),
                "self_ns_a": sa,
                "self_ns_b": sb,
                "delta_ns": sb - sa,
                "delta_pct": round(100.0 * (sb - sa) / sa, 1) if sa else None,
            }
        )
    out.sort(key=lambda r: (-abs(r["delta_ns"]), r["name"]))
    return out[:limit]


def build_payload(
    subject: Trace | TraceSet,
    *,
    title: str | None = None,
    compare: Trace | None = None,
    extra: Mapping[str, Any] | None = None,
    with_timeline: bool = True,
) -> dict[str, Any]:
    """The dashboard dict for a trace, a set of traces (ranks, workers), or two traces to diff.

    ``extra`` adds top-level sections (``run``: the ``torchscope run`` facts, ``hotspots``,
    ``env``, ``accuracy``); the page renders the ones it knows and ignores the rest.
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
        run_view(name, t, warnings, with_timeline=with_timeline, timeline_events=per_run) for name, t in items
    ]
    payload: dict[str, Any] = {
        "version": PAYLOAD_VERSION,
        "title": title or _short_name(source) or "torchscope report",
        "source": source,
        "generated": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "runs": runs,
        "report": _report(subject, warnings),
        "distributed": distributed_view(runs),
        "diff": None,
    }
    if compare is not None:
        other = run_view(_short_name(compare.meta.source) or "B", compare, warnings, with_timeline=False)

        def peer_diff() -> Any:
            from torchscope.analysis.diff import diff_traces

            base = items[0][1]
            return _jsonable(diff_traces(base, compare).to_dict())

        payload["diff"] = {
            "a": runs[0]["name"],
            "b": other["name"],
            "ops": op_diff(runs[0], other),
            "summary_a": runs[0]["summary"],
            "summary_b": other["summary"],
            "report": warnings.attempt("diff", peer_diff),
            "flame": warnings.attempt("flame diff", lambda: flame_diff(items[0][1], compare), {}),
        }
    for key, value in (extra or {}).items():
        payload[key] = _jsonable(value)
    payload["warnings"] = list(warnings)
    return _jsonable(payload)  # type: ignore[no-any-return]


def _short_name(source: str) -> str:
    name = source.rstrip("/").split("/")[-1]
    for suffix in (".gz", ".json", ".pt.trace"):
        name = name.removesuffix(suffix)
    return name
