"""What a trace cut short lost on the device's side, found from what it kept.

Kineto writes a GPU trace's host ops first and its runtime calls and device work after them,
so a file cut short loses device work first: every step survives, some or all without their
runtime calls and kernels. The reader warns about such steps (``cut_before_device_work``), and
the overview keeps them out of the step breakdown (``complete_steps``).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import polars as pl

from torchscope.trace.model import TraceMeta
from torchscope.trace.schema import step_annotations
from torchscope.trace.short import said_cut


def was_cut(meta: TraceMeta) -> bool:
    """Whether the reader cut the file short."""
    return said_cut(meta.warnings)


DEVICE_SIDE = ["runtime", "kernel", "memcpy", "memset"]


def cut_before_device_work(ev: pl.DataFrame, meta: TraceMeta, warnings: list[str]) -> None:
    """Say when a cut file lost the device's side of its later steps. Kineto writes the host's
    ops first and the runtime calls and device work after them, so a cut a third into a GPU
    trace kept every step and no kernel, and one at 80 % kept kernels for some steps only: the
    reports read like a host-bound run ("python_outside_ops", "busy only 0.8 %"), with only
    "the file ends mid-event" to say otherwise."""
    ops = ev.filter(pl.col("kind") == "cpu_op")
    device = ev.filter(pl.col("kind").is_in(DEVICE_SIDE))
    # a device: the trace lists one, or its collectives ran on one (NCCL, RCCL, HCCL; a rank's
    # trace may list no deviceProperties)
    on_device = bool(meta.device_properties) or any(b in (meta.backend or "").lower() for b in ("nccl", "hccl"))
    if ops.height == 0 or (device.height == 0 and not on_device):
        return
    lo = int(ev["start_ns"].min())  # type: ignore[arg-type]
    host_end = int((ops["start_ns"] + ops["dur_ns"]).max())  # type: ignore[arg-type]
    if device.height == 0:
        warnings.append(
            "no runtime call or device work was read though the trace names a device: if the run used it,"
            " the file was cut before them (Kineto writes them after the host's ops), and device times,"
            " the step breakdown and device advice are missing"
        )
        return
    lacking = steps_without_device_side(ev, device)
    if lacking is not None:
        if lacking:
            named = ", ".join(str(k) for k in lacking[:5]) + (f" and {len(lacking) - 5} more" if len(lacking) > 5 else "")
            warnings.append(
                f"{len(lacking)} step{'s' if len(lacking) != 1 else ''} ({named})"
                f" {'have' if len(lacking) != 1 else 'has'} host ops but few or no runtime calls"
                " in what was read, where the others have them: the file was cut in the device's events (Kineto"
                " writes them after the host's ops); the step breakdown covers the longest run of steps that"
                " have them, and the device advice and times over the whole trace miss those steps' device work"
            )
        return
    device_end = int((device["start_ns"] + device["dur_ns"]).max())  # type: ignore[arg-type]
    # the host's last ops may outlast the device's work in a whole trace (the profiler's own
    # stop): only a gap of over a tenth of the trace says the device's side was cut away
    if host_end - device_end > (host_end - lo) // 10:
        warnings.append(
            f"runtime calls and device work stop {(device_end - lo) / 1e6:,.3f} ms into the trace, host ops"
            f" go on to {(host_end - lo) / 1e6:,.3f} ms: the file was cut in the device's events (Kineto"
            " writes them after the host's ops), so device times, the step breakdown and device advice"
            " cover only the part before that"
        )


# runtime calls that put work on a device: kernels, graphs, copies, memsets (CUDA and HIP)
_LAUNCHES = r"(?i)launch|memcpy|memset"


def steps_without_device_side(ev: pl.DataFrame, device: pl.DataFrame) -> list[int] | None:
    """The ``ProfilerStep#N`` numbers whose span holds under a fifth of the median step's
    runtime calls (none, in a cut file), or launches a tenth of which have no device work in
    what was read; None without steps or without runtime calls."""
    steps = step_annotations(ev).drop_nulls("step").sort("start_ns")
    runtime = device.filter(pl.col("kind") == "runtime")["start_ns"].sort().to_numpy()
    if steps.height < 2 or runtime.size == 0:
        return None
    lo = steps["start_ns"].to_numpy()
    hi = lo + steps["dur_ns"].to_numpy()

    def per_step(starts: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        return np.searchsorted(starts, hi, side="right") - np.searchsorted(starts, lo, side="left")

    calls = per_step(runtime)
    # a step with the host ops of the others: a trailing step the schedule cut short has few
    # ops and, in a whole trace too, no runtime calls (amd_mi250_rocm6's last)
    ops = per_step(ev.filter(pl.col("kind") == "cpu_op")["start_ns"].sort().to_numpy())
    if not (calls > 0).any():
        return []
    typical_calls, typical_ops = float(np.median(calls[calls > 0])), float(np.median(ops[calls > 0]))
    # launches whose kernel, copy or memset was not read: a cut can keep a step's runtime calls
    # and lose their device work (diff_control cut at 80 %: 30 ms of kernels a step, not 46)
    launches = device.filter((pl.col("kind") == "runtime") & pl.col("name").cast(pl.String).str.contains(_LAUNCHES))
    served = device.filter(pl.col("kind") != "runtime")["launcher"].drop_nulls().unique().implode()
    unserved = per_step(launches.filter(~pl.col("id").is_in(served))["start_ns"].sort().to_numpy())
    launched = per_step(launches["start_ns"].sort().to_numpy())
    numbers = steps["step"].to_list()
    lacking = ((calls < typical_calls / 5) | (unserved > launched // 10)) & (ops >= typical_ops / 2)
    # the last step cut in part: the overview drops a last step with under 80 % of the previous
    # one's device work, and said nothing of it (nccl_rank0_of_2 cut at 90 % kept 1,437 of the
    # last step's 2,911 runtime calls)
    last = calls.size - 1
    if calls[last] < 0.8 * calls[last - 1] and ops[last] >= typical_ops / 2:
        lacking[last] = True
    return [numbers[k] for k in np.flatnonzero(lacking)]


def complete_steps(trace_events: pl.DataFrame, meta: TraceMeta, steps: list[int]) -> list[int] | None:
    """Of ``steps`` (in order), the longest run of consecutive ones a cut file kept the device's
    side of; None when the file was not cut or lost none of it (every step stays)."""
    if not was_cut(meta):
        return None
    device = trace_events.filter(pl.col("kind").is_in(DEVICE_SIDE))
    lacking = set(steps_without_device_side(trace_events, device) or ())
    if not lacking or not lacking.intersection(steps):
        return None
    best: list[int] = []
    run: list[int] = []
    for step in steps:
        run = [] if step in lacking else [*run, step]
        if len(run) > len(best):
            best = run
    return best or None
