"""What keeps ``torchscope run`` bounded on a script that runs for hours: a default schedule
over the optimizer steps it sees, and a cap on the memory one cycle's recording may take.

Recording a whole run is what a user asks for least and pays for most: a small-op loop left
running for 6 s wrote a 2.5 GB trace and building its report reached 24 GB of RSS. Kineto holds
about 0.5 KB per event while recording and several KB per event while its results are turned
into a trace, so the only bound that holds for any script is on what one cycle records.

``DefaultSchedule``: the start of the run (setup and the first steps: compilation, warm-up,
first allocations) is one cycle; then, after skipping steps, a few short steady-state cycles.
A script with fewer steps than that is recorded whole, as before.

``RecordingCap``: a watchdog thread compares the process's resident memory with what it was
when the cycle began (or, for the first cycle, when the first optimizer step ended: building the
model, its first activations and the optimizer's state are the script's memory, not the
profiler's; before that step the allowance is ``SETUP_FACTOR`` times the cap); past the cap it
asks the main thread (where the profiler lives: Kineto's
session belongs to the thread that started it) to stop recording, through CPython's pending
calls, which run between two bytecodes of the main thread, never inside an op. The cap ends
the cycle it caught, not the run: a model's first step (its weights, gradients and optimizer
state, all of which count as growth) can pass the cap while the schedule's steady-state cycles
later stay far below it, and those are the ones a user wants.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from torchscope.capture.schedule import Action
from torchscope.process_memory import rss_mb
from torchscope.runner.tool_thread import ToolThread

# Kineto holds ~0.5 KB per event while recording and its stop costs several KB and ~60 us per
# event (24 s and 1.8 GB for 400k events on a 2-core machine); five steps of ResNet-18 on CPU
# with shapes add ~65 MB, and a 60 s small-op loop (no steps: 2 caps) writes ~175 MB of trace
DEFAULT_CAP_MB = 96
SETUP_FACTOR = 2  # the allowance before the first optimizer step, in caps
DEFAULT_REPEAT = 3  # cycles of a --wait/--warmup/--active schedule without --repeat
# how long the cap waits, over the cap, for a device runtime that is starting to finish (its
# context and libraries, not our recording, are what grew: 253 MB for CUDA on an H200)
RUNTIME_START_S = 2.0
# and what a started CUDA runtime adds before the first optimizer step ends: cuBLAS/cuDNN
# handles and the kernels it loads on first use (199 MB after the context, on an H200)
RUNTIME_FIRST_STEP_MB = 512


def cuda_ready() -> bool | None:
    """Whether the CUDA runtime has started in this process (None: no CUDA device, or torch.cuda
    never imported).

    Read from the cap's thread: creating a CUDA context adds hundreds of MB to the process,
    which is the script's, not the profiler's."""
    import sys

    cuda = sys.modules.get("torch.cuda")
    if cuda is None:
        return None
    try:
        if cuda.is_initialized():
            return True
        return False if cuda.is_available() else None  # no device: nothing will start
    except Exception:  # noqa: BLE001 - a half-imported module: treat as not started
        return None


@dataclass(frozen=True)
class DefaultSchedule:
    """Steps ``0 .. head-1`` (with the setup before them), then ``cycles`` cycles of ``wait``
    skipped steps, ``warmup`` and ``active`` recorded ones; nothing after."""

    head: int = 5
    wait: int = 14
    warmup: int = 1
    active: int = 3
    cycles: int = 2

    def __call__(self, step: int) -> Action:
        if step < self.head:
            return Action.RECORD_AND_SAVE if step == self.head - 1 else Action.RECORD
        period = self.wait + self.warmup + self.active
        rel = step - self.head
        if rel >= self.cycles * period:
            return Action.NONE
        k = rel % period
        if k < self.wait:
            return Action.NONE
        if k < self.wait + self.warmup:
            return Action.WARMUP
        return Action.RECORD_AND_SAVE if k == period - 1 else Action.RECORD

    def recorded(self) -> list[tuple[int, int]]:
        """The recorded step ranges (first, last), in order."""
        period = self.wait + self.warmup + self.active
        out = [(0, self.head - 1)]
        for i in range(self.cycles):
            first = self.head + i * period + self.wait + self.warmup
            out.append((first, first + self.active - 1))
        return out

    def describe(self, steps: int | None = None, cuts: tuple[int, ...] = ()) -> str:
        """What the schedule recorded; with the run's ``steps``, what share of them (a run of
        3,000 steps read "recorded steps 0–4, 20–22, 38–40" without saying it was 11 of them).

        ``cuts``: the steps in which the memory cap ended a cycle. Such a cycle holds only its
        whole steps before the cut: a CPU run whose first step outgrew the setup allowance read
        "recorded 5 of the run's 7 steps (0–4)" when its trace held none of them whole.
        """
        spans = ", ".join(f"{a}–{b}" for a, b in self.recorded())
        if steps is None:
            what = f"recorded steps {spans}"
        else:  # the spans the run reached, as far as it went
            reached = [(a, min(b, steps - 1)) for a, b in self.recorded() if a < steps]
            done, said = 0, []
            for a, b in reached:
                cut = next((c for c in cuts if a <= c <= b), None)
                whole = b if cut is None else cut - 1
                done += max(0, whole - a + 1)
                span = f"{a}–{whole}" if whole > a else f"{a}" if whole == a else ""
                if cut is not None:
                    span = f"{span}, then" if span else f"none of {a}–{b}:"
                    span += f" the memory cap cut step {cut}"
                said.append(span)
            joined = ("; " if any(a <= c <= b for a, b in reached for c in cuts) else ", ").join(said)
            what = f"recorded {done:,} of the run's {steps:,} steps ({joined})"
        return (
            f"default schedule: {what}, the first with the setup before it; "
            "choose others with --wait/--warmup/--active/--repeat, or record everything with --all"
        )


_PENDING_CALL = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)


class RecordingCap:
    """Stops recording when a cycle's memory grows past ``cap_mb``; ``stop`` runs on the main thread.

    ``recording()`` says whether a cycle is being recorded now (read from the watchdog thread);
    ``stop`` is called once, on the main thread, with the growth in MB, unless ``busy()`` says
    the main thread is inside our own profiler code, in which case the caller of ``busy`` runs
    ``fire_if_due()`` when it leaves it.
    """

    def __init__(
        self,
        cap_mb: float,
        recording: Callable[[], Any],
        stop: Callable[[float], None],
        *,
        interval_s: float = 0.05,
        runtime_ready: Callable[[], bool | None] = cuda_ready,
    ) -> None:
        self.cap_mb = cap_mb
        self._runtime_ready = runtime_ready
        self._recording = recording
        self._stop = stop
        self._interval_s = interval_s
        self._worker: ToolThread | None = None
        self.busy = False  # set by the runner around its own calls into the profiler
        self._due: float | None = None  # growth in MB, once the cap is reached
        self._rebase = False  # set on the main thread at the first optimizer step
        self._stepped = False
        # the callback object must outlive the pending call
        self._callback = _PENDING_CALL(self._on_main_thread)

    def start(self) -> None:
        if rss_mb() is None:  # no way to measure here: the cap cannot work, say nothing
            return
        self._worker = ToolThread(self._watch, self._interval_s)
        self._worker.start()

    @property
    def own_thread(self) -> int | None:
        """The native id of the watching thread (None when it does not run): the tool's."""
        return self._worker.native_id if self._worker is not None else None

    def first_step(self) -> None:
        """The first optimizer step ended: measure the cycle from here, at the plain cap."""
        self._stepped = self._rebase = True

    def stop_watching(self) -> None:
        if self._worker is not None:
            self._worker.stop(timeout=1.0)

    def _watch(self, stopped: Callable[[], bool]) -> None:
        session: Any = None
        capped: Any = None  # the cycle the cap last stopped: not measured again
        base = 0.0
        started = None  # whether the device runtime had started when the cycle was based
        waited = 0.0  # seconds over the cap while waiting for a starting runtime
        while not stopped():
            current = self._recording()
            if current is None or current is capped:
                session = None
                continue
            rss = rss_mb() or 0.0
            ready = self._runtime_ready()
            if current is not session or self._rebase or (started is False and ready):
                # a new cycle began, or the first step ended, or the device runtime has just
                # started (its context is the script's memory): measure from here
                session, base, self._rebase, started, waited = current, rss, False, ready, 0.0
                continue
            allowed = self.cap_mb * (1 if self._stepped else SETUP_FACTOR)
            if ready and not self._stepped:
                allowed += RUNTIME_FIRST_STEP_MB
            if self._due is None and rss - base > allowed:
                if started is False and waited < RUNTIME_START_S:
                    waited += self._interval_s  # perhaps the runtime starting: let it finish
                    continue
                # the cap ends this cycle; the schedule's later cycles are measured afresh
                self._due, capped, session = rss - base, current, None
                ctypes.pythonapi.Py_AddPendingCall(self._callback, None)

    def _on_main_thread(self, _arg: Any) -> int:
        # runs between two bytecodes of the main thread: must never raise into the script
        try:
            if not self.busy:
                self.fire_if_due()
        except Exception:  # noqa: BLE001, S110 - the script's code is below us
            pass
        return 0

    def fire_if_due(self) -> None:
        if self._due is None:
            return
        due, self._due = self._due, None
        self._stop(due)
