"""Numerical comparison of one target tensor against its reference, as plain numbers.

These are the metrics vendors' accuracy tools report op by op (Ascend msprobe, DeepLink's
autocompare): max/mean absolute error, max relative error, RMSE, cosine similarity, the share
of elements within 1e-3 and 5e-3 relative error, NaN/Inf counts on each side, and ``allclose``.
They are computed in float64 with numpy so that comparing two dumps needs no torch; the live
comparison hands us numpy views of its tensors. Integer and boolean tensors are compared
exactly; shape and dtype mismatches are reported as such, never silently broadcast.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

# dtypes we compare bit for bit
EXACT_KINDS = ("b", "i", "u")
# relative error is |t - r| / max(|r|, TINY) so that exact zeros do not divide by zero
TINY = 1e-12


@dataclass(frozen=True)
class TensorMetrics:
    """How one target tensor differs from its reference. ``None`` where not computable."""

    shape: tuple[int, ...]
    dtype: str
    ref_shape: tuple[int, ...]
    ref_dtype: str
    numel: int
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    mean_abs_error: float | None = None
    rmse: float | None = None
    cosine: float | None = None
    within_1e_3: float | None = None
    within_5e_3: float | None = None
    nan: int = 0
    inf: int = 0
    ref_nan: int = 0
    ref_inf: int = 0
    mismatched: int = 0
    error_ratio: float | None = None
    rel_l2_error: float | None = None
    allclose: bool = True
    rtol: float = 0.0
    atol: float = 0.0
    problem: str | None = None

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["shape"] = list(self.shape)
        d["ref_shape"] = list(self.ref_shape)
        return d


def _finite_or_none(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def _is_exact(dtype: str) -> bool:
    return dtype.startswith(("int", "uint", "bool"))


def compare_arrays(
    target: np.ndarray,
    reference: np.ndarray,
    *,
    dtype: str,
    ref_dtype: str,
    rtol: float,
    atol: float,
) -> TensorMetrics:
    """Compare ``target`` with ``reference``; ``dtype``/``ref_dtype`` name the original dtypes.

    ``target`` and ``reference`` may already be upcast (bfloat16 has no numpy dtype); the
    names say what they were. ``allclose`` is element-wise
    ``|t - r| <= atol + rtol * max(|r|, rms(r))`` with NaN equal to NaN only where both sides
    have it and infinities equal when identical; a tensor whose relative L2 error is within
    ``rtol`` also passes (a few elements of a long reduction may exceed the element bound).
    """
    shape = tuple(int(s) for s in target.shape)
    ref_shape = tuple(int(s) for s in reference.shape)
    base: dict[str, Any] = dict(
        shape=shape, dtype=dtype, ref_shape=ref_shape, ref_dtype=ref_dtype, numel=int(target.size)
    )
    if shape != ref_shape:
        return TensorMetrics(**base, allclose=False, problem=f"shape mismatch {shape} vs {ref_shape}")
    if _is_exact(dtype) != _is_exact(ref_dtype) or (_is_exact(dtype) and dtype != ref_dtype):
        return TensorMetrics(**base, allclose=False, problem=f"dtype mismatch {dtype} vs {ref_dtype}")
    if _is_exact(dtype):
        differ = int(np.count_nonzero(target != reference))
        return TensorMetrics(
            **base,
            max_abs_error=float(np.max(np.abs(target.astype(np.float64) - reference))) if differ else 0.0,
            mismatched=differ,
            allclose=differ == 0,
            problem=f"{differ} of {target.size} elements differ" if differ else None,
        )
    t = np.asarray(target, dtype=np.float64).ravel()
    r = np.asarray(reference, dtype=np.float64).ravel()
    if t.size == 0:
        return TensorMetrics(**base, rtol=rtol, atol=atol)
    # one pass each for the common all-finite case; masks only when something is not finite
    all_finite = bool(np.isfinite(t.sum()) and np.isfinite(r.sum())) or bool(
        np.isfinite(t).all() and np.isfinite(r).all()
    )
    if all_finite:
        counts: dict[str, Any] = dict(nan=0, inf=0, ref_nan=0, ref_inf=0)
        tf, rf, bad_specials = t, r, 0
    else:
        t_nan, r_nan = np.isnan(t), np.isnan(r)
        t_inf, r_inf = np.isinf(t), np.isinf(r)
        counts = dict(
            nan=int(t_nan.sum()), inf=int(t_inf.sum()), ref_nan=int(r_nan.sum()), ref_inf=int(r_inf.sum())
        )
        finite = ~(t_nan | r_nan | t_inf | r_inf)
        # non-finite elements agree when both sides hold the same NaN/Inf
        special_ok = (t_nan & r_nan) | ((t_inf | r_inf) & (t == r))
        bad_specials = int((~finite & ~special_ok).sum())
        tf, rf = t[finite], r[finite]
    diff = tf - rf
    abs_err = np.abs(diff)
    abs_ref = np.abs(rf)
    sq_err = float(np.dot(diff, diff))
    nt, nr = float(np.sqrt(np.dot(tf, tf))), float(np.sqrt(np.dot(rf, rf)))
    n = max(tf.size, 1)
    # An op's rounding error scales with the magnitudes it combines, not only with its result:
    # an element that cancels to ~0 is judged against the tensor's RMS (see docs/accuracy.md).
    rms_ref = nr / math.sqrt(n)
    bound = np.maximum(abs_ref, rms_ref)
    bound *= rtol
    bound += atol
    with np.errstate(divide="ignore", invalid="ignore"):
        rel_err = abs_err / np.maximum(abs_ref, TINY)
        ratio_arr = abs_err / bound
    # fmax skips the NaNs of 0/0 (no error against a zero bound) without warning when all are
    ratio = float(np.fmax.reduce(ratio_arr)) if ratio_arr.size else 0.0
    if not math.isfinite(ratio):  # bound 0 (rtol = atol = 0) and some error
        ratio = 1e30 if abs_err.max() > 0 else 0.0
    mismatched = int(np.count_nonzero(abs_err > bound)) + bad_specials
    if nt == 0.0 and nr == 0.0:
        cosine = 1.0
    elif nt == 0.0 or nr == 0.0:
        cosine = 0.0
    else:
        cosine = float(np.dot(tf, rf) / (nt * nr))
    rel_l2 = math.sqrt(sq_err) / nr if nr > 0 else (0.0 if nt == 0 else None)
    # a few elements of a reduction past the bound while the tensor as a whole is within one
    # rounding: accepted (the elementwise count is still reported in ``mismatched``)
    whole_ok = bad_specials == 0 and rel_l2 is not None and rel_l2 <= rtol
    problem = None
    if mismatched:
        problem = f"{mismatched} of {t.size} elements outside rtol={rtol:g} atol={atol:g}"
    return TensorMetrics(
        **base,
        **counts,
        max_abs_error=float(abs_err.max()) if abs_err.size else 0.0,
        max_rel_error=_finite_or_none(float(rel_err.max())) if rel_err.size else 0.0,
        mean_abs_error=float(abs_err.sum() / n),
        rmse=math.sqrt(sq_err / n),
        cosine=min(cosine, 1.0),
        rel_l2_error=rel_l2,
        within_1e_3=float((rel_err <= 1e-3).sum() / n),
        within_5e_3=float((rel_err <= 5e-3).sum() / n),
        mismatched=mismatched,
        error_ratio=ratio,
        allclose=mismatched == 0 or whole_ok,
        rtol=rtol,
        atol=atol,
        problem=problem,
    )


def severity(m: TensorMetrics) -> float:
    """One number to rank tensors by: how far past its tolerance the worst element is.

    ``error_ratio`` is ``max(|t - r| / (atol + rtol * |r|))``, so 1.0 is the edge of
    ``allclose``; structural problems (shape, dtype, NaN/Inf appearing) rank above any ratio.
    """
    if m.problem and m.max_abs_error is None:
        return 1e30
    score = m.error_ratio or 0.0
    if m.error_ratio is None and m.mismatched:
        score = 1e6
    if m.nan != m.ref_nan or m.inf != m.ref_inf:
        score += 1e20
    return float(score)
