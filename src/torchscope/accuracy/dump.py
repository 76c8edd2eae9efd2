"""Dump: record every ATen op's inputs and outputs on one machine, to compare with another offline.

``dump(path)`` is a context manager around the user's code. It numbers ops exactly as live
compare does and writes a directory that any machine can read without torch or torchscope's
live session (format in docs/accuracy.md):

- ``meta.json``: format name and version, torch version, device, op and tensor counts;
- ``ops.parquet``: one row per op (index, name, overload, module path, direction, ...);
- ``tensors.parquet``: one row per input/output tensor with its statistics and sketch;
- ``tensors.safetensors``: full tensors of the ops chosen with ``tensors=`` (float dtypes numpy
  lacks are stored as float32, which holds bfloat16/float16 exactly);
- ``modules.parquet`` and ``module_tensors.parquet``: one row per ``nn.Module`` call, forward and
  backward, and the statistics of its inputs and outputs (``module_records``).

``level`` picks ops, modules or both ("all", the default). Ops that write an input their schema
says they only read are caught here too: each read-only input's bits are summed before and
after the op, and a changed sum is recorded in ``mutated_inputs``.
"""

from __future__ import annotations

import fnmatch
import json
import os
import time
import weakref
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import torch
from torch import nn

from torchscope.accuracy.dump_format import FORMAT, MODULES_SCHEMA, OPS_SCHEMA, TENSORS_SCHEMA, VERSION
from torchscope.accuracy.live import to_numpy
from torchscope.accuracy.module_records import ModuleRecorder
from torchscope.accuracy.observer import (
    SAME_SIZE_INTS,
    OpObserver,
    dtype_name,
    leaves,
    measurable,
    readonly_arguments,
    tensor_leaves,
)
from torchscope.accuracy.result import OK, RANDOM
from torchscope.accuracy.stats import SKETCH, sketch_plan, sketch_stride, tensor_stats
from torchscope.accuracy.tolerance import Tolerances
from torchscope.accuracy.tracking import ModuleTracker
from torchscope.errors import UsageError
from torchscope.writes import write_atomically

LEVELS = ("all", "op", "module")


def tensor_key(op_index: int, role: str, position: int) -> str:
    """The safetensors key of one saved tensor."""
    return f"{op_index}/{role}/{position}"


_plans: dict[tuple[int, str], tuple[torch.Tensor, torch.Tensor]] = {}


def torch_stats(t: torch.Tensor) -> dict[str, Any]:
    """``stats.tensor_stats`` computed with torch on the tensor's device (no float64 copy)."""
    t = t.detach()
    name = dtype_name(t.dtype)
    if not t.is_floating_point():
        return tensor_stats(t.cpu().numpy(), name)
    x = t.reshape(-1)
    if x.dtype not in (torch.float32, torch.float64):
        x = x.float()  # exact for bfloat16/float16
    row: dict[str, Any] = {"shape": list(t.shape), "dtype": name, "numel": x.numel()}
    if x.numel() == 0:
        row.update(nan=0, inf=0, sketch=[])
        return row
    total = x.sum()  # torch sums by blocks (pairwise): accurate without a float64 copy
    finite = x
    row.update(nan=0, inf=0)
    if not bool(torch.isfinite(total)):
        mask = torch.isfinite(x)
        nan = int(torch.isnan(x).sum())
        row.update(nan=nan, inf=x.numel() - int(mask.sum()) - nan)
        finite = x[mask]
        total = finite.sum()
    if finite.numel():
        lo, hi = torch.aminmax(finite)
        row.update(
            min=float(lo),
            max=float(hi),
            mean=float(total) / finite.numel(),
            abs_mean=float(finite.abs().sum()) / finite.numel(),
            l2=float(torch.linalg.vector_norm(finite)),
        )
    sample = x[:: sketch_stride(x.numel())]
    if finite is not x:
        sample = torch.nan_to_num(sample, nan=0.0, posinf=0.0, neginf=0.0)
    key = (sample.numel(), str(sample.device))
    if key not in _plans:
        if len(_plans) > 32:
            _plans.clear()
        bucket, sign = sketch_plan(sample.numel())
        _plans[key] = (torch.from_numpy(bucket).to(sample.device), torch.from_numpy(sign).to(sample.device))
    bucket_t, sign_t = _plans[key]
    sketch = torch.zeros(SKETCH, dtype=torch.float64, device=sample.device)
    sketch.index_add_(0, bucket_t, sample.to(torch.float64) * sign_t)
    row["sketch"] = sketch.tolist()
    return row


class StatsCache:
    """``torch_stats`` of recently measured tensors, reused while a tensor is unchanged.

    Why: a dump measures each op's inputs and outputs, and each module call's, so most tensors
    are measured several times: an op's output is the next op's input, a layer's weight is read
    by its forward and its backward op, a module's output is the next module's input. A tensor
    is the same while it is the same object (a weak reference, so the cache keeps nothing alive)
    and its version counter has not moved (every in-place ATen op bumps it).
    """

    def __init__(self, size: int = 256) -> None:
        self.size = size
        self._entries: OrderedDict[int, tuple[weakref.ref[torch.Tensor], int, dict[str, Any]]] = OrderedDict()

    def stats(self, t: torch.Tensor) -> dict[str, Any]:
        """The statistics row of ``t`` (shared: copy it before adding to it)."""
        try:
            version = t._version
        except RuntimeError:  # inference tensors have no version counter: measured every time
            return torch_stats(t)
        key = id(t)
        hit = self._entries.get(key)
        if hit is not None and hit[0]() is t and hit[1] == version:
            self._entries.move_to_end(key)
            return hit[2]
        row = torch_stats(t)
        self._entries[key] = (weakref.ref(t), version, row)
        if len(self._entries) > self.size:
            self._entries.popitem(last=False)
        return row


class _DumpMode(OpObserver):
    def __init__(
        self,
        tracker: ModuleTracker,
        tolerances: Tolerances,
        with_stack: bool,
        save: Sequence[str] | bool,
        save_inputs: bool,
        check_inputs: bool,
        stats: StatsCache,
    ) -> None:
        super().__init__(tracker, tolerances, with_stack)
        self.stats = stats
        self.save = save
        self.save_inputs = save_inputs
        self.check_inputs = check_inputs
        self.modules: ModuleRecorder | None = None  # told when a random op runs
        self.ops: list[dict[str, Any]] = []
        self.tensors: list[dict[str, Any]] = []
        self.saved: dict[str, np.ndarray] = {}

    def _wants_tensors(self, op: str) -> bool:
        if isinstance(self.save, bool):
            return self.save
        return any(fnmatch.fnmatchcase(op, p) for p in self.save)

    def _record(self, index: int, role: str, values: list[Any], keep: bool) -> None:
        for pos, t in enumerate(values):
            if not isinstance(t, torch.Tensor) or not measurable(t):
                continue
            row = {**self.stats.stats(t), "op_index": index, "role": role, "position": pos, "saved": keep}
            if keep:
                arr = to_numpy(t)
                store = arr.astype(np.float32) if t.is_floating_point() and arr.dtype != np.float64 else arr
                self.saved[tensor_key(index, role, pos)] = np.ascontiguousarray(store)
            self.tensors.append(row)

    def __torch_dispatch__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Mapping[str, Any] | None = None
    ) -> Any:
        kwargs = dict(kwargs or {})
        rec = self.describe(func, args, kwargs)
        if rec is None:
            return func(*args, **kwargs)
        if rec.status == RANDOM and self.modules is not None:
            self.modules.mark_random()
        keep = self._wants_tensors(rec.op)
        # inputs are recorded before the op runs: an in-place op changes them
        self._record(rec.index, "input", tensor_leaves((args, kwargs)), keep and self.save_inputs)
        watched = _read_only_sums(func, args, kwargs) if self.check_inputs and rec.status == OK else []
        out = func(*args, **kwargs)
        mutated = [name for name, t, before in watched if not torch.equal(bit_sum(t), before)]
        if rec.status == OK:
            self._record(rec.index, "output", tensor_leaves(out), keep)
        self.ops.append(
            dict(
                index=rec.index,
                op=rec.op,
                overload=rec.overload,
                module=rec.module,
                direction=rec.direction,
                grad_fn=rec.grad_fn,
                call_site=rec.call_site,
                status=rec.status,
                note=rec.note,
                mutated_inputs=sorted(set(mutated)),
            )
        )
        return out


def bit_sum(t: torch.Tensor) -> torch.Tensor:
    """A one-pass fingerprint of a tensor's contents: the wrapping sum of its bit patterns.

    Reading the tensor once costs far less than the clone live compare keeps; a change that
    leaves the sum of the bit patterns unchanged (two elements swapped) goes unseen.
    """
    return t.detach().view(SAME_SIZE_INTS[t.element_size()]).sum(dtype=torch.int64)


def _read_only_sums(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """``(argument name, tensor, bit sum)`` of each tensor the op must not write."""
    out = []
    for name, _, value in readonly_arguments(func, args, kwargs):
        for t in leaves(value):
            if (
                isinstance(t, torch.Tensor)
                and t.layout == torch.strided
                and t.device.type != "meta"  # no data to fingerprint
                and not t.is_quantized
                and t.element_size() in SAME_SIZE_INTS
                and t.numel()
            ):
                out.append((name, t, bit_sum(t)))
    return out


def _tensor_frame(rows: list[dict[str, Any]]) -> pl.DataFrame:
    return pl.DataFrame([{k: r.get(k) for k in TENSORS_SCHEMA} for r in rows], schema=TENSORS_SCHEMA)


def write_dump(
    path: Path,
    level: str,
    mode: _DumpMode | None,
    modules: ModuleRecorder | None,
    meta: dict[str, Any],
) -> None:
    """Write a dump directory (see the module docstring for its files), whole or not at all:
    written beside ``path`` and moved in, ``meta.json`` last (``writes.write_atomically``; on a
    full disk an older dump stays as it was and a ``WriteError`` names ``path``)."""
    write_atomically(path, lambda tmp: _write_dump_files(tmp, level, mode, modules, meta), marker="meta.json")


def _write_dump_files(
    path: Path,
    level: str,
    mode: _DumpMode | None,
    modules: ModuleRecorder | None,
    meta: dict[str, Any],
) -> None:
    """The dump's files, in the new directory ``path``."""
    from safetensors.numpy import save_file

    path.mkdir()
    ops = mode.ops if mode is not None else []
    tensors = mode.tensors if mode is not None else []
    saved = mode.saved if mode is not None else {}
    pl.DataFrame(ops, schema=OPS_SCHEMA).write_parquet(path / "ops.parquet", compression="zstd")
    _tensor_frame(tensors).write_parquet(path / "tensors.parquet", compression="zstd")
    files = ["ops.parquet", "tensors.parquet"]
    if modules is not None:
        pl.DataFrame(modules.calls, schema=MODULES_SCHEMA).write_parquet(
            path / "modules.parquet", compression="zstd"
        )
        _tensor_frame(modules.tensors).write_parquet(path / "module_tensors.parquet", compression="zstd")
        files += ["modules.parquet", "module_tensors.parquet"]
    if saved:
        save_file(saved, str(path / "tensors.safetensors"))
        files.append("tensors.safetensors")
    dtypes = {r.get("dtype", "") for r in tensors + (modules.tensors if modules is not None else [])}
    meta = {
        **meta,
        "format": FORMAT,
        "version": VERSION,
        "level": level,
        "ops": len(ops),
        "tensors": len(tensors),
        "modules": len(modules.calls) if modules is not None else 0,
        "dtypes": sorted(dtypes),
        "files": files,
        "saved_tensors": len(saved),
    }
    (path / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")


@contextmanager
def dump(
    path: str | os.PathLike[str],
    model: nn.Module | None = None,
    *,
    level: str = "all",
    tensors: Sequence[str] | bool = False,
    save_inputs: bool = True,
    check_inputs: bool = True,
    include: Sequence[str] = (),
    exclude: Sequence[str] = (),
    with_stack: bool = False,
    label: str | None = None,
) -> Iterator[Path]:
    """Record every ATen op, and every ``nn.Module`` call, run inside the block into ``path``.

    ``level`` is "all" (ops and modules), "op" or "module" (module calls only: no per-op
    cost, and a comparison that holds where two devices run different ops). Statistics are
    kept for every tensor; ``tensors`` (``True`` or op-name patterns such as ``["aten::gelu*"]``)
    also saves the full tensors of those ops. ``check_inputs`` records ops that write an input
    they should only read. The directory is written when the block exits, also when it raises
    (what ran so far is worth comparing).
    """
    if level not in LEVELS:
        raise UsageError(f"level must be one of {', '.join(LEVELS)}, not {level!r}")
    out = Path(path)
    tracker = ModuleTracker(model)
    mode = None
    stats = StatsCache()  # one for ops and modules: a module's input is an op's output
    if level != "module":
        selection = Tolerances(include=tuple(include), exclude=tuple(exclude))
        mode = _DumpMode(tracker, selection, with_stack, tensors, save_inputs, check_inputs, stats)
    modules = (
        ModuleRecorder(tracker, stats.stats, mode.paused if mode else nullcontext) if level != "op" else None
    )
    if mode is not None:
        mode.modules = modules
    started = time.time()
    try:
        with tracker, modules or nullcontext(), mode or nullcontext():
            yield out
    finally:
        meta = {
            "label": label or str(out.name),
            "torch": torch.__version__,
            "created_unix": int(started),
            "device": _device_name(),
        }
        write_dump(out, level, mode, modules, meta)


def _device_name() -> str:
    if torch.cuda.is_available():
        return f"cuda: {torch.cuda.get_device_name()}"
    return "cpu"
