"""Our Parquet store and our Chrome writer both give back exactly the Trace that went in."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

import torchscope
from torchscope.errors import TraceError
from torchscope.trace import Trace, TraceSet, read_chrome

from .conftest import read_once

ROUND_TRIP = [
    "cuda/alexnet_benchmark.json.gz",
    "cuda/nccl_rank0_of_2.json.gz",
    "cuda/cuda_event_sync_multi_stream.json.gz",
    "other_devices/amd_mi250_rocm6.json.gz",
    "other_devices/mtia_inference.json.gz",
    "cpu/cpu_only_gloo_rank34.pt.trace.json.gz",
    "tensorboard_samples/resnet50_num_workers_4.pt.trace.json.gz",
]


@pytest.mark.parametrize("name", ROUND_TRIP)
def test_store_round_trips_exactly(traces_dir: Path, tmp_path: Path, name: str) -> None:
    trace = read_once(traces_dir / name)
    saved = trace.save(tmp_path / "store")
    assert sorted(p.name for p in saved.iterdir()) == [
        "events.parquet",
        "flows.parquet",
        "memory.parquet",
        "meta.json",
        "threads.parquet",
    ]
    back = torchscope.load(saved)
    assert isinstance(back, Trace)
    assert back.equals(trace)
    assert back.meta.source == trace.meta.source


@pytest.mark.parametrize("name", ROUND_TRIP)
def test_chrome_writer_reads_back_equal(traces_dir: Path, tmp_path: Path, name: str) -> None:
    trace = read_once(traces_dir / name)
    back = read_chrome(trace.to_chrome(tmp_path / "out.pt.trace.json.gz"))
    assert back.equals(trace)


def test_chrome_output_is_written_in_pieces_with_the_same_bytes(
    traces_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An export of a 2 GB trace held its whole text several times over (8.4 GB): the writer
    now writes 200k events at a time, and the file is the same byte for byte."""
    from torchscope.trace import chrome_writer

    trace = read_once(traces_dir / "cuda/nccl_rank0_of_2.json.gz")
    whole = trace.to_chrome(tmp_path / "whole.json").read_bytes()
    monkeypatch.setattr(chrome_writer, "EVENTS_PER_PIECE", 997)
    pieces = list(chrome_writer.chrome_pieces(trace))
    assert len(pieces) > trace.events.height // 997
    assert trace.to_chrome(tmp_path / "pieces.json.gz").read_bytes() != b""
    assert gzip.decompress((tmp_path / "pieces.json.gz").read_bytes()) == whole == "".join(pieces).encode()


def test_chrome_output_is_plain_kineto_json(traces_dir: Path, tmp_path: Path) -> None:
    trace = read_once(traces_dir / "cuda/nccl_rank0_of_2.json.gz")
    doc = json.loads(trace.to_chrome(tmp_path / "t.json").read_text())
    assert doc["distributedInfo"]["rank"] == 0 and doc["baseTimeNanoseconds"] == 1711964646000000000
    kernel = next(e for e in doc["traceEvents"] if e.get("cat") == "kernel")
    assert {"ph", "cat", "name", "pid", "tid", "ts", "dur", "args"} <= set(kernel)
    assert {"External id", "correlation", "device", "stream", "grid", "block"} <= set(kernel["args"])
    assert {e["ph"] for e in doc["traceEvents"]} == {"X", "i", "s", "f", "M"}


def test_trace_set_saves_and_loads_per_rank(traces_dir: Path, tmp_path: Path) -> None:
    ranks = torchscope.load(traces_dir / "multirank")
    assert isinstance(ranks, TraceSet)
    ranks.save(tmp_path / "runs")
    back = torchscope.load(tmp_path / "runs")
    assert isinstance(back, TraceSet) and list(back) == ["rank0", "rank1"]
    assert all(back[k].equals(ranks[k]) for k in ranks)


def test_foreign_or_damaged_store_is_a_trace_error(traces_dir: Path, tmp_path: Path) -> None:
    read_once(traces_dir / "cuda/backward_thread_small.json").save(tmp_path / "s")
    (tmp_path / "s" / "meta.json").write_text('{"format": "something-else"}')
    with pytest.raises(TraceError, match="not torchscope's"):
        torchscope.load(tmp_path / "s")
    read_once(traces_dir / "cuda/backward_thread_small.json").save(tmp_path / "t")
    (tmp_path / "t" / "events.parquet").write_bytes(b"garbage")
    with pytest.raises(TraceError, match="unreadable table"):
        torchscope.load(tmp_path / "t")
