"""A training loop whose steps spend most of their time in a pure-Python function."""

import sys

import torch


def busy_python(n: int) -> int:
    total = 0
    for i in range(n):
        total += i * i % 7
    return total


torch.manual_seed(0)
model = torch.nn.Linear(64, 8)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for _ in range(8):
    busy_python(int(sys.argv[1]) if len(sys.argv) > 1 else 200_000)
    model(torch.randn(16, 64)).sum().backward()
    opt.step()
    opt.zero_grad()
