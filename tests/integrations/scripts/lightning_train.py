"""A small Lightning training run, logging under argv[1], with the profiler argv[2] names:
Lightning's own ("pytorch", as a user runs it under ``torchscope run`` with no change) or
"torchscope" (our TorchscopeProfiler); argv[3] processes (2: DDP on CPU with gloo)."""

import sys

import torch
from lightning.pytorch import LightningModule, Trainer
from torch.utils.data import DataLoader, TensorDataset


class Model(LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 1))

    def training_step(self, batch, batch_idx):  # type: ignore[no-untyped-def]
        return torch.nn.functional.mse_loss(self.net(batch[0]), batch[1])

    def configure_optimizers(self):  # type: ignore[no-untyped-def]
        return torch.optim.SGD(self.parameters(), lr=0.01)


if __name__ == "__main__":
    log_dir, profiler_name, devices = sys.argv[1], sys.argv[2], int(sys.argv[3])
    profiler: object = profiler_name
    if profiler_name == "torchscope":
        from torchscope.integrations.lightning import TorchscopeProfiler

        profiler = TorchscopeProfiler(wait=1, warmup=1, active=3, repeat=1)
    g = torch.Generator().manual_seed(0)
    data = DataLoader(TensorDataset(torch.randn(256, 64, generator=g), torch.randn(256, 1, generator=g)), batch_size=8)
    trainer = Trainer(
        default_root_dir=log_dir,
        max_steps=8 if devices > 1 else 20,
        accelerator="cpu",
        devices=devices,
        strategy="ddp" if devices > 1 else "auto",
        profiler=profiler,  # type: ignore[arg-type]
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(Model(), data)
    print(f"rank {trainer.global_rank} fit done")
