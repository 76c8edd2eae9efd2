"""The typed shape of a Kineto (Chrome trace) JSON document: only the fields we model.

msgspec decodes straight into these Structs and skips every other key without building it,
which is most of why reading a trace is faster than ``json.loads``. ``args`` is a typed Struct
too (the keys of every dialect we know); values we keep verbatim (input shapes, grid sizes)
are ``msgspec.Raw`` slices of the original text.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import msgspec

_NO_RAW = msgspec.Raw(b"")


# -- the typed shape of an event: only what we model -------------------------------------------
class Args(msgspec.Struct, gc=False):
    """The ``args`` keys we model; the decoder skips every other key without building it."""

    external_id: int | None = msgspec.field(name="External id", default=None)
    external_id_2021: int | None = msgspec.field(name="external id", default=None)
    correlation: int | None = None
    device: int | None = None
    stream: int | str | None = None
    stream_id: int | str | None = None  # mtia_runtime
    seq: int | None = msgspec.field(name="Sequence number", default=None)
    fwd_tid: int | None = msgspec.field(name="Fwd thread id", default=None)
    # kept verbatim as JSON text (an empty Raw means "absent": msgspec has no Raw | None)
    input_dims: msgspec.Raw = msgspec.field(name="Input Dims", default=_NO_RAW)
    input_types: msgspec.Raw = msgspec.field(name="Input type", default=_NO_RAW)
    concrete_inputs: msgspec.Raw = msgspec.field(name="Concrete Inputs", default=_NO_RAW)
    grid: msgspec.Raw = _NO_RAW
    block: msgspec.Raw = _NO_RAW
    registers_per_thread: int | None = msgspec.field(name="registers per thread", default=None)
    shared_memory: int | None = msgspec.field(name="shared memory", default=None)
    blocks_per_sm: float | None = msgspec.field(name="blocks per SM", default=None)
    warps_per_sm: float | None = msgspec.field(name="warps per SM", default=None)
    occupancy_pct: float | None = msgspec.field(name="est. achieved occupancy %", default=None)
    bytes: int | None = None
    # [memory] instant events
    device_type: int | None = msgspec.field(name="Device Type", default=None)
    device_id: int | None = msgspec.field(name="Device Id", default=None)
    addr: int | None = msgspec.field(name="Addr", default=None)
    mem_bytes: int | None = msgspec.field(name="Bytes", default=None)
    total_allocated: int | None = msgspec.field(name="Total Allocated", default=None)
    total_reserved: int | None = msgspec.field(name="Total Reserved", default=None)
    # 'M' metadata rows
    name: str | None = None
    sort_index: int | None = None
    labels: str | None = None


class Event(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str | None = None
    name: str | None = None
    pid: int | str | None = None
    tid: int | str | None = None
    # a Decimal keeps a value written with decimals exact (a float cannot hold 1.7e15 us to the ns)
    ts: int | Decimal | None = None
    dur: int | Decimal | None = None
    id: int | str | None = None
    bp: str | None = None
    args: Args | None = None


class RawArgsEvent(msgspec.Struct, gc=False):
    """Second, rare pass: the verbatim ``args`` of events whose category we do not know."""

    ph: str = ""
    cat: str | None = None
    args: msgspec.Raw = _NO_RAW


class Document(msgspec.Struct):
    """A Kineto document: the events plus the top-level keys Kineto writes.

    Decoding the whole file through one typed Struct is a single pass; other top-level keys
    (cluster job names and the like) are skipped by the decoder and not kept.
    """

    traceEvents: list[Event] | None = None  # noqa: N815 - Kineto's key
    schemaVersion: Any = None  # noqa: N815
    deviceProperties: Any = None  # noqa: N815
    distributedInfo: Any = None  # noqa: N815
    baseTimeNanoseconds: Any = None  # noqa: N815
    displayTimeUnit: Any = None  # noqa: N815
    traceName: Any = None  # noqa: N815
    record_shapes: Any = None
    profile_memory: Any = None
    with_stack: Any = None
    with_flops: Any = None
    with_modules: Any = None
    cupti_version: Any = None
    cuda_runtime_version: Any = None
    cuda_driver_version: Any = None
    hip_runtime_version: Any = None
    trace_id: Any = None
    torch_version: Any = None
    pytorch_version: Any = None
    torchscope_cycle_ended_by: Any = None  # dialect.CYCLE_ENDED_BY_KEY
    torchscope_run: Any = None  # dialect.RUN_KEY
    torchscope_tool_threads: Any = None  # dialect.TOOL_THREADS_KEY


class RawArgsDocument(msgspec.Struct):
    traceEvents: list[RawArgsEvent] | None = None  # noqa: N815


EMPTY_ARGS = Args()
