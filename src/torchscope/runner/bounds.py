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
from torchscope.process_memory import return_free_memory, rss_mb
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
# The peaks of a CPU model's steps (its activations come and go each step) differ from step to
# step: a CNN's 38 steps peaked at 833-904 MB, and step 1 at 849 MB after step 0's 770 MB. A
# cycle measured from the last step's peak may pass it by this share of that peak, at most by
# that step's own rise and fall (its activations): a device's steps, whose host memory hardly
# moves, keep the plain cap.
STEP_JITTER = 0.1


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

    def describe(
        self, steps: int | None = None, cuts: tuple[int, ...] = (), resumed: tuple[int, ...] = ()
    ) -> str:
        """What the schedule recorded; with the run's ``steps``, what share of them (a run of
        3,000 steps read "recorded steps 0–4, 20–22, 38–40" without saying it was 11 of them).

        ``cuts``: the steps in which the memory cap ended a cycle (its warm-up step included);
        ``resumed``: the steps from whose start a cut cycle recorded again. A cycle holds only
        its whole steps: a CPU run whose first step outgrew the setup allowance read "recorded
        5 of the run's 7 steps (0–4)" when its trace held none of them whole.
        """
        spans = ", ".join(f"{a}–{b}" for a, b in self.recorded())
        if steps is None:
            what = f"recorded steps {spans}"
        else:  # the spans the run reached, as far as it went
            reached = [(a, min(b, steps - 1)) for a, b in self.recorded() if a < steps]
            done, said, any_cut = 0, [], False
            for a, b in reached:
                first = a - (self.warmup if a else 0)  # a cut in the warm-up step ends the span too
                cut_here = sorted(c for c in cuts if first <= c <= b)
                whole: list[int] = []
                recording = not any(c < a for c in cut_here)
                for step in range(a, b + 1):
                    recording |= step in resumed
                    if step in cut_here:
                        recording = False
                    elif recording:
                        whole.append(step)
                done += len(whole)
                text = ", ".join(_ranges(whole))
                if cut_here:
                    any_cut = True
                    cut = " and ".join(str(c) for c in cut_here)
                    text = (
                        f"{text}, with step{'s' if len(cut_here) > 1 else ''} {cut} cut by the memory cap"
                        if whole
                        else f"none of {a}–{b}: the memory cap cut step{'s' if len(cut_here) > 1 else ''} {cut}"
                    )
                said.append(text)
            joined = ("; " if any_cut else ", ").join(said)
            what = f"recorded {done:,} of the run's {steps:,} steps ({joined})"
        return (
            f"default schedule: {what}, the first with the setup before it; "
            "choose others with --wait/--warmup/--active/--repeat, or record everything with --all"
        )


def _ranges(steps: list[int]) -> list[str]:
    """``[1, 2, 3, 7]`` -> ``["1–3", "7"]``."""
    runs: list[list[int]] = []
    for step in steps:
        if runs and step == runs[-1][-1] + 1:
            runs[-1].append(step)
        else:
            runs.append([step])
    return [f"{r[0]}–{r[-1]}" if len(r) > 1 else str(r[0]) for r in runs]


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
        warming: Callable[[], bool] = lambda: False,
    ) -> None:
        self.cap_mb = cap_mb
        self._runtime_ready = runtime_ready
        self._warming = warming
        self._steps_ended = 0  # optimizer steps ended (set on the main thread): the step peaks
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

    def step_ended(self) -> None:
        """An optimizer step ended: the watchdog keeps the peak each step reaches."""
        self._steps_ended += 1

    def stop_watching(self) -> None:
        if self._worker is not None:
            self._worker.stop(timeout=1.0)

    def _watch(self, stopped: Callable[[], bool]) -> None:
        session: Any = None
        capped: Any = None  # the cycle the cap last stopped: not measured again
        base = 0.0
        started = None  # whether the device runtime had started when the cycle was based
        waited = 0.0  # seconds over the cap while waiting for a starting runtime
        seen = 0
        step_peak = step_low = last_peak = 0.0  # the step going on's peak and low; the last one's peak
        jitter = 0.0  # what a step's peak may pass the last one's by (``STEP_JITTER``)
        while not stopped():
            rss = rss_mb() or 0.0
            ended = self._steps_ended
            if ended != seen:  # a step ended since the last look
                jitter = min(STEP_JITTER * step_peak, step_peak - step_low)
                seen, last_peak, step_peak, step_low = ended, step_peak, rss, rss
            step_peak, step_low = max(step_peak, rss), min(step_low, rss)
            current = self._recording()
            if current is None or current is capped:
                session = None
                continue
            ready = self._runtime_ready()
            if current is not session or self._rebase or (started is False and ready):
                # a new cycle began, or the first step ended, or the device runtime has just
                # started (its context is the script's memory): measure from here, and from no
                # lower than the peak the last step reached. A model's activations come and go
                # with each step: on the CPU they are resident memory, and a CNN's (~200 MB a
                # forward pass) passed the cap in every cycle, measured from a step's end
                base = max(rss, last_peak)
                session, self._rebase, started, waited = current, False, ready, 0.0
                continue
            if self._warming():
                # a warm-up step records nothing: what grows is the script's (its activations)
                base = max(base, rss)
                continue
            allowed = self.cap_mb * (1 if self._stepped else SETUP_FACTOR) + jitter
            if ready and not self._stepped:
                allowed += RUNTIME_FIRST_STEP_MB
            if self._due is None and rss - base > allowed:
                if started is False and waited < RUNTIME_START_S:
                    waited += self._interval_s  # perhaps the runtime starting: let it finish
                    continue
                # Memory the script freed stays resident when the C heap cannot shrink past the
                # small blocks the recording keeps among its tensors: a CPU CNN grew by 80-120 MB a
                # recorded step this way (40-60 MB without shapes) and by ~1 MB once trimmed.
                # Handed back, the cycle is measured again: it ends only if still over.
                return_free_memory()
                rss = rss_mb() or 0.0
                if rss - base <= allowed:
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
