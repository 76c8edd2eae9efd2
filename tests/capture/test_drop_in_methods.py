"""torch.profiler's remaining methods, drop-in: ``export_memory_timeline``, ``get_trace_id``,
``set_custom_trace_id_callback`` (differential: the same workload under torch.profiler)."""

from __future__ import annotations

import gzip
import json
import re
import sys
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.profiler as torch_profiler
from torch.autograd.profiler_util import _format_time
from torch.profiler._memory_profiler import Action, Category

import torchscope
from torchscope.models import mlp

MEMORY = {"record_shapes": True, "profile_memory": True, "with_stack": True}


def _train(profile: Any, **options: Any) -> Any:
    """Two Adam steps of a small MLP under ``profile``: parameters, gradients, optimizer state."""
    torch.manual_seed(0)
    model = mlp((64, 128, 10))
    opt = torch.optim.Adam(model.parameters())
    x = torch.randn(32, 64)
    with profile(**options) as prof:
        for _ in range(2):
            opt.zero_grad()
            model(x).sum().backward()
            opt.step()
    return prof


def _timelines(prof: Any, out: Path) -> tuple[list[Any], list[Any]]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        prof.export_memory_timeline(str(out / "t.json"), device="cpu")
        prof.export_memory_timeline(str(out / "t.raw.json.gz"), device="cpu")
    _, sizes = json.loads((out / "t.json").read_text())
    raw = json.loads(gzip.decompress((out / "t.raw.json.gz").read_bytes()))
    return sizes, [event[1:] for event in raw]  # times differ between runs; the rest may not


def test_memory_timeline_is_torchs(tmp_path: Path) -> None:
    """The raw events (action, bytes, category) are torch's own, one for one; the plotted points
    are not compared one for one, since torch's alone differ from run to run there (events at
    the same microsecond merge differently: 227 to 231 points for the same workload)."""
    _train(torch_profiler.profile)  # warm up: first-call allocations belong to neither run
    theirs, ours = tmp_path / "torch", tmp_path / "ours"
    theirs.mkdir()
    ours.mkdir()
    expected_points, expected_raw = _timelines(_train(torch_profiler.profile, **MEMORY), theirs)
    points, raw = _timelines(_train(torchscope.profile, **MEMORY), ours)
    assert raw == expected_raw and len(raw) > 300
    # torch's memory profiler sorted the bytes into parameters, gradients and optimizer state
    assert {Action(a).name for a, _, _ in raw} >= {"CREATE", "DESTROY"}
    assert {Category(c).name for _, _, c in raw if c} >= {
        "PARAMETER",
        "GRADIENT",
        "OPTIMIZER_STATE",
    }
    categories = len(expected_points[0])
    assert all(len(point) == categories for point in points)
    used = {i for point in expected_points for i, size in enumerate(point) if size}
    assert {i for point in points for i, size in enumerate(point) if size} == used


def test_memory_timeline_html_without_matplotlib_writes_nothing_and_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """torch prints a line and writes nothing; ours raised a WriteError blaming the path (a new
    user's script without matplotlib died there). Now: no file, no exception, a warning that
    names matplotlib; the JSON forms still write."""
    prof = _train(torchscope.profile, **MEMORY)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    page = tmp_path / "mem.html"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        prof.export_memory_timeline(str(page))
        prof.export_memory_timeline(str(tmp_path / "mem.json"))
    said = [str(w.message) for w in caught if w.category is UserWarning]
    assert said == [
        f"torchscope: {page} was not written: the memory timeline's HTML plot needs matplotlib"
        " (pip install matplotlib); .json, .json.gz and .raw.json.gz need nothing"
    ]
    assert not page.exists() and not list(tmp_path.glob(".*"))  # no temporary left either
    assert len(json.loads((tmp_path / "mem.json").read_text())[1]) > 100


def test_memory_timeline_needs_torchs_three_options(tmp_path: Path) -> None:
    prof = _train(torchscope.profile, profile_memory=True)
    with (
        pytest.warns(FutureWarning, match="deprecated"),
        pytest.raises(
            ValueError, match=r"^record_shapes=True, with_stack=True required for memory profiling\.$"
        ),
    ):
        prof.export_memory_timeline(str(tmp_path / "t.json"))


def test_only_the_latest_cycle_keeps_kinetos_results() -> None:
    prof = torchscope.profile(
        schedule=torchscope.schedule(wait=0, warmup=0, active=1), acc_events=True, **MEMORY
    )
    with prof:
        for _ in range(3):
            torch.ones(8).sum()
            prof.step()
    held = [cycle.kineto_results is not None for cycle in prof._cycles]
    assert len(held) >= 3 and held[-1] and not any(held[:-1])
    prof.trace()  # reading the Trace does not free what the memory profiler needs
    assert prof._cycles[-1].kineto_results is not None


def test_trace_ids() -> None:
    prof = torchscope.profile()
    assert prof.get_trace_id() is None  # as torch's, before the first cycle
    with prof:
        torch.ones(2).sum()
    assert re.fullmatch(r"[0-9A-F]{32}", prof.get_trace_id() or "")
    prof.set_custom_trace_id_callback(lambda: "run-42")
    with prof:
        torch.ones(2).sum()
    assert prof.get_trace_id() == "run-42"


def test_every_public_method_of_torchs_profile_is_here() -> None:
    public = {name for name in dir(torch_profiler.profile) if not name.startswith("_")}
    assert public - set(dir(torchscope.profile)) == set()


def test_every_public_name_of_torch_profiler_imports_from_torchscope() -> None:
    """``from torch.profiler import X`` -> ``from torchscope import X`` works for every X."""
    assert [name for name in torch_profiler.__all__ if not hasattr(torchscope, name)] == []
    for same in (
        "DeviceType",
        "ProfilerActivity",
        "kineto_available",
        "record_function",
        "ExecutionTraceObserver",
    ):
        assert getattr(torchscope, same) is getattr(torch_profiler, same)


def _forward_backward(profile: Any) -> Any:
    torch.manual_seed(0)
    model = mlp((16, 32, 8))
    x = torch.randn(4, 16)
    with profile(record_shapes=True, with_flops=True) as prof:
        model(x).sum().backward()
    return prof


def _described(events: Any) -> Counter[tuple[Any, ...]]:
    """What torch's events say of each op, sequence numbers taken from the run's first one."""
    first = min((e.sequence_nr for e in events if e.sequence_nr >= 0), default=0)
    return Counter(
        (
            e.name,
            e.sequence_nr - first if e.sequence_nr >= 0 else -1,
            repr(e.input_shapes),
            repr(e.concrete_inputs),
            repr(e.input_dtypes),
            e.flops,
            e.fwd_thread,
            e.device_type,
            len(e.kernels),
        )
        for e in events
    )


def test_events_carry_torchs_attributes() -> None:
    _forward_backward(torch_profiler.profile)  # warm up
    theirs, ours = (
        _forward_backward(torch_profiler.profile).events(),
        _forward_backward(torchscope.profile).events(),
    )
    assert len(ours) == len(theirs) == 104
    assert _described(ours) == _described(theirs)
    addmm = next(e for e in ours if e.name == "aten::addmm")
    assert addmm.concrete_inputs == [None, None, None, 1, 1] and addmm.flops == 4096
    backward = next(e for e in ours if e.name == "AddmmBackward0")
    assert backward.fwd_thread == next(e for e in theirs if e.name == "AddmmBackward0").fwd_thread
    # the formatted times are torch's formatter applied to our numbers
    for row in [*ours[:20], *list(ours.key_averages())[:20]]:
        assert row.cpu_time_total_str == _format_time(row.cpu_time_total)
        assert row.self_cpu_time_total_str == _format_time(row.self_cpu_time_total)
        assert row.device_time_str == _format_time(row.device_time)


def test_event_list_methods_are_torchs() -> None:
    theirs, ours = (
        _forward_backward(torch_profiler.profile).events(),
        _forward_backward(torchscope.profile).events(),
    )
    # one row per event, torch's columns
    assert ours.table(row_limit=5).splitlines()[1] == theirs.table(row_limit=5).splitlines()[1]
    assert len(ours.table(row_limit=1000).splitlines()) == len(theirs.table(row_limit=1000).splitlines())
    assert ours.total_average().count == theirs.total_average().count == 104
    assert ours.self_cpu_time_total == pytest.approx(sum(e.self_cpu_time_total for e in ours))
    assert {r.key for r in ours.key_averages()} == {r.key for r in theirs.key_averages()}
    assert ours.supported_export_stacks_metrics() == theirs.supported_export_stacks_metrics()


def test_every_parameter_of_torchs_api_is_accepted() -> None:
    """profile(...), schedule(...), tensorboard_trace_handler(...) and .table(...) take every
    parameter torch's take (ours may take more: ``backend``)."""
    import inspect

    from torch.autograd.profiler_util import EventList

    from torchscope import compat

    pairs = [
        (torch_profiler.profile.__init__, torchscope.profile.__init__),
        (torch_profiler.profile.key_averages, torchscope.profile.key_averages),
        (torch_profiler.schedule, torchscope.schedule),
        (torch_profiler.tensorboard_trace_handler, torchscope.tensorboard_trace_handler),
        (EventList.table, compat.KeyAverages.table),
        (EventList.key_averages, compat.EventList.key_averages),  # "group_by_input_shapes" there
    ]
    for theirs, ours in pairs:
        missing = set(inspect.signature(theirs).parameters) - set(inspect.signature(ours).parameters)
        assert missing == set(), theirs


def test_kinetos_results_can_be_freed_when_the_timeline_is_not_wanted() -> None:
    with torchscope.profile(**MEMORY) as prof:
        torch.ones(8).sum()
    assert prof._cycles[-1].kineto_results is not None
    prof.free_kineto_results()  # what `torchscope run --memory --stack` does once it has the Trace
    assert prof._cycles[-1].kineto_results is None and prof.trace().events.height > 0
