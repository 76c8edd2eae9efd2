"""The part of a ``TorchDispatchMode`` both comparison modes share: which ops to record and how
to describe them (name, overload, module path, direction, call site, input shapes and dtypes).

An op is *recorded* unless it is a view (a view cannot compute anything wrong: it aliases its
input) or the user's include/exclude patterns drop it. A recorded op is *compared* unless it
draws random numbers or returns uninitialized memory (``empty*``); those get a status instead.
Live compare and dump number recorded ops the same way, so op ``#n`` means the same op in both.
"""

from __future__ import annotations

import fnmatch
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from torchscope.accuracy.result import RANDOM, SKIPPED, OpResult
from torchscope.accuracy.tolerance import Tolerances, is_random
from torchscope.accuracy.tracking import ModuleTracker, call_site, current_node

_UNINITIALIZED = ("aten::empty*", "aten::new_empty*", "aten::empty_like*", "aten::_empty*")


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def leaves(obj: Any) -> list[Any]:
    """The leaves of an op's arguments or outputs (tuples, lists, dicts of values).

    ATen arguments nest only these containers; a plain recursion is several times faster than
    torch's general pytree, and it runs for every op.
    """
    if isinstance(obj, (list, tuple)):
        return [leaf for o in obj for leaf in leaves(o)]
    if isinstance(obj, dict):
        return [leaf for o in obj.values() for leaf in leaves(o)]
    return [obj]


def map_leaves(fn: Callable[[Any], Any], obj: Any) -> Any:
    """``obj`` with ``fn`` applied to every leaf, containers rebuilt as they were."""
    if isinstance(obj, tuple):
        return tuple(map_leaves(fn, o) for o in obj)
    if isinstance(obj, list):
        return [map_leaves(fn, o) for o in obj]
    if isinstance(obj, dict):
        return {k: map_leaves(fn, v) for k, v in obj.items()}
    return fn(obj)


def tensor_leaves(obj: Any) -> list[torch.Tensor]:
    return [t for t in leaves(obj) if isinstance(t, torch.Tensor)]


# same-size integer dtypes, by element size: tensors are compared or summed bit for bit through
# these (live compare's in-place check, a dump's fingerprint)
SAME_SIZE_INTS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _on_meta(x: Any) -> bool:
    """A tensor on, or a device argument naming, the meta device (shapes without data)."""
    if isinstance(x, torch.Tensor):
        return x.device.type == "meta"
    return isinstance(x, torch.device) and x.type == "meta"


def measurable(t: torch.Tensor) -> bool:
    """Whether a dump records statistics of ``t``: real values that exist (not complex, not on
    the meta device, which has shapes but no data)."""
    return not t.is_complex() and t.device.type != "meta"


# legacy schemas that write arguments without declaring it: not a bug of the target
_UNDECLARED_WRITES: dict[str, tuple[str, ...]] = {
    "aten::native_batch_norm": ("running_mean", "running_var"),
    "aten::_batch_norm_impl_index": ("running_mean", "running_var"),
    "aten::cudnn_batch_norm": ("running_mean", "running_var"),
    "aten::miopen_batch_norm": ("running_mean", "running_var"),
    "aten::batch_norm": ("running_mean", "running_var"),
}


def readonly_arguments(
    func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> list[tuple[str, int | str, Any]]:
    """The arguments an op must not write: ``(name, position or keyword, value)`` for each.

    An argument may be written when the schema says so (``Tensor(a!)``) or when it is one of
    the few legacy schemas that write without saying (batch norm's running statistics).
    Both comparison modes check these after the op: a kernel that scribbles over its input
    is wrong even when its output is right.
    """
    allowed = _UNDECLARED_WRITES.get(func._schema.name, ())
    out: list[tuple[str, int | str, Any]] = []
    for i, arg in enumerate(func._schema.arguments):
        if (arg.alias_info is not None and arg.alias_info.is_write) or arg.name in allowed:
            continue
        if i < len(args):
            out.append((arg.name, i, args[i]))
        elif arg.name in kwargs:
            out.append((arg.name, arg.name, kwargs[arg.name]))
    return out


class OpObserver(TorchDispatchMode):
    """Numbers and describes ATen ops; subclasses decide what to do with each one."""

    def __init__(
        self, tracker: ModuleTracker, tolerances: Tolerances, with_stack: bool, include_views: bool = False
    ) -> None:
        super().__init__()
        self.tracker = tracker
        self.tolerances = tolerances
        self.with_stack = with_stack
        self.include_views = include_views
        self.count = 0
        # per thread: backward hooks may measure on an autograd engine thread while the mode,
        # which autograd carries to its threads, sees another thread's ops
        self._pause_state = threading.local()

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Ops this thread runs inside the block are not recorded (our own measuring, from
        module hooks)."""
        was = getattr(self._pause_state, "paused", False)
        self._pause_state.paused = True
        try:
            yield
        finally:
            self._pause_state.paused = was

    def describe(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> OpResult | None:
        """An ``OpResult`` for this op with its identity filled in, or None to let it run unseen."""
        if (func.is_view and not self.include_views) or getattr(self._pause_state, "paused", False):
            return None
        name = func._schema.name
        node = current_node()
        if node is not None:
            direction, module, grad_fn = "backward", self.tracker.backward_path(node), node.name()
        else:
            direction, module, grad_fn = "forward", self.tracker.path, None
        if not self.tolerances.selected(name, func._overloadname, module):
            return None
        inputs = tensor_leaves((args, kwargs))
        rec = OpResult(
            index=self.count,
            op=name,
            overload=func._overloadname,
            module=module,
            direction=direction,
            grad_fn=grad_fn,
            call_site=call_site() if self.with_stack and direction == "forward" else None,
            input_shapes=[list(t.shape) for t in inputs],
            dtypes=[dtype_name(t.dtype) for t in inputs],
        )
        self.count += 1
        if is_random(name) or torch.Tag.nondeterministic_seeded in func.tags:
            rec.status, rec.note = RANDOM, "draws random numbers: output not compared"
        elif any(fnmatch.fnmatchcase(name, p) for p in _UNINITIALIZED):
            rec.status, rec.note = SKIPPED, "returns uninitialized memory"
        elif any(_on_meta(x) for x in leaves((args, kwargs))):
            rec.status, rec.note = SKIPPED, "meta tensors hold no values"
        return rec
