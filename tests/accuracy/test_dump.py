"""Dump on two "machines" (two processes), compare offline: same findings as live compare."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
import torch
from faults import fault
from workloads import build, step

from torchscope.accuracy import compare, compare_dumps
from torchscope.accuracy.report import accuracy_section
from torchscope.cli.main import main as cli
from torchscope.errors import TraceError

WORKER = Path(__file__).resolve().parent / "dump_worker.py"


def _dumps(root: Path, jobs: dict[str, tuple[str, ...]]) -> dict[str, Path]:
    """Dump the float64 references in one process and the targets in another, concurrently."""
    out = {key: root / key for key in jobs}
    machines: dict[bool, list[list[str]]] = {True: [], False: []}
    for key, (model, dtype, *rest) in jobs.items():
        broken = rest[0] if rest else "-"
        tensors = rest[1] if len(rest) > 1 else ""
        machines[dtype == "float64"].append([model, dtype, str(out[key]), broken, tensors])
    procs = [subprocess.Popen([sys.executable, str(WORKER), json.dumps(j)]) for j in machines.values()]
    assert [p.wait(timeout=600) for p in procs] == [0, 0]
    return out


@pytest.fixture(scope="module")
def dumps(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return _dumps(
        tmp_path_factory.mktemp("dumps"),
        {
            "tb64": ("transformer_block", "float64", "-", "aten::gelu*"),
            "tb_bf16_bwd": ("transformer_block", "bfloat16", "gelu_backward", "aten::gelu*"),
            "tb_fp16": ("transformer_block", "float16"),
            "tb_fp16_fwd": ("transformer_block", "float16", "gelu"),
            "rn64": ("resnet18", "float64"),
            "rn_bf16": ("resnet18", "bfloat16"),
            "rn_bf16_fc": ("resnet18", "bfloat16", "addmm"),
        },
    )


def _key(op: object) -> tuple[object, ...]:
    return (op.index, op.op, op.module, op.direction)  # type: ignore[attr-defined]


def test_low_precision_dumps_have_no_false_divergence(dumps: dict[str, Path]) -> None:
    # (float16 ResNet-18 is covered live; each dump of it costs seconds on a shared CI core)
    for target, ref, n in (("tb_fp16", "tb64", 56), ("rn_bf16", "rn64", 162)):
        r = compare_dumps(dumps[target], dumps[ref])
        assert r.first_divergence is None, (target, r.summary())
        assert len(r) == n and not r.only_in_target and not r.only_in_reference
        assert r.warnings == []


def test_a_dump_matches_itself_exactly(dumps: dict[str, Path]) -> None:
    r = compare_dumps(dumps["tb64"], dumps["tb64"])
    assert r.diverged == [] and len(r.compared) == 56
    assert all(m.rel_l2_error == 0 for o in r.compared for m in o.outputs)


def test_broken_backward_kernel_named_across_processes_as_live(dumps: dict[str, Path]) -> None:
    r = compare_dumps(dumps["tb_bf16_bwd"], dumps["tb64"])
    first = r.first_divergence
    assert first is not None
    assert _key(first) == (30, "aten::gelu_backward", "ff.1", "backward")
    # both dumps saved gelu tensors in full: the metrics are exact, not from sketches
    assert first.worst is not None and first.worst.max_abs_error is not None
    assert first.worst.rel_l2_error == pytest.approx(0.5, abs=0.02)
    model, x = build("transformer_block", torch.bfloat16)
    with fault("gelu_backward"), compare(model) as live:
        step(model, x)
    assert live.first_divergence is not None and _key(live.first_divergence) == _key(first)


def test_broken_forward_kernels_named_across_processes(dumps: dict[str, Path]) -> None:
    first = compare_dumps(dumps["tb_fp16_fwd"], dumps["tb64"]).first_divergence
    assert first is not None and _key(first) == (20, "aten::gelu", "ff.1", "forward")
    assert first.worst is not None and first.worst.rel_l2_error == pytest.approx(
        0.5, rel=0.3
    )  # from sketches
    first = compare_dumps(dumps["rn_bf16_fc"], dumps["rn64"]).first_divergence
    assert first is not None and _key(first) == (87, "aten::addmm", "fc", "forward")


def test_statistics_dump_is_under_1kb_per_op(dumps: dict[str, Path]) -> None:
    for key in ("rn_bf16", "tb_fp16"):
        d = dumps[key]
        meta = json.loads((d / "meta.json").read_text())
        size = sum(p.stat().st_size for p in d.iterdir())
        assert meta["format"] == "torchscope-accuracy-dump" and meta["saved_tensors"] == 0
        assert size / meta["ops"] < 1024
    ops = pl.read_parquet(dumps["rn_bf16"] / "ops.parquet")
    assert ops.height == 162 and ops["module"][0] == "conv1"


def test_partial_comparisons_and_bad_dumps(dumps: dict[str, Path], tmp_path: Path) -> None:
    # the target lost its tensor file: compared on statistics, with a warning
    lost = tmp_path / "lost"
    shutil.copytree(dumps["tb_bf16_bwd"], lost)
    (lost / "tensors.safetensors").unlink()
    r = compare_dumps(lost, dumps["tb64"])
    assert any("tensors.safetensors: missing" in w for w in r.warnings)
    assert r.first_divergence is not None and r.first_divergence.op == "aten::gelu_backward"
    assert r.first_divergence.worst is not None and r.first_divergence.worst.max_abs_error is None
    # a corrupted tensor file: the same, with a warning that names it
    (lost / "tensors.safetensors").write_bytes(b"\x00" * 64)
    r = compare_dumps(lost, dumps["tb64"])
    assert any(w.startswith(f"{lost / 'tensors.safetensors'}: unreadable") for w in r.warnings)
    assert r.first_divergence is not None and r.first_divergence.op == "aten::gelu_backward"
    # a shorter run (it stopped half way): the common part is compared
    short = tmp_path / "short"
    shutil.copytree(dumps["tb_fp16"], short)
    pl.read_parquet(short / "ops.parquet").head(30).write_parquet(short / "ops.parquet")
    r = compare_dumps(short, dumps["tb64"])
    assert len(r) == 30 and len(r.only_in_reference) == 26
    assert any("the target has 30 ops, the reference 56" in w for w in r.warnings)
    # the reference fused one op away (its softmax ran inside another kernel): the rest aligns
    fused = tmp_path / "fused"
    shutil.copytree(dumps["tb64"], fused)
    ops = pl.read_parquet(fused / "ops.parquet")
    ops.filter(pl.col("op") != "aten::_softmax").write_parquet(fused / "ops.parquet")
    r = compare_dumps(dumps["tb_fp16"], fused)
    assert r.only_in_target == [{"index": 9, "op": "aten::_softmax", "module": "", "direction": "forward"}]
    assert len(r) == 55 and r.first_divergence is None
    # different programs
    r = compare_dumps(dumps["tb_fp16"], dumps["rn64"])
    assert any("look like different programs" in w for w in r.warnings)
    # corrupted and foreign files: one clear error naming the file
    broken = tmp_path / "broken"
    shutil.copytree(dumps["tb_fp16"], broken)
    (broken / "ops.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(TraceError, match=r"ops\.parquet: corrupted Parquet file"):
        compare_dumps(broken, dumps["tb64"])
    with pytest.raises(TraceError, match="not a torchscope accuracy dump"):
        compare_dumps(tmp_path, dumps["tb64"])


def test_cli_compare(dumps: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        cli(["accuracy", "compare", str(dumps["tb_bf16_bwd"]), str(dumps["tb64"]), "--json", "--check"]) == 1
    )
    section = json.loads(capsys.readouterr().out)
    assert section["first_divergence"]["op"] == "aten::gelu_backward"
    assert section["first_divergence"]["direction"] == "backward"
    assert section["summary"]["mode"] == "dump"
    assert cli(["accuracy", "compare", str(dumps["tb_fp16"]), str(dumps["tb64"]), "--check"]) == 0
    assert "no first divergence" in capsys.readouterr().out
    assert cli(["accuracy", "compare", "/nonexistent/a", str(dumps["tb64"])]) == 2
    assert "no such dump directory" in capsys.readouterr().err


def test_dashboard_section_shape(dumps: dict[str, Path]) -> None:
    section = accuracy_section(compare_dumps(dumps["rn_bf16_fc"], dumps["rn64"]))
    assert set(section) >= {"first_divergence", "ops", "modules", "summary"}
    first = section["first_divergence"]
    for key in (
        "index",
        "op",
        "module",
        "call_site",
        "input_shapes",
        "dtypes",
        "direction",
        "max_abs_error",
        "cosine",
    ):
        assert key in first
    json.dumps(section, allow_nan=False)
