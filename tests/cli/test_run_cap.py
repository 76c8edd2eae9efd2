"""The cap ends the cycle it catches, not the run: a first step that keeps a model's worth of
memory alive passed the cap and used to stop all recording, so a real ResNet-18 run of 150 s
kept only its first step; the default schedule's steady-state cycles must still be recorded."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import torchscope

SCRIPTS = Path(__file__).parent / "scripts"


def test_the_cap_ends_one_cycle_and_the_schedule_records_the_later_ones(tmp_path: Path) -> None:
    out = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "torchscope", "run", "--out", str(out), "--cap-mb", "32", "--no-summary",
         str(SCRIPTS / "big_first_step.py"), "45"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "stepped 45 times, kept 152 MiB" in done.stdout
    facts = json.loads((out / "run.json").read_text())
    assert any(n.startswith("a cycle stopped at the cap") for n in facts["notes"])
    traces = [Path(p) for p in facts["traces"]]
    assert len(traces) == 3  # the capped first cycle, then steps 20-22 and 38-40
    later = [sorted(torchscope.load(p).steps["step"].to_list()) for p in traces[1:]]
    assert later == [[20, 21, 22], [38, 39, 40]]
