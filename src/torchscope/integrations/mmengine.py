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

    def before_run(self, runner: Any) -> None:
        from torchscope.capture.redirect import redirected

        with redirected():  # torch.profiler.profile(...) and tensorboard_trace_handler(...) are ours
            super().before_run(runner)

    def _export_chrome_trace(self, runner: Any) -> None:
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
        trace = (
            Path(self.json_trace_path) if self.json_trace_path else out / f"rank{get_rank()}.pt.trace.json"
        )
        if not self.json_trace_path:
            try:
                self.profiler.export_chrome_trace(str(trace))
            except Exception:  # noqa: BLE001 - no cycle finished (a schedule that never recorded)
                runner.logger.warning("torchscope: the profiler recorded no cycle; no report")
                return
        html = out / ("report.html" if get_rank() == 0 else f"report-rank{get_rank()}.html")
        payload, self.report_path = report_traces(trace, html, "torchscope: mmengine run")
        self.summary = summary_text(payload)
        runner.logger.info(f"torchscope report (dashboard {self.report_path}):\n{self.summary}")
