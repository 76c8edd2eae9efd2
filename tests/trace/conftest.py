"""Fixtures for the trace tests: the real traces, and an independent count of what they hold."""

from __future__ import annotations

import gzip
from collections import Counter
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import msgspec
import pytest

from torchscope.trace import Trace, read_chrome

TRACES = Path(__file__).resolve().parents[2].parent / "shared" / "traces"
ALL_TRACES = sorted(p for p in TRACES.rglob("*") if p.name.endswith((".json", ".json.gz")))


@dataclass
class RawCounts:
    """What a plain ``json`` read of a trace says, to check the reader against."""

    by_cat: Counter[str] = field(default_factory=Counter)  # complete + instant events, not [memory]
    memory: int = 0
    dur_ns_by_cat: dict[str, int] = field(default_factory=dict)
    flows: Counter[str] = field(default_factory=Counter)  # (cat) of 's'/'f' events


_CACHE: dict[Path, RawCounts] = {}


def raw_counts(path: Path) -> RawCounts:
    if path in _CACHE:
        return _CACHE[path]
    data = path.read_bytes()
    if path.name.endswith(".gz"):
        data = gzip.decompress(data)
    doc: Any = msgspec.json.decode(data)  # generic decode: not the reader's typed path
    events = doc if isinstance(doc, list) else doc["traceEvents"]
    out = RawCounts()
    for e in events:
        ph = e.get("ph")
        if ph in ("X", "i", "I"):
            if e.get("name") == "[memory]" and ph != "X":
                out.memory += 1
                continue
            cat = e.get("cat") or ""
            out.by_cat[cat] += 1
            if ph == "X":
                # repr of the float is the file's own decimal text: exact ns
                out.dur_ns_by_cat[cat] = out.dur_ns_by_cat.get(cat, 0) + int(
                    (Decimal(repr(e["dur"])) * 1000).to_integral_value()
                )
        elif ph in ("s", "f"):
            out.flows[e.get("cat") or ""] += 1
    _CACHE[path] = out
    return out


@pytest.fixture(params=ALL_TRACES, ids=lambda p: p.relative_to(TRACES).as_posix())
def trace_path(request: pytest.FixtureRequest) -> Path:
    return request.param  # type: ignore[no-any-return]


_TRACE_CACHE: dict[Path, Trace] = {}


def read_once(path: Path) -> Trace:
    """Each real trace is read once per test session (Traces are immutable)."""
    if path not in _TRACE_CACHE:
        _TRACE_CACHE[path] = read_chrome(path)
    return _TRACE_CACHE[path]
