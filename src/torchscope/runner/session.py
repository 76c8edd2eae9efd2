"""One profiled run of a script: profiler, step detection, hot-spot sampler, run directory.

``profile_target`` starts our profiler (``torchscope.profile``: torch.profiler's API, Kineto or
the portable collector underneath, a ``Trace`` per cycle) and the sampler, runs the target in-process,
and stops both in a ``finally`` so that a script that raises (or calls ``sys.exit``) still
leaves its trace. Steps come from optimizer steps, so ``--wait/--warmup/--active`` schedules
work without code change: every ``optimizer.step()`` of the first optimizer that steps is a
``prof.step()``, and with no schedule option a default one (``bounds.DefaultSchedule``) records
the start and a few steady-state cycles. Every cycle stops at a memory cap (``bounds.RecordingCap``)
unless ``--all`` asks for the whole run. The script's own profiler (``torch.profiler``, redirected
to ours, or ``torchscope.profile``) takes over recording when it starts: the run steps aside and
keeps a copy of each cycle it finishes (``capture.redirect``).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torchscope.capture.schedule import schedule as make_schedule
from torchscope.errors import CycleLostError
from torchscope.runner import cycle_names
from torchscope.runner.after_step import wrap_step
from torchscope.runner.bounds import (
    DEFAULT_CAP_MB,
    DEFAULT_REPEAT,
    SETUP_FACTOR,
    DefaultSchedule,
    RecordingCap,
)
from torchscope.runner.launch import LaunchRank
from torchscope.runner.sampler import HotSpots, Sampler
from torchscope.runner.target import SAVING_THROUGH_ONE_SIGNAL, STOP_SIGNALS, Target, execute
from torchscope.trace.dialect import CYCLE_ENDED_BY_KEY, RUN_KEY, TOOL_THREADS_KEY

ACTIVITIES = ("cpu", "cuda", "xpu", "mtia")
# what a run was doing when a Ctrl-C stops the command: "" (starting or running the script),
# "saving" (the script ended) or "saving after Ctrl-C" (the script was interrupted, and said so)
RUN_PHASE = [""]


@dataclass(frozen=True)
class RunOptions:
    out: Path
    activities: tuple[str, ...] | None = None  # None: cpu plus every available accelerator
    wait: int | None = None
    warmup: int | None = None
    active: int | None = None
    repeat: int | None = None  # None: DEFAULT_REPEAT cycles; 0: until the end
    skip_first: int = 0
    memory: bool = False
    stack: bool = False
    record_shapes: bool = True
    sample_interval_s: float = 0.001  # 0 turns the hot-spot sampler off
    launch: LaunchRank | None = None  # this process's rank when torchrun (or alike) started several
    record_all: bool = False  # --all: the whole run in one cycle, no cap
    cap_mb: float = DEFAULT_CAP_MB  # the most a cycle's recording may add to the process's memory
    redirect: bool = True  # torch.profiler's names are ours while the script runs

    @property
    def scheduled(self) -> bool:
        return self.active is not None or self.wait is not None or self.warmup is not None

    @property
    def cycles(self) -> int:
        """Cycles of a user's schedule (0: until the end)."""
        return DEFAULT_REPEAT if self.repeat is None else self.repeat


KEPT_CYCLES = 8  # cycles held for the report: the first and the latest (all are written)


@dataclass
class RunResult:
    target: Target
    exit_code: int
    error: str | None
    wall_s: float
    steps: int  # optimizer steps seen
    trace_paths: list[Path] = field(default_factory=list)
    hotspots: HotSpots | None = None
    env: dict[str, Any] = field(default_factory=dict)
    step_marks: list[tuple[int, int]] = field(default_factory=list)  # (step number, wall ns)
    problems: list[str] = field(default_factory=list)  # our own failures; the script's run is unaffected
    setup_s: float | None = None  # wall seconds before the first training iteration (no step)
    notes: list[str] = field(default_factory=list)  # what the run chose to record, and why
    kept_paths: list[Path] = field(default_factory=list)  # the cycles the report reads, in order
    # cycles recorded but not written (a full disk): run.json names them, as no file can
    unwritten_paths: list[Path] = field(default_factory=list)


def _activities(names: tuple[str, ...] | None) -> list[Any]:
    import torch
    from torch.profiler import ProfilerActivity

    if names is None:
        chosen = ["cpu"]
        if torch.cuda.is_available():
            chosen.append("cuda")
        xpu = getattr(torch, "xpu", None)
        if xpu is not None and xpu.is_available():
            chosen.append("xpu")
        names = tuple(chosen)
    return [getattr(ProfilerActivity, n.upper()) for n in names]


def _own_threads(cap: RecordingCap | None, sampler: Sampler | None) -> str | None:
    """Which threads are the tool's, as every cycle is told (``dialect.TOOL_THREADS_KEY``):
    torch's Python tracer records each thread alive when a cycle starts, ours included, and the
    reader leaves them out of the Trace. None when none of ours runs."""
    threads = (cap.own_thread if cap else None, sampler.own_thread if sampler else None)
    tids = [t for t in threads if t is not None]
    return json.dumps({"pid": os.getpid(), "tids": tids}) if tids else None


def _warm_lazy_imports() -> None:
    """Import what torch imports lazily on a script's first optimizer, before recording.

    Constructing the first ``torch.optim`` optimizer imports ``torch._dynamo`` (and sympy): a
    few seconds (more under the sampler), which the hot spots then charged to ``SGD.__init__``
    (7 s, 82% of a ResNet-18 run), and with ``with_stack`` every Python frame of that import is
    recorded (a 2-step ResNet-18 run grew from 8 MB to 555 MB of trace). The import would happen
    anyway; doing it before the profiler and the sampler start keeps the profile about the
    user's program, in every mode.
    """
    with contextlib.suppress(Exception):  # a torch without dynamo has nothing to warm
        import torch._dynamo  # noqa: F401


def _record_everything(step: int) -> Any:
    from torchscope.capture.schedule import Action

    return Action.RECORD


SETUP_SPAN = "torchscope#setup"  # the work before the first training iteration
TAIL_SPAN = "torchscope#after_last_step"  # from the last optimizer.step() to the script's end


class _ProfilerCall:
    """``_StepHook._in_profiler``'s context: the cap's watchdog told that the runner's own call
    into the profiler runs. A class, not ``contextlib.contextmanager``: Kineto records the
    ``with``'s exit inside the step that the call began, and contextlib's frame there
    (``contextlib.py(141): __exit__``) was named as the user's code by the outside-ops advice;
    this one's frames are ours, which every reader leaves out (``analysis.frames``)."""

    def __init__(self, cap: RecordingCap | None) -> None:
        self.cap = cap

    def __enter__(self) -> None:
        if self.cap is not None:
            self.cap.busy = True

    def __exit__(self, *exc: object) -> None:
        if self.cap is not None:
            self.cap.busy = False


class _StepHook:
    """Turns optimizer steps into profiler steps; only the first optimizer that steps counts.

    Step N runs from the start of training iteration N to the end of its ``optimizer.step()``.
    The first iteration starts at the first ``nn.Module`` call (its forward pass); everything
    before it (imports, building the model and optimizer, loading data) is the ``setup`` span,
    not a step. Every later iteration starts where the previous ``optimizer.step()`` ended. A
    script that steps without calling a module has no detectable start: its first iteration
    stays in the setup span. The work after the last ``optimizer.step()`` is no step either.
    """

    def __init__(self, prof: Any, marks: list[tuple[int, int]], problems: list[str]) -> None:
        self.prof = prof
        self.marks = marks
        self.problems = problems
        self.owner: int | None = None
        self.count = 0
        self.t0_ns = time.time_ns()
        self.setup_ns: int | None = None  # wall ns from the start to the first iteration
        self._forward_handle: Any = None
        self.cap: RecordingCap | None = None  # told when we are inside the profiler
        self.resume = False  # the cap ended a cycle: record the schedule's next one
        self.resumed: list[int] = []  # the steps recording began again at after the cap
        # the action of a cycle whose start waits for the next module call (``_step_deferring_start``)
        self._deferred: Any = None
        self._deferred_handle: Any = None
        self.inside_wrapped = False  # in the owner's step() through ``after_step.wrap_step``
        self._pending = False  # its post-hook ran: the profiler steps when it returns
        # every optimizer class that stepped: names the hot spots' rows (``named_by_class``)
        self.optimizer_classes: set[type] = set()

    def start(self) -> None:
        """Start ``prof`` with the setup span open instead of ``ProfilerStep#0``."""
        from torch.autograd.profiler import record_function
        from torch.nn.modules.module import register_module_forward_pre_hook

        self.prof.record_steps = False  # start() would open ProfilerStep#0 here
        self.prof.start()
        self.prof.record_steps = True
        rec = record_function(SETUP_SPAN)
        # the setup is timed from where its span opens: from before the profiler's start, the
        # card said 56 ms where the trace's span was 50.5 ms (the difference was ours)
        self.t0_ns = time.time_ns()
        rec.__enter__()
        self.prof.step_rec_fn = rec  # closed by the profiler's next step() or stop()
        self._forward_handle = register_module_forward_pre_hook(self._first_forward)

    def _first_forward(self, module: Any, args: Any) -> None:
        self._disarm()
        if self.count:
            return
        if not self.prof._started:
            return
        with self._in_profiler():
            try:
                wall = time.time_ns()  # as the span ends (after it, the card was 70 µs longer)
                self.prof._exit_step()  # the setup span ends here
                self.prof._enter_step()
                self.setup_ns = wall - self.t0_ns
                self.marks.append((int(self.prof.step_num), wall))
            except Exception as exc:  # noqa: BLE001 - never break the user's forward
                self.problems.append(f"first iteration: {type(exc).__name__}: {exc}")
        if self.cap is not None:
            self.cap.fire_if_due()

    def _in_profiler(self) -> _ProfilerCall:
        """Tell the cap's watchdog that the runner's own call into the profiler runs: memory it
        takes (a cycle saved) is not the script's, and the cap must not stop it midway."""
        return _ProfilerCall(self.cap)

    def _cycle_begins(self, step: int) -> bool:
        """Whether the schedule starts a new cycle at ``step`` (after the cap ended the last)."""
        from torchscope.capture.schedule import Action, as_action

        # as_action: a schedule gives torch's members wherever torch is loaded, ours otherwise
        action = as_action(self.prof.schedule(step))
        before = as_action(self.prof.schedule(step - 1)) if step > 0 else Action.NONE
        return action != Action.NONE and before in (Action.NONE, Action.RECORD_AND_SAVE)

    def _resumes_first_cycle(self) -> bool:
        """Whether the cap cut the first cycle before the first optimizer step ended and the
        schedule records the next step: the setup and the first forward pass are the script's
        memory far more than the recording's (a CPU model's first activations passed the setup
        allowance, and the run's first cycle held no whole step), so the cycle records again
        from the end of that step, measured from its peak."""
        from torchscope.capture.schedule import Action, as_action

        return self.count == 1 and as_action(self.prof.schedule(1)) != Action.NONE

    def _restart(self) -> None:
        """Record the schedule's next cycle after the cap ended the previous one: the profiler
        starts again at this step's number, so its steps keep their numbers in the trace."""
        from torchscope.capture.schedule import as_action

        self.resume = False
        with self._in_profiler():
            try:
                self.prof.step_num = self.count
                self.prof.current_action = as_action(self.prof.schedule(self.count))
                self.prof.start()
            except Exception as exc:  # noqa: BLE001 - never break the user's optimizer.step()
                self.problems.append(f"profiler restart at step {self.count}: {type(exc).__name__}: {exc}")
                return
        self.marks.append((int(self.prof.step_num), time.time_ns()))

    def warming(self) -> bool:
        """Whether the current step is a cycle's warm-up, which records nothing (asked from the
        cap's watchdog thread)."""
        return getattr(self.prof.current_action, "name", "") == "WARMUP"

    def _step_recorded(self) -> bool:
        """Whether the schedule's action for the current step records (a trace may hold it)."""
        return getattr(self.prof.current_action, "name", "NONE") != "NONE"

    def recording(self) -> bool:
        """Whether a trace of ours may hold this moment: the sampler's samples taken then are
        thinned last (``Sampler._thin``). Asked from the sampler's thread: a moment's
        disagreement with the main thread costs a sample's resolution, no more."""
        return bool(self.prof._started) and self._step_recorded()

    def _disarm(self) -> None:
        if self._forward_handle is not None:
            self._forward_handle.remove()
            self._forward_handle = None

    def finish(self) -> None:
        self._disarm()
        if self._deferred_handle is not None:  # the script ended before the deferred start
            self._deferred_handle.remove()
            self._deferred_handle = None
        if self.setup_ns is None and self.count:
            self.setup_ns = self.marks[0][1] - self.t0_ns if self.marks else None

    def __call__(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        """torch's optimizer step post-hook: it runs inside the ``Optimizer.step#...`` range
        torch opens around ``step()``. The owner's later steps go through the wrapper
        ``after_step.wrap_step`` puts on its ``step``, and ``step_returned`` steps the profiler
        once that range is closed."""
        self.optimizer_classes.add(type(optimizer))
        if self.owner is None:
            self.owner = id(optimizer)
            self._disarm()
            # the owner's later steps step the profiler once torch's range around step() is
            # closed: stepped here, inside it, each ``Optimizer.step`` ended 30-170 us into the
            # next ``ProfilerStep`` (they overlapped instead of nesting), and a cycle's last one
            # held the profiler's own stop (1,000 us where its ops took 180)
            wrap_step(optimizer, self)
        elif id(optimizer) != self.owner:
            return
        if self.inside_wrapped:
            self._pending = True  # the profiler steps when the optimizer's step() returns
            return
        self._on_step()

    def step_returned(self) -> None:
        """The owner's ``step()`` returned (``after_step``): the profiler's step, if its
        post-hook ran (a step that raised has none)."""
        if self._pending:
            self._pending = False
            self._on_step()

    def _on_step(self) -> None:
        self.count += 1
        if self.cap is not None:
            self.cap.step_ended()
            if self.count == 1:
                self.cap.first_step()
        if not self.prof._started:  # stopped at the cap, or stepped aside for the script's profiler
            if not (self.resume and (self._cycle_begins(self.count) or self._resumes_first_cycle())):
                return
            self._restart()
            if self.prof._started:
                self.resumed.append(self.count)
            return
        if self._deferred is not None:  # a script with no module call: the start comes here
            self._start_deferred()
        wall = time.time_ns()
        with self._in_profiler():
            try:
                if self._back_to_back():
                    self._step_deferring_start()
                else:
                    self.prof.step()
            except Exception as exc:  # noqa: BLE001 - never break the user's optimizer.step()
                self.problems.append(f"profiler step {self.count}: {type(exc).__name__}: {exc}")
        # a mark only for a step a trace may hold: one per optimizer step held 150 bytes a step
        # for the whole run (+78 MB over 514k steps after the last cycle, ~200 MB an hour)
        if self._deferred is None and self._step_recorded():
            self.marks.append((int(self.prof.step_num), wall))
        if self.cap is not None:
            self.cap.fire_if_due()

    def _back_to_back(self) -> bool:
        """Whether this step ends a cycle and the schedule's next one records at once (no wait,
        no warmup: ``--active N`` alone)."""
        from torchscope.capture.schedule import Action, as_action

        following = as_action(self.prof.schedule(self.prof.step_num + 1))
        return self.prof._action == Action.RECORD_AND_SAVE and following in (Action.RECORD, Action.RECORD_AND_SAVE)

    def _step_deferring_start(self) -> None:
        """End the cycle now and start the next one at the next module call.

        This hook runs inside torch's ``record_function`` around ``optimizer.step()``, opened
        while the ending cycle recorded. Started here, the next recording was active when that
        range closed, and torch's profiler wrote its end into the ended cycle's freed events:
        a segfault in 8 of 30 runs of ``--wait 0 --warmup 0``, 6 of 20 of ``--active 4``. The
        step goes through a warm-up instead (Kineto prepared, not recording), and the
        recording starts when the next iteration's forward begins, or at the next
        ``optimizer.step()`` in a script that calls no module.
        """
        from torch.nn.modules.module import register_module_forward_pre_hook

        from torchscope.capture.schedule import Action, as_action

        schedule = self.prof.schedule
        self._deferred = as_action(schedule(self.prof.step_num + 1))
        self.prof.schedule = lambda step: Action.WARMUP
        try:
            self.prof.step()
        finally:
            self.prof.schedule = schedule
        self._deferred_handle = register_module_forward_pre_hook(lambda module, args: self._start_deferred())

    def _start_deferred(self) -> None:
        """Start the recording ``_step_deferring_start`` put off, its step opened again inside it."""
        if self._deferred_handle is not None:
            self._deferred_handle.remove()
            self._deferred_handle = None
        action, self._deferred = self._deferred, None
        if action is None or not self.prof._started:
            return
        with self._in_profiler():
            try:
                before, self.prof.current_action = self.prof._action, action
                self.prof._transit(before, self.prof._action)  # WARMUP -> RECORD: Kineto starts
                self.prof._exit_step()  # opened while nothing recorded: the trace would not hold it
                self.prof._enter_step()
                self.marks.append((int(self.prof.step_num), time.time_ns()))
            except Exception as exc:  # noqa: BLE001 - never break the user's forward
                self.problems.append(f"profiler start at step {self.count}: {type(exc).__name__}: {exc}")


def _rename_tail(path: Path, steps: int, problems: list[str]) -> None:
    """In the written trace, the span after the last ``optimizer.step()`` is no step."""
    from torchscope.writes import write_atomically

    try:
        data = path.read_bytes()
        old = f'"ProfilerStep#{steps}"'.encode()
        if old in data:
            new = data.replace(old, f'"{TAIL_SPAN}"'.encode())
            write_atomically(path, lambda tmp: tmp.write_bytes(new))
    except OSError as exc:
        problems.append(f"could not write {path}: {exc.strerror or exc}")


class _Recording:
    """The run's recording: which cycles to keep for the report, the cap, stepping aside.

    Everything here runs on the main thread (the profiler's callbacks, the cap's stop, the
    host call of a script's own profiler); only ``session()`` is read by the cap's watchdog.
    """

    def __init__(self, options: RunOptions, traces_dir: Path) -> None:
        self.options = options
        self.traces_dir = traces_dir
        self.written: list[Path] = []
        self.unwritten: list[Path] = []  # cycles recorded but not written (a full disk)
        self.kept: list[Path] = []  # the files the report reads
        self.problems: list[str] = []
        self.notes: list[str] = []
        self.cap_cuts: list[int] = []  # the steps in which the memory cap ended a cycle
        self.cap_growth: list[float] = []  # and what the process had grown by then, MB
        self.cap_pause_s = 0.0  # how long those stops held the script up
        # the optimizer step count once the script has ended, or once ours stepped aside for good
        self.stopping: list[int] = []
        # the script ended in a warmup or as a cycle began: the cycle stop() then writes holds no
        # step, only the work after the last optimizer.step() (it took one of the report's slots)
        self.ended_before_a_step = False
        self.prof: Any = None
        self.hook: _StepHook | None = None
        self.cap: RecordingCap | None = None
        self._adopted: list[Any] = []  # the script's own profilers, whose cycles we copy
        self.own_threads: str | None = None  # the tool's threads, as cycles name them (_own_threads)
        # a rank's files carry its rank: the loader keys a directory of ranks by it
        self.prefix = f"{options.launch.directory}." if options.launch is not None else ""

    @property
    def adopted(self) -> bool:
        """Whether the script's own profiler took over recording."""
        return bool(self._adopted)

    # -- cycles ------------------------------------------------------------------------------
    def keep(self, path: Path) -> None:
        """Keep ``path`` for the report: the first cycle and the latest ones, KEPT_CYCLES in all."""
        self.kept.append(path)
        if len(self.kept) > KEPT_CYCLES:
            del self.kept[1]

    def export(self, prof: Any, name: str) -> Path | None:
        """Write ``prof``'s latest cycle as ``traces/NAME.pt.trace.json``, whole or not at all."""
        from torchscope.writes import write_atomically

        path = self.traces_dir / cycle_names.file_name(name, self.prefix)
        try:
            write_atomically(path, lambda tmp: prof.export_chrome_trace(str(tmp)))
        except CycleLostError as exc:  # Kineto gave no trace (a full TMPDIR): said once, by cause
            if exc.reason not in self.problems:
                self.problems.append(exc.reason)
            self.unwritten.append(path)
            return None
        except OSError as exc:
            self.problems.append(f"could not write {path}: {exc.strerror or exc}")
            self.unwritten.append(path)
            return None
        self.written.append(path)
        return path

    def on_ready(self, prof: Any) -> None:
        """Our own cycle is done: its file is written now, and read for the report once the
        script has ended (the script waits for Kineto's own work only, and no Trace is held
        while it runs)."""
        steps = self.hook.count if self.hook is not None else 0
        # named by the cycle's last step: a cycle the schedule ends is saved inside step(), once
        # the profiler has already moved on to the next step; one the cap's stop() ends is saved
        # at the step it was recording; one stopped at the script's end (or as ours steps aside)
        # holds, after its last step, the work after the last optimizer.step(), which is no step
        # (``_rename_tail``): a script that raised after step 39 left "step_40"
        if prof._started:
            last = prof.step_num - 1
        elif self.stopping and self.stopping[0] > 0:
            last = self.stopping[0] - 1
        else:
            last = prof.step_num
        name = cycle_names.own_cycle(last) if steps or self.options.scheduled else cycle_names.SETUP_CYCLE
        if prof._cycles:
            prof._cycles[-1]._torchscope_exported = True
        if self.ended_before_a_step:
            prof.free_kineto_results()
            return
        path = self.export(prof, name)
        prof.free_kineto_results()  # kept for export_memory_timeline, which the runner never calls
        if path is None:
            return
        if self.stopping:
            _rename_tail(path, self.stopping[0], self.problems)
        self.keep(path)

    # -- the cap -----------------------------------------------------------------------------
    def session(self) -> Any:
        prof = self.prof
        return None if prof is None or not prof._started else prof._session

    def stop_at_cap(self, grown_mb: float) -> None:
        """The cycle grew past the cap: end it (its trace holds what came before); the schedule's
        next cycle, if it has one, is recorded when its first step comes."""
        if self.prof is None or not self.prof._started:
            return
        steps = self.hook.count if self.hook is not None else 0
        self.cap_cuts.append(steps)  # the step in progress (``steps`` ended before it)
        self.cap_growth.append(grown_mb)
        if self.prof.step_rec_fn is not None:  # in a step: the cap cut it, no step of the run
            self.prof.add_metadata_json(CYCLE_ENDED_BY_KEY, '"cap"')
        began = time.perf_counter()
        self._stop_ours()
        # the script waits for the stop (Kineto's own post-processing and the save): said, or a
        # loop of small ops stalled for 6 s without a word (a new user's find)
        self.cap_pause_s += time.perf_counter() - began
        if self.hook is not None and not self._adopted:
            self.hook.resume = True

    def cap_note(self) -> str | None:
        """What the cap did, in one note however many cycles it cut (a CPU run whose cycles it
        cut in three places printed the same four lines three times)."""
        if not self.cap_cuts:
            return None
        cap = self.options.cap_mb
        low, high = min(self.cap_growth), max(self.cap_growth)
        grew = f"{low:.0f} MB" if round(low) == round(high) else f"{low:.0f}–{high:.0f} MB"
        steps = [f"step {c}" if c else "before any optimizer step" for c in self.cap_cuts]
        where = steps[0] if len(steps) == 1 else ", ".join(steps[:-1]) + f" and {steps[-1]}"
        setup = f", {SETUP_FACTOR}x that before the first step" if 0 in self.cap_cuts else ""
        allowance = f"cap {cap:.0f} MB{setup}"
        head = "a cycle" if len(steps) == 1 else f"{len(steps)} cycles"
        return (
            f"{head} stopped at the cap ({where}; {allowance}): the process grew by {grew} while"
            f" {'it was' if len(steps) == 1 else 'each was'} recorded, the script's own memory included;"
            f" {'its trace holds' if len(steps) == 1 else 'each trace holds'} what came before the cut, and the"
            f" schedule's later cycles, if any, are recorded. Stopping {'it' if len(steps) == 1 else 'them'}"
            f" held the script up for {self.cap_pause_s:.1f} s (Kineto's own work on what was recorded)."
            " Record more with --cap-mb MB or the whole run with --all, less with --wait/--warmup/--active"
        )

    def _stop_ours(self) -> None:
        try:
            self.prof.stop()
        except Exception as exc:  # noqa: BLE001 - keep the script's exit code and what was written
            self.problems.append(f"profiler stop: {type(exc).__name__}: {exc}")

    def _step_aside(self) -> None:
        """Stop ours for good because the script's profiler takes over: the step it had just
        opened after the last ``optimizer.step()`` is no step (a 0.1 ms ``ProfilerStep#N`` made
        "5 steps, 180 ms per step" of four 225 ms ones), so its trace names it as the tail."""
        if self.hook is not None:
            self.stopping.append(self.hook.count)
        self._stop_ours()

    # -- a profiler of the script's own ------------------------------------------------------
    def on_other_profiler(self, other: Any) -> None:
        """``other`` (the script's or its framework's profiler) is about to record: ours stops for
        good, and each cycle ``other`` finishes is copied into the run directory too. ``None``:
        the script switches off whatever profiler is on (``torch.autograd._disable_profiler``)."""
        from torchscope.capture.redirect import TORCH_PROFILER

        if other is None:
            if self.prof is not None and self.prof._started:
                self._stop_ours()
            return
        if other is TORCH_PROFILER:  # torch's own, not redirected (--no-redirect): its files are its own
            if self.prof is not None and self.prof._started:
                steps = self.hook.count if self.hook is not None else 0
                self._step_aside()
                self.notes.append(
                    f"the script started torch's own profiler after {steps} optimizer steps (--no-redirect):"
                    " torchscope run stopped recording there (one recording at a time); the script's"
                    " profiler writes its own output"
                )
            return
        if other is self.prof:
            return
        self.copy_script_cycles()  # before this prepare discards the finished one
        if any(known is other for known in self._adopted):
            return
        self._adopted.append(other)
        if self.own_threads is not None and hasattr(other, "add_metadata_json"):
            other.add_metadata_json(TOOL_THREADS_KEY, self.own_threads)  # our threads run beside it too
        steps = self.hook.count if self.hook is not None else 0
        if self.prof is not None and self.prof._started:
            self._step_aside()
        if len(self._adopted) == 1:
            self.notes.append(
                f"the script started its own profiler after {steps} optimizer steps: torchscope run stepped "
                "aside (one recording at a time) and reports the cycles the script's profiler recorded; "
                "its own files are where the script writes them"
            )

    def copy_script_cycles(self) -> None:
        """Copy every finished cycle of the script's profilers not copied yet into ``traces/``.

        Called when one of them prepares its next cycle (the finished one is still held then)
        and once the script has ended; not through ``on_trace_ready``, which frameworks replace
        after starting the profiler (Lightning does)."""

        for k, other in enumerate(self._adopted, 1):
            for cycle in list(getattr(other, "_cycles", ())):
                if getattr(cycle, "_torchscope_copied", False):
                    continue
                cycle._torchscope_copied = True
                n = getattr(other, "_torchscope_copies", 0) + 1
                other._torchscope_copies = n
                path = self.traces_dir / cycle_names.file_name(cycle_names.script_cycle(k, n), self.prefix)
                try:
                    cycle.export(path)  # whole or not at all
                except Exception as exc:  # noqa: BLE001 - the script's own files are unaffected
                    self.problems.append(f"could not write {path}: {exc}")
                    self.unwritten.append(path)
                    continue
                self.written.append(path)
                self.keep(path)


_NO_WARMUP = (
    "no warmup step (--warmup 0): the first recorded step of each cycle also holds the profiler's "
    "start-up; --warmup 1 leaves it out"
)


def _schedule(options: RunOptions) -> tuple[Any, str | None]:
    """The profiler's schedule for the run and the sentence that says what it records."""
    if options.record_all:
        return _record_everything, None
    if options.scheduled:
        with warnings.catch_warnings():
            # torch's "won't be using warmup" warning, with our file's path: the run says it
            # in its own words (``_NO_WARMUP``) in the summary instead
            warnings.simplefilter("ignore", UserWarning)
            chosen = make_schedule(
                wait=options.wait or 0,
                warmup=options.warmup or 0,
                active=options.active or 1,
                repeat=options.cycles,
                skip_first=options.skip_first,
            )
        return chosen, (_NO_WARMUP if not options.warmup else None)
    default = DefaultSchedule()
    return default, default.describe()


def profile_target(target: Target, options: RunOptions) -> RunResult:
    """Run ``target`` under the profiler; write traces under ``options.out / 'traces'``."""
    from torch.optim.optimizer import register_optimizer_step_post_hook

    from torchscope.capture import redirect
    from torchscope.capture.profiler import profile
    from torchscope.runner.env import environment

    traces_dir = options.out / "traces"
    traces_dir.mkdir(parents=True, exist_ok=True)
    rec = _Recording(options, traces_dir)
    schedule, described = _schedule(options)
    prof = profile(
        activities=_activities(options.activities),
        schedule=schedule,
        on_trace_ready=rec.on_ready,
        record_shapes=options.record_shapes,
        profile_memory=options.memory,
        with_stack=options.stack,
    )
    prof.mark_cycle_end = False  # the span after the last step is renamed, not an exit (_rename_tail)
    prof.preset_metadata_json(RUN_KEY, '"1"')  # every cycle says it is the run's (frames.py)
    rec.prof = prof
    _warm_lazy_imports()  # in every mode: never charge torch's lazy imports to the script
    marks: list[tuple[int, int]] = []
    hook = _StepHook(prof, marks, rec.problems)
    rec.hook = hook
    if not options.record_all:
        rec.cap = hook.cap = RecordingCap(options.cap_mb, rec.session, rec.stop_at_cap, warming=hook.warming)
    env = environment()
    # Kineto writes no torch version into its file, so the report's "torch version" (meta) was
    # empty although the run knows it: every cycle carries it, where the reader looks for it
    prof.preset_metadata_json("torch_version", json.dumps(str(env["torch"])))
    sampler = (
        Sampler(interval_s=options.sample_interval_s, script_only=True, recording=hook.recording)
        if options.sample_interval_s > 0
        else None
    )
    redirected = options.redirect and not redirect.installed()
    if redirected:
        redirect.install()
    elif not options.redirect:
        redirect.guard_torch_profiler()  # torch's own profiler asks ours to stop before it starts
    redirect.add_host(rec.on_other_profiler)
    handle = register_optimizer_step_post_hook(hook)
    t0 = time.perf_counter()
    hook.start()
    if options.launch is not None:
        # the script initializes torch.distributed after recording starts, so the trace would
        # not say its rank; the launcher's variables do (a cycle that starts after the script's
        # init_process_group gets torch's own, fuller distributedInfo instead)
        launch = options.launch
        prof.add_metadata_json(
            "distributedInfo", json.dumps({"rank": launch.rank, "world_size": launch.world_size})
        )
    if rec.cap is not None:
        rec.cap.start()
    if sampler is not None:
        sampler.start()
    rec.own_threads = _own_threads(rec.cap, sampler)
    if rec.own_threads is not None:
        prof.add_metadata_json(TOOL_THREADS_KEY, rec.own_threads)
    outcome = None
    RUN_PHASE[0] = ""
    try:
        outcome = execute(target)
    finally:
        RUN_PHASE[0] = "saving"
        # the interruption that ended the script, if one did (None: ``execute`` did not return)
        stop = outcome.error if outcome is not None else None
        interrupted = stop == "KeyboardInterrupt" or stop in STOP_SIGNALS
        # the script ended on its own: the save goes on through the first stop signal
        SAVING_THROUGH_ONE_SIGNAL[0] = outcome is not None and not interrupted
        if interrupted:
            # saving a long cycle takes a while (29 s for 6 s of --all --memory --stack) and
            # said nothing, so a second Ctrl-C came and lost everything without a word
            RUN_PHASE[0] = "saving after Ctrl-C"
            how = "interrupted" if stop == "KeyboardInterrupt" else f"{stop} received"
            again = "Ctrl-C" if stop == "KeyboardInterrupt" else f"{stop} or Ctrl-C"
            print(
                f"torchscope run: {how}: saving what was recorded and writing the report"
                f" ({again} again to stop now, keeping only the traces already written)",
                file=sys.stderr,
                flush=True,
            )
        hotspots = sampler.stop().named_by_class(hook.optimizer_classes) if sampler is not None else None
        wall_s = time.perf_counter() - t0
        if rec.cap is not None:
            rec.cap.stop_watching()
        handle.remove()
        redirect.remove_host(rec.on_other_profiler)
        if redirected:
            redirect.uninstall()
        elif not options.redirect:
            redirect.unguard_torch_profiler()
        hook.finish()
        rec.stopping.append(hook.count)
        if prof._started:
            from torchscope.capture.schedule import Action, as_action

            # the script ended in a warmup, or just as a cycle began: that cycle holds no step,
            # only the work after the last optimizer.step() (not the first: it has the setup)
            began_now = prof.step_num > 0 and as_action(prof.schedule(prof.step_num - 1)) is not Action.RECORD
            rec.ended_before_a_step = not options.record_all and (
                prof._action is Action.WARMUP
                or (prof._action in (Action.RECORD, Action.RECORD_AND_SAVE) and began_now)
            )
            rec._stop_ours()
        if prof._cycles and not getattr(prof._cycles[-1], "_torchscope_exported", False):
            # kept by the profiler but not written: a Ctrl-C right after the cycle's stop (held
            # back until the cycle was kept) came before its on_trace_ready
            rec.on_ready(prof)
        rec.copy_script_cycles()
    if len(rec.written) > len(rec.kept):
        # said in run.json and on the page too (the terminal alone said it, and the page's cycle
        # picker simply lacked the others)
        out = [p.name.removesuffix(".pt.trace.json") for p in rec.written if p not in rec.kept]
        listed = ", ".join(out[:6]) + (f" and {len(out) - 6} more" if len(out) > 6 else "")
        rec.notes.append(
            f"{len(rec.written)} cycles were written to {traces_dir}; the report holds {len(rec.kept)} (the "
            f"first and the latest), not {listed}: torchscope report {traces_dir} reads them all"
        )
    if (capped := rec.cap_note()) is not None:
        rec.notes.append(capped)
    # the default schedule's sentence matters once it or the cap cut something; no warmup, once
    # a step ran
    shown_after = 0 if described == _NO_WARMUP else DefaultSchedule().head
    if described is not None and (hook.count > shown_after or (rec.cap_cuts and hook.count)) and not rec.adopted:
        if isinstance(schedule, DefaultSchedule):  # now that the run's length is known
            described = schedule.describe(hook.count, tuple(rec.cap_cuts), tuple(hook.resumed))
        rec.notes.insert(0, described)
    return RunResult(
        setup_s=None if hook.setup_ns is None else hook.setup_ns / 1e9,
        target=target,
        exit_code=outcome.exit_code,
        error=outcome.error,
        wall_s=wall_s,
        steps=hook.count,
        trace_paths=rec.written,
        kept_paths=rec.kept,
        unwritten_paths=rec.unwritten,
        hotspots=hotspots,
        env=env,
        step_marks=marks,
        problems=rec.problems,
        notes=rec.notes,
    )
