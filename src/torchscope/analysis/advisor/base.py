"""What a rule returns (``Finding``) and what it reads (``Context``, analyses computed once)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
import polars as pl

from torchscope.analysis.frames import is_user_frame, names_text, tool_frames
from torchscope.analysis.kernels import LaunchStats, launch_stats
from torchscope.analysis.operators import operators
from torchscope.analysis.overview import Overview, overview
from torchscope.trace.model import Trace


@dataclass(frozen=True)
class Finding:
    """One recommendation: ``rule`` is stable across versions; ``impact`` orders findings (0..1)."""

    rule: str
    message: str
    fix: str
    evidence: dict[str, Any] = field(default_factory=dict)
    impact: float = 0.0
    # the share of the profiled time the finding measured, when it measures time: findings
    # below ``MIN_SHARE`` of the run are not shown (``advise``); None for findings about
    # settings or shapes, whose cost the trace does not measure
    share: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"rule": self.rule, "message": self.message, "evidence": self.evidence, "fix": self.fix}


class Context:
    """A trace and the analyses rules share, each computed on first use."""

    def __init__(self, trace: Trace) -> None:
        self.trace = trace

    @cached_property
    def overview(self) -> Overview:
        return overview(self.trace)

    @cached_property
    def operators(self) -> pl.DataFrame:
        return operators(self.trace)

    @cached_property
    def launch(self) -> LaunchStats:
        return launch_stats(self.trace)

    @cached_property
    def names(self) -> pl.Series:
        return names_text(self.trace)

    @cached_property
    def step_ns(self) -> float:
        """Average step time (the whole trace when there are no steps)."""
        return float(self.overview.breakdown_ns["Total"]) or 1.0

    @cached_property
    def host_span_ns(self) -> float:
        """Total profiled host time: the steps, or the whole trace when there are none."""
        return float(self.overview.steps["dur_ns"].sum()) or 1.0

    def stack_of(self, row: int, depth: int = 6) -> list[str]:
        """Python frames (innermost first) above an event row, when stacks were recorded;
        torchscope's own frames (the runner, the CLI, runpy) are left out."""
        return self._python_frames(row)[:depth]

    def user_frame_of(self, row: int) -> str | None:
        """The innermost frame of the user's code above an event row (not torch's, not ours)."""
        return next((f for f in self._python_frames(row) if is_user_frame(f)), None)

    @cached_property
    def _tool_rows(self) -> np.ndarray:
        return tool_frames(self.trace)

    def _python_frames(self, row: int) -> list[str]:
        ev = self.trace.events
        kinds = ev["kind"]
        parent = ev["parent"]
        out: list[str] = []
        cur = parent[row]
        while cur is not None and cur >= 0:
            if kinds[cur] == "python_function" and not self._tool_rows[cur]:
                out.append(str(self.names[cur]))
            cur = parent[cur]
        return out


Rule = Callable[[Context], list[Finding]]
