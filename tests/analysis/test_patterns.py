"""torch's pattern-matcher anti-patterns on a live CPU training step, and the clean version."""

from __future__ import annotations

from pathlib import Path

import pytest

import torchscope
from torchscope.analysis.advisor import advise
from torchscope.trace.model import Trace

torch = pytest.importorskip("torch")

PATTERN_RULES = {
    "optimizer_foreach",
    "zero_grad_set_to_none",
    "conv_bias_before_batchnorm",
    "matmul_dims_not_multiple_of_8",
}


def _step(tmp: Path, bad: bool) -> Trace:
    from torch.profiler import ProfilerActivity, profile

    net = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, bias=bad),
        torch.nn.BatchNorm2d(8),
        torch.nn.Flatten(),
        torch.nn.Linear(8 * 14 * 14, 10),
    )
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9, foreach=not bad)
    x = torch.randn(4, 3, 16, 16)
    n = 30 if bad else 32  # a half-precision matmul whose sizes are / are not multiples of 8
    a, b = torch.randn(n, 64, dtype=torch.bfloat16), torch.randn(64, n, dtype=torch.bfloat16)

    def step() -> None:
        net(x).sum().backward()
        opt.step()
        opt.zero_grad(set_to_none=not bad)
        torch.mm(a, b)

    step()  # gradients and momentum buffers exist before the profiled step
    with profile(activities=[ProfilerActivity.CPU], with_stack=True, record_shapes=True) as prof:
        step()
    path = tmp / f"step{int(bad)}.json"
    prof.export_chrome_trace(str(path))
    t = torchscope.load(path)
    assert isinstance(t, Trace)
    return t


def test_training_step_anti_patterns_are_named(tmp_path: Path) -> None:
    # min_share=0: every finding, however little of this one-step run it measured (the tiny
    # SGD update is well under the default 1% floor on a fast machine, not on a slow one)
    found = {f.rule: f for f in advise(_step(tmp_path, bad=True), min_share=0)}
    assert set(found) >= PATTERN_RULES
    assert found["optimizer_foreach"].evidence["functions"] == ["_single_tensor_sgd"]
    assert (
        found["zero_grad_set_to_none"].evidence["zero_fills"] == 6
    )  # weight and bias of conv, batch norm and linear
    assert found["conv_bias_before_batchnorm"].evidence["convolutions"] == 1
    assert found["matmul_dims_not_multiple_of_8"].evidence["calls"] == 1
    assert "set_to_none=True" in found["zero_grad_set_to_none"].fix


def test_the_clean_training_step_has_none_of_them(tmp_path: Path) -> None:
    found = {f.rule for f in advise(_step(tmp_path, bad=False), min_share=0)}
    assert not (PATTERN_RULES & found)


def test_conv_layers_are_counted_once_a_step_not_by_shapes(tmp_path: Path) -> None:
    """A new user's model of 2 biased convolutions before BatchNorm read "4 convolution layers"
    (its evaluation, at another batch size, ran in one of the steps), while ResNet's identical
    blocks (same shapes) counted as one. A layer runs once a step: the count most steps show."""
    from torch.profiler import ProfilerActivity, profile, schedule

    net = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1),
        torch.nn.BatchNorm2d(8),
        torch.nn.Conv2d(8, 8, 3, padding=1),
        torch.nn.BatchNorm2d(8),
        torch.nn.Conv2d(8, 8, 3, padding=1),  # the same shapes as the one before it
        torch.nn.BatchNorm2d(8),
    )
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    path = tmp_path / "layers.json"
    with profile(
        activities=[ProfilerActivity.CPU],
        record_shapes=True,
        schedule=schedule(wait=0, warmup=0, active=3, repeat=1),
        on_trace_ready=lambda p: p.export_chrome_trace(str(path)),
    ) as prof:
        for i in range(3):
            net(torch.randn(4, 3, 8, 8)).sum().backward()
            opt.step()
            opt.zero_grad()
            if i == 1:  # an evaluation at another batch size, inside step 1
                with torch.no_grad():
                    net.eval()(torch.randn(16, 3, 8, 8))
                    net.train()
            prof.step()
    (finding,) = [f for f in advise(torchscope.load(path), min_share=0) if f.rule == "conv_bias_before_batchnorm"]
    assert finding.evidence == {"convolutions": 3, "calls": 12}
    assert finding.message.startswith("3 convolution layers with a bias feed straight into BatchNorm")
