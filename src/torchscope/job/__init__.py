"""Jobs: a directory of runs, ranks and cycles analysed as map (per rank) -> reduce -> renderers.

``analyse_job(path)`` discovers the runs, ranks and cycles (``discover``), reduces each rank to
a small summary in parallel (``summarize``, run by an ``engine``: local processes or Ray), and
reduces those to one summary per run (``reduce``), with the straggler named from the collectives
(``straggler``). No step holds more than one rank's Trace per worker, and the parent holds only
the small summaries, so memory does not grow with the number of ranks.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from torchscope.job.discover import Discovery, discover

__all__ = ["Discovery", "analyse_job", "discover"]


def analyse_job(root: str | Path, **options: Any) -> dict[str, Any]:
    """``job.pipeline.analyse_job``, imported on use (``trace.loader`` imports ``job.discover``,
    and the pipeline imports the analyses, which import ``trace``)."""
    from torchscope.job.pipeline import analyse_job as run

    return run(root, **options)
