"""``diff`` compares like with like: the same steps on both sides, per step, checked against
HTA's TraceDiff on the shared pair and on a real pair made by removing one kernel."""

from __future__ import annotations

import gzip
import json
import logging
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl
import pytest

import torchscope
from torchscope.analysis.diff import choose_steps, diff_traces
from torchscope.analysis.overview import BREAKDOWN_CATEGORIES
from torchscope.trace.model import Trace

trace_diff = pytest.importorskip("hta.trace_diff")

CONTROL = "cuda/diff_control_rank3_of_8.json.gz"
TEST = "cuda/diff_test_rank1_of_2.json.gz"
STEPS = list(range(1009, 1015))  # the six steps both runs kept


def _hta(control: Path, test: Path, device: Any, steps: list[int], tmp: Path) -> pl.DataFrame:
    """HTA's compare_traces over ``steps`` of each (HTA reads a directory per trace)."""
    logging.disable(logging.WARNING)
    warnings.filterwarnings("ignore")
    dirs = []
    for i, src in enumerate((control, test)):
        d = tmp / f"hta{i}"
        d.mkdir()
        (d / src.name).symlink_to(src)
        dirs.append(str(d))
    df = trace_diff.TraceDiff.compare_traces(
        dirs[0], dirs[1], control_iteration=steps, test_iteration=steps, device_type=device
    )
    return pl.from_pandas(df.reset_index())


def test_the_shared_pair_uses_the_same_steps_and_agrees_with_hta(
    traces_dir: Path, load_trace: Callable[[str], Trace], tmp_path: Path
) -> None:
    a, b = load_trace(CONTROL), load_trace(TEST)
    assert choose_steps(a, b) == (tuple(STEPS), tuple(STEPS))
    d = diff_traces(a, b)
    assert d.a.steps == d.b.steps == 6
    hta = _hta(traces_dir / CONTROL, traces_dir / TEST, trace_diff.DeviceType.GPU, STEPS, tmp_path)
    # HTA's device rows are ours: kernels, and the copies and memsets (``what`` says which)
    ours = d.kernels.with_columns((pl.col(c) * 6) for c in ("a_calls", "b_calls", "a_ns", "b_ns"))
    joined = ours.join(hta, on="name", how="full", coalesce=True)
    assert joined.height == hta.height == ours.height == 201
    assert ours.filter(pl.col("what") != "kernel")["name"].str.slice(0, 6).unique().sort().to_list() == ["Memcpy", "Memset"]
    # every kernel: the same calls and time on each side over the same six steps (HTA: us)
    assert joined["a_calls"].round(6).to_list() == joined["Control_counts"].to_list()
    assert joined["b_calls"].round(6).to_list() == joined["Test_counts"].to_list()
    assert (joined["a_ns"] / 1e3).round(3).to_list() == joined["Control_total_duration"].to_list()
    assert (joined["b_ns"] / 1e3).round(3).to_list() == joined["Test_total_duration"].to_list()
    # HTA's categories are ours: appeared = added, vanished = deleted, '=' = same calls
    status = dict(zip(d.kernels["name"], d.kernels["status"], strict=True))
    for name, change, ca, cb in hta.select(
        "name", "counts_change_categories", "Control_counts", "Test_counts"
    ).iter_rows():
        expected = (
            "appeared" if ca == 0 else "vanished" if cb == 0 else "count_changed" if change != "=" else None
        )
        assert status[name] == expected or (
            expected is None and status[name] in ("time_changed", "unchanged")
        )


def test_the_shared_pair_operator_counts_agree_with_hta(
    traces_dir: Path, load_trace: Callable[[str], Trace], tmp_path: Path
) -> None:
    """Op counts per step equal HTA's over the same steps, but for an op calling itself, which
    HTA counts at each level and we count once, as torch's tables do. Times differ by design:
    ours are self time (host + the device work the op launched), HTA's the op's inclusive host
    duration."""
    a, b = load_trace(CONTROL), load_trace(TEST)
    d = diff_traces(a, b)
    hta = _hta(traces_dir / CONTROL, traces_dir / TEST, trace_diff.DeviceType.CPU, STEPS, tmp_path)
    joined = d.operators.join(hta, on="name", how="left")
    assert joined["Control_counts"].null_count() == 0  # every op we list, HTA lists
    folded_a, folded_b = _folded_calls(a), _folded_calls(b)
    assert sum(folded_a.values()) > 0  # the difference is not vacuous on this pair
    for side, hta_col, folded in (
        ("a_calls", "Control_counts", folded_a),
        ("b_calls", "Test_counts", folded_b),
    ):
        ours = [round(c * 6 + folded.get(n, 0), 6) for n, c in zip(joined["name"], joined[side], strict=True)]
        assert ours == joined[hta_col].to_list()


def _folded_calls(trace: Trace) -> dict[str, int]:
    """Per op name, the calls in STEPS that are the only child of a same-named parent."""
    from torchscope.analysis.operators import _self_calls

    ev = trace.events.with_columns(pl.Series("folded", _self_calls(trace)))
    hit = ev.filter(pl.col("folded") & (pl.col("kind") == "cpu_op") & pl.col("step").is_in(list(STEPS)))
    return dict(hit.group_by(pl.col("name").cast(pl.String)).len().iter_rows())


def test_the_diff_leads_with_what_changed(load_trace: Callable[[str], Trace]) -> None:
    d = diff_traces(load_trace(CONTROL), load_trace(TEST))
    r = d.to_dict()
    step = r["step_us"]
    assert step["a"] == pytest.approx(77501.667, abs=1e-3) and step["b"] == pytest.approx(
        124085.833, abs=1e-3
    )
    # categories by |delta|: the step got 46.6 ms slower, 44.4 ms of it in kernels
    cats = list(r["breakdown_us"])
    assert cats[:2] == ["Kernel", "Memcpy"] and sorted(cats) == sorted(BREAKDOWN_CATEGORIES)
    assert r["breakdown_us"]["Kernel"]["delta"] == pytest.approx(44435.5, abs=0.1)
    assert sum(v["delta"] for v in r["breakdown_us"].values()) == pytest.approx(step["delta"], abs=0.01)
    first = r["changes"][0]
    assert (first["name"], first["status"]) == ("CompiledFunctionBackward", "appeared")
    assert all(c["status"] != "unchanged" for c in r["changes"])


def test_the_headline_says_how_long_each_sides_steps_took(
    load_trace: Callable[[str], Trace], capsys: pytest.CaptureFixture[str]
) -> None:
    """A mean step time can hide an outlier: a new user's run made slower on purpose came out
    11 ms faster, its steps 2.2-70.2 ms. Each side's shortest, median and longest compared
    step (as ``overview`` times the steps) come with it, and a change within that spread says so."""
    import statistics

    from torchscope.analysis.overview import overview
    from torchscope.cli.diff import spread_line

    a, b = load_trace(CONTROL), load_trace(TEST)
    d = diff_traces(a, b)
    step = d.to_dict()["step_us"]
    for side, trace, numbers in (("a", a, d.a.step_numbers), ("b", b, d.b.step_numbers)):
        durs = overview(trace).steps.filter(pl.col("step").is_in(list(numbers)))["dur_ns"].to_list()
        assert len(durs) == len(numbers) == 6
        want = [min(durs) / 1000, statistics.median(durs) / 1000, max(durs) / 1000]
        got = step[f"{side}_steps"]
        assert [got["shortest"], got["median"], got["longest"]] == pytest.approx(want, abs=1e-3)
    # +46.6 ms against steps of 75.7-81.1 ms: a change, not jitter
    spreads = [step[k]["longest"] - step[k]["shortest"] for k in ("a_steps", "b_steps")]
    assert step["within_spread"] is (abs(step["delta"]) < max(spreads)) is False
    line = spread_line(step)
    assert line is not None and line.startswith("steps took ") and "jitter" not in line
    # the same steps with one made far longer: the change is now within the spread, and said
    jittery = {
        **step,
        "b_steps": {**step["b_steps"], "longest": step["b_steps"]["longest"] + 10 * step["delta"]},
    }
    jittery["within_spread"] = True
    assert (spread_line(jittery) or "").endswith(
        "so it may be the machine's jitter (compare the medians, or record more steps)"
    )
    assert spread_line({**step, "a_steps": None, "b_steps": None}) is None  # compared whole: nothing to say


def test_two_devices_are_named_in_the_terminal(load_trace: Callable[[str], Trace]) -> None:
    """An A100's trace against an MI250's was compared without a word, though their kernels
    are each device's own; the devices each side lists go into ``--json`` and one line."""
    from torchscope.cli.diff import compared_lines

    def said(d: dict[str, Any]) -> list[str]:
        return [line for line in compared_lines(d["a"], d["b"]) if " ran on " in line]

    alexnet = load_trace("cuda/alexnet_benchmark.json.gz")
    mi250 = load_trace("other_devices/amd_mi250_rocm6.json.gz")
    d = diff_traces(alexnet, mi250).to_dict()
    assert d["a"]["devices"] == ["NVIDIA A100-PG509-200"] and d["b"]["devices"] == ["AMD Radeon Graphics"]
    assert said(d) == [
        "A ran on NVIDIA A100-PG509-200, B on AMD Radeon Graphics: their kernels are each device's own,"
        " so many appear or vanish"
    ]
    # the shared control/test pair is an A100's and a V100's too
    pair = diff_traces(load_trace(CONTROL), load_trace(TEST)).to_dict()
    assert said(pair) == [
        "A ran on NVIDIA A100-PG509-200, B on Tesla V100-SXM2-16GB: their kernels are each device's own,"
        " so many appear or vanish"
    ]
    assert said(diff_traces(alexnet, load_trace(CONTROL)).to_dict()) == []  # two A100s: nothing to say
    cpu = diff_traces(load_trace("cpu/cpu_only_gloo_rank34.pt.trace.json.gz"), alexnet).to_dict()
    assert cpu["a"]["devices"] == [] and said(cpu) == []  # a CPU trace lists no device


def _without_one_kernel(src: Path, dst: Path, step: int) -> tuple[str, str, int]:
    """``src`` with the first kernel of ``step``'s launches removed (its launch stays): the
    kernel's name, the op that launched it, and its duration (ns)."""
    doc = json.loads(gzip.decompress(src.read_bytes()))
    events = doc["traceEvents"]
    t = torchscope.load(src)
    assert isinstance(t, Trace)
    k = (
        t.events.filter((pl.col("kind") == "kernel") & (pl.col("step") == step))
        .sort("start_ns")
        .row(0, named=True)
    )
    name = str(k["name"])
    corr = int(k["correlation"])
    drop = [
        i
        for i, e in enumerate(events)
        if e.get("cat") == "kernel"
        and e.get("name") == name
        and (e.get("args") or {}).get("correlation") == corr
    ]
    assert len(drop) == 1
    del events[drop[0]]
    dst.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return name, str(t.events["name"][int(k["op"])]), int(k["dur_ns"])


def test_a_trace_with_one_kernel_removed(
    traces_dir: Path, load_trace: Callable[[str], Trace], tmp_path: Path
) -> None:
    """The issue's pair: identical steps, one kernel fewer in the second. The step time was
    reported as going from 58,631.5 to 135 us and four unchanged ops as ``count_changed``."""
    a = load_trace(CONTROL)
    fewer = tmp_path / "one_kernel_fewer.json.gz"
    name, op, dur_ns = _without_one_kernel(traces_dir / CONTROL, fewer, 1011)
    removed = 1
    b = torchscope.load(fewer)
    assert isinstance(b, Trace)
    d = diff_traces(a, b)
    assert d.a.step_numbers == d.b.step_numbers == tuple(STEPS)
    k = d.kernels.filter(pl.col("name") == name).row(0, named=True)
    assert k["status"] == "count_changed"
    assert (k["a_calls"] - k["b_calls"]) * 6 == pytest.approx(removed)
    others = d.kernels.filter(pl.col("name") != name)
    assert set(others["status"]) == {"unchanged"}
    # every op is unchanged but the one that launched the kernel: the same calls, and its
    # device self time short by exactly the kernel's duration
    changed_ops = d.operators.filter(pl.col("status") != "unchanged")
    assert changed_ops["name"].to_list() == [op] and changed_ops["status"].to_list() == ["time_changed"]
    assert changed_ops["delta_ns"][0] * 6 == pytest.approx(-dur_ns)
    assert sorted(d.changes["name"].to_list()) == sorted([name, op])
    # the step did not collapse: same steps, the same windows, at most the kernel's time less
    assert d.b.step_ns <= d.a.step_ns and d.b.step_ns >= d.a.step_ns - (k["a_ns"] - k["b_ns"]) * 6
    # the per-iteration choice: step 1011 alone shows the whole kernel removed
    one = diff_traces(a, b, steps_a=[1011])
    assert one.a.step_numbers == one.b.step_numbers == (1011,)
    row = one.kernels.filter(pl.col("name") == name).row(0, named=True)
    assert row["a_calls"] - row["b_calls"] == removed
    # HTA over the same steps says the same
    hta = _hta(traces_dir / CONTROL, fewer, trace_diff.DeviceType.GPU, STEPS, tmp_path)
    changed = hta.filter(pl.col("diff_counts") != 0)
    assert changed["name"].to_list() == [name] and changed["diff_counts"].to_list() == [-removed]


def test_asking_for_a_step_a_run_did_not_keep_names_it(load_trace: Callable[[str], Trace]) -> None:
    with pytest.raises(ValueError, match=r"run B has no step \[7\]: the steps it kept are 1009, 1010"):
        diff_traces(load_trace(CONTROL), load_trace(TEST), steps_a=[1009], steps_b=[7])
    # an empty list asks for nothing: said so, not "run A has no step []"
    with pytest.raises(
        ValueError, match=r"^run A: no steps given \(an empty list\): the steps it kept are 1009, "
    ):
        diff_traces(load_trace(CONTROL), load_trace(TEST), steps_a=[], steps_b=[])


def test_differently_numbered_runs_compare_their_first_steps(load_trace: Callable[[str], Trace]) -> None:
    """No step number in common: the first min(n_a, n_b) kept steps of each side."""
    a = load_trace(CONTROL)
    b = load_trace("cuda/nccl_rank0_of_2.json.gz")
    assert choose_steps(a, b) == ((1009, 1010, 1011), (4, 5, 6))  # the NCCL run kept three steps
    d = diff_traces(a, b)
    assert d.a.steps == d.b.steps == 3


def test_runs_that_share_a_step_number_by_chance_compare_their_first_steps(tmp_path: Path) -> None:
    """A default ``torchscope run`` schedule (steps 0-4, 20-22, 38-40) against ``--wait 5
    --active 3 --repeat 0`` (steps 5-7, 13-15, ...) met at step 38 alone: the headline ratio came
    from one step of 11 and 28. Under half of the fewer kept steps shared is chance."""
    import json

    def run(steps: list[int], name: str) -> Trace:
        events = []
        for k, n in enumerate(steps):
            t = k * 1000
            events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{n}", "pid": 1, "tid": 1, "ts": t, "dur": 900})
            events.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": t + 10, "dur": 500})
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps({"traceEvents": events}))
        return torchscope.load(path)  # type: ignore[return-value]

    default = [*range(0, 5), 20, 21, 22, 38, 39, 40]
    own = [s for s in range(5, 70) if s % 8 in (5, 6, 7)][:28]
    a, b = run(default, "a"), run(own, "b")
    common = sorted(set(default) & set(own))
    assert len(common) * 2 < len(default)
    assert choose_steps(a, b) == (tuple(default), tuple(own[: len(default)]))
    # runs of one schedule still compare step for step
    assert choose_steps(a, run(default[:8] + [41], "c")) == (tuple(default[:8]), tuple(default[:8]))


def test_an_op_calling_itself_is_one_call_in_a_diff() -> None:
    """``aten::log_softmax`` -> ``aten::log_softmax`` on an H200 MLP step: torch's table, ours and
    the report count 2 calls on each side; the diff counted 4 on one side and ranked a false
    "count_changed" row above real time changes."""
    data = Path(__file__).parents[1] / "data" / "cuda_truth"
    a = torchscope.load(data / "mlp_flawed.pt.trace.json.gz")
    b = torchscope.load(data / "mlp_fixed.pt.trace.json.gz")
    ops = diff_traces(a, b).operators
    rows = {r["name"]: r for r in ops.iter_rows(named=True)}
    assert (rows["aten::log_softmax"]["a_calls"], rows["aten::log_softmax"]["b_calls"]) == (2.0, 2.0)
    assert rows["aten::log_softmax"]["status"] != "count_changed"
    assert rows["aten::std"]["a_calls"] == 2.0


def test_a_large_same_count_change_ranks_with_the_structural_ones() -> None:
    """fp32 -> bf16 on an H200 (tests/data/cuda_truth): ``aten::mm`` runs as often, 3.7 ms per
    step faster, and leads; the fp32 kernels that vanished follow by size. Every structural row
    first put fifteen kernels of 1-100 us above it (a new user's diff of two live cycles)."""
    data = Path(__file__).parents[1] / "data" / "cuda_truth"
    d = diff_traces(torchscope.load(data / "mlp_flawed.pt.trace.json.gz"), torchscope.load(data / "mlp_fixed.pt.trace.json.gz"))
    rows = d.changes.head(6).select("name", "status", "delta_ns").rows()
    assert [(n[:24], s) for n, s, _ in rows] == [
        ("aten::mm", "time_changed"),
        ("Memcpy HtoD (Pageable ->", "vanished"),  # the batch now made on the device
        ("aten::copy_", "count_changed"),
        ("void cutlass::Kernel2<cu", "vanished"),
        ("sm80_xmma_gemm_f32f32_f3", "vanished"),
        ("aten::addmm", "time_changed"),
    ]
    assert round(rows[0][2] / 1e3, 1) == -3700.7  # us per step
