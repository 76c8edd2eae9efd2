"""The wrapper the runner puts around the user's ``optimizer.step()`` (``session._StepHook``).

A module of its own, apart from the runner's hooks: the sampler charges every sample taken
with a frame of ``session.py`` on the stack to the profiler ("torchscope profiler"), and this
wrapper is on the stack for the whole of the user's optimizer step, whose time is the user's
(``Adam.step`` at their line). Our frames are left out of the stacks, so the samples read as
if the user's line called torch's ``step`` directly; the profiler's own step, called from here
once torch's step returned, runs in ``session.py`` and is charged to the profiler.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any, Protocol


class Stepped(Protocol):
    """What the wrapper tells: that the owner's step is entered, and that it returned."""

    inside_wrapped: bool

    def step_returned(self) -> None: ...


def wrap_step(optimizer: Any, hook: Stepped) -> None:
    """Make ``optimizer.step`` call ``hook.step_returned()`` after it returns (the outermost
    call of it: a step that calls itself, as a wrapper optimizer's, counts once). The wrapper
    is the instance's own attribute, over whatever was there (an LR scheduler's wrapper keeps
    working, its marks copied by ``functools.wraps``); where it cannot be set, nothing changes."""
    original = optimizer.step

    @functools.wraps(original)
    def step(*args: Any, **kwargs: Any) -> Any:
        outer = not hook.inside_wrapped
        hook.inside_wrapped = True
        try:
            return original(*args, **kwargs)
        finally:
            if outer:
                hook.inside_wrapped = False
                hook.step_returned()

    with contextlib.suppress(AttributeError, TypeError):
        optimizer.step = step
