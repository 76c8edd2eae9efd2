"""Zero-code redirection: a script's (or its framework's) ``torch.profiler`` becomes torchscope's.

``install()`` replaces, in this process only, the names frameworks reach for when they profile:
``torch.profiler.profile`` (and ``torch.profiler.profiler.profile``), ``torch.profiler.schedule``,
``torch.profiler.tensorboard_trace_handler`` and ``torch.autograd.profiler.profile`` (the legacy
context manager, with its ``enabled=`` switch and ``function_events``). Lightning's
``Trainer(profiler="pytorch")``, ``accelerate``'s ``accelerator.profile()`` and a script's own
``with torch.profiler.profile(...)`` then get our speed, our traces and their own output files
where they always were. ``record_function`` needs no replacing: it is torch's, and our profiler
records it. ``uninstall()`` puts torch's names back.

``torchscope run`` installs it before the script runs; ``torchscope.install()`` does it by hand;
``TORCHSCOPE_REDIRECT=1`` in the environment does it when ``torchscope`` is imported (for a
launcher that starts plain ``python``). Code that bound torch's class before the install
(``from torch.profiler import profile`` in a module imported earlier) keeps torch's.

Nesting: two profilers cannot record at once (Kineto's session is one per thread; torch's
profiler started inside another's session ended in a segmentation fault). A profiler that
starts while a *host* (the ``torchscope run`` session) is registered asks the host first; the
host stops its own recording, keeps a copy of each cycle the script's profiler finishes, and
says so in its report: one recording, never two.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from typing import Any

from torchscope.capture.profiler import profile

# name -> (module, attribute) -> torch's original; filled by install()
_ORIGINALS: dict[tuple[str, str], Any] = {}
_HOSTS: list[Callable[[Any], None]] = []  # called with a profiler about to record (see set_host)

ENV_VAR = "TORCHSCOPE_REDIRECT"


def installed() -> bool:
    """Whether torch's profiler names are torchscope's in this process."""
    return bool(_ORIGINALS)


def torch_original(module: str, name: str) -> Any:
    """torch's own ``module.name``, installed or not (our Kineto session drives torch's
    ``torch.autograd.profiler.profile``, never its replacement)."""
    import importlib

    original = _ORIGINALS.get((module, name))
    return original if original is not None else getattr(importlib.import_module(module), name)


def install() -> None:
    """Make ``torch.profiler``'s profiler, schedule and trace handler (and the legacy
    ``torch.autograd.profiler.profile``) torchscope's, for this process; idempotent."""
    if _ORIGINALS:
        return
    import torch.autograd.profiler as autograd_profiler
    import torch.profiler
    import torch.profiler.profiler

    from torchscope.capture import profiler as ours
    from torchscope.capture.handlers import tensorboard_trace_handler
    from torchscope.capture.schedule import schedule

    replacements: list[tuple[Any, str, Any]] = [
        (torch.profiler, "profile", ours.profile),
        (torch.profiler.profiler, "profile", ours.profile),
        (torch.profiler, "schedule", schedule),
        (torch.profiler.profiler, "schedule", schedule),
        (torch.profiler, "tensorboard_trace_handler", tensorboard_trace_handler),
        (torch.profiler.profiler, "tensorboard_trace_handler", tensorboard_trace_handler),
        (autograd_profiler, "profile", AutogradProfile),
        (torch.autograd, "_disable_profiler", _disable_profiler),
    ]
    for module, name, value in replacements:
        _ORIGINALS[(module.__name__, name)] = getattr(module, name)
        setattr(module, name, value)
    ours.PREPARE_HOOKS.append(_ask_hosts)


def uninstall() -> None:
    """Put torch's own names back."""
    import importlib

    from torchscope.capture import profiler as ours

    for (module_name, name), value in _ORIGINALS.items():
        setattr(importlib.import_module(module_name), name, value)
    _ORIGINALS.clear()
    if _ask_hosts in ours.PREPARE_HOOKS:
        ours.PREPARE_HOOKS.remove(_ask_hosts)


@contextlib.contextmanager
def redirected() -> Iterator[None]:
    """torch's profiler names are ours inside the block (as they were after it, if installed)."""
    already = installed()
    if not already:
        install()
    try:
        yield
    finally:
        if not already:
            uninstall()


def install_from_environment() -> bool:
    """``install()`` when ``TORCHSCOPE_REDIRECT`` is set to something other than 0/false/no."""
    value = os.environ.get(ENV_VAR, "").strip().lower()
    if value and value not in ("0", "false", "no", "off"):
        install()
        return True
    return False


def add_host(on_profiler: Callable[[Any], None]) -> None:
    """Register the session that owns recording in this process (``torchscope run``): it is
    called with every other profiler about to record, before that one starts."""
    from torchscope.capture import profiler as ours

    _HOSTS.append(on_profiler)
    if _ask_hosts not in ours.PREPARE_HOOKS:
        ours.PREPARE_HOOKS.append(_ask_hosts)


# What the hosts are called with when torch's own profiler (not redirected) is about to prepare
TORCH_PROFILER = object()
# set on the torch profiler objects our own sessions drive (``capture.kineto``): not the script's
OWNED = "_torchscope_owned"
_GUARDED: list[Any] = []  # torch's own ``_prepare_trace`` while guarded


def guard_torch_profiler() -> None:
    """Without ``install()`` (``torchscope run --no-redirect``): torch's names stay torch's, but
    its profiler asks the hosts before it prepares Kineto, so that the host's recording stops
    first: a second Kineto session beside ours ended in a segmentation fault. Idempotent."""
    import torch.autograd.profiler as autograd_profiler

    if _GUARDED:
        return
    original = autograd_profiler.profile._prepare_trace

    def _prepare_trace(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not getattr(self, OWNED, False):
            _ask_hosts(TORCH_PROFILER)
        return original(self, *args, **kwargs)

    _GUARDED.append(original)
    autograd_profiler.profile._prepare_trace = _prepare_trace  # type: ignore[method-assign]


def unguard_torch_profiler() -> None:
    import torch.autograd.profiler as autograd_profiler

    if _GUARDED:
        autograd_profiler.profile._prepare_trace = _GUARDED.pop()  # type: ignore[method-assign]


def remove_host(on_profiler: Callable[[Any], None]) -> None:
    if on_profiler in _HOSTS:
        _HOSTS.remove(on_profiler)


def _ask_hosts(prof: Any) -> None:
    for host in list(_HOSTS):
        host(prof)


def _disable_profiler() -> Any:
    """``torch.autograd._disable_profiler`` for code that switches off whatever profiler is on
    before starting its own (Lightning's ``PyTorchProfiler.start``): a host's recording is
    stopped by the host, cleanly (Kineto's session pulled from under our profiler ended in a
    segmentation fault); any other session is torch's to end."""
    import torch

    from torchscope.capture import profiler as ours

    if _HOSTS and ours._RECORDING:
        for host in list(_HOSTS):
            host(None)
        if not torch.autograd._profiler_enabled():
            return None
    return _ORIGINALS[("torch.autograd", "_disable_profiler")]()


class AutogradProfile(profile):
    """``torch.autograd.profiler.profile``'s constructor over our profiler: one cycle from
    ``__enter__`` to ``__exit__``; ``enabled=False`` records nothing, as torch's."""

    def __init__(
        self,
        enabled: bool = True,
        *,
        use_cuda: bool = False,
        use_device: str | None = None,
        record_shapes: bool = False,
        with_flops: bool = False,
        profile_memory: bool = False,
        with_stack: bool = False,
        with_modules: bool = False,
        use_kineto: bool = False,
        use_cpu: bool = True,
        experimental_config: Any = None,
        acc_events: bool = False,
        custom_trace_id_callback: Callable[[], str] | None = None,
        **_ignored: Any,
    ) -> None:
        from torch.profiler import ProfilerActivity

        activities = [ProfilerActivity.CPU] if use_cpu else []
        device = use_device or ("cuda" if use_cuda else None)
        if device is not None and hasattr(ProfilerActivity, device.upper()):
            activities.append(getattr(ProfilerActivity, device.upper()))
        self.enabled = enabled
        super().__init__(
            activities=activities or [ProfilerActivity.CPU],
            record_shapes=record_shapes,
            with_flops=with_flops,
            profile_memory=profile_memory,
            with_stack=with_stack,
            with_modules=with_modules,
            experimental_config=experimental_config,
            acc_events=acc_events,
            custom_trace_id_callback=custom_trace_id_callback,
        )

    def __enter__(self) -> AutogradProfile:
        if self.enabled:
            self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.enabled:
            super().__exit__(*exc)

    @property
    def function_events(self) -> Any:
        """torch's name for the recorded events."""
        return self.events()
