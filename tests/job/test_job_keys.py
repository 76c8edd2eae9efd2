"""The job report's keys are the ones analysis/keys.py names (the page and scripts read them)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from torchscope.analysis import keys as K


def test_every_run_of_a_job_has_exactly_the_documented_keys(traces_dir: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "torchscope", "report", str(traces_dir / "multirank"), "--json", "--no-html"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    job = json.loads(out)
    assert job[K.KIND] == "job" and len(job[K.JOB_RUNS]) == 1
    run = job[K.JOB_RUNS][0]
    assert set(run) == set(K.JOB_RUN_KEYS)
    assert run[K.JOB_RANKS] == 2 and run[K.JOB_WORLD_SIZE] == 128
