"""The names ``torchscope run`` gives its cycles' files in ``OUT/traces/``, for the writer and the reader.

The runner writes them (``runner.session``) and discovery reads a run directory by them
(``job.discover``): both take them from here. They were two definitions that drifted: discovery
knew only ``step_N``, so the setup-only ``run`` cycle and the copies of a script's own profiler's
cycles were each read as a run of its own ("4 runs in OUT", and ``diff`` refused the folder).

Torch-free and import-free: discovery imports it to read a run directory without torch.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

SUFFIX = ".pt.trace.json"
# a cycle ours ended before the script's first optimizer step (the script's own profiler took
# over, or it never stepped): the setup before the first training iteration, no step
SETUP_CYCLE = "run"
# the copies of the cycles a script's own profiler recorded (``_Recording.copy_script_cycles``)
SCRIPT_CYCLE = "script_profiler"


def own_cycle(last_step: int) -> str:
    """Our cycle that ended at optimizer step ``last_step``."""
    return f"step_{last_step}"


def script_cycle(profiler: int, cycle: int) -> str:
    """The ``cycle``-th cycle of the script's ``profiler``-th profiler (both from 1)."""
    return f"{SCRIPT_CYCLE}{profiler}.cycle{cycle}"


def file_name(cycle: str, prefix: str = "") -> str:
    """The file of a cycle; ``prefix``: ``rank-N.`` for one rank of a launch of several
    (``launch.LaunchRank.directory``), so that a directory of ranks keys its files by rank."""
    return f"{prefix}{cycle}{SUFFIX}"


_FILE = re.compile(
    r"^(?:rank-\d+\.)?"
    rf"(?:(?P<setup>{SETUP_CYCLE})|step_(?P<step>\d+)|{SCRIPT_CYCLE}(?P<profiler>\d+)\.cycle(?P<cycle>\d+))"
    rf"{re.escape(SUFFIX)}(?:\.gz)?$"
)


def is_cycle_file(name: str) -> bool:
    """Whether a file name is one of ours (gzip'd too: a run directory copied and compressed)."""
    return _FILE.match(name) is not None


def is_setup_cycle(name: str) -> bool:
    """Whether a file name is our setup-only cycle (``SETUP_CYCLE``), which holds no step."""
    m = _FILE.match(name)
    return m is not None and m.group("setup") is not None


def is_script_cycle(name: str) -> bool:
    """Whether a file name is our copy of a script's own profiler's cycle (``SCRIPT_CYCLE``)."""
    m = _FILE.match(name)
    return m is not None and m.group("profiler") is not None


def reported(names: Sequence[str]) -> list[bool]:
    """Which of a run's cycle files hold the steps the run reports, in one numbering.

    Once a script's own profiler took over, the run reports its cycles ("torchscope run stepped
    aside ... and reports the cycles the script's profiler recorded"); ours from before it count
    the run's optimizer steps while the script's profiler counts its own ``step()`` calls, so
    one number named two different steps and ``diff`` matched both (a new user's find): ours are
    left out then. Otherwise every cycle but the setup-only one (no step), unless it is all
    there is. Files that are not ours are always kept."""
    if any(is_script_cycle(n) for n in names):
        return [not is_cycle_file(n) or is_script_cycle(n) for n in names]
    stepped = [not is_setup_cycle(n) for n in names]
    return stepped if any(stepped) else [True] * len(names)


def written_order(name: str) -> tuple[int, int, int]:
    """Where a file of ours comes among its run's cycles, as they were written: the setup
    first (ours records from the start), then ours by step, then the script's profilers' copies
    (ours never records again once a script's profiler took over). Name order put
    ``script_profiler1`` before ``step_4``. A name not of ours sorts last."""
    m = _FILE.match(name)
    if m is None:
        return (3, 0, 0)
    if m.group("setup") is not None:
        return (0, 0, 0)
    if m.group("step") is not None:
        return (1, int(m.group("step")), 0)
    return (2, int(m.group("profiler")), int(m.group("cycle")))
