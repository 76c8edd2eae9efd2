"""A low-overhead sampler of the main thread's Python stack: the hot spots the op profiler misses.

The op profiler sees ATen ops; it does not see ``np.argwhere`` or a slow pure-Python loop, so
a script whose time goes there looks idle (the seed tutorial's masking example). A background
thread reads the main thread's frame every ``interval_s`` via ``sys._current_frames`` and keeps
one compact record per sample (wall-clock time, an interned stack id). A sample weighs the
time since the previous one: a C call that holds the GIL (NumPy's ``nonzero``) delays the
sampler, and the whole delay is then charged to the frame found when it returns, which is the
Python function that made the call. While it samples, the interpreter's switch interval is
the sampling interval (it is 5 ms by default, and a busy pure-Python loop would otherwise let
the sampler in only that often, which looked like long C calls). ``HotSpots.table``
aggregates per function: total and self time, and, given the trace's op intervals on the same
thread, the share of that time no op covered: the part only this table shows. "Self" time is
charged to the call the user's code made (``hot_frame``), so the table names ``np.argwhere``
rather than the NumPy helpers inside it.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import sys
import threading
import time
from array import array
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from types import CodeType, FrameType
from typing import Any

import numpy as np

from torchscope.runner import target as _target
from torchscope.runner.tool_thread import ToolThread

# Frames of the machinery around the user's code; never reported as hot spots.
_SKIP_PARTS = (
    os.sep + "runpy.py",
    "<frozen runpy>",
    os.sep + "threading.py",
    os.path.join("torchscope", "__main__.py"),  # also when run from an installed copy elsewhere
)
_EXECUTE_FILE = _target.__file__  # the runner's execute(): the script runs below it
Func = tuple[str, str, int]  # (filename, function name, first line)


_LIBRARY_PARTS = ("site-packages" + os.sep, "dist-packages" + os.sep, "<frozen ", "<built-in")
_STDLIB = os.path.dirname(os.__file__) + os.sep
_TORCH_PART = os.sep + "torch" + os.sep  # torch's own package, under site-packages
_IMPORTLIB = "<frozen importlib."
# Every frame of our own package is machinery, wherever it is installed (an editable install is
# not under site-packages): the step hook the runner wraps around the user's optimizer.step()
# must never be a hot spot; its time goes to the user's line that called step().
_OWN_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def _skipped(filename: str) -> bool:
    return filename.startswith(_OWN_PACKAGE) or any(part in filename for part in _SKIP_PARTS)


# The portable collector runs each op from its dispatch mode's ``__torch_dispatch__``. A sample
# taken there is the op call the user's line made, as under Kineto, where all of it is C: the
# frames leafward of the collector (the op running: ``OpOverload.__call__``) and torch's
# plumbing right rootward of it (how a C op enters a mode) are left out. They named the row of
# every op call ("_disable_dynamo.<locals>.inner at train.py:6" for a ``torch.randn``).
_COLLECTOR_FILES = frozenset(
    os.path.join(_OWN_PACKAGE, "capture", name) for name in ("portable.py", "device_clock.py")
)
_DISPATCH_PLUMBING = frozenset({(os.path.join("torch", "_compile.py"), "inner")})
# and the whole of these: the disable wrapper's module (``_fn`` and the checks it makes on each
# call, ``_callback_from_stance``...) and the ``torch.compiler`` predicates those checks call
# (a sample in ``is_exporting``, under ``_fn``, was once charged as a function of the script's)
_PLUMBING_FILES = tuple(
    os.sep + path
    for path in (
        os.path.join("torch", "_dynamo", "eval_frame.py"),
        os.path.join("torch", "compiler", "__init__.py"),
    )
)
# and all of ``torch._library``: the rule lookup torch's C dispatcher makes for each op while a
# mode is on (``find_torch_dispatch_rule``, the registry entry it makes for an op first seen)
_DISPATCH_PLUMBING_DIR = os.sep + os.path.join("torch", "_library") + os.sep


def _is_plumbing(code: CodeType) -> bool:
    filename = code.co_filename
    return (
        _DISPATCH_PLUMBING_DIR in filename
        or filename.endswith(_PLUMBING_FILES)
        or any(filename.endswith(os.sep + path) and code.co_name == name for path, name in _DISPATCH_PLUMBING)
    )


def _kept_frames(codes: tuple[CodeType, ...], lines: tuple[int, ...]) -> list[tuple[CodeType, int]]:
    """The frames a sample is charged by (leaf first): not ours (``_skipped``), for a sample
    in the portable collector's hook only those rootward of the op call it runs, and never
    torch's dispatch plumbing as the leaf."""
    pairs = list(zip(codes, lines, strict=True))
    collector = [i for i, (code, _) in enumerate(pairs) if code.co_filename in _COLLECTOR_FILES]
    if collector:
        pairs = pairs[collector[-1] + 1 :]
    # the plumbing at the leaf: the mode being entered or left, or a wrapper's own time
    while pairs and _is_plumbing(pairs[0][0]):
        pairs = pairs[1:]
    return [(code, line) for code, line in pairs if not _skipped(code.co_filename)]


def _is_library(filename: str) -> bool:
    return filename.startswith(_STDLIB) or any(p in filename for p in _LIBRARY_PARTS)


def _user_part(codes: tuple[CodeType, ...]) -> tuple[CodeType, ...]:
    """The frames run by the user's script: those leafward of the runner's runpy call.

    ``codes`` is leaf first. The runner's ``execute`` runs the script through its ``_exec_script``
    (a file) or ``runpy`` (a module, a directory), whose ``_run_code`` executes the script's code; everything rootward of that (the ``torchscope`` console script, ``python -m`` machinery, the
    CLI, the runner) is not the user's code, and a stack not inside that runpy call at all
    (torchscope's own work before or after the script, printing its traceback) is dropped.
    """
    # runpy's _run_code, or the runner's _exec_script: it executes the script's code
    run_code: int | None = None
    for i, code in enumerate(codes):
        if run_code is None and (
            (code.co_name == "_run_code" and _is_runpy(code.co_filename))
            or (code.co_name == "_exec_script" and code.co_filename == _EXECUTE_FILE)
        ):
            run_code = i
        if code.co_name == "execute" and code.co_filename == _EXECUTE_FILE:
            return codes[:run_code] if run_code is not None else ()
    return ()


def _is_runpy(filename: str) -> bool:
    return filename == "<frozen runpy>" or filename.endswith(os.sep + "runpy.py")


# the runner's hooks run inside the script's calls; their time is the profiler's
_HOOK_FILES = tuple(
    os.path.join(os.path.dirname(os.path.abspath(__file__)), name) for name in ("session.py", "bounds.py")
)
PROFILER_FRAME: Func = ("<torchscope>", "torchscope profiler (step, cycle stop and save)", 0)


def _in_runner_hook(codes: tuple[CodeType, ...]) -> bool:
    return any(c.co_filename in _HOOK_FILES for c in codes)


def hot_frame(stack: tuple[Func, ...]) -> Func:
    """The frame a sample's time is charged to as "self": the call the user's code made.

    Time inside a library is charged to the outermost public library function the user's
    code called (``numpy.argwhere``, not its helpers ``_wrapfunc``/``nonzero``/``transpose``):
    that is the call a user can change (``_library_calls`` then places its row at the user's
    line that made it). Time in torch's own Python (``Tensor.backward`` in
    ``torch/_tensor.py``, ``Sequential.forward`` in ``container.py``, an optimizer's ``step``)
    is the model running, which every profile shows first and no user writes: it is charged to
    the innermost frame of the user's code that called into torch, so the user's lines rank
    first. Time in the user's own code stays with the innermost user frame.
    """
    user = next((i for i, f in enumerate(stack) if not _is_library(f[0])), len(stack))
    if user == 0:
        return stack[0]
    lib = stack[:user]  # leaf first: lib[-1] is what the user's code called
    if user < len(stack) and _TORCH_PART in lib[-1][0]:
        return stack[user]
    public = [f for f in lib if not f[1].startswith("_") or (f[1].startswith("__") and f[1].endswith("__"))]
    if public:
        return public[-1]
    # only private helpers, entered from C (``a.sum()``'s ``_methods._sum``, the dispatcher
    # ``np.sort`` calls first, ``_sort_dispatcher``): no call a user wrote or can name, so the
    # user's line that made it keeps the time (a new user saw rows for both, at NumPy's files)
    return stack[user] if user < len(stack) else lib[-1]


# special methods that are machinery around a call (a context manager the call opens, an
# object made callable), never what the user called: ``record_function.__enter__``
_MACHINERY_DUNDERS = frozenset({"__enter__", "__exit__", "__call__", "__del__"})


def _call_label(codes: tuple[CodeType, ...]) -> str | None:
    """How the user's call into torch is named: the outermost torch function a user would
    recognise (``Adam.step``, ``Tensor.backward``, ``Linear.forward``), skipping the decorators'
    inner functions (``Optimizer.profile_hook_step.<locals>.wrapper``), private helpers
    (``Module._call_impl``) and the context managers they open (``record_function.__enter__``)
    on the way; ``for x in loader`` is ``_BaseDataLoaderIter.__next__``. A method is named by
    the class that defines it (``AdamW``'s inherited step is ``Adam.step``: the runner renames
    it, ``HotSpots.named_by_class``). ``codes`` is leaf first; None when no frame of this sample qualifies."""
    for depth, code in enumerate(reversed(codes)):
        qualname = getattr(code, "co_qualname", code.co_name)
        name = code.co_name
        special = name.startswith("__") and name.endswith("__")
        # a special method is the user's call only when the user's code entered it directly
        # (``Linear(...)``'s ``__init__``, ``for x in loader``'s ``__next__``)
        allowed = not name.startswith("_") or (special and depth == 0 and name not in _MACHINERY_DUNDERS)
        if "<locals>" not in qualname and allowed:
            return str(qualname)
    return None


def _library_calls(entries: list[tuple[int, tuple[CodeType, ...], tuple[int, ...]]]) -> dict[int, Func]:
    """The row each sampled stack's "self" time goes to when its innermost user frame is
    calling into a library (``entries``: ``sid``, user frames leaf first, their current lines).

    Time in a library's Python is charged to the call the user's code made, named by the
    library function and placed at the user's line: ``Adam.step`` at ``train.py:12``, so a
    script whose whole loop is module-level code shows ``opt.step()`` and ``backward()`` apart
    instead of one ``<module>`` row with all the time; ``argwhere`` at ``train.py:19`` (the
    seed's masking line), not at NumPy's ``numeric.py:624``, which named a file the user never
    opens. One call (a user line and the function it entered) gets one name, the one most of its
    stacks give: a sample caught in the optimizer's ``record_function`` is still ``Adam.step``.

    A call into torch with no public function on the way (``F.max_pool2d``'s decorated inner
    function) is named by its implementation; one into another library with none (``a.sum()``'s
    ``_methods._sum``, ``np.sort``'s dispatcher, entered from C) is no call the user wrote, and
    the user's line keeps the time (``hot_frame``).
    """
    groups: dict[tuple[str, int, CodeType], list[tuple[int, str | None]]] = {}
    for sid, codes, lines in entries:
        user = next((i for i, c in enumerate(codes) if not _is_library(c.co_filename)), len(codes))
        if 0 < user < len(codes):
            key = (codes[user].co_filename, lines[user], codes[user - 1])
            # an import statement runs the module it imports through importlib's frozen frames:
            # "import", not "_LoaderBasics.exec_module" (a new user's row)
            label = "import" if codes[user - 1].co_filename.startswith(_IMPORTLIB) else _call_label(codes[:user])
            if label is None and _TORCH_PART in codes[user - 1].co_filename:
                label = _implementation_label(codes[:user])
            groups.setdefault(key, []).append((sid, label))
    calls: dict[int, Func] = {}
    for (filename, line, entry), members in groups.items():
        labels = [label for _, label in members if label is not None]
        if not labels and (_is_plumbing(entry) or _TORCH_PART not in entry.co_filename):
            # only torch's dispatch plumbing and its machinery (a mode's ``__exit__`` under the
            # disable wrapper, under the portable collector), or another library's private
            # helpers: no call the user made, so the user's line keeps the time (it was a row
            # "_disable_dynamo.<locals>.inner")
            continue
        name = (
            max(sorted(set(labels)), key=labels.count)
            if labels
            else str(getattr(entry, "co_qualname", entry.co_name))
        )
        for sid, _ in members:
            calls[sid] = (filename, name, line)
    return calls


def _implementation_label(codes: tuple[CodeType, ...]) -> str | None:
    """A call's name when ``_call_label`` finds no public frame: the outermost function that is
    no decorator's inner one, without its leading underscores (``F.max_pool2d`` is
    ``boolean_dispatch``'s inner ``fn`` around ``_max_pool2d``: "max_pool2d"). Every sample of
    a call votes with a name now: the few inside a helper it calls (``torch.jit.annotate``)
    named the row when the rest, in C, gave none."""
    for code in reversed(codes):  # outermost first
        qualname = str(getattr(code, "co_qualname", code.co_name))
        if "<locals>" not in qualname and not _is_plumbing(code) and code.co_name not in _MACHINERY_DUNDERS:
            head, _, last = qualname.rpartition(".")
            return (head + "." if head else "") + (last.lstrip("_") or last)
    return None


def _hot_or_ours(stack: tuple[Func, ...]) -> Func:
    """``hot_frame`` of a stack (our own frame for the runner's work); an empty stack (outside
    the script, dropped) has none."""
    return hot_frame(stack) if stack else PROFILER_FRAME


# samples a Sampler holds at most (14 bytes each: 29 MB); reaching it thins them (``_thin``)
MAX_SAMPLES = 1 << 21


@dataclass
class Sampler:
    """Samples one thread's Python stack at a fixed interval while started.

    Memory stays bounded however long the run: at ``max_samples`` (35 minutes at 1 ms) it
    drops every other sample taken while nothing was recorded, each one's time going to the
    sample after it, so the samples still add up to the run. Samples taken while a cycle was
    recorded (``recording``) are the ones a trace's hot spots and the advice read: they go
    too only when too few others could (a run recorded throughout, as ``--all`` records it).
    """

    interval_s: float = 0.001
    script_only: bool = False  # keep only frames run by a runpy-executed script (the runner's mode)
    max_samples: int = MAX_SAMPLES
    # whether a cycle is being recorded now (asked at each sample; None: always)
    recording: Callable[[], bool] | None = None
    thread_id: int = field(default_factory=threading.get_ident)
    native_id: int = field(default_factory=threading.get_native_id)
    _times: array = field(default_factory=lambda: array("q"))
    _stack_ids: array = field(default_factory=lambda: array("i"))
    # per sample: how often thinning doubled the time it stands for, and whether a cycle was
    # being recorded when it was taken
    _levels: array = field(default_factory=lambda: array("b"))
    _recorded: array = field(default_factory=lambda: array("b"))
    _stacks: dict[tuple[tuple[CodeType, ...], tuple[int, ...]], int] = field(default_factory=dict)
    _worker: ToolThread | None = None
    _switch: float | None = None  # the interpreter's switch interval before start(), restored by stop()

    def start(self) -> None:
        # A thread waiting for the GIL gets it only after the interpreter's switch interval (5 ms
        # by default): a script busy in pure Python was sampled every ~5 ms, and each such gap,
        # taken for a C call holding the GIL (``_charge_long_gaps``), went to the frames the
        # samples around it shared: a 9 ms pure-Python function called at module level showed as
        # ``<module>``'s self time. Switching as often as we sample keeps gaps for real C calls.
        self._switch = sys.getswitchinterval()
        sys.setswitchinterval(min(self._switch, self.interval_s))
        self._worker = ToolThread(self._loop, self.interval_s)
        self._worker.start()

    @property
    def own_thread(self) -> int | None:
        """The native id of the thread that samples (None before ``start``): the tool's, never
        the script's (``dialect.TOOL_THREADS_KEY``)."""
        return self._worker.native_id if self._worker is not None else None

    def stop(self) -> HotSpots:
        if self._worker is not None:
            self._worker.stop()
        if self._switch is not None:
            sys.setswitchinterval(self._switch)
            self._switch = None
        return HotSpots.from_samples(self)

    def _loop(self, stopped: Callable[[], bool]) -> None:
        tid, recording = self.thread_id, self.recording
        stacks = self._stacks
        while not stopped():
            frame: FrameType | None = sys._current_frames().get(tid)
            # the time of the look, not of the walk after it: the walk can lose the GIL (the
            # switch interval is the sampling interval), and a time taken after it fell inside
            # the op the script had moved on to (a busy function 85% outside ops, not ~100%,
            # on a loaded machine)
            now = time.time_ns()
            codes: list[CodeType] = []
            lines: list[int] = []
            while frame is not None:
                codes.append(frame.f_code)
                lines.append(frame.f_lineno or 0)
                frame = frame.f_back
            key = (tuple(codes), tuple(lines))
            sid = stacks.get(key)
            if sid is None:
                sid = stacks[key] = len(stacks)
            self._times.append(now)
            self._stack_ids.append(sid)
            self._levels.append(0)
            self._recorded.append(1 if recording is None or recording() else 0)
            if len(self._times) >= self.max_samples:
                self._thin()

    def _thin(self) -> None:
        """Drop every other sample that may go, each one's time going to the sample after it.

        A sample weighs the time since the one before it: once one is dropped, the next stands
        for both (its ``level`` says how many times its nominal interval doubled, so that a gap
        long enough to be a C call holding the GIL is still told apart: ``_charge_long_gaps``).
        A sample may go when it and the next were both taken while nothing was recorded, so a
        recorded sample never takes unrecorded time; when fewer than a quarter of the samples
        may go, every other sample goes.
        """
        n = len(self._times)
        quiet = np.frombuffer(self._recorded, dtype=np.int8) == 0
        may_go = np.flatnonzero(quiet[:-1] & quiet[1:])
        if may_go.size < n // 4:
            may_go = np.arange(n - 1)
        gone = may_go[::2]  # never two in a row: each kept sample takes at most one
        keep = np.ones(n, dtype=bool)
        keep[gone] = False
        levels = np.frombuffer(self._levels, dtype=np.int8).copy()
        levels[gone + 1] = np.maximum(levels[gone], levels[gone + 1]) + 1
        self._times = _array("q", np.frombuffer(self._times, dtype=np.int64)[keep])
        self._stack_ids = _array("i", np.frombuffer(self._stack_ids, dtype=np.int32)[keep])
        self._levels = _array("b", levels[keep])
        self._recorded = _array("b", (~quiet[keep]).astype(np.int8))


def _array(code: str, values: np.ndarray) -> array:
    out = array(code)
    out.frombytes(values.tobytes())
    return out


def hottest_line(ns_by_line: dict[int, float]) -> int:
    """The line that holds the most time (the first of equals)."""
    return max(ns_by_line, key=lambda line: (ns_by_line[line], -line))


# a function caught by fewer samples has no "outside ops" share: one or two samples make it
# 0 % or 100 % (``makedirs`` 0 % beside ``manual_seed`` 100 %, neither of which runs an op)
MIN_SAMPLES_FOR_SHARE = 3


@dataclass(frozen=True)
class HotSpots:
    """The samples of one run: ``times_ns`` (wall clock) and the function stack of each."""

    interval_ns: int
    native_id: int
    times_ns: np.ndarray
    stack_ids: np.ndarray
    stacks: tuple[tuple[Func, ...], ...]  # leaf first, runner frames removed
    # per stack, the row its "self" time goes to (``_library_calls``); empty: ``hot_frame``
    hot: tuple[Func, ...] = ()
    # each sample's weight when already known (clipped to a recorded window: ``windowed``);
    # None: the time since the previous sample
    spans_ns: np.ndarray | None = None
    # per stack, the line its "self" row was running (empty: the row's own line)
    hot_lines: tuple[int, ...] = ()

    def hot_of(self, sid: int) -> Func:
        return self.hot[sid] if sid < len(self.hot) else hot_frame(self.stacks[sid])

    def hot_line_of(self, sid: int) -> int:
        """The line the self row of stack ``sid`` was running."""
        return self.hot_lines[sid] if sid < len(self.hot_lines) else self.hot_of(sid)[2]

    def named_by_class(self, optimizers: Iterable[type]) -> HotSpots:
        """The rows of these optimizer classes' ``step`` named by the class that stepped.

        A code object knows only the class that defines it: torch's ``AdamW`` inherits
        ``Adam.step``, so an AdamW run's hot spots said ``Adam.step`` where its trace says
        ``Optimizer.step#AdamW.step``. When one class of the run stepped through an inherited
        ``step`` (and the defining class itself did not step), its rows take that class's name.
        The function is unwrapped first: torch puts its profiling wrapper on each subclass.
        """
        owners: dict[str, set[str]] = {}
        for cls in optimizers:
            with contextlib.suppress(AttributeError, ValueError):
                label = str(inspect.unwrap(cls.step).__qualname__)  # type: ignore[attr-defined]
                owners.setdefault(label, set()).add(f"{cls.__qualname__}.step")
        names = {label: min(used) for label, used in owners.items() if len(used) == 1 and label not in used}
        if not names:
            return self
        return replace(self, hot=tuple((f, names.get(name, name), line) for f, name, line in self.hot))

    @classmethod
    def from_samples(cls, sampler: Sampler) -> HotSpots:
        sampled = list(sampler._stacks.items())
        # each stack whose leaf was just entered (a call about to run its first line), as it was
        # without that call: a gap ending there was spent before the call (``_charge_long_gaps``)
        known = dict(sampled)
        callers: dict[int, int] = {}
        for (codes, lines), sid in sampled[:]:
            if len(codes) > 1 and lines[0] == codes[0].co_firstlineno:
                key = (codes[1:], lines[1:])
                if key not in known:
                    known[key] = len(known)
                    sampled.append((key, known[key]))
                callers[sid] = known[key]
        stacks: list[tuple[Func, ...]] = [()] * len(sampled)
        current: list[tuple[int, ...]] = [()] * len(sampled)  # each kept frame's line
        entries: list[tuple[int, tuple[CodeType, ...], tuple[int, ...]]] = []
        for (codes, lines), sid in sampled:
            n = len(_user_part(codes)) if sampler.script_only else len(codes)
            kept = _kept_frames(codes[:n], lines[:n])
            user_codes = tuple(c for c, _ in kept)
            user = tuple((c.co_filename, c.co_name, c.co_firstlineno) for c in user_codes)
            current[sid] = tuple(ln for _, ln in kept)
            # the runner's own work inside the script's call (a cycle stopped and saved in the
            # optimizer.step() hook) is named as ours, never charged to the user's frame
            if user and _in_runner_hook(codes[:n]):
                stacks[sid] = (PROFILER_FRAME, *user)
                current[sid] = (PROFILER_FRAME[2], *current[sid])
            else:
                stacks[sid] = user
                entries.append((sid, user_codes, current[sid]))
        calls = _library_calls(entries)
        hot = [calls.get(sid) or _hot_or_ours(stack) for sid, stack in enumerate(stacks)]
        # the line each stack's self row was on: its frame's current line (a call row is at it)
        hot_lines = [
            h[2] if sid in calls or h not in stacks[sid] else current[sid][stacks[sid].index(h)]
            for sid, h in enumerate(hot)
        ]
        interval_ns = int(sampler.interval_s * 1e9)
        times = np.frombuffer(sampler._times, dtype=np.int64).copy()
        ids = np.frombuffer(sampler._stack_ids, dtype=np.int32).copy()
        # the interval each sample stands for (longer where thinning dropped the ones before it)
        nominal = interval_ns << np.frombuffer(sampler._levels, dtype=np.int8).astype(np.int64)
        _charge_long_gaps(times, ids, stacks, nominal, callers)
        # Samples outside the script (our own start-up, printing its traceback) are not its time.
        inside = np.array([bool(stacks[i]) for i in range(len(stacks))], dtype=bool)
        if inside.size:
            keep = inside[ids]
            times, ids, nominal = times[keep], ids[keep], nominal[keep]
        thinned = bool(nominal.size) and int(nominal.max()) > interval_ns
        return cls(
            interval_ns=interval_ns,
            native_id=sampler.native_id,
            times_ns=times,
            stack_ids=ids,
            stacks=tuple(stacks),
            hot=tuple(hot),
            # the first sample stands for its own nominal interval, the others for their gaps
            spans_ns=np.diff(times, prepend=times[0] - nominal[0]) if thinned else None,
            hot_lines=tuple(hot_lines),
        )

    @property
    def samples(self) -> int:
        return int(self.times_ns.size)

    @property
    def weights_ns(self) -> np.ndarray:
        """Time each sample stands for: the gap since the previous sample (or ``spans_ns``)."""
        if self.spans_ns is not None:
            return self.spans_ns
        if self.samples == 0:
            return np.zeros(0, dtype=np.int64)
        return np.diff(self.times_ns, prepend=self.times_ns[0] - self.interval_ns)

    def windowed(self, keep: np.ndarray, spans_ns: np.ndarray) -> HotSpots:
        """The samples ``keep`` selects, each weighing ``spans_ns`` (computed on the whole
        stream, then clipped to its window): recomputing the gaps after the selection would give
        the first sample of each recorded window the whole unrecorded time before it."""
        return HotSpots(
            self.interval_ns,
            self.native_id,
            self.times_ns[keep],
            self.stack_ids[keep],
            self.stacks,
            self.hot,
            spans_ns[keep].astype(np.int64),
            self.hot_lines,
        )

    @property
    def midpoints_ns(self) -> np.ndarray:
        """The middle of the span each sample stands for (used to test op coverage)."""
        return self.times_ns - self.weights_ns // 2

    def table(self, covered: np.ndarray | None = None, limit: int = 30) -> list[dict[str, Any]]:
        """Per function: total/self time and samples; ``covered[i]`` says an op covered sample i.
        Library functions with no self time are left out (their callers' rows hold their time).

        ``outside_ops_pct`` is the share of the function's time during which no op ran on its
        thread (None when ``covered`` is not known, or the function has fewer than
        ``MIN_SAMPLES_FOR_SHARE`` samples): high means the op profiler cannot see it.
        """
        if self.samples == 0:
            return []
        n_stacks = len(self.stacks)
        w = self.weights_ns.astype(np.float64)
        per_stack = np.bincount(self.stack_ids, weights=w, minlength=n_stacks)
        count_stack = np.bincount(self.stack_ids, minlength=n_stacks)
        outside = (
            np.bincount(self.stack_ids, weights=w * ~covered, minlength=n_stacks)
            if covered is not None
            else None
        )
        # func -> [total ns, self ns, outside ns, samples]
        total: dict[Func, list[float]] = {}
        at_line: dict[Func, dict[int, float]] = {}  # func -> its self ns by the line it was on
        for sid, stack in enumerate(self.stacks):
            ns = float(per_stack[sid])
            if count_stack[sid] == 0 or not stack:
                continue
            out = float(outside[sid]) if outside is not None else 0.0
            hot = self.hot_of(sid)
            for func in {*stack, hot}:  # a call row (``_library_calls``) is not one of the frames
                row = total.setdefault(func, [0.0, 0.0, 0.0, 0.0])
                row[0] += ns
                row[2] += out
                row[3] += float(count_stack[sid])
            total[hot][1] += ns
            line = self.hot_line_of(sid)
            lines = at_line.setdefault(hot, {})
            lines[line] = lines.get(line, 0.0) + ns
        span = float(w.sum()) or 1.0
        rows: list[dict[str, Any]] = []
        for (filename, name, line), (tot, self_, out, count) in total.items():
            if not self_ and _is_library(filename):
                # a library frame the time only passes through (``_call_impl``, autograd's
                # ``backward``) repeats its caller's total: 7 of the terminal's 10 rows were such
                # (the sampled flame graph keeps them, in their place)
                continue
            # where its own time went: the line that held most of it (a script's loop at module
            # level read "<module> train.py:1"), else where the function starts
            by_line = at_line.get((filename, name, line))
            hot_line = hottest_line(by_line) if by_line else line
            rows.append(
                {
                    "function": name,
                    "file": filename,
                    "line": line,
                    "hot_line": hot_line,
                    "location": f"{_short(filename)}:{hot_line}",
                    "samples": int(count),
                    "total_ns": int(tot),
                    "self_ns": int(self_),
                    "total_pct": round(100.0 * tot / span, 2),
                    "self_pct": round(100.0 * self_ / span, 2),
                    "outside_ops_pct": (
                        round(100.0 * out / tot, 1)
                        if covered is not None and tot and count >= MIN_SAMPLES_FOR_SHARE
                        else None
                    ),
                }
            )
        rows.sort(key=lambda r: (-int(r["self_ns"]), -int(r["total_ns"])))
        return rows[:limit]


def _charge_long_gaps(
    times: np.ndarray,
    ids: np.ndarray,
    stacks: list[tuple[Func, ...]],
    nominal_ns: np.ndarray,
    callers: dict[int, int],
) -> None:
    """Give a long gap (a C call that held the GIL) to the code that made that call.

    The sampler waits for the GIL through such a call and gets it at the first check after the
    call returns: the sample after the gap is in the frame that made it, or in its caller a
    statement later (``json.dumps``: in ``encode``, under the user's line), and keeps the gap
    (a sample weighs the time since the one before it). Unless its leaf was just entered
    (``callers``: a stack's sid to its sid without that leaf): the call had returned and
    Python went on to the next (``transpose`` after ``nonzero``), so the gap goes to the stack
    without it (``argwhere``, the user's call). Giving every gap to the frames both
    neighbouring samples share put a slow ``json.dumps`` at the script's ``<module>`` whenever
    the sample before it was in another call (a new user's find: 529 ms at ``<module>``, 16 ms
    at ``dumps``). A gap that began in our own hook (Kineto's stop) stays ours. Edits ``ids``.
    """
    if times.size < 2:
        return
    gaps = np.flatnonzero(np.diff(times) > 3 * nominal_ns[1:]) + 1  # (``nominal_ns``: ``_thin``)
    seen = ids.copy()  # the stacks as sampled
    for i in gaps.tolist():
        a, b = int(seen[i - 1]), int(seen[i])
        if stacks[a][:1] == (PROFILER_FRAME,):
            ids[i] = a
        elif (caller := callers.get(b)) is not None and stacks[caller]:
            ids[i] = caller


def _short(filename: str) -> str:
    """``.../site-packages/numpy/_core/numeric.py`` -> ``numpy/_core/numeric.py``."""
    for marker in ("site-packages" + os.sep, "dist-packages" + os.sep):
        if marker in filename:
            return filename.split(marker, 1)[1]
    cwd = os.getcwd() + os.sep
    if filename.startswith(cwd):
        return filename[len(cwd) :]
    parts = filename.split(os.sep)
    # the last three parts, unless only the root would go (``/tmp/cc/train.py`` read as relative)
    return os.sep.join(parts[-3:]) if len(parts) > 3 and parts[-4] else filename


def covered_by(times_ns: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """For each time, whether it falls inside any [start, end) interval (intervals may nest)."""
    if starts.size == 0:
        return np.zeros(times_ns.shape, dtype=bool)
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    reach = np.maximum.accumulate(e)  # furthest end among intervals starting at or before
    idx = np.searchsorted(s, times_ns, side="right") - 1
    ok = idx >= 0
    out = np.zeros(times_ns.shape, dtype=bool)
    out[ok] = times_ns[ok] < reach[idx[ok]]
    return out
