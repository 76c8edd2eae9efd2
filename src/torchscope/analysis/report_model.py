"""The report's types: one typed, versioned contract that every renderer reads.

``analysis.report`` fills these Structs from the analyses; ``report --json`` is their encoding
(``msgspec.to_builtins``), the terminal and the HTML page render the same object. Units are
in the field names and, explicitly, in ``UNITS`` (field name -> unit), which the report
carries under ``units`` so no renderer guesses a unit from a name:

- ``us``: microseconds, converted from the trace's integer nanoseconds without float
  rounding (``us_of``): a whole number of microseconds is written as an integer, so a
  timestamp the file wrote as ``1666149715033200`` is printed back as exactly that.
- ``timestamp_us``: a point in time in the trace's clock (microseconds); renderers show it
  relative to ``meta.start_us``, the trace's first event.
- ``bytes``, ``percent`` (0..100), ``fraction`` (0..1), ``count``, ``id`` (a step, device,
  stream or rank number), ``flop``, ``flop/s``, ``blocks/SM``. Addresses are hex strings.
"""

from __future__ import annotations

import math
from typing import Any

import msgspec
import polars as pl


class Us(float):
    """Microseconds that are not whole: a float for arithmetic, plus the exact nanoseconds.

    A timestamp such as 1712195495502094.565 µs has no float that prints as that (the nearest
    prints ``...094.5``); ``exact()`` gives the text the file wrote, which ``--json`` prints.
    """

    __slots__ = ("ns",)
    ns: int

    def __new__(cls, ns: int) -> Us:
        self = super().__new__(cls, ns / 1000)
        self.ns = ns
        return self

    def exact(self) -> str:
        whole, frac = divmod(abs(self.ns), 1000)
        return f"{'-' if self.ns < 0 else ''}{whole}.{frac:03d}".rstrip("0")


def us_of(ns: float | int | None) -> int | float | None:
    """Nanoseconds as microseconds, exactly: whole microseconds as an int, else a ``Us``.

    Dividing after a float conversion rounded big timestamps (``1666149715033200000`` ns
    became ``1666149715033200.2`` µs); integer arithmetic keeps what the file said.
    Fractional nanoseconds (averages) are rounded to the nanosecond first.
    """
    if ns is None:
        return None
    if isinstance(ns, float):
        if math.isnan(ns) or math.isinf(ns):
            return None
        ns = round(ns)
    ns = int(ns)
    return ns // 1000 if ns % 1000 == 0 else Us(ns)


_SCALARS = (int, float, str, bool, type(None))
# per Struct class: its fields, and the defaults to leave out (omit_defaults), computed once
_FIELDS: dict[type, tuple[tuple[str, ...], dict[str, Any]]] = {}


def _struct_layout(cls: type) -> tuple[tuple[str, ...], dict[str, Any]]:
    got = _FIELDS.get(cls)
    if got is None:
        fields: tuple[str, ...] = cls.__struct_fields__  # type: ignore[attr-defined]
        defaults: tuple[Any, ...] = cls.__struct_defaults__  # type: ignore[attr-defined]
        omit = cls.__struct_config__.omit_defaults  # type: ignore[attr-defined]
        dropped = dict(zip(fields[-len(defaults) :], defaults, strict=True)) if omit and defaults else {}
        got = _FIELDS[cls] = (fields, dropped)
    return got


def plain(value: Any) -> Any:
    """The report as dicts and lists (``msgspec.to_builtins``, which refuses ``Us``), keeping
    ``Us`` values and leaving out fields a Struct marks ``omit_defaults`` when at their default.

    Called on every value of a report (25,000 on a small trace): scalars return first, and a
    Struct class's fields and defaults are looked up once per class, not per instance."""
    if isinstance(value, _SCALARS):
        return value
    if isinstance(value, msgspec.Struct):
        fields, dropped = _struct_layout(type(value))
        out = {}
        for f in fields:
            v = getattr(value, f)
            if f in dropped and v == dropped[f]:
                continue
            out[f] = v if isinstance(v, _SCALARS) else plain(v)
        return out
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


def us_map(d: dict[str, float]) -> dict[str, Any]:
    return {k: us_of(v) for k, v in d.items()}


def _renamed(column: str) -> str:
    if column.endswith("_ns"):
        return column[:-3] + "_us"
    return "us" if column == "ns" else column


def _convert(column: str, v: Any) -> Any:
    if column.endswith("_ns") or column == "ns":
        return us_of(v)
    if column == "addr":
        return None if v is None else hex(int(v))
    if isinstance(v, float) and (math.isnan(v) or math.isinf(v)):
        return None
    return v


def records_of(df: pl.DataFrame) -> list[dict[str, Any]]:
    """The rows of a DataFrame for the report: ``*_ns`` as exact ``*_us``, addresses as hex, NaN
    as null. The conversion is chosen once per column: rows of a report are thousands on a small
    trace, and a per-value test of each column name was most of their cost."""
    names = [_renamed(c) for c in df.columns]
    convert: list[Any] = []
    for c, dtype in zip(df.columns, df.dtypes, strict=True):
        if c.endswith("_ns") or c == "ns":
            convert.append(us_of)
        elif c == "addr":
            convert.append(lambda v: None if v is None else hex(int(v)))
        elif dtype.is_float():
            convert.append(lambda v: None if v is not None and (math.isnan(v) or math.isinf(v)) else v)
        elif dtype == pl.Object:
            convert.append(lambda v, c=c: _convert(c, v))
        else:
            convert.append(None)
    plan = list(zip(names, convert, strict=True))
    return [{n: (f(v) if f is not None else v) for (n, f), v in zip(plan, row, strict=True)} for row in df.iter_rows()]


class Row(msgspec.Struct, kw_only=True):
    """A table row; ``from_frame`` fills rows from an analysis DataFrame (``records_of``)."""

    @classmethod
    def from_frame(cls, df: pl.DataFrame, top: int | None = None) -> list[Any]:
        if top is not None:
            df = df.head(top)
        return [cls(**r) for r in records_of(df)]


# -- the trace's facts ------------------------------------------------------------------------


class Meta(msgspec.Struct, kw_only=True):
    rank: int | None
    world_size: int | None
    backend: str | None
    torch_version: str | None
    devices: list[str | None]  # device names from the trace's deviceProperties
    device_ids: list[int]  # devices that ran work
    warnings: list[str]  # what the reader had to repair or skip in the input
    # what the report left out of the trace's steps, and why (the profile's exit)
    notes: list[str] = msgspec.field(default_factory=list)
    # the trace is nothing but the profile's exit: its one "step" is no step of the run
    only_exit: bool = False
    # the trace's one step was cut by the script's error: it ran, but is no whole step
    only_cut_step: bool = False
    steps_from_trace: bool  # False: no ProfilerStep, the whole trace is one step
    record_shapes: bool  # input shapes recorded: the profiler's setting, else any op has them
    with_stack: bool  # Python stacks recorded: the profiler's setting, else any Python frame event
    events: int
    event_kinds: dict[str, int]  # events per kind
    memory_events: int
    start_us: float  # first event's start (timestamp)
    end_us: float
    span_us: float


class Step(Row, kw_only=True):
    """One step, or, in a trace of more than ``MAX_STEP_ROWS`` steps, a run of consecutive
    steps (``steps`` of them, ``step`` to ``last_step``): durations and breakdowns are then
    their means, ``start_us`` the first one's start and ``end_us`` the last one's end."""

    step: int
    last_step: int
    steps: int  # how many steps the row stands for: 1, or more above MAX_STEP_ROWS
    start_us: float  # timestamp
    end_us: float  # timestamp
    dur_us: float
    breakdown_us: dict[str, float]  # TensorBoard categories
    host_breakdown_us: dict[str, float]  # host categories
    comm_overlap_us: dict[str, float]  # computation, communication, overlap, other


# A report lists each step up to this many; more are grouped into this many runs of consecutive
# steps. 200,000 steps, one row each, took a report 17 s and 1.8 GB and made an 81 MB page
# whose step chart no screen can show; the table of the same trace took 0.8 s.
MAX_STEP_ROWS = 2000


class Device(Row, kw_only=True):
    device: int
    kernel_us: float
    utilization: float
    sm_efficiency: float | None
    achieved_occupancy: float | None
    tensor_core_ratio: float | None


class Operator(Row, kw_only=True):
    name: str
    kind: str
    calls: int
    host_self_us: float
    host_total_us: float
    host_avg_us: float
    host_max_us: float
    device_self_us: float
    device_total_us: float
    tensor_core_eligible: bool


OTHER_SHAPES = "(other shapes)"  # an operators_by_shape row's input_dims: the op's shapes past the top few


class OperatorByShape(Operator, kw_only=True):
    """An op's calls with one input shape, or (``input_dims`` OTHER_SHAPES) with the shapes past
    its top few: the rows of each op in ``operators`` add up to its calls and times."""

    input_dims: str | None  # JSON of the input shapes, None when not recorded, or OTHER_SHAPES
    shapes: int = 1  # distinct input shapes this row stands for (more than 1 for OTHER_SHAPES)


class CallStack(Row, kw_only=True):
    name: str
    input_dims: str | None
    stack: str
    calls: int
    host_total_us: float
    host_self_us: float


class Flops(Row, kw_only=True):
    name: str
    input_dims: str | None
    calls: int
    flops: float
    time_us: float
    flops_per_s: float | None


class Kernel(Row, kw_only=True):
    name: str
    count: int
    total_us: float
    mean_us: float
    min_us: float
    max_us: float
    blocks_per_sm: float | None
    occupancy_pct: float | None
    tensor_core: bool
    share_pct: float = 0.0  # of all kernel time


OTHER_KERNELS = "(other kernels)"  # a kernels_by_op row: the op row's kernels past the top few


class KernelByOp(Row, kw_only=True):
    """Device work (kernels, memcpy, memset) an op row launched, itself or through the ops it
    calls: for each (op_name, input_dims) the rows' ``total_us`` add up to that op row's
    ``device_total_us`` and their ``self_total_us`` to its ``device_self_us``."""

    op_name: str
    input_dims: str | None
    name: str  # the kernel, or OTHER_KERNELS: the rest of this op row's device work
    count: int
    total_us: float
    mean_us: float
    min_us: float
    max_us: float
    self_count: int  # launched by this op itself (the innermost op)
    self_total_us: float
    op_share_pct: float | None  # of the op row's device total


OTHER_OPS = "(other ops)"  # a kernel_launchers row: the kernel's launchers past the top few
NO_OP = "(no launching op)"  # a kernel_launchers row: launches no op on the host encloses


class KernelLauncher(Row, kw_only=True):
    """The ops that launched a kernel of ``kernels`` themselves (the innermost op or annotation):
    for each kernel the rows' ``count`` and ``total_us`` add up to that kernel row's."""

    name: str  # the kernel, as in ``kernels``
    op_name: str  # the launching op, OTHER_OPS (the rest of this kernel's launchers) or NO_OP
    count: int
    total_us: float
    ops: int  # distinct launching ops this row stands for (1, or more for OTHER_OPS)


class KernelType(Row, kw_only=True):
    kernel_type: str
    us: float
    pct: float


class IdleTime(Row, kw_only=True):
    device: int
    stream: int
    host_wait_us: float
    kernel_wait_us: float
    other_us: float
    idle_us: float


class QueueLength(Row, kw_only=True):
    device: int
    stream: int
    max: int
    mean: float
    time_weighted_mean: float


class MemoryPeak(Row, kw_only=True):
    device: str
    peak_allocated_bytes: int
    peak_ts_us: float  # timestamp
    peak_op: str | None
    peak_reserved_bytes: int | None
    allocated_bytes: int
    allocations: int


class MemoryByOp(Row, kw_only=True):
    name: str
    device: str
    allocations: int
    self_allocated_bytes: int
    self_freed_bytes: int
    self_net_bytes: int
    total_allocations: int
    total_allocated_bytes: int
    total_net_bytes: int


class Leak(Row, kw_only=True):
    device: str
    ts_us: float  # timestamp
    bytes: int
    addr: str | None  # hex
    op_name: str | None


class Memory(msgspec.Struct, kw_only=True):
    peaks: list[MemoryPeak]
    by_op: list[MemoryByOp]
    leaks: list[Leak]


class Module(Row, kw_only=True):
    path: str
    module: str
    depth: int
    calls: int
    host_us: float
    device_us: float


class ModuleOp(Row, kw_only=True):
    """An op a module calls itself (``analysis.modules.module_ops``): the Modules drill-down."""

    path: str
    name: str
    calls: int
    host_us: float
    device_us: float


class Finding(msgspec.Struct, kw_only=True, omit_defaults=True):
    rule: str
    message: str
    evidence: dict[str, Any]
    fix: str
    rank: int | None = None


class TraceReport(msgspec.Struct, kw_only=True):
    report_version: int
    kind: str  # "trace"
    source: str
    meta: Meta
    steps: list[Step]
    breakdown_us: dict[str, float]
    host_breakdown_us: dict[str, float]
    devices: list[Device]
    comm_overlap: dict[str, float]
    operators: list[Operator]
    operators_by_shape: list[OperatorByShape]
    call_stacks: list[CallStack]
    flops: list[Flops]
    kernels: list[Kernel]
    kernel_launchers: list[KernelLauncher]
    kernels_by_op: list[KernelByOp]
    kernel_types: list[KernelType]
    temporal_breakdown: dict[str, float]
    comm_comp_overlap: float | None
    launch_stats: dict[str, Any]
    idle_time: list[IdleTime]
    queue_length: list[QueueLength]
    memory: Memory
    modules: list[Module]
    module_ops: list[ModuleOp]
    recommendations: list[Finding]
    units: dict[str, str]


class RankRow(Row, kw_only=True):
    rank: int
    name: str  # the trace's name in the set (file name)
    steps: int
    step_us: float
    breakdown_us: dict[str, float]
    computation_us: float
    communication_us: float
    overlap_us: float
    other_us: float
    vs_fastest_pct: float | None
    straggler: bool


class DistributedView(msgspec.Struct, kw_only=True):
    ranks: list[RankRow]
    collectives: list[dict[str, Any]]
    slowest_rank: int | None
    wait_for_slowest: list[dict[str, Any]]


class TraceSetReport(msgspec.Struct, kw_only=True):
    report_version: int
    kind: str  # "traceset"
    source: str
    steps: int
    breakdown_us: dict[str, float]
    host_breakdown_us: dict[str, float]
    distributed: DistributedView
    ranks: dict[str, TraceReport]
    recommendations: list[Finding]
    warnings: list[str]  # files of the directory that were not read, and why
    units: dict[str, str]


# -- units ------------------------------------------------------------------------------------

TIMESTAMPS = frozenset({"start_us", "end_us", "peak_ts_us", "ts_us"})
FRACTIONS = frozenset(
    {"utilization", "sm_efficiency", "achieved_occupancy", "tensor_core_ratio", "comm_comp_overlap"}
)
IDS = frozenset({"step", "device", "device_ids", "stream", "rank", "slowest_rank"})
COUNTS = frozenset(
    {
        "steps", "calls", "count", "events", "event_kinds", "memory_events", "allocations", "total_allocations",
        "world_size", "depth", "max", "mean", "time_weighted_mean", "launched",
        "short_kernels", "runtime_outliers", "launch_delay_outliers", "negative_launch_delays",
        "clock_skewed_launches", "synchronous_launches", "graph_launched", "shapes", "ops",
    }
)  # fmt: skip


def unit_of(field: str) -> str | None:
    """The unit of a numeric field, by the report's naming convention (None: not a number)."""
    for per in ("_per_step", "_per_call", "_per_rank"):
        if field.endswith(per) and field != per[1:]:
            return unit_of(field.removesuffix(per))
    if field in TIMESTAMPS:
        return "timestamp_us"
    if field in FRACTIONS or field == "share" or field.endswith(("_share", "_ratio", "_fraction")):
        return "fraction"
    if field == "us" or field.endswith("_us"):
        return "us"
    if field == "bytes" or field.endswith("_bytes"):
        return "bytes"
    if field == "pct" or field.endswith("_pct"):
        return "percent"
    if field == "flops":
        return "flop"
    if field == "flops_per_s":
        return "flop/s"
    if field == "blocks_per_sm":
        return "blocks/SM"
    if field in IDS:
        return "id"
    if field in COUNTS or field.endswith(("_count", "_calls", "_kernels", "_launches")):
        return "count"
    return None


def _fields(struct: type[msgspec.Struct]) -> tuple[str, ...]:
    return struct.__struct_fields__


MODEL = (Meta, Step, Device, Operator, OperatorByShape, CallStack, Flops, Kernel, KernelLauncher, KernelByOp, KernelType,
         IdleTime, QueueLength, MemoryPeak, MemoryByOp, Leak, Module, RankRow, TraceReport,
         TraceSetReport)  # fmt: skip
UNITS: dict[str, str] = {
    f: u for s in MODEL for f in _fields(s) if (u := unit_of(f)) is not None and f not in ("units",)
}


def units_of(*dicts: dict[str, Any]) -> dict[str, str]:
    """UNITS plus the units of free-form keys (a finding's evidence, a collective's columns):
    by the naming convention, else ``count`` (a plain number), so every number has one."""
    out = dict(UNITS)
    for d in dicts:
        for k, v in d.items():
            if k in out:
                continue
            if isinstance(v, dict):
                v = next(iter(v.values()), None)
            if isinstance(v, int | float) and not isinstance(v, bool):
                out[k] = unit_of(k) or "count"
    return out
