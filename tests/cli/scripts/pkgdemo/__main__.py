"""Run as ``python -m pkgdemo``: a tiny matmul workload."""

import sys

import torch

a = torch.randn(64, 64)
for _ in range(5):
    a = torch.tanh(a @ a)
print("module ran with", sys.argv[1:], "name", __name__)
