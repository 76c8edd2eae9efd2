"""The same trace gives the same JSON, byte for byte, in every process.

Users diff ``report --json`` and ``diff --json`` outputs between runs to catch regressions; rows
that tie on the sort key (two kernels of equal total time, two ops with equal FLOPs) used to
come out in Polars' hash order, which changes from process to process. Every table now breaks
ties by its key columns. Each command runs in two fresh processes here, since a single process
may hash alike twice.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


def _cli(*args: str | Path) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "torchscope", *map(str, args)], capture_output=True, text=True, check=True
    )
    return out.stdout


@pytest.mark.parametrize(
    ("rel", "key"),
    [
        ("multirank/rank-0.json.gz", '"flops"'),
        ("other_devices/amd_mi250_rocm6.json.gz", '"flops"'),
        ("multirank", '"collectives"'),  # a folder of ranks is a job (docs/jobs.md)
    ],
)
def test_report_json_is_the_same_in_every_process(traces_dir: Path, rel: str, key: str) -> None:
    first, second = (_cli("report", traces_dir / rel, "--json") for _ in range(2))
    assert first == second and key in first


def test_diff_json_is_the_same_in_every_process(traces_dir: Path) -> None:
    a, b = (
        traces_dir / "cuda" / "diff_control_rank3_of_8.json.gz",
        traces_dir / "cuda" / "diff_test_rank1_of_2.json.gz",
    )
    first, second = (_cli("diff", a, b, "--json") for _ in range(2))
    assert first == second and '"changes"' in first


def test_event_counts_by_kind_come_in_the_kinds_order(traces_dir: Path) -> None:
    """The report's ``meta.event_kinds`` (a dict, so not a table: missed by the tie-breaking) in
    the order of the Trace's kind enum, not in hash order (it failed the diff test above)."""
    import torchscope
    from torchscope.analysis.report import build_report
    from torchscope.trace.schema import KINDS

    trace = torchscope.load(traces_dir / "cuda" / "diff_control_rank3_of_8.json.gz")
    kinds = list(build_report(trace)["meta"]["event_kinds"])
    assert len(kinds) >= 6 and kinds == [k for k in KINDS if k in kinds]
