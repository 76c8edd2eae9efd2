"""A script that profiles itself with torch.profiler (a schedule and tensorboard_trace_handler),
as a framework would; argv: log dir, exit code, and optionally the iterations of a pure-Python
function each step runs (0: none) and the training steps it takes before its profiler starts."""

import sys

import torch
from torch.profiler import ProfilerActivity, profile, record_function, schedule, tensorboard_trace_handler

log_dir, code = sys.argv[1], int(sys.argv[2])
busy = int(sys.argv[3]) if len(sys.argv) > 3 else 0
before = int(sys.argv[4]) if len(sys.argv) > 4 else 0


def busy_python(n: int) -> int:
    total = 0
    for i in range(n):
        total += i * i % 7
    return total


model = torch.nn.Linear(16, 16)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(before):  # a warm-up the script does not profile (torchscope run records it)
    model(torch.randn(8, 16)).sum().backward()
    opt.step()
    opt.zero_grad()
with profile(
    activities=[ProfilerActivity.CPU],
    schedule=schedule(wait=1, warmup=1, active=2, repeat=1),
    on_trace_ready=tensorboard_trace_handler(log_dir, worker_name="mine"),
) as prof:
    for _ in range(6):
        with record_function("my_step"):
            busy_python(busy)
            model(torch.randn(8, 16)).sum().backward()
            opt.step()
            opt.zero_grad()
        prof.step()
print(type(prof).__module__, "profiled", prof.key_averages().table(row_limit=3).count("\n") > 3)
sys.exit(code)
