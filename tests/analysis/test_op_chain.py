"""The operators drill-down as a chain: op -> input shape -> call stacks -> device work launched.

``kernels_by_op`` credits a kernel to the op that launched it and to every op enclosing it, so
for each op row (name, input shape) its kernels add up to the row's device total, as torch's
``key_averages`` counts device time; the report keeps that true under its row limits.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path

import polars as pl
import pytest

from torchscope.analysis import report_model as M
from torchscope.analysis.operators import call_stacks, kernels_by_op, operators
from torchscope.analysis.report import (
    KERNELS_PER_OP,
    LAUNCHERS_PER_KERNEL,
    SHAPES_PER_OP,
    STACKS_PER_OP,
    report_model,
)
from torchscope.compat.averages import key_averages
from torchscope.trace.model import Trace

CUDA = [
    "cuda/nccl_rank1_of_2_profile_memory.json.gz",
    "cuda/diff_control_rank3_of_8.json.gz",
    "cuda/rank0_ns_resolution.pt.trace.json.gz",
    "cuda/alexnet_benchmark.json.gz",
    "other_devices/mtia_training_large.json.gz",
]
KEYS = ["name", "input_dims"]


def _ns(us: float) -> int:
    return round(us * 1000)


@pytest.mark.parametrize("rel", CUDA)
def test_each_op_rows_kernels_add_up_to_its_device_time(load_trace: Callable[[str], Trace], rel: str) -> None:
    trace = load_trace(rel)
    ops = operators(trace, by_input_shape=True)
    sums = kernels_by_op(trace).group_by(KEYS).agg(pl.col("total_ns").sum(), pl.col("self_total_ns").sum())
    both = ops.join(sums, on=KEYS, how="left", nulls_equal=True).with_columns(
        pl.col("total_ns", "self_total_ns").fill_null(0)
    )
    assert both.height == ops.height and (both["device_total_ns"] > 0).sum() > 0
    assert (both["total_ns"] == both["device_total_ns"]).all()
    assert (both["self_total_ns"] == both["device_self_ns"]).all()


@pytest.mark.parametrize("rel", CUDA)
def test_the_reports_chain_adds_up_under_its_row_limits(load_trace: Callable[[str], Trace], rel: str) -> None:
    r = report_model(load_trace(rel))
    kept = {(o.name, o.input_dims): o for o in r.operators_by_shape}
    rows: dict[tuple[str, str | None], list[M.KernelByOp]] = {}
    for k in r.kernels_by_op:
        rows.setdefault((k.op_name, k.input_dims), []).append(k)
    assert set(rows) <= set(kept)  # only the op rows the report keeps
    for key, o in kept.items():
        ks = rows.get(key, [])
        assert sum(_ns(k.total_us) for k in ks) == _ns(o.device_total_us), key
        assert sum(_ns(k.self_total_us) for k in ks) == _ns(o.device_self_us), key
        # the top kernels by time, then one row for the rest, only when there is a rest
        assert len(ks) <= KERNELS_PER_OP + 1
        others = [k for k in ks if k.name == M.OTHER_KERNELS]
        assert len(others) == (len(ks) == KERNELS_PER_OP + 1) and (not others or ks[-1] is others[0])
        named = [k.total_us for k in ks if k.name != M.OTHER_KERNELS]
        assert named == sorted(named, reverse=True)


def test_a_kernel_counts_in_the_op_that_launched_it_and_every_op_above(
    load_trace: Callable[[str], Trace],
) -> None:
    k = kernels_by_op(load_trace("cuda/nccl_rank1_of_2_profile_memory.json.gz"))
    sgemm = {
        r["name"]: r for r in k.filter(pl.col("kernel") == "volta_sgemm_128x64_nn").iter_rows(named=True)
    }
    # aten::mm launched all 225 itself; the backward function around it launched none itself
    assert (sgemm["aten::mm"]["count"], sgemm["aten::mm"]["self_count"]) == (225, 225)
    assert sgemm["aten::mm"]["self_total_ns"] == sgemm["aten::mm"]["total_ns"] == 55_313_000
    outer = sgemm["CompiledFunctionBackward"]
    assert (outer["count"], outer["self_count"], outer["total_ns"]) == (225, 0, 55_313_000)


def test_an_op_that_calls_itself_counts_once(load_trace: Callable[[str], Trace]) -> None:
    """``aten::div`` -> ``aten::div`` (the inner call its only child): torch's tables fold the
    inner call into the outer (``_remove_dup_nodes``), and so do ``key_averages``, the op row and
    the chain, so the kernel counts once and the chain adds up to the row it explains."""
    trace = load_trace("cuda/rank0_ns_resolution.pt.trace.json.gz")
    div = kernels_by_op(trace).filter(pl.col("name") == "aten::div")
    (row,) = operators(trace, by_input_shape=True).filter(pl.col("name") == "aten::div").iter_rows(named=True)
    assert div["total_ns"].sum() == row["device_total_ns"] == 124_000
    assert div["self_total_ns"].sum() == row["device_self_ns"] == 124_000
    assert div["count"].to_list() == div["self_count"].to_list()
    (avg,) = [r for r in key_averages(trace) if r.key == "aten::div"]
    assert (avg.count, avg.device_time_total) == (row["calls"], 124.0)


def test_call_stacks_per_input_shape_agree_with_torch(tmp_path: Path) -> None:
    """Stacks by op name and input shape: the calls of each (name, shape) add up to torch's
    ``key_averages(group_by_input_shape=True)`` count for it, and the report keeps the top few."""
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile

    import torchscope

    small, wide = torch.nn.Linear(16, 8), torch.nn.Linear(32, 8)
    with profile(activities=[ProfilerActivity.CPU], with_stack=True, record_shapes=True) as prof:
        for _ in range(3):
            small(torch.randn(4, 16))
        wide(torch.randn(2, 32))
    path = tmp_path / "linear.json"
    prof.export_chrome_trace(str(path))
    trace = torchscope.load(path)
    assert isinstance(trace, Trace)
    theirs = Counter(
        {
            (r.key, str(r.input_shapes)): r.count
            for r in prof.key_averages(group_by_input_shape=True)
            if r.key == "aten::addmm"
        }
    )
    stacks = call_stacks(trace, "aten::addmm")
    ours = Counter[tuple[str, str]]()
    for r in stacks.iter_rows(named=True):
        ours[(r["name"], r["input_dims"].replace(" ", ""))] += r["calls"]
    assert ours == Counter({(k, s.replace(" ", "")): n for (k, s), n in theirs.items()})
    assert sorted(ours.values()) == [1, 3]
    assert stacks["stack"].str.contains("test_call_stacks_per_input_shape_agree_with_torch").all()
    report = report_model(trace)
    kept = {(o.name, o.input_dims) for o in report.operators_by_shape}
    assert {(s.name, s.input_dims) for s in report.call_stacks} <= kept
    per_row = Counter((s.name, s.input_dims) for s in report.call_stacks)
    assert per_row and max(per_row.values()) <= STACKS_PER_OP


LAUNCHER_TRACES = [
    "cuda/rank0_ns_resolution.pt.trace.json.gz",
    "tensorboard_samples/resnet50_num_workers_0.pt.trace.json.gz",
    "cuda/diff_test_rank1_of_2.json.gz",
    "other_devices/mtia_inference.json.gz",
    "other_devices/mtia_training_large.json.gz",
]


@pytest.mark.parametrize("rel", LAUNCHER_TRACES)
def test_every_kept_kernels_launchers_add_up_to_its_row(load_trace: Callable[[str], Trace], rel: str) -> None:
    """The page's "Launched by" once summed kernels_by_op, which names a kernel only under the op
    rows the report keeps (resnet50's covered 87.6% of kernel time, mtia_inference's 31.9%)."""
    r = report_model(load_trace(rel))
    rows: dict[str, list[M.KernelLauncher]] = {}
    for x in r.kernel_launchers:
        rows.setdefault(x.name, []).append(x)
    assert list(rows) == [k.name for k in r.kernels]  # every kept kernel, in the kernels' order
    for k in r.kernels:
        ls = rows[k.name]
        assert sum(x.count for x in ls) == k.count, k.name
        assert sum(_ns(x.total_us) for x in ls) == _ns(k.total_us), k.name
        assert len(ls) <= LAUNCHERS_PER_KERNEL + 1
        assert all(x.op_name != M.OTHER_OPS for x in ls[:-1])
        if ls[-1].op_name == M.OTHER_OPS:
            assert len(ls) == LAUNCHERS_PER_KERNEL + 1 and ls[-1].ops >= 2


def test_launchers_of_a_kernel_match_the_traces_launching_ops(load_trace: Callable[[str], Trace]) -> None:
    """volta_sgemm_128x32_nt: 20 calls, 15 of them (7,174 µs) from aten::convolution_backward;
    the kernels by op rows named only aten::mm's 5."""
    trace = load_trace("cuda/rank0_ns_resolution.pt.trace.json.gz")
    name = "volta_sgemm_128x32_nt"
    ev = trace.events
    k = trace.kernels.filter(pl.col("name").cast(pl.String) == name)
    truth = Counter(str(ev["name"][int(o)]) for o in k["op"].to_list())
    r = report_model(trace)
    got = [(x.op_name, x.count, x.total_us) for x in r.kernel_launchers if x.name == name]
    assert got == [("aten::convolution_backward", 15, 7173.975), ("aten::mm", 5, 98.048)]
    assert dict(truth) == {"aten::convolution_backward": 15, "aten::mm": 5}


SHAPE_TRACES = [
    "tensorboard_samples/resnet50_num_workers_0.pt.trace.json.gz",
    "cuda/diff_control_rank3_of_8.json.gz",
    "other_devices/mtia_training_large.json.gz",
    "cuda/rank0_ns_resolution.pt.trace.json.gz",
]


@pytest.mark.parametrize("rel", SHAPE_TRACES)
def test_every_kept_op_has_shape_rows_adding_up_to_it(load_trace: Callable[[str], Trace], rel: str) -> None:
    """operators_by_shape was a global top 200: 54 of resnet50's 79 ops had no shape row, 160 of
    mtia_training_large's 200. Now each op's top shapes then "(other shapes)" add up to the op."""
    trace = load_trace(rel)
    r = report_model(trace)
    rows: dict[str, list[M.OperatorByShape]] = {}
    for x in r.operators_by_shape:
        rows.setdefault(x.name, []).append(x)
    assert list(rows) == [o.name for o in r.operators]
    every = operators(trace, by_input_shape=True)
    for o in r.operators:
        xs = rows[o.name]
        assert sum(x.calls for x in xs) == o.calls, o.name
        for f in ("host_total_us", "host_self_us", "device_total_us", "device_self_us"):
            assert sum(_ns(getattr(x, f)) for x in xs) == _ns(getattr(o, f)), (o.name, f)
        assert max(_ns(x.host_max_us) for x in xs) == _ns(o.host_max_us)
        n = every.filter(pl.col("name") == o.name).height
        assert sum(x.shapes for x in xs) == n
        if n <= SHAPES_PER_OP + 1:  # one shape past the cut shows as itself
            assert len(xs) == n and all(x.input_dims != M.OTHER_SHAPES for x in xs)
        else:
            assert len(xs) == SHAPES_PER_OP + 1 and xs[-1].input_dims == M.OTHER_SHAPES
            assert xs[-1].shapes == n - SHAPES_PER_OP >= 2
    # the chain below stays on the kept shape rows (the remainder's kernels add up: the test above)
    kept = {(x.name, x.input_dims) for x in r.operators_by_shape}
    assert {(s.name, s.input_dims) for s in r.call_stacks} <= kept
    assert {(k.op_name, k.input_dims) for k in r.kernels_by_op} <= kept


def test_relu_on_resnet50_has_its_twelve_shapes(load_trace: Callable[[str], Trace]) -> None:
    """aten::relu_ (294 calls) showed one shape row of 18 calls, and the page opened it alone."""
    r = report_model(load_trace("tensorboard_samples/resnet50_num_workers_0.pt.trace.json.gz"))
    xs = [x for x in r.operators_by_shape if x.name == "aten::relu_"]
    assert [x.shapes for x in xs] == [1] * SHAPES_PER_OP + [4]
    assert sum(x.calls for x in xs) == 294 and xs[-1].calls == 60
    kernels = [k for k in r.kernels_by_op if k.op_name == "aten::relu_" and k.input_dims == M.OTHER_SHAPES]
    assert sum(_ns(k.total_us) for k in kernels) == _ns(xs[-1].device_total_us) > 0


def test_a_deep_models_stacks_keep_the_users_call_site(tmp_path: Path) -> None:
    """Stacks were cut to the innermost 8 frames: on a model of nested nn.Modules the user's own
    call site (here this test function) never showed. Now the outermost frames stay too."""
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile

    import torchscope
    from torchscope.analysis.operators import STACK_CHARS, STACK_FRAMES, STACK_INNER

    model: torch.nn.Module = torch.nn.Linear(8, 8)
    for _ in range(8):
        model = torch.nn.Sequential(model)
    with profile(activities=[ProfilerActivity.CPU], with_stack=True, record_shapes=True) as prof:
        model(torch.randn(2, 8))
    path = tmp_path / "deep.json"
    prof.export_chrome_trace(str(path))
    trace = torchscope.load(path)
    assert isinstance(trace, Trace)
    (stack,) = [s for s in report_model(trace).call_stacks if s.name == "aten::linear"]
    frames = stack.stack.split(" <- ")
    assert frames[0] == "<built-in function linear>" and "torch/nn/modules/linear.py" in frames[1]
    # under pytest the stack is 60-odd frames deep; this function is the user's frame nearest the op
    gaps = [f for f in frames if f.startswith("… ") and f.endswith((" frames …", " frame …"))]
    kept = [f for f in frames if f not in gaps]
    user = [f for f in kept if "test_op_chain.py" in f]
    assert user and "test_a_deep_models_stacks_keep_the_users_call_site" in user[0]
    assert len(kept) <= STACK_FRAMES and len(stack.stack) <= STACK_CHARS
    # every frame left out is counted: the kept ones and the gaps make up the whole stack
    ev = trace.events
    (row,) = ev.filter(pl.col("name").cast(pl.String) == "aten::linear")["id"].to_list()
    parent, kind, names = ev["parent"].fill_null(-1).to_list(), ev["kind"].to_list(), ev["name"].to_list()
    full = []
    while (row := parent[row]) >= 0:
        if kind[row] == "python_function":
            full.append(str(names[row]))
    assert len(kept) + sum(int(g.split()[1]) for g in gaps) == len(full) > STACK_FRAMES
    assert kept[:STACK_INNER] == full[:STACK_INNER]


def test_kernel_launchers_past_the_cut_add_up_in_other_ops(
    load_trace: Callable[[str], Trace], monkeypatch: pytest.MonkeyPatch
) -> None:
    """No shared trace has a kernel with over 8 launchers (diff_test_rank1_of_2: 5 at most), so
    cut at 2 to exercise the "(other ops)" row: each kernel's rows still add up to it."""
    import torchscope.analysis.report as report

    monkeypatch.setattr(report, "LAUNCHERS_PER_KERNEL", 2)
    r = report_model(load_trace("cuda/diff_test_rank1_of_2.json.gz"))
    rows: dict[str, list[M.KernelLauncher]] = {}
    for x in r.kernel_launchers:
        rows.setdefault(x.name, []).append(x)
    cut = [ls for ls in rows.values() if ls[-1].op_name == M.OTHER_OPS]
    assert cut and all(len(ls) == 3 and ls[-1].ops >= 2 for ls in cut)
    assert any(x.op_name == M.NO_OP for x in r.kernel_launchers)  # launches no host op encloses
    for k in r.kernels:
        assert sum(x.count for x in rows[k.name]) == k.count
        assert sum(_ns(x.total_us) for x in rows[k.name]) == _ns(k.total_us)
