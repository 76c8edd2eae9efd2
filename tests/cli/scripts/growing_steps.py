"""A training loop that keeps 24 MB more at each step (a list of activations never freed), each
step long enough (80 ms) for ``torchscope run``'s cap to stop a cycle inside one."""

import sys
import time

import torch

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 12
model = torch.nn.Linear(64, 64)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(8, 64)
kept = []
for _ in range(steps):
    model(x).square().mean().backward()
    kept.append(torch.ones(6_000_000))  # 24 MB, never freed
    time.sleep(0.08)
    opt.step()
    opt.zero_grad()
print(f"stepped {steps} times")
