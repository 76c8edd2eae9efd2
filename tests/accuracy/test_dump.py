"""Dump on two "machines" (two processes), compare offline: same findings as live compare."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import torch
from faults import fault
from workloads import build, step

from torchscope.accuracy import compare, compare_dumps, dump
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
        level = rest[2] if len(rest) > 2 else "all"
        machines[dtype == "float64"].append([model, dtype, str(out[key]), broken, tensors, level])
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
            "tb_bf16_bwd_modules": ("transformer_block", "bfloat16", "gelu_backward", "", "module"),
            "tb_bf16_mutating": ("transformer_block", "bfloat16", "gelu_mutating"),
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
    # a dump of module calls only: the module findings, no empty op tables
    assert cli(["accuracy", "compare", str(dumps["tb_bf16_bwd_modules"]), str(dumps["tb64"])]) == 0
    text = " ".join(capsys.readouterr().out.split())  # rich wraps long lines
    assert "16 module calls, 5 over tolerance" in text and "ff.1 nn.GELU (backward)" in text
    assert "first divergent module: #10" in text and "top 10 module calls by error" in text
    assert "no first divergence" not in text and "top 10 ops by error" not in text
    assert cli(["accuracy", "compare", "/nonexistent/a", str(dumps["tb64"])]) == 2
    assert "no such dump directory" in capsys.readouterr().err


def test_module_rows_say_unknown_where_statistics_hold_no_element_values(
    dumps: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """Finding 7: statistics-mode dumps (float16 vs float64) have no element values, so the
    per-op table shows max abs "–"; the "ops by module" table showed 0 for every module."""
    assert cli(["accuracy", "compare", str(dumps["tb_fp16"]), str(dumps["tb64"]), "--json"]) == 0
    section = json.loads(capsys.readouterr().out)
    modules = {m["module"]: m for m in section["modules"]}
    assert {"qkv", "proj", "ff.0", "ff.1", "ff.2", "norm1", "norm2"} <= set(modules)
    for row in modules.values():
        assert row["max_abs_error"] is None and row["max_rel_error"] is None  # null, not 0
        assert 0.99 < row["min_cosine"] <= 1.0  # the sketch's cosine is known
    assert {o["max_abs_error"] for o in section["ops"]} == {None}  # as the per-op rows say
    assert cli(["accuracy", "compare", str(dumps["tb_fp16"]), str(dumps["tb64"])]) == 0
    out = capsys.readouterr().out
    table = out[out.index("ops by module") :]
    qkv = next(line for line in table.splitlines() if " qkv " in line)
    assert [cell.strip() for cell in qkv.strip("│ ").split("│")][:4] == ["qkv", "4", "0", "–"]
    # where both dumps saved gelu's tensors, the module's max abs is its worst op's
    result = compare_dumps(dumps["tb_bf16_bwd"], dumps["tb64"])
    gelu = next(m for m in result.modules() if m["module"] == "ff.1")
    known = [o.worst.max_abs_error for o in result.compared if o.module == "ff.1" and o.worst is not None]
    assert gelu["max_abs_error"] == max(v for v in known if v is not None) > 0


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


def _module_key(m: object) -> tuple[object, ...]:
    return (m.op, m.module, m.direction)  # type: ignore[attr-defined]


def test_module_records_name_the_broken_module(dumps: dict[str, Path]) -> None:
    # no false alarm in low precision: every module call aligns and passes
    for target, ref, calls in (("tb_fp16", "tb64", 16), ("rn_bf16", "rn64", 133)):
        r = compare_dumps(dumps[target], dumps[ref])
        assert len(r.module_calls) == calls and r.first_module_divergence is None, target
        assert r.warnings == []
    # the innermost module whose outputs diverged with its inputs still right, both directions
    fwd = compare_dumps(dumps["tb_fp16_fwd"], dumps["tb64"]).first_module_divergence
    assert fwd is not None and _module_key(fwd) == ("nn.GELU", "ff.1", "forward")
    bwd = compare_dumps(dumps["tb_bf16_bwd"], dumps["tb64"])
    first = bwd.first_module_divergence
    assert first is not None and _module_key(first) == ("nn.GELU", "ff.1", "backward")
    # in backward a call's inputs are the gradients of its outputs, its outputs those it sends back
    assert first.inputs_ok and first.worst is not None
    assert first.worst.rel_l2_error == pytest.approx(0.5, rel=0.3)  # the fault scales by 1.5
    # what backward ran after it diverged too; of those, only the module containing it (ff) is
    # a root candidate (inputs right, error its own): the first divergence is the innermost one;
    # proj's inputs were within tolerance, but its error no larger than theirs: a cascade
    upstream = [m for m in bwd.module_calls if m.diverged and m.index > first.index]
    assert {m.module for m in upstream} == {"ff.0", "ff", "norm2", "proj"}
    assert [m.module for m in upstream if m.inputs_ok and not m.cascade] == ["ff"]
    assert next(m for m in upstream if m.module == "proj").cascade
    # a dump of module calls only (no per-op cost) finds the same module against a full dump
    only = compare_dumps(dumps["tb_bf16_bwd_modules"], dumps["tb64"])
    assert only.first_module_divergence is not None
    assert _module_key(only.first_module_divergence) == ("nn.GELU", "ff.1", "backward")
    assert len(only) == 0 and any("no ops recorded; modules compared" in w for w in only.warnings)
    meta = json.loads((dumps["tb_bf16_bwd_modules"] / "meta.json").read_text())
    assert (meta["level"], meta["ops"], meta["modules"]) == ("module", 0, 16)
    # the CLI and the dashboard's section carry it
    section = accuracy_section(bwd)
    assert section["first_module_divergence"]["module"] == "ff.1"
    assert section["summary"]["first_module_divergence"] == "ff.1 nn.GELU (backward)"


def test_backward_records_are_the_calls_own_gradients(dumps: dict[str, Path]) -> None:
    """A block's backward output is the gradient through the block alone, not the skip path's too."""
    calls = pl.read_parquet(dumps["rn64"] / "modules.parquet")
    tensors = pl.read_parquet(dumps["rn64"] / "module_tensors.parquet")
    # a call whose input needs no gradient (the first conv, fed the data) sends none back, and a
    # module that writes its input in place (ReLU(inplace=True)) is recorded forward only
    backward = calls.filter(pl.col("direction") == "backward")
    assert "conv1" not in backward["module"].to_list()
    assert backward.filter(pl.col("type") == "ReLU").height == 0
    assert calls.filter(pl.col("direction") == "forward").height == 76

    # layer2.0's input feeds its conv1 and its downsample path: each records only the gradient
    # that flowed back through it, and the block the sum of the two. Sketches are linear in
    # the tensor, so the sum shows in them (a hook on the input itself would see the sum in all)
    def sketch(module: str) -> np.ndarray:
        index = calls.filter((pl.col("module") == module) & (pl.col("direction") == "backward"))["index"]
        row = tensors.filter((pl.col("op_index") == index[0]) & (pl.col("role") == "output"))
        return np.array(row["sketch"][0])

    block, conv, down = sketch("layer2.0"), sketch("layer2.0.conv1"), sketch("layer2.0.downsample")
    np.testing.assert_allclose(block, conv + down, rtol=1e-9, atol=1e-12 * np.abs(block).max())
    assert np.abs(conv - block).max() > 0.1 * np.abs(block).max()


def test_input_written_in_place_is_caught_in_dumps_as_live(dumps: dict[str, Path]) -> None:
    ops = pl.read_parquet(dumps["tb_bf16_mutating"] / "ops.parquet")
    assert ops.filter(pl.col("mutated_inputs").list.len() > 0)["op"].to_list() == ["aten::gelu"]
    assert pl.read_parquet(dumps["tb64"] / "ops.parquet")["mutated_inputs"].list.len().sum() == 0
    first = compare_dumps(dumps["tb_bf16_mutating"], dumps["tb64"]).first_divergence
    assert first is not None and _key(first) == (20, "aten::gelu", "ff.1", "forward")
    assert first.mutated_inputs == ["self"]
    model, x = build("transformer_block", torch.bfloat16)
    with fault("gelu_mutating"), compare(model) as live:
        step(model, x)
    assert live.first_divergence is not None and _key(live.first_divergence) == _key(first)


def test_random_module_calls_are_not_compared(tmp_path: Path) -> None:
    def run(out: Path, seed: int) -> None:
        torch.manual_seed(0)
        model = torch.nn.Sequential(
            torch.nn.Linear(8, 8), torch.nn.Dropout(0.5), torch.nn.Linear(8, 2)
        ).train()
        x = torch.randn(4, 8, requires_grad=True)
        torch.manual_seed(seed)  # a different dropout mask on each "machine"
        with dump(out, model, level="module"):
            model(x).sum().backward()

    run(tmp_path / "a", 1)
    run(tmp_path / "b", 2)
    r = compare_dumps(tmp_path / "a", tmp_path / "b")
    status = {(m.module, m.direction): m.status for m in r.module_calls}
    assert status[("1", "forward")] == status[("", "forward")] == "random"
    assert status[("0", "forward")] == "ok"
    # the layer after the dropout sees different inputs: over tolerance, but never the root
    after = next(m for m in r.module_calls if (m.module, m.direction) == ("2", "forward"))
    assert after.diverged and not after.inputs_ok
    assert r.first_module_divergence is None


class _Recurrent(torch.nn.Module):
    """A linear layer into an LSTM: on CPU, float32 runs the LSTM as one fused oneDNN kernel,
    float64 as a loop of ATen ops, so the op sequences of the two barely align."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)
        self.lstm = torch.nn.LSTM(8, 8, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, (h, _) = self.lstm(self.proj(x))
        return out.sum() + h.sum()


def _dump_recurrent(out: Path, dtype: torch.dtype, scale: float = 1.0) -> None:
    torch.manual_seed(0)
    model = _Recurrent().double().to(dtype)
    x = (torch.randn(2, 3, 8, dtype=torch.float64) * scale).to(dtype).requires_grad_()
    with dump(out, model):
        model(x).backward()


def test_module_records_compare_where_ops_do_not_align(tmp_path: Path) -> None:
    _dump_recurrent(tmp_path / "f32", torch.float32)
    _dump_recurrent(tmp_path / "f64", torch.float64)
    _dump_recurrent(tmp_path / "f32_other_input", torch.float32, scale=1.5)
    r = compare_dumps(tmp_path / "f32", tmp_path / "f64")
    assert "only 13% of ops align, but all 6 module calls do" in " ".join(r.warnings)
    assert not any("different programs" in w for w in r.warnings)
    # no op aligns at all (every kernel renamed): the module calls are still compared
    renamed = tmp_path / "renamed"
    shutil.copytree(tmp_path / "f64", renamed)
    ops = pl.read_parquet(renamed / "ops.parquet")
    ops.with_columns(pl.lit("vendor::fused").alias("op")).write_parquet(renamed / "ops.parquet")
    r = compare_dumps(tmp_path / "f32", renamed)
    assert len(r) == 0 and len(r.module_calls) == 6 and r.first_module_divergence is None
    calls = {(m.module, m.direction) for m in r.module_calls}
    assert calls == {(p, d) for p in ("proj", "lstm", "") for d in ("forward", "backward")}
    assert r.first_module_divergence is None and not any(m.diverged for m in r.module_calls)
    # fed a different input, everything differs but nothing is a root: the LSTM's backward gets
    # the same output gradients (ones), but computes from what its forward saved, which differs
    r = compare_dumps(tmp_path / "f32_other_input", tmp_path / "f64")
    lstm_backward = next(m for m in r.module_calls if (m.module, m.direction) == ("lstm", "backward"))
    assert lstm_backward.diverged and not lstm_backward.inputs_ok
    assert r.first_module_divergence is None


def test_tensors_without_values_to_measure_are_skipped(tmp_path: Path) -> None:
    """Meta tensors (shapes, no data) and complex ones get no statistics; booleans are exact."""
    for name in ("a", "b"):
        with dump(tmp_path / name):
            meta = torch.randn(3, 3, device="meta")
            torch.nn.Linear(3, 3, device="meta")(meta @ meta)
            (torch.ones(2, 2, dtype=torch.complex64) * 2).abs()
            (torch.arange(4) > 1).logical_not()
    r = compare_dumps(tmp_path / "a", tmp_path / "b")
    assert r.first_divergence is None and r.warnings == []
    by_op = {o.op: o for o in r.ops}
    assert by_op["aten::mm"].outputs == [] and by_op["aten::abs"].outputs[0].dtype == "float32"
    assert by_op["aten::logical_not"].outputs[0].dtype == "bool"
    assert by_op["aten::logical_not"].outputs[0].allclose


def test_stats_are_reused_only_while_a_tensor_is_unchanged() -> None:
    from torchscope.accuracy.dump import StatsCache

    cache = StatsCache(size=2)
    x = torch.arange(6, dtype=torch.float32)
    first = cache.stats(x)
    assert cache.stats(x) is first  # the same tensor, unchanged: measured once
    x.mul_(2)  # an in-place op bumps the version counter: measured again
    again = cache.stats(x)
    assert again is not first and again["max"] == 10.0 and first["max"] == 5.0
    y, z = torch.ones(3), torch.zeros(3)
    cache.stats(y)
    cache.stats(z)  # size 2: x is evicted
    assert cache.stats(x) is not again
    with torch.inference_mode():  # no version counter: measured every time, never wrong
        w = torch.ones(2)
    assert cache.stats(w) is not cache.stats(w)


def test_corrupt_dumps_are_one_line_naming_the_file_and_the_problem(
    dumps: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A dump damaged the ways a disk, a hand edit or another writer damages it: each is one
    line naming the file and the problem (not an AttributeError, KeyError or TypeError), from
    the API and from ``torchscope accuracy compare``; damage a comparison can do without is a
    warning, and the rest is compared."""
    ref = dumps["tb64"]

    def damaged(name: str) -> Path:
        out = tmp_path / name
        shutil.copytree(dumps["tb_fp16"], out)
        return out

    cases: list[tuple[Path, str]] = []
    as_list = damaged("meta_list")
    (as_list / "meta.json").write_text(json.dumps([{"format": "torchscope-accuracy-dump"}]))
    cases.append((as_list / "meta.json", "corrupted metadata: a JSON object expected, found list"))
    bad_bytes = damaged("meta_bytes")
    (bad_bytes / "meta.json").write_bytes(b'{"format": "\xff\xfe"}')
    cases.append((bad_bytes / "meta.json", "corrupted metadata"))
    later = damaged("meta_version")
    meta = json.loads((later / "meta.json").read_text())
    (later / "meta.json").write_text(json.dumps({**meta, "version": 99}))
    cases.append((later / "meta.json", "dump format version 99: this torchscope reads versions 1 to 2; upgrade it"))
    no_column = damaged("ops_no_column")
    pl.read_parquet(no_column / "ops.parquet").drop("direction").write_parquet(no_column / "ops.parquet")
    cases.append((no_column / "ops.parquet", "missing column 'direction'"))
    text_column = damaged("tensors_text")
    t = pl.read_parquet(text_column / "tensors.parquet")
    t.with_columns(pl.lit("n/a").alias("numel")).write_parquet(text_column / "tensors.parquet")
    cases.append((text_column / "tensors.parquet", "column 'numel' holds String, not Int64"))
    for path, problem in cases:
        with pytest.raises(TraceError) as info:
            compare_dumps(path.parent, ref)
        assert str(info.value) == f"{path}: {problem}" or str(info.value).startswith(f"{path}: {problem}")
        assert "\n" not in str(info.value)
        assert cli(["accuracy", "compare", str(path.parent), str(ref)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and str(path) in err[0] and problem in err[0]

    # what a comparison can do without: a text column of numbers, an optional column lost,
    # a row without its op, 'files' that is not a list
    fixable = damaged("fixable")
    t = pl.read_parquet(fixable / "tensors.parquet")
    t = t.with_columns(pl.col("l2").cast(pl.String)).drop("abs_mean")
    t = pl.concat([t, t.head(1).with_columns(pl.lit(None, dtype=pl.Int64).alias("op_index"))])
    t.write_parquet(fixable / "tensors.parquet")
    meta = json.loads((fixable / "meta.json").read_text())
    meta["files"] = "ops.parquet"
    (fixable / "meta.json").write_text(json.dumps(meta))
    got = compare_dumps(fixable, ref)
    whole = compare_dumps(dumps["tb_fp16"], ref)
    assert [_key(o) for o in got] == [_key(o) for o in whole]
    assert [o.status for o in got] == [o.status for o in whole]
    assert any("no column 'abs_mean'" in w for w in got.warnings)
    assert any("1 of" in w and "rows lack" in w for w in got.warnings)
    assert any("'files' is not a list of names" in w for w in got.warnings)


@pytest.mark.parametrize("head", ["softmax", "layer_norm"])
@pytest.mark.parametrize("tensors", [True, False])
def test_an_output_that_cancels_to_zero_is_not_a_divergence(tmp_path: Path, head: str, tensors: bool) -> None:
    """``model(x).sum().backward()`` through a softmax makes the gradient of the logits exactly
    zero, and the sum of a layer norm's output is zero too: a float32 run against a float64 one
    has a relative error of ~1 there in any arithmetic, and blamed the correct op
    (``_softmax_backward_data``, ``sum``) as the first divergence. Judged on the inputs' scale,
    the roundoff passes; saved tensors or sketches alike."""

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.l1, self.l2 = torch.nn.Linear(16, 32), torch.nn.Linear(32, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.l2(torch.relu(self.l1(x)))
            return y.softmax(-1) if head == "softmax" else torch.nn.functional.layer_norm(y, (4,))

    for dtype in (torch.float32, torch.float64):
        torch.manual_seed(0)
        model, x = Net(), torch.randn(8, 16)
        model, x = model.to(dtype), x.to(dtype)
        with dump(tmp_path / str(dtype), model, tensors=tensors):
            model(x).sum().backward()
    r = compare_dumps(tmp_path / "torch.float32", tmp_path / "torch.float64")
    assert r.first_divergence is None, r.summary()
    # the forward, whose values do not cancel, is within tolerance op by op
    assert not [o for o in r.compared if o.direction == "forward" and o.diverged]


class _ScaledGelu(torch.nn.Module):
    """A GELU whose forward a user's Python got slightly wrong in one variant (``* 1.001``)."""

    def __init__(self, wrong: bool) -> None:
        super().__init__()
        self.wrong = wrong

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.nn.functional.gelu(x)
        return y * 1.001 if self.wrong else y


def _dump_block(out: Path, dtype: torch.dtype, wrong: bool) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(16, 32), _ScaledGelu(wrong), torch.nn.Linear(32, 16), torch.nn.LayerNorm(16)
    ).to(dtype)
    x = torch.randn(4, 16).to(dtype)
    with dump(out, model):
        (model(x).double() * torch.linspace(-1, 1, 16, dtype=torch.float64)).sum().backward()


def test_a_module_that_diverges_fails_the_check_and_its_extra_op_is_said(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # a float32 run whose GELU module scales its output by 1.001 against a correct float64 one:
    # the tool named the module ("first divergent module: #1 ... nn._ScaledGelu") and yet
    # `--check` exited 0, a CI gate passing a model 0.1 % off; the target's extra mul (its
    # only trace in the ops) went unsaid, the two sides having as many unaligned ops each
    _dump_block(tmp_path / "wrong", torch.float32, wrong=True)
    _dump_block(tmp_path / "ref", torch.float64, wrong=False)
    r = compare_dumps(tmp_path / "wrong", tmp_path / "ref")
    assert r.first_module_divergence is not None and r.first_module_divergence.module == "1"
    assert any("only in the target: aten::mul" in w for w in r.warnings)
    assert cli(["accuracy", "compare", str(tmp_path / "wrong"), str(tmp_path / "ref"), "--check"]) == 1
    capsys.readouterr()
    _dump_block(tmp_path / "right", torch.float32, wrong=False)
    assert cli(["accuracy", "compare", str(tmp_path / "right"), str(tmp_path / "ref"), "--check"]) == 0
