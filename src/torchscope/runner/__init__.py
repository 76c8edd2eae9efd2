"""The zero-code runner behind ``torchscope run``: profile a whole script without editing it.

``torch.utils.bottleneck`` is gone from torch 2.13; this is its successor. ``target`` executes a
script or ``-m`` module in this process exactly as ``python`` would (argv, ``__main__``, exit
code); ``steps`` turns optimizer steps into profiler steps so a schedule works with no code
change; ``sampler`` records the Python hot spots that the op profiler cannot see (NumPy, pure
Python); ``session`` ties them together and writes the run directory.
"""

from __future__ import annotations

from typing import Any

__all__ = ["RunOptions", "RunResult", "profile_target"]


def __getattr__(name: str) -> Any:
    """The session's names, imported when first asked for: ``torchscope --help`` and ``torchscope
    run --help`` import ``runner.bounds`` (the option defaults), and this package importing the
    session with it made them import NumPy for nothing (0.10 s of 0.16 s)."""
    if name in __all__:
        from torchscope.runner import session

        return getattr(session, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
