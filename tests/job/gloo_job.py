"""A real 2-rank gloo DDP job on loopback, profiled by our own ``profile`` +
``tensorboard_trace_handler`` (see ``workload``: rank 1 is the straggler).
Usage: python gloo_job.py OUT PORT."""

from __future__ import annotations

import sys
from pathlib import Path

import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, str(Path(__file__).parent))
from workload import train  # noqa: E402

from torchscope import ProfilerActivity, profile, schedule, tensorboard_trace_handler  # noqa: E402

WORLD = 2


def work(rank: int, out: str, port: int) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD)
    # the same worker name on every rank: the rank must come from the trace's distributedInfo
    handler = tensorboard_trace_handler(out, worker_name="worker")
    sched = schedule(wait=1, warmup=1, active=4, repeat=1)
    with profile(activities=[ProfilerActivity.CPU], schedule=sched, on_trace_ready=handler) as prof:
        train(rank, steps=7, after_step=prof.step)
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(work, args=(sys.argv[1], int(sys.argv[2])), nprocs=WORLD)
