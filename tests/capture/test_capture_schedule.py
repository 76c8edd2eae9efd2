"""``schedule`` and the profiler's state machine behave exactly as torch.profiler's.

Hypothesis draws thousands of schedules and step ranges: every step gets the same action,
bad arguments the same error, and a profiler driven through the steps prepares, starts and
stops its sessions and calls ``on_trace_ready`` at the same steps as torch's. The sessions are
replaced by recorders on both sides so that only the state machines are compared.
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch.profiler as tp
from hypothesis import given, settings
from hypothesis import strategies as st

import torchscope
from torchscope.capture.schedule import Action, as_action

counts = st.integers(min_value=0, max_value=6)
schedules = st.fixed_dictionaries(
    {
        "wait": counts,
        "warmup": counts,
        "active": st.integers(min_value=1, max_value=6),
        "repeat": st.integers(min_value=0, max_value=4),
        "skip_first": counts,
        "skip_first_wait": st.integers(min_value=0, max_value=1),
    }
)


def quiet(fn: Any, **kwargs: Any) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(**kwargs)


@settings(max_examples=3000, deadline=None)
@given(args=schedules, steps=st.integers(min_value=1, max_value=120))
def test_schedule_gives_torchs_action_at_every_step(args: dict[str, int], steps: int) -> None:
    ours = quiet(torchscope.schedule, **args)
    theirs = quiet(tp.schedule, **args)
    assert [ours(s).name for s in range(steps)] == [theirs(s).name for s in range(steps)]


@settings(max_examples=500, deadline=None)
@given(
    args=st.fixed_dictionaries(
        {
            "wait": st.integers(-2, 3),
            "warmup": st.integers(-2, 3),
            "active": st.integers(-2, 3),
            "repeat": st.integers(-2, 3),
            "skip_first": st.integers(-2, 3),
        }
    )
)
def test_bad_arguments_raise_torchs_error(args: dict[str, int]) -> None:
    def outcome(fn: Any) -> str:
        try:
            quiet(fn, **args)
        except AssertionError as exc:
            return str(exc)
        return "ok"

    assert outcome(torchscope.schedule) == outcome(tp.schedule)


def test_warmup_zero_warns_like_torch() -> None:
    with pytest.warns(UserWarning, match="Profiler won't be using warmup"):
        torchscope.schedule(wait=1, warmup=0, active=1)


def test_negative_step_is_rejected() -> None:
    with pytest.raises(AssertionError, match="Step must be non-negative"):
        torchscope.schedule(wait=1, warmup=1, active=1)(-1)


def test_torch_actions_are_accepted() -> None:
    assert as_action(tp.ProfilerAction.RECORD_AND_SAVE) is Action.RECORD_AND_SAVE
    with pytest.raises(TypeError):
        as_action("RECORD")


class _TorchRecorder(tp.profile):
    def __init__(self, **kwargs: Any) -> None:
        self.log: list[str] = []
        super().__init__(**kwargs)

    def prepare_trace(self) -> None:
        self.log.append(f"prepare@{self.step_num}")

    def start_trace(self) -> None:
        self.log.append(f"start@{self.step_num}")

    def stop_trace(self) -> None:
        self.log.append(f"stop@{self.step_num}")


class _OurRecorder(torchscope.profile):
    def __init__(self, **kwargs: Any) -> None:
        self.log: list[str] = []
        super().__init__(**kwargs)

    def prepare_trace(self) -> None:
        self.log.append(f"prepare@{self.step_num}")

    def start_trace(self) -> None:
        self.log.append(f"start@{self.step_num}")

    def stop_trace(self) -> None:
        self.log.append(f"stop@{self.step_num}")


@settings(max_examples=400, deadline=None)
@given(args=schedules, steps=st.integers(min_value=0, max_value=40))
def test_on_trace_ready_fires_at_torchs_steps(args: dict[str, int], steps: int) -> None:
    logs = []
    for cls in (_TorchRecorder, _OurRecorder):
        ready: list[int] = []
        prof = quiet(
            cls,
            activities=[tp.ProfilerActivity.CPU],
            schedule=quiet(tp.schedule, **args),
            on_trace_ready=lambda p, ready=ready: ready.append(p.step_num),
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            prof.start()
            for _ in range(steps):
                prof.step()
            prof.stop()
        logs.append((ready, prof.log, prof.step_num))
    assert logs[0] == logs[1]


def test_actions_are_torchs_own_wherever_torch_is_loaded() -> None:
    """Ours was an enum of its own: ``schedule(...)(3) == torch.profiler.ProfilerAction.RECORD_AND_SAVE``
    was False, so Lightning refused our schedule under ``torchscope run`` ("Schedule should return
    a torch.profiler.ProfilerAction"), its wrapper never saw a cycle end, and torch's profiler
    given our schedule recorded nothing."""
    import torch
    import torch.profiler as tp

    import torchscope

    sched = torchscope.schedule(wait=1, warmup=1, active=2)
    assert [sched(i) for i in range(5)] == [
        tp.ProfilerAction.NONE,
        tp.ProfilerAction.WARMUP,
        tp.ProfilerAction.RECORD,
        tp.ProfilerAction.RECORD_AND_SAVE,
        tp.ProfilerAction.NONE,
    ]
    assert torchscope.ProfilerAction is tp.ProfilerAction
    ready: list[int] = []
    with tp.profile(schedule=sched, on_trace_ready=lambda p: ready.append(p.step_num)) as theirs:
        for _ in range(5):
            torch.ones(2).add_(1)
            theirs.step()
    assert ready == [4]
    seen = []
    with torchscope.profile(schedule=torchscope.schedule(wait=1, warmup=1, active=2)) as ours:
        for _ in range(4):
            seen.append(ours.current_action)
            ours.step()
    assert seen == [sched(i) for i in range(4)] and all(isinstance(a, tp.ProfilerAction) for a in seen)
