"""A tiny training loop of N optimizer steps (argv[1]); fast enough to run many steps in a test."""

import sys

import torch

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 45
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
data = torch.randn(16, 32)
for _ in range(steps):
    opt.zero_grad()
    model(data).pow(2).mean().backward()
    opt.step()
print(f"trained {steps} steps")
