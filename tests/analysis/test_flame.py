"""Flame graphs: the trees add up, on real traces and on a live ``with_stack`` profile of our MLP."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np
import polars as pl
import pytest

import torchscope
from torchscope.analysis.flame import (
    OTHER,
    Flame,
    device_flame,
    diff_flame,
    flame_diff,
    flame_graphs,
    fold,
    folded_stacks,
    host_flame,
    module_flame,
    sampled_flame,
)
from torchscope.analysis.modules import module_tree
from torchscope.trace.model import Trace
from torchscope.trace.schema import HOST_KINDS

LoadTrace = Callable[[str], Trace]
LARGE = "other_devices/mtia_training_large.json.gz"
ALEXNET = "cuda/alexnet_benchmark.json.gz"


def children_sum(f: Flame) -> np.ndarray:
    out = np.zeros(f.size, np.int64)
    np.add.at(out, f.parent[1:], f.total[1:])
    return out


def assert_well_formed(f: Flame) -> None:
    """Every node's total is its self plus its children's; parents come first; no empty node."""
    assert f.parent[0] == -1 and (f.parent[1:] >= 0).all()
    assert (f.parent[1:] < np.arange(1, f.size)).all()
    assert (f.total == f.self_ + children_sum(f)).all()
    assert (f.self_ >= 0).all() and (f.total[1:] > 0).all()


def host_excess(trace: Trace) -> tuple[int, int]:
    """Summed durations of the top-level host events, and the time by which children outlast
    their parent (overlapping children): the flame's root is exactly the sum of the two."""
    ev = trace.events.with_row_index("row").filter(
        pl.col("kind").is_in(list(HOST_KINDS)) & (pl.col("dur_ns") > 0)
    )
    top = int(ev.filter(pl.col("parent") < 0)["dur_ns"].sum())
    kids = ev.filter(pl.col("parent") >= 0).group_by("parent").agg(pl.col("dur_ns").sum().alias("kids"))
    over = ev.join(kids, left_on="row", right_on="parent").select((pl.col("kids") - pl.col("dur_ns")).clip(0))
    return top, int(over.to_series().sum())


# -- real traces --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "rel",
    [
        ALEXNET,
        "cuda/rank0_ns_resolution.pt.trace.json.gz",
        "tensorboard_samples/resnet50_num_workers_0.pt.trace.json.gz",
    ],
)
def test_host_root_is_the_top_level_time(load_trace: LoadTrace, rel: str) -> None:
    trace = load_trace(rel)
    f = host_flame(trace)
    assert_well_formed(f)
    top, excess = host_excess(trace)
    assert int(f.total[0]) == top + excess
    # rank0_ns_resolution's children outlasted their parents only while its ns decimals were
    # read through a double; read exactly, no real trace here has any
    assert excess == 0


def test_device_time_by_launching_op_on_alexnet(load_trace: LoadTrace) -> None:
    trace = load_trace(ALEXNET)
    f = device_flame(trace)
    assert_well_formed(f)
    dev = trace.events.filter(pl.col("kind").is_in(["kernel", "memcpy", "memset"]))
    assert int(f.total[0]) == int(dev["dur_ns"].sum())
    # the leaves are the device events, by name: the same sums as the trace's own
    leaves = np.flatnonzero(children_sum(f) == 0)
    by_leaf: dict[str, int] = {}
    for i in leaves.tolist():
        by_leaf[f.label(i)] = by_leaf.get(f.label(i), 0) + int(f.self_[i])
    expected = dict(dev.group_by(pl.col("name").cast(pl.String)).agg(pl.col("dur_ns").sum()).iter_rows())
    assert by_leaf == expected
    # a kernel sits under the op that launched it, under that op's own host stack (below the thread)
    k = dev.filter(pl.col("op") >= 0).sort("dur_ns", descending=True).row(0, named=True)
    want = (*host_path(trace, k["op"]), str(k["name"]))
    nodes = [i for i in range(1, f.size) if f.path(i)[1:] == want]
    assert len(nodes) == 1 and f.label(int(f.parent[nodes[0]])) == str(trace.events["name"][k["op"]])


def host_path(trace: Trace, row: int) -> tuple[str, ...]:
    """The names of a host event's ancestors and its own, root first, steps as ``ProfilerStep#*``."""
    ev = trace.events
    names = []
    while row >= 0:
        name = str(ev["name"][row])
        names.append("ProfilerStep#*" if name.startswith("ProfilerStep#") else name)
        row = int(ev["parent"][row])
    return tuple(reversed(names))


def test_the_largest_trace_folds_to_a_bounded_tree(load_trace: LoadTrace) -> None:
    trace = load_trace(LARGE)
    full = host_flame(trace)
    small = fold(full, min_fraction=0.001, max_nodes=300)
    assert_well_formed(small)
    assert small.size <= 300 < full.size
    assert small.total[0] == full.total[0]
    # what was folded is still there, in "(other)" children
    others = [i for i in range(small.size) if small.label(i) == OTHER]
    assert others and all(small.self_[i] == small.total[i] for i in others)
    # every kept node keeps its exact value
    for i in range(1, small.size):
        if small.label(i) != OTHER:
            assert full.total[full.find(*small.path(i))] == small.total[i]
    page = flame_graphs(trace)
    assert set(page) == {"host", "device"}  # no nn.Module scopes in this trace
    text = json.dumps(page)
    assert len(text) < 200_000
    for tree in page.values():
        n = len(tree["name"])
        assert len(tree["parent"]) == len(tree["total"]) == len(tree["self"]) == n <= 5000


def test_diff_keeps_b_widths_and_a_values_by_path(load_trace: LoadTrace) -> None:
    a, b = load_trace("cuda/diff_control_rank3_of_8.json.gz"), load_trace("cuda/diff_test_rank1_of_2.json.gz")
    fa, fb = device_flame(a), device_flame(b)
    d = diff_flame(fa, fb)
    assert d.base is not None and (d.total == fb.total).all()
    assert d.base[0] == fa.total[0]
    for i in range(1, d.size):
        j = fa.find(*d.path(i))
        assert d.base[i] == (fa.total[j] if j >= 0 else 0)
    assert (d.base == 0).any() and (d.base > 0).sum() > d.size // 2  # some paths new, most shared
    page = flame_diff(a, b)
    assert set(page) == {"host", "device"}
    for tree in page.values():
        base, parent = np.array(tree["base"]), np.array(tree["parent"])
        kids = np.zeros(base.size, np.int64)
        np.add.at(kids, parent[1:], base[1:])
        assert (base >= kids).all()  # A's parent covers A's children shown under it


def test_a_trace_against_itself_has_no_change(load_trace: LoadTrace) -> None:
    trace = load_trace(ALEXNET)
    for tree in flame_diff(trace, trace).values():
        assert tree["base"] == tree["total"]


def test_a_trace_without_host_time_has_no_flame_graph(tmp_path: Path) -> None:
    path = tmp_path / "instants.json"
    path.write_text(
        json.dumps({"traceEvents": [{"ph": "i", "name": "x", "ts": 1, "pid": 1, "tid": 1, "s": "t"}]})
    )
    trace = torchscope.load(path)
    assert isinstance(trace, Trace)
    assert flame_graphs(trace) == {}
    assert host_flame(trace).size == 1


# -- a live with_stack profile of our MLP ---------------------------------------------------------


def train_step(model: object, x: object) -> object:
    """A function of the workload the Python flame graph must show, above the model's modules."""
    loss = model(x).sum()  # type: ignore[operator]
    loss.backward()
    return loss


@pytest.fixture(scope="module")
def mlp_run(tmp_path_factory: pytest.TempPathFactory) -> Trace:
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile

    from torchscope.models import mlp

    model, x = mlp((64, 128, 128, 10)), torch.randn(32, 64)
    with profile(activities=[ProfilerActivity.CPU], with_stack=True) as prof:
        for _ in range(3):
            train_step(model, x)
    path = tmp_path_factory.mktemp("flame") / "mlp.json"
    prof.export_chrome_trace(str(path))
    trace = torchscope.load(path)
    assert isinstance(trace, Trace)
    return trace


def test_python_stack_shows_the_workload(mlp_run: Trace) -> None:
    f = host_flame(mlp_run)
    assert_well_formed(f)
    top, excess = host_excess(mlp_run)
    assert int(f.total[0]) == top + excess
    steps = [
        i for i in range(f.size) if f.label(i).endswith(": train_step") and "test_flame.py" in f.label(i)
    ]
    assert len(steps) == 1  # three calls, one path: merged
    linear = [f.path(i) for i in range(f.size) if f.label(i) == "aten::addmm"]
    assert len(linear) == 3  # one per Linear layer
    for path in linear:
        names = list(path)
        assert names.index(f.label(steps[0])) < names.index("nn.Module: MLP_0") < names.index("aten::linear")
        assert any(n.startswith("nn.Module: Linear_") for n in names)
    # the backward pass runs under train_step's loss.backward()
    assert any(f.label(i) == "AddmmBackward0" and f.label(steps[0]) in f.path(i) for i in range(f.size))


def test_module_flame_agrees_with_the_module_tree(mlp_run: Trace) -> None:
    f = module_flame(mlp_run)
    assert_well_formed(f)
    tree = module_tree(mlp_run)
    ours = {"/".join(f.path(i)): int(f.total[i]) for i in range(1, f.size)}
    assert ours == dict(zip(tree["path"].to_list(), tree["host_ns"].to_list(), strict=True))
    assert f.find("MLP_0", "Sequential_0", "Linear_2") > 0


def test_sampled_flame_agrees_with_the_hot_spot_table() -> None:
    from torchscope.runner.sampler import Sampler

    def spin(sampler: Sampler) -> int:
        acc = 0
        while len(sampler._times) < 50:  # until the sampler has seen 50 samples, however long
            acc += sum(range(200))
        return acc

    sampler = Sampler(interval_s=0.001, thread_id=threading.get_ident())
    sampler.start()
    spin(sampler)
    hs = sampler.stop()
    f = sampled_flame(hs)
    assert_well_formed(f)
    assert int(f.total[0]) == int(hs.weights_ns.sum())
    nodes = [i for i in range(f.size) if f.label(i).startswith("spin (test_flame.py:")]
    assert len(nodes) == 1
    row = next(r for r in hs.table(None, limit=1000) if r["function"] == "spin")
    assert int(f.total[nodes[0]]) == pytest.approx(row["total_ns"], abs=len(hs.stacks))
    assert "test_sampled_flame_agrees_with_the_hot_spot_table" in f.label(int(f.parent[nodes[0]]))


def test_sampled_flame_gives_our_cycle_stop_one_node_of_its_own() -> None:
    """The runner's cycle stop and save runs inside the user's optimizer.step(): the flame graph
    shows it as one top-level node, as the hot-spot table's row, never polars' frames under
    the user's call path."""
    from torchscope.runner.sampler import PROFILER_FRAME, HotSpots

    ms = 1_000_000
    user = (("train.py", "step", 12), ("train.py", "<module>", 1))
    save = (PROFILER_FRAME, ("/x/site-packages/polars/dataframe/frame.py", "select", 10587), *user)
    hs = HotSpots(
        ms, 0, np.arange(1, 11, dtype=np.int64) * ms, np.array([0] * 6 + [1] * 4, np.int32), (user, save)
    )
    f = sampled_flame(hs)
    assert_well_formed(f)
    ours = f.find(f"{PROFILER_FRAME[1]} (<torchscope>:0)")
    assert ours > 0 and int(f.total[ours]) == 4 * ms and int(f.self_[ours]) == 4 * ms
    assert not [f.path(i) for i in range(1, f.size) if "select" in f.label(i)]
    assert int(f.total[f.find("<module> (train.py:1)")]) == 6 * ms


def test_folded_stacks_of_a_deep_recursion_are_one_line_per_distinct_path() -> None:
    """A recursion 1,500 frames deep (``with_stack`` on recursive code), called 5 times: 1,500
    distinct paths, each frame's self time summed over the calls. The paths are built once per
    distinct path: a string per event held every event's whole path at once (a 12 MB trace of
    a 5,000-deep recursion took 26 s and 12 GB, now 1.7 s and 1 GB, the same output)."""
    from torchscope.trace import read_chrome_document

    depth, calls, events = 1500, 5, []
    start = 0
    for _ in range(calls):
        span = 4 * depth + 10
        for d in range(depth):  # each frame 4 us longer than its callee, the deepest 14 us
            frame = {"ph": "X", "cat": "python_function", "name": f"m.py({d % 50}): f", "pid": 1, "tid": 1}
            events.append({**frame, "ts": start + 2 * d, "dur": span - 4 * d})
        start += span + 5
    lines = folded_stacks(read_chrome_document({"traceEvents": events}))
    assert len(lines) == depth
    assert lines[0] == ("thread 1;m.py(0): f", 4 * calls)
    deepest = max(lines, key=lambda line: len(line[0]))
    assert deepest[0].count(";") == depth and deepest[1] == 14 * calls
    assert sum(us for _, us in lines) == calls * (4 * (depth - 1) + 14)


def test_folded_stacks_merge_the_steps_and_stop_at_the_depth_cap() -> None:
    """Steps fold into ``ProfilerStep#*`` as on the page (a line per step and path made a
    trace of many steps a line per event), and a stack deeper than ``STACK_DEPTH_CAP`` ends
    in one ``DEEPER`` frame holding the time below it (the text grows with the square of the
    depth: a 100,000-deep nesting needed ~60 GB)."""
    from torchscope.analysis.flame import DEEPER, STACK_DEPTH_CAP
    from torchscope.trace import read_chrome_document

    events = []
    for step in range(3):  # three steps, each one op of 1 us self time
        t = 100 * step
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}", "pid": 1, "tid": 1, "ts": t, "dur": 50})
        events.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": t + 10, "dur": 1})
    depth = STACK_DEPTH_CAP + 500
    for d in range(depth):  # a nesting deeper than the cap, 2 us of self time a frame
        events.append({"ph": "X", "cat": "cpu_op", "name": "aten::f", "pid": 1, "tid": 2, "ts": 1000 + d, "dur": 2 * (depth - d)})
    lines = dict(folded_stacks(read_chrome_document({"traceEvents": events})))
    assert lines["thread 1;ProfilerStep#*"] == 3 * 49 and lines["thread 1;ProfilerStep#*;aten::mm"] == 3
    deepest = max(lines, key=len)
    assert deepest.endswith(";aten::f;" + DEEPER) and deepest.count("aten::f") == STACK_DEPTH_CAP
    assert lines[deepest] == 2 * (depth - STACK_DEPTH_CAP)
    assert sum(us for path, us in lines.items() if "aten::f" in path) == 2 * depth


def test_folded_stacks_keep_one_line_per_path_whatever_the_names_hold() -> None:
    """A name with a newline (JSON's ``\\n``) or a ``;`` would split a line or a path of the
    folded format: they are written as a space and ``:``."""
    from torchscope.trace import read_chrome_document

    frame = {"ph": "X", "cat": "user_annotation", "pid": 1, "tid": 1}
    events = [{**frame, "name": "outer;x", "ts": 0, "dur": 10}, {**frame, "name": "a\nb\rc", "ts": 1, "dur": 5}]
    lines = folded_stacks(read_chrome_document({"traceEvents": events}))
    assert lines == [("thread 1;outer:x", 5), ("thread 1;outer:x;a b c", 5)]
