"""Small example models written here (no torchvision): a ResNet-18, a transformer block, an MLP.

They give the demo, the tests and the benchmarks real PyTorch workloads with the op mix users
profile (convolutions, batch norm, attention, matmuls) without a multi-GB dependency.
"""

from __future__ import annotations

from typing import Any


def resnet18(num_classes: int = 1000) -> Any:
    from torchscope.models.resnet import ResNet18

    return ResNet18(num_classes=num_classes)


def transformer_block(dim: int = 256, heads: int = 4, ff_mult: int = 4) -> Any:
    from torchscope.models.transformer import TransformerBlock

    return TransformerBlock(dim=dim, heads=heads, ff_mult=ff_mult)


def mlp(sizes: tuple[int, ...] = (512, 1024, 1024, 10)) -> Any:
    from torchscope.models.perceptron import MLP

    return MLP(sizes)
