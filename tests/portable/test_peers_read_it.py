"""A peer reads the portable trace: HolisticTraceAnalysis sees the same device events and links.

The portable document claims to be Kineto-format; HTA (which reads Kineto traces for a
living) is the independent check: its per-kernel totals and its kernel -> launch links must
agree with our reader's on the same document.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import polars as pl
import pytest

torch = pytest.importorskip("torch")
hta = pytest.importorskip("hta.trace_analysis")

from torchscope.capture.portable import PortableCollector  # noqa: E402
from torchscope.models.perceptron import MLP  # noqa: E402
from torchscope.trace.reader import read_chrome_document  # noqa: E402

from .fake_device import FakeDevice  # noqa: E402


def test_hta_sees_the_same_device_events_and_launch_links(tmp_path: Path) -> None:
    model, x = MLP((512, 1024, 1024, 10)), torch.randn(8, 512)
    collector = PortableCollector(event_source=lambda device: FakeDevice())
    collector.start()
    # 3 steps: with correlation ids all below 128, HTA (on pandas 3) downcasts the column to
    # int8 and then fails to store row indices in it; real traces never have so few.
    for step in range(3):
        with torch.autograd.profiler.record_function(f"ProfilerStep#{step}"):
            model(x).sum().backward()
    doc = collector.stop()
    doc["distributedInfo"] = {"rank": 0}  # HTA files traces by rank
    (tmp_path / "rank-0.json").write_text(json.dumps(doc))

    ours = read_chrome_document(doc, "portable")
    analysis = hta.TraceAnalysis(trace_dir=str(tmp_path))
    df = analysis.t.get_trace(0)
    symbols = analysis.t.symbol_table.get_sym_table()
    df["name_s"] = [symbols[i] for i in df["name"]]
    df["cat_s"] = [symbols[i] for i in df["cat"]]
    kernels = df[df["cat_s"] == "kernel"]

    # HTA leaves out the last ProfilerStep (under a schedule it is cut short): it keeps the
    # device events whose launch starts before the last "ProfilerStep" event, the host's label
    # or its device-side span (``gpu_user_annotation``, as Kineto writes it), whichever starts
    # later, both rounded down to whole µs. The device span starts at the step's first device
    # work, after that work's launch: so HTA may keep the first launches of step 2 too, and we
    # keep the same here.
    events = doc["traceEvents"]
    cut = max(int(e["ts"]) for e in events if e.get("name", "").startswith("ProfilerStep#"))
    kept = {e["args"]["correlation"] for e in events if e.get("cat") == "cuda_runtime" and int(e["ts"]) < cut}
    ours_kernels = ours.kernels.filter(pl.col("correlation").is_in(sorted(kept)))
    step = ours.events["step"].to_list()
    per_step = Counter(step[op] for op in ours.kernels["op"].to_list())
    # the first step's AccumulateGrad only detaches the 6 parameters' new grads (a view: no
    # device work); later steps add into them (6 more ops that launch work)
    assert per_step[1] == per_step[2] == per_step[0] + 6
    kept_steps = Counter(step[op] for op in ours_kernels["op"].to_list())
    assert kept_steps[0] == per_step[0] and kept_steps[1] == per_step[1]
    assert kept_steps[2] < per_step[2] // 2  # at most the few launched before the device span
    # same device events, per name
    assert Counter(kernels["name_s"]) == Counter(ours_kernels["name"].cast(str).to_list())
    # same device time per name (HTA rounds start and duration to whole us: <= 2 us per event)
    hta_us = kernels.groupby("name_s")["dur"].sum().to_dict()
    for name, total_ns in _totals(ours_kernels).items():
        assert abs(hta_us[name] - total_ns / 1000) <= 2 * Counter(kernels["name_s"])[name], name
    # every kernel is linked to its launch marker through the correlation id
    launches = df[df["cat_s"] == "cuda_runtime"]
    assert set(launches["name_s"]) == {"portable::launch"}
    linked = kernels["index_correlation"]
    assert (linked >= 0).all()
    assert set(df.loc[linked, "name_s"]) == {"portable::launch"}


def _totals(kernels: pl.DataFrame) -> dict[str, int]:
    out: dict[str, int] = {}
    for name, dur in zip(kernels["name"].cast(str).to_list(), kernels["dur_ns"].to_list(), strict=True):
        out[name] = out.get(name, 0) + dur
    return out
