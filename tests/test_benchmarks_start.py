"""Every benchmark script still starts (imports resolve, arguments parse).

Benchmarks are not tests and nothing here times anything; this only keeps a refactor from
silently breaking the scripts that back the project's speed claims.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = sorted((Path(__file__).resolve().parents[1] / "benchmarks").glob("*.py"))


def test_there_is_a_benchmark_per_claim() -> None:
    names = {p.stem for p in BENCHMARKS}
    assert {"postprocess", "events", "load", "analyses", "report", "portable_vs_kineto", "accuracy"} <= names


@pytest.mark.parametrize("script", BENCHMARKS, ids=lambda p: p.stem)
def test_benchmark_starts(script: Path) -> None:
    done = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage:" in done.stdout
