"""The dashboard's JavaScript unit tests (frontend/test/*.test.mjs), run by node's own test runner.

They load the page's modules as the page does (VIEW_MODULES, in order, in one context) and
check the data shaping: the format twins of render/units.py, the table's filter and sort, the
operators chain. This test hands them what only Python has: the reports of real traces (the
chain must add up on them) and the text render/units.py prints for every number in those
reports plus edge cases (the page must print the same).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from torchscope.analysis.report import build_report
from torchscope.render.units import fmt

REPO = Path(__file__).resolve().parents[2]
TESTS = sorted((REPO / "frontend" / "test").glob("*.test.mjs"))
TRACES = (
    "cuda/nccl_rank1_of_2_profile_memory.json.gz",
    "tensorboard_samples/resnet50_num_workers_0.pt.trace.json.gz",
)
EDGES: list[tuple[Any, str | None]] = [
    *(
        (v, "us")
        for v in (0, 0.001, 0.999, 1, 999.999, 1000, 1062.5, 1062.4, 999999.999, 1e6, -2500, 3.6e9, 1234.05)
    ),
    *((v, "bytes") for v in (0, 1, 1023, 1024, 1536, 1048575, 6629508096, -4096, 1.5e15)),
    *((v, "percent") for v in (0, 0.05, 0.15, 12.345, 99.95, 100, -3.25)),
    *((v, "fraction") for v in (0, 0.5, 0.999, 1)),
    *((v, "count") for v in (0, 7, 1234567, 2.5, 0.125)),
    *((v, "flop") for v in (0, 999, 1000, 1.5e12, 2.5e18)),
    (1.5e12, "flop/s"),
    (0.875, "blocks/SM"),
    (3, "id"),
    (None, "us"),
    ("aten::mm", "us"),
]


def _cases(reports: list[dict[str, Any]]) -> list[list[Any]]:
    """[value, unit, start, Python's text]: every number in the reports' rows, then the edges."""
    out: list[list[Any]] = []
    for r in reports:
        units, start = r["units"], r["meta"]["start_us"]
        for key in ("operators", "operators_by_shape", "kernels", "kernels_by_op", "steps"):
            for row in r[key]:
                for k, v in row.items():
                    if isinstance(v, int | float) and not isinstance(v, bool) and k in units:
                        out.append([v, units[k], start, fmt(v, units[k], start)])
    out += [[v, u, None, fmt(v, u)] for v, u in EDGES]
    out.append([1_000_100, "timestamp_us", 1_000_000, fmt(1_000_100, "timestamp_us", 1_000_000)])
    return out


def test_the_pages_javascript_unit_tests_pass(traces_dir: Path, tmp_path: Path) -> None:
    node = shutil.which("node")
    if node is None:
        pytest.skip(
            "node not found: the dashboard's JavaScript unit tests (frontend/test, node --test) did not run"
        )
    import torchscope

    reports = []
    for i, rel in enumerate(TRACES):
        r = json.loads(json.dumps(build_report(torchscope.load(traces_dir / rel))))
        reports.append(r)
        (tmp_path / f"report{i}.json").write_text(json.dumps(r), encoding="utf-8")
    cases = _cases(reports)
    (tmp_path / "fmt.json").write_text(json.dumps(cases), encoding="utf-8")
    env = {
        **os.environ,
        "TORCHSCOPE_FMT_CASES": str(tmp_path / "fmt.json"),
        "TORCHSCOPE_REPORTS": os.pathsep.join(str(tmp_path / f"report{i}.json") for i in range(len(TRACES))),
    }
    assert len(TESTS) >= 3
    done = subprocess.run(
        [node, "--test", *map(str, TESTS)], env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    # every test ran: none skipped for want of the data above
    assert "# fail 0" in done.stdout and "# skipped 0" in done.stdout, done.stdout[-2000:]
