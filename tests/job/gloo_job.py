"""A real 2-rank gloo DDP job on loopback where rank 1 alone does extra compute (a matmul chain)
before each step: the straggler the job tests must name. Usage: python gloo_job.py OUT PORT."""

from __future__ import annotations

import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from torchscope import ProfilerActivity, profile, schedule, tensorboard_trace_handler

WORLD = 2
SLOW_RANK = 1


def work(rank: int, out: str, port: int) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    x = torch.randn(32, 64)
    # the same worker name on every rank: the rank must come from the trace's distributedInfo
    handler = tensorboard_trace_handler(out, worker_name="worker")
    sched = schedule(wait=1, warmup=1, active=4, repeat=1)
    with profile(activities=[ProfilerActivity.CPU], schedule=sched, on_trace_ready=handler) as prof:
        for _ in range(7):
            if rank == SLOW_RANK:
                a = torch.randn(256, 256)
                for _ in range(40):
                    a = torch.matmul(a, a).tanh_()
            opt.zero_grad()
            ddp(x).sum().backward()
            opt.step()
            prof.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(work, args=(sys.argv[1], int(sys.argv[2])), nprocs=WORLD)
