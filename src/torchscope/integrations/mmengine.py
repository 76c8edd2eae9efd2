"""An mmengine hook with ``ProfilerHook``'s arguments: the same files mmengine's writes, plus our report.

In a config (``custom_imports`` makes the registry know the name)::

    custom_imports = dict(imports=["torchscope.integrations.mmengine"], allow_failed_imports=False)
    custom_hooks = [dict(type="TorchscopeProfilerHook", by_epoch=False, profile_times=10,
                         json_trace_path="trace.json")]

The hook is mmengine's ``ProfilerHook`` whose ``torch.profiler`` (profile, schedule,
``tensorboard_trace_handler``) is torchscope's: the same schedule, ``log_trace``/``tb_trace``
handlers and ``json_trace_path`` file. When profiling ends it writes the dashboard to
``LOG_DIR/torchscope/report.html`` and logs our summary through the runner's logger.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from mmengine.hooks import ProfilerHook
from mmengine.registry import HOOKS

# the hook of ours whose run records now: mmengine calls no hook when a run raises, so a later
# run in the same process (a caught error, a retry) finds it still recording and ends it
_OPEN: TorchscopeProfilerHook | None = None


@HOOKS.register_module()
class TorchscopeProfilerHook(ProfilerHook):  # type: ignore[misc]
    """``ProfilerHook`` recorded by ``torchscope.profile``; same constructor arguments."""

    def __init__(self, **kwargs: Any) -> None:
        from torchscope.capture.redirect import redirected

        with redirected():  # its schedule(**cfg) is built here
            super().__init__(**kwargs)
        self.report_path: Path | None = None
        self.summary: str | None = None
        self.profiling_ended_at: float | None = None
        self._off = False  # another profile of ours records: this hook does nothing
        self._runner: Any = None

    def before_run(self, runner: Any) -> None:
        global _OPEN
        from mmengine.dist import get_rank

        from torchscope.capture.profiler import recording_profile
        from torchscope.capture.redirect import redirected
        from torchscope.integrations._report import NeverRaising, at_interpreter_exit

        if _OPEN is not None:  # a run of ours that raised still records: its steps are written now
            _OPEN._close_after_failure("a later run began")
        if recording_profile() is not None:
            # a profile around runner.train() (or another hook) records: one at a time (its
            # cycle was lost and the training died at the hook's first cycle)
            runner.logger.warning("torchscope: another torchscope profiler is already recording; this hook stays off")
            self._off = self._closed = True
            return
        with redirected():  # torch.profiler.profile(...) and tensorboard_trace_handler(...) are ours
            super().before_run(runner)
        _OPEN, self._runner = self, runner
        at_interpreter_exit(lambda: self._close_after_failure("the process exits"))
        # every cycle is written for our report too, as the other integrations lay them out
        # (``LOG_DIR/torchscope/rankR.cycleN.pt.trace.json``): the report read only the last
        # one (``export_chrome_trace``), so a schedule with ``repeat`` > 1 lost the others
        cycles_dir, rank = Path(runner.log_dir) / "torchscope", get_rank()
        theirs = self.profiler.on_trace_ready
        self._written: list[Path] = []

        def also_ours(prof: Any) -> None:
            cycles_dir.mkdir(parents=True, exist_ok=True)
            n = len(self._written)  # numbered from 0, as the report numbers the cycles
            path = cycles_dir / f"rank{rank}.cycle{n}.pt.trace.json"
            prof.export_chrome_trace(str(path))
            self._written.append(path)
            if theirs is not None:
                theirs(prof)

        # a cycle that cannot be written is said, and the training goes on
        self.profiler.on_trace_ready = NeverRaising(also_ours, runner.logger.warning)

    def _close_after_failure(self, why: str) -> None:
        """The run raised (mmengine calls no hook then): stop recording, its last step cut by
        the error, and write the cycle so far and the report, as a finished run does."""
        if self._closed or self._off or self._runner is None:
            return
        self._runner.logger.warning(
            f"torchscope: the run ended without after_train (it raised?) and {why}; writing the steps recorded so far"
        )
        self.profiler._ending_on_error = True  # its trace says the error cut its last step
        self._export_chrome_trace(self._runner)

    def _parse_trace_config(self, runner: Any) -> Any:
        """mmengine's, without its check for ``torch-tb-profiler`` before a ``tb_trace``
        handler: the handler is torch's (ours here), not the TensorBoard plugin's, which was
        deleted from Kineto and which this package replaces."""
        cfg = self.on_trace_ready
        if not (isinstance(cfg, dict) and cfg.get("type") == "tb_trace"):
            return super()._parse_trace_config(runner)
        from torchscope.capture.handlers import tensorboard_trace_handler

        options = {k: v for k, v in cfg.items() if k != "type"}
        where = Path(options.get("dir_name", "tf_tracing_logs"))
        options["dir_name"] = str(where if where.is_absolute() else Path(runner.log_dir) / where)
        runner.logger.info(f"trace_files of ProfilerHook will be saved to {options['dir_name']}.")
        return tensorboard_trace_handler(**options)

    def _export_chrome_trace(self, runner: Any) -> None:
        global _OPEN
        if self._off:
            return
        if _OPEN is self:
            _OPEN = None
        super()._export_chrome_trace(runner)
        self.profiling_ended_at = time.perf_counter()
        try:
            self._report(runner)
        except Exception as exc:  # noqa: BLE001 - the profile is mmengine's result; ours is extra
            runner.logger.warning(f"torchscope: no report: {type(exc).__name__}: {exc}")

    def _report(self, runner: Any) -> None:
        from mmengine.dist import get_rank

        from torchscope.integrations._report import report_traces, summary_text

        out = Path(runner.log_dir) / "torchscope"
        if not self._written:  # no cycle finished (a schedule that never recorded)
            runner.logger.warning("torchscope: the profiler recorded no cycle; no report")
            return
        # one cycle is a trace; several are read as a job, each cycle's dashboard in report.ranks/
        subject = self._written[0] if len(self._written) == 1 else out
        html = out / ("report.html" if get_rank() == 0 else f"report-rank{get_rank()}.html")
        payload, self.report_path = report_traces(subject, html, "torchscope: mmengine run")
        self.summary = summary_text(payload)
        runner.logger.info(f"torchscope report (dashboard {self.report_path}):\n{self.summary}")
