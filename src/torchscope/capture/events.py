"""``prof.events()`` and ``prof.export_stacks()``: the per-event views, built from the Trace.

Code written for torch walks ``prof.events()`` and reads ``name``, ``cpu_time_total``,
``self_cpu_time_total``, ``device_time_total``, ``input_shapes``, ``stack`` and
``cpu_children``. Those objects are built here only when asked for, from the same per-event
frame the tables use (``analysis.key_averages.event_frame``), so the numbers agree with the
table. ``export_stacks`` writes the collapsed-stack format of flamegraph tools
(``outer;inner;op value``), one line per distinct stack with the metric summed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from torchscope.analysis.key_averages import CudaAliases, event_frame, parse_shapes
from torchscope.trace.model import Trace

STACK_METRICS = (
    "self_cpu_time_total",
    "self_cuda_time_total",
    "self_xpu_time_total",
    "self_privateuse1_time_total",
)
_STACK_DEPTH = 128


@dataclass
class Interval:
    """An event's span in microseconds from the start of the trace (torch's ``time_range``)."""

    start: float
    end: float

    def elapsed_us(self) -> float:
        return self.end - self.start


@dataclass(eq=False)
class FunctionEvent(CudaAliases):
    """One profiled event with torch's ``FunctionEvent`` attribute names (times in us)."""

    id: int
    name: str
    trace_name: str
    thread: int
    time_range: Interval
    cpu_time_total: float
    self_cpu_time_total: float
    device_time_total: float
    self_device_time_total: float
    cpu_memory_usage: int
    self_cpu_memory_usage: int
    device_memory_usage: int
    self_device_memory_usage: int
    input_shapes: list[Any]
    stack: list[str]
    is_device: bool
    is_user_annotation: bool
    use_device: str | None = None
    cpu_children: list[FunctionEvent] = field(default_factory=list)
    cpu_parent: FunctionEvent | None = None
    count: int = 1
    node_id: int = -1
    is_async: bool = False
    is_remote: bool = False
    overload_name: str = ""

    @property
    def key(self) -> str:
        return self.name

    @property
    def cpu_time(self) -> float:
        return self.cpu_time_total

    @property
    def device_time(self) -> float:
        return self.device_time_total

    @property
    def device_type(self) -> Any:
        """torch's ``DeviceType`` of the event (CPU for host events)."""
        from torch.autograd import DeviceType

        return DeviceType.CUDA if self.is_device else DeviceType.CPU

    def __repr__(self) -> str:
        return (
            f"<FunctionEvent id={self.id} name={self.name} cpu_time_total={self.cpu_time_total:.3f}us "
            f"self_cpu_time_total={self.self_cpu_time_total:.3f}us device_time_total="
            f"{self.device_time_total:.3f}us children={len(self.cpu_children)}>"
        )


def build_events(trace: Trace, *, use_device: str | None = None) -> list[FunctionEvent]:
    """Every event torch's ``events()`` would list, linked to its parent and children."""
    frame = event_frame(trace, with_stack_n=_STACK_DEPTH)
    if frame.height == 0:
        return []
    t0 = int(frame["start_ns"].min())  # type: ignore[arg-type]
    rows = frame.with_columns(
        ((pl.col("start_ns") - t0) / 1000.0).alias("start_us"),
        ((pl.col("start_ns") + pl.col("dur_ns") - t0) / 1000.0).alias("end_us"),
    )
    events: list[FunctionEvent] = []
    by_id: dict[int, FunctionEvent] = {}
    parents: list[int] = []
    for r in rows.iter_rows(named=True):
        ev = FunctionEvent(
            id=r["id"],
            name=r["name"],
            trace_name=r["trace_name"],
            thread=r["tid"],
            time_range=Interval(r["start_us"], r["end_us"]),
            cpu_time_total=r["cpu_total_ns"] / 1000.0,
            self_cpu_time_total=r["self_cpu_ns"] / 1000.0,
            device_time_total=r["device_total_ns"] / 1000.0,
            self_device_time_total=r["self_device_ns"] / 1000.0,
            cpu_memory_usage=r["cpu_mem"],
            self_cpu_memory_usage=r["self_cpu_mem"],
            device_memory_usage=r["device_mem"],
            self_device_memory_usage=r["self_device_mem"],
            input_shapes=parse_shapes(r["input_shapes"]),
            stack=list(r["stack"] or []),
            is_device=r["is_device"],
            is_user_annotation=r["is_user_annotation"],
            use_device=use_device,
        )
        events.append(ev)
        if r["id"] >= 0:
            by_id[r["id"]] = ev
        parents.append(r["parent"])
    for ev, parent_id in zip(events, parents, strict=True):
        parent = by_id.get(parent_id) if parent_id >= 0 else None
        if parent is not None:
            ev.cpu_parent = parent
            parent.cpu_children.append(ev)
    return events


def export_stacks(traces: list[Trace], path: Path, metric: str) -> None:
    """Write collapsed stacks: enclosing Python frames (outermost first), then the event."""
    if metric not in STACK_METRICS:
        raise ValueError("metric should be one of: " + str(list(STACK_METRICS)))
    column = "self_cpu_ns" if metric == "self_cpu_time_total" else "self_device_ns"
    frames = [event_frame(t, with_stack_n=_STACK_DEPTH) for t in traces]
    frame = pl.concat(frames) if len(frames) > 1 else frames[0]
    lines = (
        frame.filter(pl.col(column) >= 1000)
        .with_columns(
            pl.concat_list(
                pl.col("stack").list.reverse(), pl.concat_list(pl.col("trace_name").cast(pl.String))
            )
            .list.eval(pl.element().str.replace_all(r"[ ;\t\n]", "_"))
            .list.join(";")
            .alias("path"),
            (pl.col(column) // 1000).alias("value"),
        )
        .group_by("path", maintain_order=True)
        .agg(pl.col("value").sum())
    )
    with open(path, "w") as out:
        for stack, value in lines.iter_rows():
            out.write(f"{stack} {value}\n")
