"""The portable collector on its own: labels, steps, threads, device events, memory, misuse.

Device timing is exercised on CPU by injecting ``FakeDevice`` (a skewed, drifting device
clock read through the same ``EventSource`` protocol as ``torch.Event``): every op then gets
a device event, a launch marker and an ``ac2g`` flow, exactly as on an accelerator.
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torchscope.capture import portable  # noqa: E402
from torchscope.capture.portable import PortableCollector  # noqa: E402
from torchscope.capture.portable_doc import device_ops_total  # noqa: E402
from torchscope.errors import ProfilerStateError  # noqa: E402
from torchscope.models import resnet18  # noqa: E402
from torchscope.models.perceptron import MLP  # noqa: E402
from torchscope.trace.reader import read_chrome_document  # noqa: E402

from .fake_device import FakeDevice, HoldingFakeDevice  # noqa: E402


def _collect(fn: Any, **kwargs: Any) -> dict[str, Any]:
    collector = PortableCollector(**kwargs)
    collector.start()
    try:
        fn()
    finally:
        doc = collector.stop()
    return doc


def test_document_is_kineto_shaped() -> None:
    a, b = torch.randn(4, 8), torch.randn(8, 3)
    doc = _collect(lambda: torch.mm(a, b), record_shapes=True)
    assert doc["schemaVersion"] == 1
    assert isinstance(doc["baseTimeNanoseconds"], int)
    (mm,) = [e for e in doc["traceEvents"] if e.get("cat") == "cpu_op"]
    assert mm["name"] == "aten::mm"
    assert mm["ph"] == "X" and mm["dur"] > 0
    assert mm["args"]["Input Dims"] == [[4, 8], [8, 3]]
    assert mm["args"]["Input type"] == ["float", "float"]
    assert isinstance(mm["args"]["External id"], int)


def test_defaults_are_filled_in_schema_order_like_kineto() -> None:
    x = torch.randn(3, 4)
    doc = _collect(lambda: x.sum(dim=[0], keepdim=True), record_shapes=True)
    (op,) = [e for e in doc["traceEvents"] if e.get("cat") == "cpu_op"]
    assert op["name"] == "aten::sum"
    assert op["args"]["Input Dims"] == [[3, 4], [], [], []]
    assert op["args"]["Input type"] == ["float", "ScalarList", "Scalar", ""]
    assert op["args"]["Concrete Inputs"] == ["", "[0]", "True", ""]


def test_record_function_labels_nest_and_steps_are_numbered() -> None:
    x = torch.randn(16, 16)

    def work() -> None:
        for step in range(3):
            rf = torch.autograd.profiler.record_function
            with rf(f"ProfilerStep#{step}"), rf("forward"):
                x.matmul(x).relu()

    trace = read_chrome_document(_collect(work), "portable")
    assert trace.steps["step"].to_list() == [0, 1, 2]
    ann = trace.annotations
    assert Counter(ann["name"].cast(str).to_list()) == {
        "ProfilerStep#0": 1,
        "ProfilerStep#1": 1,
        "ProfilerStep#2": 1,
        "forward": 3,
    }
    ops = trace.ops
    assert Counter(ops["name"].cast(str).to_list()) == {"aten::mm": 3, "aten::relu": 3}
    names = trace.events["name"].cast(str).to_list()
    # every op's parent is "forward", whose parent is its step
    for parent in ops["parent"].to_list():
        assert names[parent] == "forward"
        assert names[trace.events["parent"][parent]].startswith("ProfilerStep#")
    assert ops["step"].to_list() == [0, 0, 1, 1, 2, 2]
    # record_function's own ops are not reported as ops (Kineto does not either)
    assert not any(n.startswith("profiler::") for n in names)


def test_ops_of_other_python_threads_are_not_seen() -> None:
    # A dispatch mode is thread-local: ops of threads the user starts are invisible (Kineto
    # sees them). Documented in docs/portable.md; the main thread's ops carry its native id.
    x = torch.randn(8, 8)

    def work() -> None:
        torch.sigmoid(x)
        t = threading.Thread(target=lambda: torch.tanh(x))
        t.start()
        t.join()

    trace = read_chrome_document(_collect(work), "portable")
    assert trace.ops["name"].cast(str).to_list() == ["aten::sigmoid"]
    assert trace.ops["tid"].to_list() == [threading.get_native_id()]


def test_fake_device_gives_each_op_a_linked_device_event_inside_it() -> None:
    model, x = MLP((512, 1024, 1024, 10)), torch.randn(8, 512)
    doc = _collect(
        lambda: model(x).sum().backward(), event_source=lambda device: FakeDevice(), with_modules=True
    )
    trace = read_chrome_document(doc, "portable")
    ops, kernels = trace.ops, trace.kernels
    # one device event per op that puts work on the stream, named after it, linked back to
    # it by the flow; views and allocations get none (Kineto shows them without device time)
    names = trace.events["name"].cast(str).to_list()
    assert [names[i] for i in kernels["op"].to_list()] == kernels["name"].cast(str).to_list()
    timed = set(kernels["op"].to_list())
    untimed = {names[i] for i in ops["id"].to_list() if i not in timed}
    assert untimed == {"aten::t", "aten::detach", "aten::expand", "aten::view"}
    assert {"aten::addmm", "aten::mm", "aten::relu", "aten::threshold_backward"} <= {names[i] for i in timed}
    assert set(trace.runtime["name"].cast(str).to_list()) == {"portable::launch"}
    assert trace.flows.height == kernels.height
    assert (kernels["device"] == 0).all() and (kernels["stream"] == 0).all()
    # the device clock is 2 minutes ahead and 80 ppm fast, yet each device event lands
    # inside its op on the host clock; on the real host clock a calibration bracket is
    # ~1 us wide (test_device_clock checks the 1 us bound on a virtual clock), so allow 2 us
    ev = trace.events
    start, end = ev["start_ns"].to_numpy(), (ev["start_ns"] + ev["dur_ns"]).to_numpy()
    op_rows = kernels["op"].to_numpy()
    k_rows = kernels["id"].to_numpy()
    assert (start[k_rows] >= start[op_rows] - 2_000).all()
    assert (end[k_rows] <= end[op_rows] + 2_000).all()
    assert doc["portable"]["batches"]["cpu:0"]["resolved"] == kernels.height
    totals = device_ops_total(doc)
    assert set(totals) == {names[i] for i in timed}


def test_bounded_outstanding_events_in_a_long_loop() -> None:
    x = torch.randn(4)
    doc = _collect(
        lambda: [x.add(1) for _ in range(600)], event_source=lambda device: FakeDevice(), max_outstanding=64
    )
    stats = doc["portable"]["batches"]["cpu:0"]
    assert stats["resolved"] == 600
    assert stats["peak_outstanding"] <= 64


def test_profile_memory_records_allocation_and_free_of_op_outputs() -> None:
    x = torch.randn(256, 256)

    def work() -> None:
        y = x * 2
        del y

    trace = read_chrome_document(_collect(work, profile_memory=True), "portable")
    mem = trace.memory
    assert mem["bytes"].to_list() == [256 * 256 * 4, -(256 * 256 * 4)]
    assert mem["addr"][0] == mem["addr"][1]
    assert mem["total_allocated"].to_list() == [256 * 256 * 4, 0]
    names = trace.events["name"].cast(str).to_list()
    assert names[mem["op"][0]] == "aten::mul"


def test_in_place_and_out_ops_allocate_nothing() -> None:
    """An in-place op returns its input, whose storage was made before start(): it is no
    allocation of the op (``aten::mul_`` showed 3.81 MB, Adam's ``lerp_`` 6 MB; Kineto 0 B).
    The schema says which outputs alias an input; a new output is still counted."""
    a = torch.zeros(100, 100)
    b = torch.ones(100, 100)
    out = torch.empty(100, 100)

    def work() -> None:
        a.mul_(0.5)
        a.add_(b)
        torch.add(a, b, out=out)
        c = a * 2
        del c

    trace = read_chrome_document(_collect(work, profile_memory=True), "portable")
    mem = trace.memory
    names = trace.events["name"].cast(str).to_list()
    assert [names[i] for i in mem["op"].to_list() if i is not None and i >= 0] == ["aten::mul"]
    assert mem["bytes"].to_list() == [100 * 100 * 4, -(100 * 100 * 4)]


def test_an_op_that_grows_its_output_allocates_as_kinetos() -> None:
    """``out=`` into an empty tensor, or ``resize_``, allocates the new buffer in the op (and
    frees the old one): aliased by the schema, but grown. The first version of the in-place
    rule counted nothing there, and the free later said the old size (-40 for 4 MB)."""
    a, b = torch.randn(100, 100), torch.randn(100, 100)

    def work() -> None:
        e = torch.empty(0)
        torch.mm(a, b, out=e)
        f = torch.zeros(10)
        f.resize_(100, 100)
        del e, f

    trace = read_chrome_document(_collect(work, profile_memory=True), "portable")
    mem = trace.memory
    names = trace.events["name"].cast(str).to_list()
    ops = [names[i] if i is not None and i >= 0 else None for i in mem["op"].to_list()]
    size = 100 * 100 * 4
    assert list(zip(ops, mem["bytes"].to_list(), strict=True)) == [
        ("aten::empty", 0),
        ("aten::mm", size),
        ("aten::zeros", 40),
        ("aten::resize_", size),
        ("aten::resize_", -40),
        (None, -size),
        (None, -size),
    ]
    assert mem["total_allocated"].to_list()[-1] == 0


def test_with_stack_names_the_calling_line() -> None:
    x = torch.randn(4)
    doc = _collect(lambda: torch.exp(x), with_stack=True)
    (op,) = [e for e in doc["traceEvents"] if e.get("cat") == "cpu_op"]
    assert "test_collector.py" in op["args"]["Call stack"].split(";")[0]


def test_torch_compile_runs_the_compiled_artifact_without_crashing() -> None:
    torch._dynamo.reset()
    model, x = MLP((512, 1024, 1024, 10)), torch.randn(8, 512)
    compiled = torch.compile(model, backend="aot_eager")
    expected = model(x)
    out: list[Any] = []
    doc = _collect(lambda: out.append(compiled(x)))
    torch.testing.assert_close(out[0], expected)
    ops = Counter(e["name"] for e in doc["traceEvents"] if e.get("cat") == "cpu_op")
    assert ops["aten::addmm"] == 3  # the compiled graph's matmuls are still seen


def test_misuse_raises_profiler_state_error() -> None:
    collector = PortableCollector()
    with pytest.raises(ProfilerStateError):
        collector.stop()
    collector.start()
    with pytest.raises(ProfilerStateError):
        collector.start()
    collector.stop()
    assert not collector.running


def test_stop_inside_a_later_mode_is_refused_not_corrupting() -> None:
    from torch.utils._python_dispatch import TorchDispatchMode

    class UserMode(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            return func(*args, **(kwargs or {}))

    collector = PortableCollector()
    collector.start()
    user = UserMode()
    with user, pytest.raises(ProfilerStateError, match="UserMode"):
        collector.stop()
    doc = collector.stop()  # outside the user's mode it stops normally
    assert not collector.running
    assert doc["schemaVersion"] == 1


def test_a_profile_stopped_inside_a_later_mode_can_stop_again_outside_it() -> None:
    """The collector refused, but the profile had marked itself stopped first: the second
    stop() said "not started", the cycle was lost and our mode stayed on the dispatch stack."""
    from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode_stack

    import torchscope

    class UserMode(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            return func(*args, **(kwargs or {}))

    prof = torchscope.profile(backend="portable")
    prof.start()
    torch.ones(2).sum()
    with UserMode(), pytest.raises(ProfilerStateError, match="UserMode"):
        prof.stop()
    prof.stop()
    assert [e.key for e in prof.key_averages()] == ["aten::ones", "aten::sum"]
    assert _get_current_dispatch_mode_stack() == []


def test_a_second_session_starts_clean() -> None:
    x = torch.randn(4)
    collector = PortableCollector()
    collector.start()
    torch.exp(x)
    first = collector.stop()
    collector.start()
    torch.sin(x)
    second = collector.stop()
    assert [e["name"] for e in first["traceEvents"] if e.get("cat") == "cpu_op"] == ["aten::exp"]
    assert [e["name"] for e in second["traceEvents"] if e.get("cat") == "cpu_op"] == ["aten::sin"]
    assert np.isfinite(
        [e["ts"] for e in second["traceEvents"] if e.get("ph") == "X" and e.get("cat") != "Trace"]
    ).all()


def test_every_option_at_once_on_resnet18() -> None:
    model, x = resnet18().eval(), torch.randn(1, 3, 64, 64)
    doc = _collect(
        lambda: model(x),
        record_shapes=True,
        with_stack=True,
        profile_memory=True,
        with_modules=True,
        event_source=lambda device: FakeDevice(),
    )
    trace = read_chrome_document(doc, "portable")
    ops = Counter(trace.ops["name"].cast(str).to_list())
    assert ops["aten::convolution"] == 20
    kernels = Counter(trace.kernels["name"].cast(str).to_list())
    assert kernels["aten::convolution"] == 20
    # the flatten before the classifier is a view: no device event
    assert ops["aten::view"] == 1 and kernels["aten::view"] == 0
    # cudnn's empty workspaces (20) and the batch norms' detached stats (17) neither
    untimed = ("aten::view", "aten::t", "aten::empty", "aten::detach")
    assert [ops[n] for n in untimed] == [1, 1, 20, 17]
    assert trace.kernels.height == trace.ops.height - sum(ops[n] for n in untimed)
    assert Counter(trace.python_functions["name"].cast(str).to_list())["nn.Module: BasicBlock_0"] == 1
    # max_pool2d_with_indices returns two tensors: both outputs are allocations it owns
    names = trace.events["name"].cast(str).to_list()
    pool_allocs = [
        b
        for b, op in zip(trace.memory["bytes"].to_list(), trace.memory["op"].to_list(), strict=True)
        if names[op] == "aten::max_pool2d_with_indices"
    ]
    assert pool_allocs == [64 * 16 * 16 * 4, 64 * 16 * 16 * 8]


def test_labels_get_a_device_span_over_the_work_launched_inside_them() -> None:
    x = torch.randn(32, 32)

    def work() -> None:
        for step in range(3):
            with torch.autograd.profiler.record_function(f"ProfilerStep#{step}"):
                x.matmul(x).relu().sum()

    trace = read_chrome_document(_collect(work, event_source=lambda device: FakeDevice()), "portable")
    spans = trace.of_kind("device_annotation").sort("start_ns")
    assert spans["name"].cast(str).to_list() == ["ProfilerStep#0", "ProfilerStep#1", "ProfilerStep#2"]
    kernels = trace.kernels.sort("start_ns")
    for i, span in enumerate(spans.iter_rows(named=True)):
        mine = kernels.slice(3 * i, 3)  # mm, relu, sum of that step
        assert span["start_ns"] == mine["start_ns"].min()
        assert span["start_ns"] + span["dur_ns"] == (mine["start_ns"] + mine["dur_ns"]).max()
        assert span["device"] == 0 and span["stream"] == 0


def test_pairs_that_began_before_the_host_launched_the_op_are_marked() -> None:
    """An idle device reaches an op's start event while the host is still launching the op,
    and may then wait inside the pair: such pairs say so (their time is an upper bound), and
    the document counts them. A device busy with earlier work reaches them only after the host
    has returned: nothing is marked."""
    x = torch.randn(64, 64)

    def marked(busy_ns: int) -> tuple[list[int], dict[str, Any]]:
        device = FakeDevice()

        def work() -> None:
            device.enqueue(busy_ns)
            for _ in range(20):
                x.mul(2)

        # a device that cannot be held (no spin kernel): what the collector does off CUDA
        doc = _collect(work, event_source=lambda _: device)
        kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
        assert len(kernels) == 20
        return [e["args"].get("begun_before_launch", 0) for e in kernels], doc["portable"]["batches"]["cpu:0"]

    flags, stats = marked(busy_ns=0)
    assert flags == [1] * 20 and stats["begun_before_launch"] == 20 and stats["begun_before_launch_ns"] > 0
    flags, stats = marked(busy_ns=10_000_000_000)  # 10 s of queued work: the device is behind throughout
    assert flags == [0] * 20 and stats["begun_before_launch"] == 0 and stats["begun_before_launch_ns"] == 0


def test_an_idle_device_is_held_while_the_host_launches_the_op() -> None:
    """Where the device has a spin kernel (CUDA), an op found with the device idle is preceded
    by a spin as long as the op's last launch: its start event then runs once the op is
    queued, and the pair times the op, not the device's wait for the host. A device still busy
    with earlier work is not held, and holding is off unless asked for."""
    x = torch.randn(64, 64)

    def collect(busy_ns: int, **kwargs: Any) -> tuple[HoldingFakeDevice, list[dict[str, Any]], dict[str, Any]]:
        device = HoldingFakeDevice()

        def work() -> None:
            device.enqueue(busy_ns)
            for _ in range(20):
                x.mul(2)

        doc = _collect(work, event_source=lambda _: device, **kwargs)
        kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
        assert len(kernels) == 20
        return device, kernels, doc["portable"]["batches"]["cpu:0"]

    device, held, stats = collect(busy_ns=0, hold_idle_device=True)
    # a spin measured at start, then the first op's default 20 us (+ 5), later ones their last
    # launch (+ 5); an op that finds the device still spinning for the one before is not held
    assert device.holds[:2] == [1, portable.HOLD_FIRST_NS + portable.HOLD_MARGIN_NS]
    assert all(portable.HOLD_MARGIN_NS < ns <= portable.HOLD_MAX_NS + portable.HOLD_MARGIN_NS for ns in device.holds[2:])
    assert stats["held_idle"] == len(device.holds) - 1 and stats["held_idle_ns"] == sum(device.holds[1:])
    _, unheld, stats_off = collect(busy_ns=0)  # the default: not held
    assert stats_off["held_idle"] == 0 and stats_off["begun_before_launch"] == 20
    # the fake op puts no work on the device: held, its pairs time (almost) nothing; unheld,
    # each pair times the host's launch
    # each pair (medians: a host thread preempted inside one launch outlasts any spin)
    held_us = float(np.median([e["dur"] for e in held]))
    unheld_us = float(np.median([e["dur"] for e in unheld]))
    assert held_us < unheld_us / 2, (held_us, unheld_us)
    assert stats["begun_before_launch"] < 20
    # 10 s queued: busy throughout; only the first op, with no pair before it to ask, is held
    device, _, stats = collect(busy_ns=10_000_000_000, hold_idle_device=True)
    assert device.holds == [1, portable.HOLD_FIRST_NS + portable.HOLD_MARGIN_NS] and stats["held_idle"] == 1
    assert stats["begun_before_launch"] == 0


def test_labels_closed_out_of_order_keep_their_own_spans() -> None:
    """Labels pair by their record_function handle, not by nesting: `torchscope run` calls
    ``step()`` from a hook inside ``Optimizer.step``'s label, so the step's label closes before
    the optimizer's. Paired newest-first, every step was its own ~50 µs ``step()`` call, the
    first cycle lost ProfilerStep#0, and the report advised on "Python outside ops 100 %"
    (a new user's find)."""
    import time

    import torchscope

    model = torch.nn.Linear(64, 64)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    prof = torchscope.profile(backend="portable", schedule=torchscope.schedule(wait=0, warmup=1, active=5))
    opt.register_step_post_hook(lambda *_: prof.step())  # inside Optimizer.step's label, as the runner
    with prof:
        for _ in range(3):
            time.sleep(0.004)
            model(torch.randn(8, 64)).sum().backward()
            opt.step()
    labels = [(e.name, e.time_range.elapsed_us()) for e in prof.events() if e.is_user_annotation]
    steps = [us for name, us in labels if name == "ProfilerStep*"]  # torch's events() name them so
    # step 0 is the warm-up; 1 and 2 are recorded whole, 3 is the exit (from the last step())
    assert len(steps) == 3 and all(us > 4000 for us in steps[:2]), steps  # each holds its 4 ms sleep
    assert sum(name.startswith("Optimizer.step#SGD.step") for name, _ in labels) == 2


def test_a_label_still_open_at_stop_ends_there_as_kinetos() -> None:
    """A label the cycle ends inside (`torchscope run` ends a cycle from ``Optimizer.step``'s
    label; a user's label left open) ends at stop, as Kineto ends it; it was dropped, and the
    cycle's last optimizer step lost its label (a new user's find)."""
    x = torch.randn(64, 64)
    left_open = torch.autograd.profiler.record_function("never_closed")

    def work() -> None:
        with torch.autograd.profiler.record_function("closed"):
            x.mul(2)
        left_open.__enter__()
        x.mul(3)

    doc = _collect(work)
    left_open.__exit__(None, None, None)  # after the collector stopped: nothing more to pair
    labels = {e["name"]: e for e in doc["traceEvents"] if e.get("cat") == "user_annotation"}
    assert set(labels) == {"closed", "never_closed"}
    ops = [e for e in doc["traceEvents"] if e.get("cat") == "cpu_op" and e["name"] == "aten::mul"]
    late = labels["never_closed"]
    assert late["ts"] < ops[1]["ts"] and late["ts"] + late["dur"] >= ops[1]["ts"] + ops[1]["dur"]


def test_an_idle_device_does_not_start_an_op_before_its_launch() -> None:
    """The launch span opens before the op's start event is recorded: on an idle device that
    event runs at once, and with the span opened after it, 309 of 444 pairs on an H200 started
    ~1 µs before their launch, and every portable report warned "host and device clocks
    disagree". Checked on the fake device's true times (no calibration in between)."""
    x = torch.randn(64, 64)
    device = FakeDevice()
    collector = PortableCollector(event_source=lambda _: device)
    collector.start()
    anchors = len(device.recorded)  # the calibration's
    for _ in range(50):
        x.mul(2)
    pairs = device.recorded[anchors : anchors + 100]
    collector.stop()
    launches = [op[4] for op in collector._ops if op[9] is not None]  # each timed op's launch start
    assert len(launches) == 50
    assert all(start.true_host_ns >= t for start, t in zip(pairs[0::2], launches, strict=True))
