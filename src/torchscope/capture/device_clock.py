"""Device timing without Kineto: device events, their clock, and their batched resolution.

A device without CUPTI/Kineto still has timing events (``torch.Event(device,
enable_timing=True)`` on CUDA, XPU, MPS and PrivateUse1 backends). An event only tells the
*elapsed* device time between two events, in float milliseconds, and only once both have
completed. Turning that into host timestamps needs three pieces, kept apart here so a test
can inject a fake device whose clock is skewed and drifting:

``EventSource``
    records events, asks whether they completed, and reads elapsed time. ``TorchEventSource``
    wraps the public torch API and pools events so the hot path does not allocate.

``DeviceClock``
    maps device offsets (ns since the first anchor) to the host clock. It keeps calibration
    points: the device is synchronized, an event is recorded and waited for, and the host
    time around it is taken (the DIPU way). Between two calibration points device time is
    scaled by the measured ratio, so a clock that is offset *and* drifts linearly is
    corrected exactly up to the calibration error.

``EventBatcher``
    holds (start, end) event pairs of ops without synchronizing after each op. Every
    ``anchor_every`` pairs, or when ``anchor_interval_ns`` of host time passed since the last
    one (``before_op()``), it records an *anchor* event; each pair is read relative to its
    anchor, and anchors relative to each other, so the float32 milliseconds a CUDA event
    returns never cover more than one short batch (float32 ms loses a microsecond after ~10 s).
    When more than ``max_outstanding`` pairs wait, it resolves what has completed and, only if
    still over the bound, waits on the *oldest* event (not the whole device) until half the
    bound is free. Memory and event count stay bounded on long runs.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

NS_PER_MS = 1_000_000


class EventSource(Protocol):
    """The device operations the portable collector needs; one source per device."""

    def record(self, stream: Any = None) -> Any:
        """Record a timing event on ``stream`` (the current stream when None)."""
        ...

    def query(self, event: Any) -> bool:
        """Whether the event has completed on the device (never blocks)."""
        ...

    def wait(self, event: Any) -> None:
        """Block the host until the event has completed."""
        ...

    def elapsed_ms(self, start: Any, end: Any) -> float:
        """Device milliseconds from ``start`` to ``end`` (both completed)."""
        ...

    def release(self, event: Any) -> None:
        """Hand a resolved event back for reuse."""
        ...

    def synchronize(self) -> None:
        """Wait until all work queued on the device has finished."""
        ...


def host_ns() -> int:
    """The host clock every event of a portable trace is stamped with (monotonic, ns)."""
    return time.perf_counter_ns()


class TorchEventSource:
    """``EventSource`` over ``torch.Event`` for one accelerator device (public API only)."""

    def __init__(self, device: Any) -> None:
        import torch

        self._torch = torch
        self.device = torch.device(device)
        self._pool: list[Any] = []
        self._cycles_per_ns: float | None = None  # of the spin kernel, once measured

    def can_hold(self) -> bool:
        """Whether ``hold`` can keep this device busy: CUDA and ROCm builds have a spin kernel
        (``torch.cuda._sleep``); other backends have no public one."""
        return self.device.type == "cuda" and callable(getattr(self._torch.cuda, "_sleep", None))

    def hold(self, ns: int) -> None:
        """Queue a kernel that keeps the device busy for about ``ns`` (at least that long when
        its clock runs below the fastest rate measured), on the current stream."""
        if self._cycles_per_ns is None:
            self._cycles_per_ns = self._measure_spin()
        self._torch.cuda._sleep(max(1, int(ns * self._cycles_per_ns)))

    def _measure_spin(self, cycles: int = 2_000_000, tries: int = 4) -> float:
        """Spin cycles per device nanosecond, at the fastest clock of a few timed spins: a clock
        that later runs slower only makes a hold longer, never shorter than asked."""
        torch = self._torch
        best = 0.0
        for _ in range(tries):
            a = torch.Event(self.device, enable_timing=True)
            b = torch.Event(self.device, enable_timing=True)
            a.record()
            torch.cuda._sleep(cycles)
            b.record()
            b.synchronize()
            best = max(best, cycles / max(a.elapsed_time(b) * NS_PER_MS, 1.0))
        return best

    def record(self, stream: Any = None) -> Any:
        ev = self._pool.pop() if self._pool else self._torch.Event(self.device, enable_timing=True)
        if stream is None:
            ev.record()
        else:
            ev.record(stream)
        return ev

    def query(self, event: Any) -> bool:
        return bool(event.query())

    def wait(self, event: Any) -> None:
        event.synchronize()

    def elapsed_ms(self, start: Any, end: Any) -> float:
        return float(start.elapsed_time(end))

    def release(self, event: Any) -> None:
        if len(self._pool) < 65536:
            self._pool.append(event)

    def synchronize(self) -> None:
        self._torch.accelerator.synchronize(self.device)


@dataclass(frozen=True)
class Calibration:
    """One point of agreement between the two clocks."""

    host_ns: int  # host time at which the calibration event ran on the device
    device_ns: float  # the same instant as a device offset (ns since the first anchor)
    uncertainty_ns: int  # half the host window the event was bracketed by


class DeviceClock:
    """Piecewise-linear map from device offsets to host ns, built from calibration points."""

    def __init__(self) -> None:
        self.points: list[Calibration] = []

    def add(self, point: Calibration) -> None:
        if self.points and point.device_ns <= self.points[-1].device_ns:
            return  # a point that adds no time cannot define a slope
        self.points.append(point)

    @property
    def ratios(self) -> list[float]:
        """Host ns per device ns between consecutive calibration points (1.0 = no drift)."""
        p = self.points
        return [(b.host_ns - a.host_ns) / (b.device_ns - a.device_ns) for a, b in zip(p, p[1:], strict=False)]

    def to_host(self, device_ns: np.ndarray) -> np.ndarray:
        """Convert device offsets to integer host ns; outside the points, extend the end segments."""
        if not self.points:
            raise ValueError("the device clock has no calibration point")
        d = np.asarray(device_ns, dtype=np.float64)
        xs = np.array([p.device_ns for p in self.points], dtype=np.float64)
        ys = np.array([p.host_ns for p in self.points], dtype=np.float64)
        if len(xs) == 1:
            out = ys[0] + (d - xs[0])
        else:
            out = np.interp(d, xs, ys)
            lo_slope = (ys[1] - ys[0]) / (xs[1] - xs[0])
            hi_slope = (ys[-1] - ys[-2]) / (xs[-1] - xs[-2])
            out = np.where(d < xs[0], ys[0] + (d - xs[0]) * lo_slope, out)
            out = np.where(d > xs[-1], ys[-1] + (d - xs[-1]) * hi_slope, out)
        return np.rint(out).astype(np.int64)


@dataclass
class _Anchor:
    event: Any
    offset_ns: float | None = None  # ns since the first anchor, known once resolved
    refs: int = 0  # pending pairs read against this anchor
    superseded: bool = False  # a later anchor has been resolved against this one


@dataclass
class _Pending:
    key: int
    start: Any
    end: Any
    anchor: _Anchor


class EventBatcher:
    """Bounded queue of device event pairs, resolved in batches into device offsets.

    ``calibrate()`` first (it records the first anchor); then ``push(key, start, end)`` never
    blocks unless ``max_outstanding`` pairs are unresolved. Resolved pairs collect in
    ``resolved_*`` as device offsets, which ``host_times()`` converts with the clock.
    ``calibrate()`` synchronizes the device and adds a calibration point: the collector calls
    it at start and stop, and whenever a synchronization is acceptable anyway.
    """

    def __init__(
        self,
        source: EventSource,
        *,
        max_outstanding: int = 2048,
        anchor_every: int = 256,
        anchor_interval_ns: int = 200_000_000,
        clock: Callable[[], int] = host_ns,
    ) -> None:
        if max_outstanding < 2:
            raise ValueError("max_outstanding must be at least 2")
        self.source = source
        self.max_outstanding = max_outstanding
        self.anchor_every = max(1, anchor_every)
        self.anchor_interval_ns = anchor_interval_ns
        self._anchor_host = 0  # host time the current anchor was recorded at
        self.host_clock = clock
        self.clock = DeviceClock()
        self.pending: deque[_Pending] = deque()
        self.resolved_keys: list[int] = []
        self.resolved_start: list[float] = []
        self.resolved_end: list[float] = []
        self.waits = 0  # how often the bound forced a wait on an event
        self.peak_outstanding = 0
        self._anchors: deque[_Anchor] = deque()  # recorded, not yet resolved, oldest first
        self._last: _Anchor | None = None  # the newest resolved anchor
        self._anchor: _Anchor | None = None  # the anchor new pairs are read against
        self._since_anchor = 0

    # -- recording ----------------------------------------------------------------------
    def calibrate(self, tries: int = 5) -> Calibration:
        """Pin the device clock to the host clock; keeps the tightest of ``tries`` brackets.

        Each try synchronizes the device, takes the host time, records an anchor, waits for
        it and takes the host time again; the anchor ran inside that window, so its midpoint
        is the host time of the anchor within half the window. The first try pays cold-path
        costs (a window of tens of microseconds); the best of a few is usually ~1 us.
        """
        brackets = []
        for _ in range(max(1, tries)):
            self.source.synchronize()
            before = self.host_clock()
            anchor = self._new_anchor()
            self.source.wait(anchor.event)
            after = self.host_clock()
            brackets.append((after - before, before, anchor))
        self._drain(block_until=0)  # everything up to the last anchor has completed
        self._anchor_host = self.host_clock()
        width, before, anchor = min(brackets, key=lambda b: b[0])
        assert anchor.offset_ns is not None
        point = Calibration(before + width // 2, anchor.offset_ns, width // 2)
        self.clock.add(point)
        return point

    def push(self, key: int, start: Any, end: Any) -> None:
        """Queue an op's (start, end) events, recorded after the current anchor."""
        anchor = self._anchor
        if anchor is None:
            raise RuntimeError("EventBatcher.calibrate() must run before push()")
        anchor.refs += 1
        self.pending.append(_Pending(key, start, end, anchor))
        self._since_anchor += 1
        if self._since_anchor >= self.anchor_every:
            self._new_anchor()  # recorded after ``end``: the next pairs are read against it
        n = len(self.pending)
        if n > self.peak_outstanding:
            self.peak_outstanding = n
        if n >= self.max_outstanding:
            self._drain(block_until=self.max_outstanding // 2)

    def before_op(self) -> None:
        """Call before recording an op's start event: re-anchors after a long host pause.

        After an idle minute the next pair would otherwise be read against an anchor a minute
        old, in float32 milliseconds (~4 us granularity); a fresh anchor keeps reads short.
        """
        now = self.host_clock()
        if self._anchor is not None and now - self._anchor_host > self.anchor_interval_ns:
            self._new_anchor()
            self._anchor_host = now

    def drained(self) -> bool:
        """Whether the device has finished every pair pushed so far (it may be idle now):
        the newest pair's end event has completed. Never blocks."""
        return not self.pending or self.source.query(self.pending[-1].end)

    def flush(self) -> None:
        """Resolve everything still pending (waits for the device)."""
        self._drain(block_until=0)

    # -- resolution ---------------------------------------------------------------------
    def _new_anchor(self) -> _Anchor:
        anchor = _Anchor(self.source.record())
        self._anchors.append(anchor)
        self._anchor = anchor
        self._since_anchor = 0
        return anchor

    def _maybe_release(self, anchor: _Anchor) -> None:
        if anchor.superseded and anchor.refs == 0 and anchor is not self._anchor:
            self.source.release(anchor.event)

    def _resolve_anchors(self, upto: _Anchor | None, block: bool) -> None:
        """Resolve anchors in order, up to and including ``upto`` (all when None)."""
        while self._anchors:
            anchor = self._anchors[0]
            if not self.source.query(anchor.event):
                if not block:
                    return
                self.source.wait(anchor.event)
            prev = self._last
            if prev is None:
                anchor.offset_ns = 0.0
            else:
                assert prev.offset_ns is not None
                step = self.source.elapsed_ms(prev.event, anchor.event) * NS_PER_MS
                anchor.offset_ns = prev.offset_ns + step
                prev.superseded = True
                self._maybe_release(prev)
            self._last = anchor
            self._anchors.popleft()
            if anchor is upto:
                return

    def _drain(self, block_until: int) -> None:
        """Resolve completed pairs in order; while more than ``block_until`` remain, wait."""
        src = self.source
        while self.pending:
            p = self.pending[0]
            if not src.query(p.end):
                if len(self.pending) <= block_until:
                    break
                if block_until:
                    self.waits += 1
                src.wait(p.end)
            anchor = p.anchor
            if anchor.offset_ns is None:
                self._resolve_anchors(upto=anchor, block=True)
            base = anchor.offset_ns
            assert base is not None
            self.resolved_keys.append(p.key)
            self.resolved_start.append(base + src.elapsed_ms(anchor.event, p.start) * NS_PER_MS)
            self.resolved_end.append(base + src.elapsed_ms(anchor.event, p.end) * NS_PER_MS)
            src.release(p.start)
            src.release(p.end)
            anchor.refs -= 1
            self._maybe_release(anchor)
            self.pending.popleft()
        self._resolve_anchors(upto=None, block=block_until == 0 and not self.pending)

    def host_times(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(keys, start_host_ns, end_host_ns) of every resolved pair."""
        keys = np.asarray(self.resolved_keys, dtype=np.int64)
        start = self.clock.to_host(np.asarray(self.resolved_start, dtype=np.float64))
        end = self.clock.to_host(np.asarray(self.resolved_end, dtype=np.float64))
        return keys, start, end
