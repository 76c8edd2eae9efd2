"""A Lightning ``Profiler``: ``Trainer(profiler=TorchscopeProfiler())``.

Profiles the training steps on a schedule (``wait``/``warmup``/``active``/``repeat``, one step =
one training batch: its ``training_step``, backward and optimizer step), writes each rank's traces under the trainer's log dir
(``LOG_DIR/torchscope/rankR.*.pt.trace.json``, the layout ``torchscope report`` reads as a job),
and at the end of ``fit`` Lightning's ``describe()`` prints our report (the summary of
``torchscope report``); the dashboard is written beside the traces (``report.html``).

``Trainer(profiler="pytorch")`` needs nothing from here: under ``torchscope run`` or after
``torchscope.install()`` its ``torch.profiler`` is ours.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

from lightning.pytorch.profilers import Profiler

# One step is one batch: Lightning's "run_training_batch" action holds the whole of it (the
# optimizer step with its closure: forward, backward, update). Its "training_step" action ends
# inside that optimizer step (the closure runs there), so a step marked there held one batch's
# backward and update and the next one's forward, and the last update fell outside every step.
STEP_ACTION = "run_training_batch"
# A step begins when its batch is fetched (the DataLoader's time is the step's, as in a loop
# that calls ``prof.step()`` at each iteration's end) and ends with the batch: validation,
# epoch-end hooks and checkpoints between two batches are in no step (they were in the next
# one: a step of 120 ms among steps of 2 ms, "Python outside ops 87 %").
FETCH_ACTION_SUFFIX = ".train_dataloader_next"


class TorchscopeProfiler(Profiler):
    """Lightning profiler over ``torchscope.profile``; the arguments are ``torch.profiler``'s."""

    def __init__(
        self,
        dirpath: str | Path | None = None,
        filename: str | None = None,
        *,
        wait: int = 1,
        warmup: int = 1,
        active: int = 3,
        repeat: int = 1,
        record_shapes: bool = True,
        profile_memory: bool = False,
        with_stack: bool = False,
        activities: list[Any] | None = None,
    ) -> None:
        super().__init__(dirpath=dirpath, filename=filename)
        self._dirpath_given = dirpath is not None
        self._quiet = False  # a stage after the fit it reported (validate, test): nothing to say
        self._schedule = {"wait": wait, "warmup": warmup, "active": active, "repeat": repeat}
        self._options: dict[str, Any] = {
            "record_shapes": record_shapes,
            "profile_memory": profile_memory,
            "with_stack": with_stack,
            "activities": activities,
        }
        self._prof: Any = None
        self._guard: Any = None
        self._started = 0.0  # time.time() at the start: the traces this fit writes are newer
        self.traces_dir: Path | None = None
        self.report_path: Path | None = None
        self.payload: dict[str, Any] | None = None
        self.profiling_ended_at: float | None = None  # perf_counter when recording stopped

    def setup(self, stage: str, local_rank: int | None = None, log_dir: str | None = None) -> None:
        """Each ``fit`` is recorded, also by a profiler reused for a second one (it recorded
        nothing the second time, and printed the first fit's summary again); the stages after a
        fit (``validate``, ``test``) record no training batch and print nothing."""
        if stage == "fit" and self._prof is None:
            self.traces_dir = self.report_path = self.payload = None
            self._quiet = False
            if not self._dirpath_given:
                self.dirpath = None  # this fit's log dir (Lightning's setup fills it in)
        elif stage != "fit" and self.report_path is not None:
            self._quiet = True
        super().setup(stage, local_rank, log_dir)

    @staticmethod
    def _global_rank() -> int:
        from lightning.fabric.utilities.rank_zero import rank_zero_only

        return int(getattr(rank_zero_only, "rank", 0) or 0)

    def _start_profiler(self) -> None:
        from lightning.pytorch.utilities.rank_zero import rank_zero_warn

        from torchscope.integrations._report import start_profiler

        self.traces_dir = Path(self.dirpath or os.getcwd()) / "torchscope"
        self._started = time.time()
        worker = f"rank{self._global_rank()}"
        started = start_profiler(self.traces_dir, worker, self._schedule, self._options, rank_zero_warn)
        if started is not None:
            self._prof, self._guard = started

    def start(self, action_name: str) -> None:
        begins = action_name == STEP_ACTION or action_name.endswith(FETCH_ACTION_SUFFIX)
        if not begins:
            return
        if self._prof is None and self.traces_dir is None:
            self._start_profiler()  # its first step begins with it
        elif self._prof is not None and self._prof.step_rec_fn is None:
            self._prof.step()  # the next step, after whatever ran since the last batch ended

    def stop(self, action_name: str) -> None:
        if self._prof is None or action_name != STEP_ACTION:
            return
        # Lightning stops the action on the way out of a batch that raised (its ``profile``
        # is a ``try/finally``), and then neither describes nor tears its profiler down: the
        # cycle being recorded was lost, and the profiler was stopped from ``__del__`` at exit
        failed = sys.exc_info()[1]
        if failed is None:
            self._prof.end_step()
        else:
            self._report_after_failure(failed)

    def _report_after_failure(self, failed: BaseException) -> None:
        """Stop recording (the cycle so far is written, as a profile stopped mid-cycle writes
        it), report what was recorded, and say so in Lightning's log."""
        from lightning.pytorch.utilities.rank_zero import rank_zero_warn

        what = f"fit raised {type(failed).__name__} in training batch {self._prof.step_num}"
        self._prof._ending_on_error = True  # its trace says the error cut its last step
        try:
            text = self.summary()
        except Exception as exc:  # noqa: BLE001 - the training's own error is the one to see
            rank_zero_warn(f"torchscope: {what}; its report failed: {type(exc).__name__}: {exc}")
            return
        if self.report_path is None:
            rank_zero_warn(f"torchscope: {what}, before any step was recorded")
        else:
            rank_zero_warn(f"torchscope: {what}; the steps recorded before it:\n{text}")

    def _stop_profiler(self) -> None:
        if self._prof is not None:
            prof, self._prof = self._prof, None
            prof.stop()
            self.profiling_ended_at = time.perf_counter()

    def summary(self) -> str:
        """Our report of this rank's traces (Lightning prints it at the end of ``fit``)."""
        self._stop_profiler()
        if self._quiet:
            return ""
        if self.traces_dir is None or not self.traces_dir.is_dir():
            return ""
        from lightning.pytorch.utilities.rank_zero import rank_zero_warn

        from torchscope.integrations._report import older_note, report_traces, summary_text, written_since

        rank = self._global_rank()
        # rank 0 reports the job (every rank's traces this fit wrote: DDP keeps the ranks in
        # step, so theirs are written by then; an earlier fit's in the same directory are left
        # out, and said); the others their own traces
        ours, older = written_since(self.traces_dir, "rank*.pt.trace.json", self._started)
        mine = [f for f in ours if f.name.startswith(f"rank{rank}.")]
        if not mine:
            return ""
        if rank == 0 and older:
            rank_zero_warn(older_note(self.traces_dir, older))
        files = ours if rank == 0 else mine
        html = self.traces_dir / ("report.html" if rank == 0 else f"report-rank{rank}.html")
        self.payload, self.report_path = report_traces(self.traces_dir, html, "torchscope: Lightning fit", files=files)
        return summary_text(self.payload) + f"dashboard: {self.report_path}\n"

    def teardown(self, stage: str | None) -> None:
        if not sys.is_finalizing():  # Lightning's __del__ at exit: torch is gone by then
            self._stop_profiler()
        super().teardown(stage)
