"""Device-time conversion and batching against a fake device whose clock is skewed and drifting.

The truth is known for every event (the host time at which the fake device reached it), so
the checks are the ones a user relies on: converted times within 1 µs of the truth, a
bounded number of unresolved events, and no full-device synchronization per op.
"""

from __future__ import annotations

import numpy as np
import pytest

from torchscope.capture.device_clock import Calibration, DeviceClock, EventBatcher

from .fake_device import FakeDevice, VirtualClock


def _run(
    n_ops: int,
    *,
    launch_ns: int,
    work_ns: int,
    drift: float = 80e-6,
    max_outstanding: int = 512,
    anchor_every: int = 256,
    idle_every: int = 0,
    anchor_interval_ns: int = 200_000_000,
) -> tuple[FakeDevice, EventBatcher, np.ndarray, np.ndarray, np.ndarray]:
    """Launch ``n_ops`` ops on a fake device and return the converted and true times."""
    clock = VirtualClock()
    dev = FakeDevice(clock, drift=drift)
    batcher = EventBatcher(
        dev,
        max_outstanding=max_outstanding,
        anchor_every=anchor_every,
        anchor_interval_ns=anchor_interval_ns,
        clock=clock,
    )
    batcher.calibrate()
    truth: dict[int, tuple[float, float]] = {}
    for i in range(n_ops):
        clock.advance(launch_ns)
        batcher.before_op()
        start = dev.record()
        dev.enqueue(work_ns)
        end = dev.record()
        truth[i] = (start.true_host_ns, end.true_host_ns)
        batcher.push(i, start, end)
        if idle_every and i % idle_every == idle_every - 1:
            clock.advance(50_000_000)  # the host pauses (data loading): the device drains
    batcher.flush()
    batcher.calibrate()
    keys, starts, ends = batcher.host_times()
    true_start = np.array([truth[k][0] for k in keys.tolist()])
    true_end = np.array([truth[k][1] for k in keys.tolist()])
    return dev, batcher, keys, starts - true_start, ends - true_end


def test_skewed_drifting_clock_converts_within_one_microsecond() -> None:
    # 20k ops over ~40 s of host time, with the device 2 minutes ahead and 80 ppm fast:
    # uncorrected, the drift alone would be 3.2 ms off by the end.
    dev, batcher, keys, err_start, err_end = _run(20_000, launch_ns=2_000_000, work_ns=1_500_000)
    assert keys.tolist() == list(range(20_000))
    assert np.abs(err_start).max() < 1_000
    assert np.abs(err_end).max() < 1_000
    (ratio,) = batcher.clock.ratios
    assert ratio == pytest.approx(1 / (1 + 80e-6), rel=1e-7)


def test_device_behind_the_host_is_bounded_and_still_exact() -> None:
    # The device is slower than the launches, so work piles up: the batcher must bound the
    # queue by waiting on the oldest event, not by synchronizing the device per op.
    dev, batcher, keys, err_start, err_end = _run(
        5_000, launch_ns=10_000, work_ns=40_000, max_outstanding=64, idle_every=1_000
    )
    assert batcher.peak_outstanding <= 64
    assert batcher.waits > 0
    assert dev.syncs == 2 * 5  # two calibrations of 5 tries each, nothing per op
    assert len(keys) == 5_000
    assert np.abs(err_start).max() < 1_000
    assert np.abs(err_end).max() < 1_000
    assert not batcher.pending


def test_events_resolve_lazily_while_the_device_keeps_up() -> None:
    # A device that finishes every op before the next launch needs no waits at all.
    dev, batcher, keys, err_start, _ = _run(3_000, launch_ns=100_000, work_ns=20_000, max_outstanding=128)
    assert batcher.waits == 0
    assert batcher.peak_outstanding <= 128
    assert np.abs(err_start).max() < 1_000


def test_anchors_keep_float32_milliseconds_precise_on_long_runs() -> None:
    # float32 ms reads whole microseconds wrong beyond ~10 s from the reference event; anchors
    # (every 256 ops or 200 ms) keep every read short. Without anchors the run is visibly off.
    _, _, _, err_anchor, _ = _run(2_000, launch_ns=30_000_000, work_ns=1_000_000)
    _, _, _, err_single, _ = _run(
        2_000, launch_ns=30_000_000, work_ns=1_000_000, anchor_every=10**9, anchor_interval_ns=10**15
    )
    assert np.abs(err_anchor).max() < 1_000
    assert np.abs(err_single).max() > 1_000


def test_a_long_host_pause_gets_a_fresh_anchor() -> None:
    # 60 s of host idle between two ops: the op after the pause is read against an anchor
    # recorded after it, not one a minute old in float32 ms (~4 us granularity).
    clock = VirtualClock()
    dev = FakeDevice(clock)
    batcher = EventBatcher(dev, clock=clock)
    batcher.calibrate()
    truth = []
    for i, pause in enumerate((1_000, 60_000_000_000, 1_000)):
        clock.advance(pause)
        batcher.before_op()
        start = dev.record()
        dev.enqueue(3_000)
        end = dev.record()
        truth.append(start.true_host_ns)
        batcher.push(i, start, end)
    batcher.flush()
    batcher.calibrate()
    keys, starts, _ = batcher.host_times()
    assert np.abs(starts - np.array(truth)).max() < 1_000


def test_every_event_goes_back_to_the_pool() -> None:
    dev, batcher, *_ = _run(1_000, launch_ns=50_000, work_ns=30_000, anchor_every=100)
    # 2 per op, anchors all but the newest; the calibration anchors are anchors too
    assert dev.released >= 2 * 1_000 + 10 - 1


def test_clock_with_one_point_is_an_offset_and_extrapolates_past_the_ends() -> None:
    clock = DeviceClock()
    clock.add(Calibration(host_ns=5_000, device_ns=0.0, uncertainty_ns=10))
    assert clock.to_host(np.array([0.0, 1_000.0])).tolist() == [5_000, 6_000]
    clock.add(Calibration(host_ns=1_005_000, device_ns=2_000_000.0, uncertainty_ns=10))
    # half speed between the points, and beyond them on the same line
    assert clock.to_host(np.array([1_000_000.0, 4_000_000.0, -2_000.0])).tolist() == [
        505_000,
        2_005_000,
        4_000,
    ]


def test_push_before_calibrate_is_refused() -> None:
    batcher = EventBatcher(FakeDevice(VirtualClock()))
    with pytest.raises(RuntimeError, match="calibrate"):
        batcher.push(0, object(), object())
