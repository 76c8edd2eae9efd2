"""A gloo DDP training script for ``torchrun -m torchscope run``: rank 1 alone runs an extra
matmul chain each step (the straggler the job report must name)."""

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.set_num_threads(1)
layers = torch.nn.Sequential(torch.nn.Linear(128, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
model = torch.nn.parallel.DistributedDataParallel(layers)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(64, 128)
for _ in range(12):
    if rank == 1:
        a = torch.randn(256, 256)
        for _ in range(30):
            a = torch.matmul(a, a).tanh_()
    opt.zero_grad()
    model(x).sum().backward()
    opt.step()
dist.destroy_process_group()
