"""Live compare: run every ATen op of the user's code also on a reference, and compare on the spot.

``compare()`` is a context manager around the user's code (forward and backward). Each op runs
as usual on the target; before it runs, its inputs are copied to the reference (CPU float64 by
default: floating tensors are upcast, others copied as they are), and after it the op runs again
on those copies. Because the reference sees the *same* inputs the target saw, an op's error is
its own, never inherited: the first op over tolerance is the root. Inputs the op must not write
are snapshotted (the reference copy itself at equal dtype, else a bitwise clone) and compared
after it, so inputs modified in place without the schema saying so are caught as well.
Random ops run only on the target (their outputs cannot be compared; see docs/accuracy.md).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch
from torch import nn

from torchscope.accuracy.accumulation import widened
from torchscope.accuracy.metrics import TensorMetrics, compare_arrays
from torchscope.accuracy.observer import (
    SAME_SIZE_INTS,
    OpObserver,
    dtype_name,
    leaves,
    map_leaves,
    readonly_arguments,
)
from torchscope.accuracy.result import DIVERGED, OK, SKIPPED, AccuracyResult, OpResult
from torchscope.accuracy.tolerance import Tolerances
from torchscope.accuracy.torch_metrics import compare_on_cpu, compare_tensors, fast_applies
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


# without the C loop (or with NaN/Inf in it), outputs up to this many elements are measured by
# numpy on CPU: a numpy op costs a microsecond where a torch op costs ten
_NUMPY_MAX = 8192


# floating inputs at least this large are copied into the reusable arena, not a fresh tensor
_ARENA_MIN = 1 << 14


def _unchanged(now: torch.Tensor, before: torch.Tensor) -> bool:
    """Whether ``now`` holds the values of its snapshot ``before`` (same dtype and device).

    Bitwise first (numpy's comparison is several times faster than ``torch.equal`` on CPU); if
    the bits differ, equal values still count (``-0.0`` and ``0.0``, NaN payloads).
    """
    if now.device.type == "cpu" and not now.is_quantized and now.dtype != torch.bool:
        bits = SAME_SIZE_INTS.get(now.element_size())
        if bits is not None and np.array_equal(now.view(bits).numpy(), before.view(bits).numpy()):
            return True
    return torch.equal(now, before) or torch.equal(torch.nan_to_num(now), torch.nan_to_num(before))


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
        # one reusable buffer per reference dtype for the large input copies of the op running
        # now: a fresh multi-megabyte tensor per input costs a page fault per 4 KiB on first touch
        # (per thread: the autograd engine may run backward ops on a device's own thread)
        self._local = threading.local()

    def _arena_state(self) -> tuple[dict[torch.dtype, torch.Tensor], dict[torch.dtype, int]]:
        """This thread's buffers (one per reference dtype) and how much of each the op has used."""
        if not hasattr(self._local, "arena"):
            self._local.arena, self._local.used = {}, {}
        return self._local.arena, self._local.used

    def _copy_into_arena(self, x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor | None:
        if x.is_contiguous():
            fmt = torch.contiguous_format
        elif x.dim() == 4 and x.is_contiguous(memory_format=torch.channels_last):
            fmt = torch.channels_last
        else:
            return None
        n = x.numel()
        arenas, used_by = self._arena_state()
        used = used_by.get(dtype, 0)
        arena = arenas.get(dtype)
        if arena is None or used + n > arena.numel():
            # earlier copies of this op keep the old buffer alive; later ops use the new one
            arena = torch.empty(
                max(n, 2 * (arena.numel() if arena is not None else 0)), dtype=dtype, device=self.device
            )
            arenas[dtype], used = arena, 0
        used_by[dtype] = used + n
        ref = (
            torch.as_strided(arena, x.shape, x.stride(), used)
            if fmt is torch.channels_last
            else arena[used : used + n].view(x.shape)
        )
        return ref.copy_(x.detach())

    def _to_ref(self, x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            dtype = self.dtype if (self.dtype is not None and x.is_floating_point()) else x.dtype
            if x.is_floating_point() and x.numel() >= _ARENA_MIN and x.layout == torch.strided:
                ref = self._copy_into_arena(x, dtype)
                if ref is not None:
                    return ref
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
        self._arena_state()[1].clear()  # the previous op's copies are garbage now
        ref_args, ref_kwargs = map_leaves(self._to_ref, (args, kwargs))
        snaps = self._snapshots(func, args, kwargs, ref_args, ref_kwargs) if self.check_inputs else []
        out = func(*args, **kwargs)
        rec.mutated_inputs = [
            name for name, pairs in snaps if not all(_unchanged(t.detach(), snap) for t, snap in pairs)
        ]
        try:
            ref_out = func(*ref_args, **ref_kwargs)
        except Exception as exc:  # the reference may lack a kernel for this dtype
            rec.status, rec.note = SKIPPED, f"reference failed: {type(exc).__name__}: {exc}"[:300]
            return out
        rec.outputs = self._compare(rec, out, ref_out, ref_args)
        if rec.mutated_inputs or any(not m.allclose for m in rec.outputs):
            rec.status = DIVERGED
        return out

    def _compare(
        self, rec: OpResult, out: Any, ref_out: Any, ref_args: tuple[Any, ...]
    ) -> list[TensorMetrics]:
        got, want = leaves(out), leaves(ref_out)
        metrics: list[TensorMetrics] = []
        for i, (t, r) in enumerate(zip(got, want, strict=False)):
            m = self._compare_one(rec, t, r)
            if m is None:
                continue
            if not m.allclose and isinstance(t, torch.Tensor) and isinstance(r, torch.Tensor):
                # an accumulating op (sum, matmul, conv) may round by more than one ulp when correct
                wide = None
                if not self.tolerances.overridden(rec.op, rec.overload, rec.module):
                    wide = widened(rec.op, ref_args, i, t, m.rtol, m.atol)
                if wide is not None:
                    m = self._compare_one(rec, t, r, (wide.rtol, wide.atol)) or m
            metrics.append(m)
        return metrics

    def _compare_one(
        self, rec: OpResult, t: Any, r: Any, tol: tuple[float, float] | None = None
    ) -> TensorMetrics | None:
        """One output against its reference, at the op's tolerance unless ``tol`` is given."""
        if isinstance(t, torch.Tensor) and isinstance(r, torch.Tensor) and fast_applies(t, r):
            rtol, atol = tol or self.tolerances.live(rec.op, dtype_name(t.dtype), rec.overload, rec.module)
            on_cpu = r.device.type == "cpu"
            m = compare_on_cpu(t, r, rtol=rtol, atol=atol) if on_cpu else None
            if m is None and (t.numel() > _NUMPY_MAX or not on_cpu):
                m = compare_tensors(t, r, rtol=rtol, atol=atol)
            if m is not None:
                return m
        a, b = _as_array(t), _as_array(r)
        if a is None or b is None:
            return None
        rtol, atol = tol or self.tolerances.live(rec.op, a[1], rec.overload, rec.module)
        return compare_arrays(a[0], b[0], dtype=a[1], ref_dtype=b[1], rtol=rtol, atol=atol)

    def _snapshots(
        self,
        func: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        ref_args: tuple[Any, ...],
        ref_kwargs: dict[str, Any],
    ) -> list[tuple[str, list[tuple[torch.Tensor, torch.Tensor]]]]:
        """Before the op runs: each argument it must not write, with a snapshot of its tensors.

        The reference copy is the snapshot when it has the target's dtype and device; otherwise
        (an upcast reference) a bitwise clone in the target's dtype, which is cheaper to take and
        to compare than casting the upcast copy back after the op.
        """
        snaps: list[tuple[str, list[tuple[torch.Tensor, torch.Tensor]]]] = []
        for name, where, now in readonly_arguments(func, args, kwargs):
            copy = ref_args[where] if isinstance(where, int) else ref_kwargs[where]
            pairs = []
            for t, ref in zip(leaves(now), leaves(copy), strict=False):
                if not isinstance(t, torch.Tensor) or t.is_complex():
                    continue
                same = ref.dtype == t.dtype and ref.device == t.device
                pairs.append((t, ref if same else t.detach().clone()))
            if pairs:
                snaps.append((name, pairs))
        return snaps


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
