"""Training steps for device checks: a ResNet-18 step, and two steps of one MLP, one with the
mistakes the advisor names and one without them; and the benchmarks' step of small ops.

Why here: the device checks (``benchmarks/cuda_check.py``) and the recording of torch's own
answers (``scripts/record_cuda_truth.py``) must run the same workloads, so that the rules
checked live on a GPU are the ones the CPU tests check on the recorded traces.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from torchscope.models.perceptron import MLP


def resnet_step(device: torch.device, batch: int = 32) -> Callable[[], None]:
    """One SGD step of our ResNet-18 on 224x224 images, cuDNN autotuned."""
    from torchscope.models import resnet18

    torch.backends.cudnn.benchmark = True
    model = resnet18().to(device)
    x = torch.randn(batch, 3, 224, 224, device=device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def step() -> None:
        opt.zero_grad()
        model(x).sum().backward()
        opt.step()

    return step


def small_mlp_step(device: torch.device | str = "cpu") -> Callable[[], None]:
    """One SGD step of a 32-32-32-10 MLP on a batch of 8 (~160 events), seeded: the loop of
    small ops the post-processing benchmarks profile (``benchmarks/postprocess.py``,
    ``cycle_end.py``, ``events.py``), where post-processing, not compute, is what is timed."""
    dev = torch.device(device)
    torch.manual_seed(0)
    model = MLP((32, 32, 32, 10)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(8, 32, device=dev)
    y = torch.randint(0, 10, (8,), device=dev)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    return step


def _mlp(width: int, device: torch.device) -> nn.Module:
    return MLP((width,) * 7 + (10,)).to(device)  # six Linear+ReLU, then a 10-class head


def flawed_step(device: torch.device) -> Callable[[], None]:
    """fp32 matmuls without TF32 or AMP, width 1000 (not a multiple of 8), a 16 MB batch copied
    from pageable host memory every step, ``torch.ones(10).to(device)`` every step, a float64
    statistic, and two ``.item()`` per step."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    model = _mlp(1000, device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    host_x, host_y = torch.randn(4096, 1000), torch.randint(0, 10, (4096,))

    def step() -> None:
        x, y = host_x.to(device), host_y.to(device)  # pageable host memory, every step
        weights = torch.ones(10).to(device)  # made on the host, then copied
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y, weight=weights)
        loss.backward()
        opt.step()
        _ = loss.item() + x.double().std(dim=0).mean().item()  # two device syncs

    return step


def fixed_step(device: torch.device) -> Callable[[], None]:
    """The same model done right: bf16 autocast, TF32 on, width 1024, data on the device, a
    foreach optimizer, no syncs."""
    torch.backends.cuda.matmul.allow_tf32 = True
    model = _mlp(1024, device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, foreach=True)
    x, y = torch.randn(4096, 1024, device=device), torch.randint(0, 10, (4096,), device=device)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=torch.bfloat16):
            loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()

    return step
