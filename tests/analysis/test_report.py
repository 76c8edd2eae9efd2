"""The report and diff JSON: the keys from analysis.keys, JSON-clean, values a script checks."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from torchscope.analysis import keys as K
from torchscope.analysis.diff import diff_traces
from torchscope.analysis.overview import BREAKDOWN_CATEGORIES
from torchscope.analysis.report import build_report
from torchscope.trace.model import Trace, TraceSet


def test_report_of_one_trace_has_every_key_and_round_trips_json(load_trace: Callable[[str], Trace]) -> None:
    r = build_report(load_trace("cuda/nccl_rank1_of_2_profile_memory.json.gz"))
    assert tuple(r) == K.REPORT_KEYS
    back = json.loads(json.dumps(r, allow_nan=False))
    assert back[K.KIND] == "trace" and back[K.META]["rank"] == 1
    b = back[K.BREAKDOWN_US]
    assert list(b) == [*BREAKDOWN_CATEGORIES, "Total"]
    assert sum(b[c] for c in BREAKDOWN_CATEGORIES) == pytest.approx(b["Total"])
    assert len(back[K.STEPS]) == 5 and set(back[K.STEPS][0][K.BREAKDOWN_US]) == set(BREAKDOWN_CATEGORIES)
    # memory: the peak on the GPU and the op that was running then
    (gpu,) = [p for p in back[K.MEMORY]["peaks"] if p["device"] == "cuda:1"]
    assert gpu["peak_allocated_bytes"] == 6629508096 and gpu["peak_op"] == "aten::empty"
    # HTA's numbers sit under their own keys
    assert back[K.TEMPORAL_BREAKDOWN]["idle_us"] == pytest.approx(643612.0)
    rules = [x["rule"] for x in back[K.RECOMMENDATIONS]]
    assert "communication_heavy" in rules
    assert all(set(x) == {"rule", "message", "evidence", "fix"} for x in back[K.RECOMMENDATIONS])
    # steps print back exactly what the file wrote (ts 1669783687384669 µs), not a float near it
    assert back[K.STEPS][0]["start_us"] == 1669783687384669
    assert json.dumps(back[K.STEPS][0]["start_us"]) == "1669783687384669"


def test_report_of_a_cpu_only_trace_uses_the_host_breakdown(load_trace: Callable[[str], Trace]) -> None:
    r = build_report(load_trace("cpu/cpu_only_gloo_rank34.pt.trace.json.gz"))
    assert r[K.DEVICES] == [] and r[K.BREAKDOWN_US]["Kernel"] == 0
    hb = r[K.HOST_BREAKDOWN_US]
    assert sum(v for k, v in hb.items() if k != "Total") == pytest.approx(hb["Total"])
    json.dumps(r, allow_nan=False)


def test_report_of_a_folder_of_ranks_names_the_slowest(load: Callable[[str], Trace | TraceSet]) -> None:
    ts = load("multirank")
    assert isinstance(ts, TraceSet)
    r = build_report(ts)
    assert tuple(r) == K.TRACESET_KEYS
    dist = r[K.DISTRIBUTED]
    assert [x["rank"] for x in dist["ranks"]] == [0, 1]
    assert dist["slowest_rank"] in (0, 1)
    waits = {w["rank"]: w["wait_us"] for w in dist["wait_for_slowest"]}
    assert waits[dist["slowest_rank"]] == 0
    # both ranks ran 10 point-to-point NCCL kernels; these traces record no message sizes
    coll = [
        (c["rank"], c["collective"], c["algorithm"], c["count"], c["algbw_gbps"]) for c in dist["collectives"]
    ]
    assert coll == [(0, "SendRecv", "RING_SIMPLE", 10, None), (1, "SendRecv", "RING_SIMPLE", 10, None)]
    assert set(r[K.RANKS]) == set(ts)
    json.dumps(r, allow_nan=False)


def test_diff_json_keys_and_per_step_deltas(load_trace: Callable[[str], Trace]) -> None:
    a = load_trace("cuda/diff_control_rank3_of_8.json.gz")
    b = load_trace("cuda/diff_test_rank1_of_2.json.gz")
    d = diff_traces(a, b).to_dict()
    assert tuple(d) == K.DIFF_KEYS
    s = d[K.DIFF_STEP]
    assert s["delta"] == pytest.approx(s["b"] - s["a"]) and s["ratio"] > 1
    # real changes (a count changed, an op came or went), then time changes above the noise
    # floor, then the rest; by |delta| within each group
    def group(c: dict) -> int:
        return 0 if c["status"] != "time_changed" else (2 if c.get("noise") else 1)

    order = [(group(c), -abs(c["delta_us"])) for c in d[K.DIFF_CHANGES]]
    assert order == sorted(order) and len(order) > 50  # every row, not the first 50
    statuses = {c["status"] for c in d[K.DIFF_CHANGES]}
    assert {"appeared", "vanished"} <= statuses
    json.dumps(d, allow_nan=False)


def test_an_empty_trace_gives_a_complete_empty_report() -> None:
    r = build_report(Trace())
    assert tuple(r) == K.REPORT_KEYS
    assert r[K.STEPS] == [] and r[K.RECOMMENDATIONS] == [] and r[K.BREAKDOWN_US]["Total"] == 0
    assert tuple(diff_traces(Trace(), Trace()).to_dict()) == K.DIFF_KEYS
    json.dumps(r, allow_nan=False)


def test_one_process_cycles_are_not_ranks(load_trace: Callable[[str], Trace]) -> None:
    # torchscope run's cycles were reported as ranks: a "straggler" in a single process, each
    # finding once per cycle labelled "rank 0", and averages that ignored each cycle's steps
    from torchscope.trace.model import TraceSet

    a, b = load_trace("cuda/nccl_rank0_of_2.json.gz"), load_trace("multirank/rank-0.json.gz")
    as_ranks = build_report(TraceSet({"step_4": a, "step_22": b}))
    r = build_report(TraceSet({"step_4": a, "step_22": b}, members="cycles"))
    assert len(as_ranks[K.DISTRIBUTED]["ranks"]) == 2
    assert r[K.DISTRIBUTED]["ranks"] == [] and r[K.DISTRIBUTED]["slowest_rank"] is None
    steps = {k: len(v[K.STEPS]) for k, v in r[K.RANKS].items()}
    assert steps == {"step_4": 3, "step_22": 2} and r[K.STEPS] == 5
    totals = {k: v[K.BREAKDOWN_US]["Total"] for k, v in r[K.RANKS].items()}
    weighted = (totals["step_4"] * 3 + totals["step_22"] * 2) / 5
    assert r[K.BREAKDOWN_US]["Total"] == pytest.approx(weighted, abs=0.001)
    rules = [f["rule"] for f in r[K.RECOMMENDATIONS]]
    assert len(rules) == len(set(rules)) and all("rank" not in f for f in r[K.RECOMMENDATIONS])


def test_the_span_leaves_out_kinetos_window_markers() -> None:
    """Kineto stamps "Record Window End" at stop(), after whatever the script did past its last
    op: "N events over X s" counted that wait (1.444 s for 80 steps ending at 0.947 s)."""
    from torchscope.trace.reader import read_chrome_document

    def op(name: str, ts: float, dur: float) -> dict[str, object]:
        return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur}

    marker = {"ph": "i", "s": "g", "pid": "", "tid": "", "cat": ""}
    doc = {
        "traceEvents": [
            {**marker, "name": "Iteration Start: PyTorch Profiler", "ts": 100.0},
            op("aten::mm", 200.0, 50.0),
            op("aten::add", 300.0, 25.0),
            {**marker, "name": "Record Window End", "ts": 900_000.0},
        ]
    }
    meta = build_report(read_chrome_document(doc))[K.META]
    assert (meta["start_us"], meta["end_us"], meta["span_us"]) == (200, 325, 125)


def test_a_set_of_one_trace_has_no_ranks_to_compare(load_trace: Callable[[str], Trace]) -> None:
    # a run directory of one cycle is a set of one trace: its "ranks (per step)" table listed
    # the cycle's file (traces/step_4) as its one rank
    one = build_report(TraceSet({"traces/step_4": load_trace("cuda/backward_thread_small.json")}))
    assert not (one[K.DISTRIBUTED] or {}).get("ranks")
    two = build_report(TraceSet({"rank0": load_trace("multirank/rank-0.json.gz"), "rank1": load_trace("multirank/rank-1.json.gz")}))
    assert [r["rank"] for r in two[K.DISTRIBUTED]["ranks"]] == [0, 1]


def test_a_run_of_cycles_averages_the_steps_to_the_ns(tmp_path: Path) -> None:
    """A run's mean step was the mean of its cycles' means, each already rounded to the ns: 1 ns
    off the same steps' mean in ``diff --json`` and a job's report (58,774.588 against .589 us).
    Here 5 steps averaging 1000.4 ns and one of 1002 ns: 1000.667 ns, not 1000.333."""
    from torchscope.trace.reader import read_chrome

    def cycle(name: str, durations_ns: list[int]) -> Trace:
        events = []
        for i, d in enumerate(durations_ns):
            step = {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}", "pid": 1, "tid": 1}
            events.append({**step, "ts": 10.0 * i, "dur": d / 1000})
            events.append({**step, "cat": "cpu_op", "name": "aten::mm", "ts": 10.0 * i, "dur": 0.5})
        path = tmp_path / f"{name}.pt.trace.json"
        path.write_text(json.dumps({"traceEvents": events}))
        return read_chrome(path)

    a, b = cycle("step_4", [1000, 1000, 1000, 1001, 1001]), cycle("step_22", [1002])
    r = build_report(TraceSet({"step_4": a, "step_22": b}, members="cycles"))
    assert r[K.RANKS]["step_4"][K.HOST_BREAKDOWN_US]["Total"] == 1.0  # 1000.4 ns, rounded
    assert r[K.HOST_BREAKDOWN_US]["Total"] == 1.001  # 6004 ns over 6 steps
