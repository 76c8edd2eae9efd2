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

import atexit
import functools
import time
from pathlib import Path
from typing import Any

from transformers import TrainerCallback
from transformers.utils import logging

logger = logging.get_logger("transformers.trainer")


def _at_interpreter_exit(call: Any) -> None:
    """Run ``call`` as the interpreter exits, while thread pools still take work: the report
    reads the trace and builds its sections on threads, and an ``atexit`` callback runs after
    ``concurrent.futures`` stopped taking any ("cannot schedule new futures after interpreter
    shutdown": the report at exit was empty). ``threading._register_atexit`` runs its callbacks
    last registered first, before those of ``atexit``; concurrent.futures registers its own on
    import, so it is imported first."""
    import concurrent.futures.thread  # noqa: F401 - its exit hook, registered before ours
    import threading

    register = getattr(threading, "_register_atexit", None)
    (register or atexit.register)(call)


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

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        from torchscope.capture.profiler import recording_profile
        from torchscope.integrations._report import start_profiler

        if self._prof is not None:  # this callback added twice: Trainer calls each entry
            return
        if recording_profile() is not None:
            # another callback of ours (or a profile around train()) records: one at a time,
            # and its report is the one (two identical log_history entries otherwise)
            logger.warning(
                "torchscope: another torchscope profiler is already recording; this callback stays off"
            )
            return
        self.traces_dir = Path(args.output_dir) / self.subdir
        worker = f"rank{args.process_index}"
        self._prof = start_profiler(self.traces_dir, worker, self._schedule, self._options)
        self._stepped_at = state.global_step
        # Trainer calls no callback when train() raises: the cycle being recorded, and the
        # report, would be lost without a word; at exit they are written after all
        self._at_exit = functools.partial(self._finish_after_failure, args, state)
        _at_interpreter_exit(self._at_exit)

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
        self._finish(args, state)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._finish(args, state)

    def _finish(self, args: Any, state: Any) -> None:
        self._at_exit = None  # (a call registered at exit then does nothing: no cycle is left)
        if self._prof is None:
            return
        prof, self._prof = self._prof, None
        prof.stop()
        self.profiling_ended_at = time.perf_counter()
        if not state.is_world_process_zero or self.traces_dir is None:
            return
        mine = sorted(self.traces_dir.glob(f"rank{args.process_index}.*.pt.trace.json"))
        if not mine:
            logger.warning(
                "torchscope: no training step was profiled (the schedule never reached an active step)"
            )
            return
        from torchscope.integrations._report import headline, report_traces, summary_text

        payload, self.report_path = report_traces(
            mine[0] if len(mine) == 1 else self.traces_dir,
            self.traces_dir / "report.html",
            "torchscope: Hugging Face Trainer.train",
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
