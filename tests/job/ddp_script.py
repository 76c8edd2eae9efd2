"""A gloo DDP training script for ``torchrun -m torchscope run`` (see ``workload``)."""

import sys
from pathlib import Path

import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).parent))
from workload import train  # noqa: E402

dist.init_process_group("gloo")
train(dist.get_rank(), steps=12)
dist.destroy_process_group()
