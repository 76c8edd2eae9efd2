"""``torchscope accuracy run|dump`` end to end on an example model and on a user script."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from torchscope.cli.main import main as cli


def test_run_example_model_json(capsys: pytest.CaptureFixture[str]) -> None:
    code = cli(["accuracy", "run", "--model", "transformer_block", "--dtype", "float16", "--json", "--check"])
    section = json.loads(capsys.readouterr().out)
    assert code == 0 and section["first_divergence"] is None
    s = section["summary"]
    assert (s["mode"], s["reference"], s["ops"], s["forward_ops"], s["backward_ops"]) == (
        "live",
        "cpu float64",
        56,
        26,
        30,
    )
    assert {m["module"] for m in section["modules"]} >= {"qkv", "proj", "ff.0", "ff.2", "norm1", "norm2"}


def test_run_script_and_dump(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "train.py"
    script.write_text(
        "import sys, torch\n"
        "steps = int(sys.argv[sys.argv.index('--steps') + 1])\n"
        "torch.manual_seed(0)\n"
        "m = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))\n"
        "m = m.to(torch.bfloat16)\n"
        "for _ in range(steps):\n"
        "    m(torch.randn(8, 16, dtype=torch.bfloat16)).float().sum().backward()\n"
    )
    assert (
        cli(["accuracy", "run", "--tol", "aten::tanh=0.5,0.5", "--json", str(script), "--", "--steps", "2"])
        == 0
    )
    section = json.loads(capsys.readouterr().out)
    tanh = [o for o in section["ops"] if o["op"] == "aten::tanh"]
    assert len(tanh) == 2 and all(o["rtol"] == 0.5 and o["module"] == "1" for o in tanh)
    assert section["summary"]["random"] >= 3  # nn.Linear's init (uniform_) and torch.randn, not compared
    out = tmp_path / "d"
    args = ["accuracy", "dump", str(out), "--model", "mlp", "--dtype", "bfloat16", "--tensors", "*", "--json"]
    assert cli(args) == 0
    meta = json.loads(capsys.readouterr().out)
    assert meta == json.loads((out / "meta.json").read_text())
    assert meta["saved_tensors"] == meta["tensors"] > 0
    assert meta["level"] == "all" and meta["modules"] > 0
    args = ["accuracy", "dump", str(tmp_path / "m"), "--model", "mlp", "--level", "module"]
    assert cli(args) == 0
    meta = json.loads((tmp_path / "m" / "meta.json").read_text())
    assert f"dump: {tmp_path / 'm'}: 0 ops, {meta['modules']} module calls" in capsys.readouterr().out
    assert meta["modules"] > 0 and meta["level"] == "module"
    assert cli(["accuracy", "run", str(tmp_path / "missing.py")]) == 2
    assert "no such script" in capsys.readouterr().err


def test_terminal_table_names_directions_and_keeps_rows_whole(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(["accuracy", "run", "--model", "transformer_block", "--dtype", "bfloat16", "--top", "5"]) == 0
    out = capsys.readouterr().out
    rows = [[c.strip() for c in line.split("│")[1:-1]] for line in out.splitlines() if line.startswith("│")]
    top = [r for r in rows if len(r) == 9]  # the "top ops by error" table: one line per op
    assert (
        len(top) == 5
        and {r[3] for r in top} <= {"fwd", "bwd"}
        and all(r[1].startswith("aten::") for r in top)
    )
    assert "no first divergence" in out
