"""A loop of tiny tensor ops and no optimizer for argv[1] seconds: the profiler's worst case."""

import sys
import time

import torch

end = time.monotonic() + float(sys.argv[1])
x = torch.randn(8, 8)
n = 0
while time.monotonic() < end:
    x = (x * 1.0001).add_(1e-4).relu_()
    n += 1
print(f"ran {n} iterations")
