"""A small CNN trained with AdamW from a DataLoader (argv[1] steps, default 50): long enough for
the default schedule's three cycles (steps 0-4, 20-22, 38-40) with unrecorded steps between."""

import sys

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 50
torch.manual_seed(0)
data = TensorDataset(torch.randn(steps * 16, 3, 32, 32), torch.randint(0, 10, (steps * 16,)))
loader = DataLoader(data, batch_size=16, shuffle=True)
model = nn.Sequential(
    nn.Conv2d(3, 16, 3, padding=1),
    nn.ReLU(),
    nn.MaxPool2d(2),
    nn.Conv2d(16, 32, 3, padding=1),
    nn.ReLU(),
    nn.AdaptiveAvgPool2d(1),
    nn.Flatten(),
    nn.Linear(32, 10),
)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
for x, y in loader:
    opt.zero_grad()
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
print(f"trained {steps} steps")
