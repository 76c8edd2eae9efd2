"""Live compare: run every ATen op of the user's code also on a reference, and compare on the spot.

``compare()`` is a context manager around the user's code (forward and backward). Each op runs
as usual on the target; before it runs, its inputs are copied to the reference (CPU float64 by
default: floating tensors are upcast, others copied as they are), and after it the op runs again
on those copies. Because the reference sees the *same* inputs the target saw, an op's error is
its own, never inherited: the first op over tolerance is the root. The copies double as a
snapshot, so inputs an op modified in place without its schema saying so are caught as well.
Random ops run only on the target (their outputs cannot be compared; see docs/accuracy.md).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.utils._pytree import tree_leaves, tree_map

from torchscope.accuracy.metrics import TINY, TensorMetrics, compare_arrays
from torchscope.accuracy.observer import OpObserver, dtype_name
from torchscope.accuracy.result import DIVERGED, OK, SKIPPED, AccuracyResult, OpResult
from torchscope.accuracy.tolerance import Tolerances
from torchscope.accuracy.tracking import ModuleTracker


def to_numpy(t: torch.Tensor) -> np.ndarray:
    """A CPU numpy array of ``t``; floating dtypes numpy lacks (bfloat16, float8) go to float64."""
    t = t.detach()
    if t.is_floating_point() and t.dtype not in (torch.float32, torch.float64, torch.float16):
        t = t.to(torch.float64)
    if t.is_complex():
        t = torch.view_as_real(t)
    return t.cpu().resolve_conj().resolve_neg().numpy()


def _as_array(x: Any) -> tuple[np.ndarray, str] | None:
    if isinstance(x, torch.Tensor):
        return to_numpy(x), dtype_name(x.dtype)
    if isinstance(x, bool):
        return np.array(x), "bool"
    if isinstance(x, int):
        return np.array(x, dtype=np.int64), "int64"
    if isinstance(x, float):
        return np.array(x, dtype=np.float64), "float64"
    return None


# legacy schemas that write arguments without declaring it: not a bug of the target
_UNDECLARED_WRITES: dict[str, tuple[str, ...]] = {
    "aten::native_batch_norm": ("running_mean", "running_var"),
    "aten::_batch_norm_impl_index": ("running_mean", "running_var"),
    "aten::cudnn_batch_norm": ("running_mean", "running_var"),
    "aten::miopen_batch_norm": ("running_mean", "running_var"),
    "aten::batch_norm": ("running_mean", "running_var"),
}


_LOW_PRECISION = (torch.bfloat16, torch.float16, torch.float8_e4m3fn, torch.float8_e5m2)


def _fast(t: torch.Tensor, r: torch.Tensor) -> bool:
    """Whether ``compare_tensors`` applies: floating tensors of the same, non-empty shape."""
    return t.is_floating_point() and r.is_floating_point() and t.shape == r.shape and t.numel() > 0


def compare_tensors(t: torch.Tensor, r: torch.Tensor, *, rtol: float, atol: float) -> TensorMetrics | None:
    """``metrics.compare_arrays`` computed by torch on the reference's device in float64 (no
    numpy copy, the machine's threads): the same numbers, the same verdict. Returns None when a
    side holds NaN/Inf: the numpy path counts and matches those.
    """
    # low-precision targets are measured in float32: their errors (>= 1e-4 relative) are far
    # above float32's resolution, and every pass moves half the bytes of float64
    work = torch.float32 if t.dtype in _LOW_PRECISION else torch.float64
    x = t.detach().to(device=r.device, dtype=work).reshape(-1)
    y = r.detach().to(work).reshape(-1)
    n = x.numel()
    nt, nr = float(torch.linalg.vector_norm(x)), float(torch.linalg.vector_norm(y))
    if not (math.isfinite(nt) and math.isfinite(nr)):
        return None
    dot_xy = float(torch.dot(x, y))
    own_copy = t.dtype != work or t.device != r.device  # else x shares t's storage
    diff = x.sub_(y) if own_copy else x - y
    sq_err = float(torch.dot(diff, diff))
    abs_err = diff.abs_()
    abs_ref = y.abs()
    # bound = atol + rtol * max(|r|, rms); with rtol > 0 scale it by 1/rtol, which saves passes:
    # |t - r| > bound  <=>  |t - r| / (max(|r|, rms) + atol/rtol) > rtol
    scale = rtol if rtol > 0 else 1.0
    bound = abs_ref.clamp_min(nr / math.sqrt(n))
    if rtol > 0:
        bound.add_(atol / rtol)
    else:
        bound.zero_().add_(atol)
    quotient = abs_err / bound
    if atol <= 0:  # a zero bound: 0/0 and x/0 possible
        quotient.nan_to_num_(nan=0.0, posinf=1e30 * scale)
    mismatched = int(torch.count_nonzero(quotient > scale))
    ratio = float(quotient.max()) / scale
    rel = abs_err / abs_ref.clamp_min_(TINY)
    if nt == 0.0 and nr == 0.0:
        cosine = 1.0
    elif nt == 0.0 or nr == 0.0:
        cosine = 0.0
    else:
        cosine = min(dot_xy / (nt * nr), 1.0)
    rel_l2 = math.sqrt(sq_err) / nr if nr > 0 else (0.0 if nt == 0 else None)
    whole_ok = rel_l2 is not None and rel_l2 <= rtol
    max_rel = float(rel.max())
    shape = tuple(int(s) for s in t.shape)
    return TensorMetrics(
        shape=shape,
        dtype=dtype_name(t.dtype),
        ref_shape=shape,
        ref_dtype=dtype_name(r.dtype),
        numel=n,
        max_abs_error=float(abs_err.max()),
        max_rel_error=max_rel if math.isfinite(max_rel) else None,
        mean_abs_error=float(abs_err.sum()) / n,
        rmse=math.sqrt(sq_err / n),
        cosine=cosine,
        rel_l2_error=rel_l2,
        within_1e_3=int(torch.count_nonzero(rel <= 1e-3)) / n,
        within_5e_3=int(torch.count_nonzero(rel <= 5e-3)) / n,
        mismatched=mismatched,
        error_ratio=ratio,
        allclose=mismatched == 0 or whole_ok,
        rtol=rtol,
        atol=atol,
        problem=f"{mismatched} of {n} elements outside rtol={rtol:g} atol={atol:g}" if mismatched else None,
    )


class _LiveMode(OpObserver):
    def __init__(
        self,
        result: AccuracyResult,
        tracker: ModuleTracker,
        tolerances: Tolerances,
        with_stack: bool,
        reference_device: torch.device,
        reference_dtype: torch.dtype | None,
        check_inputs: bool,
    ) -> None:
        super().__init__(tracker, tolerances, with_stack)
        self.result = result
        self.device = reference_device
        self.dtype = reference_dtype
        self.check_inputs = check_inputs

    def _to_ref(self, x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            dtype = self.dtype if (self.dtype is not None and x.is_floating_point()) else x.dtype
            return x.detach().to(device=self.device, dtype=dtype, copy=True)
        if isinstance(x, torch.dtype) and x.is_floating_point and self.dtype is not None:
            return self.dtype
        if isinstance(x, torch.device):
            return self.device
        return x

    def __torch_dispatch__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Mapping[str, Any] | None = None
    ) -> Any:
        kwargs = dict(kwargs or {})
        rec = self.describe(func, args, kwargs)
        if rec is None:
            return func(*args, **kwargs)
        self.result.ops.append(rec)
        if rec.status != OK:
            return func(*args, **kwargs)
        ref_args, ref_kwargs = tree_map(self._to_ref, (args, kwargs))
        out = func(*args, **kwargs)
        if self.check_inputs:
            rec.mutated_inputs = self._mutated(func, args, kwargs, ref_args, ref_kwargs)
        try:
            ref_out = func(*ref_args, **ref_kwargs)
        except Exception as exc:  # the reference may lack a kernel for this dtype
            rec.status, rec.note = SKIPPED, f"reference failed: {type(exc).__name__}: {exc}"[:300]
            return out
        rec.outputs = self._compare(rec, out, ref_out)
        if rec.mutated_inputs or any(not m.allclose for m in rec.outputs):
            rec.status = DIVERGED
        return out

    def _compare(self, rec: OpResult, out: Any, ref_out: Any) -> list[TensorMetrics]:
        got, want = tree_leaves(out), tree_leaves(ref_out)
        metrics: list[TensorMetrics] = []
        for t, r in zip(got, want, strict=False):
            if isinstance(t, torch.Tensor) and isinstance(r, torch.Tensor) and _fast(t, r):
                rtol, atol = self.tolerances.live(rec.op, dtype_name(t.dtype), rec.overload, rec.module)
                m = compare_tensors(t, r, rtol=rtol, atol=atol)
                if m is not None:
                    metrics.append(m)
                    continue
            a, b = _as_array(t), _as_array(r)
            if a is None or b is None:
                continue
            rtol, atol = self.tolerances.live(rec.op, a[1], rec.overload, rec.module)
            metrics.append(compare_arrays(a[0], b[0], dtype=a[1], ref_dtype=b[1], rtol=rtol, atol=atol))
        return metrics

    def _mutated(
        self,
        func: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        ref_args: tuple[Any, ...],
        ref_kwargs: dict[str, Any],
    ) -> list[str]:
        """Arguments the op changed although its schema does not declare them written."""
        bad: list[str] = []
        allowed = _UNDECLARED_WRITES.get(func._schema.name, ())
        for i, arg in enumerate(func._schema.arguments):
            if (arg.alias_info is not None and arg.alias_info.is_write) or arg.name in allowed:
                continue
            if i < len(args):
                now, before = args[i], ref_args[i]
            elif arg.name in kwargs:
                now, before = kwargs[arg.name], ref_kwargs[arg.name]
            else:
                continue
            pairs = zip(tree_leaves(now), tree_leaves(before), strict=False)
            for t, snap in pairs:
                if not isinstance(t, torch.Tensor) or t.is_complex():
                    continue
                # the snapshot is an exact upcast: cast it back and compare in the target's
                # dtype (fewer bytes than upcasting the target again) on the reference device
                cur = t.detach().to(device=snap.device)
                before_t = snap.to(dtype=t.dtype)
                if not torch.equal(cur, before_t) and not torch.equal(
                    torch.nan_to_num(cur), torch.nan_to_num(before_t)
                ):
                    bad.append(arg.name)
                    break
        return bad


@contextmanager
def compare(
    model: nn.Module | None = None,
    *,
    reference_device: str | torch.device = "cpu",
    reference_dtype: str | torch.dtype | None = torch.float64,
    overrides: Mapping[str, tuple[float, float]] | None = None,
    include: Sequence[str] = (),
    exclude: Sequence[str] = (),
    with_stack: bool = False,
    check_inputs: bool = True,
    label: str | None = None,
) -> Iterator[AccuracyResult]:
    """Compare every ATen op run inside the block against a reference; yields the result.

    ``model`` (optional) names module paths exactly as ``model.named_modules()`` does; without
    it, paths are found from the modules entered. ``reference_dtype=None`` keeps each tensor's
    dtype (compare a device against CPU at the same precision). ``overrides`` maps op-name
    patterns to ``(rtol, atol)``. The result fills in as the block runs.
    """
    ref_dtype: torch.dtype | None = (
        getattr(torch, reference_dtype) if isinstance(reference_dtype, str) else reference_dtype
    )
    device = torch.device(reference_device)
    ref_desc = f"{device.type} {dtype_name(ref_dtype) if ref_dtype else 'same dtype'}"
    result = AccuracyResult(mode="live", target=label or "this process", reference=ref_desc)
    tolerances = Tolerances(overrides=dict(overrides or {}), include=tuple(include), exclude=tuple(exclude))
    tracker = ModuleTracker(model)
    mode = _LiveMode(result, tracker, tolerances, with_stack, device, ref_dtype, check_inputs)
    with tracker, mode:
        yield result
