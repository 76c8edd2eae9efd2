"""Where an ATen op came from: its module path, forward or backward, and its Python call site.

Both comparison modes see ops through a ``TorchDispatchMode``, which knows the op but not the
``nn.Module`` that issued it. ``ModuleTracker`` keeps a stack of module paths through global
forward pre/post hooks (paths as ``model.named_modules()`` spells them, ``""`` for the root).
Backward ops run long after the module returned, inside the autograd engine: when a module's
forward finishes we walk the autograd graph back from its outputs and tag every node created
during that forward with the module's path; the engine's current node then names the module of
each backward op (innermost module wins because children finish, and tag, first).
"""

from __future__ import annotations

import os
import traceback
import weakref
from typing import Any

import torch
from torch import nn

# frames from these directories are machinery, not the user's code (torchscope's example
# models are user code here: they are what the tests and the demo compare)
_SKIP_DIRS = (
    os.path.dirname(os.path.abspath(torch.__file__ or "")) + os.sep,
    os.path.dirname(os.path.abspath(__file__)) + os.sep,
)


def call_site() -> str | None:
    """``file:line in function`` of the innermost frame outside torch and torchscope.accuracy."""
    for frame in reversed(traceback.extract_stack(limit=64)):
        path = os.path.abspath(frame.filename)
        if path.startswith(_SKIP_DIRS) or "contextlib" in path:
            continue
        return f"{frame.filename}:{frame.lineno} in {frame.name}"
    return None


def current_node() -> Any | None:
    """The autograd node the engine is running now, or None in forward code."""
    return torch._C._current_autograd_node()


class ModuleTracker:
    """Global module hooks that know the module path of the op running now, forward or backward."""

    def __init__(self, model: nn.Module | None = None) -> None:
        self._names: weakref.WeakKeyDictionary[nn.Module, str] = weakref.WeakKeyDictionary()
        if model is not None:
            for name, mod in model.named_modules(remove_duplicate=False):
                self._names.setdefault(mod, name)
        self._stack: list[str] = []
        self._stack_mods: list[nn.Module] = []
        self._node_paths: dict[Any, str] = {}
        self._handles: list[Any] = []

    def __enter__(self) -> ModuleTracker:
        from torch.nn.modules import module as m

        self._handles = [
            m.register_module_forward_pre_hook(self._pre),
            m.register_module_forward_hook(self._post, always_call=True),
        ]
        return self

    def __exit__(self, *exc: object) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []

    def _name(self, mod: nn.Module) -> str:
        name = self._names.get(mod)
        if name is not None:
            return name
        parent = self._stack[-1] if self._stack else None
        name = ""
        if parent is not None and self._stack_mods:
            for child_name, child in self._stack_mods[-1].named_children():
                if child is mod:
                    name = f"{parent}.{child_name}" if parent else child_name
                    break
            else:
                name = parent
        self._names[mod] = name
        return name

    def _pre(self, mod: nn.Module, args: Any) -> None:
        name = self._name(mod)
        self._stack.append(name)
        self._stack_mods.append(mod)

    def _post(self, mod: nn.Module, args: Any, output: Any) -> None:
        if not self._stack:
            return
        path = self._stack.pop()
        self._stack_mods.pop()
        if torch.is_grad_enabled():
            self._tag(output, path)

    def _tag(self, output: Any, path: str) -> None:
        roots = [t.grad_fn for t in _tensors(output) if t.grad_fn is not None]
        todo = list(roots)
        while todo:
            node = todo.pop()
            if node is None or node in self._node_paths:
                continue
            self._node_paths[node] = path
            todo.extend(n for n, _ in node.next_functions if n is not None)

    @property
    def path(self) -> str:
        """The module path of a forward op issued now."""
        return self._stack[-1] if self._stack else ""

    def backward_path(self, node: Any) -> str:
        return self._node_paths.get(node, "")


def _tensors(obj: Any) -> list[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (list, tuple)):
        return [t for o in obj for t in _tensors(o)]
    if isinstance(obj, dict):
        return [t for o in obj.values() for t in _tensors(o)]
    return []
