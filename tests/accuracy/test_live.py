"""Live compare on our real models: low precision passes, a broken kernel is named exactly."""

from __future__ import annotations

import pytest
import torch
from faults import fault
from workloads import build, step

from torchscope.accuracy import compare
from torchscope.accuracy.report import accuracy_section


def live(name: str, dtype: torch.dtype, broken: str | None = None, **kw: object):  # type: ignore[no-untyped-def]
    model, x = build(name, dtype)
    if broken is None:
        with compare(model, **kw) as result:  # type: ignore[arg-type]
            step(model, x)
        return result
    with fault(broken), compare(model, **kw) as result:  # type: ignore[arg-type]
        step(model, x)
    return result


def test_resnet18_low_precision_has_no_false_divergence() -> None:
    for dtype in (torch.bfloat16, torch.float16):
        r = live("resnet18", dtype)
        s = r.summary()
        assert r.first_divergence is None, s
        assert s["diverged"] == 0
        assert s["forward_ops"] == 91 and s["backward_ops"] == 71
        convs = [o for o in r if o.op == "aten::convolution"]
        assert len(convs) == 20 and convs[0].module == "conv1" and convs[-1].module == "layer4.1.conv2"
        # the errors are real but small: one rounding of the target dtype
        worst = max(o.worst.rel_l2_error or 0 for o in r.compared if o.worst is not None)
        assert 0 < worst < {torch.bfloat16: 1.6e-2, torch.float16: 1e-3}[dtype]


def test_transformer_low_precision_has_no_false_divergence() -> None:
    for dtype in (torch.bfloat16, torch.float16):
        r = live("transformer_block", dtype)
        assert r.first_divergence is None
        assert r.summary()["compared"] == 56
        bwd = [o for o in r if o.direction == "backward"]
        assert {o.module for o in bwd} >= {"ff.2", "ff.1", "ff.0", "proj", "qkv", "norm1", "norm2"}
        gelu_bwd = next(o for o in bwd if o.op == "aten::gelu_backward")
        assert gelu_bwd.module == "ff.1" and gelu_bwd.grad_fn == "GeluBackward0"


def test_broken_forward_kernel_is_the_first_divergence() -> None:
    r = live("transformer_block", torch.bfloat16, broken="gelu", with_stack=True)
    first = r.first_divergence
    assert first is not None
    assert (first.index, first.op, first.module, first.direction) == (20, "aten::gelu", "ff.1", "forward")
    assert first.input_shapes == [[2, 16, 1024]] and first.dtypes == ["bfloat16"]
    assert first.call_site is not None and "models/transformer.py:" in first.call_site
    assert first.call_site.endswith(" in forward")
    assert first.worst is not None and first.worst.max_rel_error is not None
    assert first.worst.max_rel_error > 0.4  # the fault scales outputs by 1.5
    # downstream ops received the wrong values but computed correctly on them: not blamed
    assert [o.op for o in r.diverged] == ["aten::gelu"]


def test_broken_backward_kernel_is_the_first_divergence() -> None:
    for dtype in (torch.bfloat16, torch.float16):
        r = live("transformer_block", dtype, broken="gelu_backward")
        first = r.first_divergence
        assert first is not None
        assert (first.index, first.op, first.module, first.direction) == (
            30,
            "aten::gelu_backward",
            "ff.1",
            "backward",
        )
        assert first.grad_fn == "GeluBackward0"


def test_broken_kernel_in_resnet18() -> None:
    r = live("resnet18", torch.float16, broken="addmm")
    first = r.first_divergence
    assert first is not None
    assert (first.index, first.op, first.module, first.direction) == (87, "aten::addmm", "fc", "forward")
    section = accuracy_section(r)
    assert section["first_divergence"]["op"] == "aten::addmm"
    assert section["first_divergence"]["input_shapes"] == [[1000], [1, 512], [512, 1000]]
    assert section["summary"]["diverged"] == 1
    fc = next(m for m in section["modules"] if m["module"] == "fc")
    assert fc["diverged"] == 1 and fc["worst_op"] == "aten::addmm"


def test_input_modified_in_place_is_caught() -> None:
    r = live("transformer_block", torch.bfloat16, broken="gelu_mutating")
    first = r.first_divergence
    assert first is not None and first.op == "aten::gelu" and first.mutated_inputs == ["self"]
    assert first.worst is not None and first.worst.allclose  # its output itself was right


def test_random_ops_are_not_compared_and_patterns_select_ops() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Dropout(0.5)).to(torch.bfloat16).train()
    x = torch.randn(4, 8, dtype=torch.bfloat16)
    with compare(model, exclude=["aten::t"], overrides={"aten::addmm": (0.5, 0.5)}) as r:
        model(x).sum().backward()
    ops = {o.op: o for o in r}
    assert ops["aten::bernoulli_"].status == "random"
    assert "aten::t" not in ops
    assert ops["aten::addmm"].worst is not None and ops["aten::addmm"].worst.rtol == 0.5
    assert r.first_divergence is None


def test_same_dtype_reference() -> None:
    model, x = build("transformer_block", torch.float32)
    with compare(model, reference_dtype=None) as r:
        step(model, x)
    assert r.reference == "cpu same dtype"
    assert r.first_divergence is None
    # same kernels, same inputs: bitwise equal
    assert all(o.worst is None or o.worst.max_abs_error == 0 for o in r.compared)


def test_input_modified_in_place_is_caught_at_the_same_dtype() -> None:
    # the reference copy doubles as the snapshot when it has the target's dtype
    r = live("transformer_block", torch.bfloat16, broken="gelu_mutating", reference_dtype=None)
    first = r.first_divergence
    assert first is not None and first.op == "aten::gelu" and first.mutated_inputs == ["self"]
    assert [o.op for o in r.diverged] == ["aten::gelu"]


def test_channels_last_and_large_inputs_compare_cleanly() -> None:
    # large floating inputs go through the reusable arena, keeping the target's memory format
    # (seeded for the exact numbers; the float32 sum's rounding: test_accumulation.py)
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(32, 32, 3, padding=1).to(torch.bfloat16)
    x = torch.randn(2, 32, 24, 24, dtype=torch.bfloat16).to(memory_format=torch.channels_last)
    with compare(conv) as r:
        conv(x).float().sum().backward()
    assert r.first_divergence is None
    fwd = next(o for o in r if o.op == "aten::convolution")
    assert fwd.input_shapes[0] == [2, 32, 24, 24] and fwd.worst is not None
    assert 0 < fwd.worst.rel_l2_error < 1.6e-2 and fwd.worst.mismatched == 0


def test_ops_on_meta_tensors_are_skipped() -> None:
    """Meta tensors have shapes and no data: nothing to copy to the reference or compare."""
    with compare() as r:
        a = torch.zeros(3, 3, device="meta")
        a @ a
        torch.ones(2, 2) * 3
    assert [(o.op, o.status) for o in r.ops] == [
        ("aten::zeros", "skipped"),
        ("aten::mm", "skipped"),
        ("aten::ones", "ok"),
        ("aten::mul", "ok"),
    ]
    assert r.ops[1].note == "meta tensors hold no values" and r.first_divergence is None


def test_the_c_loop_and_the_torch_path_reach_the_same_findings(monkeypatch: pytest.MonkeyPatch) -> None:
    """Live compare with its C metric loop and with the torch/numpy paths (an install without a
    compiler): the same verdict per op, the same root, and the same numbers to float32 rounding."""
    from torchscope.accuracy import torch_metrics

    if torch_metrics._fused is None:  # pragma: no cover - CI builds the extension
        pytest.skip("the optional C extension torchscope.accuracy._fused did not build")
    with_c = live("transformer_block", torch.bfloat16, broken="gelu_backward")
    monkeypatch.setattr(torch_metrics, "_fused", None)
    without_c = live("transformer_block", torch.bfloat16, broken="gelu_backward")
    assert [(o.op, o.status) for o in with_c] == [(o.op, o.status) for o in without_c]
    first_c, first_torch = with_c.first_divergence, without_c.first_divergence
    assert first_c is not None and first_torch is not None
    assert (first_c.index, first_c.op, first_c.direction) == (
        first_torch.index,
        "aten::gelu_backward",
        "backward",
    )
    for a, b in zip(with_c.compared, without_c.compared, strict=True):
        for ma, mb in zip(a.outputs, b.outputs, strict=True):
            assert (ma.mismatched, ma.allclose, ma.numel) == (mb.mismatched, mb.allclose, mb.numel), a.op
            # the torch path measures bfloat16 targets in float32, the C loop in float64
            assert abs((ma.rel_l2_error or 0) - (mb.rel_l2_error or 0)) <= 1e-5 * max(
                mb.rel_l2_error or 0, 1e-3
            )
