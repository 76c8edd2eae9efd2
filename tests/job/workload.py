"""The DDP workload both job scripts run: a small model on gloo, where rank ``SLOW_RANK`` alone
runs an extra matmul chain before each step (the straggler the job report must name)."""

from __future__ import annotations

from collections.abc import Callable

import torch

SLOW_RANK = 1


def train(rank: int, steps: int, after_step: Callable[[], None] = lambda: None) -> None:
    """``steps`` DDP steps in an initialised gloo process group; ``after_step`` after each."""
    torch.set_num_threads(1)
    torch.manual_seed(0)
    layers = torch.nn.Sequential(torch.nn.Linear(128, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    model = torch.nn.parallel.DistributedDataParallel(layers)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(64, 128)
    for _ in range(steps):
        if rank == SLOW_RANK:
            a = torch.randn(256, 256)
            # large enough that the straggler stands out when other tests load the machine
            # (with 30, a run under the full suite now and then ranked rank 0's waiting first)
            for _ in range(60):
                a = torch.matmul(a, a).tanh_()
        opt.zero_grad()
        model(x).sum().backward()
        opt.step()
        after_step()
