"""A script that uses the legacy torch.autograd.profiler.profile and torchscope.profile itself."""

import sys

import torch

import torchscope

x = torch.randn(64, 64)
with torch.autograd.profiler.profile(record_shapes=True) as prof:
    y = x @ x
with torch.autograd.profiler.profile(enabled=False) as off:
    y = y @ x
print("legacy events", sum(e.name == "aten::mm" for e in prof.function_events), off.enabled)
with torchscope.profile() as ours:
    (x @ x).relu()
print("torchscope ops", sorted({r.key for r in ours.key_averages()} & {"aten::mm", "aten::relu"}))
sys.exit(int(sys.argv[1]))
