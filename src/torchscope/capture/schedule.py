"""``schedule`` and ``ProfilerAction``: which steps a long run records, exactly as torch decides.

Users pass ``schedule(wait=1, warmup=1, active=3, repeat=2)`` to ``profile`` and expect the same
steps to be skipped, warmed up and recorded as with ``torch.profiler.schedule``; the property
test in ``tests/capture/test_schedule.py`` checks that step by step. This module is torch-free
so a schedule can be built and inspected without importing torch. ``ProfilerAction`` has the
same member names and values as torch's, and ``as_action`` accepts torch's enum too, so a user
may hand us a schedule written for torch.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable
from enum import Enum
from typing import Any


class Action(Enum):
    """What the profiler does during a step (same names and values as torch's): ours, for the
    profiler's own bookkeeping and for a schedule built where torch is not loaded."""

    NONE = 0
    WARMUP = 1
    RECORD = 2
    RECORD_AND_SAVE = 3


def as_action(value: Any) -> Action:
    """Our ``Action`` for ours or torch's (matched by name); ``TypeError`` otherwise."""
    if isinstance(value, Action):
        return value
    name = getattr(value, "name", None)
    if isinstance(name, str) and name in Action.__members__:
        return Action[name]
    raise TypeError(f"a profiler schedule must return a ProfilerAction, got {value!r}")


def _torch_actions() -> Any:
    """torch's ``ProfilerAction`` when torch's profiler is loaded (never imported from here)."""
    module = sys.modules.get("torch.profiler")
    return getattr(module, "ProfilerAction", None) if module is not None else None


def public_action(action: Action) -> Any:
    """The action as users and frameworks compare it: torch's member of that name whenever torch
    is loaded. Our own enum made ``schedule(...)(4) == torch.profiler.ProfilerAction.RECORD_AND_SAVE``
    false, so Lightning refused our schedule under ``torchscope run`` ("Schedule should return a
    torch.profiler.ProfilerAction") and its wrapper never saw a cycle end."""
    torch_actions = _torch_actions()
    return torch_actions[action.name] if torch_actions is not None else action


def __getattr__(name: str) -> Any:
    """``ProfilerAction``: torch's enum itself when torch can be imported (so ours and torch's
    compare equal everywhere), else ours; resolved on first use, so this module stays torch-free."""
    if name == "ProfilerAction":
        try:
            from torch.profiler import ProfilerAction as torch_actions
        except ImportError:
            return Action
        return torch_actions
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def schedule(
    *,
    wait: int,
    warmup: int,
    active: int,
    repeat: int = 0,
    skip_first: int = 0,
    skip_first_wait: int = 0,
) -> Callable[[int], Any]:
    """A step -> action function: skip ``skip_first`` steps, then cycles of wait/warmup/active.

    ``repeat=0`` cycles for as long as the run goes; ``skip_first_wait`` drops the first cycle's
    wait. The last active step of each cycle is ``RECORD_AND_SAVE``: the cycle's trace is ready
    when the next step begins. Bad arguments raise the same ``AssertionError`` as torch, and
    ``warmup=0`` gives the same warning.
    """
    if wait < 0 or warmup < 0 or active <= 0 or repeat < 0 or skip_first < 0:
        raise AssertionError(
            f"Invalid profiler schedule arguments. Got wait={wait} (need >= 0), warmup={warmup} "
            f"(need >= 0), active={active} (need > 0), repeat={repeat} (need >= 0), "
            f"skip_first={skip_first} (need >= 0)."
        )
    if warmup == 0:
        warnings.warn("Profiler won't be using warmup, this can skew profiler results", stacklevel=2)
    cycle = wait + warmup + active

    def schedule_fn(step: int) -> Any:
        return public_action(_action_at(step))

    def _action_at(step: int) -> Action:
        if step < 0:
            raise AssertionError(f"Step must be non-negative. Got {step}.")
        if step < skip_first:
            return Action.NONE
        pos = step - skip_first + (wait if skip_first_wait != 0 else 0)
        if repeat > 0 and pos >= repeat * cycle:
            return Action.NONE
        in_cycle = pos % cycle
        if in_cycle < wait:
            return Action.NONE
        if in_cycle < wait + warmup:
            return Action.WARMUP
        return Action.RECORD if in_cycle < cycle - 1 else Action.RECORD_AND_SAVE

    return schedule_fn


def default_schedule(_: int) -> Action:
    """Without a schedule the profiler records every step until ``stop()``."""
    return Action.RECORD
