"""Trains torchscope's ResNet-18 for a few steps on random data: a script `torchscope run` profiles unchanged."""

import sys

import torch

from torchscope.models import resnet18

steps = int(sys.argv[sys.argv.index("--steps") + 1]) if "--steps" in sys.argv else 4
torch.manual_seed(0)
model = resnet18(num_classes=10)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(2, 3, 32, 32), torch.randint(0, 10, (2,))
for _ in range(steps):
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
print(f"trained {steps} steps, loss {loss.item():.3f}")
