"""Two-rank DDP training on the CPU (gloo) where rank 1 gets sixteen times the data: a straggler
no busy machine can hide (its computation is ~16x rank 0's).

Run by ``torchrun --standalone --nproc_per_node 2 -m torchscope run ddp_train.py``.
"""

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(rank)
model = DistributedDataParallel(
    torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(6):
    x = torch.randn(64 * (1 + 15 * rank), 256)
    opt.zero_grad()
    model(x).sum().backward()
    opt.step()
print(f"rank {rank} trained")
dist.destroy_process_group()
