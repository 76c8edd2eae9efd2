"""The promise of DESIGN.md: analysing a trace copied from a cluster needs no torch.

Runs in a fresh interpreter where ``import torch`` fails, loads a real CUDA trace, builds the
whole report and the torch-layout table, and checks the public names resolve.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import torchscope

SCRIPT = """
import json, sys
sys.modules["torch"] = None  # any 'import torch' now raises ImportError
import torchscope
from torchscope.compat import key_averages
from torchscope.analysis.report import build_report
trace = torchscope.load(sys.argv[1])
report = build_report(trace)
table = key_averages(trace).table(sort_by="self_cuda_time_total", row_limit=3)
print(json.dumps({"kernels": trace.kernels.height, "rules": [r["rule"] for r in report["recommendations"]],
                  "header": table.splitlines()[1]}))
"""


def test_a_trace_is_analysed_without_torch(traces_dir: Path) -> None:
    path = traces_dir / "cuda" / "alexnet_benchmark.json.gz"
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(path)], capture_output=True, text=True, check=True
    ).stdout
    result = json.loads(out)
    assert result["kernels"] == 79  # the file's own count of 'kernel' events
    assert "Self CUDA" in result["header"] and "# of Calls" in result["header"]
    # 43 s of window, 97% of it CUDA start-up; its pageable copies, syncs and fp32 matmuls are under
    # the advisor's 1% floor (tests/analysis/test_rules_on_real_traces.py)
    assert result["rules"] == ["startup_in_window", "low_device_utilization"]


def test_public_names_are_the_lazy_ones() -> None:
    assert set(torchscope.__all__) == set(torchscope._LAZY) | {"__version__"}
