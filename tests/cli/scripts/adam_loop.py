"""An Adam training loop written at module level, one call per line (no function of its own):
the hot spots must tell opt.step() and backward() apart, not give <module> all the time."""

import sys

import torch

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 60
model = torch.nn.Linear(256, 256)
opt = torch.optim.Adam(model.parameters())
for _ in range(steps):
    x = torch.randn(64, 256)
    opt.zero_grad()
    loss = model(x).sum()
    loss.backward()
    opt.step()
print(f"trained {steps} steps")
