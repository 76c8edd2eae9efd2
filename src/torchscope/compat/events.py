"""``prof.events()`` and ``prof.export_stacks()``: torch's ``FunctionEvent`` and ``EventList``,
built from the Trace.

Code written for torch walks ``prof.events()`` and reads ``name``, ``cpu_time_total``,
``self_cpu_time_total``, ``device_time_total``, ``input_shapes``, ``stack`` and
``cpu_children``. Those objects are built here only when asked for, from the same per-event
frame the tables use (``analysis.key_averages.event_frame``), so the numbers agree with the
table. ``export_stacks`` writes the collapsed-stack format of flamegraph tools
(``outer;inner;op value``), one line per distinct stack with the metric summed.
"""

from __future__ import annotations

import functools
import json
import time
import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import polars as pl

from torchscope.analysis.frames import tool_frames
from torchscope.analysis.key_averages import (
    AVERAGES_SCHEMA,
    METRIC_COLUMNS,
    event_frame,
    flops_of,
    parse_shapes,
)
from torchscope.compat.averages import CudaAliases, FormattedTimes, KeyAverage, KeyAverages
from torchscope.compat.event_args import NO_ARGS, NO_PYTHON_IDS, EventArgs, LazyEventArgs
from torchscope.compat.table import TableOptions
from torchscope.errors import UsageError
from torchscope.startup import gc_paused
from torchscope.trace.model import Trace
from torchscope.trace.schema import DEVICE_KINDS
from torchscope.writes import write_atomically

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


class Kernel(NamedTuple):
    """Device work an op launched, as torch's ``profiler_util.Kernel`` (duration in us)."""

    name: str
    device: int
    duration: float


@dataclass(eq=False)
class FunctionEvent(CudaAliases, FormattedTimes):
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
    sequence_nr: int = -1  # autograd's: a forward op and its backward share it
    fwd_thread: int | None = None
    external_id: int = 0
    device_index: int = 0
    concrete_inputs: list[Any] = field(default_factory=list)
    input_dtypes: list[Any] = field(default_factory=list)
    flops: int = 0
    kernels: list[Kernel] = field(default_factory=list)
    is_python_function: bool = False
    is_legacy: bool = False
    scope: int = 0
    activity_type: str | None = None  # Kineto's category: cpu_op, kernel, cuda_runtime, ...
    device_resource_id: int = 0  # the thread, or the stream of device work
    flow_id: int = 0  # a forward->backward (type 1) or host->device (type 2) flow, 0 when none
    flow_type: int = 0
    flow_start: bool = False
    linked_correlation_id: int = 0
    structured_input_shapes: list[Any] = field(default_factory=list)  # "Input Dims", tensor lists kept
    # Kineto's metadata of the event ('"Ev Idx": 3'), only with expose_kineto_event_metadata
    # where kwinputs, structured_input_strides and metadata_json come from (read on first use)
    _args: LazyEventArgs | None = field(default=None, repr=False)
    _own_args: EventArgs | None = field(default=None, repr=False)
    event_metadata: Any = None  # torch's structured metadata: filled by Kineto builds we do not have
    # torch fills these only while printing a table
    self_cpu_percent: float = -1
    total_cpu_percent: float = -1
    total_device_percent: float = -1

    @property
    def key(self) -> str:
        return self.name

    @property
    def cpu_time(self) -> float:
        return self.cpu_time_total

    @property
    def device_time(self) -> float:
        return self.device_time_total

    cuda_time = device_time  # torch's older name

    def _event_args(self) -> EventArgs:
        if self._own_args is None:
            source = self._args
            self._own_args = source.of(self.external_id) if source and not self.is_device else NO_ARGS
        return self._own_args

    def _python_ids(self) -> tuple[int, int, int]:
        source = self._args
        return source.python_ids(self.id) if source and self.is_python_function else NO_PYTHON_IDS

    @property
    def python_id(self) -> int:
        """The Python tracer's id of a ``python_function`` event (-1 for others, as torch)."""
        return self._python_ids()[0]

    @property
    def python_parent_id(self) -> int:
        return self._python_ids()[1]

    @property
    def python_module_id(self) -> int:
        return self._python_ids()[2]

    @property
    def kwinputs(self) -> dict[str, Any]:
        """The keyword inputs of ``_RecordFunctionFast`` (inductor's Triton launches')."""
        return self._event_args().kwinputs

    @property
    def structured_input_strides(self) -> list[Any]:
        return self._event_args().strides

    @property
    def metadata_json(self) -> str:
        """Kineto's metadata of the event (deprecated in torch, with the same warning); only with
        ``_ExperimentalConfig(expose_kineto_event_metadata=True)``, as torch's."""
        warnings.warn(
            "`metadata_json` is deprecated. Use `event_metadata` instead.", FutureWarning, stacklevel=2
        )
        source = self._args
        return self._event_args().metadata if source is not None and source.with_metadata else ""

    @property
    def device_type(self) -> Any:
        """torch's ``DeviceType`` of the event (CPU for host events)."""
        from torch.autograd import DeviceType

        return DeviceType.CUDA if self.is_device else DeviceType.CPU

    def append_kernel(self, name: str, device: int, duration: float) -> None:
        self.kernels.append(Kernel(name, device, duration))

    def append_cpu_child(self, child: FunctionEvent) -> None:
        self.cpu_children.append(child)

    def set_cpu_parent(self, parent: FunctionEvent) -> None:
        self.cpu_parent = parent

    def __repr__(self) -> str:
        return (
            f"<FunctionEvent id={self.id} name={self.name} cpu_time_total={self.cpu_time_total:.3f}us "
            f"self_cpu_time_total={self.self_cpu_time_total:.3f}us device_time_total="
            f"{self.device_time_total:.3f}us children={len(self.cpu_children)}>"
        )


# the frame's columns in the order ``build_events`` unpacks them
_EVENT_COLUMNS = (
    "id", "name", "trace_name", "tid", "start_us", "end_us", "cpu_total_ns", "self_cpu_ns",
    "device_total_ns", "self_device_ns", "cpu_mem", "self_cpu_mem", "device_mem", "self_device_mem",
    "input_shapes", "stack", "is_device", "is_user_annotation", "seq", "fwd_tid", "external_id",
    "device", "concrete", "dims", "kind", "overload_name", "types", "category", "flops",
)  # fmt: skip


@functools.lru_cache(maxsize=4096)
def _concrete(text: str) -> tuple[Any, ...]:
    """A "Concrete Inputs" text as torch's values (parsed once per distinct text: most repeat)."""
    return tuple(_scalar(v) for v in _json_list(text))


@functools.lru_cache(maxsize=4096)
def _types(text: str) -> tuple[Any, ...]:
    return tuple(_json_list(text))


def _json_list(text: str | None) -> list[Any]:
    try:
        value = json.loads(text) if text else []
    except ValueError:
        return []
    return value if isinstance(value, list) else []


def _scalar(text: Any) -> Any:
    """A "Concrete Inputs" entry as torch gives it: None for a tensor (Kineto writes ""), the
    value for a scalar or scalar list (Kineto writes its text: "1", "0.5", "True", "[32, 16]")."""
    if not isinstance(text, str):
        return text
    if text == "":
        return None
    if text in ("True", "False"):
        return text == "True"
    if text.startswith("["):  # a scalar list: "[32, 16]"
        try:
            return json.loads(text)
        except ValueError:
            return text
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


# Kineto's flow types (libkineto's kLinkFwdBwd, kLinkAsyncCpuGpu), by the trace's flow category
FLOW_TYPES = {"fwdbwd": 1, "ac2g": 2}


def _flows_by_event(trace: Trace) -> dict[int, tuple[int, int, bool]]:
    """Each event's flow as torch's ``flow_id``/``flow_type``/``flow_start`` (its first one)."""
    out: dict[int, tuple[int, int, bool]] = {}
    flows = trace.flows.filter(pl.col("kind").cast(pl.String).is_in(list(FLOW_TYPES)))
    for kind, flow_id, src, dst in flows.select(
        pl.col("kind").cast(pl.String), "flow_id", "src", "dst"
    ).iter_rows():
        for row, start in ((src, True), (dst, False)):
            if row is not None and row >= 0:
                out.setdefault(row, (flow_id, FLOW_TYPES[kind], start))
    return out


def _kernels_by_op(trace: Trace) -> dict[int, list[Kernel]]:
    """The device work each op launched (torch lists it on the op as ``kernels``)."""
    ev = trace.events
    device = ev.filter(pl.col("kind").is_in(DEVICE_KINDS) & (pl.col("op") >= 0))
    out: dict[int, list[Kernel]] = {}
    for op, name, index, dur in device.select(
        "op", pl.col("name").cast(pl.String), "device", "dur_ns"
    ).iter_rows():
        out.setdefault(op, []).append(Kernel(name, index, dur / 1000.0))
    return out


def build_events(
    trace: Trace,
    *,
    use_device: str | None = None,
    with_flops: bool = False,
    event_args: LazyEventArgs | None = None,
    overload_names: bool = False,
    deadline: float | None = None,
) -> tuple[list[FunctionEvent], bool]:
    """Every event torch's ``events()`` would list, linked to its parent and children, and
    whether ``deadline`` (a ``time.perf_counter()`` value) passed before the last one was
    made: torch's ``post_processing_timeout_s`` then keeps the events made so far.

    ``event_args`` (``compat.event_args``) gives the host ops their ``kwinputs``,
    ``structured_input_strides`` and ``metadata_json`` when first asked for.
    """
    if deadline is not None and time.perf_counter() >= deadline:
        return [], True
    # no cyclic collection while the objects are made: each FunctionEvent brings a dozen
    # objects and no garbage, and the collections Python ran meanwhile walked them all again
    # and again (32k events with shapes: 2.7 s with them, 0.5 s without)
    with gc_paused():
        return _build_events(trace, use_device, with_flops, event_args, overload_names, deadline)


def _build_events(
    trace: Trace,
    use_device: str | None,
    with_flops: bool,
    event_args: LazyEventArgs | None,
    overload_names: bool,
    deadline: float | None,
) -> tuple[list[FunctionEvent], bool]:
    frame = event_frame(trace, with_stack_n=_STACK_DEPTH, overload_names=overload_names)
    if frame.height == 0:
        return [], False
    # times from the start of the profiler's own span, as torch's (Kineto's trace start)
    spans = trace.events.filter(pl.col("kind") == "span")["start_ns"]
    t0 = int(spans.min() if spans.len() else frame["start_ns"].min())  # type: ignore[arg-type]
    ids = frame["id"].to_numpy()
    real = pl.Series(ids >= 0)
    rows_of = np.where(ids >= 0, ids, 0)

    def attribute(column: str, default: Any) -> pl.Series:
        """The Trace's ``column`` for each row (``default`` where missing or synthetic)."""
        values = trace.events[column].gather(rows_of)
        return pl.select(pl.when(real).then(values).otherwise(None).fill_null(default)).to_series()

    rows = frame.with_columns(
        ((pl.col("start_ns") - t0) / 1000.0).alias("start_us"),
        ((pl.col("start_ns") + pl.col("dur_ns") - t0) / 1000.0).alias("end_us"),
        attribute("seq", -1).alias("seq"),
        attribute("fwd_tid", 0).alias("fwd_tid"),
        attribute("external_id", 0).alias("external_id"),
        attribute("device", -1).alias("device"),
        attribute("concrete_inputs", "").alias("concrete"),
        attribute("input_types", "").alias("types"),
        attribute("cat", "").alias("category"),
        attribute("input_dims", "").alias("dims"),
        flops_of(frame, trace) if with_flops else pl.lit(0, pl.Int64).alias("flops"),
    )
    kernels = _kernels_by_op(trace)
    flows = _flows_by_event(trace)
    events: list[FunctionEvent] = []
    by_id: dict[int, FunctionEvent] = {}
    parents: list[int] = rows["parent"].to_list()
    timed_out = False
    # column lists zipped, not ``iter_rows(named=True)``: a dict per row cost 20 µs an event
    columns = [rows[c].to_list() for c in _EVENT_COLUMNS]
    no_flow = (0, 0, False)
    for i, (
        eid, name, trace_name, tid, start_us, end_us, cpu_total, self_cpu, dev_total, self_dev,
        cpu_mem, self_cpu_mem, dev_mem, self_dev_mem, shapes, stack, is_device, is_annotation,
        seq, fwd_tid, external_id, device, concrete, dims, kind, overload_name, types, category, flops,
    ) in enumerate(zip(*columns, strict=True)):  # fmt: skip
        if deadline is not None and i % 256 == 0 and time.perf_counter() >= deadline:
            timed_out = True
            del parents[i:]
            break
        flow_id, flow_type, flow_start = flows.get(eid, no_flow)
        ev = FunctionEvent(
            id=eid,
            name=name,
            trace_name=trace_name,
            thread=tid,
            time_range=Interval(start_us, end_us),
            cpu_time_total=cpu_total / 1000.0,
            self_cpu_time_total=self_cpu / 1000.0,
            device_time_total=dev_total / 1000.0,
            self_device_time_total=self_dev / 1000.0,
            cpu_memory_usage=cpu_mem,
            self_cpu_memory_usage=self_cpu_mem,
            device_memory_usage=dev_mem,
            self_device_memory_usage=self_dev_mem,
            input_shapes=parse_shapes(shapes),
            stack=list(stack or ()),
            is_device=is_device,
            is_user_annotation=is_annotation,
            use_device=use_device,
            sequence_nr=seq,
            fwd_thread=fwd_tid,
            external_id=external_id,
            device_index=max(device, 0),
            concrete_inputs=list(_concrete(concrete)),
            structured_input_shapes=list(_types(dims)),
            is_python_function=kind == "python_function",
            overload_name=overload_name,
            _args=event_args,
            input_dtypes=list(_types(types)),
            activity_type=category or None,
            device_resource_id=tid,
            flow_id=flow_id,
            flow_type=flow_type,
            flow_start=flow_start,
            flops=flops,
            kernels=kernels.get(eid, []) if not is_device else [],
        )
        events.append(ev)
        if eid >= 0:
            by_id[eid] = ev
    for ev, parent_id in zip(events, parents, strict=True):
        parent = by_id.get(parent_id) if parent_id >= 0 else None
        if parent is not None:
            ev.cpu_parent = parent
            parent.cpu_children.append(ev)
    return events, timed_out


class EventList(list[FunctionEvent]):
    """``prof.events()``: the events, with torch's ``EventList`` methods (``table``,
    ``key_averages``, ``total_average``, ``self_cpu_time_total``, the exports), which ask the
    profiler that made the list."""

    def __init__(self, events: Iterable[FunctionEvent], profiler: Any) -> None:
        super().__init__(events)
        self._profiler = profiler

    def key_averages(
        self,
        group_by_input_shapes: bool = False,  # torch's EventList says "shapes" (Lightning passes it)
        group_by_stack_n: int = 0,
        group_by_overload_name: bool = False,
    ) -> KeyAverages:
        return self._profiler.key_averages(  # type: ignore[no-any-return]
            group_by_input_shapes, group_by_stack_n, group_by_overload_name
        )

    def _as_rows(self) -> KeyAverages:
        """One row per event (count 1), in the columns the averages have."""
        columns: dict[str, list[Any]] = {name: [] for name in AVERAGES_SCHEMA}
        for ev in self:
            columns["key"].append(ev.name)
            columns["overload_name"].append(ev.overload_name)
            columns["count"].append(1)
            for name in (*METRIC_COLUMNS, "stack", "flops", "is_device", "is_user_annotation"):
                columns[name].append(getattr(ev, name))
            columns["input_shapes"].append(json.dumps(ev.input_shapes) if ev.input_shapes else "")
            columns["is_top_level"].append(ev.cpu_parent is None)
        frame = pl.DataFrame(columns, schema=AVERAGES_SCHEMA)
        p = self._profiler
        return KeyAverages(
            frame, use_device=p.use_device, profile_memory=p.profile_memory, with_flops=p.with_flops
        )

    def table(self, sort_by: str | None = None, row_limit: int | None = 100, **options: Any) -> str:
        """torch's table with one row per event (``EventList.table``), same options."""
        return self._as_rows().render(TableOptions(sort_by=sort_by, row_limit=row_limit, **options))

    def total_average(self) -> KeyAverage:
        return self._as_rows().total_average()

    @property
    def self_cpu_time_total(self) -> float:
        return float(sum(ev.self_cpu_time_total for ev in self))

    def export_chrome_trace(self, path: str) -> None:
        self._profiler.export_chrome_trace(path)

    def export_stacks(self, path: str, metric: str) -> None:
        self._profiler.export_stacks(path, metric)

    def supported_export_stacks_metrics(self) -> list[str]:
        return list(STACK_METRICS)


def export_stacks(traces: list[Trace], path: Path, metric: str) -> None:
    """Write collapsed stacks: enclosing Python frames (outermost first), then the event; whole
    or not at all (``writes.write_atomically``)."""
    if metric not in STACK_METRICS:
        raise UsageError("metric should be one of: " + str(list(STACK_METRICS)))
    column = "self_cpu_ns" if metric == "self_cpu_time_total" else "self_device_ns"
    # torchscope's own Python frames (a `torchscope run`'s runner and CLI) are neither rows nor frames
    frames = [
        event_frame(t, with_stack_n=_STACK_DEPTH).filter(~pl.col("id").is_in(np.flatnonzero(tool_frames(t))))
        for t in traces
    ]
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
    text = "".join(f"{stack} {value}\n" for stack, value in lines.iter_rows())
    write_atomically(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))
