"""``metrics.compare_arrays`` for live compare: a C loop on CPU, cache-sized torch passes elsewhere.

Live compare measures every output of every op, and the largest outputs (weight gradients) are
where its time goes. Computing the metrics one whole-tensor torch op at a time made about twenty
passes over each output through main memory, and each pass allocated a fresh tensor (page faults
on every first touch). Here the output is walked in chunks that fit in the L2
cache: each chunk is converted once into four small reusable buffers, every metric is reduced
from those buffers while they are hot, and the per-chunk partial results are stacked and read
back at once (two device syncs per output, the reference's norm and the results, not one per
metric). Memory traffic is one read of the target and two of the reference, whatever the number
of metrics.

On CPU, ``compare_on_cpu`` does the same in one C loop (``_fused.c``): no dispatch, no buffers,
float64 sums, ~10 us for a small output where the torch ops cost ~60. The torch
path remains for references on a device and for installs built without a C compiler.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from torchscope.accuracy.metrics import TINY, TensorMetrics

try:
    from torchscope.accuracy import _fused
except ImportError:  # built only where a C compiler was at install time
    _fused = None  # type: ignore[assignment]

# whether live compare measures CPU outputs with the C loop (benchmarks print it)
C_LOOP = _fused is not None

# element kinds of _fused's buffers
_KINDS = {torch.float64: 0, torch.float32: 1, torch.bfloat16: 2}

_LOW_PRECISION = (torch.bfloat16, torch.float16, torch.float8_e4m3fn, torch.float8_e5m2)
# bytes of one work buffer: three of them (plus the chunk of the reference) stay in L2
_CHUNK_BYTES = 1 << 18
# rows of the per-chunk partial results
_RR, _RD, _DD, _MAX_ABS, _SUM_ABS, _MAX_REL, _WITHIN_1, _WITHIN_5, _MAX_Q, _OVER = range(10)


def fast_applies(t: torch.Tensor, r: torch.Tensor) -> bool:
    """Whether ``compare_tensors`` applies: floating tensors of the same, non-empty shape."""
    return t.is_floating_point() and r.is_floating_point() and t.shape == r.shape and t.numel() > 0


def compare_tensors(t: torch.Tensor, r: torch.Tensor, *, rtol: float, atol: float) -> TensorMetrics | None:
    """``metrics.compare_arrays`` for floating ``t`` against ``r``, on the reference's device.

    The same numbers and the same verdict as the numpy definition. Returns None when a side holds
    NaN/Inf: the numpy path counts and matches those. Low-precision targets are measured in
    float32 (their errors, >= 1e-4 relative, are far above float32's resolution; each pass moves
    half the bytes of float64), others in float64.
    """
    work = torch.float32 if t.dtype in _LOW_PRECISION else torch.float64
    dev = r.device
    x_all = t.detach().to(dev).reshape(-1)
    y_all = r.detach().reshape(-1)
    n = x_all.numel()
    # the reference's norm first: the element bound needs its RMS
    nr = float(torch.linalg.vector_norm(y_all))
    if not math.isfinite(nr):
        return None
    rms = nr / math.sqrt(n)
    # bound = atol + rtol * max(|r|, rms); with rtol > 0 scale it by 1/rtol, which saves a pass:
    # |t - r| > bound  <=>  |t - r| / (max(|r|, rms) + atol/rtol) > rtol
    scale = rtol if rtol > 0 else 1.0
    chunk = max(1, _CHUNK_BYTES // torch.empty((), dtype=work).element_size())
    size = min(n, chunk)
    xb, yb, zb, wb = torch.empty(4, size, dtype=work, device=dev)
    parts: list[torch.Tensor] = []  # per chunk, the partial results in _RR.._OVER order
    for start in range(0, n, chunk):
        m = min(chunk, n - start)
        x, y, z, w = (xb, yb, zb, wb) if m == size else (xb[:m], yb[:m], zb[:m], wb[:m])
        x.copy_(x_all[start : start + m])
        y.copy_(y_all[start : start + m])
        d = x.sub_(y)
        # with d = t - r: t.t = r.r + 2 r.d + d.d and t.r = r.r + r.d, three dots for all norms
        rr, rd, dd = torch.dot(y, y), torch.dot(y, d), torch.dot(d, d)
        ad = d.abs_()
        ar = y.abs_()
        rel = torch.div(ad, torch.clamp(ar, min=TINY, out=z), out=z)
        # comparisons written as 0/1 into a float buffer and summed: far faster than bool + count
        within_1 = torch.le(rel, 1e-3, out=w).sum()
        within_5 = torch.le(rel, 5e-3, out=w).sum()
        max_rel = rel.amax()
        bound = ar.clamp_min_(rms).add_(atol / rtol) if rtol > 0 else ar.fill_(atol)
        q = torch.div(ad, bound, out=bound)
        if atol <= 0:  # a zero bound: 0/0 and x/0 possible
            q.nan_to_num_(nan=0.0, posinf=1e30 * scale)
        over = torch.gt(q, scale, out=w).sum()
        parts += (rr, rd, dd, ad.amax(), ad.sum(), max_rel, within_1, within_5, q.amax(), over)
    p = torch.stack(parts).to(torch.float64).view(-1, 10)
    sums = p.sum(0).tolist()
    maxes = p.amax(0).tolist()
    rr, rd, dd = sums[_RR], sums[_RD], sums[_DD]
    return _from_sums(
        t,
        r,
        Sums(
            tt=rr + 2 * rd + dd,
            tr=rr + rd,
            rr=rr,
            dd=dd,
            max_abs=maxes[_MAX_ABS],
            sum_abs=sums[_SUM_ABS],
            max_rel=maxes[_MAX_REL],
            ratio=maxes[_MAX_Q] / scale,
            within_1=int(sums[_WITHIN_1]),
            within_5=int(sums[_WITHIN_5]),
            over=int(sums[_OVER]),
        ),
        ref_norm=nr,
        rtol=rtol,
        atol=atol,
    )


def compare_on_cpu(t: torch.Tensor, r: torch.Tensor, *, rtol: float, atol: float) -> TensorMetrics | None:
    """``compare_tensors`` for a reference on CPU, by the C loop of ``_fused``, in float64.

    Returns None when the extension is missing (built only where a C compiler was) or a side
    holds NaN/Inf; the caller then takes another path.
    """
    if _fused is None:
        return None
    (x, kx), (y, ky) = _buffer(t), _buffer(r)
    found = _fused.metrics(x, kx, y, ky, t.numel(), rtol, atol)
    if found is None:
        return None
    sums = Sums(*found)
    return _from_sums(t, r, sums, ref_norm=math.sqrt(sums.rr), rtol=rtol, atol=atol)


def _buffer(t: torch.Tensor) -> tuple[object, int]:
    """A C-contiguous numpy view of ``t`` for ``_fused`` and its element kind (float16 and
    float8 widen to float32, exactly)."""
    t = t.detach().cpu()
    if t.dtype not in _KINDS:
        t = t.float()
    t = t.contiguous()
    kind = _KINDS[t.dtype]
    return (t.view(torch.int16) if t.dtype == torch.bfloat16 else t).numpy(), kind


class Sums(NamedTuple):
    """What one pass over an all-finite target ``t`` and reference ``r`` (d = t - r) yields."""

    tt: float  # t.t
    tr: float  # t.r
    rr: float  # r.r
    dd: float  # d.d
    max_abs: float
    sum_abs: float
    max_rel: float
    ratio: float  # max |d| / bound; inf where a zero bound meets an error
    within_1: int
    within_5: int
    over: int


def _from_sums(
    t: torch.Tensor, r: torch.Tensor, s: Sums, *, ref_norm: float, rtol: float, atol: float
) -> TensorMetrics | None:
    """The metrics, as ``metrics.compare_arrays`` defines them, from one pass's sums."""
    n = t.numel()
    if not math.isfinite(s.tt):
        return None
    nt, nr = math.sqrt(max(s.tt, 0.0)), ref_norm
    nr_work = math.sqrt(s.rr)  # the norm of r as the dots saw it: cosine 1.0 when t == r
    if nt == 0.0 and nr == 0.0:
        cosine = 1.0
    elif nt == 0.0 or nr == 0.0:
        cosine = 0.0
    else:
        cosine = min(s.tr / (nt * nr_work), 1.0)
    rel_l2 = math.sqrt(s.dd) / nr if nr > 0 else (0.0 if nt == 0 else None)
    whole_ok = rel_l2 is not None and rel_l2 <= rtol
    ratio = s.ratio if math.isfinite(s.ratio) else 1e30
    shape = tuple(int(i) for i in t.shape)
    return TensorMetrics(
        shape=shape,
        dtype=str(t.dtype).removeprefix("torch."),
        ref_shape=shape,
        ref_dtype=str(r.dtype).removeprefix("torch."),
        numel=n,
        max_abs_error=s.max_abs,
        max_rel_error=s.max_rel if math.isfinite(s.max_rel) else None,
        mean_abs_error=s.sum_abs / n,
        rmse=math.sqrt(s.dd / n),
        cosine=cosine,
        rel_l2_error=rel_l2,
        within_1e_3=s.within_1 / n,
        within_5e_3=s.within_5 / n,
        mismatched=s.over,
        error_ratio=ratio,
        allclose=s.over == 0 or whole_ok,
        rtol=rtol,
        atol=atol,
        problem=f"{s.over} of {n} elements outside rtol={rtol:g} atol={atol:g}" if s.over else None,
    )
