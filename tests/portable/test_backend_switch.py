"""The user's switch: the same ``torchscope.profile`` code with ``backend="portable"`` and
``backend="kineto"`` gives the same table for the ops both collectors see.

The collector is wired into ``profile`` by the capture package (issue 2); this checks the
contract end to end: schedule, ``ProfilerStep#N`` labels and ``key_averages`` on top of a
portable trace, against the Kineto run of the same steps.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import torchscope  # noqa: E402
from torchscope.models.perceptron import MLP  # noqa: E402

OPS = ("aten::addmm", "aten::mm", "aten::relu", "aten::threshold_backward")


def _run(backend: str) -> tuple[dict[str, int], list[int]]:
    torch.manual_seed(0)
    model, x = MLP((64, 128, 10)), torch.randn(4, 64)
    sched = torchscope.schedule(wait=1, warmup=1, active=2, repeat=1)
    with torchscope.profile(backend=backend, schedule=sched, record_shapes=True) as prof:
        for _ in range(5):
            model(x).sum().backward()
            prof.step()
    counts = {e.key: e.count for e in prof.key_averages() if e.key in OPS}
    return counts, prof.trace().steps["step"].to_list()


def test_portable_and_kineto_backends_give_the_same_table() -> None:
    portable, portable_steps = _run("portable")
    kineto, kineto_steps = _run("kineto")
    assert portable == kineto
    assert portable["aten::addmm"] == 2 * 2  # two Linear layers, two recorded steps
    assert portable_steps == kineto_steps == [2, 3]
