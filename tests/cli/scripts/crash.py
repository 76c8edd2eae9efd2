"""Steps an optimizer twice, then raises: torchscope run must still leave its trace and report."""

import torch

model = torch.nn.Linear(16, 4)
opt = torch.optim.Adam(model.parameters())
for step in range(3):
    loss = model(torch.randn(8, 16)).pow(2).mean()
    loss.backward()
    opt.step()
    if step == 1:
        print("about to fail", flush=True)
        raise ValueError("boom at step 1")
