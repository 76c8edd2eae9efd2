"""Steps an optimizer twice, then raises: torchscope run must still leave its trace and report."""

import torch


def python_work() -> int:
    """Pure Python for the sampler to see in this file, even on a busy CI core (~20 ms)."""
    return sum(i * i for i in range(200_000))


model = torch.nn.Linear(16, 4)
opt = torch.optim.Adam(model.parameters())
for step in range(3):
    python_work()
    loss = model(torch.randn(8, 16)).pow(2).mean()
    loss.backward()
    opt.step()
    if step == 1:
        print("about to fail", flush=True)
        raise ValueError("boom at step 1")
