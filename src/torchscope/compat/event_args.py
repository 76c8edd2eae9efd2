"""The per-event ``args`` torch's ``FunctionEvent`` exposes but the Trace does not model:
``kwinputs`` (the keyword inputs of ``_RecordFunctionFast``, e.g. inductor's Triton launches'
``kernel_file``/``grid``/``stream``), ``metadata_json`` (Kineto's metadata of the event, with
``_ExperimentalConfig(expose_kineto_event_metadata=True)``) and ``structured_input_strides``.

Kineto writes a keyword input as a plain ``args`` key beside torch's own keys (``Input Dims``,
``External id``, ...), so a keyword input is any key that is not one of torch's or Kineto's.
The Trace keeps only the keys its analyses use, so these are read again from the cycle's saved
file, once, the first time an event is asked for one of them (``LazyEventArgs``: building
``prof.events()`` and printing tables never pay for it; on 150k events the read costs about as
much as 15% of building the events), and joined to the events by ``External id``, which is
unique per host op within a cycle.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, BinaryIO

import msgspec

# the keys torch and Kineto write into a host op's args themselves (torch 2.13's
# collection.cpp / kineto_shim.cpp and Kineto's writer): every other key is a keyword input
TORCH_ARG_KEYS = frozenset(
    {
        "External id",
        "Record function id",
        "Sequence number",
        "Fwd thread id",
        "Concrete Inputs",
        "Input type",
        "Input Strides",
        "Input Dims",
        "Ev Idx",
        "Call stack",
        "Module Hierarchy",
        "Profiler Event Index",
        "Trace iteration",
        "Trace name",
        "Device",
        "Overload name",
        "Python id",
        "Python parent id",
        "Python module id",
        "Python thread",
        "finished",
        # record_param_comms (collectives)
        "Collective name",
        "dtype",
        "In msg nelems",
        "Out msg nelems",
        "In split size",
        "Out split size",
        "Group size",
        "Global rank start",
        "Global rank stride",
        "Process Group Name",
        "Process Group Description",
        "Process Group Ranks",
        "Process Group ID",
        "Is asynchronized op",
        "Rank",
    }
)
# the keys of a host op's args that are Kineto's own metadata of the activity (what torch's
# ``metadata_json`` shows for a host op); torch's keys above are written by torch, not Kineto
KINETO_HOST_METADATA_KEYS = ("Ev Idx",)
HOST_CATEGORIES = frozenset({"cpu_op", "user_annotation", "Operator"})


class _ArgsEvent(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str | None = None
    name: str = ""
    ts: float = 0.0
    dur: float = 0.0
    args: dict[str, Any] | None = None


class _Document(msgspec.Struct, gc=False):
    traceEvents: list[_ArgsEvent] | None = None  # noqa: N815


_DOC_DECODER = msgspec.json.Decoder(_Document, strict=False)


class EventArgs(msgspec.Struct, frozen=True):
    """What one host op's args add to its ``FunctionEvent``."""

    kwinputs: dict[str, Any]
    metadata: str  # Kineto's metadata as torch's ``metadata_json`` text: '"Ev Idx": 3'
    strides: list[Any]  # "Input Strides" (torch's ``structured_input_strides``)


def _fragment(args: dict[str, Any], keys: tuple[str, ...]) -> str:
    return ", ".join(f"{json.dumps(k)}: {json.dumps(args[k])}" for k in keys if k in args)


PythonIds = tuple[int, int, int]  # torch's python_id, python_parent_id, python_module_id
NO_PYTHON_IDS: PythonIds = (-1, -1, -1)


class CycleArgs(msgspec.Struct, frozen=True):
    """What a cycle's file adds to its events: host ops' args by ``External id``, and the
    Python tracer's ids of its ``python_function`` events, in the Trace's row order."""

    by_external_id: dict[int, EventArgs]
    python: list[tuple[str, PythonIds]]


def host_event_args(source: Path | BinaryIO | dict[str, Any] | None) -> CycleArgs:
    """The args of a saved cycle (a file Kineto wrote, open or by path, or the portable
    collector's document) that torch's events expose and the Trace does not keep."""
    if source is None:
        return CycleArgs({}, [])
    if isinstance(source, dict):
        events = msgspec.convert(source.get("traceEvents") or [], list[_ArgsEvent], strict=False)
    else:
        try:
            data = source.read_bytes() if isinstance(source, Path) else source.read()
            events = _DOC_DECODER.decode(data).traceEvents or []
        except (OSError, msgspec.DecodeError, msgspec.ValidationError):
            return CycleArgs({}, [])  # a cycle Kineto wrote badly was repaired when read
    out: dict[int, EventArgs] = {}
    python: list[tuple[float, float, int, str, PythonIds]] = []
    for order, ev in enumerate(events):
        args = ev.args
        if ev.ph == "X" and ev.cat == "python_function" and args:
            py_id, parent, module = (
                value if isinstance(value, int) else -1
                for value in (
                    args.get("Python id"),
                    args.get("Python parent id"),
                    args.get("Python module id"),
                )
            )
            python.append((ev.ts, -ev.dur, order, ev.name, (py_id, parent, module)))
        if ev.ph != "X" or not args or ev.cat not in HOST_CATEGORIES:
            continue
        ext = args.get("External id")
        if not isinstance(ext, int):
            continue
        kwinputs = {k: v for k, v in args.items() if k not in TORCH_ARG_KEYS}
        strides = args.get("Input Strides")
        out[ext] = EventArgs(
            kwinputs,
            _fragment(args, KINETO_HOST_METADATA_KEYS),
            strides if isinstance(strides, list) else [],
        )
    python.sort()  # the Trace's row order: start, longest first, then file order
    return CycleArgs(out, [(name, ids) for *_, name, ids in python])


NO_ARGS = EventArgs({}, "", [])


class LazyEventArgs:
    """``host_event_args`` of one cycle, read on the first lookup and kept for the next ones."""

    def __init__(
        self,
        source: Path | dict[str, Any] | None,
        *,
        with_metadata: bool,
        python_rows: list[tuple[int, str]] | None = None,
    ) -> None:
        # the saved file is opened now: the session deletes it when the next cycle starts, and
        # an open file stays readable after that, so events kept for later lose nothing
        self._source: BinaryIO | dict[str, Any] | None
        try:
            self._source = open(source, "rb") if isinstance(source, Path) else source  # noqa: SIM115
        except OSError:
            self._source = None
        self.with_metadata = with_metadata
        self._python_rows = python_rows or []  # (Trace row, name) of python_function events
        self._read: CycleArgs | None = None
        self._python: dict[int, PythonIds] | None = None

    def _cycle(self) -> CycleArgs:
        if self._read is None:
            source, self._source = self._source, None
            self._read = host_event_args(source)
            if source is not None and not isinstance(source, dict):
                source.close()
        return self._read

    def of(self, external_id: int) -> EventArgs:
        return self._cycle().by_external_id.get(external_id, NO_ARGS)

    def python_ids(self, row: int) -> PythonIds:
        """The Python tracer's ids of the ``python_function`` event at Trace row ``row``; the
        file's and the Trace's python events are matched in order, and only when every name
        agrees (else -1s, never another frame's ids)."""
        if self._python is None:
            found = self._cycle().python
            rows = self._python_rows
            same = len(found) == len(rows) and all(
                n == name for (n, _), (_, name) in zip(found, rows, strict=True)
            )
            self._python = {r: ids for (r, _), (_, ids) in zip(rows, found, strict=True)} if same else {}
        return self._python.get(row, NO_PYTHON_IDS)

    def __del__(self) -> None:
        if self._source is not None and not isinstance(self._source, dict):
            self._source.close()
