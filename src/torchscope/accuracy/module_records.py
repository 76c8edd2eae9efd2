"""Module-level records for a dump: each ``nn.Module`` call's inputs and outputs, both directions.

Why: two devices may run different ATen ops for the same model (a fused kernel, an extra cast)
while its modules stay the same. Module records align exactly, by module path and call number,
and say which module's result diverged even where the op sequences do not align.

Forward, a call records its positional tensor inputs (before it runs: it may modify them in
place) and its outputs. Backward, the same call records the gradients of its outputs (its
inputs, in backward) and the gradients it sends back to its inputs (its outputs, in backward).
Those must be this call's own contribution, not the sum over every use of the input (a
residual block's input also feeds the skip connection), so each floating input that requires
grad is handed to the module as an alias (``aten::alias``: a view, no copy, no op to record)
whose gradient hook sees exactly what flowed back through this call. A module that writes its
input in place (``ReLU(inplace=True)``: any module with ``inplace=True``) is not handed an
alias: writing a view makes autograd add copy ops to the backward pass, which would change
the ops recorded; it gets a forward record only. Tensor hooks, unlike
``register_full_backward_hook``, let the module modify its output in place afterwards (a
following ``ReLU(inplace=True)``): the hook still sees the gradient of the value the module
returned.

A record is numbered when its call completes: forward when the module returns, backward when
its last input gradient arrives. So children come before their parents, and the first
divergence in record order is the innermost module. A call inside which random numbers were
drawn (a ``Dropout`` in training, or any random op the op recorder saw) is marked "random" and
not compared, like a random op. A call none of whose inputs requires grad
(the first layer, fed the data) gets no backward record: it sends no gradient back.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from torchscope.accuracy.observer import measurable, tensor_leaves
from torchscope.accuracy.result import OK, RANDOM
from torchscope.accuracy.tracking import ModuleTracker

Stats = Callable[[torch.Tensor], dict[str, Any]]


@dataclass
class _Call:
    """One module call in progress: its identity and what has been measured so far."""

    module: str
    type: str
    call: int
    inputs: list[dict[str, Any]] = field(default_factory=list)
    outputs: list[dict[str, Any]] = field(default_factory=list)
    awaiting: int = 0  # backward: input gradients still to arrive
    random: bool = False  # random numbers were drawn inside: not comparable across runs


class ModuleRecorder:
    """Global module hooks that write module-level rows for a dump (``calls``, ``tensors``)."""

    def __init__(
        self,
        tracker: ModuleTracker,
        stats: Stats,
        quiet: Callable[[], AbstractContextManager[Any]] = nullcontext,
    ) -> None:
        self.tracker = tracker
        self._stats = stats
        self._quiet = quiet  # the op recorder's pause: our measuring is not the model's work
        self.calls: list[dict[str, Any]] = []  # rows of modules.parquet, in completion order
        self.tensors: list[dict[str, Any]] = []  # rows of module_tensors.parquet
        self._stack: list[tuple[_Call, _Call | None]] = []  # forward, and its backward if any
        self._counts: dict[str, int] = {}
        self._pending: list[_Call] = []  # backward calls still awaiting input gradients
        self._lock = threading.Lock()  # backward hooks may run on the autograd engine's threads
        self._handles: list[Any] = []
        self._active = False

    def __enter__(self) -> ModuleRecorder:
        from torch.nn.modules import module as m

        # registered after the tracker's hooks, so the tracker's path is current in ours
        self._handles = [
            # torch's stub says the hook returns None; a returned tuple replaces the arguments
            m.register_module_forward_pre_hook(self._pre),  # type: ignore[arg-type]
            m.register_module_forward_hook(self._post, always_call=True),
        ]
        self._active = True
        return self

    def __exit__(self, *exc: object) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []
        self._active = False
        with self._lock:  # calls whose gradients did not all arrive: what did arrive is kept
            for call in self._pending:
                if call.inputs or call.outputs:
                    self._finish(call, "backward")
            self._pending = []

    def stats(self, t: torch.Tensor) -> dict[str, Any]:
        with self._quiet():
            return self._stats(t)

    def _measure(self, values: list[torch.Tensor]) -> list[dict[str, Any]]:
        rows = []
        for pos, t in enumerate(values):
            if measurable(t):
                rows.append({**self.stats(t), "position": pos})
        return rows

    def _pre(self, mod: nn.Module, args: tuple[Any, ...]) -> tuple[Any, ...] | None:
        path = self.tracker.path
        n = self._counts.get(path, 0)
        self._counts[path] = n + 1
        kind = type(mod).__name__
        forward = _Call(path, kind, n, inputs=self._measure(tensor_leaves(args)))
        backward = None
        new_args: list[Any] = list(args)
        if torch.is_grad_enabled() and not getattr(mod, "inplace", False):
            backward = _Call(path, kind, n)
            for i, a in enumerate(args):
                if isinstance(a, torch.Tensor) and a.requires_grad and a.is_floating_point():
                    alias = torch.ops.aten.alias.default(a)
                    alias.register_hook(self._on_input_grad(backward, i))
                    new_args[i] = alias
                    backward.awaiting += 1
        self._stack.append((forward, backward))
        if "dropout" in kind.lower() and mod.training and getattr(mod, "p", 1.0) > 0:
            self.mark_random()  # seen without the op recorder too (level "module")
        return tuple(new_args) if backward is not None and backward.awaiting else None

    def mark_random(self) -> None:
        """Random numbers are being drawn now: every call in progress is not comparable."""
        for forward, backward in self._stack:
            forward.random = True
            if backward is not None:
                backward.random = True

    def _post(self, mod: nn.Module, args: Any, output: Any) -> None:
        if not self._stack:
            return
        forward, backward = self._stack.pop()
        outs = tensor_leaves(output)
        forward.outputs = self._measure(outs)
        with self._lock:
            self._finish(forward, "forward")
        if backward is None or not backward.awaiting:
            return  # no input requires grad: this call sends no gradient back
        for pos, t in enumerate(outs):
            if t.requires_grad:
                t.register_hook(self._on_output_grad(backward, pos))
        with self._lock:
            self._pending.append(backward)

    def _on_output_grad(self, call: _Call, pos: int) -> Callable[[torch.Tensor], None]:
        def hook(grad: torch.Tensor) -> None:
            if self._active and call.awaiting:
                row = {**self.stats(grad), "position": pos}
                with self._lock:
                    call.inputs.append(row)

        return hook

    def _on_input_grad(self, call: _Call, pos: int) -> Callable[[torch.Tensor], None]:
        def hook(grad: torch.Tensor) -> None:
            if not self._active or not call.awaiting:
                return
            row = {**self.stats(grad), "position": pos}
            with self._lock:
                call.outputs.append(row)
                call.awaiting -= 1
                if call.awaiting == 0 and call in self._pending:
                    self._pending.remove(call)
                    self._finish(call, "backward")

        return hook

    def _finish(self, call: _Call, direction: str) -> None:
        """Number a completed call and write its rows (the caller holds the lock)."""
        index = len(self.calls)
        self.calls.append(
            {
                "index": index,
                "module": call.module,
                "type": call.type,
                "call": call.call,
                "direction": direction,
                "status": RANDOM if call.random else OK,
            }
        )
        for role, rows in (("input", call.inputs), ("output", call.outputs)):
            for row in sorted(rows, key=lambda r: r["position"]):
                self.tensors.append({**row, "op_index": index, "role": role, "saved": False})
