"""A training loop whose first step keeps 160 MB alive (a model's weights and optimizer state do
this), then steps lightly: ``torchscope run``'s cap must end only that first cycle."""

import sys
import time

import torch

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 45
torch.manual_seed(0)
model = torch.nn.Linear(64, 64)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(8, 64)
kept = []
for i in range(steps):
    loss = model(x).square().mean()
    loss.backward()
    if i == 0:
        # the cap's watchdog looks every 50 ms and measures a cycle from the first look: give it
        # time to see the cycle before the allocation, and to see the allocation after it
        time.sleep(1.0)
        kept.append(torch.ones(40_000_000))  # 160 MB, kept for the whole run
        time.sleep(1.0)
    opt.step()
    opt.zero_grad()
    time.sleep(0.01)
print(f"stepped {steps} times, kept {sum(t.numel() for t in kept) * 4 // 2**20} MiB")
