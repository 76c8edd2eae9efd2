"""Issue 21, drop-in to the letter: what a script can observe of torch 2.13's profiler API is
the same with torchscope. Each test runs the same workload under ``torch.profiler.profile`` and
``torchscope.profile`` side by side and compares what the script sees."""

from __future__ import annotations

import json
import logging
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.profiler as torch_profiler
from torch._C._profiler import _ExperimentalConfig, _RecordFunctionFast
from torch.autograd.profiler import KinetoStepTracker

import torchscope
from torchscope.errors import ProfilerStateError, TorchscopeError, UsageError

CPU = torch_profiler.ProfilerActivity.CPU
BOTH = pytest.mark.parametrize("profile", [torch_profiler.profile, torchscope.profile], ids=["torch", "ours"])


def _matmuls() -> None:
    x = torch.ones(8, 8)
    for _ in range(3):
        x = torch.mm(x, x) / 8


@BOTH
def test_an_activity_named_twice_is_a_value_error(profile: Any) -> None:
    with pytest.raises(ValueError, match=r"^Activity ProfilerActivity.CPU specified more than once$"):
        profile(activities=[CPU, {CPU: ["CPU_OP"]}])
    with pytest.raises(ValueError, match="specified more than once"):
        profile(activities=[CPU, CPU])
    with pytest.raises(TypeError, match="Expected ProfilerActivity or dict, got <class 'str'>"):
        profile(activities=[CPU, "CUDA"])
    with pytest.raises(AssertionError, match="^No valid profiler activities found$"):
        profile(activities=["CPU"])


def test_our_argument_errors_are_usage_errors_of_torchs_type() -> None:
    with pytest.raises(UsageError) as caught:
        torchscope.profile(activities=[CPU, CPU])
    assert isinstance(caught.value, ValueError) and isinstance(caught.value, TorchscopeError)
    with torchscope.profile() as prof:
        _matmuls()
    with pytest.raises(UsageError) as sort_error:
        prof.key_averages().table(sort_by="speed")
    assert isinstance(sort_error.value, AttributeError)  # torch's getattr on its rows


def _keyword_inputs(profile: Any) -> list[tuple[str, dict[str, Any]]]:
    x = torch.ones(4, 4)
    with profile(activities=[CPU], record_shapes=True) as prof:
        with _RecordFunctionFast("my_rf", [x, x], {"stream": 0, "kernel_file": "k.py", "scale": 0.5}):
            x.add(x)
        with _RecordFunctionFast("plain_rf", [x]):
            x.mul(x)
    return sorted((e.name, e.kwinputs) for e in prof.events())


def test_kwinputs_are_torchs() -> None:
    theirs, ours = _keyword_inputs(torch_profiler.profile), _keyword_inputs(torchscope.profile)
    assert ours == theirs
    assert ("my_rf", {"stream": 0, "kernel_file": "k.py", "scale": 0.5}) in ours
    assert ("plain_rf", {}) in ours and ("aten::add", {}) in ours


def _steps_counted(profile: Any, steps: int) -> int:
    before = KinetoStepTracker.current_step()
    with profile(activities=[CPU]) as prof:
        for _ in range(steps):
            _matmuls()
            prof.step()
    return KinetoStepTracker.current_step() - before


def test_step_tracker_advances_only_for_the_daemon_as_torchs(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _steps_counted(torchscope.profile, 8) == _steps_counted(torch_profiler.profile, 8) == 0
    monkeypatch.setenv("KINETO_USE_DAEMON", "1")
    assert _steps_counted(torchscope.profile, 8) == _steps_counted(torch_profiler.profile, 8) == 8
    assert "ProfilerStep" not in KinetoStepTracker._step_dict  # both erase their count on exit


def _metadata(profile: Any, expose: bool) -> list[tuple[str, str]]:
    config = _ExperimentalConfig(expose_kineto_event_metadata=expose)
    with profile(activities=[CPU], experimental_config=config) as prof, torch_profiler.record_function("r"):
        _matmuls()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = [(e.name, e.metadata_json) for e in prof.events()]
    assert str(caught[0].message) == "`metadata_json` is deprecated. Use `event_metadata` instead."
    return out


@pytest.mark.parametrize("expose", [True, False])
def test_kineto_event_metadata_is_torchs(expose: bool) -> None:
    ours, theirs = _metadata(torchscope.profile, expose), _metadata(torch_profiler.profile, expose)
    assert ours == theirs
    assert ours[0] == (("r", '"Ev Idx": 0') if expose else ("r", ""))


@BOTH
def test_a_negative_post_processing_timeout_fails_at_start_as_torchs(profile: Any) -> None:
    prof = profile(activities=[CPU], post_processing_timeout_s=-1.0)  # accepted until started
    with pytest.raises(ValueError, match="^post_processing_timeout_s must be non-negative$"):
        prof.start()


def _within(profile: Any, timeout: float | None) -> tuple[int, int]:
    with profile(activities=[CPU], post_processing_timeout_s=timeout) as prof:
        _matmuls()
    return len(prof.events()), len(prof.key_averages())


def test_post_processing_timeout_is_honoured_as_torchs(caplog: pytest.LogCaptureFixture) -> None:
    # a timeout already over when post-processing starts: torch keeps what it made by then, nothing
    with caplog.at_level(logging.WARNING):
        assert _within(torchscope.profile, 0.0) == _within(torch_profiler.profile, 0.0) == (0, 0)
    # on torch's logger: torch's one post-processing serves both reads; ours warns at each read
    timed_out = [
        r for r in caplog.records if r.name == "torch.autograd.profiler" and "timed out" in r.getMessage()
    ]
    assert len(timed_out) == 3 and all("partial results" in r.getMessage() for r in timed_out)
    # a generous one changes nothing
    assert _within(torchscope.profile, 600.0) == _within(torchscope.profile, None)
    assert _within(torch_profiler.profile, 600.0) == _within(torch_profiler.profile, None)


def _trace_only(profile: Any, tmp_path: Path) -> tuple[list[str], Counter[str]]:
    with profile(activities=[CPU], experimental_config=_ExperimentalConfig(trace_only=True)) as prof:
        _matmuls()
    errors = []
    for read in (prof.events, prof.key_averages):
        with pytest.raises(RuntimeError) as caught:
            read()
        errors.append(str(caught.value))
    path = tmp_path / f"{profile.__module__}.json"
    prof.export_chrome_trace(str(path))  # what trace_only is for
    names = Counter(
        e["name"] for e in json.loads(path.read_text())["traceEvents"] if e.get("cat") == "cpu_op"
    )
    return errors, names


def test_trace_only_refuses_events_and_exports_as_torchs(tmp_path: Path) -> None:
    ours, theirs = _trace_only(torchscope.profile, tmp_path), _trace_only(torch_profiler.profile, tmp_path)
    assert (
        ours[0]
        == theirs[0]
        == [
            "events() is not available when trace_only=True in ExperimentalConfig. Use export_chrome_trace() instead."
        ]
        * 2
    )
    assert ours[1] == theirs[1] and ours[1]["aten::mm"] == 3


@BOTH
def test_trace_only_gives_way_to_with_stack_as_torchs(profile: Any) -> None:
    config = _ExperimentalConfig(trace_only=True)
    with pytest.warns(UserWarning, match="trace_only=True is incompatible with with_stack=True"):
        prof = profile(activities=[CPU], with_stack=True, experimental_config=config)
    assert config.trace_only  # the caller's config is left alone
    with prof:
        _matmuls()
    assert sum(e.name == "aten::mm" for e in prof.events()) == 3


def _kineto_names(prof: Any) -> Counter[str]:
    return Counter(e.name() for e in prof.profiler.kineto_results.events())


def test_kineto_results_are_kinetos_until_the_trace_is_read() -> None:
    assert torchscope.profile().profiler is None and torch_profiler.profile().profiler is None
    with torch_profiler.profile(activities=[CPU]) as theirs:
        _matmuls()
    with torchscope.profile(activities=[CPU]) as ours:
        _matmuls()
    assert _kineto_names(ours) == _kineto_names(theirs)
    assert _kineto_names(ours)["aten::mm"] == 3
    ours.key_averages()  # the Trace is read: Kineto's copy stays, as torch's does
    assert _kineto_names(ours) == _kineto_names(theirs)
    ours.free_kineto_results()
    with pytest.raises(ProfilerStateError, match=r"use prof\.trace\(\).*or prof\.events\(\)"):
        ours.profiler.kineto_results  # noqa: B018
    assert [e.name for e in ours.profiler.function_events] == [e.name for e in ours.events()]


def _kineto_results_over_a_schedule(module: Any) -> list[tuple[str, int | None]]:
    """The count of ``aten::mm`` in ``prof.profiler.kineto_results`` after each step of a
    scheduled run, inside on_trace_ready, and after the block (None: not there)."""
    seen: list[tuple[str, int | None]] = []

    def mm_count(prof: Any) -> int | None:
        if prof.profiler is None:  # before the first cycle is prepared
            return None
        try:
            results = prof.profiler.kineto_results
        except ProfilerStateError:
            return None
        return None if results is None else sum(e.name() == "aten::mm" for e in results.events())

    sched = module.schedule(wait=2, warmup=1, active=1, repeat=1)
    ready = lambda p: seen.append(("ready", mm_count(p)))  # noqa: E731
    with module.profile(activities=[CPU], schedule=sched, on_trace_ready=ready) as prof:
        for i in range(6):
            _matmuls()
            prof.step()
            seen.append((f"step {i}", mm_count(prof)))
    seen.append(("after", mm_count(prof)))
    return seen


def test_kineto_results_stay_through_the_wait_and_after_the_block_as_torchs() -> None:
    """torch frees a cycle's Kineto results when the next one is prepared, not when its
    on_trace_ready returns: a script reading them in the steps after (repeats used up) or
    after the ``with`` block works with both (a new user's find: ours had freed them)."""
    ours = _kineto_results_over_a_schedule(torchscope)
    assert ours == _kineto_results_over_a_schedule(torch_profiler)
    assert ours[-3:] == [("step 4", 3), ("step 5", 3), ("after", 3)]


def test_kineto_results_save_writes_the_cycle_as_torchs(tmp_path: Path) -> None:
    """``prof.profiler.kineto_results.save(path)``, torch's way to keep a trace: Kineto saves a
    result once, ours had saved it at stop(), and every call raised "Trace is already saved"
    (a new user's find). It writes the cycle's file, with the events torch's save writes."""
    saved = {}
    for name, module in (("torch", torch_profiler), ("ours", torchscope)):
        with module.profile(activities=[CPU]) as prof:
            _matmuls()
        path = tmp_path / f"{name}.json"
        prof.profiler.kineto_results.save(str(path))
        events = json.loads(path.read_text())["traceEvents"]
        saved[name] = Counter(e["name"] for e in events if e.get("cat") == "cpu_op")
    assert saved["ours"] == saved["torch"] and saved["ours"]["aten::mm"] == 3


def _shape_rows(profile: Any, **options: Any) -> Counter[tuple[str, str, int]]:
    torch.manual_seed(0)
    lstm = torch.nn.LSTM(8, 16, num_layers=2)
    x = torch.randn(5, 3, 8)
    with profile(activities=[CPU], record_shapes=True) as prof:
        torch.cat([torch.ones(2, 3), torch.ones(4, 3)])
        lstm(x)
        torch.stack([torch.ones(2), torch.ones(2)])
    rows = prof.key_averages(group_by_input_shape=True, **options)
    return Counter((r.key, str(r.input_shapes), r.count) for r in rows)


def test_input_shape_keys_are_torchs_for_tensor_lists() -> None:
    theirs, ours = _shape_rows(torch_profiler.profile), _shape_rows(torchscope.profile)
    assert ours == theirs
    # our cat, the stack's cat and the LSTM's two: one row, as torch's
    assert ("aten::cat", "[[], []]", 4) in ours
    assert ("aten::lstm", "[[5, 3, 8], [], [], [], [], [], [], [], []]", 1) in ours
    # the richer keys, on request: each tensor's shape, one row per distinct list
    rich = _shape_rows(torchscope.profile, tensor_list_shapes=True)
    cats = sorted((shapes, n) for key, shapes, n in rich if key == "aten::cat")
    assert cats == [("[[[2, 3], [4, 3]], []]", 1), ("[[[2], [2]], []]", 1), ("[[[3, 16], [3, 16]], []]", 2)]
    assert sum(n for *_, n in rich) == sum(n for *_, n in ours)


def _event_attributes(profile: Any) -> Counter[tuple[Any, ...]]:
    """What torch's FunctionEvent says of each event beyond times: flows, structured shapes
    and strides, dtypes, kind of event."""
    t1, t2 = torch.ones(1, requires_grad=True), torch.ones(1, requires_grad=True)
    strided = torch.randn(1024).as_strided((16, 16), (17, 1), 0)
    with profile(activities=[CPU], record_shapes=True) as prof:
        z = torch.add(t1, t2)
        torch.nn.functional.binary_cross_entropy_with_logits(z, torch.ones(1)).backward()
        torch.cat([strided, strided])
    return Counter(
        (
            e.name,
            (e.flow_id, e.flow_type, e.flow_start),
            json.dumps(e.structured_input_shapes),
            json.dumps(e.structured_input_strides),
            tuple(e.input_dtypes),
            e.is_python_function,
            e.activity_type,
        )
        for e in prof.events()
    )


def test_flows_and_structured_inputs_are_torchs() -> None:
    ours, theirs = _event_attributes(torchscope.profile), _event_attributes(torch_profiler.profile)
    assert ours == theirs
    flows = {(name, flow) for name, flow, *_ in ours if flow[0]}
    assert flows == {
        ("aten::add", (2, 1, True)),
        ("AddBackward0", (2, 1, False)),
        ("aten::binary_cross_entropy_with_logits", (1, 1, True)),
        ("BinaryCrossEntropyWithLogitsBackward0", (1, 1, False)),
    }
    cat = next(key for key in ours if key[0] == "aten::cat")
    assert cat[2:5] == ("[[[16, 16], [16, 16]], []]", "[[[17, 1], [17, 1]], []]", ("TensorList", "Scalar"))


def test_overload_names_are_torchs_when_captured() -> None:
    def rows(profile: Any) -> tuple[list[tuple[str, str]], list[tuple[str, str, int]], list[str]]:
        config = _ExperimentalConfig(capture_overload_names=True)
        with profile(activities=[CPU], experimental_config=config) as prof:
            torch.add(torch.ones(2), 5)
        events = sorted((e.name, e.overload_name) for e in prof.events())
        grouped = sorted(
            (r.key, r.overload_name, r.count) for r in prof.key_averages(group_by_overload_name=True)
        )
        return events, grouped, sorted(r.key for r in prof.key_averages())

    ours, theirs = rows(torchscope.profile), rows(torch_profiler.profile)
    assert ours == theirs
    assert ("aten::add", "Tensor") in ours[0] and ("aten::empty", "memory_format", 1) in ours[1]


def test_stats_are_filled_when_events_are_built() -> None:
    with torchscope.profile(activities=[CPU]) as prof:
        _matmuls()
    stats = prof._stats()
    assert stats is not None and stats.number_of_events == 0  # nothing built yet, as torch
    assert stats.profiler_prepare_call_duration_us > 0  # Kineto's own, measured by torch
    prof.key_averages()  # the table reads the Trace first: the parse is that read, not ~0
    events = prof.events()
    assert stats.number_of_events == len(events) > 0
    assert stats.function_events_build_tree_call_duration_us > 0
    read_us = int(prof._cycles[-1].read_s * 1e6)
    assert stats.parse_kineto_call_duration_us == read_us > 100  # a new user saw 8 us


def test_kwinputs_of_events_kept_past_their_cycle() -> None:
    """The keyword inputs are read from the cycle's file on first use; the session deletes that
    file when the next cycle starts, and events kept from an earlier cycle still have them."""
    x = torch.ones(4, 4)
    kept: list[Any] = []
    files: list[Path] = []

    def ready(p: Any) -> None:
        kept.append(p.events())
        files.append(p._cycles[-1].path)

    with torchscope.profile(
        activities=[CPU],
        record_shapes=True,
        schedule=torchscope.schedule(wait=0, warmup=1, active=1, repeat=2),
        on_trace_ready=ready,
    ) as prof:
        for step in range(4):
            with _RecordFunctionFast("launch", [x], {"step": step}):
                x.add(x)
            prof.step()
    assert len(kept) == 2 and not files[0].exists()  # the first cycle's file is gone
    assert [[e.kwinputs for e in events if e.name == "launch"] for events in kept] == [
        [{"step": 1}],
        [{"step": 3}],
    ]


def test_a_loaded_traces_shape_keys_are_torchs_and_the_cli_offers_the_rich_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same keys from a trace file (``torchscope table``) as from torch's live session."""
    from torchscope.cli.main import main

    torch.manual_seed(0)
    lstm = torch.nn.LSTM(8, 16)
    with torch_profiler.profile(activities=[CPU], record_shapes=True) as prof:
        torch.cat([torch.ones(2, 3), torch.ones(4, 3)])
        lstm(torch.randn(5, 3, 8))
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    theirs = Counter(
        (r.key, str(r.input_shapes), r.count) for r in prof.key_averages(group_by_input_shape=True)
    )

    def table(*extra: str) -> Counter[tuple[str, str, int]]:
        assert (
            main(["table", str(path), "--group-by-input-shape", "--row-limit", "-1", "--json", *extra]) == 0
        )
        rows = json.loads(capsys.readouterr().out)
        return Counter((r["key"], r["input_shapes"], r["count"]) for r in rows)

    assert table() == theirs
    rich = table("--tensor-list-shapes")
    assert ("aten::cat", "[[[2, 3], [4, 3]], []]", 1) in rich and ("aten::cat", "[[], []]", 1) not in rich


def _python_frames(profile: Any, tmp_path: Path) -> tuple[Counter[Any], Counter[Any], float, float]:
    """Each Python frame's ids as events() and as the Chrome trace say; aten::mul's start
    recovered from events() and as the Chrome trace says."""

    class Doubler(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * 2

    with profile(activities=[CPU], with_stack=True) as prof:
        Doubler()(torch.ones(4))
    trace_start_ns = prof.profiler.kineto_results.trace_start_ns()  # before Kineto's copy is freed
    events = prof.events()
    path = tmp_path / f"{profile.__module__}.json"
    prof.export_chrome_trace(str(path))
    trace = json.loads(path.read_text())
    frames = Counter(
        (e.name, *(None if i == -1 else i for i in (e.python_id, e.python_parent_id, e.python_module_id)))
        for e in events
        if e.is_python_function
    )
    written = Counter(
        # a root frame's parent is null in the file and -1 in torch's events
        (e["name"], *(e["args"].get(key) for key in ("Python id", "Python parent id", "Python module id")))
        for e in trace["traceEvents"]
        if e.get("cat") == "python_function" and e.get("ph") == "X"
    )
    chrome_ts = next(
        e["ts"] for e in trace["traceEvents"] if e.get("name") == "aten::mul" and e.get("ph") == "X"
    )
    mul = next(e for e in events if e.name == "aten::mul")
    # torch's times count from Kineto's trace start: the Chrome ts is recovered from them
    recovered = (round(mul.time_range.start * 1000) + trace_start_ns - trace["baseTimeNanoseconds"]) / 1000
    return frames, written, recovered, chrome_ts


@BOTH
def test_python_frame_ids_and_times_agree_with_the_trace_as_torchs(profile: Any, tmp_path: Path) -> None:
    frames, written, recovered, chrome_ts = _python_frames(profile, tmp_path)
    assert frames == written  # every Python frame's id, parent id and module id
    module = next(key for key in frames if "Doubler" in key[0])
    assert module[1] > 0 and module[3] is not None  # a module frame has a module id
    # to the nanosecond: time_range is float microseconds, so its last digit may round either way
    assert recovered == pytest.approx(chrome_ts, abs=0.0011)


def test_events_are_built_once_per_cycle_as_torchs() -> None:
    for profile in (torch_profiler.profile, torchscope.profile):
        with profile(activities=[CPU]) as prof:
            _matmuls()
        first = prof.events()
        assert prof.events() is first  # the same list, as torch's
        assert sum(e.name == "aten::mm" for e in first) == 3
    prof.start()  # ours again: a new cycle, a new list
    torch.mm(torch.ones(2, 2), torch.ones(2, 2))
    prof.stop()
    assert prof.events() is not first and sum(e.name == "aten::mm" for e in prof.events()) == 1
