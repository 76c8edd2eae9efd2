"""Lightning DDP on CPU (gloo, 2 processes) with TorchscopeProfiler, logging under argv[1]."""

import sys

import torch
from lightning.pytorch import LightningModule, Trainer
from torch.utils.data import DataLoader, TensorDataset

from torchscope.integrations.lightning import TorchscopeProfiler


class Model(LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 1))

    def training_step(self, batch, batch_idx):  # type: ignore[no-untyped-def]
        return torch.nn.functional.mse_loss(self.net(batch[0]), batch[1])

    def configure_optimizers(self):  # type: ignore[no-untyped-def]
        return torch.optim.SGD(self.parameters(), lr=0.01)


if __name__ == "__main__":
    g = torch.Generator().manual_seed(0)
    data = DataLoader(TensorDataset(torch.randn(256, 64, generator=g), torch.randn(256, 1, generator=g)), batch_size=8)
    trainer = Trainer(
        default_root_dir=sys.argv[1],
        max_steps=8,
        accelerator="cpu",
        devices=2,
        strategy="ddp",
        profiler=TorchscopeProfiler(wait=1, warmup=1, active=3, repeat=1),
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(Model(), data)
    print(f"rank {trainer.global_rank} fit done")
