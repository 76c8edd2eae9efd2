"""The C loop of live compare (``torchscope.accuracy._fused``) against the numpy definition.

``compare_on_cpu`` must give the numbers ``metrics.compare_arrays`` gives, for every target dtype
live compare meets, across block boundaries, with degenerate bounds, and hand NaN/Inf back to
the numpy path (None) instead of measuring them.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
_fused = pytest.importorskip(
    "torchscope.accuracy._fused",
    reason="the optional C extension torchscope.accuracy._fused did not build (no C compiler?)",
)

from test_metrics import FLOAT_FIELDS  # noqa: E402

from torchscope.accuracy.metrics import TensorMetrics, compare_arrays  # noqa: E402
from torchscope.accuracy.torch_metrics import compare_on_cpu  # noqa: E402


def _both(
    got: torch.Tensor, ref: torch.Tensor, rtol: float, atol: float
) -> tuple[TensorMetrics | None, TensorMetrics]:
    fast = compare_on_cpu(got, ref, rtol=rtol, atol=atol)
    numpy = compare_arrays(
        got.double().numpy(),
        ref.double().numpy(),
        dtype=str(got.dtype).removeprefix("torch."),
        ref_dtype=str(ref.dtype).removeprefix("torch."),
        rtol=rtol,
        atol=atol,
    )
    return fast, numpy


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32", "float64"])
@pytest.mark.parametrize("n", [1, 7, 512, 1537, 200_003])  # inside, at and across 512-element blocks
def test_c_loop_gives_the_numpy_numbers(dtype: str, n: int) -> None:
    rng = np.random.default_rng(n)
    ref = rng.standard_normal(n)
    ref[: min(n, 3)] = 1e-9  # cancellation: judged against the RMS
    if n > 100:
        ref[50:60] = 0.0  # exact zeros: relative error against the 1e-12 floor
    got = torch.from_numpy(ref * (1 + rng.normal(0, 2e-3, n))).to(getattr(torch, dtype))
    if n > 1000:
        got[n - 5] = 10.0  # one element far off, in the last block
    fast, numpy = _both(got, torch.from_numpy(ref), rtol=1.6e-2, atol=1e-5)
    assert fast is not None
    for field in FLOAT_FIELDS:  # float64 sums in another order: equal to rounding
        assert getattr(fast, field) == pytest.approx(getattr(numpy, field), rel=1e-9, abs=1e-12), field
    assert (fast.mismatched, fast.allclose, fast.shape, fast.dtype, fast.ref_dtype) == (
        numpy.mismatched,
        numpy.allclose,
        numpy.shape,
        numpy.dtype,
        numpy.ref_dtype,
    )
    if n > 1000:
        assert fast.mismatched >= 1 and not fast.allclose


def test_degenerate_bounds_and_non_contiguous_input() -> None:
    rng = np.random.default_rng(5)
    ref = torch.from_numpy(rng.standard_normal((64, 48)))
    got = (ref * (1 + torch.from_numpy(rng.normal(0, 1e-2, (64, 48))))).float().t()  # a transposed view
    ref = ref.t()
    for rtol, atol in ((0.0, 1e-2), (1e-2, 0.0), (0.0, 0.0)):
        fast, numpy = _both(got, ref, rtol, atol)
        assert fast is not None
        assert (fast.mismatched, fast.allclose) == (numpy.mismatched, numpy.allclose), (rtol, atol)
        assert fast.error_ratio == pytest.approx(numpy.error_ratio, rel=1e-9), (rtol, atol)
    # an all-zero reference and zero tolerances: any error is infinitely far past the bound
    zeros = torch.zeros(1000, dtype=torch.float64)
    off = zeros.float().clone()
    off[999] = 1e-3
    fast, numpy = _both(off, zeros, 0.0, 0.0)
    assert fast is not None and fast.error_ratio == numpy.error_ratio == 1e30
    assert fast.mismatched == numpy.mismatched == 1
    fast, numpy = _both(zeros.float(), zeros, 0.0, 0.0)
    assert fast is not None and (fast.error_ratio, fast.cosine, fast.allclose) == (0.0, 1.0, True)


def test_nan_and_inf_go_back_to_the_numpy_path() -> None:
    ref = torch.ones(3000, dtype=torch.float64)
    for value in (float("nan"), float("inf"), float("-inf")):
        got = ref.float().clone()
        got[2999] = value
        assert compare_on_cpu(got, ref, rtol=1e-3, atol=0.0) is None
        bad_ref = ref.clone()
        bad_ref[0] = value
        assert compare_on_cpu(ref.float(), bad_ref, rtol=1e-3, atol=0.0) is None


def test_buffer_checks_give_python_errors() -> None:
    x = np.zeros(4)
    with pytest.raises(ValueError, match="does not hold"):
        _fused.metrics(x, 0, x, 0, 5, 1e-3, 0.0)
    with pytest.raises(ValueError, match="unknown element kind"):
        _fused.metrics(x, 7, x, 0, 4, 1e-3, 0.0)
    with pytest.raises(ValueError, match="no elements"):
        _fused.metrics(x, 0, x, 0, 0, 1e-3, 0.0)
