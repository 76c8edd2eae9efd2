"""Which rank of a multi-process launch this is (torchrun, torch.distributed.launch, or any
launcher that sets the same variables), so that ``torchscope run`` under ``torchrun`` gives each
rank a run directory of its own instead of every rank overwriting the others' files.

``torchrun --nproc_per_node 2 -m torchscope run train.py`` then writes ``OUT/rank-0``,
``OUT/rank-1``, ... and ``torchscope report OUT`` reads them as ranks of one job.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class LaunchRank:
    """This process's place in a launch of ``world_size`` processes."""

    rank: int
    world_size: int
    run_id: str | None  # the launcher's id of the whole job, the same in every rank (torchrun's)

    @property
    def directory(self) -> str:
        """The name of this rank's run directory inside the job's."""
        return f"rank-{self.rank}"


def launch_rank(environ: dict[str, str] | None = None) -> LaunchRank | None:
    """The rank from ``RANK`` and ``WORLD_SIZE`` when more than one process was launched; None
    for a plain run (or values that are not numbers)."""
    env = os.environ if environ is None else environ
    try:
        rank, world = int(env["RANK"]), int(env["WORLD_SIZE"])
    except (KeyError, ValueError):
        return None
    if world < 2 or not 0 <= rank < world:
        return None
    run_id = env.get("TORCHELASTIC_RUN_ID")
    return LaunchRank(rank, world, run_id if run_id and run_id != "none" else None)
