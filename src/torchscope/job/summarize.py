"""The map step: one rank (all its cycles) reduced to a small, JSON-able rank summary.

Runs in a worker process (or a Ray task), so it takes and returns plain data only. Each cycle's
Trace is read, analysed and dropped before the next is read: a worker holds one Trace at a time
and hands back a few kilobytes (step times, the breakdown, top ops and kernels per step, one row
per collective, the advisor's findings), whatever the size of the files.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from torchscope.analysis import names
from torchscope.analysis.advisor import Context, advise
from torchscope.analysis.kernels import kernel_stats
from torchscope.analysis.overview import BREAKDOWN_CATEGORIES, HOST_CATEGORIES, exit_step, profiler_steps
from torchscope.errors import TraceError
from torchscope.trace.cut import was_cut
from torchscope.trace.dialect import CYCLE_ENDED_BY_KEY
from torchscope.trace.model import Trace

TOP_OPS = 40  # per rank and cycle: enough to find what a straggler does more of
TOP_KERNELS = 20
_COLL = re.compile(
    r"(all_?reduce|all_?gather|reduce_?scatter|broadcast|all_?to_?all|send_?recv|send|recv|barrier|reduce)",
    re.I,
)
# point-to-point transfers (pipeline stages) are no synchronisation point of the whole group
POINT_TO_POINT = ("send", "recv")
# not work a rank does (what a straggler "does more of" compares): steps and communication
_NOT_WORK = names.PROFILER_STEP | names.HOST_COLLECTIVE | names.DISPATCHED_COLLECTIVE
DEVICE_WORK = ("Kernel", "Memcpy", "Memset")  # as render.console decides device vs host categories


def collective_name(raw: str) -> str:
    """``allreduce`` for ``ncclKernel_AllReduce_RING_LL_Sum_float(...)`` and ``gloo:all_reduce``."""
    m = _COLL.search(raw)
    return m.group(1).lower().replace("_", "") if m else raw.split("(")[0]


def collectives(trace: Trace) -> pl.DataFrame:
    """One row per collective as this rank saw it: group, index in the group, name, start, end, bytes.

    On a GPU the communication kernels are the collectives (each process group has its own
    stream, so the group is the stream); without them (gloo, CPU jobs) the ``gloo:``/``nccl:``
    annotations that span each collective's wait and transfer are. The trace's records carry no
    process group name or sequence number today, so collectives are matched across ranks by
    their order within a group.
    """
    ev = trace.events
    dev = ev.filter((pl.col("kind") == "kernel") & names.COMM_KERNEL)
    if dev.height:
        rows = dev.select(
            pl.format("stream {}", pl.col("stream")).alias("group"),
            pl.col("name").cast(pl.String),
            "start_ns",
            (pl.col("start_ns") + pl.col("dur_ns")).alias("end_ns"),
            "bytes",
        )
    else:
        host = ev.filter(
            (pl.col("kind") == "user_annotation") & names.name_matches(r"^(gloo|nccl|rccl|mpi|ucc):")
        )
        rows = host.select(
            pl.lit("host").alias("group"),
            pl.col("name").cast(pl.String),
            "start_ns",
            (pl.col("start_ns") + pl.col("dur_ns")).alias("end_ns"),
            "bytes",
        )
    rows = rows.with_columns(
        pl.col("name").map_elements(collective_name, return_dtype=pl.String).alias("name")
    ).filter(~pl.col("name").is_in(POINT_TO_POINT))
    rows = rows.sort("group", "start_ns").with_columns(
        pl.int_range(pl.len()).over("group").cast(pl.Int64).alias("index")
    )
    rows = rows.filter(~pl.col("name").is_in(POINT_TO_POINT))
    return rows.select("group", "index", "name", "start_ns", "end_ns", "bytes")


def compact(rows: pl.DataFrame) -> dict[str, dict[str, Any]]:
    """Collective rows per group as NumPy arrays (8 bytes a value, not a Python int each): a job
    of thousands of ranks with thousands of collectives each stays tens of MB in the parent."""
    out: dict[str, dict[str, Any]] = {}
    for (group,), g in rows.sort("group", "index").group_by("group", maintain_order=True):
        names = g["name"].to_list()
        distinct = list(dict.fromkeys(names))
        code = {n: i for i, n in enumerate(distinct)}
        out[str(group)] = {
            "start_ns": g["start_ns"].to_numpy(),
            "end_ns": g["end_ns"].to_numpy(),
            "name_code": np.fromiter((code[n] for n in names), dtype=np.uint16, count=len(names)),
            "names": distinct,
        }
    return out


def _per_step(df: pl.DataFrame, key: str, value: str, steps: int, top: int) -> dict[str, float]:
    df = df.filter(pl.col(value) > 0).sort([value, key], descending=[True, False]).head(top)
    return {str(k): float(v) / steps for k, v in zip(df[key], df[value], strict=True)}


def _floor(kept: dict[str, float], top: int) -> float:
    """What a name absent from a cut table may still have had per step: the smallest value
    kept when the table was cut at ``top``, else 0 (every name with any time was kept)."""
    return min(kept.values()) if len(kept) >= top else 0.0


def summarize_cycle(trace: Trace, *, last: bool = True) -> dict[str, Any]:
    """A cycle's small summary (see the module doc); the Trace can be dropped afterwards.
    ``last``: whether it is its rank's last cycle (the only one the profile's exit can end).

    A last step that is the profile's exit (``exit_step``) is left out of the steps, the
    breakdowns and the per-step times; a cycle that holds nothing else has no steps and no
    findings (advice on an exit is noise)."""
    ctx = Context(trace)
    ov = ctx.overview
    # the overview leaves out the exit step of a cycle with other steps; one that is only the
    # exit (a step at most) keeps it there, and is no step here
    alone = not ov.exit_step_left_out and exit_step(trace, ov.steps, ov.steps_from_trace, last)
    keep = 0 if alone else ov.steps.height
    # per-step op and kernel times divide whole-trace totals: a cut trace's breakdown keeps only
    # its complete steps (``trace.cut``), so those totals are spread over every step it has
    dropped = ov.exit_step_left_out or alone
    steps = max(profiler_steps(trace).height - int(dropped) if was_cut(trace.meta) else keep, 1)
    ops = ctx.operators.filter(pl.col("kind") == "cpu_op")
    work = trace.events.filter(_NOT_WORK)["name"].cast(pl.String).unique().to_list()
    ops = ops.filter(~pl.col("name").is_in(work))
    kernels = kernel_stats(trace).filter(~names.COMM_KERNEL)  # work, as ``_NOT_WORK`` says
    n = max(ov.comm_overlap.height, 1)
    findings = []
    for f in advise(trace, ctx=ctx) if keep else ():
        d = f.to_dict()
        d["impact"] = f.impact
        findings.append(d)

    def per_step(values: dict[str, float], cats: tuple[str, ...]) -> dict[str, float]:
        return {c: 0.0 if alone else float(values[c]) for c in (*cats, "Total")}

    device_breakdown = per_step(ov.breakdown_ns, BREAKDOWN_CATEGORIES)
    host_breakdown = per_step(ov.host_breakdown_ns, HOST_CATEGORIES)
    # the categories the single-trace report shows: device ones when the device worked, else the
    # host's (a CPU-only run is Operators/DataLoader/Optimizer/..., not "CPU Exec")
    device = any(ov.breakdown_ns[c] for c in DEVICE_WORK)
    cats, source = (BREAKDOWN_CATEGORIES, device_breakdown) if device else (HOST_CATEGORIES, host_breakdown)
    return {
        "steps": keep,
        "events": trace.events.height,
        "categories": list(cats),
        "steps_from_trace": ov.steps_from_trace,
        # the exit step left out (``exit_step``); True with no steps kept: the cycle is the exit
        "exit_step": dropped,
        "ended_by": trace.meta.extra.get(CYCLE_ENDED_BY_KEY),  # ours: schedule, stop or error
        "step_ns": [int(x) for x in ov.steps["dur_ns"].head(keep).to_list()],
        "breakdown_ns": {c: float(source[c]) for c in (*cats, "Total")},
        # both systems, so that a run whose cycles differ (one without device work) is reduced
        # in one of them (``reduce.one_category_system``)
        "device_worked": device,
        "device_breakdown_ns": device_breakdown,
        "host_breakdown_ns": host_breakdown,
        "comm_overlap_ns": {
            c: 0.0 if alone else float(ov.comm_overlap[c].sum()) / n
            for c in ("computation_ns", "communication_ns", "overlap_ns", "other_ns")
        },
        "ops_ns": (ops_ns := _per_step(ops, "name", "host_self_ns", steps, TOP_OPS)),
        "ops_floor_ns": _floor(ops_ns, TOP_OPS),
        "kernels_ns": (kernels_ns := _per_step(kernels, "name", "total_ns", steps, TOP_KERNELS)),
        "kernels_floor_ns": _floor(kernels_ns, TOP_KERNELS),
        "collectives": compact(collectives(trace)),
        "cut": was_cut(trace.meta),  # a damaged file the reader cut: its collectives end early
        # the device models the trace names (``reduce.mixed_devices``: traces of other jobs)
        "devices": sorted(trace.meta.device_models),
        "findings": findings,
        "warnings": list(trace.meta.warnings),
    }


def summarize_rank(task: dict[str, Any]) -> dict[str, Any]:
    """The map function: ``task`` = run, rank, files (cycles in order), optional ``view_dir``.

    Plain data in, plain data out, so the same function runs in a local process pool and as a
    Ray task. A cycle whose file cannot be read is skipped and named in ``skipped``.
    """
    from torchscope.trace.reader import read_chrome

    out: dict[str, Any] = {
        "run": task["run"],
        "rank": task["rank"],
        "world_size": task.get("world_size"),
        "backend": task.get("backend"),
        "cycles": [],
        "skipped": [],
        "views": [],
    }
    root = Path(task["root"]) if task.get("root") else None
    for i, f in enumerate(task["files"]):
        # named as the job's other warnings name files: relative to its directory
        shown = Path(f).relative_to(root) if root is not None and Path(f).is_relative_to(root) else f
        try:
            trace = read_chrome(Path(f))
        except TraceError as exc:
            out["skipped"].append(f"skipped {shown}: {exc.problem}")
            continue
        try:
            cycle = summarize_cycle(trace, last=i == len(task["files"]) - 1)
        except Exception as exc:  # noqa: BLE001 - one rank's failed analysis must not lose the job
            out["skipped"].append(f"skipped {shown}: analysis failed ({type(exc).__name__}: {exc})")
            continue
        cycle["cycle"] = i
        cycle["file"] = str(f)
        out["cycles"].append(cycle)
        if task.get("view_dir"):
            out["views"].append(_write_view(trace, Path(task["view_dir"]), task, i))
        del trace
    return out


def _write_view(trace: Trace, view_dir: Path, task: dict[str, Any], cycle: int) -> str:
    """The rank's full single-trace dashboard, written as a sibling file of the job's page."""
    from torchscope.render.html import write_html
    from torchscope.render.payload import build_payload

    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", str(task["run"]))
    name = f"{safe}-rank{task['rank']}" + (f"-cycle{cycle}" if len(task["files"]) > 1 else "") + ".html"
    write_html(
        build_payload(trace, title=f"{task['run']} rank {task['rank']} cycle {cycle}"), view_dir / name
    )
    return f"{view_dir.name}/{name}"  # relative to the job's page, which sits beside the folder
