"""Live compare of accumulating ops (sums, matmuls, convolutions): correct float32 kernels that
round past one ulp are not divergences, and a wrong one is still named."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
import torch
from faults import cpu_kernel

from torchscope.accuracy import AccuracyResult, compare
from torchscope.accuracy.accumulation import accumulation, unit_roundoff, widened
from torchscope.accuracy.tolerance import LIVE_DEFAULTS

F32_RTOL, F32_ATOL = LIVE_DEFAULTS["float32"]


@contextmanager
def one_thread() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _sum_off_by(rel: float) -> Callable[..., torch.Tensor]:
    def total(x: torch.Tensor, *, dtype: torch.dtype | None = None) -> torch.Tensor:
        flat = x.double().reshape(-1)
        s = torch.ones_like(flat) @ flat  # a dot product, not aten::sum (no recursion)
        return (s * (1 + rel) if x.dtype == torch.float32 else s).to(dtype or x.dtype)

    return total


def _mm_off_by(rel: float) -> Callable[..., torch.Tensor]:
    def product(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        y = (a.double().unsqueeze(-1) * b.double().unsqueeze(0)).sum(1)
        return (y * (1 + rel) if a.dtype == torch.float32 else y).to(a.dtype)

    return product


def _one_ulp_ratio(target: torch.Tensor, reference: torch.Tensor) -> float:
    """The per-element error ratio at the float32 live tolerance, computed here from the same
    kernel's output: ``max |t - r| / (atol + rtol * max(|r|, rms(r)))`` (see ``metrics``)."""
    t, r = target.double().reshape(-1), reference.double().reshape(-1)
    rms = float(r.square().mean().sqrt())
    bound = F32_ATOL + F32_RTOL * torch.clamp(r.abs(), min=rms)
    return float(((t - r).abs() / bound).max())


def _documented_sum(strict: bool) -> tuple[torch.Tensor, AccuracyResult]:
    torch.manual_seed(38)
    conv = torch.nn.Conv2d(32, 32, 3, padding=1).to(torch.bfloat16)
    x = torch.randn(2, 32, 24, 24, dtype=torch.bfloat16).to(memory_format=torch.channels_last)
    overrides = {"aten::sum": (F32_RTOL, F32_ATOL)} if strict else None
    with compare(conv, overrides=overrides) as r:
        out = conv(x).float()
        out.sum().backward()
    return out.detach(), r


def test_the_documented_float32_sum_that_rounded_past_one_ulp_now_compares_cleanly() -> None:
    """docs/accuracy.md's case: seed 38 at one thread, a float32 sum of 36,864 values was 1.09x
    over the per-element tolerance on the CPU it was found on. It is a correct sum: within a
    36,864-term accumulation's rounding, reported with the widened tolerance it was judged by.

    Whether one ulp is exceeded depends on the CPU's summation kernel (AVX-512, AVX2 and the
    scalar kernel add in different orders), so the expectation is computed here from the same
    kernel's float32 sum; what holds on every CPU is asserted as such."""
    with one_thread():
        out, strict = _documented_sum(strict=True)
        one_ulp = _one_ulp_ratio(out.sum(), out.double().sum())
        _, r = _documented_sum(strict=False)
    # the user's own tolerance is used as given (never widened), and it judges this CPU's sum
    user = next(o for o in strict if o.op == "aten::sum")
    assert user.worst is not None and user.worst.rtol == F32_RTOL
    assert user.worst.error_ratio == pytest.approx(one_ulp, rel=1e-6)
    assert (strict.first_divergence is not None) == (one_ulp > 1)
    # with the default tolerance it is never a divergence; the widened tolerance is recorded
    # when (and only when) the sum is past one ulp on this CPU
    assert r.first_divergence is None
    s = next(o for o in r if o.op == "aten::sum")
    assert s.status == "ok" and s.worst is not None
    grow = 2 * unit_roundoff(torch.float32) * 36864**0.5
    assert s.worst.rtol == pytest.approx(F32_RTOL + grow if one_ulp > 1 else F32_RTOL)
    assert s.worst.error_ratio < 1


def test_a_correct_long_float32_matmul_is_not_a_divergence() -> None:
    """A float32 ``mm`` over 65,536 terms: at one ulp per element it is judged by this CPU's
    BLAS (computed here from the same kernel), and with the default tolerance it is never a
    divergence on any CPU (the widened bound of ``accuracy.accumulation``)."""
    torch.manual_seed(0)
    a, b = torch.randn(8, 65536), torch.randn(65536, 8)
    one_ulp = _one_ulp_ratio(a @ b, a.double() @ b.double())
    with compare() as strict:
        a @ b
    with compare(overrides={"aten::mm": (F32_RTOL, F32_ATOL)}) as user:
        a @ b
    assert user.ops[0].worst is not None and user.ops[0].worst.rtol == F32_RTOL
    assert user.ops[0].worst.error_ratio == pytest.approx(one_ulp, rel=1e-6)
    mm = strict.ops[0]
    assert mm.op == "aten::mm" and mm.status == "ok" and mm.worst is not None
    assert strict.first_divergence is None and mm.worst.error_ratio < 1
    assert (mm.worst.rtol > F32_RTOL) == (one_ulp > 1)


def test_a_wrong_float32_sum_is_still_the_first_divergence() -> None:
    """The widening is a few float32 roundings per term, far below a kernel bug: a sum of 36,864
    values that is 1e-4 too large is caught (the values do not cancel, so 1e-4 of the result
    is 1e-4 of the partial sums)."""
    torch.manual_seed(0)
    x = torch.randn(2, 32, 24, 24) + 1
    with cpu_kernel("sum", _sum_off_by(1e-4)), compare() as r:
        (x * 2).sum()
    assert r.first_divergence is not None and r.first_divergence.op == "aten::sum"
    assert r.first_divergence.worst.rtol > F32_RTOL  # judged with the widened tolerance  # type: ignore[union-attr]
    with cpu_kernel("sum", _sum_off_by(0.0)), compare() as right:
        (x * 2).sum()
    assert right.first_divergence is None


def test_a_wrong_long_float32_matmul_is_still_caught() -> None:
    torch.manual_seed(0)
    a, b = torch.randn(8, 4096), torch.randn(4096, 8)
    with cpu_kernel("mm", _mm_off_by(1e-3)), compare() as r:
        a @ b
    assert [o.op for o in r.diverged] == ["aten::mm"]
    assert r.ops[0].worst.error_ratio > 3  # type: ignore[union-attr]


def test_terms_per_output_of_each_accumulating_op() -> None:
    x, w = torch.randn(2, 8, 5, 5), torch.randn(16, 4, 3, 3)  # groups=2: 4 input channels each
    k, m = accumulation("aten::convolution", (x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 2), 0, 0)  # type: ignore[misc]
    assert k == 4 * 3 * 3 and m == pytest.approx(
        float(x.double().square().mean().sqrt() * w.double().square().mean().sqrt())
    )
    wt = torch.randn(8, 3, 3, 3)  # transposed: (in, out / groups, kh, kw)
    assert (
        accumulation("aten::convolution", (x, wt, None, [1, 1], [1, 1], [1, 1], True, [0, 0], 1), 0, 0)[0]
        == 8 * 9
    )  # type: ignore[index]
    assert accumulation("aten::conv2d", (x, torch.randn(6, 8, 3, 3)), 0, 0)[0] == 72  # type: ignore[index]
    assert (
        accumulation("aten::addmm", (torch.randn(3), torch.randn(4, 10), torch.randn(10, 3)), 0, 12)[0] == 10
    )  # type: ignore[index]
    assert accumulation("aten::linear", (torch.randn(4, 7), torch.randn(3, 7)), 0, 12)[0] == 7  # type: ignore[index]
    go, inp, wb = torch.randn(2, 6, 5, 5), torch.randn(2, 8, 5, 5), torch.randn(6, 8, 3, 3)
    back = (go, inp, wb, [6], [1, 1], [1, 1], [1, 1], False, [0, 0], 1, [True, True, True])
    assert accumulation("aten::convolution_backward", back, 0, 0)[0] == 8 * 9  # type: ignore[index]
    assert accumulation("aten::convolution_backward", back, 1, 0)[0] == 2 * 5 * 5  # type: ignore[index]
    assert accumulation("aten::convolution_backward", back, 2, 0)[0] == 2 * 5 * 5  # type: ignore[index]
    s = torch.randn(4, 100)
    k, m = accumulation("aten::mean", (s, [1]), 0, 4)  # type: ignore[misc]
    assert k == 100 and m == pytest.approx(float(s.double().square().mean().sqrt()) / 100)
    assert accumulation("aten::sum", (s,), 0, 1)[0] == 400  # type: ignore[index]
    assert accumulation("aten::gelu", (s,), 0, 400) is None
    # integer outputs and one-term "sums" are never widened
    assert widened("aten::sum", (torch.arange(10),), 0, torch.tensor(45), F32_RTOL, F32_ATOL) is None
    assert widened("aten::sum", (s,), 0, torch.zeros(4, 100), F32_RTOL, F32_ATOL) is None
