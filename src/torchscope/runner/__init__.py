"""The zero-code runner behind ``torchscope run``: profile a whole script without editing it.

``torch.utils.bottleneck`` is gone from torch 2.13; this is its successor. ``target`` executes a
script or ``-m`` module in this process exactly as ``python`` would (argv, ``__main__``, exit
code); ``steps`` turns optimizer steps into profiler steps so a schedule works with no code
change; ``sampler`` records the Python hot spots that the op profiler cannot see (NumPy, pure
Python); ``session`` ties them together and writes the run directory.
"""

from __future__ import annotations

from torchscope.runner.session import RunOptions, RunResult, profile_target

__all__ = ["RunOptions", "RunResult", "profile_target"]
