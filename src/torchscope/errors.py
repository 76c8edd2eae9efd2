"""torchscope's errors: one base, one class per kind of mistake.

* ``TraceError``: the input is not a usable trace (names the file and the problem).
* ``UsageError``: an argument is wrong (a bad option value, an unknown sort key).
* ``ProfilerStateError``: a profiler session used out of order (``step()`` before ``start()``).
* ``WriteError``: a file we write for the user could not be written (a full disk, no
  permission; names the file and the problem). An ``OSError`` too.

All derive from ``TorchscopeError``, so ``except torchscope.TorchscopeError`` catches
anything we raise on purpose, and the CLI prints a ``TraceError``, a ``UsageError`` or a
``WriteError`` as one line and exits with code 2 instead of showing a traceback from deep inside.

The drop-in profiler must also fail the way torch.profiler fails: where torch raises a
``ValueError``, ``AttributeError``, ``AssertionError`` or ``RuntimeError`` for the same misuse,
our error is an instance of that type too (``UsageError`` is a ``ValueError``; the variants below
add torch's other types), so a script's ``except ValueError`` keeps working after the switch.
"""

from __future__ import annotations

import os
import sys
import types
import warnings
from pathlib import Path


class TorchscopeError(Exception):
    """The base of every error torchscope raises on purpose."""


class TraceError(TorchscopeError):
    """Bad input: a file or directory that is not a usable trace."""

    def __init__(self, source: str, problem: str) -> None:
        self.source = source
        self.problem = problem
        super().__init__(f"{source}: {problem}" if source else problem)


class WriteError(TorchscopeError, OSError):
    """A file or directory we write for the user could not be written: "PATH: problem: why"
    (``writes.write_atomically``; nothing partial is left). An ``OSError``, as the failed write
    was, with its ``errno``, ``strerror`` (the why) and ``filename``, so a script's ``except
    OSError`` around ``export_chrome_trace`` keeps working."""

    def __init__(self, path: str, problem: str, errno: int | None = None, why: str | None = None) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem
        self.errno = errno
        self.strerror = why  # type: ignore[assignment]
        self.filename = path

    def __str__(self) -> str:  # OSError's would be "[Errno 28] ...: 'PATH'"
        return f"{self.path}: {self.problem}"

    def __reduce__(self) -> tuple[type[WriteError], tuple[str, str, int | None, str | None]]:
        return (WriteError, (self.path, self.problem, self.errno, self.strerror))


class UsageError(TorchscopeError, ValueError):
    """A misused argument: a value out of range, an option that does not exist, two options that
    contradict each other. A ``ValueError``, as torch's argument checks raise."""


class UsageAttributeError(UsageError, AttributeError):
    """A misused argument where torch raises ``AttributeError`` (an unknown table sort key: torch
    looks the key up as an attribute of its rows)."""


class UsageAssertionError(UsageError, AssertionError):
    """A misused argument where torch raises ``AssertionError`` (``export_stacks`` without
    ``with_stack=True``, no activity to profile, a schedule with negative counts)."""


class UsageTypeError(UsageError, TypeError):
    """An argument of the wrong type, where torch raises ``TypeError``."""


class ProfilerStateError(TorchscopeError, RuntimeError):
    """A profiler session used out of order (``step()`` before ``start()``, ``stop()`` twice,
    ``events()`` under ``trace_only``, ...): a ``RuntimeError``, as torch's are."""


class NoCycleYetError(ProfilerStateError, AssertionError):
    """Results asked for before any profiling cycle finished (``key_averages()`` right after
    ``start()``): torch asserts there (``assert self.profiler``), so this is an ``AssertionError``
    too, and a script's ``except AssertionError`` written for torch keeps working."""


class CycleLostError(ProfilerStateError):
    """A cycle's trace asked for (``export_chrome_trace``) when Kineto could not give it: its
    save found no room, or another profiler ended the session. A warning said so when the
    cycle ended; ``tensorboard_trace_handler`` skips such a cycle instead of writing an empty
    trace into the log directory."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path} not written: {reason}")
        self.reason = reason


def why_unwritable(path: Path, exc: OSError) -> str:
    """Why writing ``path`` failed, in words: the nearest existing ancestor that is a file is
    named as such (``mkdir`` of ``/dev/null/x``'s parent said "File exists"). A closed pipe is
    no reason to give: it is raised again, and the command ends quietly (``cli.main``)."""
    if isinstance(exc, BrokenPipeError):
        raise exc
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                return f"{parent} is not a directory"
            break
    return exc.strerror or str(exc)


def warn_user(message: str) -> None:
    """A ``UserWarning`` that names the user's line (their ``with``, ``stop()`` or ``step()``),
    however many of our frames lie between it and the warning."""
    package = os.path.dirname(os.path.abspath(__file__)) + os.sep
    frame: types.FrameType | None = sys._getframe(1)
    level = 2  # warn's stacklevel 1 is this function
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(package):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, UserWarning, stacklevel=level)
