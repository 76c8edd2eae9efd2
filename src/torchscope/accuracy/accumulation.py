"""How far a *correct* accumulating op may round: the live tolerance of sums, matmuls and convs.

Live tolerances are one or two units in the last place of each output element (torch.testing's
values). That is right for element-wise ops but not for an op whose every output sums ``K``
products: a correct float32 kernel rounds at each of its additions, so its error grows with
``K`` and with the size of the partial sums, not with the final value. Measured against a
float64 reference on CPU, a correct float32 ``mm`` of two standard-normal 8x65536 and 65536x8
matrices is 8.4x over the per-element tolerance, and a float32 sum of 36,864 values over it
about once in sixty random inputs: false first divergences.

So when an output of such an op fails the per-element check, it is checked once more with the
tolerance widened by the rounding a correct ``K``-term accumulation makes (the probabilistic
analysis of Higham and Mary, 2019: the error grows as ``sqrt(K)`` units of the accumulator's
precision, times the size of the partial sums):

    |target - reference| <= atol + rtol*|reference| + 2*u*sqrt(K) * (|reference| + sqrt(K)*m)

``u`` is the accumulator's unit roundoff: float32's for float32 and lower-precision targets,
which every CPU and GPU kernel here accumulates in float32, and float64's for float64. ``m`` is
the root mean square of one product term (rms(a) * rms(b) for ``a @ b``; rms(x) for a sum;
divided by ``K`` for a mean), so ``sqrt(K)*m`` is the size of a partial sum of centred data and
``|reference|`` that of data that does not cancel. With the factor 2 the widened check passed
every correct case we measured (docs/accuracy.md) while a sum of 36,864 float32 values that do
not cancel, 1e-4 too large, is still caught. (The per-element bound uses ``max(|r|, rms(r))``
for ``|reference|``; see ``metrics``.) The widened tolerance is recorded in the metrics (``rtol``/``atol``),
and a user's own override for the op is used as given, never widened.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

# (K, m): the terms summed per output element, and the root mean square of one term
Accumulation = tuple[int, float]
_Rule = Callable[[Sequence[Any], int], Accumulation | None]


@dataclass(frozen=True)
class Widened:
    """The tolerance for one output of an accumulating op."""

    rtol: float
    atol: float


def _rms(x: Any) -> float | None:
    """Root mean square, in float64 where the device has it (MPS has not: float32 suffices for a scale)."""
    if not isinstance(x, torch.Tensor) or not x.is_floating_point() or x.numel() == 0:
        return None
    acc = torch.float64 if x.device.type in ("cpu", "cuda") else torch.float32
    return float(torch.linalg.vector_norm(x.detach(), dtype=acc)) / math.sqrt(x.numel())


def _product(args: Sequence[Any], a: int, b: int, k: int | None = None) -> Accumulation | None:
    """``args[a] @ args[b]``-like: ``K`` is ``args[a]``'s last dimension unless given."""
    if len(args) <= max(a, b):
        return None
    ra, rb = _rms(args[a]), _rms(args[b])
    if ra is None or rb is None or args[a].dim() == 0:
        return None
    return (k if k is not None else int(args[a].shape[-1])), ra * rb


def _reduction(args: Sequence[Any], out_numel: int, mean: bool = False) -> Accumulation | None:
    x = args[0] if args else None
    r = _rms(x)
    if r is None:
        return None
    k = max(x.numel() // max(out_numel, 1), 1)  # type: ignore[union-attr]
    return k, (r / k if mean else r)


def _kernel_terms(weight: torch.Tensor, groups: int, transposed: bool) -> int:
    """Input terms per output element of a convolution (an upper bound when transposed)."""
    per_channel = weight[0, 0].numel() if weight.dim() > 2 else 1
    if transposed:  # weight is (in, out / groups, *kernel)
        return max(int(weight.shape[0]) // max(groups, 1), 1) * per_channel
    return int(weight[0].numel())  # weight is (out, in / groups, *kernel)


def _int(args: Sequence[Any], i: int, default: int) -> int:
    return (
        int(args[i])
        if len(args) > i and isinstance(args[i], int) and not isinstance(args[i], bool)
        else default
    )


def _bool(args: Sequence[Any], i: int, default: bool) -> bool:
    return bool(args[i]) if len(args) > i and isinstance(args[i], bool) else default


def _conv(transposed_at: int | None, groups_at: int | None, transposed: bool = False) -> _Rule:
    """A forward convolution ``(input, weight, ...)``; where its flags sit differs by op."""

    def rule(args: Sequence[Any], out_index: int) -> Accumulation | None:
        if len(args) < 2 or not isinstance(args[1], torch.Tensor) or args[1].dim() < 2:
            return None
        t = _bool(args, transposed_at, transposed) if transposed_at is not None else transposed
        g = _int(args, groups_at, 1) if groups_at is not None else 1
        k = _kernel_terms(args[1], g, t)
        return _product(args, 0, 1, k)

    return rule


def _conv_backward(args: Sequence[Any], out_index: int) -> Accumulation | None:
    """``convolution_backward(grad_output, input, weight, ...)`` -> grad input, weight, bias."""
    if len(args) < 3 or not all(isinstance(a, torch.Tensor) for a in args[:3]) or args[0].dim() < 2:
        return None
    grad_out, weight = args[0], args[2]
    per_out_channel = grad_out.numel() // max(int(grad_out.shape[1]), 1)  # batch x output positions
    if out_index == 0:  # grad_input sums over output channels x kernel (bound: either channel count)
        k = max(int(weight.shape[0]), int(weight.shape[1])) * (
            weight[0, 0].numel() if weight.dim() > 2 else 1
        )
        return _product(args, 0, 2, k)
    if out_index == 1:
        return _product(args, 0, 1, per_out_channel)
    r = _rms(grad_out)
    return None if r is None else (per_out_channel, r)


def _mm(a: int, b: int) -> _Rule:
    return lambda args, out_index: _product(args, a, b)


def _addbmm(args: Sequence[Any], out_index: int) -> Accumulation | None:
    if len(args) < 3 or not isinstance(args[1], torch.Tensor) or args[1].dim() != 3:
        return None
    return _product(args, 1, 2, int(args[1].shape[0] * args[1].shape[2]))


# ATen op -> how it accumulates. Reductions are looked up with the output's size (below).
_PRODUCTS: dict[str, _Rule] = {
    "aten::mm": _mm(0, 1),
    "aten::bmm": _mm(0, 1),
    "aten::matmul": _mm(0, 1),
    "aten::mv": _mm(0, 1),
    "aten::dot": _mm(0, 1),
    "aten::vdot": _mm(0, 1),
    "aten::inner": _mm(0, 1),
    "aten::linear": _mm(0, 1),
    "aten::addmm": _mm(1, 2),
    "aten::_addmm_activation": _mm(1, 2),
    "aten::baddbmm": _mm(1, 2),
    "aten::addmv": _mm(1, 2),
    "aten::addbmm": _addbmm,
    "aten::convolution": _conv(6, 8),
    "aten::_convolution": _conv(6, 8),
    "aten::convolution_overrideable": _conv(6, 8),
    "aten::conv1d": _conv(None, 6),
    "aten::conv2d": _conv(None, 6),
    "aten::conv3d": _conv(None, 6),
    "aten::conv_transpose1d": _conv(None, 6, transposed=True),
    "aten::conv_transpose2d": _conv(None, 6, transposed=True),
    "aten::conv_transpose3d": _conv(None, 6, transposed=True),
    "aten::mkldnn_convolution": _conv(None, 6),
    "aten::cudnn_convolution": _conv(None, 5),
    "aten::_slow_conv2d_forward": _conv(None, None),
    "aten::thnn_conv2d": _conv(None, None),
    "aten::slow_conv3d": _conv(None, None),
    "aten::slow_conv_dilated2d": _conv(None, None),
    "aten::convolution_backward": _conv_backward,
}
_SUMS = {"aten::sum": False, "aten::nansum": False, "aten::mean": True, "aten::nanmean": True}


def accumulation(op: str, args: Sequence[Any], out_index: int, out_numel: int) -> Accumulation | None:
    """``(K, m)`` for output ``out_index`` of ``op`` called on ``args``, or None if it sums nothing."""
    if op in _SUMS:
        return _reduction(args, out_numel, mean=_SUMS[op])
    rule = _PRODUCTS.get(op)
    return None if rule is None else rule(args, out_index)


def unit_roundoff(target_dtype: torch.dtype) -> float:
    """The accumulator's unit roundoff: float64's for float64, float32's for every lower precision."""
    acc = torch.float64 if target_dtype == torch.float64 else torch.float32
    return torch.finfo(acc).eps / 2


def widened(
    op: str, args: Sequence[Any], out_index: int, out: torch.Tensor, rtol: float, atol: float
) -> Widened | None:
    """The tolerance that a correct accumulation of ``op``'s output ``out_index`` stays within.

    ``args`` are the reference's copies of the op's arguments (their values equal the target's);
    None when the op does not accumulate or its terms cannot be sized.
    """
    if not out.is_floating_point() or out.is_complex():
        return None
    found = accumulation(op, args, out_index, out.numel())
    if found is None or found[0] < 2:
        return None
    k, m = found
    grow = 2 * unit_roundoff(out.dtype) * math.sqrt(k)
    return Widened(rtol=rtol + grow, atol=atol + grow * math.sqrt(k) * m)
