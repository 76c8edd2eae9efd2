"""The dashboard payload: the report's tables checked against the trace itself, and the view
plumbing (memory curves, timeline) that is all the payload adds to the report."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl

import torchscope
from torchscope.analysis import keys as K
from torchscope.render.payload import DETAIL_COLUMNS, build_payload, memory_curves, timeline, unpack_timeline
from torchscope.render.text import cut

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


def test_timeline_holds_every_event_with_a_duration(traces_dir: Path) -> None:
    trace = torchscope.load(traces_dir / "tensorboard_samples/resnet50_num_workers_0.pt.trace.json.gz")
    tl = timeline(trace)
    cols = unpack_timeline(tl)
    with_dur = trace.events.filter(pl.col("dur_ns") > 0)
    assert tl["events"] == tl["total"] == with_dur.height == 43187
    t0 = int(trace.events["start_ns"].min())  # type: ignore[arg-type]
    np.testing.assert_array_equal(cols["start"], with_dur["start_ns"].to_numpy() - t0)
    np.testing.assert_array_equal(cols["dur"], with_dur["dur_ns"].to_numpy())
    names = [tl["names"][i] for i in cols["name"]]
    assert names == [
        cut(n) for n in with_dur["name"].cast(pl.String).to_list()
    ]  # long names cut for the page
    # tracks: host threads under their process, streams under their device
    streams = [t for t in tl["tracks"] if t["device"] >= 0]
    assert [(t["group"], t["label"]) for t in streams] == [("device 0", "stream 7")]
    assert all(t["rows"] == cols["row"][cols["track"] == i].max() + 1 for i, t in enumerate(tl["tracks"]))


def test_timeline_links_kernels_to_their_launching_op_and_keeps_details(traces_dir: Path) -> None:
    trace = torchscope.load(traces_dir / "cuda/alexnet_benchmark.json.gz")
    tl = timeline(trace)
    cols, ev = unpack_timeline(tl), trace.events.filter(pl.col("dur_ns") > 0)
    kernels = np.flatnonzero(np.array(tl["kinds"])[cols["kind"]] == "kernel")
    assert kernels.size == ev.filter(pl.col("kind") == "kernel").height > 0
    op_row = ev["op"].to_numpy()
    for k in kernels[:50]:
        launcher = cols["op"][k]
        assert launcher >= 0 and ev["id"][int(launcher)] == op_row[k]  # the Trace's op column, as an index
        assert tl["names"][cols["name"][launcher]].startswith("aten::")
    # the stack: each parent index is an event enclosing the child on the same track
    child = np.flatnonzero(cols["parent"] >= 0)
    par = cols["parent"][child]
    assert np.all(cols["start"][par] <= cols["start"][child]) and np.all(
        cols["track"][par] == cols["track"][child]
    )
    # details only for the events that have one, with the Trace's values
    kernel = ev.with_row_index("i").filter(pl.col("kind") == "kernel").row(0, named=True)
    assert cols["details"][kernel["i"]]["grid"] == kernel["grid"] and kernel["grid"].startswith("[")
    assert cols["details"][kernel["i"]]["correlation"] == kernel["correlation"] is not None
    assert (
        len(cols["details"])
        == ev.filter(pl.any_horizontal(pl.col(c).is_not_null() for c in DETAIL_COLUMNS)).height
        < ev.height
    )


def test_timeline_over_the_cap_keeps_the_longest(traces_dir: Path) -> None:
    trace = torchscope.load(traces_dir / "cuda/alexnet_benchmark.json.gz")
    tl = timeline(trace, max_events=100)
    with_dur = trace.events.filter(pl.col("dur_ns") > 0)
    assert tl["total"] == with_dur.height and tl["events"] == 100
    dur = unpack_timeline(tl)["dur"]
    longest = np.sort(with_dur["dur_ns"].to_numpy())[::-1][:100]
    np.testing.assert_array_equal(np.sort(dur)[::-1], longest)


def test_the_largest_shared_trace_fits_the_page_whole(traces_dir: Path) -> None:
    from torchscope.render.html import render_html

    trace = torchscope.load(traces_dir / "other_devices/mtia_training_large.json.gz")
    payload = build_payload(trace)
    tl = payload["runs"][0]["timeline"]
    assert tl["events"] == tl["total"] == trace.events.filter(pl.col("dur_ns") > 0).height == 138373
    assert len(render_html(payload).encode()) < 10_000_000


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
    # the Modules drill-down: each leaf module's own ops (their callees are theirs, not the module's)
    trace = torchscope.load(path)
    ops = {
        (r["path"], r["name"]): r for r in build_payload(trace, with_timeline=False)["report"][K.MODULE_OPS]
    }
    linear0 = f"{seq['path']}/Linear_0"
    assert {k for k in ops if k[0] == linear0} == {(linear0, "aten::linear")}
    assert {k for k in ops if k[0].endswith("ReLU_0")} == {(f"{seq['path']}/ReLU_0", "aten::relu")}
    linears = trace.ops.filter(pl.col("name") == "aten::linear").sort("start_ns")
    assert ops[(linear0, "aten::linear")]["calls"] == 1
    # the first Linear's call, to the nanosecond (round: 2066.468 * 1000 is 2066467.9999999998)
    assert round(ops[(linear0, "aten::linear")]["host_us"] * 1000) == linears["dur_ns"][0]
    assert not any(k[1] == "aten::addmm" for k in ops)  # linear's callee belongs to linear


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


def test_a_payload_without_the_page_views_prints_the_same_summary_and_json(traces_dir: Path) -> None:
    # ``report --json`` and ``--no-html`` build the payload without what only the page draws
    # (memory curves, flame graphs, timeline); the summary and the JSON must not change
    from io import StringIO

    from rich.console import Console

    from torchscope.render.console import print_summary
    from torchscope.render.payload import full_report

    trace = torchscope.load(traces_dir / "cuda/nccl_rank0_of_2.json.gz")
    full, bare = build_payload(trace), build_payload(trace, views=False)
    assert set(full["runs"][0]) >= {"name", "source", "memory_curves", "flame", "timeline"}
    assert bare["runs"] == [{"name": full["runs"][0]["name"], "source": full["runs"][0]["source"]}]
    assert json.dumps(full_report(full)) == json.dumps(full_report(bare))
    printed = []
    for payload in (full, bare):
        buf = StringIO()
        print_summary(payload, Console(file=buf, width=120))
        printed.append(buf.getvalue())
    assert printed[0] == printed[1] and "aten::" in printed[0]
