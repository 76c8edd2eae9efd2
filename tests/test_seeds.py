"""Every profiler snippet of the seed documents, run twice: with torch.profiler and with torchscope.

Each snippet is kept as source text and executed after one import line, torch's or ours, so
the test shows literally that only the import changes. Our ResNet-18 (small inputs, to keep
CI fast) stands in for torchvision's; GPU-only parts run on the CPU. The two runs profile the
same deterministic workload, and we check what a user would compare: the same column headers
for the same options, the same op names with the same call counts (the profiler's own
bookkeeping and Python frames aside), and times that are consistent.
"""

from __future__ import annotations

import re
import textwrap
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from torchscope.models import resnet18

TORCH_IMPORT = "from torch.profiler import profile, record_function, ProfilerActivity, schedule, tensorboard_trace_handler\n"
OUR_IMPORT = (
    "from torchscope import profile, record_function, ProfilerActivity, schedule, tensorboard_trace_handler\n"
)
TORCH_AUTOGRAD_IMPORT = "import torch.autograd.profiler as profiler\n"
OUR_AUTOGRAD_IMPORT = "import torchscope as profiler\n"

# seeds 000, 002 (CPU part), 003: execution time, input shapes
SNIPPET_TIME = """
with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
    with record_function("model_inference"):
        model(inputs)
out.append(prof.key_averages().table(sort_by="cpu_time_total", row_limit=10))
out.append(prof.key_averages(group_by_input_shape=True).table(sort_by="cpu_time_total", row_limit=10))
"""
# seeds 002, 003: memory
SNIPPET_MEMORY = """
with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True) as prof:
    model(inputs)
out.append(prof.key_averages().table(sort_by="self_cpu_memory_usage", row_limit=10))
out.append(prof.key_averages().table(sort_by="cpu_memory_usage", row_limit=10))
"""
# seed 002: chrome trace and stacks (CUDA parts on the CPU)
SNIPPET_EXPORT = """
with profile(activities=[ProfilerActivity.CPU]) as prof:
    model(inputs)
prof.export_chrome_trace(str(tmp / "trace.json"))
with profile(
    activities=[ProfilerActivity.CPU],
    with_stack=True,
    experimental_config=torch._C._profiler._ExperimentalConfig(verbose=True),
) as prof:
    model(inputs)
out.append(prof.key_averages(group_by_stack_n=5).table(sort_by="self_cuda_time_total", row_limit=2))
"""
# seeds 001, 002: a trace handler that prints a table and exports a trace per cycle
SNIPPET_HANDLER = """
def trace_handler(p):
    out.append(p.key_averages().table(sort_by="self_cpu_time_total", row_limit=10))
    p.export_chrome_trace(str(tmp / ("trace_" + str(p.step_num) + ".json")))
    ready.append(p.step_num)

with profile(
    activities=[ProfilerActivity.CPU],
    schedule=schedule(wait=1, warmup=1, active=2),
    on_trace_ready=trace_handler,
) as p:
    for idx in range(8):
        model(inputs)
        p.step()
"""
# seed 001: the TensorBoard recipe, as a context manager and with start()/step()/stop()
SNIPPET_TENSORBOARD = """
with profile(
    schedule=schedule(wait=1, warmup=1, active=3, repeat=1),
    on_trace_ready=tensorboard_trace_handler(str(tmp / "log" / "resnet18")),
    record_shapes=True,
    profile_memory=True,
    with_stack=True,
) as prof:
    for step, batch_data in enumerate(train_loader):
        prof.step()
        if step >= 1 + 1 + 3:
            break
        train(batch_data)

prof = profile(
    schedule=schedule(wait=1, warmup=1, active=3, repeat=1),
    on_trace_ready=tensorboard_trace_handler(str(tmp / "log" / "resnet18_b")),
    record_shapes=True,
    with_stack=True,
)
prof.start()
for step, batch_data in enumerate(train_loader):
    prof.step()
    if step >= 1 + 1 + 3:
        break
    train(batch_data)
prof.stop()
"""
# seed 004: the autograd profiler interface, double precision (the slow convolution path)
SNIPPET_AUTOGRAD = """
with profiler.profile() as prof:
    model(inputs)
out.append(prof.key_averages().table(sort_by="cpu_time_total", row_limit=10))
with profiler.profile(record_shapes=True) as prof:
    model(inputs)
out.append(prof.key_averages(group_by_input_shape=True).table(sort_by="cpu_time_total", row_limit=10))
with profiler.profile(profile_memory=True) as prof:
    model(inputs)
out.append(prof.key_averages().table(sort_by="self_cpu_memory_usage", row_limit=10))
"""
# seed 004, example 2 on the CPU: labelled regions, a threshold computed in numpy
SNIPPET_LABELS = """
class MyModule(torch.nn.Module):
    def __init__(self, in_features, out_features, hidden_sizes, bias=True):
        super().__init__()
        sizes = [in_features] + hidden_sizes + [out_features]
        layers = []
        for s in range(len(sizes) - 1):
            layers.append(torch.nn.Linear(sizes[s], sizes[s + 1], bias))
            layers.append(torch.nn.ReLU())
        self.linear = torch.nn.Sequential(*layers)

    def forward(self, input, mask):
        with profiler.record_function("LABEL1: linear pass"):
            out = self.linear(input)
        with profiler.record_function("LABEL2: masking"):
            threshold = out.sum(axis=1).mean().item()
            hi_idx = np.argwhere(mask.cpu().numpy() > threshold)
            hi_idx = torch.from_numpy(hi_idx)
        return out, hi_idx

torch.manual_seed(0)
model = MyModule(64, 8, [32, 32, 32])
input = torch.rand(256, 64)
mask = torch.rand((64, 64, 64))
model(input, mask)
with profiler.profile(with_stack=True) as prof:
    out_, idx = model(input, mask)
out.append(prof.key_averages(group_by_stack_n=1).table(sort_by="self_cpu_time_total", row_limit=5))
"""


def run_snippet(import_line: str, snippet: str, tmp: Path, **names: Any) -> dict[str, Any]:
    """Execute ``import_line + snippet``; returns its namespace (``out`` holds printed tables)."""
    ns: dict[str, Any] = {"torch": torch, "np": np, "tmp": tmp, "out": [], "ready": [], **names}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exec(compile(import_line + textwrap.dedent(snippet), "<seed snippet>", "exec"), ns)
    return ns


@pytest.fixture(scope="module")
def workload() -> dict[str, Any]:
    torch.manual_seed(0)
    model = resnet18(num_classes=10).eval()
    inputs = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        model(inputs)  # warm-up: lazy initialisation happens outside both profiles
    return {"model": model, "inputs": inputs}


BOOKKEEPING = re.compile(r"^(ProfilerStep|profiler::|\[memory\])|\.py\(\d+\)|^<built-in|^nn\.Module:|^<")


def columns(table: str) -> list[str]:
    """The column titles of a torch-style table (its second line)."""
    return re.split(r"\s{2,}", table.splitlines()[1].strip())


def footer(table: str) -> list[str]:
    return [line.split(":")[0] for line in table.splitlines() if line.startswith("Self ")]


def op_counts(prof: Any) -> dict[str, int]:
    return {e.key: e.count for e in prof.key_averages() if not BOOKKEEPING.search(e.key)}


def assert_consistent(prof: Any) -> None:
    """Self <= total per row, never negative, and the footer is the sum of self times."""
    rows = list(prof.key_averages())
    assert rows
    total = sum(r.self_cpu_time_total for r in rows)
    for r in rows:
        assert 0 <= r.self_cpu_time_total <= r.cpu_time_total + 1e-6, r.key
        # a recursive Python frame nests in itself, so only each call is bounded by the total
        assert r.cpu_time_total / r.count <= total + 1e-6, r.key
    shares = prof.key_averages().table(row_limit=-1)
    pct = [float(x) for x in re.findall(r"\s(-?\d+\.\d\d)%\s+\S+\s+\d+\.\d\d%", shares)]
    assert abs(sum(pct) - 100.0) < 0.1 * len(pct) + 0.5


def compare(torch_ns: dict[str, Any], our_ns: dict[str, Any], *, same_counts: bool = True) -> None:
    assert len(torch_ns["out"]) == len(our_ns["out"])
    for theirs, ours in zip(torch_ns["out"], our_ns["out"], strict=True):
        assert columns(ours) == columns(theirs)
        assert footer(ours) == footer(theirs)
    if same_counts:
        assert op_counts(our_ns["prof"]) == op_counts(torch_ns["prof"])
    assert_consistent(our_ns["prof"])


def test_execution_time_tables_match_torch(workload: dict[str, Any], tmp_path: Path) -> None:
    theirs = run_snippet(TORCH_IMPORT, SNIPPET_TIME, tmp_path, **workload)
    ours = run_snippet(OUR_IMPORT, SNIPPET_TIME, tmp_path, **workload)
    compare(theirs, ours)
    table = ours["out"][0]
    assert "model_inference" in table and "aten::conv2d" in table
    counts = op_counts(ours["prof"])
    assert counts["aten::conv2d"] == 20 and counts["aten::batch_norm"] == 20
    assert counts["model_inference"] == 1

    # grouped by input shape: the same groups, shapes written as torch writes them
    def by_shape(prof: Any) -> dict[tuple[str, str], int]:
        return {
            (e.key, str(e.input_shapes)): e.count
            for e in prof.key_averages(group_by_input_shape=True)
            if not BOOKKEEPING.search(e.key)
        }

    assert by_shape(ours["prof"]) == by_shape(theirs["prof"])
    assert (
        by_shape(ours["prof"])[("aten::conv2d", "[[1, 512, 1, 1], [512, 512, 3, 3], [], [], [], [], []]")]
        == 3
    )
    # sorted by total CPU time, the label that holds everything comes first at 100%
    first = table.splitlines()[3]
    assert first.split()[0] == "model_inference" and "100.00%" in first


def test_memory_tables_match_torch(workload: dict[str, Any], tmp_path: Path) -> None:
    theirs = run_snippet(TORCH_IMPORT, SNIPPET_MEMORY, tmp_path, **workload)
    ours = run_snippet(OUR_IMPORT, SNIPPET_MEMORY, tmp_path, **workload)
    compare(theirs, ours)
    assert "CPU Mem" in columns(ours["out"][0]) and "Self CPU Mem" in columns(ours["out"][0])
    # same allocations seen: the memory each op allocated is identical to torch's
    mine = {(e.key): (e.cpu_memory_usage, e.self_cpu_memory_usage) for e in ours["prof"].key_averages()}
    torch_mem = {e.key: (e.cpu_memory_usage, e.self_cpu_memory_usage) for e in theirs["prof"].key_averages()}
    assert mine["aten::empty"] == torch_mem["aten::empty"]
    assert mine["aten::conv2d"] == torch_mem["aten::conv2d"]
    assert mine["aten::conv2d"][0] > 0


def test_export_and_stacks(workload: dict[str, Any], tmp_path: Path) -> None:
    (tmp_path / "t").mkdir()
    (tmp_path / "o").mkdir()
    run_snippet(TORCH_IMPORT, SNIPPET_EXPORT, tmp_path / "t", **workload)
    ours = run_snippet(OUR_IMPORT, SNIPPET_EXPORT, tmp_path / "o", **workload)
    from torchscope.trace.reader import read_chrome

    mine, torch_trace = read_chrome(tmp_path / "o" / "trace.json"), read_chrome(tmp_path / "t" / "trace.json")
    assert mine.ops.height == torch_trace.ops.height
    # with stacks we print a Source Location column (torch 2.13 leaves op stacks empty)
    table = ours["out"][0]
    assert "Source Location" in columns(table)
    assert_consistent(ours["prof"])
    assert all(r.self_cpu_time_total >= 0 for r in ours["prof"].key_averages())


def test_trace_handler_cycles_match_torch(workload: dict[str, Any], tmp_path: Path) -> None:
    (tmp_path / "t").mkdir()
    (tmp_path / "o").mkdir()
    theirs = run_snippet(TORCH_IMPORT, SNIPPET_HANDLER, tmp_path / "t", **workload)
    ours = run_snippet(OUR_IMPORT, SNIPPET_HANDLER, tmp_path / "o", **workload)
    assert ours["ready"] == theirs["ready"] == [4, 8]
    assert sorted(p.name for p in (tmp_path / "o").iterdir()) == ["trace_4.json", "trace_8.json"]
    for theirs_table, ours_table in zip(theirs["out"], ours["out"], strict=True):
        assert columns(ours_table) == columns(theirs_table)
    # each cycle holds two steps: two forward passes
    assert "ProfilerStep*" in ours["out"][0]
    assert op_counts(ours["p"])["aten::conv2d"] == 40


def test_tensorboard_recipe_writes_what_hta_and_tensorboard_read(
    workload: dict[str, Any], tmp_path: Path
) -> None:
    model, inputs = workload["model"], workload["inputs"]
    train_loader = [inputs] * 8

    def train(batch: torch.Tensor) -> None:
        model(batch)

    ours = run_snippet(OUR_IMPORT, SNIPPET_TENSORBOARD, tmp_path, train_loader=train_loader, train=train)
    for run in ("resnet18", "resnet18_b"):
        files = list((tmp_path / "log" / run).iterdir())
        assert len(files) == 1
        assert re.fullmatch(r".+_\d+\.\d+\.pt\.trace\.json", files[0].name)
    from hta.trace_analysis import TraceAnalysis

    analyzer = TraceAnalysis(trace_dir=str(tmp_path / "log" / "resnet18"))
    frame = analyzer.t.get_trace(0)
    symbols = analyzer.t.symbol_table.get_sym_table()
    names = {symbols[i] for i in frame["name"].unique()}
    assert {"ProfilerStep#2", "ProfilerStep#3", "aten::conv2d", "aten::batch_norm"} <= names
    import json

    events = json.loads(files[0].read_text())["traceEvents"]
    steps = sorted(e["name"] for e in events if e.get("name", "").startswith("ProfilerStep#"))
    assert steps == ["ProfilerStep#2", "ProfilerStep#3", "ProfilerStep#4"]
    # the TensorBoard plugin parses the file and finds the same three steps
    import logging

    from torch_tb_profiler.profiler.data import RunProfileData

    logging.disable(logging.WARNING)
    parsed = RunProfileData.parse("worker0", "span", str(files[0]), str(tmp_path / "tbcache"))
    run = parsed[0] if isinstance(parsed, tuple) else parsed
    run.process()
    logging.disable(logging.NOTSET)
    assert run.steps_names == ["2", "3", "4"]
    assert ours["prof"].step_num == 6


def test_autograd_profiler_interface(workload: dict[str, Any], tmp_path: Path) -> None:
    model = resnet18(num_classes=10).double().eval()
    inputs = workload["inputs"].double()
    with torch.no_grad():
        model(inputs)
    theirs = run_snippet(TORCH_AUTOGRAD_IMPORT, SNIPPET_AUTOGRAD, tmp_path, model=model, inputs=inputs)
    ours = run_snippet(OUR_AUTOGRAD_IMPORT, SNIPPET_AUTOGRAD, tmp_path, model=model, inputs=inputs)
    compare(theirs, ours)
    # double precision takes the slow convolution path, as the tutorial explains
    counts = op_counts(ours["prof"])
    assert any(k.startswith("aten::") and "conv" in k and k != "aten::conv2d" for k in counts)


def test_labelled_regions_with_stack(tmp_path: Path) -> None:
    theirs = run_snippet(TORCH_AUTOGRAD_IMPORT, SNIPPET_LABELS, tmp_path)
    ours = run_snippet(OUR_AUTOGRAD_IMPORT, SNIPPET_LABELS, tmp_path)
    assert op_counts(ours["prof"]) == op_counts(theirs["prof"])
    rows = {r.key: r for r in ours["prof"].key_averages()}
    assert rows["LABEL1: linear pass"].count == 1 and rows["LABEL2: masking"].count == 1
    assert rows["aten::linear"].count == 4
    assert_consistent(ours["prof"])
    assert "Source Location" in columns(ours["out"][0])


def test_the_same_events_give_torchs_table_exactly(workload: dict[str, Any], tmp_path: Path) -> None:
    """Differential: torch's own trace, read back by us, prints torch's table (to the last digit).

    Times may differ by one unit in the last printed digit: torch subtracts float microseconds,
    we subtract integer nanoseconds.
    """
    import torch.profiler as tp

    from torchscope.compat import key_averages
    from torchscope.trace.reader import read_chrome

    with (
        tp.profile(activities=[tp.ProfilerActivity.CPU], record_shapes=True, profile_memory=True) as prof,
        tp.record_function("model_inference"),
    ):
        workload["model"](workload["inputs"])
    prof.export_chrome_trace(str(tmp_path / "torch.json"))
    ours = key_averages(read_chrome(tmp_path / "torch.json"))
    theirs = prof.key_averages()
    for sort_by in ("cpu_time_total", "self_cpu_time_total", "cpu_memory_usage", "count"):
        assert_same_table(
            ours.table(sort_by=sort_by, row_limit=15), theirs.table(sort_by=sort_by, row_limit=15)
        )
    ours_shapes = key_averages(read_chrome(tmp_path / "torch.json"), group_by_input_shape=True)
    theirs_shapes = prof.key_averages(group_by_input_shape=True)
    assert_same_table(
        ours_shapes.table(sort_by="cpu_time_total", row_limit=20),
        theirs_shapes.table(sort_by="cpu_time_total", row_limit=20),
    )


NUMBER = re.compile(r"^(-?\d+\.\d+)(%|us|ms|s)$")


def assert_same_table(ours: str, theirs: str) -> None:
    """Same lines, widths, names, units and counts; printed times equal up to the last digit."""
    assert len(ours.splitlines()) == len(theirs.splitlines())
    for a, b in zip(ours.splitlines(), theirs.splitlines(), strict=True):
        assert len(a) == len(b), (a, b)
        for x, y in zip(re.split(r"\s{2,}|: ", a.strip()), re.split(r"\s{2,}|: ", b.strip()), strict=True):
            mx, my = NUMBER.match(x), NUMBER.match(y)
            if mx and my and mx.group(2) == my.group(2):
                assert abs(float(mx.group(1)) - float(my.group(1))) <= 0.0011 + 1e-9 * abs(
                    float(my.group(1))
                ), (a, b)
            else:
                assert x == y, (a, b)
