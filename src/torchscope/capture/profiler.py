"""``profile``: torch.profiler's API over PyTorch's own collector, with results from a Trace.

A user changes ``from torch.profiler import profile, ...`` to ``from torchscope import ...``
and nothing else: the same arguments, the same schedule state machine (warmup, record,
``on_trace_ready`` at the end of each cycle, ``ProfilerStep#N`` labels), the same tables.
The difference is after ``stop()``: each cycle becomes a columnar ``Trace`` (see
``capture.kineto``), and ``key_averages``, ``events`` and the exports are computed from it,
without one Python object per event.

Misuse gets a clear ``ProfilerStateError`` instead of a corrupted session: ``step()`` or
``stop()`` before ``start()``, ``start()`` or ``stop()`` twice, and a second profiler while one
is recording. Arguments torch rejects we reject with torch's exception type and message
(a ``UsageError`` that is also that type: duplicate activities, a negative
``post_processing_timeout_s``), at the same moment torch does. An exception in the profiled block stops the profiler cleanly and keeps what was
recorded; an ``on_trace_ready`` that raises leaves the session consistent and its error is
raised as ``TraceReadyError`` once the profiler's own transitions are done.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import re
import time
import warnings
import weakref
from collections.abc import Callable, Iterable
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import Any

import polars as pl
import torch
from torch._C._profiler import ProfilerActivity, _ExperimentalConfig
from torch.autograd.profiler import KinetoStepTracker, _ProfilerStats, record_function
from torch.profiler import DeviceType, ExecutionTraceObserver, kineto_available

from torchscope.capture.kineto import (
    MEMORY_TIMELINE_OPTIONS,
    Cycle,
    Elsewhere,
    KinetoSession,
    PortableSession,
    _Scratch,
    deliver_ctrl_c,
    hold_ctrl_c,
    kineto_recording,
)
from torchscope.capture.schedule import Action, as_action, default_schedule, public_action
from torchscope.compat.averages import KeyAverages, key_averages
from torchscope.compat.event_args import LazyEventArgs
from torchscope.compat.events import EventList, FunctionEvent, build_events, export_stacks
from torchscope.errors import (
    NoCycleYetError,
    ProfilerStateError,
    UsageAssertionError,
    UsageError,
    UsageTypeError,
    warn_user,
)
from torchscope.trace.dialect import CYCLE_ENDED_BY_KEY
from torchscope.trace.model import Trace

# torch 2.12 put the Python frames of with_stack=True into events() and key_averages()
# (pytorch#178168); the tables of an older torch have none, and so have ours under it
TORCH_LISTS_PYTHON_FRAMES = tuple(int(p) for p in re.findall(r"\d+", torch.__version__)[:2]) >= (2, 12)

ProfilerAction = torch.profiler.ProfilerAction  # torch's own: ours compare equal to it

__all__ = [
    "DeviceType",
    "ExecutionTraceObserver",
    "ProfilerAction",
    "ProfilerActivity",
    "TraceReadyError",
    "kineto_available",
    "profile",
    "record_function",
    "supported_activities",
]

BACKENDS = ("auto", "kineto", "portable")
_DEVICE_ACTIVITIES = ("CUDA", "XPU", "MTIA", "HPU", "PrivateUse1")
# the profiler currently recording, if any, by weak reference: a profile started and dropped
# (a notebook cell that failed after start()) no longer makes every later one record nothing
_RECORDING: list[weakref.ref[profile]] = []


def recording_profile() -> profile | None:
    """The torchscope profile recording in this process (the first still alive), if any."""
    while _RECORDING and _RECORDING[0]() is None:
        _RECORDING.pop(0)
    return _RECORDING[0]() if _RECORDING else None

PROFILER_STEP_NAME = "ProfilerStep"  # torch's requester name in KinetoStepTracker
TRACE_ONLY_EVENTS = (
    "events() is not available when trace_only=True in ExperimentalConfig. Use export_chrome_trace() instead."
)
# torch's post-processing logger: a timeout's warning goes where torch's goes
log = logging.getLogger("torch.autograd.profiler")
# called with each profiler about to record, before the nesting check: the session that owns
# recording in this process (``torchscope run``, see ``capture.redirect``) steps aside there
PREPARE_HOOKS: list[Callable[[profile], None]] = []


class TraceReadyError(RuntimeError):
    """``on_trace_ready`` raised; the profiler itself finished its transition cleanly."""


def supported_activities() -> set[ProfilerActivity]:
    """The activities Kineto can trace in this torch build (same as torch's)."""
    return set(torch.autograd._supported_activities())


def _parse_activities(
    activities: Iterable[Any] | None,
) -> tuple[set[ProfilerActivity], dict[ProfilerActivity, set[str]]]:
    """The activities to trace and the ``{ProfilerActivity.CUDA: ["GPU_MEMCPY"]}`` filters
    among them, checked as torch checks them: an activity named twice is a ``ValueError``,
    an item that is neither an activity nor a dict a ``TypeError``."""
    if activities is None:
        return supported_activities(), {}
    result: set[ProfilerActivity] = set()
    filters: dict[ProfilerActivity, set[str]] = {}

    def add(activity: ProfilerActivity) -> None:
        if activity in result:
            raise UsageError(f"Activity {activity} specified more than once")
        result.add(activity)

    for item in activities:
        if isinstance(item, ProfilerActivity):
            add(item)
        elif isinstance(item, dict):
            for key, names in item.items():
                add(key)
                filters[key] = set(names)
        else:
            raise UsageTypeError(f"Expected ProfilerActivity or dict, got {type(item)}")
    return result, filters


def _choose_backend(requested: str | None, activities: set[ProfilerActivity]) -> str:
    backend = (requested or os.environ.get("TORCHSCOPE_BACKEND") or "auto").strip().lower()
    if backend not in BACKENDS:
        raise UsageError(f"backend must be one of {', '.join(BACKENDS)}; got {backend!r}")
    if backend != "auto":
        return backend
    supported = supported_activities()
    wanted = [a for a in activities if a.name in _DEVICE_ACTIVITIES]
    # a device this process can use but Kineto cannot trace; an absent device is left to
    # Kineto, which warns and profiles the host, exactly as torch.profiler does
    if any(a not in supported and _device_available(a) for a in wanted):
        return "portable"
    return "kineto"


def _device_available(activity: ProfilerActivity) -> bool:
    name = {"CUDA": "cuda", "XPU": "xpu", "MTIA": "mtia", "HPU": "hpu"}.get(activity.name)
    if name is None:  # PrivateUse1: the registered backend's module
        name = str(torch._C._get_privateuse1_backend_name())
    module = getattr(torch, name, None)
    try:
        return bool(module is not None and module.is_available())
    except Exception:  # a half-registered backend
        return False


def _device_name(activities: set[ProfilerActivity]) -> str | None:
    """torch's ``use_device`` for a set of activities (the first device in torch's order)."""
    for name, device in (("CUDA", "cuda"), ("XPU", "xpu"), ("MTIA", "mtia"), ("HPU", "hpu")):
        if getattr(ProfilerActivity, name, None) in activities:
            return device
    if getattr(ProfilerActivity, "PrivateUse1", None) in activities:
        return str(torch._C._get_privateuse1_backend_name())
    return None


def _distributed_info() -> str | None:
    """torch's ``distributedInfo`` metadata (backend, rank, world size) when a job is running."""
    try:
        import torch.distributed as dist
    except ImportError:  # pragma: no cover
        return None
    if not dist.is_available() or not dist.is_initialized():
        return None
    info = {"backend": dist.get_backend(), "rank": dist.get_rank(), "world_size": dist.get_world_size()}
    return json.dumps(info)


class profile:
    """Profiler context manager, argument for argument ``torch.profiler.profile``.

    Extra: ``backend`` (``"auto"``, ``"kineto"``, ``"portable"``; default from the
    ``TORCHSCOPE_BACKEND`` environment variable, else ``auto``, which uses Kineto unless a
    requested device activity is not supported by Kineto in this torch build), and
    ``trace()`` / ``traces()`` returning the recorded ``Trace``.
    """

    def __init__(
        self,
        *,
        activities: Iterable[Any] | None = None,
        schedule: Callable[[int], Any] | None = None,
        on_trace_ready: Callable[..., Any] | None = None,
        record_shapes: bool = False,
        profile_memory: bool = False,
        with_stack: bool = False,
        with_flops: bool = False,
        with_modules: bool = False,
        experimental_config: _ExperimentalConfig | None = None,
        execution_trace_observer: Any | None = None,
        acc_events: bool = False,
        use_cuda: bool | None = None,
        custom_trace_id_callback: Callable[[], str] | None = None,
        post_processing_timeout_s: float | None = None,
        backend: str | None = None,
    ) -> None:
        # torch's order of checks: no activity at all first (items that are not activities are
        # ignored there), then duplicates and foreign items
        items = None if activities is None else list(activities)
        activity_set = supported_activities() if items is None else set()
        for item in items or ():
            if isinstance(item, ProfilerActivity):
                activity_set.add(item)
            elif isinstance(item, dict):
                activity_set.update(item.keys())
        if use_cuda is not None:
            warnings.warn(
                "`use_cuda` is deprecated, use `activities` argument instead", FutureWarning, stacklevel=2
            )
            if use_cuda:
                activity_set.add(ProfilerActivity.CUDA)
            else:
                activity_set.discard(ProfilerActivity.CUDA)
        if not activity_set:
            raise UsageAssertionError("No valid profiler activities found")
        _, filters = _parse_activities(items)  # the checks, and the per-activity filters
        self.activities = activity_set
        self.record_shapes = record_shapes or with_flops
        self.profile_memory = profile_memory
        self.with_stack = with_stack
        self.with_flops = with_flops
        self.with_modules = with_modules
        if experimental_config is not None and experimental_config.trace_only and with_stack:
            warnings.warn(
                "trace_only=True is incompatible with with_stack=True "
                "(stack traces require event post-processing). Disabling trace_only.",
                stacklevel=2,
            )
            experimental_config = copy.copy(experimental_config)  # as torch: the caller's stays
            experimental_config.trace_only = False
        self.experimental_config = experimental_config
        self.execution_trace_observer = execution_trace_observer
        self.acc_events = acc_events
        # checked when a cycle is prepared, as torch checks it; bounds building events()
        self.post_processing_timeout_s = post_processing_timeout_s
        self.backend = _choose_backend(backend, activity_set)
        self.use_device = _device_name(activity_set)
        self._kineto_options: dict[str, Any] = {
            "use_cpu": ProfilerActivity.CPU in activity_set,
            "use_device": self.use_device,
            "record_shapes": self.record_shapes,
            "with_flops": with_flops,
            "profile_memory": profile_memory,
            "with_stack": with_stack,
            "with_modules": with_modules,
            "experimental_config": experimental_config,
            "custom_trace_id_callback": custom_trace_id_callback,
        }
        if filters:  # only torch builds that know activity filters get the keyword
            self._kineto_options["activity_filters"] = filters
        self._scratch = _Scratch()
        self._session: KinetoSession | PortableSession | Elsewhere | None = None
        self._trace_id: str | None = None  # the latest Kineto session's (``get_trace_id``)
        self._cycles: list[Cycle] = []
        self._orphan_guard: weakref.finalize[Any, Any] | None = None  # see prepare_trace
        self._metadata: dict[str, str] = {}
        # each scheduled cycle says how it ended (``CYCLE_ENDED_BY_KEY``); off for a host that
        # marks its own tail (``torchscope run`` renames the span after its last step)
        self.mark_cycle_end = True
        self._ending_on_error = False  # __exit__ with the block's error: the mark says "error"
        self._torch_stats: _ProfilerStats | None = None  # torch's ``_stats()`` of the latest cycle
        # events() of the cycles held, built once (torch keeps its list too); a new cycle drops it
        self._events: EventList | None = None

        if schedule is not None:
            self.schedule: Callable[[int], Any] = schedule
            self.record_steps = True
        else:
            self.schedule = default_schedule
            self.record_steps = False
        self.on_trace_ready = on_trace_ready
        self.step_num = 0
        self._action = as_action(self.schedule(self.step_num))
        self.step_rec_fn: Any = None
        self._started = False
        self._callback_error: BaseException | None = None
        # torch counts its steps for on-demand tracing (dynolog) in KinetoStepTracker
        KinetoStepTracker.init_step_count(PROFILER_STEP_NAME)

        A = Action
        warn = partial(warnings.warn, stacklevel=3)
        self.action_map: dict[tuple[Action, Action | None], list[Callable[[], Any]]] = {
            (A.NONE, A.NONE): [],
            (A.NONE, A.WARMUP): [self.prepare_trace],
            (A.NONE, A.RECORD): [self.prepare_trace, self.start_trace],
            (A.NONE, A.RECORD_AND_SAVE): [self.prepare_trace, self.start_trace],
            (A.WARMUP, A.NONE): [
                partial(warn, "Incorrect schedule: WARMUP followed by NONE"),
                self.start_trace,
                self.stop_trace,
            ],
            (A.WARMUP, A.WARMUP): [],
            (A.WARMUP, A.RECORD): [self.start_trace],
            (A.WARMUP, A.RECORD_AND_SAVE): [self.start_trace],
            (A.RECORD, A.NONE): [
                partial(warn, "Incorrect schedule: RECORD followed by NONE"),
                self.stop_trace,
            ],
            (A.RECORD, A.WARMUP): [
                partial(warn, "Incorrect schedule: RECORD followed by WARMUP"),
                self.stop_trace,
            ],
            (A.RECORD, A.RECORD): [],
            (A.RECORD, A.RECORD_AND_SAVE): [],
            (A.RECORD_AND_SAVE, A.NONE): [self.stop_trace, self._trace_ready],
            (A.RECORD_AND_SAVE, A.WARMUP): [self.stop_trace, self._trace_ready, self.prepare_trace],
            (A.RECORD_AND_SAVE, A.RECORD): [
                self.stop_trace,
                self._trace_ready,
                self.prepare_trace,
                self.start_trace,
            ],
            (A.RECORD_AND_SAVE, A.RECORD_AND_SAVE): [
                self.stop_trace,
                self._trace_ready,
                self.prepare_trace,
                self.start_trace,
            ],
            (A.WARMUP, None): [self.start_trace, self.stop_trace],
            (A.RECORD, None): [self.stop_trace, self._trace_ready],
            (A.RECORD_AND_SAVE, None): [self.stop_trace, self._trace_ready],
        }

    # -- lifecycle ------------------------------------------------------------------------
    def __enter__(self) -> profile:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> None:
        if self._started:
            if exc_type is None:
                self.stop()
            else:
                # the block failed: stop cleanly, keep what was recorded, let its error propagate
                self._ending_on_error = True  # its last step is the one the error cut
                try:
                    self.stop()
                except Exception as stop_error:  # pragma: no cover - reported, never masks exc
                    warnings.warn(f"torchscope: stopping the profiler failed: {stop_error}", stacklevel=2)
        KinetoStepTracker.erase_step_count(PROFILER_STEP_NAME)
        if self.execution_trace_observer is not None:
            self.execution_trace_observer.cleanup()

    def start(self) -> None:
        """Begin profiling (step 0 of the schedule)."""
        if self._started:
            raise ProfilerStateError("profile.start() called twice; call stop() first")
        # a host (``torchscope run``) steps aside now, not at the first prepare: the steps this
        # profiler marks during its wait phase would land in the host's recording
        for hook in list(PREPARE_HOOKS):
            hook(self)
        self._started = True
        try:
            self._transit(Action.NONE, self._action)
        except BaseException:
            self._started = False
            self._release()
            raise
        if self.record_steps:
            self._enter_step()
        if self._callback_error is not None:  # (inline: Kineto records from here, see stop_trace)
            self._raise_callback_error()

    def stop(self) -> None:
        """End profiling; a cycle that was recording becomes ready (``on_trace_ready`` runs)."""
        if not self._started:
            raise ProfilerStateError(
                "profile.stop() called without a running profiler (not started, or stopped twice)"
            )
        check = getattr(self._session, "check_stoppable", None)  # the portable collector's
        if check is not None:
            check()  # raises before anything changes: leave the user's mode, then stop again
        in_a_step = self.step_rec_fn is not None  # (not after end_step(): that step is whole)
        if self.step_rec_fn is not None:  # _exit_step, inline: Kineto records each call of ours
            rec, self.step_rec_fn = self.step_rec_fn, None
            rec.__exit__(None, None, None)
        self._started = False
        # a scheduled cycle that stop() ends has the exit as its last step: say so in its trace,
        # so that a log dir's reader does not take that step (tens of µs) for one of the run's
        cut_short = (
            in_a_step
            and self.record_steps
            and self.mark_cycle_end
            and self._action in (Action.RECORD, Action.RECORD_AND_SAVE)
        )
        if cut_short and not isinstance(self._session, Elsewhere):
            self.add_metadata_json(CYCLE_ENDED_BY_KEY, '"error"' if self._ending_on_error else '"stop"')
        self._ending_on_error = False
        try:
            self._transit(self._action, None)
        finally:
            self._metadata.pop(CYCLE_ENDED_BY_KEY, None)  # start_trace sets it for each cycle
            self._release()
        self._raise_callback_error()

    @property
    def current_action(self) -> Any:
        """The schedule's action for the current step, as torch's ``ProfilerAction`` (a script
        or a framework compares it with torch's members)."""
        return public_action(self._action)

    @current_action.setter
    def current_action(self, value: Any) -> None:
        self._action = as_action(value)

    def step(self) -> None:
        """Signal that the next step begins; follows the schedule's action for it."""
        if not self._started:
            raise ProfilerStateError("profile.step() called before start() (or after stop())")
        self._exit_step()
        prev = self._action
        action = as_action(self.schedule(self.step_num + 1))
        self.step_num += 1
        self._action = action
        self._transit(prev, action)
        if os.environ.get("KINETO_USE_DAEMON", ""):  # as torch: the daemon's step hook
            KinetoStepTracker.increment_step(PROFILER_STEP_NAME)
        if self.record_steps:
            self._enter_step()
        self._raise_callback_error()

    def end_step(self) -> None:
        """End the current step's ``ProfilerStep#N`` now, before the next ``step()``: what runs
        until then is in no step (a framework's validation between two training batches). The
        schedule moves on at ``step()``, as ever; torch's profile has no such call."""
        self._exit_step()

    def _enter_step(self) -> None:
        self.step_rec_fn = record_function("ProfilerStep#" + str(self.step_num))
        self.step_rec_fn.__enter__()

    def _exit_step(self) -> None:
        if self.step_rec_fn is not None:
            rec, self.step_rec_fn = self.step_rec_fn, None
            rec.__exit__(None, None, None)

    def _transit(self, prev: Action, current: Action | None) -> None:
        for action in self.action_map.get((prev, current), []):
            action()

    def _release(self) -> None:
        _RECORDING[:] = [r for r in _RECORDING if r() not in (self, None)]
        if self._orphan_guard is not None:
            self._orphan_guard.detach()
            self._orphan_guard = None

    # -- the schedule's actions (torch's names) -------------------------------------------
    def prepare_trace(self) -> None:
        """Warm up a new session (Kineto starts collecting but the events are discarded)."""
        for hook in list(PREPARE_HOOKS):
            hook(self)
        timeout = self.post_processing_timeout_s
        if timeout is not None and timeout < 0:  # torch checks it here too (autograd profile)
            raise UsageError("post_processing_timeout_s must be non-negative")
        busy = None
        current = recording_profile()
        if current is not None and current is not self:
            busy = "another torchscope profiler is already recording"
        elif torch.autograd.profiler._is_profiler_enabled and self.backend == "kineto" and kineto_recording():
            busy = "a torch profiler is already running in this process"
        if busy is not None:
            # refusing raised out of a framework's training step (Lightning's profiler="pytorch"
            # around a user's own profile); torch's own nesting goes on, so ours does, empty
            reason = f"torchscope: {busy}, which keeps the events; this profile records nothing"
            self._session = Elsewhere(reason)
            warn_user(reason)
            self._torch_stats = _ProfilerStats()
            return
        if self._cycles and not self.acc_events:
            # only the current cycle is held: memory stays flat over long scheduled runs
            for cycle in self._cycles:
                cycle.discard()
            self._cycles = []
            self._events = None
        self.free_kineto_results()  # of the latest cycle only, as torch keeps them
        if self.backend == "portable":
            self._session = PortableSession(
                self.record_shapes, self.with_stack, self.profile_memory, self.with_modules
            )
            self._session.use_device = self.use_device
        else:
            self._session = KinetoSession(self._kineto_options, self._scratch)
            self.use_device = self._session.use_device
        if recording_profile() is not self:
            _RECORDING.append(weakref.ref(self))
        if isinstance(self._session, KinetoSession) and self._orphan_guard is None:
            # dropped while recording, or still recording at exit (a segmentation fault in
            # torch's teardown, with torch's profiler too): Kineto is stopped, its events dropped
            self._orphan_guard = weakref.finalize(self, self._session.abandon)
        self._session.prepare()
        # Kineto's session fills torch's own stats (prepare, enable, disable); we add ours
        inner = getattr(self._session, "_profiler", None)
        self._torch_stats = getattr(inner, "_stats", None) or _ProfilerStats()
        if isinstance(self._session, KinetoSession):
            self._trace_id = self._session.trace_id

    def start_trace(self) -> None:
        """Start recording the events."""
        if self.execution_trace_observer is not None:
            self.execution_trace_observer.start()
        if self._session is None:
            raise ProfilerStateError("start_trace() before prepare_trace()")
        self._session.start()
        if isinstance(self._session, Elsewhere):
            return  # the running profiler's session is not ours to add metadata to
        for key, flag in (
            ("profile_memory", self.profile_memory),
            ("with_stack", self.with_stack),
            ("record_shapes", self.record_shapes),
            ("with_modules", self.with_modules),
            ("with_flops", self.with_flops),
        ):
            if flag:
                self._metadata[key] = "1"
        if self.record_steps and self.mark_cycle_end:  # the schedule ends it, unless stop() does
            self._metadata[CYCLE_ENDED_BY_KEY] = '"schedule"'
        dist_info = _distributed_info()
        if dist_info:
            self._metadata["distributedInfo"] = dist_info
        if self.backend == "kineto":
            for key, value in self._metadata.items():
                torch.autograd._add_metadata_json(key, value)

    def stop_trace(self) -> None:
        """Stop recording; the cycle's results are saved and released from Kineto."""
        if self.execution_trace_observer is not None:
            self.execution_trace_observer.stop()
        session, self._session = self._session, None
        if session is None:
            self._release()
            raise ProfilerStateError("stop_trace() without a running session")
        # a Ctrl-C here comes once the cycle is kept and Kineto is off (``ctrl_c_deferred``);
        # no call of ours before Kineto's disable that is not needed: with_stack records each
        held = hold_ctrl_c()
        try:
            cycle = session.stop()
            if cycle.document is not None:  # the portable document gets the metadata Kineto would write
                for key, value in self._metadata.items():
                    try:
                        cycle.document[key] = json.loads(value)
                    except ValueError:
                        cycle.document[key] = value
            self._cycles.append(cycle)
            self._events = None
        finally:
            self._release()
            deliver_ctrl_c(held)

    def _trace_ready(self) -> None:
        try:
            if self.on_trace_ready is not None:
                self.on_trace_ready(self)
        except Exception as exc:
            self._callback_error = exc
        finally:
            if self._started and self._cycles:
                # the run goes on: what was scanned while the cycle was saved is not kept for a
                # read nobody asked for; Kineto's results stay, as torch's do, until the next
                # cycle is prepared (so one cycle's results at most are held)
                self._cycles[-1].release_scan()

    def _raise_callback_error(self) -> None:
        if self._callback_error is not None:
            exc, self._callback_error = self._callback_error, None
            raise TraceReadyError(
                f"on_trace_ready raised at step {self.step_num}: {type(exc).__name__}: {exc} "
                "(the profiler itself is consistent and can continue)"
            ) from exc

    # -- results ----------------------------------------------------------------------------
    def _require_cycle(self, what: str) -> list[Cycle]:
        if not self._cycles:
            raise NoCycleYetError(f"{what}: no profiling cycle has finished yet")
        return self._cycles

    def _cycles_or_none_yet(self, what: str) -> list[Cycle]:
        """The cycles results are made of; none while the first is still recording, as torch
        gives an empty ``key_averages()``/``events()`` once started (it asserts only before)."""
        if not self._cycles and self._started:
            return []
        return self._require_cycle(what)

    def trace(self) -> Trace:
        """The Trace of the latest finished cycle."""
        return self._require_cycle("trace()")[-1].trace

    def traces(self) -> list[Trace]:
        """The Traces held: the latest cycle, or every cycle with ``acc_events=True``."""
        return [c.trace for c in self._require_cycle("traces()")]

    def _check_post_processing(self) -> float | None:
        """torch's rules for reading results: none under ``trace_only``; the deadline
        ``post_processing_timeout_s`` sets (a ``time.perf_counter()`` value), if any."""
        config = self.experimental_config
        if config is not None and config.trace_only:
            raise ProfilerStateError(TRACE_ONLY_EVENTS)
        timeout = self.post_processing_timeout_s
        return None if timeout is None else time.perf_counter() + timeout

    def key_averages(
        self,
        group_by_input_shape: bool = False,
        group_by_stack_n: int = 0,
        group_by_overload_name: bool = False,
        *,
        tensor_list_shapes: bool = False,
    ) -> KeyAverages:
        """Averages by op name (and input shapes / stack), like torch's; see
        ``compat.averages``. ``tensor_list_shapes=True`` keys tensor-list arguments by their
        tensors' shapes, where torch shows ``[]``."""
        deadline = self._check_post_processing()
        traces = [c.trace for c in self._cycles_or_none_yet("key_averages()")]
        if deadline is not None and time.perf_counter() >= deadline:
            _timed_out(self.post_processing_timeout_s, 0)
            traces = []  # torch's post-processing keeps what it made by then: nothing
        return key_averages(
            traces,
            group_by_input_shape=group_by_input_shape,
            group_by_stack_n=group_by_stack_n,
            group_by_overload_name=group_by_overload_name,
            use_device=self.use_device,
            profile_memory=self.profile_memory,
            with_flops=self.with_flops,
            tensor_list_shapes=tensor_list_shapes,
            overload_names=bool(experimental_option(self.experimental_config, "capture_overload_names")),
            python_functions=TORCH_LISTS_PYTHON_FRAMES,
        )

    def events(self) -> EventList:
        """Every event as an object with torch's ``FunctionEvent`` attribute names, in a list
        with torch's ``EventList`` methods. Built once for the cycles held and kept, as torch
        keeps its list: asking again returns the same list."""
        deadline = self._check_post_processing()
        if self._events is not None:
            return self._events
        with_metadata = bool(experimental_option(self.experimental_config, "expose_kineto_event_metadata"))
        events: list[FunctionEvent] = []
        cycles = self._cycles_or_none_yet("events()")
        traces = [cycle.trace for cycle in cycles]  # read now if no table read them yet
        t1 = time.perf_counter()
        for cycle in cycles:
            built, timed_out = build_events(
                cycle.trace,
                use_device=self.use_device,
                with_flops=self.with_flops,
                event_args=LazyEventArgs(
                    cycle.path or cycle.document,
                    with_metadata=with_metadata,
                    python_rows=python_rows(cycle.trace),
                ),
                overload_names=bool(experimental_option(self.experimental_config, "capture_overload_names")),
                deadline=deadline,
            )
            events += built
            if timed_out:
                _timed_out(self.post_processing_timeout_s, len(events))
                break
        stats = self._torch_stats
        if stats is not None:
            # torch's parse of Kineto's results is our read of the saved cycle, whenever it ran
            stats.parse_kineto_call_duration_us = int(sum(cycle.read_s for cycle in cycles) * 1e6)
            stats.function_events_build_tree_call_duration_us = max(1, int((time.perf_counter() - t1) * 1e6))
            stats.number_of_events = len(events)
        del traces
        self._events = EventList(events, self)
        return self._events

    @property
    def self_cpu_time_total(self) -> float:
        """Total self CPU time of the held cycles (us), the table's footer."""
        return self.key_averages().self_cpu_time_total

    def _stats(self) -> _ProfilerStats | None:
        """torch's developer timings of the latest cycle (``prof._stats()``): Kineto's prepare,
        enable and disable as torch measures them; reading the Trace as the parse time, and
        building ``events()`` as the tree's (both 0 until ``events()`` is first called)."""
        return self._torch_stats

    @property
    def profiler(self) -> TorchProfilerView | None:
        """What torch's ``prof.profiler`` (its ``torch.autograd.profiler.profile``) gives scripts
        that reach into it: ``kineto_results`` and ``function_events``. None before the first
        cycle is prepared, as torch's."""
        if self._session is None and not self._cycles:
            return None
        return TorchProfilerView(self)

    def table(self, sort_by: str | None = None, row_limit: int | None = 100, **kwargs: Any) -> str:
        return self.key_averages().table(sort_by=sort_by, row_limit=row_limit, **kwargs)

    def to_polars(self) -> pl.DataFrame:
        return self.key_averages().to_polars()

    def export_chrome_trace(self, path: str | os.PathLike[str], use_python_export: bool = False) -> None:
        """Write the latest cycle as Chrome trace JSON (``.gz`` means gzip)."""
        self._require_cycle("export_chrome_trace()")[-1].export(path)

    def export_stacks(self, path: str | os.PathLike[str], metric: str = "self_cpu_time_total") -> None:
        """Collapsed stacks (``frame;frame;op value``) that flamegraph tools read."""
        if not self.with_stack:
            raise AssertionError("export_stacks() requires with_stack=True")
        export_stacks(self.traces(), Path(path), metric)

    def add_metadata(self, key: str, value: str) -> None:
        """Add a string metadata entry to the trace (while recording)."""
        self.add_metadata_json(key, '"' + value.replace('"', '\\"') + '"')

    def add_metadata_json(self, key: str, value: str) -> None:
        """Add a JSON metadata entry to the trace (while recording)."""
        self._metadata[key] = value
        if (
            self.backend == "kineto"
            and self._session is not None
            and torch.autograd.profiler._is_profiler_enabled
        ):
            torch.autograd._add_metadata_json(key, value)

    def preset_metadata_json(self, key: str, value: str) -> None:
        """Metadata to add when recording starts."""
        self._metadata[key] = value

    def free_kineto_results(self) -> None:
        """Free the Kineto results the held cycles keep for ``export_memory_timeline`` (with
        ``record_shapes``, ``profile_memory`` and ``with_stack`` on), when nobody will ask for it."""
        for cycle in self._cycles:
            cycle.release_kineto(even_if_kept=True)

    def set_custom_trace_id_callback(self, callback: Callable[[], str]) -> None:
        """Set the trace id generator, called when each cycle is prepared (as torch's)."""
        self._kineto_options["custom_trace_id_callback"] = callback

    def get_trace_id(self) -> str | None:
        """The trace id of the latest Kineto cycle (None before the first one, as torch's)."""
        return self._trace_id

    def export_memory_timeline(self, path: str, device: str | None = None) -> None:
        """torch's memory timeline (``.html`` plot, ``.json``/``.json.gz`` points by category,
        ``.raw.json.gz`` events), made by torch's own memory profiler from Kineto's results.

        Its categories (parameters, gradients, activations, optimizer state, ...) come from
        torch's data-flow analysis of the op tree, which the trace file does not carry, so we
        call torch's code rather than redo it; for that the cycle keeps Kineto's results when
        ``record_shapes``, ``profile_memory`` and ``with_stack`` are all on (torch's requirement).
        Deprecated in torch as it is here.
        """
        warnings.warn(
            "`export_memory_timeline` is deprecated and will be removed in a future version. "
            "Please use `torch.cuda.memory._record_memory_history` and "
            "`torch.cuda.memory._export_memory_snapshot` instead.",
            FutureWarning,
            stacklevel=2,
        )
        missing = [f"{name}=True" for name in MEMORY_TIMELINE_OPTIONS if not getattr(self, name)]
        if missing:
            raise ValueError(f"{', '.join(missing)} required for memory profiling.")
        results = self._require_cycle("export_memory_timeline()")[-1].kineto_results
        if results is None:
            raise ProfilerStateError(
                "export_memory_timeline(): this cycle has no Kineto results"
                + (
                    " (the portable backend records none)"
                    if self.backend == "portable"
                    else " (freed by free_kineto_results(), or when the next cycle was prepared: call it"
                    " before that, as torch's needs them too)"
                )
            )
        write_memory_timeline(results, path, device or _default_memory_device(self.use_device))

    def toggle_collection_dynamic(self, enable: bool, activities: Iterable[ProfilerActivity]) -> None:
        if self._session is not None and isinstance(self._session, KinetoSession):
            self._session._profiler.toggle_collection_dynamic(enable, activities)

    def __repr__(self) -> str:
        state = "recording" if self._session is not None else ("started" if self._started else "idle")
        return f"<torchscope.profile {state}, step {self.step_num}, {len(self._cycles)} cycle(s) held>"


def experimental_option(config: _ExperimentalConfig | None, name: str) -> Any:
    """One option of torch's ``_ExperimentalConfig``, also those its binding does not expose as
    attributes (``expose_kineto_event_metadata``): its pickled state lists the options in the
    order of its ``__init__``, whose signature the binding's docstring spells out."""
    if config is None:
        return None
    if hasattr(config, name):
        return getattr(config, name)
    signature = (type(config).__init__.__doc__ or "").split("\n", 1)[0]
    names = re.findall(r"(\w+): [^,=]+=", signature)
    state: Any = getattr(config, "__getstate__", tuple)()
    if name in names and isinstance(state, tuple) and len(state) == len(names):
        return state[names.index(name)]
    return None


def python_rows(trace: Trace) -> list[tuple[int, str]]:
    """(row, name) of the Trace's ``python_function`` events, in row order."""
    frames = trace.events.filter(pl.col("kind") == "python_function")
    return list(frames.select("id", pl.col("name").cast(pl.String)).iter_rows())


def _timed_out(timeout_s: float | None, kept: int) -> None:
    log.warning(
        "Profiler post-processing timed out after %.3f seconds, returning partial results with %d events",
        timeout_s,
        kept,
    )


class KinetoResults:
    """Kineto's result object of a cycle, as torch hands it out, but for ``save``: Kineto saves
    a result once ("Trace is already saved"), and ours was saved at ``stop()``, so ``save(path)``
    writes that file (``Cycle.export``). ``prof.profiler.kineto_results.save(...)`` is how
    scripts written for torch keep a trace (a new user's find: it always raised)."""

    def __init__(self, results: Any, cycle: Any) -> None:
        self._results = results
        self._cycle = cycle

    def save(self, path: str) -> None:
        self._cycle.export(path)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._results, name)


class TorchProfilerView:
    """``prof.profiler``: the attributes of torch's inner profiler that scripts use.

    ``kineto_results`` is Kineto's own result object (``events()``,
    ``experimental_event_tree()``, ``save()``) of the latest cycle, held as torch holds it:
    until the next cycle is prepared, ``free_kineto_results()`` or the profile goes (that is
    most of the memory a cycle holds). After that, asking for it raises an error that says
    what to use instead.
    """

    def __init__(self, owner: profile) -> None:
        self._owner = owner

    @property
    def kineto_results(self) -> Any:
        owner = self._owner
        if not owner._cycles:
            return None  # torch's before the first cycle ends
        cycle = owner._cycles[-1]
        instead = (
            "use prof.trace() (every event as columns) or prof.events() (torch's FunctionEvent"
            " objects, with cpu_children) instead"
        )
        if owner.backend == "portable":
            raise ProfilerStateError(
                f"prof.profiler.kineto_results: the portable backend records without Kineto, so there are none; {instead}"
            )
        if cycle.kineto_results is None:
            raise ProfilerStateError(
                "prof.profiler.kineto_results: torchscope freed Kineto's results of this cycle "
                f"(when the next cycle was prepared, or at free_kineto_results()). Read them before that, or {instead}"
            )
        return KinetoResults(cycle.kineto_results, cycle)

    @property
    def function_events(self) -> EventList:
        return self._owner.events()

    def key_averages(self, *args: Any, **kwargs: Any) -> KeyAverages:
        return self._owner.key_averages(*args, **kwargs)

    @property
    def self_cpu_time_total(self) -> float:
        return self._owner.self_cpu_time_total

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(
            f"torchscope's prof.profiler has no {name!r} (it offers kineto_results, function_events, "
            "key_averages and self_cpu_time_total); use prof.trace() for the recorded events"
        )


def _default_memory_device(use_device: str | None) -> str:
    """torch's default for ``export_memory_timeline``: the first device, CUDA's when present."""
    if use_device and use_device != "cuda":
        return use_device + ":0"
    return "cuda:0" if torch.cuda.is_available() else "cpu"


def _has_matplotlib() -> bool:
    """Whether matplotlib imports (torch draws the memory timeline's HTML plot with it)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def write_memory_timeline(results: Any, path: str, device: str) -> None:
    """Write torch's memory timeline of Kineto's ``results`` to ``path``, by its suffix, whole or
    not at all (``writes.write_atomically``: torch writes to the hidden temporary, which keeps
    the suffix)."""
    import gzip
    import tempfile

    from torch.profiler._memory_profiler import MemoryProfile, MemoryProfileTimeline

    from torchscope.writes import write_atomically

    if path.endswith(".html") and not _has_matplotlib():
        # torch prints a line and writes nothing; its plot was then looked for and a WriteError
        # "No such file or directory" blamed the path
        warn_user(
            f"torchscope: {path} was not written: the memory timeline's HTML plot needs"
            " matplotlib (pip install matplotlib); .json, .json.gz and .raw.json.gz need nothing"
        )
        return
    timeline = MemoryProfileTimeline(MemoryProfile(results))
    if path.endswith(".html"):
        write_atomically(path, lambda tmp: timeline.export_memory_timeline_html(str(tmp), device))
        return
    if not path.endswith(".gz"):
        write_atomically(path, lambda tmp: timeline.export_memory_timeline(str(tmp), device))
        return
    write = (
        timeline.export_memory_timeline_raw
        if path.endswith("raw.json.gz")
        else timeline.export_memory_timeline
    )
    with tempfile.TemporaryDirectory(prefix="torchscope-") as scratch:  # torch writes plain JSON only
        plain = Path(scratch) / "timeline.json"
        write(str(plain), device)
        packed = gzip.compress(plain.read_bytes())
    write_atomically(path, lambda tmp: tmp.write_bytes(packed))
