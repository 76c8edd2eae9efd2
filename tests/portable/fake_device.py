"""A fake accelerator for the portable collector's tests: skewed, drifting, float32-precise.

Its device clock reads ``skew_ns + (1 + drift) * host_ns``, quantized to ``quantum_ns`` the
way real timing events are, and ``elapsed_ms`` returns float32 milliseconds like
``cudaEventElapsedTime``. Work queues up: ``enqueue(ns)`` keeps the device busy, events
complete only when the device has reached them, and ``wait``/``synchronize`` advance a
``VirtualClock`` (or, on the real clock, see the work as already done). Each event remembers
the true host time at which it ran, which is what converted times are checked against.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np


class VirtualClock:
    """A host clock the test moves by hand; every read costs ``tick_ns``, like a real call."""

    def __init__(self, start_ns: int = 1_000_000_000, tick_ns: int = 250) -> None:
        self.now = start_ns
        self.tick_ns = tick_ns

    def __call__(self) -> int:
        self.now += self.tick_ns
        return self.now

    def advance(self, ns: int) -> None:
        self.now += ns


@dataclass
class FakeEvent:
    true_host_ns: float  # host time at which the device reached the event
    device_ns: int  # what the device clock read then (quantized)


class FakeDevice:
    """An ``EventSource`` whose clock disagrees with the host's in offset and rate."""

    def __init__(
        self,
        clock: Any = None,
        *,
        skew_ns: int = 123_456_789_012,
        drift: float = 80e-6,
        quantum_ns: int = 500,
    ) -> None:
        self.clock = clock if clock is not None else time.perf_counter_ns
        self.virtual = isinstance(self.clock, VirtualClock)
        self.skew_ns = skew_ns
        self.drift = drift
        self.quantum_ns = quantum_ns
        self.busy_until = 0.0  # host ns at which queued work finishes
        self.recorded: list[FakeEvent] = []
        self.released = 0
        self.syncs = 0

    def _now(self) -> int:
        return self.clock.now if self.virtual else self.clock()

    def device_clock(self, host_ns: float) -> int:
        raw = self.skew_ns + (1.0 + self.drift) * host_ns
        return int(raw // self.quantum_ns * self.quantum_ns)

    # -- EventSource ----------------------------------------------------------------------
    def record(self, stream: Any = None) -> FakeEvent:
        at = max(float(self._now()), self.busy_until)
        ev = FakeEvent(at, self.device_clock(at))
        self.recorded.append(ev)
        return ev

    def enqueue(self, work_ns: int) -> None:
        self.busy_until = max(float(self._now()), self.busy_until) + work_ns

    def query(self, event: FakeEvent) -> bool:
        return not self.virtual or event.true_host_ns <= self.clock.now

    def wait(self, event: FakeEvent) -> None:
        if self.virtual and event.true_host_ns > self.clock.now:
            self.clock.now = int(np.ceil(event.true_host_ns))

    def elapsed_ms(self, start: FakeEvent, end: FakeEvent) -> float:
        return float(np.float32((end.device_ns - start.device_ns) / 1e6))

    def release(self, event: FakeEvent) -> None:
        self.released += 1

    def synchronize(self) -> None:
        self.syncs += 1
        if self.virtual and self.busy_until > self.clock.now:
            self.clock.now = int(np.ceil(self.busy_until))


class HoldingFakeDevice(FakeDevice):
    """A ``FakeDevice`` with a spin kernel (``hold``, as CUDA's ``torch.cuda._sleep``) whose
    events complete when the real host clock reaches them, so that a busy device reads busy."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.holds: list[int] = []

    def can_hold(self) -> bool:
        return True

    def hold(self, ns: int) -> None:
        self.holds.append(ns)
        self.enqueue(ns)

    def query(self, event: FakeEvent) -> bool:
        return event.true_host_ns <= self._now()
