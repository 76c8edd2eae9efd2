"""No input makes the reader raise anything but TraceError, hang, or lose events silently.

Two sources of bad input: hypothesis-generated JSON shaped like traces, and mutations of a
real trace (truncation, byte flips, fields deleted or replaced by wrong types).
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import polars as pl
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from torchscope.errors import TraceError
from torchscope.trace import Trace, read_chrome, read_chrome_document

SMALL = "cuda/alexnet_benchmark.json.gz"

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)
event = st.fixed_dictionaries(
    {},
    optional={
        "ph": st.sampled_from(["X", "i", "s", "f", "t", "M", "B", "E", "", 1]),
        "cat": st.one_of(
            st.sampled_from(["cpu_op", "kernel", "cuda_runtime", "Operator", "gpu_memcpy", "ac2g"]), scalars
        ),
        "name": st.one_of(
            st.sampled_from(["[memory]", "ProfilerStep#1", "thread_name", "process_name"]), scalars
        ),
        "pid": st.one_of(st.integers(-5, 5), st.sampled_from(["Spans", "stream 7", "12"]), scalars),
        "tid": st.one_of(st.integers(-5, 5), st.sampled_from(["Spans", "stream 7", "12"]), scalars),
        "ts": st.one_of(st.integers(0, 10**6), st.floats(0, 1e6), scalars),
        "dur": st.one_of(st.integers(0, 10**4), st.floats(0, 1e4), scalars),
        "id": st.one_of(st.integers(0, 5), scalars),
        "bp": st.sampled_from(["e", "s"]),
        "args": st.one_of(
            st.fixed_dictionaries(
                {},
                optional={
                    "correlation": st.one_of(st.integers(0, 5), scalars),
                    "External id": st.one_of(st.integers(0, 5), scalars),
                    "stream": st.one_of(st.integers(0, 8), scalars),
                    "device": st.one_of(st.integers(0, 2), scalars),
                    "grid": values,
                    "Input Dims": values,
                    "Bytes": st.one_of(st.integers(-100, 100), scalars),
                    "name": scalars,
                    "sort_index": scalars,
                },
            ),
            values,
        ),
    },
)
documents = st.one_of(
    st.lists(st.one_of(event, values), max_size=12),
    st.fixed_dictionaries(
        {"traceEvents": st.lists(st.one_of(event, values), max_size=12)},
        optional={
            "distributedInfo": values,
            "deviceProperties": values,
            "baseTimeNanoseconds": values,
            "schemaVersion": values,
        },
    ),
    values,
)


def _check(result: Trace) -> None:
    ev = result.events
    assert ev["id"].to_list() == list(range(ev.height))
    assert (ev["self_ns"] >= 0).all() and (ev["dur_ns"] >= 0).all()


@settings(
    max_examples=int(__import__("os").environ.get("FUZZ_EXAMPLES", "150")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(documents)
def test_generated_documents_raise_only_trace_error(doc: Any) -> None:
    try:
        _check(read_chrome_document(doc, "fuzz"))
    except TraceError as exc:
        assert "\n" not in str(exc)


def _mutations(text: str, rng: random.Random) -> list[bytes]:
    doc = json.loads(text)
    out: list[bytes] = []
    data = text.encode()
    for _ in range(6):
        cut = rng.randrange(len(data))
        out.append(data[:cut])
        flipped = bytearray(data)
        for _ in range(5):
            i = rng.randrange(len(flipped))
            flipped[i] = rng.randrange(256)
        out.append(bytes(flipped))
    bad_values: list[Any] = [None, "x", -1, 2**80, 1.5e300, [], {}, True, "123"]
    for _ in range(12):
        mutated = json.loads(text)
        for e in rng.sample(mutated["traceEvents"], 20):
            if not isinstance(e, dict):
                continue
            key = rng.choice(["ts", "dur", "pid", "tid", "ph", "cat", "name", "args", "id"])
            if rng.random() < 0.5:
                e.pop(key, None)
            else:
                e[key] = rng.choice(bad_values)
            if isinstance(e.get("args"), dict) and e["args"]:
                k = rng.choice(list(e["args"]))
                e["args"][k] = rng.choice(bad_values)
        if rng.random() < 0.3:
            mutated["traceEvents"] += rng.sample(mutated["traceEvents"], 10)  # duplicates
        out.append(json.dumps(mutated).encode())
    del doc
    return out


def test_mutated_real_trace_raises_only_trace_error(traces_dir: Path, tmp_path: Path) -> None:
    import gzip

    text = gzip.decompress((traces_dir / SMALL).read_bytes()).decode()
    rng = random.Random(1234)
    outcomes = {"trace": 0, "error": 0}
    for i, data in enumerate(_mutations(text, rng)):
        path = tmp_path / f"m{i}.json"
        path.write_bytes(data)
        try:
            trace = read_chrome(path)
        except TraceError as exc:
            assert str(path) in str(exc) and "\n" not in str(exc)
            outcomes["error"] += 1
            continue
        _check(trace)
        outcomes["trace"] += 1
    assert outcomes["trace"] > 0 and outcomes["error"] > 0


def test_duplicate_events_are_kept_not_merged(traces_dir: Path) -> None:
    import gzip

    doc = json.loads(gzip.decompress((traces_dir / SMALL).read_bytes()))
    kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    doc["traceEvents"] += kernels
    trace = read_chrome_document(doc, "dup")
    assert trace.kernels.height == 2 * len(kernels)
    assert trace.kernels.filter(pl.col("launcher") >= 0).height == 2 * len(kernels)
