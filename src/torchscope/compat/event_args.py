"""The per-event ``args`` torch's ``FunctionEvent`` exposes but the Trace does not model:
``kwinputs`` (the keyword inputs of ``_RecordFunctionFast``, e.g. inductor's Triton launches'
``kernel_file``/``grid``/``stream``), ``metadata_json`` (Kineto's metadata of the event, with
``_ExperimentalConfig(expose_kineto_event_metadata=True)``) and ``structured_input_strides``.

Kineto writes a keyword input as a plain ``args`` key beside torch's own keys (``Input Dims``,
``External id``, ...), so a keyword input is any key that is not one of torch's or Kineto's.
The Trace keeps only the keys its analyses use, so these are read again from the cycle's saved
file, once, when ``prof.events()`` is first built (never for tables), and joined to the events
by ``External id``, which is unique per host op within a cycle.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

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


def host_event_args(source: Path | dict[str, Any] | None) -> dict[int, EventArgs]:
    """``External id`` -> the op's keyword inputs and Kineto metadata, for every host op of a
    saved cycle (a file Kineto wrote, or the portable collector's document) that has either."""
    if source is None:
        return {}
    if isinstance(source, dict):
        events = msgspec.convert(source.get("traceEvents") or [], list[_ArgsEvent], strict=False)
    else:
        try:
            events = _DOC_DECODER.decode(source.read_bytes()).traceEvents or []
        except (OSError, msgspec.DecodeError, msgspec.ValidationError):
            return {}  # a cycle Kineto wrote badly was repaired when read: no keyword inputs
    out: dict[int, EventArgs] = {}
    for ev in events:
        args = ev.args
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
    return out
