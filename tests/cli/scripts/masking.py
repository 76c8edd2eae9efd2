"""The seed tutorial's masking code: the time goes to np.argwhere, which the op profiler does not see."""

import numpy as np
import torch
from torch.autograd import profiler


class MyModule(torch.nn.Module):
    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(in_features, out_features)

    def forward(self, input, mask):
        with profiler.record_function("LABEL1: linear pass"):
            out = self.linear(input)
        with profiler.record_function("LABEL2: masking"):
            threshold = out.sum(axis=1).mean().item()
            hi_idx = np.argwhere(mask.cpu().numpy() > threshold)
            hi_idx = torch.from_numpy(hi_idx)
        return out, hi_idx


torch.manual_seed(0)
model = MyModule(512, 8)
inp = torch.rand(1024, 512)
mask = torch.rand((64, 256, 256))
for _ in range(3):
    out, idx = model(inp, mask)
print("masked", idx.shape)
