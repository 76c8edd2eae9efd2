"""Kineto sometimes writes a frame name without JSON escaping; the run must still be readable.

Seen in CI: a ``torchscope run --stack`` of our ResNet script, under load, got a Python frame
named ``torch/profiler/_cupti_monitor.py(0):`` + four spaces + three double quotes, which Kineto
wrote raw, so the whole 9 MB cycle was invalid JSON and the run lost its report. These tests
put exactly that line (and two other raw values) into a real trace recorded here.
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import polars as pl
import pytest
import torch

import torchscope
from torchscope import profile
from torchscope.capture.kineto import Cycle
from torchscope.errors import TraceError
from torchscope.models import mlp
from torchscope.trace import reader
from torchscope.trace.json_repair import escape_raw_strings

SEEN_IN_CI = 'torch/profiler/_cupti_monitor.py(0):     """'
RAW_TAB = "train.py(3): step\tinner"
RAW_BACKSLASH = r"C:\work\train.py(7): forward"


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """A real trace with Python frames, and the names of three of its frames."""
    model = mlp((8, 16, 4))
    x = torch.randn(2, 8)
    with profile(with_stack=True) as prof:
        for _ in range(3):
            model(x).sum()
    path = tmp_path_factory.mktemp("raw") / "good.json"
    prof.export_chrome_trace(str(path))
    frames = [
        e["name"] for e in json.loads(path.read_text())["traceEvents"] if e.get("cat") == "python_function"
    ]
    picked = [n for n in frames if '"' not in n and "\\" not in n][:3]
    assert len(picked) == 3
    return path, picked


def _break(good: Path, names: list[str], out: Path) -> Path:
    """``good`` with three frame names replaced by raw (unescaped) values, as Kineto writes them."""
    text = good.read_text()
    for old, raw in zip(names, (SEEN_IN_CI, RAW_TAB, RAW_BACKSLASH), strict=True):
        line = f'"name": {json.dumps(old)},'
        assert line in text
        text = text.replace(line, f'"name": "{raw}",', 1)
    out.write_text(text)
    with pytest.raises(ValueError):
        json.loads(text)
    return out


@pytest.mark.parametrize("path", ["scanner", "msgspec", "pieces"])
def test_raw_names_are_repaired_and_kept(
    recorded: tuple[Path, list[str]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    good, names = recorded
    bad = _break(good, names, tmp_path / "bad.json")
    if path == "msgspec":
        monkeypatch.setattr(reader, "SCANNER_ENABLED", False)
    if path == "pieces":  # the large-file path: the event list is decoded in pieces
        monkeypatch.setattr(reader, "CHUNK_BYTES", 4096)
    before, after = torchscope.load(good), torchscope.load(bad)
    assert after.events.height == before.events.height
    frames = after.events.filter(pl.col("kind") == "python_function")["name"].cast(pl.String).to_list()
    assert {SEEN_IN_CI, RAW_TAB, RAW_BACKSLASH} <= set(frames)
    assert all(
        re.search(r"repaired \d+ string values? written without JSON escaping", w)
        for w in after.meta.warnings
    )
    assert sum(int(w.split()[1]) for w in after.meta.warnings) == 3
    # everything else is what the valid file gives
    rename = dict(zip((SEEN_IN_CI, RAW_TAB, RAW_BACKSLASH), names, strict=True))
    fixed = after.events.with_columns(pl.col("name").cast(pl.String).replace(rename))
    assert fixed.select("name", "start_ns", "dur_ns").equals(
        before.events.select(pl.col("name").cast(pl.String), "start_ns", "dur_ns")
    )


def test_a_live_cycle_exports_valid_json(recorded: tuple[Path, list[str]], tmp_path: Path) -> None:
    good, names = recorded
    saved = _break(good, names, tmp_path / "cycle-1.pt.trace.json")
    cycle = Cycle(path=saved)
    for out in (tmp_path / "out.json", tmp_path / "out.json.gz"):
        cycle.export(out)
        text = gzip.decompress(out.read_bytes()) if out.suffix == ".gz" else out.read_bytes()
        frames = {e["name"] for e in json.loads(text)["traceEvents"] if e.get("cat") == "python_function"}
        assert {SEEN_IN_CI, RAW_TAB, RAW_BACKSLASH} <= frames
    assert cycle.trace.python_functions.height > 0


def test_valid_text_is_returned_as_it_is(recorded: tuple[Path, list[str]]) -> None:
    text = recorded[0].read_bytes()
    same, repaired = escape_raw_strings(text)
    assert same is text and repaired == []
    # older Kineto puts several members on one line; a valid such line is never rewritten
    line = b'{"traceEvents": [\n  {\n    "ph": "X", "cat": "Operator", "name": "a\\": b", "ts": 1, "dur": 2\n  }\n]}'
    assert escape_raw_strings(line) == (line, [])


def test_a_file_broken_otherwise_still_names_the_problem(recorded: tuple[Path, list[str]], tmp_path: Path) -> None:
    good, names = recorded
    bad = _break(good, names, tmp_path / "bad.json")
    text = bad.read_bytes()
    # cut short as well: both repairs apply, and both are said
    cut = tmp_path / "cut.json"
    cut.write_bytes(text[: len(text) // 2 + len(text) // 4])
    warnings = torchscope.load(cut).meta.warnings
    assert any("written without JSON escaping" in w for w in warnings) and any("truncated" in w for w in warnings)
    # a double comma is neither: the one-line error
    double = tmp_path / "double.json"
    double.write_bytes(text.replace(b'"ph": "X",', b'"ph": "X",,', 1))
    with pytest.raises(TraceError, match=r"double\.json: not valid JSON"):
        torchscope.load(double)
