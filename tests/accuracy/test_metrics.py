"""The per-tensor metrics, checked against values worked out by hand and against torch."""

from __future__ import annotations

import math

import numpy as np
import pytest

from torchscope.accuracy.metrics import compare_arrays
from torchscope.accuracy.stats import tensor_stats
from torchscope.accuracy.tolerance import Tolerances, is_random

# the metrics of a floating output that every way of computing them must agree on
FLOAT_FIELDS = (
    "max_abs_error",
    "max_rel_error",
    "mean_abs_error",
    "rmse",
    "cosine",
    "rel_l2_error",
    "within_1e_3",
    "within_5e_3",
    "error_ratio",
)


def test_known_errors() -> None:
    ref = np.array([1.0, 2.0, 4.0, -8.0])
    got = np.array([1.0, 2.002, 4.0, -8.1])
    m = compare_arrays(got, ref, dtype="float32", ref_dtype="float64", rtol=1e-3, atol=0.0)
    assert m.max_abs_error == pytest.approx(0.1)
    assert m.max_rel_error == pytest.approx(0.1 / 8)
    assert m.mean_abs_error == pytest.approx(0.102 / 4)
    assert m.rmse == pytest.approx(math.sqrt((0.002**2 + 0.1**2) / 4))
    assert m.within_1e_3 == 0.75  # 1.0, 2.002 (rel 1e-3), 4.0
    assert m.within_5e_3 == 0.75
    assert m.cosine == pytest.approx(float(got @ ref / np.linalg.norm(got) / np.linalg.norm(ref)))
    # the element bound uses max(|r|, rms(r)): rms = sqrt(85/4) = 4.61; only -8.1 is outside
    assert m.mismatched == 1
    assert not m.allclose
    assert m.rel_l2_error == pytest.approx(math.sqrt(0.002**2 + 0.1**2) / math.sqrt(85))


def test_mismatch_count_matches_torch_isclose() -> None:
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    ref = np.sign(rng.standard_normal(1000)) * 3.0  # |r| constant: the RMS floor is |r| itself
    got = ref * (1 + rng.normal(0, 2e-3, 1000))
    m = compare_arrays(got, ref, dtype="float16", ref_dtype="float64", rtol=2e-3, atol=1e-5)
    expected = int((~torch.isclose(torch.from_numpy(got), torch.from_numpy(ref), rtol=2e-3, atol=1e-5)).sum())
    assert m.mismatched == expected > 0
    cos = torch.nn.functional.cosine_similarity(torch.from_numpy(got), torch.from_numpy(ref), dim=0)
    assert m.cosine == pytest.approx(float(cos), abs=1e-12)


def test_nan_inf_shape_dtype_and_integers() -> None:
    ref = np.array([1.0, np.nan, np.inf])
    m = compare_arrays(
        np.array([1.0, np.nan, np.inf]), ref, dtype="float32", ref_dtype="float64", rtol=1e-3, atol=0
    )
    assert m.allclose and m.nan == m.ref_nan == 1 and m.inf == m.ref_inf == 1
    m = compare_arrays(
        np.array([np.nan, 1.0, np.inf]), ref, dtype="float32", ref_dtype="float64", rtol=1e-3, atol=0
    )
    assert not m.allclose and m.mismatched == 2
    m = compare_arrays(
        np.zeros((2, 3)), np.zeros((3, 2)), dtype="float32", ref_dtype="float64", rtol=1e-3, atol=0
    )
    assert not m.allclose and m.problem == "shape mismatch (2, 3) vs (3, 2)"
    m = compare_arrays(
        np.array([1, 2, 3]), np.array([1, 2, 4]), dtype="int64", ref_dtype="int64", rtol=1, atol=1
    )
    assert not m.allclose and m.mismatched == 1 and m.problem == "1 of 3 elements differ"
    m = compare_arrays(
        np.array([1, 2]), np.array([1.0, 2.0]), dtype="int64", ref_dtype="float64", rtol=1, atol=1
    )
    assert m.problem == "dtype mismatch int64 vs float64"


def test_a_long_reduction_passes_on_its_l2_error() -> None:
    ref = np.ones(10_000)
    got = ref.copy()
    got[0] = 1.05  # one element 5% off, the tensor as a whole 0.05% off
    m = compare_arrays(got, ref, dtype="float16", ref_dtype="float64", rtol=1e-3, atol=1e-5)
    assert m.mismatched == 1 and m.allclose


def test_stats_sketch_estimates_relative_l2_error() -> None:
    rng = np.random.default_rng(1)
    b = rng.standard_normal(50_000)
    a = b + rng.standard_normal(50_000) * 0.01 * np.linalg.norm(b) / math.sqrt(50_000)
    sa, sb = tensor_stats(a, "float32"), tensor_stats(b, "float64")
    est = np.linalg.norm(np.subtract(sa["sketch"], sb["sketch"])) / np.linalg.norm(sb["sketch"])
    assert est == pytest.approx(0.01, rel=0.5)
    assert sb["l2"] == pytest.approx(np.linalg.norm(b))
    assert tensor_stats(np.arange(5), "int64")["checksum"] == tensor_stats(np.arange(5), "int64")["checksum"]


def test_tolerance_overrides_and_selection() -> None:
    tol = Tolerances(overrides={"aten::*softmax*": (0.1, 0.01)}, include=("aten::*",), exclude=("ff.*",))
    assert tol.live("aten::_softmax", "bfloat16") == (0.1, 0.01)
    assert tol.live("aten::gelu", "bfloat16") == (1.6e-2, 1e-5)
    assert tol.selected("aten::gelu", module="norm1")
    assert not tol.selected("aten::gelu", module="ff.1")
    assert is_random("aten::native_dropout") and is_random("aten::uniform_") and not is_random("aten::add")


def test_torch_path_gives_the_numpy_numbers() -> None:
    torch = pytest.importorskip("torch")
    from torchscope.accuracy.live import compare_tensors

    rng = np.random.default_rng(2)
    ref = rng.standard_normal((64, 33))
    ref[0, :4] = 1e-9  # cancellation: judged against the RMS
    got = torch.from_numpy(ref * (1 + rng.normal(0, 4e-3, ref.shape))).to(torch.bfloat16)
    a = compare_tensors(got, torch.from_numpy(ref), rtol=1.6e-2, atol=1e-5)
    b = compare_arrays(
        got.double().numpy(), ref, dtype="bfloat16", ref_dtype="float64", rtol=1.6e-2, atol=1e-5
    )
    for field in FLOAT_FIELDS:
        # bfloat16 targets are measured in float32: agreement to float32's resolution
        assert getattr(a, field) == pytest.approx(getattr(b, field), rel=1e-5, abs=1e-6), field
    assert (a.mismatched, a.allclose, a.shape, a.dtype) == (b.mismatched, b.allclose, b.shape, b.dtype)
    for rtol, atol in ((0.0, 1e-2), (1e-2, 0.0)):  # the degenerate bounds
        a = compare_tensors(got, torch.from_numpy(ref), rtol=rtol, atol=atol)
        b = compare_arrays(
            got.double().numpy(), ref, dtype="bfloat16", ref_dtype="float64", rtol=rtol, atol=atol
        )
        assert a is not None and (a.mismatched, a.allclose) == (b.mismatched, b.allclose)
        assert a.error_ratio == pytest.approx(b.error_ratio, rel=1e-5)


def test_chunked_torch_path_over_many_chunks() -> None:
    """Outputs larger than one cache-sized chunk: partial results combine to the numpy numbers."""
    torch = pytest.importorskip("torch")
    from torchscope.accuracy.torch_metrics import compare_tensors

    rng = np.random.default_rng(3)
    ref = rng.standard_normal(200_003)  # three float32 chunks of 65536 and a remainder
    ref[70_000:70_010] = 0.0  # exact zeros: relative error against the 1e-12 floor
    for dtype, work_rel, (rtol, atol) in (
        (torch.bfloat16, 1e-5, (1.6e-2, 1e-5)),
        (torch.float32, 1e-9, (1.3e-6, 1e-5)),
    ):
        got = torch.from_numpy(ref * (1 + rng.normal(0, 1e-3, ref.shape))).to(dtype)
        got[150_000] = 10.0  # one element far off, in the third chunk
        a = compare_tensors(got, torch.from_numpy(ref), rtol=rtol, atol=atol)
        b = compare_arrays(
            got.double().numpy(), ref, dtype=str(dtype)[6:], ref_dtype="float64", rtol=rtol, atol=atol
        )
        assert a is not None
        for field in ("max_abs_error", "mean_abs_error", "rmse", "cosine", "rel_l2_error", "error_ratio"):
            assert getattr(a, field) == pytest.approx(getattr(b, field), rel=work_rel), field
        assert a.max_rel_error == pytest.approx(b.max_rel_error, rel=work_rel)
        # float32 work rounds the reference by up to 6e-8 relative: the few elements whose relative
        # error lies that close to 1e-3 or 5e-3 may count on either side (exact in float64 work)
        share = 5e-5 if dtype == torch.bfloat16 else 0.0
        assert a.within_1e_3 == pytest.approx(b.within_1e_3, abs=share)
        assert a.within_5e_3 == pytest.approx(b.within_5e_3, abs=share)
        assert a.mismatched == b.mismatched
        assert a.mismatched >= 1 and not a.allclose
    nan_ref = torch.zeros(100_000, dtype=torch.float64)
    nan_ref[99_999] = float("nan")  # NaN/Inf on either side: left to the numpy path
    assert compare_tensors(nan_ref.float(), nan_ref, rtol=1e-3, atol=0) is None
    assert (
        compare_tensors(torch.full((100_000,), float("inf")), nan_ref.nan_to_num(), rtol=1e-3, atol=0) is None
    )
