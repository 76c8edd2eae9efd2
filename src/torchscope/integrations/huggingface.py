"""A Hugging Face ``TrainerCallback``: ``trainer.add_callback(TorchscopeCallback())``.

Profiles chosen training steps (a ``wait``/``warmup``/``active``/``repeat`` schedule over the
trainer's optimizer steps), writes each process's traces under ``output_dir/torchscope``
(``rankR.*.pt.trace.json``) and, on the main process, the dashboard beside them; the headline
numbers (mean step time, events, the top finding) go into the trainer's ``log_history`` as
``torchscope/...`` and its logger.

``accelerate``'s ``accelerator.profile()`` needs nothing from here: it builds a
``torch.profiler.profile``, which is ours under ``torchscope run`` or after ``torchscope.install()``.
"""

from __future__ import annotations

import functools
import time
from pathlib import Path
from typing import Any

from transformers import TrainerCallback
from transformers.utils import logging

logger = logging.get_logger("transformers.trainer")


# the callback of ours whose train() records now: a train() that raised calls no callback, so a
# later train() in the same process (a notebook's retry) finds it still recording and ends it
_OPEN: TorchscopeCallback | None = None


class TorchscopeCallback(TrainerCallback):  # type: ignore[misc]
    """Profile steps of ``Trainer.train`` with ``torchscope.profile``; report when training ends."""

    def __init__(
        self,
        *,
        wait: int = 1,
        warmup: int = 1,
        active: int = 3,
        repeat: int = 1,
        record_shapes: bool = True,
        profile_memory: bool = False,
        with_stack: bool = False,
        subdir: str = "torchscope",
    ) -> None:
        self._schedule = {"wait": wait, "warmup": warmup, "active": active, "repeat": repeat}
        self._options: dict[str, Any] = {
            "record_shapes": record_shapes,
            "profile_memory": profile_memory,
            "with_stack": with_stack,
        }
        self.subdir = subdir
        self._prof: Any = None
        self.traces_dir: Path | None = None
        self.report_path: Path | None = None
        self.summary: str | None = None
        self.headline: dict[str, Any] | None = None
        self.profiling_ended_at: float | None = None
        self._stepped_at: int | None = None  # the global step the profiler last stepped at
        self._at_exit: Any = None
        self._state: Any = None  # the TrainerState of the train() being recorded
        self._args: Any = None
        self._started = 0.0  # time.time() at its start: the traces it writes are newer
        self._guard: Any = None

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        global _OPEN
        from torchscope.capture.profiler import recording_profile
        from torchscope.integrations._report import at_interpreter_exit, start_profiler

        if self._prof is not None and self._state is state:  # added twice: Trainer calls each entry
            return
        if _OPEN is not None:
            # a train() of ours that raised is still recording (its cycle would swallow this
            # whole train() as one step): its steps so far are written now, as at exit
            _OPEN._finish_after_failure(_OPEN._args, _OPEN._state)
        if recording_profile() is not None:
            # another callback of ours (or a profile around train()) records: one at a time,
            # and its report is the one (two identical log_history entries otherwise)
            logger.warning(
                "torchscope: another torchscope profiler is already recording; this callback stays off"
            )
            return
        self.traces_dir = Path(args.output_dir) / self.subdir
        self.report_path = self.summary = self.headline = None
        self._started = time.time()
        started = start_profiler(
            self.traces_dir, f"rank{args.process_index}", self._schedule, self._options, logger.warning
        )
        if started is None:
            return
        (self._prof, self._guard), self._args, self._state = started, args, state
        self._stepped_at = state.global_step
        _OPEN = self
        # Trainer calls no callback when train() raises: the cycle being recorded, and the
        # report, would be lost without a word; at exit (or at the next train()) they are written
        self._at_exit = functools.partial(self._finish_after_failure, args, state)
        at_interpreter_exit(self._at_exit)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        # once per optimizer step, even for a callback added twice (each step counted twice
        # made an empty ProfilerStep of every other one)
        if self._prof is not None and state.global_step != self._stepped_at:
            self._stepped_at = state.global_step
            self._prof.step()

    def _finish_after_failure(self, args: Any, state: Any) -> None:
        if self._prof is None or self._at_exit is None:
            return
        logger.warning(
            "torchscope: Trainer.train ended without on_train_end (it raised?) after %d steps;"
            " writing the steps recorded so far",
            state.global_step,
        )
        self._prof._ending_on_error = True  # its trace says the error cut its last step
        self._finish(args, state)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._finish(args, state)

    def _finish(self, args: Any, state: Any) -> None:
        global _OPEN
        self._at_exit = None  # (a call registered at exit then does nothing: no cycle is left)
        if self._prof is None:
            return
        if _OPEN is self:
            _OPEN = None
        prof, self._prof = self._prof, None
        prof.stop()
        self.profiling_ended_at = time.perf_counter()
        if not state.is_world_process_zero or self.traces_dir is None:
            return
        from torchscope.integrations._report import (
            headline,
            older_note,
            report_traces,
            summary_text,
            written_since,
        )

        # this run's traces of every rank, not an earlier run's in the same output_dir
        ours, older = written_since(self.traces_dir, "rank*.pt.trace.json", self._started)
        if not any(f.name.startswith(f"rank{args.process_index}.") for f in ours):
            logger.warning(
                "torchscope: no profiled cycle was written"
                + (" (writing failed, see above)" if self._guard.failures else " (the schedule never reached an active step)")
            )
            return
        if older:
            logger.warning(older_note(self.traces_dir, older))
        payload, self.report_path = report_traces(
            self.traces_dir, self.traces_dir / "report.html", "torchscope: Hugging Face Trainer.train", files=ours
        )
        self.summary = summary_text(payload)
        self.headline = headline(payload)
        entry = {f"torchscope/{k}": v for k, v in self.headline.items() if k != "top_finding_message"}
        entry["step"] = state.global_step
        state.log_history.append(entry)
        logger.info(
            "torchscope: %s ms per profiled step, top finding %s; dashboard %s\n%s",
            self.headline["step_time_ms"],
            self.headline["top_finding"],
            self.report_path,
            self.summary,
        )
