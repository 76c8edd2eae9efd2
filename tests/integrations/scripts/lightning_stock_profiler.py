"""Lightning with its own stock profiler (argv[2], e.g. "pytorch"), logging under argv[1]: what a
user runs under ``torchscope run`` with no change."""

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


g = torch.Generator().manual_seed(0)
data = DataLoader(TensorDataset(torch.randn(256, 64, generator=g), torch.randn(256, 1, generator=g)), batch_size=8)
trainer = Trainer(
    default_root_dir=sys.argv[1],
    max_steps=20,
    accelerator="cpu",
    devices=1,
    profiler=sys.argv[2],
    logger=False,
    enable_checkpointing=False,
    enable_progress_bar=False,
    enable_model_summary=False,
)
trainer.fit(Model(), data)
print("fit done")
