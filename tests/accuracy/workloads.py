"""Seeded workloads (forward and backward) the tests run live, in dumps and in subprocesses."""

from __future__ import annotations

from typing import Any

import torch

from torchscope import models

SHAPES = {"resnet18": (1, 3, 32, 32), "transformer_block": (2, 16, 256)}


def build(name: str, dtype: torch.dtype) -> tuple[Any, torch.Tensor]:
    """The model (eval mode: batch norm on running statistics) and its input, both in ``dtype``.

    Weights and input are drawn in float64 from seed 0 and then cast, so every dtype and every
    process computes on the same numbers up to the cast.
    """
    torch.manual_seed(0)
    model = getattr(models, name)().double().eval()
    x = torch.randn(*SHAPES[name], dtype=torch.float64)
    return model.to(dtype), x.to(dtype)


def step(model: Any, x: torch.Tensor) -> None:
    model(x).float().sum().backward()
