"""The drop-in ``profile``: results, exports, misuse, crashes, and flat memory on long runs."""

from __future__ import annotations

import gzip
import json
import os
import re
import threading
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import torchscope
from torchscope import ProfilerActivity, profile, record_function, schedule
from torchscope.capture.profiler import TraceReadyError
from torchscope.compat import key_averages
from torchscope.errors import ProfilerStateError
from torchscope.models import mlp
from torchscope.trace.reader import read_chrome


@pytest.fixture(scope="module")
def net() -> Any:
    torch.manual_seed(0)
    model = mlp((16, 32, 8))
    x = torch.randn(4, 16)
    model(x)
    return lambda: model(x)


def test_public_names_resolve_lazily() -> None:
    assert torchscope.profile is profile
    assert torchscope.record_function is torch.autograd.profiler.record_function
    assert ProfilerActivity.CPU in torchscope.supported_activities()
    assert torchscope.ProfilerAction.RECORD_AND_SAVE.value == 3


def test_rows_have_torchs_attributes_and_dataframes(net: Any) -> None:
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof, record_function("forward"):
        net()
    rows = {r.key: r for r in prof.key_averages()}
    assert rows["forward"].count == 1
    assert rows["aten::linear"].count == 2 and rows["aten::relu"].count == 1
    linear = rows["aten::linear"]
    assert 0 < linear.self_cpu_time_total <= linear.cpu_time_total
    assert linear.cpu_time == pytest.approx(linear.cpu_time_total / 2)
    assert rows["forward"].cpu_time_total >= linear.cpu_time_total
    df = prof.key_averages().to_polars()
    assert df.filter(df["key"] == "aten::linear")["count"].item() == 2
    pdf = prof.key_averages().to_pandas()
    assert set(pdf["key"]) == set(df["key"].to_list())
    # per-event view: children and shapes
    events = prof.events()
    fwd = next(e for e in events if e.name == "forward")
    assert {c.name for c in fwd.cpu_children} >= {"aten::linear", "aten::relu"}
    lin = next(e for e in events if e.name == "aten::linear")
    assert lin.input_shapes[0] == [4, 16]
    assert lin.cpu_parent is fwd


@pytest.mark.parametrize(
    "sort_by",
    [
        "cpu_time_total",
        "self_cpu_time_total",
        "cuda_time_total",
        "self_cuda_time_total",
        "device_time_total",
        "xpu_time_total",
        "cpu_memory_usage",
        "self_cpu_memory_usage",
        "cuda_memory_usage",
        "count",
        "cpu_time",
        "cuda_time",
    ],
)
def test_every_documented_sort_key(net: Any, sort_by: str) -> None:
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        net()
    table = prof.key_averages().table(sort_by=sort_by, row_limit=5)
    assert table.splitlines()[-1].startswith("Self CPU time total: ")
    assert len(table.splitlines()) == 5 + 5


def test_unknown_sort_key_is_named(net: Any) -> None:
    with profile() as prof:
        net()
    with pytest.raises(AttributeError, match="cannot sort a profiler table by 'speed'"):
        prof.key_averages().table(sort_by="speed")


def test_table_options(net: Any) -> None:
    with profile() as prof, record_function("outer"):
        net()
    ka = prof.key_averages()
    top = ka.table(top_level_events_only=True, header="my header")
    lines = top.splitlines()
    assert lines[1] == "my header" and "This report only display top-level ops statistics" in lines
    assert "outer" in top and "aten::addmm" not in top
    assert re.search(r"Self CPU time total: \d+\.\d{3}ms\n$", ka.table(time_unit="ms"))
    assert not re.search(r"\d\.\d{3}(us|ms)\b", ka.table(time_unit="s"))


def test_chrome_trace_export_plain_and_gzip(net: Any, tmp_path: Path) -> None:
    with profile() as prof:
        with record_function("step"):
            net()
        prof.add_metadata("run", "nightly")
        prof.add_metadata_json("config", '{"lr": 0.1}')
    prof.export_chrome_trace(str(tmp_path / "t.json"))
    prof.export_chrome_trace(str(tmp_path / "t.json.gz"))
    doc = json.loads((tmp_path / "t.json").read_text())
    assert doc["run"] == "nightly" and doc["config"] == {"lr": 0.1}
    assert doc["traceName"] == str(tmp_path / "t.json")  # each file names itself, not Kineto's temporary
    with gzip.open(tmp_path / "t.json.gz") as f:
        assert json.loads(f.read()) == {**doc, "traceName": str(tmp_path / "t.json.gz")}
    names = {e["name"] for e in doc["traceEvents"] if e.get("cat") == "cpu_op"}
    assert {"aten::linear", "aten::addmm", "aten::relu"} <= names
    # a file we wrote reads back into the same table
    loaded = key_averages(read_chrome(tmp_path / "t.json.gz"))
    assert {r.key: r.count for r in loaded} == {r.key: r.count for r in prof.key_averages()}


def test_export_stacks_is_collapsed_format(net: Any, tmp_path: Path) -> None:
    with profile(with_stack=True) as prof:
        net()
    prof.export_stacks(str(tmp_path / "stacks.txt"))
    lines = (tmp_path / "stacks.txt").read_text().splitlines()
    assert lines and all(re.fullmatch(r"\S+ \d+", line) for line in lines)
    assert any(line.split(" ")[0].endswith(";aten::addmm") for line in lines)
    with pytest.raises(ValueError, match="metric should be one of"):
        prof.export_stacks(str(tmp_path / "x.txt"), metric="wall")


def test_exception_in_block_stops_cleanly_and_keeps_events(net: Any) -> None:
    prof = profile()
    with pytest.raises(ZeroDivisionError), prof:
        with record_function("before_crash"):
            net()
        1 / 0  # noqa: B018
    assert "before_crash" in {r.key for r in prof.key_averages()}
    with profile() as again:  # nothing left running
        net()
    assert again.key_averages()


def test_misuse_gets_clear_messages(net: Any) -> None:
    prof = profile()
    with pytest.raises(ProfilerStateError, match=r"step\(\) called before start\(\)"):
        prof.step()
    with pytest.raises(ProfilerStateError, match="without a running profiler"):
        prof.stop()
    with pytest.raises(ProfilerStateError, match=r"key_averages\(\): no profiling cycle has finished"):
        prof.key_averages()
    with pytest.raises(AssertionError):  # what torch raises there: ``except AssertionError`` still works
        prof.key_averages()
    prof.start()
    # once started, torch gives empty results until a cycle finishes (it asserts only before)
    assert (len(prof.key_averages()), len(prof.events())) == (0, 0)
    with pytest.raises(ProfilerStateError, match="called twice"):
        prof.start()
    net()
    prof.stop()
    with pytest.raises(ProfilerStateError, match="stopped twice"):
        prof.stop()
    assert prof.key_averages()


def test_a_nested_profiler_records_nothing_with_a_warning(net: Any) -> None:
    """Refusing it raised out of a framework's training step (a user's profile inside
    Lightning's profiler="pytorch" ended fit()); the outer one keeps every event."""
    with profile() as outer:
        with pytest.warns(UserWarning, match="another torchscope profiler is already recording"), profile() as inner:
            net()
        net()
    assert len(inner.key_averages()) == 0
    assert sum(r.count for r in outer.key_averages() if r.key == "aten::linear") == 2 * 2  # both calls, 2 layers
    busy = "a torch profiler is already running"
    with torch.profiler.profile() as theirs, pytest.warns(UserWarning, match=busy), profile() as ours:
        net()
    assert len(ours.key_averages()) == 0 and "aten::linear" in {e.key for e in theirs.key_averages()}


_TORCH_INSIDE_OURS = """
import sys, warnings, torch, torch.profiler as tp, torchscope
x = torch.randn(16, 16)
where = int(sys.argv[1])  # -1: around the whole block; else the step (2-step cycles, 1 warm-up)
sched = None if where < 0 else torchscope.schedule(wait=1, warmup=1, active=2, repeat=1)
with warnings.catch_warnings(record=True) as seen:
    warnings.simplefilter("always")
    with torchscope.profile(schedule=sched) as ours:
        for i in range(1 if where < 0 else 5):
            if i == where or where < 0:
                with tp.profile() as theirs:
                    x @ x
                assert "aten::mm" in {e.key for e in theirs.key_averages()}
            x @ x
            ours.step()
print(sum("another profiler" in str(w.message) for w in seen), len(ours.key_averages()))
"""


@pytest.mark.parametrize(("where", "output"), [(-1, "1 0"), (1, "1 0"), (2, "1 0"), (0, "0 4")])
def test_torch_profiler_inside_ours_leaves_an_empty_cycle_not_a_crash(
    tmp_path: Path, where: int, output: str
) -> None:
    """A torch.profiler.profile inside ours ends Kineto's one session: on exit (-1), during our
    warm-up (step 1) or while we record (step 2), the process segfaulted at our stop. Now that
    cycle is empty with a warning; one in the wait step (0), before ours prepares Kineto,
    disturbs nothing (the cycle keeps its 4 keys: ProfilerStep*, matmul, mm, resolve_conj)."""
    import subprocess
    import sys

    script = tmp_path / "nested.py"
    script.write_text(_TORCH_INSIDE_OURS)
    done = subprocess.run(
        [sys.executable, str(script), str(where)], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n")[-2] == output


def test_raising_on_trace_ready_leaves_a_consistent_session(net: Any) -> None:
    calls: list[int] = []
    rows: list[int] = []

    def handler(p: Any) -> None:
        calls.append(p.step_num)
        rows.append(sum(r.count for r in p.key_averages() if r.key == "aten::addmm"))
        if len(calls) == 1:
            raise OSError("disk full")

    prof = profile(schedule=schedule(wait=0, warmup=1, active=1), on_trace_ready=handler)
    prof.start()
    net()
    prof.step()
    net()
    with pytest.raises(TraceReadyError, match="disk full"):
        prof.step()
    for _ in range(2):  # the next cycle works
        net()
        prof.step()
    prof.stop()
    assert calls == [2, 4]
    assert rows == [2, 2]  # each cycle recorded its one active step


def test_use_cuda_is_a_deprecated_alias() -> None:
    with pytest.warns(FutureWarning, match="use_cuda"):
        profile(use_cuda=False)


def test_backend_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    assert profile().backend == "kineto"
    monkeypatch.setenv("TORCHSCOPE_BACKEND", "portable")
    assert profile().backend == "portable"
    assert profile(backend="kineto").backend == "kineto"
    with pytest.raises(ValueError, match="backend must be one of"):
        profile(backend="cupti")


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_an_absent_device_is_left_to_kineto_like_torch(net: Any) -> None:
    # CUDA is requested but this machine has none: Kineto warns and profiles the host
    activities = [ProfilerActivity.CPU, ProfilerActivity.CUDA]
    with pytest.warns(UserWarning, match="CUDA is not available"), profile(activities=activities) as prof:
        net()
    assert prof.backend == "kineto"
    assert "aten::addmm" in {r.key for r in prof.key_averages()}


def test_portable_backend_records_the_same_ops(net: Any) -> None:
    with profile(backend="portable", record_shapes=True) as prof, record_function("fwd"):
        net()
    counts = {r.key: r.count for r in prof.key_averages()}
    assert counts.get("aten::addmm") == 2


def test_long_scheduled_run_keeps_only_the_current_cycle(net: Any) -> None:
    """Memory stays flat: each cycle replaces the previous one (unless acc_events)."""

    def rss_mb() -> float:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) / 1024 for line in f if line.startswith("VmRSS:"))

    sizes: list[float] = []
    held: list[int] = []

    def handler(p: Any) -> None:
        p.key_averages().table(row_limit=3)
        held.append(len(p._cycles))
        sizes.append(rss_mb())

    prof = profile(schedule=schedule(wait=0, warmup=1, active=2), on_trace_ready=handler)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with prof:
            for _ in range(240):
                for _ in range(3):
                    net()
                prof.step()
    assert len(sizes) == 80
    assert set(held) == {1}
    assert len(os.listdir(prof._scratch.dir)) == 1  # one saved cycle on disk
    # after the first few cycles warm the allocator, RSS does not climb with the cycles
    assert sizes[-1] - sizes[9] < 25


def _one_step_cycles(net: Any, steps: int) -> profile:
    """A run of ``steps`` steps, each other one recorded, every cycle kept (``acc_events``)."""
    prof = profile(schedule=schedule(wait=0, warmup=1, active=1), acc_events=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with prof:
            for _ in range(steps):
                net()
                prof.step()
    return prof


def test_acc_events_keeps_every_cycle(net: Any) -> None:
    prof = _one_step_cycles(net, 6)
    # three recorded cycles, plus the warm-up that stop() closes (empty, as with torch)
    assert [t.ops.height > 0 for t in prof.traces()] == [True, True, True, False]
    assert {r.key: r.count for r in prof.key_averages()}["aten::addmm"] == 6


def test_kinetos_results_outlive_the_read_until_torch_would_free_them(net: Any) -> None:
    """After stop() a cycle keeps Kineto's results through the read, as torch keeps its own:
    their destructor holds the GIL (0.5 s for 161k events with shapes), and run beside the
    read it made the read wait for it. They go at the next cycle's prepare, with
    ``free_kineto_results()``, or with the profile, so one cycle's at most are held. No thread
    is left behind."""
    prof = _one_step_cycles(net, 4)
    held = [c._kineto is not None for c in prof._cycles]
    assert held == [False, False, True]  # two cycles ended in the run, the last one by stop()
    rows = {r.key: r.count for r in prof.key_averages()}
    assert rows["aten::addmm"] == 4
    assert prof._cycles[-1]._kineto is not None
    prof.free_kineto_results()
    assert prof._cycles[-1]._kineto is None
    assert {r.key: r.count for r in prof.key_averages()}["aten::addmm"] == 4  # the Trace stays
    with prof:  # a new start prepares a cycle: the last one's results would go there
        net()
    assert not any(t.name == "torchscope-release" for t in threading.enumerate())


def test_the_read_needs_no_thread(net: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """At interpreter shutdown (an atexit handler reading the profile) threads cannot start:
    the read still succeeds."""
    with profile() as prof:
        net()

    def refuse(self: threading.Thread) -> None:
        raise RuntimeError("can't create new thread at interpreter shutdown")

    monkeypatch.setattr(threading.Thread, "start", refuse)
    assert {r.key: r.count for r in prof.key_averages()}["aten::addmm"] == 2
    prof.free_kineto_results()
    assert prof._cycles[-1]._kineto is None


def test_loaded_cuda_trace_gets_cuda_columns(traces_dir: Path) -> None:
    trace = read_chrome(traces_dir / "cuda" / "alexnet_benchmark.json.gz")
    ka = key_averages(trace)
    table = ka.table(sort_by="self_cuda_time_total", row_limit=5)
    header = re.split(r"\s{2,}", table.splitlines()[1].strip())
    assert header[6:10] == ["Self CUDA", "Self CUDA %", "CUDA total", "CUDA time avg"]
    assert table.splitlines()[-1].startswith("Self CUDA time total: ")
    # every kernel, memcpy and memset is counted once, on its own row
    device = trace.events.filter(trace.events["kind"].cast(str).is_in(["kernel", "memcpy", "memset"]))
    rows = [r for r in ka if r.is_device and not r.is_user_annotation]
    assert sum(r.self_device_time_total for r in rows) == pytest.approx(device["dur_ns"].sum() / 1000)
    # and the op that launched it owns it: the HtoD copies belong to aten::copy_
    copy = next(r for r in ka if r.key == "aten::copy_")
    memcpy = device.filter(device["name"].cast(str).str.starts_with("Memcpy"))["dur_ns"].sum() / 1000
    assert copy.device_time_total == pytest.approx(memcpy)


def _flop_workload() -> None:
    """Every op torch's with_flops counts, in shapes and arguments that exercise its formulas."""
    torch.manual_seed(0)
    layer = torch.nn.Linear(64, 32)
    x = torch.randn(8, 64)
    layer(x)
    torch.mm(x, x.t())
    torch.bmm(torch.randn(2, 3, 4), torch.randn(2, 4, 5))
    torch.baddbmm(torch.randn(2, 3, 5), torch.randn(2, 3, 4), torch.randn(2, 4, 5))
    # output size from stride, padding and dilation (Kineto's "Concrete Inputs"); groups
    F.conv2d(
        torch.randn(2, 4, 17, 15), torch.randn(6, 4, 3, 5), stride=(2, 1), padding=(1, 2), dilation=(1, 2)
    )
    F.conv2d(torch.randn(2, 4, 16, 16), torch.randn(6, 2, 3, 3), groups=2)
    # torch counts the first input's elements, whatever the broadcast
    torch.randn(3, 1, 5) * torch.randn(4, 5)
    torch.randn(4, 5) + torch.randn(3, 1, 5)


def test_flops_match_torchs() -> None:
    import torch.profiler as tp

    results, tables, headers = [], [], []
    for prof_cls in (tp.profile, profile):
        with prof_cls(with_flops=True) as prof:
            _flop_workload()
        results.append({r.key: r.flops for r in prof.key_averages() if r.flops})
        table = prof.key_averages().table(sort_by="cpu_time_total", row_limit=-1)
        headers.append(table.splitlines()[1].split())
        # the FLOPs column (the last) of each counted op's row, as printed
        tables.append({ln.split()[0]: ln.split()[-1] for ln in table.splitlines() if "aten::" in ln})
    assert headers[0] == headers[1] and headers[1][-2:] == ["Total", "FLOPs"]  # unit from the smallest
    assert results[0] == results[1]
    conv = 2 * 2 * 6 * 9 * 11 * 4 * 3 * 5 + 2 * 2 * 6 * 14 * 14 * 2 * 3 * 3
    assert results[1] == {
        "aten::addmm": 2 * 8 * 64 * 32,
        "aten::mm": 2 * 8 * 64 * 8,
        "aten::bmm": 2 * 2 * 3 * 4 * 5,
        "aten::baddbmm": 2 * 2 * 3 * 4 * 5,
        "aten::conv2d": conv,
        "aten::mul": 15,  # [3, 1, 5] * [4, 5]: the first input's 15 elements
        "aten::add": 20,
    }
    counted = (
        "aten::addmm",
        "aten::mm",
        "aten::bmm",
        "aten::baddbmm",
        "aten::conv2d",
        "aten::mul",
        "aten::add",
    )
    assert {k: tables[1][k] for k in counted} == {k: tables[0][k] for k in counted}


def test_input_shapes_and_totals_look_like_torchs(net: Any) -> None:
    with profile(record_shapes=True) as prof:
        net()
    addmm = [r.input_shapes for r in prof.key_averages(group_by_input_shape=True) if r.key == "aten::addmm"]
    assert addmm == [[[32], [4, 16], [16, 32], [], []], [[8], [4, 32], [32, 8], [], []]]
    assert all(r.input_shapes == "" for r in prof.key_averages())
    total = prof.key_averages().total_average()
    assert total.key == "Total"
    assert total.self_cpu_time_total == pytest.approx(prof.self_cpu_time_total)
    assert total.count == sum(r.count for r in prof.key_averages())


def test_portable_document_carries_metadata(net: Any, tmp_path: Path) -> None:
    with profile(backend="portable") as prof:
        net()
        prof.add_metadata("run", "nightly")
    prof.export_chrome_trace(str(tmp_path / "p.json"))
    doc = json.loads((tmp_path / "p.json").read_text())
    assert doc["run"] == "nightly"
    assert any(e.get("name") == "aten::addmm" for e in doc["traceEvents"])


def test_record_function_as_decorator(net: Any) -> None:
    @record_function("decorated_step")
    def step() -> None:
        net()

    with profile() as prof:
        step()
        step()
    rows = {r.key: r for r in prof.key_averages()}
    assert rows["decorated_step"].count == 2
    assert rows["decorated_step"].cpu_time_total >= rows["aten::linear"].cpu_time_total


def test_device_annotations_are_not_self_cuda_time(traces_dir: Path) -> None:
    """nccl_rank0_of_2's gpu_user_annotation ranges (DistributedDataParallel.forward: 292.764 ms
    around the kernels of 3 steps) are not device work: torch 2.13 leaves them out of the total but
    kept them as Self CUDA, 177 % of it. Their self time is 0 here; their length is CUDA total."""
    ka = key_averages(read_chrome(traces_dir / "cuda" / "nccl_rank0_of_2.json.gz"))
    ddp = next(r for r in ka if r.key == "DistributedDataParallel.forward" and r.is_device)
    assert ddp.is_user_annotation and ddp.self_device_time_total == 0
    assert ddp.device_time_total == pytest.approx(292764, abs=1)
    table = ka.table(sort_by="self_cuda_time_total", row_limit=-1)
    total = float(table.splitlines()[-1].split(": ")[1].removesuffix("ms"))
    assert total == pytest.approx(165.2, abs=0.1)
    shares = [float(m) for m in re.findall(r"(\d+\.\d+)%", table)]
    assert shares and max(shares) <= 100.0


def test_exporting_a_cycle_copies_kinetos_file_without_reading_it(net: Any, tmp_path: Path) -> None:
    """A tensorboard_trace_handler exports every cycle as it ends: valid JSON with no renamed
    event is Kineto's file byte for byte but for its last key, the path it names as its own
    (Kineto's temporary), and the cycle is not read for it (that read, and a search for raw
    strings in Python, made each cycle end slower than torch's)."""
    prof = profile()
    prof.start()
    net()
    prof.stop()
    cycle = prof._cycles[-1]
    assert cycle.path is not None
    saved = cycle.path.read_bytes()
    prof.export_chrome_trace(str(tmp_path / "t.json"))
    prof.export_chrome_trace(str(tmp_path / "t.json.gz"))
    assert cycle._trace is None
    def named(path: Path) -> bytes:
        return saved.replace(json.dumps(str(cycle.path)).encode(), json.dumps(str(path)).encode())

    assert (tmp_path / "t.json").read_bytes() == named(tmp_path / "t.json") != saved
    assert gzip.decompress((tmp_path / "t.json.gz").read_bytes()) == named(tmp_path / "t.json.gz")
    assert "aten::linear" in {r.key for r in prof.key_averages()}  # the cycle reads afterwards


def test_a_cycle_kineto_could_not_save_is_lost_with_a_warning_and_the_run_goes_on(
    net: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kineto's writer fails without a word when the scratch disk is full: reading the missing
    file raised a raw FileNotFoundError (live ``key_averages``) or a TraceReadyError out of
    ``step()``. Saving into a directory that does not exist fails the same way, without root."""
    from torchscope.capture import kineto

    nowhere = tmp_path / "gone" / "cycle.pt.trace.json"
    monkeypatch.setattr(kineto._Scratch, "next_path", lambda self: nowhere)
    logs = tmp_path / "logs"
    prof = profile(
        schedule=schedule(wait=0, warmup=1, active=1, repeat=2),
        on_trace_ready=torchscope.tensorboard_trace_handler(str(logs)),
    )
    with pytest.warns(UserWarning, match=r"could not save this cycle's trace in .*set TMPDIR"), prof:
        for _ in range(4):
            net()
            prof.step()
    assert prof.step_num == 4
    assert list(prof.key_averages()) == []
    assert not logs.exists() or not any(logs.iterdir())  # no empty trace written for the lost cycles
    with pytest.raises(torchscope.TorchscopeError, match="not written: torchscope: could not save"):
        prof.export_chrome_trace(str(tmp_path / "x.json"))


def test_a_cycle_kineto_cut_short_leaves_no_temporary_behind() -> None:
    """On a full disk Kineto's writer stops in its temporary (PATH.tmp, renamed when done) and
    says nothing: that file kept the disk full, so every later cycle of the run was lost too."""
    from torchscope.capture.kineto import _Scratch

    class CutShort:
        def save(self, path: str) -> None:
            Path(path + ".tmp").write_text('{"traceEvents": [{"ph": "X", "na')  # no room for the rest

    scratch = _Scratch()
    said = scratch.save(CutShort())
    assert isinstance(said, str) and said.startswith("torchscope: could not save this cycle's trace")
    assert list(scratch.dir.iterdir()) == []


def test_a_full_log_directory_loses_the_cycles_file_not_the_run(
    net: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """torch's handler logs "Failed to write" and goes on; ours raised out of ``step()`` and
    ended the training on a full disk."""
    import errno

    from torchscope.capture import handlers

    def full(path: Any, write: Any) -> Any:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(handlers, "write_atomically", full)
    prof = profile(
        schedule=schedule(wait=0, warmup=1, active=1, repeat=2),
        on_trace_ready=torchscope.tensorboard_trace_handler(str(tmp_path)),
    )
    lost = r"could not write .*No space left on device; this cycle's trace is lost"
    with pytest.warns(UserWarning, match=lost), prof:
        for _ in range(4):
            net()
            prof.step()
    assert prof.step_num == 4
    assert "aten::linear" in {r.key for r in prof.key_averages()}  # the cycle itself is kept


def test_a_trace_recorded_with_flops_keeps_them_when_loaded(net: Any, tmp_path: Path) -> None:
    """Kineto writes no FLOPs into the file, only ``with_flops: 1`` in its header; a loaded
    trace's table had no FLOPs column and sorted ``flops`` by zeros. They are counted from the
    recorded shapes, as the live table counts them."""
    with profile(with_flops=True) as prof:
        net()
    prof.export_chrome_trace(str(tmp_path / "t.json"))
    live = {r.key: r.flops for r in prof.key_averages() if r.flops}
    loaded = key_averages(torchscope.load(tmp_path / "t.json"))
    assert live and {r.key: r.flops for r in loaded if r.flops} == live
    assert loaded.table(sort_by="flops", row_limit=5) == prof.key_averages().table(sort_by="flops", row_limit=5)
    assert "FLOPs" in loaded.table(row_limit=1)


def test_a_ctrl_c_while_a_cycle_stops_comes_after_the_cycle_is_kept(net: Any) -> None:
    """A Ctrl-C between Kineto's disable and our save lost the cycle and left torch's
    "profiler enabled" flag set with Kineto off: every later profile in the process (a notebook
    kernel) was refused. It is held back until the cycle is kept, then raised as it was."""
    import signal

    from torchscope.capture.kineto import ctrl_c_deferred

    reached = []
    with pytest.raises(KeyboardInterrupt), ctrl_c_deferred():
        os.kill(os.getpid(), signal.SIGINT)
        reached.append("the rest of the block ran")
    assert reached == ["the rest of the block ran"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler

    prof = profile()
    prof.start()
    net()
    stop = prof._session.stop

    def interrupted_stop() -> Any:
        os.kill(os.getpid(), signal.SIGINT)  # arrives mid-stop
        return stop()

    prof._session.stop = interrupted_stop
    with pytest.raises(KeyboardInterrupt):
        prof.stop()
    assert "aten::linear" in {r.key for r in prof.key_averages()}  # the cycle was kept
    with profile() as again:  # and the process can profile again
        net()
    assert "aten::linear" in {r.key for r in again.key_averages()}


def test_a_stale_torch_profiler_flag_does_not_refuse_every_later_profile(net: Any) -> None:
    """torch's Python flag left set by an interrupted stop while Kineto is off is not a running
    profiler (it refused every later profile with "a torch profiler is already running")."""
    torch.autograd.profiler._set_is_profiler_enabled(True)
    try:
        with profile() as prof:
            net()
    finally:
        torch.autograd.profiler._set_is_profiler_enabled(False)
    assert "aten::linear" in {r.key for r in prof.key_averages()}


def test_a_cycle_scanned_while_kineto_saved_it_reads_as_its_file(
    net: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kineto's save holds the GIL for ~0.8 s per 142 MB with the seeds' three options, and the
    read after stop() waited for a scan of the whole file on top. The file's events are now
    scanned while it is written; the cycle's Trace must be the one its file gives."""
    from torchscope.capture.kineto import LIVE_SOURCE
    from torchscope.trace import reader

    monkeypatch.setattr(reader, "CHUNK_BYTES", 64 * 1024)  # a few MB of cycle: dozens of pieces
    taken: list[Any] = []
    followed_batches = reader._followed_batches

    def spy(data: Any, followed: Any, *rest: Any) -> Any:
        got = followed_batches(data, followed, *rest)
        taken.append((followed, got is not None))
        return got

    monkeypatch.setattr(reader, "_followed_batches", spy)
    options = {"record_shapes": True, "profile_memory": True, "with_stack": True}
    with profile(activities=[ProfilerActivity.CPU], **options) as prof:
        for _ in range(20):
            net().sum().backward()
    cycle = prof._cycles[-1]
    assert cycle.path is not None and cycle._follower is not None
    text = cycle.path.read_bytes()
    assert cycle.trace.equals(reader.read_chrome_document(text, LIVE_SOURCE))
    assert cycle._follower is None  # handed to the read, not kept beside the Trace
    ((lo, pieces, rest), used) = taken[-1]
    assert used and len(pieces) >= len(text) // (2 * 64 * 1024) and text[rest : rest + 1] == b"{"
    rows = {r.key: r.count for r in prof.key_averages()}
    assert rows["aten::linear"] == 40 and rows["aten::relu"] == 20


def test_what_was_scanned_of_a_cycle_nobody_read_goes_when_the_run_goes_on(
    net: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from torchscope.trace import reader

    monkeypatch.setattr(reader, "CHUNK_BYTES", 64 * 1024)
    seen = []

    def handler(p: Any) -> None:
        seen.append((p._cycles[-1], p._cycles[-1]._follower is not None))

    sched = schedule(wait=0, warmup=1, active=3, repeat=2)
    memory_timeline = {"record_shapes": True, "profile_memory": True, "with_stack": True}  # results kept
    with profile(schedule=sched, on_trace_ready=handler, **memory_timeline) as prof:
        for _ in range(8):
            for _ in range(30):  # ~1 MB a cycle: over 1.5 pieces
                net()
            prof.step()
    assert [scanned for _, scanned in seen] == [True, True]  # the handler could have read them
    first, last = seen[0][0], seen[1][0]
    assert first._follower is None  # the run went on: its pieces are not held for a read
    assert last.trace.events.filter(last.trace.events["name"] == "aten::linear").height == 180
    with profile(record_shapes=True) as prof:  # results freed as the cycle is read: no follower
        for _ in range(100):
            net()
    assert prof._cycles[-1]._follower is None


def test_a_profile_dropped_while_recording_lets_the_next_one_record(net: Any) -> None:
    """A notebook cell that failed after ``start()`` left an unreachable profile recording: every
    later profile in the process warned "another torchscope profiler is already recording" and
    recorded nothing, while Kineto kept collecting into memory nobody could free (torch's own
    later profiles record)."""
    import gc
    import weakref

    from torchscope.capture.kineto import kineto_recording

    def start_and_lose() -> weakref.ref[Any]:
        dropped = profile()
        dropped.start()
        net()
        return weakref.ref(dropped)

    lost = start_and_lose()
    gc.collect()
    assert lost() is None and not kineto_recording()  # collected, and Kineto stopped with it
    for _ in range(2):
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no "already recording" warning
            with profile() as prof:
                net()
        assert {r.key: r.count for r in prof.key_averages()}["aten::linear"] == 2


def test_exiting_while_a_profile_records_is_a_clean_exit(tmp_path: Path) -> None:
    """torch's teardown crashed with a segmentation fault when the interpreter exited while
    Kineto recorded (torch's own profiler does the same); the recording is now stopped first."""
    import subprocess
    import sys

    script = tmp_path / "exits.py"
    script.write_text(
        "import torch\nfrom torchscope import profile\n"
        "p = profile(with_stack=True)\np.start()\ntorch.mm(torch.ones(4, 4), torch.ones(4, 4))\n"
        "print('exiting while recording')\n"
    )
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "exiting while recording" in done.stdout


def größe_der_matrix(x: torch.Tensor) -> torch.Tensor:
    return torch.mm(x, x)


@pytest.mark.parametrize("options", ["with_stack", "seeds_three"])
def test_a_python_frame_with_a_name_outside_ascii_keeps_it(options: str) -> None:
    """Kineto's writer names such a frame "unknown" (a function like this one, or any frame of a
    project under ``/home/josé``); torch's tables show the name as written, and ours said
    "unknown" for every one of them."""
    kw = {"with_stack": True} if options == "with_stack" else {"record_shapes": True, "profile_memory": True, "with_stack": True}
    x = torch.ones(4, 4)
    with profile(**kw) as prof:
        for _ in range(3):
            größe_der_matrix(x)
    rows = {r.key: r.count for r in prof.key_averages()}
    frame = next(k for k in rows if k.endswith("größe_der_matrix"))
    assert rows[frame] == 3 and frame.startswith("test_capture_profile.py(")
    assert "unknown" not in rows


def test_the_cycles_a_killed_process_left_are_removed_by_the_next_profile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process killed after a cycle (SIGKILL, an OOM kill, a preempted job's SIGTERM) left
    its saved cycle in $TMPDIR for good (279 MB after 1,000 steps with the seeds' options)."""
    import subprocess
    import sys
    import tempfile

    from torchscope.capture.kineto import _Scratch, _scratch_prefix

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = tmp_path / f"{_scratch_prefix()}{int(gone.stdout)}-abc"
    alive = tmp_path / f"{_scratch_prefix()}{os.getppid()}-def"
    other = tmp_path / "torchscope-cycles-another-host-1-x"
    for d in (dead, alive, other):
        d.mkdir()
        (d / "cycle-1.pt.trace.json").write_text("{}")
    scratch = _Scratch()
    assert not dead.exists()
    assert alive.exists() and other.exists()  # a live owner's, another host's: left alone
    assert scratch.dir.parent == tmp_path and scratch.dir.name.startswith(f"{_scratch_prefix()}{os.getpid()}-")


def test_with_stack_shows_about_as_many_frames_of_the_profiler_as_torchs_own() -> None:
    """Kineto records every Python call made while it records, the profiler's own included:
    torch's table shows 17 such rows of torch's code, ours showed 36 of ours (contextlib,
    signal's enum conversions, threading, weakref) around the user's 13."""
    x = torch.ones(64, 64)

    def own_rows(make: Any) -> list[str]:
        with make(with_stack=True, record_shapes=True, profile_memory=True) as prof:
            x @ x
        keys = [r.key for r in prof.key_averages() if ".py(" in r.key]
        return [k for k in keys if "test_capture_profile.py" not in k]

    theirs, ours = own_rows(torch.profiler.profile), own_rows(profile)
    assert not [k for k in ours if k.split("(")[0] in ("contextlib.py", "signal.py", "threading.py", "weakref.py")]
    assert len(ours) <= len(theirs) + 4, ours


def test_an_export_takes_the_followers_word_for_the_file(
    net: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the seeds' options, every ``tensorboard_trace_handler`` cycle end looked over the
    whole saved file to see that it needs no repair (0.17 s for 142 MB); what the follower
    scanned during the save says so already, with the head and tail checked."""
    from torchscope.capture import kineto
    from torchscope.trace import reader

    monkeypatch.setattr(reader, "CHUNK_BYTES", 64 * 1024)
    looked: list[Path] = []
    valid_json = kineto._valid_json
    monkeypatch.setattr(kineto, "_valid_json", lambda p: looked.append(p) or valid_json(p))
    with profile(record_shapes=True, profile_memory=True, with_stack=True) as prof:
        for _ in range(20):
            net().sum().backward()
    prof.export_chrome_trace(str(tmp_path / "t.json"))
    cycle = prof._cycles[-1]
    assert looked == [] and cycle.path is not None
    kinetos = cycle.path.read_bytes()  # but for the path it names as its own (Kineto's temporary)
    own = kinetos.replace(json.dumps(str(cycle.path)).encode(), json.dumps(str(tmp_path / "t.json")).encode())
    assert (tmp_path / "t.json").read_bytes() == own
    assert cycle.trace.equals(reader.read_chrome_document(cycle.path.read_bytes(), kineto.LIVE_SOURCE))
    with profile(record_shapes=True) as other:  # no follower: the file is looked over
        net()
    other.export_chrome_trace(str(tmp_path / "u.json"))
    assert looked == [other._cycles[-1].path]


def test_a_trace_whose_one_step_the_error_cut_has_no_step_time(tmp_path: Path) -> None:
    """An integration's headline logged the cut step's time as the run's step time (871 ms, of
    a retry's Trainer being built); the report's heading said "1 step, average 871 ms"."""
    import torchscope
    from torchscope.integrations._report import headline
    from torchscope.render.console import print_summary
    from torchscope.render.payload import build_payload

    with pytest.raises(ValueError, match="bad batch"), torchscope.profile(
        schedule=torchscope.schedule(wait=0, warmup=1, active=3),
        on_trace_ready=torchscope.tensorboard_trace_handler(str(tmp_path)),
    ) as prof:
        prof.step()
        torch.randn(8, 8) @ torch.randn(8, 8)
        raise ValueError("bad batch")
    (path,) = tmp_path.glob("*.pt.trace.json")
    payload = build_payload(torchscope.load(path), title="cut")
    assert payload["report"]["meta"]["only_cut_step"] is True
    assert headline(payload)["step_time_ms"] is None
    from io import StringIO

    from rich.console import Console

    out = StringIO()
    print_summary(payload, Console(file=out, width=200, color_system=None))
    assert "note its one step was cut by the script's error: its time is not a whole step's" in out.getvalue()
    assert "where the time goes (one step, cut short, " in out.getvalue()
