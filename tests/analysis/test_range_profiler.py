"""CUPTI range-profiler traces: ranges are recognised, their counters shown per range and per
kernel, and the trace is said to be range-profiled; checked against HTA's
matching rule on a real range-profiled trace (tests/data/README.md)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import polars as pl

import torchscope
from torchscope.analysis.advisor import Context, advise
from torchscope.analysis.advisor.window import startup_calls
from torchscope.analysis.kernels import is_range_profiled, kernel_counters, kernel_stats, profiler_ranges
from torchscope.trace.model import Trace

DATA = Path(__file__).resolve().parents[1] / "data"
TRACE = DATA / "cupti_range_profiler.json.gz"
FFMA = "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum"


def _load() -> Trace:
    t = torchscope.load(TRACE)
    assert isinstance(t, Trace)
    return t


def test_ranges_carry_their_counters_and_launching_op() -> None:
    t = _load()
    r = profiler_ranges(t)
    assert r.height == 77 and is_range_profiled(t)
    counters = [c for c in r.columns if c.startswith("smsp__")]
    assert len(counters) == 9 and FFMA in counters
    first = r.row(0, named=True)
    assert first["kernel"].startswith("void at::native::(anonymous namespace)::distribution_elementwise")
    assert first["smsp__sass_thread_inst_executed_op_hfma_pred_on.sum"] == 4866048
    assert first[FFMA] == 38731776
    assert r["kernel"][1] is None  # Kineto's "__missing__": CUPTI gave no name
    assert r[FFMA][1] == 9119334400
    assert r["op"].null_count() == 0  # 77 launches for 77 ranges: every range has its op
    # no kernel events: the kernel table is empty, and that is said, not read as an idle device
    assert kernel_stats(t).height == 0
    per = kernel_counters(t)
    assert per["ranges"].sum() == 77 and per.height == r["kernel"].n_unique()
    sgemm = per.filter(pl.col("kernel") == "ampere_sgemm_32x32_sliced1x4_tn").row(0, named=True)
    assert sgemm["ranges"] == 6 and sgemm[FFMA] == float(
        r.filter(pl.col("kernel") == sgemm["kernel"])[FFMA].sum()
    )


def test_the_advice_says_the_trace_is_range_profiled() -> None:
    found = advise(_load())
    assert found[0].rule == "range_profiled"
    assert "77 kernel ranges" in found[0].message and "no kernel timeline" in found[0].message
    assert found[0].evidence["counters"][0].startswith("smsp__")
    # its launches are slow because each replays its kernel: that is not device start-up
    calls = set(startup_calls(Context(_load()))["name"].cast(pl.String))
    assert "cudaFree" in calls and not any("Launch" in c for c in calls)
    assert "startup_in_window" not in {f.rule for f in advise(_load(), min_share=0)}


def test_a_trace_without_ranges_says_nothing(traces_dir: Path) -> None:
    t = torchscope.load(traces_dir / "cuda" / "alexnet_benchmark.json.gz")
    assert isinstance(t, Trace)
    assert profiler_ranges(t).height == 0 and kernel_counters(t).height == 0
    assert "range_profiled" not in {f.rule for f in advise(t)}


def test_counters_and_ops_agree_with_the_file() -> None:
    """HTA's rule, computed here from the JSON itself: the n-th range (by time) is the n-th
    ``cudaLaunchKernel``, whose op is the innermost ``cpu_op`` around it on its thread.
    (HTA's own ``get_cupti_counter_data_with_operators`` fails on this file with numpy 2 while
    building its call graph, so it cannot be run as the oracle.)"""
    doc = json.loads(gzip.decompress(TRACE.read_bytes()))
    events = doc["traceEvents"]
    ranges = sorted((e for e in events if e.get("cat") == "cuda_profiler_range"), key=lambda e: e["ts"])
    launches = sorted(
        (e for e in events if e.get("cat") == "cuda_runtime" and e["name"] == "cudaLaunchKernel"),
        key=lambda e: e["ts"],
    )
    ops = [e for e in events if e.get("cat") == "cpu_op"]

    def innermost(launch: dict[str, Any]) -> str:
        around = [
            o
            for o in ops
            if (o["pid"], o["tid"]) == (launch["pid"], launch["tid"])
            and o["ts"] <= launch["ts"]
            and launch["ts"] + launch["dur"] <= o["ts"] + o["dur"]
        ]
        return str(max(around, key=lambda o: (o["ts"], -o["dur"]))["name"])

    ours = profiler_ranges(_load())
    assert len(ranges) == len(launches) == ours.height == 77
    assert ours["kernel"].fill_null("__missing__").to_list() == [e["name"] for e in ranges]
    assert ours["op"].to_list() == [innermost(e) for e in launches]
    for c in (c for c in ours.columns if c.startswith("smsp__")):
        assert ours[c].to_list() == [float(e["args"][c]) for e in ranges], c
