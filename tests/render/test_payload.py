"""The dashboard payload: the report's tables checked against the trace itself, and the view
plumbing (memory curves, timeline) that is all the payload adds to the report."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np
import polars as pl

import torchscope
from torchscope.analysis import keys as K
from torchscope.render.payload import build_payload, memory_curves, timeline

DATA = Path(__file__).resolve().parents[1] / "data"


def test_report_op_rows_match_a_direct_group_by(traces_dir: Path) -> None:
    trace = torchscope.load(traces_dir / "cuda/alexnet_benchmark.json.gz")
    rows = {r["name"]: r for r in build_payload(trace, with_timeline=False)["report"][K.OPERATORS]}
    conv = trace.ops.filter(pl.col("name") == "aten::conv2d")
    assert rows["aten::conv2d"]["calls"] == conv.height == 10  # five convolutions, two iterations
    assert rows["aten::conv2d"]["host_total_us"] * 1000 == int(conv["dur_ns"].sum())
    assert rows["aten::conv2d"]["host_self_us"] * 1000 == int(conv["self_ns"].sum())
    assert rows["aten::conv2d"]["host_max_us"] * 1000 == int(conv["dur_ns"].max())  # type: ignore[arg-type]
    # device time is attributed to the op that launched it
    launched = trace.events.filter(pl.col("kind").is_in(["kernel", "memcpy", "memset"]) & (pl.col("op") >= 0))
    assert round(sum(r["device_self_us"] for r in rows.values()) * 1000) == int(launched["dur_ns"].sum())


def test_memory_curve_keeps_the_peak_the_report_names(traces_dir: Path) -> None:
    trace = torchscope.load(traces_dir / "tensorboard_samples/resnet50_num_workers_0.pt.trace.json.gz")
    curves = {c["device"]: c for c in memory_curves(trace, points=200)}
    peaks = {p["device"]: p for p in build_payload(trace, with_timeline=False)["report"][K.MEMORY]["peaks"]}
    assert set(curves) == set(peaks) == {"cpu", "cuda:0"}
    mem = trace.memory.filter(pl.col("device_type") == 1).sort("ts_ns")
    # this 2021 trace records no running totals: the curve is rebuilt from the allocation deltas
    assert mem["total_allocated"].null_count() == mem.height
    cuda = curves["cuda:0"]
    assert peaks["cuda:0"]["peak_allocated_bytes"] == int(mem["bytes"].cum_sum().max())  # type: ignore[arg-type]
    assert max(cuda["allocated"]["bytes"]) == peaks["cuda:0"]["peak_allocated_bytes"]  # decimation kept it
    assert len(cuda["allocated"]["offset_us"]) <= 2 * 200 + 2
    # the curve's time axis starts at the trace's start, as the report's timestamps are shown
    t0 = int(trace.events["start_ns"].min())  # type: ignore[arg-type]
    assert cuda["allocated"]["offset_us"][0] == (int(mem["ts_ns"][0]) - t0) / 1e3


def test_timeline_arrays_round_trip(traces_dir: Path) -> None:
    trace = torchscope.load(traces_dir / "cuda/alexnet_benchmark.json.gz")
    tl = timeline(trace, max_events=100)
    with_dur = trace.events.filter(pl.col("dur_ns") > 0)
    assert tl["total"] == with_dur.height and tl["events"] == 100
    dur = np.frombuffer(base64.b64decode(tl["dur"]), dtype="<f4")
    longest = np.sort(with_dur["dur_ns"].to_numpy())[::-1][:100]
    np.testing.assert_allclose(np.sort(dur)[::-1], longest, rtol=1e-6)  # the longest events are kept
    names = np.frombuffer(base64.b64decode(tl["name"]), dtype="<u4")
    assert names.max() < len(tl["names"])


def test_module_rows_from_a_live_capture(tmp_path: Path) -> None:
    import torch
    from torch.profiler import profile

    from torchscope.models import mlp

    model = mlp((32, 64, 10))
    with profile(with_stack=True, with_modules=True) as prof:
        model(torch.randn(4, 32))
    path = tmp_path / "mlp.json"
    prof.export_chrome_trace(str(path))
    rows = build_payload(torchscope.load(path), with_timeline=False)["report"][K.MODULES]
    top = rows[0]
    assert top["module"].startswith("MLP") and top["calls"] == 1 and top["depth"] == 0
    seq = next(r for r in rows if r["module"] == "Sequential_0")
    kids = sorted(r["module"] for r in rows if r["path"].startswith(seq["path"] + "/") and r["depth"] == 2)
    assert kids == ["Linear_0", "Linear_1", "ReLU_0"]
    inner = sum(r["host_us"] for r in rows if r["path"].startswith(seq["path"] + "/") and r["depth"] == 2)
    assert inner <= seq["host_us"] <= top["host_us"]


def test_payload_for_ranks_is_the_sets_report_and_is_json(traces_dir: Path) -> None:
    payload = build_payload(torchscope.load(traces_dir / "multirank"))
    assert [r["name"] for r in payload["runs"]] == ["rank0", "rank1"]
    rep = payload["report"]
    assert rep[K.KIND] == "traceset" and list(rep[K.RANKS]) == ["rank0", "rank1"]
    dist = rep[K.DISTRIBUTED]["ranks"]
    assert [d["name"] for d in dist] == ["rank0", "rank1"]
    assert sum(1 for d in dist if d["straggler"]) == 1
    assert min(d["vs_fastest_pct"] for d in dist) == 0.0
    json.dumps(payload, allow_nan=False)


def test_hostile_names_survive_as_data() -> None:
    trace = torchscope.load(DATA / "hostile_names.pt.trace.json")
    payload = build_payload(trace)
    names = {r["name"] for r in payload["report"][K.OPERATORS]}
    assert "<script>window.__pwned=1</script>" in names
    assert payload["warnings"] == []
