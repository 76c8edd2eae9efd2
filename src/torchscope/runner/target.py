"""Execute a user's script or module in this process the way ``python`` would.

Running in-process (not in a child) is what lets the runner see optimizer steps and sample
the main thread's Python stack. ``sys.argv``, ``sys.path[0]`` and ``__main__`` are set as the
interpreter sets them, and restored afterwards; the script's ``SystemExit`` code becomes our
exit code and an uncaught exception is printed as Python would print it (exit code 1).
"""

from __future__ import annotations

import builtins
import importlib.machinery
import io
import os
import runpy
import signal
import sys
import threading
import traceback
import types
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any


@dataclass(frozen=True)
class Target:
    """What to run: a script path or a module name, and the arguments it sees."""

    name: str
    args: tuple[str, ...] = ()
    is_module: bool = False

    @property
    def display(self) -> str:
        return f"-m {self.name}" if self.is_module else self.name


@dataclass(frozen=True)
class Outcome:
    exit_code: int
    error: str | None = None  # "ValueError: ..." when the script raised


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP during ``torchscope run``: a scheduler's stop (``timeout``, Slurm's
    ``scancel``, Kubernetes, a preemption) or a closed terminal. Their default action ended the
    process at once and left an empty run directory; raised instead, they take Ctrl-C's path
    (what was recorded is saved and the report written), and the run exits 128 + the signal.
    A second one while saving stops it, as a second Ctrl-C does."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


# the signals ``stop_signals_interrupt`` turns into ``Terminated``; an Outcome's error is the name
STOP_SIGNALS = ("SIGTERM", "SIGHUP")


def interrupt_exit_code(exc: KeyboardInterrupt) -> int:
    """What the shell sees after an interruption: 130 for Ctrl-C, 128 + N for signal N."""
    return 128 + exc.signum if isinstance(exc, Terminated) else 130


# Set while the run saves after the script ended on its own (its end, an error, sys.exit):
# the first stop signal then is said and saving goes on; the one after it stops at once. A
# job whose other rank failed gets torchrun's SIGTERM here: it stopped saving at once, and the
# rank lost its report and the script's own error. The signals received meanwhile are listed.
SAVING_THROUGH_ONE_SIGNAL = [False]
SIGNALS_WHILE_SAVING: list[str] = []


def _deferred(signum: int) -> bool:
    """Whether this signal is the one saving goes on through (then said on stderr)."""
    if not SAVING_THROUGH_ONE_SIGNAL[0]:
        return False
    SAVING_THROUGH_ONE_SIGNAL[0] = False
    name = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
    SIGNALS_WHILE_SAVING.append(name)
    print(
        f"torchscope run: {name} received while saving: finishing the traces and the report"
        " (a stop signal or Ctrl-C again to stop now, keeping only the traces already written)",
        file=sys.stderr,
        flush=True,
    )
    return True


def _raise_terminated(signum: int, frame: object) -> None:
    if not _deferred(signum):
        raise Terminated(signum)


def _raise_interrupt(signum: int, frame: object) -> None:
    if not _deferred(signum):
        raise KeyboardInterrupt


# our signal handlers' code: no frame of a script's traceback (``_script_traceback``)
_HANDLER_CODES = frozenset({_raise_terminated.__code__, _raise_interrupt.__code__})
# each of our handlers, and the default it stands in for (given back as ours leave)
_DEFAULT_OF: dict[Any, Any] = {
    _raise_terminated: signal.SIG_DFL,
    _raise_interrupt: signal.default_int_handler,
}


def _defaults_in_forked_child() -> None:
    """A process the script forks (a ``multiprocessing.Pool`` worker) gets the default
    handlers back: it inherited ours, so ``Pool.terminate()``'s SIGTERM raised ``Terminated``
    in each worker and printed 8 tracebacks where plain ``python`` prints nothing."""
    for name in (*STOP_SIGNALS, "SIGINT"):
        signum = getattr(signal, name, None)
        if signum is None:
            continue
        with suppress(ValueError, OSError):  # forked from a thread the child cannot set them in
            handler = signal.getsignal(signum)
            if handler in _DEFAULT_OF:
                signal.signal(signum, _DEFAULT_OF[handler])


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_defaults_in_forked_child)


@contextmanager
def stop_signals_interrupt() -> Iterator[None]:
    """SIGTERM and SIGHUP raise ``Terminated`` in the main thread inside the block, where their
    handler is the default one (a handler someone else set is left alone, and a script that
    sets its own replaces ours); Ctrl-C raises ``KeyboardInterrupt`` as by default. While
    ``SAVING_THROUGH_ONE_SIGNAL`` is set, the first of them does neither (``_deferred``)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    present = [getattr(signal, name) for name in STOP_SIGNALS if hasattr(signal, name)]  # no SIGHUP on Windows
    ours = [(s, _raise_terminated) for s in present if signal.getsignal(s) is signal.SIG_DFL]
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        ours.append((signal.SIGINT, _raise_interrupt))
    for s, handler in ours:
        signal.signal(s, handler)
    try:
        yield
    finally:
        SAVING_THROUGH_ONE_SIGNAL[0] = False
        for s, handler in ours:
            if signal.getsignal(s) is handler:
                signal.signal(s, _DEFAULT_OF[handler])


def _exit_code(code: object) -> int:
    """The process exit status ``python`` would use for ``SystemExit(code)``."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)  # SystemExit("message") prints the message, exits 1
    return 1


def _is_runner_frame(filename: str) -> bool:
    """Our frames and runpy's (``<frozen runpy>`` on 3.11+), which sit above the script's."""
    return filename in (__file__, runpy.__file__, "<frozen runpy>")


# The script's module globals, kept until the interpreter exits as under plain ``python``:
# runpy hands back a copy and drops the module, so the script's objects were destroyed the
# moment it returned. A DDP model destroyed after the script's destroy_process_group() then hung
# a torchrun rank in gloo's teardown (2 runs in 6); the user's objects now die at exit, as theirs.
_SCRIPT_GLOBALS: list[dict[str, Any]] = []


_SCRIPT_MODULES: list[types.ModuleType] = []


def _run_file(script: Path) -> dict[str, Any]:
    """Run a script file as ``python script.py`` does: ``__file__`` and the code's file name
    absolute (as Python gives the main script), ``sys.argv[0]`` as typed. ``runpy.run_path``
    makes both what it is given: with the path as typed, a script that changed directory and
    then read its config beside ``__file__`` found nothing; with it absolute, ``sys.argv[0]``
    was no longer what the user typed. A directory or zip with a ``__main__.py`` goes to runpy."""
    path = os.path.abspath(script)
    if not os.path.isfile(path) or zipfile.is_zipfile(path):
        return runpy.run_path(path, run_name="__main__")
    main = types.ModuleType("__main__")
    main.__dict__.update(
        __file__=path,
        __cached__=None,
        __package__=None,
        __spec__=None,
        __loader__=importlib.machinery.SourceFileLoader("__main__", path),
        __builtins__=builtins,
    )
    _SCRIPT_MODULES.append(main)  # alive until exit, with its globals (see _SCRIPT_GLOBALS)
    sys.modules["__main__"] = main  # (execute() puts ours back)
    with io.open_code(path) as fh:
        code = compile(fh.read(), path, "exec", dont_inherit=True)
    _exec_script(code, main.__dict__)
    return main.__dict__


def _exec_script(code: types.CodeType, namespace: dict[str, Any]) -> None:
    """Only the script runs leafward of this frame: the sampler's boundary between the runner's
    frames and the user's (``_run_file``'s own checks were sampled as the script's)."""
    exec(code, namespace)  # noqa: S102 - the user's script, run as python would


def _script_traceback(exc: BaseException) -> TracebackType | None:
    """``exc``'s traceback from the script's first frame (ours and runpy's cut off) to the
    script's line the signal came at (our signal handler's frame, where a stop signal or
    Ctrl-C raises, cut off too: the traceback ended in ``_raise_terminated``)."""
    tb = exc.__traceback__
    while tb is not None and _is_runner_frame(tb.tb_frame.f_code.co_filename):
        tb = tb.tb_next
    node, before = tb, None
    while node is not None and node.tb_next is not None:
        node, before = node.tb_next, node
    if before is not None and node is not None and node.tb_frame.f_code in _HANDLER_CODES:
        before.tb_next = None
    return tb


def _print_interruption(exc: KeyboardInterrupt, tb: TracebackType | None) -> None:
    """The script's traceback as Python prints a ``KeyboardInterrupt``'s. A stop signal's ends
    in "Terminated: SIGTERM", as a shell names the signal: it ended in our class's module path
    (``torchscope.runner.target.Terminated: SIGTERM``), which is nothing a user wrote or can use."""
    lines = traceback.format_exception(type(exc), exc, tb)
    ours = f"{Terminated.__module__}.{Terminated.__qualname__}:"
    said = (f"Terminated:{line[len(ours) :]}" if line.startswith(ours) else line for line in lines)
    sys.stderr.write("".join(said))


def _keep_script_globals(tb: TracebackType | None) -> None:
    """A script that exits with ``sys.exit`` or an error keeps its globals (those of its first
    frame in ``tb``, from ``_script_traceback``) until exit too."""
    if tb is not None:
        _SCRIPT_GLOBALS.append(tb.tb_frame.f_globals)


def execute(target: Target) -> Outcome:
    """Run ``target`` as ``__main__``; never raises for the script's own errors."""
    saved_argv, saved_path0 = list(sys.argv), (sys.path[0] if sys.path else None)
    saved_main = sys.modules.get("__main__")
    try:
        if target.is_module:
            sys.argv = [target.name, *target.args]
            sys.path.insert(0, str(Path.cwd()))
            _SCRIPT_GLOBALS.append(runpy.run_module(target.name, run_name="__main__", alter_sys=True))
        else:
            script = Path(target.name)
            sys.argv = [target.name, *target.args]  # as typed: ./x.py stays ./x.py
            sys.path.insert(0, str(script.resolve().parent))
            _SCRIPT_GLOBALS.append(_run_file(script))
        return Outcome(0)
    except SystemExit as exc:
        _keep_script_globals(_script_traceback(exc))
        return Outcome(_exit_code(exc.code))
    except KeyboardInterrupt as exc:  # Ctrl-C or a stop signal: the script's traceback, as for any raise
        tb = _script_traceback(exc)
        _keep_script_globals(tb)
        _print_interruption(exc, tb)
        return Outcome(interrupt_exit_code(exc), str(exc) if isinstance(exc, Terminated) else "KeyboardInterrupt")
    except BaseException as exc:  # noqa: BLE001 - the script's crash is reported, not ours
        # Print as the interpreter would, without our own frames on top.
        tb = _script_traceback(exc)
        _keep_script_globals(tb)
        traceback.print_exception(type(exc), exc, tb)
        return Outcome(1, f"{type(exc).__name__}: {exc}")
    finally:
        sys.argv = saved_argv
        if sys.path and saved_path0 is not None and sys.path[0] != saved_path0:
            sys.path.pop(0)
        if saved_main is not None:
            sys.modules["__main__"] = saved_main
        sys.stdout.flush()
        sys.stderr.flush()
