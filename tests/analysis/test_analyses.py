"""Modules, FLOPs, memory, stacks and the host breakdown on a live CPU run of our MLP."""

from __future__ import annotations

import pytest

import torchscope
from torchscope.analysis.memory import (
    allocations_by_op,
    leak_candidates,
    memory_peaks,
    memory_timeline,
    outstanding_allocations,
)
from torchscope.analysis.modules import module_tree
from torchscope.analysis.operators import call_stacks, flops, operators
from torchscope.analysis.overview import HOST_CATEGORIES, overview
from torchscope.models import mlp
from torchscope.trace.model import Trace

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def mlp_run(tmp_path_factory: pytest.TempPathFactory) -> Trace:
    from torch.profiler import ProfilerActivity, profile

    model = mlp((512, 1024, 1024, 10))
    x = torch.randn(64, 512)
    kept = []
    with profile(
        activities=[ProfilerActivity.CPU],
        with_stack=True,
        with_modules=True,
        record_shapes=True,
        profile_memory=True,
    ) as prof:
        model(x)
        kept.append(torch.empty(1000, 1000))  # 4 MB allocated and still alive at the end
    path = tmp_path_factory.mktemp("mlp") / "mlp.json"
    prof.export_chrome_trace(str(path))
    trace = torchscope.load(path)
    assert isinstance(trace, Trace)
    return trace


def test_module_tree_follows_the_model(mlp_run: Trace) -> None:
    tree = module_tree(mlp_run)
    assert tree["path"].to_list() == [
        "MLP_0",
        "MLP_0/Sequential_0",
        "MLP_0/Sequential_0/Linear_0",
        "MLP_0/Sequential_0/Linear_1",
        "MLP_0/Sequential_0/Linear_2",
        "MLP_0/Sequential_0/ReLU_0",
        "MLP_0/Sequential_0/ReLU_1",
    ]
    assert tree["depth"].to_list() == [0, 1, 2, 2, 2, 2, 2] and set(tree["calls"]) == {1}
    root, seq = tree["host_ns"][0], tree["host_ns"][1]
    assert root >= seq >= sum(tree["host_ns"][2:])


def test_flops_of_the_linear_layers(mlp_run: Trace) -> None:
    f = flops(mlp_run).filter(pytest.importorskip("polars").col("name") == "aten::addmm")
    assert sorted(f["flops"].to_list()) == [2 * 64 * 1024 * 10, 2 * 64 * 512 * 1024, 2 * 64 * 1024 * 1024]
    assert (f["flops_per_s"] > 0).all()


def test_memory_peak_allocations_and_leaks(mlp_run: Trace) -> None:
    (peak,) = memory_peaks(mlp_run).iter_rows(named=True)
    assert peak["device"] == "cpu" and peak["peak_allocated_bytes"] >= 4_000_000
    # what is still allocated when a stepless trace ends is listed; nothing shows it growing, so
    # it is not called a possible leak (that needs three steps or more)
    held = outstanding_allocations(mlp_run).sort("bytes", descending=True)
    assert held.row(0, named=True)["bytes"] == 4_000_000 and held["op_name"][0] == "aten::empty"
    assert leak_candidates(mlp_run).height == 0
    by_op = {r["name"]: r for r in allocations_by_op(mlp_run).iter_rows(named=True)}
    assert by_op["aten::addmm"]["allocations"] == 3  # one output per Linear
    assert by_op["aten::addmm"]["self_allocated_bytes"] == 4 * 64 * (1024 + 1024 + 10)
    tl = memory_timeline(mlp_run)
    assert tl["allocated_bytes"].max() == peak["peak_allocated_bytes"]


def test_host_breakdown_and_stacks_of_a_cpu_run(mlp_run: Trace) -> None:
    ov = overview(mlp_run)
    assert not ov.steps_from_trace and ov.devices == ()
    hb = ov.host_breakdown_ns
    assert sum(hb[c] for c in HOST_CATEGORIES) == pytest.approx(hb["Total"])
    # both are there; which is larger is the machine's (one forward of a few ms: a busy machine
    # made the Python between the ops, 4.9 ms, longer than the ops, 2.8 ms, and failed CI)
    assert hb["Operators"] > 0 and hb["Python outside ops"] > 0
    stacks = call_stacks(mlp_run, "aten::addmm")
    assert stacks["calls"].sum() == 3 and stacks["stack"].str.contains("forward").all()
    ops = operators(mlp_run)
    assert ops.filter(ops["name"] == "aten::linear")["calls"][0] == 3


def test_conv_flops_from_shapes_and_concrete_inputs() -> None:
    from torchscope.analysis.operators import conv_flops

    # ResNet's stem: 8x3x32x32 input, 64 7x7 filters, stride 2, padding 3 -> 8x64x16x16 output
    dims = "[[8, 3, 32, 32], [64, 3, 7, 7], [], [], [], [], []]"
    concrete = '["", "", "", "[2, 2]", "[3, 3]", "[1, 1]", "1"]'
    assert conv_flops(dims, concrete) == 2 * 8 * 64 * 16 * 16 * 3 * 7 * 7
    assert conv_flops(dims, None) is None  # without stride/padding the output size is unknown


def test_an_allocation_of_unknown_size_is_not_added_to_its_op() -> None:
    """A [memory] event whose Bytes is NaN reads as null: it was cast to int64's minimum and
    made the op's net bytes -9,223,372,036,854,775,808 (a new user's hostile trace)."""
    import json

    from torchscope.trace import read_chrome_document

    memory = {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 1, "tid": 1}
    args = {"Device Type": 1, "Device Id": 0, "Addr": 1, "Total Allocated": 512, "Total Reserved": 2048}
    text = json.dumps(
        [
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 0, "dur": 100},
            {**memory, "ts": 10, "args": {**args, "Bytes": 512}},
            {**memory, "ts": 20, "args": {**args, "Bytes": float("nan")}},
        ]
    )
    trace = read_chrome_document(text, "t.json")
    (row,) = allocations_by_op(trace).iter_rows(named=True)
    assert (row["name"], row["allocations"], row["self_net_bytes"], row["total_net_bytes"]) == (
        "aten::mm",
        1,
        512,
        512,
    )


@pytest.mark.parametrize("python_functions", [False, True])
def test_kinetos_overhead_spans_take_no_memory(python_functions: bool) -> None:
    """Kineto's "Buffer Flush" runs on a track of its own (pid -1) while the user's thread
    allocates: a free between two ops inside it belongs to "[memory]", an allocation inside an op
    to that op alone. Counted by interval it was taken from "[memory]" and counted twice, and the
    rows no longer summed to the bytes (seen on a torch 2.11 H200 trace: +512 B)."""
    import json

    from torchscope.compat.averages import key_averages
    from torchscope.trace import read_chrome_document

    memory = {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 1, "tid": 1}
    args = {"Device Type": 1, "Device Id": 0, "Addr": 1, "Total Allocated": 512, "Total Reserved": 2048}
    text = json.dumps(
        [
            {"ph": "X", "cat": "cpu_op", "name": "aten::relu", "pid": 1, "tid": 1, "ts": 0, "dur": 10},
            {"ph": "X", "cat": "overhead", "name": "Buffer Flush", "pid": -1, "tid": 0, "ts": 5, "dur": 50},
            {**memory, "ts": 20, "args": {**args, "Bytes": -1024}},
            {"ph": "X", "cat": "cpu_op", "name": "aten::linear", "pid": 1, "tid": 1, "ts": 30, "dur": 40},
            {"ph": "X", "cat": "cpu_op", "name": "aten::addmm", "pid": 1, "tid": 1, "ts": 35, "dur": 30},
            {**memory, "ts": 40, "args": {**args, "Bytes": 512}},
        ]
    )
    rows = {r.key: r for r in key_averages(read_chrome_document(text, "t.json"), python_functions=python_functions)}
    got = {k: (r.self_device_memory_usage, r.device_memory_usage) for k, r in rows.items()}
    assert got == {
        "aten::relu": (0, 0),
        "Buffer Flush": (0, 0),
        "[memory]": (-1024, -1024),
        "aten::linear": (0, 512),
        "aten::addmm": (512, 512),
    }
    assert sum(r.self_device_memory_usage for r in rows.values()) == -512
