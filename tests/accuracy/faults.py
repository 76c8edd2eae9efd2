"""Known faults for the tests: ATen CPU kernels overridden through ``torch.library`` so that they
are wrong in low precision (bfloat16/float16) and right in float64, like a device kernel with a
bug. Each override recomputes the op from other ATen ops (never calling itself), then scales the
result by ``FACTOR`` when the input is low precision.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

FACTOR = 1.5
LOW = (torch.bfloat16, torch.float16)


def _gelu(x: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    y = x.double() * 0.5 * (1.0 + torch.erf(x.double() / math.sqrt(2.0)))
    return (y * FACTOR if x.dtype in LOW else y).to(x.dtype)


def _gelu_backward(grad: torch.Tensor, x: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    xd = x.double()
    cdf = 0.5 * (1.0 + torch.erf(xd / math.sqrt(2.0)))
    pdf = torch.exp(-0.5 * xd * xd) / math.sqrt(2.0 * math.pi)
    g = grad.double() * (cdf + xd * pdf)
    return (g * FACTOR if x.dtype in LOW else g).to(x.dtype)


def _addmm(
    bias: torch.Tensor, a: torch.Tensor, b: torch.Tensor, *, beta: Any = 1, alpha: Any = 1
) -> torch.Tensor:
    y = beta * bias.double() + alpha * (a.double() @ b.double())
    return (y * FACTOR if a.dtype in LOW else y).to(a.dtype)


def _gelu_mutating(x: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    y = x.double() * 0.5 * (1.0 + torch.erf(x.double() / math.sqrt(2.0)))
    if x.dtype in LOW:
        x.mul_(2.0)  # the bug: scribbles over its input
    return y.to(x.dtype)


FAULTS: dict[str, tuple[str, Callable[..., torch.Tensor]]] = {
    "gelu": ("gelu", _gelu),
    "gelu_backward": ("gelu_backward", _gelu_backward),
    "addmm": ("addmm", _addmm),
    "gelu_mutating": ("gelu", _gelu_mutating),
}


@contextmanager
def fault(name: str) -> Iterator[None]:
    """Override one ATen CPU kernel with its faulty version for the duration of the block."""
    op, fn = FAULTS[name]
    with cpu_kernel(op, fn):
        yield


@contextmanager
def cpu_kernel(op: str, fn: Callable[..., torch.Tensor]) -> Iterator[None]:
    """``fn`` as the ATen CPU kernel of ``op`` for the duration of the block."""
    lib = torch.library.Library("aten", "IMPL")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lib.impl(op, fn, "CPU")
    try:
        yield
    finally:
        lib._destroy()
