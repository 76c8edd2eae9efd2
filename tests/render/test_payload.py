"""The dashboard payload: the numbers each view shows, checked against the trace itself."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np
import polars as pl

import torchscope
from torchscope.render.payload import build_payload, memory_view, module_tree, op_table, timeline

DATA = Path(__file__).resolve().parents[1] / "data"


def test_op_table_matches_a_direct_group_by(traces_dir: Path) -> None:
    trace = torchscope.load(traces_dir / "cuda/alexnet_benchmark.json.gz")
    rows = {r["name"]: r for r in op_table(trace)}
    conv = trace.ops.filter(pl.col("name") == "aten::conv2d")
    assert rows["aten::conv2d"]["calls"] == conv.height == 10  # five convolutions, two iterations
    assert rows["aten::conv2d"]["total_ns"] == int(conv["dur_ns"].sum())
    assert rows["aten::conv2d"]["self_ns"] == int(conv["self_ns"].sum())
    # device time is attributed to the op that launched it
    launched = trace.events.filter(pl.col("kind").is_in(["kernel", "memcpy", "memset"]) & (pl.col("op") >= 0))
    assert sum(r["device_self_ns"] for r in rows.values()) == int(launched["dur_ns"].sum())


def test_memory_curve_keeps_the_peak(traces_dir: Path) -> None:
    trace = torchscope.load(traces_dir / "tensorboard_samples/resnet50_num_workers_0.pt.trace.json.gz")
    view = memory_view(trace, points=200)
    cuda = next(d for d in view["devices"] if d["device_type"] == 1)
    mem = trace.memory.filter(pl.col("device_type") == 1).sort("ts_ns")
    # this 2021 trace records no running totals: the curve is rebuilt from the allocation deltas
    assert mem["total_allocated"].null_count() == mem.height and cuda["from_deltas"]
    assert cuda["peak_allocated"] == int(mem["bytes"].cum_sum().max())
    assert max(cuda["allocated"]["bytes"]) == cuda["peak_allocated"]  # decimation kept the peak
    assert len(cuda["allocated"]["ts"]) <= 2 * 200 + 2
    assert cuda["allocations"] == int((mem["bytes"] > 0).sum())
    # devices as torch spells them, not Kineto's type codes
    assert cuda["label"] == f"CUDA {cuda['device_id']}"
    assert {r["device"] for r in view["ops"]} == {"cpu", f"cuda:{cuda['device_id']}"}


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


def test_module_tree_from_a_live_capture(tmp_path: Path) -> None:
    import torch
    from torch.profiler import profile

    from torchscope.models import mlp

    model = mlp((32, 64, 10))
    with profile(with_stack=True, with_modules=True) as prof:
        model(torch.randn(4, 32))
    path = tmp_path / "mlp.json"
    prof.export_chrome_trace(str(path))
    tree = module_tree(torchscope.load(path))
    assert tree is not None
    top = tree["children"][0]
    assert top["name"].startswith("MLP") and top["calls"] == 1
    seq = top["children"][0]
    assert seq["name"] == "Sequential_0"
    assert [c["name"] for c in sorted(seq["children"], key=lambda c: c["name"])] == [
        "Linear_0",
        "Linear_1",
        "ReLU_0",
    ]
    assert sum(c["total_ns"] for c in seq["children"]) <= seq["total_ns"] <= top["total_ns"]


def test_payload_for_ranks_flags_distributed_and_is_json(traces_dir: Path) -> None:
    payload = build_payload(torchscope.load(traces_dir / "multirank"))
    assert [r["name"] for r in payload["runs"]] == ["rank0", "rank1"]
    dist = payload["distributed"]
    assert [d["run"] for d in dist] == ["rank0", "rank1"]
    assert sum(1 for d in dist if d["straggler"]) <= 1
    json.dumps(payload, allow_nan=False)


def test_hostile_names_survive_as_data() -> None:
    trace = torchscope.load(DATA / "hostile_names.pt.trace.json")
    payload = build_payload(trace)
    names = {r["name"] for r in payload["runs"][0]["ops"]}
    assert "<script>window.__pwned=1</script>" in names
    assert payload["warnings"] == [] or all("hostile" not in w for w in payload["warnings"])
