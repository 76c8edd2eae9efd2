"""Overview: where the step time goes, per step and on average, and how busy each device is.

This is the TensorBoard profiler plugin's overview page as a plain function. Steps are the
``ProfilerStep#N`` spans, stretched to cover the device work their host side launched (the
plugin's rule, so a step ends when its last kernel ends, not when the CPU moved on); with no
steps the whole trace is one step. Each instant of a step is given to exactly one category by
the plugin's priority rule, Kernel > Memcpy > Memset > Communication > Runtime > DataLoader >
CPU Exec > Other, so the categories add up to the step time. CPU-only runs also get a host
breakdown that names what a CPU user can change: operators, the DataLoader, the optimizer,
Python outside ops (time no op, collective, runtime call or device work accounts for, as the
``python_outside_ops`` rule counts it), and the rest (collective and runtime waits).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from torchscope.analysis import intervals as iv
from torchscope.analysis import names
from torchscope.analysis.frames import kinds, memo
from torchscope.analysis.outside import accounted_spans
from torchscope.trace.cut import complete_steps
from torchscope.trace.dialect import CYCLE_CUT, CYCLE_ENDED_BY_KEY
from torchscope.trace.model import Trace
from torchscope.trace.schema import step_number

BREAKDOWN_CATEGORIES: tuple[str, ...] = (
    "Kernel",
    "Memcpy",
    "Memset",
    "Communication",
    "Runtime",
    "DataLoader",
    "CPU Exec",
    "Other",
)
HOST_CATEGORIES: tuple[str, ...] = (
    "Operators",
    "Communication",
    "DataLoader",
    "Optimizer",
    "Python outside ops",
    "Other",
)
# who gets an instant two host categories cover: communication first, as in the device breakdown,
# so a CPU-only run's Communication is the time communication_heavy reports (a gloo all_reduce on
# its worker threads is communication, not "Other")
HOST_PRIORITY: tuple[str, ...] = (
    "Communication",
    "DataLoader",
    "Optimizer",
    "Operators",
    "Python outside ops",
    "Other",
)


@dataclass(frozen=True)
class DeviceMetrics:
    """The overview's per-device numbers (fractions in 0..1, times in ns)."""

    device: int
    kernel_ns: int  # kernel time inside the steps, overlaps merged
    utilization: float  # share of the steps' span with at least one kernel running
    sm_efficiency: float | None  # estimated: time-weighted min(blocks per SM, 1)
    achieved_occupancy: float | None  # estimated: time-weighted "est. achieved occupancy %" / 100
    tensor_core_ratio: float | None  # share of kernel time in Tensor Core kernels


@dataclass(frozen=True)
class Overview:
    """Steps, their breakdown, and device metrics."""

    steps: pl.DataFrame  # step, start_ns, end_ns, dur_ns, then one ns column per category
    breakdown_ns: dict[str, float]  # step average per BREAKDOWN_CATEGORIES, plus "Total"
    host_steps: pl.DataFrame  # step, then one ns column per HOST_CATEGORIES
    host_breakdown_ns: dict[str, float]  # step average per HOST_CATEGORIES, plus "Total"
    devices: tuple[DeviceMetrics, ...]
    comm_overlap: pl.DataFrame  # step, computation_ns, communication_ns, overlap_ns, other_ns
    steps_from_trace: bool  # False when the trace had no ProfilerStep and is one whole step
    # the trace's last ProfilerStep was the profile's exit and is not among ``steps``
    exit_step_left_out: bool = False


def _spans(df: pl.DataFrame) -> iv.Spans:
    s = df["start_ns"].to_numpy()
    return iv.merge(s, s + df["dur_ns"].to_numpy())


def profiler_steps(trace: Trace) -> pl.DataFrame:
    """``ProfilerStep#N`` spans (step, start_ns, end_ns), whichever kind the dialect gave them.

    The 2021 dialect writes them as ``Operator`` events, newer ones as user annotations.
    """
    return memo(trace, "profiler_steps", lambda: _profiler_steps(trace))


def _profiler_steps(trace: Trace) -> pl.DataFrame:
    ann = kinds(trace, "user_annotation", "cpu_op").filter(names.PROFILER_STEP)
    return (
        ann.select(
            step_number(pl.col("name")).alias("step"),
            pl.col("start_ns"),
            (pl.col("start_ns") + pl.col("dur_ns")).alias("end_ns"),
        )
        .drop_nulls("step")
        .sort("start_ns")
        .unique("step", keep="first", maintain_order=True)
    )


# the longest a step may last and still be the profile's exit in a trace that does not say
# so: the exit runs from the last ``step()`` to ``stop()``, 10-60 µs on the traces we saw
EXIT_STEP_MAX_NS = 1_000_000


def ends_in_exit(trace: Trace) -> bool:
    """Whether the trace's last step (of two or more ``profiler_steps``) is the profile's exit, not a
    step of the run: leaving a scheduled ``with profile(...)`` block mid-cycle ends the cycle
    in ``stop()``, so its last ``ProfilerStep`` runs from the last ``step()`` to the exit.

    Our profiler says how each scheduled cycle ended (``CYCLE_ENDED_BY_KEY``; a block that
    raised ends in the step its error cut, no whole step either). A trace of
    torch's says nothing: its last step is the exit when under a tenth of the ops and
    annotations a working step begins began in it (none, or a ``loss.item()`` after the loop),
    while earlier steps ran ops, and it is under 1 ms and under half their median (a
    real step that only waits or runs Python, at the end of a cycle or an epoch, was 5 ms
    against 80-150 ms, and stays). A trace whose only step is the exit keeps it (there is
    nothing else to show; the job view leaves such a cycle out, ``job.summarize.exit_step``).
    """
    return memo(trace, "ends_in_exit", lambda: _ends_in_exit(trace, profiler_steps(trace)))


# the kinds of events that are work done in a step (an exit step has none of them)
_RAN = ("cpu_op", "python_function", "runtime", "kernel", "memcpy", "memset", "collective")


def exit_step(trace: Trace, steps: pl.DataFrame, from_trace: bool, last: bool) -> bool:
    """Whether the cycle is nothing but the profile's exit: leaving a scheduled ``with
    profile(...)`` block mid-cycle ends the cycle in ``stop()``, and with one step a cycle the
    file holds only the step from the last ``step()`` to the exit. (The exit step of a cycle
    with other steps is left out by the overview, ``ends_in_exit``.)

    Our profiler says how each scheduled cycle ended (``CYCLE_ENDED_BY_KEY``); a cycle without
    steps that its ``stop()`` ended is all exit. In a file of torch's, only a rank's ``last``
    cycle can be, when it has one step and nothing ran in it at all.
    """
    ended = trace.meta.extra.get(CYCLE_ENDED_BY_KEY)
    if ended is not None or steps.height > 1:
        return ended in CYCLE_CUT and steps.height <= 1
    if not last or not from_trace or steps.height == 0:
        return False
    return trace.events.filter(pl.col("kind").is_in(_RAN) & ~names.PROFILER_STEP).height == 0


def _ends_in_exit(trace: Trace, steps: pl.DataFrame) -> bool:
    if steps.height < 2:
        return False
    ended = trace.meta.extra.get(CYCLE_ENDED_BY_KEY)
    if ended is not None:
        return ended in CYCLE_CUT
    lo, hi = steps["start_ns"].to_numpy(), steps["end_ns"].to_numpy()
    if hi[-1] - lo[-1] >= EXIT_STEP_MAX_NS:
        return False
    work = trace.events.filter(pl.col("kind").is_in(("cpu_op", "user_annotation")) & ~names.PROFILER_STEP)
    starts = np.sort(work["start_ns"].to_numpy())
    began = np.searchsorted(starts, hi, side="left") - np.searchsorted(starts, lo, side="left")
    worked = began[:-1] > 0
    # a few ops may run after the loop inside the ``with`` (a ``loss.item()``: two), against
    # the hundreds a training step begins
    if not worked.any() or began[-1] > np.median(began[:-1][worked]) / 10:
        return False
    # and shorter than half a working step: an exit of 127 µs after steps of 0.5 ms is one
    # (a new user's find; a tenth kept it), a real step that only waits is over 1 ms
    return bool(hi[-1] - lo[-1] < np.median((hi - lo)[:-1][worked]) / 2)


def step_windows(trace: Trace) -> tuple[pl.DataFrame, bool]:
    """The steps as the plugin sees them: host spans stretched over the device work they launched.

    Steps are contiguous and never overlap, and a step never starts after its own host span
    ended: device work whose launch is not in the file delays the first step only when it ends
    inside that step's host span, and a step's device tail stops where the next step's host
    span ends (on every shared trace the plugin's windows are unchanged by either rule).

    Returns (frame with step, start_ns, end_ns, host_start_ns, host_end_ns, device_events; and
    whether the steps came from ``ProfilerStep#N`` annotations).
    """
    ev = trace.events
    host = profiler_steps(trace)
    if ends_in_exit(trace):
        host = host.head(host.height - 1)
    from_trace = host.height > 0
    if not from_trace:
        ops = kinds(trace, "cpu_op", "user_annotation", "python_function")
        base = ops if ops.height else ev.filter(pl.col("dur_ns") > 0)
        if base.height == 0:
            return pl.DataFrame(
                schema={
                    "step": pl.Int32,
                    "start_ns": pl.Int64,
                    "end_ns": pl.Int64,
                    "host_start_ns": pl.Int64,
                    "host_end_ns": pl.Int64,
                    "device_events": pl.Int64,
                }
            ), False
        lo = int(base["start_ns"].min())  # type: ignore[arg-type]
        hi = int((base["start_ns"] + base["dur_ns"]).max())  # type: ignore[arg-type]
        host = pl.DataFrame(
            {"step": [0], "start_ns": [lo], "end_ns": [hi]},
            schema={"step": pl.Int32, "start_ns": pl.Int64, "end_ns": pl.Int64},
        )
    hs = host["start_ns"].to_numpy().astype(np.int64)
    he = host["end_ns"].to_numpy().astype(np.int64)
    n = hs.size

    # device work launched by runtime calls that lie wholly inside a host step
    dev = kinds(trace, "kernel", "memcpy", "memset")
    dev_start = dev["start_ns"].to_numpy()
    dev_end = dev_start + dev["dur_ns"].to_numpy()
    launcher = dev["launcher"].fill_null(-1).to_numpy()
    has_l = launcher >= 0
    step_of_dev = np.full(dev.height, -1, np.int64)
    if has_l.any():
        rt_start = ev["start_ns"].to_numpy()[launcher[has_l]]
        rt_end = rt_start + ev["dur_ns"].to_numpy()[launcher[has_l]]
        i = np.searchsorted(hs, rt_start, side="right") - 1
        ok = (i >= 0) & (rt_end <= he[np.maximum(i, 0)]) & (rt_start >= hs[np.maximum(i, 0)])
        step_of_dev[np.flatnonzero(has_l)[ok]] = i[ok]
    matched = step_of_dev >= 0
    counts = np.bincount(step_of_dev[matched], minlength=n) if n else np.zeros(0, np.int64)
    dmin = np.full(n, np.iinfo(np.int64).max)
    dmax = np.full(n, np.iinfo(np.int64).min)
    np.minimum.at(dmin, step_of_dev[matched], dev_start[matched])
    np.maximum.at(dmax, step_of_dev[matched], dev_end[matched])

    starts, ends = hs.copy(), he.copy()
    keep = n
    prev = int(hs[0]) if n else 0
    if matched.any() and counts[0] > 0:
        # device work from before the first step (launch not in the file) delays its start,
        # but only work that ends while its host span still runs: work ending later is the
        # step's own (its launch was not recorded), and a step never starts after its host end
        early = (~matched) & (dev_end < dmin[0]) & (dev_end <= he[0])
        if early.any():
            prev = max(prev, int(dev_end[early].max()))
    # with device work or without (annotations that overlap: two profilers' steps in one
    # file), each step starts no earlier than the one before it ended
    for k in range(n):
        s = max(prev, int(hs[k]))
        e = max(int(he[k]), s) if counts[k] == 0 else max(int(he[k]), int(dmax[k]))
        e = max(e, s)
        if k + 1 < n:
            # a step ends where the next one begins, and the next begins by its own host
            # end at the latest: with a deep launch queue, this step's device tail that runs
            # after the next step's host span ended is counted in the next step (the plugin
            # would start the next step after its own host span)
            e = max(min(e, int(he[k + 1])), s)
        starts[k], ends[k] = s, e
        prev = e
    if matched.any() and n > 1:  # drop tail steps whose kernels the profiler may have missed
        last = int(np.flatnonzero(counts > 0)[-1]) if (counts > 0).any() else -1
        if last >= 0:
            keep = last + 1
            if last > 0 and counts[last - 1] * 0.8 > counts[last]:
                keep = last
    out = pl.DataFrame(
        {
            "step": host["step"].cast(pl.Int32),
            "start_ns": starts,
            "end_ns": ends,
            "host_start_ns": hs,
            "host_end_ns": he,
            "device_events": counts.astype(np.int64),
        }
    ).head(keep)
    if from_trace:
        # a file cut in its device events: only the longest run of steps that kept theirs
        # (the reader's warning names the others), so that their time is not read as host time
        complete = complete_steps(ev, trace.meta, out["step"].to_list())
        if complete is not None:
            out = out.filter(pl.col("step").is_in(complete))
    return out, from_trace


def role_spans(trace: Trace) -> dict[str, iv.Spans]:
    """Merged time spans of each breakdown category before the priority rule is applied."""
    kernels = kinds(trace, "kernel")
    is_comm = names.COMM_KERNEL
    host = kinds(trace, "cpu_op", "user_annotation", "collective")
    host = host.with_columns(
        pl.when(names.PROFILER_STEP)
        .then(pl.lit("step"))
        .when(names.DATALOADER & pl.col("kind").is_in(["cpu_op", "user_annotation"]))
        .then(pl.lit("DataLoader"))
        .when(names.HOST_COLLECTIVE)
        .then(pl.lit("Communication"))
        .otherwise(pl.lit("CPU Exec"))
        .alias("role")
    )
    comm = pl.concat(
        [
            kernels.filter(is_comm).select("start_ns", "dur_ns"),
            host.filter(pl.col("role") == "Communication").select("start_ns", "dur_ns"),
        ]
    )
    return {
        "Kernel": _spans(kernels.filter(~is_comm)),
        "Memcpy": _spans(kinds(trace, "memcpy")),
        "Memset": _spans(kinds(trace, "memset")),
        "Communication": _spans(comm),
        "Runtime": _spans(kinds(trace, "runtime")),
        "DataLoader": _spans(host.filter(pl.col("role") == "DataLoader")),
        "CPU Exec": _spans(host.filter(pl.col("role") == "CPU Exec")),
    }


def _priority_breakdown(
    roles: dict[str, iv.Spans], order: tuple[str, ...], ws: np.ndarray, we: np.ndarray
) -> dict[str, np.ndarray]:
    """Give each instant of the windows to the first category in ``order`` that covers it."""
    slots = iv.merge(ws, we)
    out: dict[str, np.ndarray] = {}
    for name in order[:-1]:
        cost = iv.intersect(slots, roles[name])
        out[name] = iv.overlap_per_window(cost, ws, we)
        slots = iv.subtract(slots, cost)
    out[order[-1]] = iv.overlap_per_window(slots, ws, we)
    return out


def _host_roles(trace: Trace, communication: iv.Spans) -> dict[str, iv.Spans]:
    host = kinds(trace, "cpu_op", "user_annotation", "python_function")
    return {
        "Communication": communication,
        "DataLoader": _spans(host.filter(names.DATALOADER)),
        "Optimizer": _optimizer_spans(host),
        "Operators": _spans(host.filter(pl.col("kind") == "cpu_op")),
        # the time no op, collective, runtime call or device work accounts for: the same
        # definition as the python_outside_ops rule (analysis.outside), with or without stacks
        "Python outside ops": iv.complement(accounted_spans(trace)),
    }


def _optimizer_spans(host: pl.DataFrame) -> iv.Spans:
    """The optimizer annotations' time, less the closures an ``Optimizer.step`` runs.

    Lightning (and LBFGS) call ``optimizer.step(closure)`` with the forward and the backward in
    the closure, so the whole step read as Optimizer: 67 % of a Lightning MLP's step, whose
    update took a few ``add_`` calls. Inside a step that runs backward nodes, each closure call
    is a window from its forward's first op that autograd records (an op with a sequence
    number: the optimizer's own math runs without grad and has none) to the end of the backward
    nodes that follow it, on any thread (CUDA's backward runs on the device's); an op of the
    optimizer's own outside them ends the window. The windows' time goes to the categories below
    (Operators, mostly), and LBFGS's math between its closure calls stays Optimizer."""
    opt = host.filter(names.OPTIMIZER & (pl.col("kind") != "python_function"))
    starts = opt["start_ns"].to_numpy().astype(np.int64)
    ends = starts + opt["dur_ns"].to_numpy().astype(np.int64)
    spans = iv.merge(starts, ends)
    backward = host.filter(names.BACKWARD_NODE & (pl.col("kind") == "cpu_op"))
    if not opt.height or not backward.height:
        return spans
    b_starts = np.sort(backward["start_ns"].to_numpy().astype(np.int64))
    inside = np.searchsorted(b_starts, ends, side="left") > np.searchsorted(b_starts, starts, side="left")
    if not inside.any():  # no closure: the common case costs two searches
        return spans
    # each op as forward (0: autograd records it), backward node (1) or other (2: the optimizer's
    # own math, run without grad)
    ops = (
        host.filter(pl.col("kind") == "cpu_op")
        .select(
            "start_ns",
            "dur_ns",
            pl.when(names.BACKWARD_NODE)
            .then(1)
            .when(pl.col("seq") >= 0)
            .then(0)
            .otherwise(2)
            .cast(pl.Int8)
            .alias("what"),
        )
        .sort("start_ns")
    )
    m_start = ops["start_ns"].to_numpy().astype(np.int64)
    m_end = m_start + ops["dur_ns"].to_numpy().astype(np.int64)
    what = ops["what"].to_numpy()
    windows: list[tuple[int, int]] = []
    for s, e in zip(starts[inside].tolist(), ends[inside].tolist(), strict=True):
        lo, hi = np.searchsorted(m_start, [s, e], side="left").tolist()
        opened: int | None = None  # the start of the closure call being read
        last_backward: int | None = None
        tail = False  # opened by ops right after a backward (``loss.detach()``), not a forward
        covered = s  # the end of the forward and backward ops so far: ops inside them are theirs
        for t0, t1, kind in zip(
            m_start[lo:hi].tolist(), m_end[lo:hi].tolist(), what[lo:hi].tolist(), strict=True
        ):
            if kind == 2:
                # an op of the optimizer's own after a backward, or after a closure's tail, ends
                # the call; one inside a forward (``zero_grad``'s, before the backward) does not
                if t0 >= covered and opened is not None and (last_backward is not None or tail):
                    if last_backward is not None:
                        windows.append((opened, last_backward))
                    opened, last_backward = None, None
                continue
            covered = max(covered, t1)
            if kind == 1:
                opened = t0 if opened is None else opened
                last_backward = t1 if last_backward is None else max(last_backward, t1)
            elif opened is None:
                opened, tail = t0, False
            elif last_backward is not None:  # after a backward: the closure's tail, or the next call
                windows.append((opened, last_backward))
                opened, last_backward, tail = t0, None, True
        if opened is not None and last_backward is not None:
            windows.append((opened, last_backward))
    if not windows:
        return spans
    w = np.array(windows, dtype=np.int64)
    return iv.subtract(spans, iv.merge(w[:, 0], w[:, 1]))


def _device_metrics(trace: Trace, lo: int, hi: int) -> tuple[DeviceMetrics, ...]:
    kernels = kinds(trace, "kernel")
    span = max(hi - lo, 1)
    out = []
    for dev in sorted(kernels["device"].unique().to_list()):
        k = kernels.filter(pl.col("device") == dev)
        s = k["start_ns"].to_numpy()
        e = s + k["dur_ns"].to_numpy()
        merged = iv.intersect(iv.merge(s, e), (np.array([lo]), np.array([hi])))
        busy = iv.total(merged)
        # SM efficiency: sum of blocks/SM of running kernels, capped at 1, weighted by time
        bps = k["blocks_per_sm"].to_numpy()
        sm_eff: float | None = None
        good = ~np.isnan(bps.astype(float)) & (bps > 0) if bps.size else np.zeros(0, bool)
        if good.any():
            t = np.concatenate([s[good], e[good]])
            typ = np.concatenate([np.zeros(good.sum(), np.int8), np.ones(good.sum(), np.int8)])
            val = np.concatenate([bps[good], -bps[good]])
            o = np.lexsort((typ, t))
            t, val = t[o], val[o]
            level = np.cumsum(val)[:-1]
            a = np.clip(t[:-1], lo, hi)
            b = np.clip(t[1:], lo, hi)
            w = np.where(level > 1e-12, np.minimum(level, 1.0), 0.0) * (b - a)
            sm_eff = float(w.sum() / span)
        occ = k["occupancy_pct"].to_numpy()
        occupancy: float | None = None
        og = ~np.isnan(occ.astype(float)) & (occ >= 0) if occ.size else np.zeros(0, bool)
        if og.any():
            d = np.clip(np.minimum(e[og], hi) - np.maximum(s[og], lo), 0, None)
            if d.sum() > 0:
                occupancy = float((occ[og] * d).sum() / d.sum() / 100.0)
        total_k = int(k["dur_ns"].sum())
        tc = int(k.filter(names.TENSOR_CORE_KERNEL)["dur_ns"].sum())
        out.append(
            DeviceMetrics(
                device=int(dev),
                kernel_ns=busy,
                utilization=busy / span,
                sm_efficiency=sm_eff,
                achieved_occupancy=occupancy,
                tensor_core_ratio=(tc / total_k) if total_k else None,
            )
        )
    return tuple(out)


def overview(trace: Trace) -> Overview:
    """Steps, the plugin's per-category breakdown (ns), the host breakdown and device metrics."""
    return memo(trace, "overview", lambda: _overview(trace))


def _overview(trace: Trace) -> Overview:
    win, from_trace = step_windows(trace)
    ws = win["start_ns"].to_numpy().astype(np.int64)
    we = win["end_ns"].to_numpy().astype(np.int64)
    roles = role_spans(trace)
    br = _priority_breakdown(roles, BREAKDOWN_CATEGORIES, ws, we)
    steps = win.select("step", "start_ns", "end_ns").with_columns(
        (pl.col("end_ns") - pl.col("start_ns")).alias("dur_ns"),
        *[pl.Series(c, br[c].astype(np.int64)) for c in BREAKDOWN_CATEGORIES],
    )
    hroles = _host_roles(trace, roles["Communication"])
    hb = _priority_breakdown(hroles, HOST_PRIORITY, ws, we)
    host_steps = win.select("step").with_columns(
        *[pl.Series(c, hb[c].astype(np.int64)) for c in HOST_CATEGORIES]
    )

    def avg(cols: dict[str, np.ndarray], order: tuple[str, ...]) -> dict[str, float]:
        n = max(len(ws), 1)
        d = {c: float(cols[c].sum()) / n for c in order}
        d["Total"] = float((we - ws).sum()) / n
        return d

    # computation / communication / overlap per step (the plugin's distributed view)
    comp = roles["Kernel"] if roles["Kernel"][0].size else roles["CPU Exec"]
    comm = roles["Communication"]
    ov = iv.intersect(comp, comm)
    c_ns = iv.overlap_per_window(comp, ws, we)
    m_ns = iv.overlap_per_window(comm, ws, we)
    o_ns = iv.overlap_per_window(ov, ws, we)
    comm_overlap = pl.DataFrame(
        {
            "step": win["step"],
            "computation_ns": c_ns,
            "communication_ns": m_ns,
            "overlap_ns": o_ns,
            "other_ns": (we - ws) + o_ns - c_ns - m_ns,
        }
    )
    lo = int(ws.min()) if ws.size else 0
    hi = int(we.max()) if we.size else 0
    return Overview(
        steps=steps,
        breakdown_ns=avg(br, BREAKDOWN_CATEGORIES),
        host_steps=host_steps,
        host_breakdown_ns=avg(hb, HOST_CATEGORIES),
        devices=_device_metrics(trace, lo, hi),
        comm_overlap=comm_overlap,
        steps_from_trace=from_trace,
        exit_step_left_out=ends_in_exit(trace),
    )
