"""``torchscope demo``: the README's first command prints the table and writes both outputs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from torchscope.cli.main import main
from torchscope.trace.reader import read_chrome


def test_demo_prints_the_table_and_writes_a_trace_and_a_log_dir(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["demo", "--out", str(tmp_path), "--steps", "5", "--batch", "2", "--size", "32"])
    assert code == 0
    out = capsys.readouterr().out
    assert "Self CPU %" in out and "aten::convolution_backward" in out
    assert "Self CPU time total:" in out
    assert "profiled steps 2, 3, 4 of 0-4" in out
    logs = list((tmp_path / "log").iterdir())
    assert len(logs) == 1 and logs[0].name.startswith("demo.") and logs[0].name.endswith(".pt.trace.json")
    trace = read_chrome(tmp_path / "resnet18.pt.trace.json")
    assert trace.steps["step"].to_list() == [2, 3, 4]
    assert {"forward", "backward", "optimizer"} <= set(trace.annotations["name"].cast(str).to_list())
    assert json.loads(logs[0].read_text())["record_shapes"] == 1


def test_demo_rejects_too_few_steps(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--out", str(tmp_path), "--steps", "3"]) == 2
    assert "at least 5 steps" in capsys.readouterr().err
