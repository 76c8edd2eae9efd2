"""The one error type torchscope raises for bad input.

Every reader, loader and CLI command turns a problem with the user's input into a
``TraceError`` whose message is one line naming the file and the problem, so the CLI can
print it and exit with code 2 instead of showing a traceback from deep inside.
"""

from __future__ import annotations


class TraceError(Exception):
    """Bad input: a file or directory that is not a usable trace, or a misused argument."""

    def __init__(self, source: str, problem: str) -> None:
        self.source = source
        self.problem = problem
        super().__init__(f"{source}: {problem}" if source else problem)


class ProfilerStateError(RuntimeError):
    """A profiler session used out of order (``step()`` before ``start()``, ``stop()`` twice, ...)."""
