"""A cycle's line in the job summary names its worst findings first and says how many it left out."""

from __future__ import annotations

from torchscope.job.reduce import _by_impact
from torchscope.job.render import _cycles


def test_a_cycle_line_shows_the_largest_findings_and_counts_the_rest() -> None:
    # an H200 MLP cycle: the two largest findings sorted last by name were dropped from the line
    findings = [
        {"rule": "cpu_tensor_copied_to_device", "impact": 0.01},
        {"rule": "enable_amp", "impact": 0.447},
        {"rule": "host_device_sync", "impact": 0.128},
        {"rule": "pageable_memcpy", "impact": 0.192},
        {"rule": "tf32_matmul", "impact": 0.465},
        {"rule": "tf32_matmul", "impact": 0.534},  # another rank's, larger
    ]
    ordered = _by_impact(findings)
    assert ordered == [
        "tf32_matmul",
        "enable_amp",
        "pageable_memcpy",
        "host_device_sync",
        "cpu_tensor_copied_to_device",
    ]
    row = {
        "cycle": 0,
        "ranks": 1,
        "steps": 3,
        "min_step_ns": 1,
        "median_step_ns": 2,
        "max_step_ns": 3,
        "slowest_rank": 0,
        "findings": ordered,
    }
    lines = _cycles([row, {**row, "cycle": 1, "findings": []}])
    assert lines[1].endswith("; tf32_matmul, enable_amp, pageable_memcpy (+2 more)")
    assert lines[2].endswith("; -")
