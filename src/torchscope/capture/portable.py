"""The portable collector: profile any PyTorch device from public APIs, without Kineto.

A new accelerator (DIPU, MPS, a PrivateUse1 backend, XPU without PTI) has no CUPTI and no
Kineto plugin, so ``torch.profiler`` shows its host ops and nothing of the device. This
collector sees every ATen op that reaches the Python dispatch key (a ``TorchDispatchMode``),
times it on the host, and for ops on an accelerator brackets it with a pair of timing events
(``torch.Event(device, enable_timing=True)``) on the current stream. The events are resolved
in batches (``device_clock.EventBatcher``) and converted to the host clock with calibration
points (``device_clock.DeviceClock``). ``stop()`` returns a Kineto-format Chrome trace
document, so the reader turns it into the same ``Trace`` a Kineto capture gives.

Naming of what it writes (also in docs/portable.md):

* ``cpu_op``: one event per ATen op the mode sees, named like Kineto (``aten::addmm``).
* ``user_annotation``: ``record_function`` labels and ``ProfilerStep#N`` (seen as the op
  ``profiler::_record_function_enter_new`` and its exit).
* ``python_function``: ``nn.Module: Linear_0`` scopes when ``with_modules`` is on.
* ``cuda_runtime`` named ``portable::launch``: the host span in which the op was launched,
  inside its ``cpu_op``, carrying the ``correlation`` id.
* ``kernel`` named after the op (``aten::addmm``), on ``pid`` = device index and ``tid`` =
  stream id, with ``args.portable = 1``: the device time between the op's two events.
* ``gpu_user_annotation``: each label's span over the device work launched inside it.
* ``ac2g`` flows from the launch marker to the device event, ``id`` = ``correlation``.
* ``[memory]`` instant events (``profile_memory``): storages the ops created and their frees.
"""

from __future__ import annotations

import itertools
import sys
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from torchscope.capture.device_clock import EventBatcher, EventSource, TorchEventSource
from torchscope.errors import ProfilerStateError

_HOST_DEVICE_TYPES = frozenset({"cpu", "meta"})
# c10::DeviceType numbers, as Kineto writes them in "Device Type" of [memory] events.
_DEVICE_TYPE_CODES = {"cpu": 0, "cuda": 1, "hip": 6, "xla": 9, "xpu": 12, "mps": 13, "hpu": 15, "mtia": 19}
_STACK_DEPTH = 24
LAUNCH_MARKER = "portable::launch"
# Holding an idle device (``hold_idle_device``): the spin covers the op's host launch time of
# its last call, plus the start event's own record; capped, so that one slow call (cuDNN's
# autotuning, a first call's lazy loading) does not stall the device for its length.
HOLD_MARGIN_NS = 5_000
HOLD_FIRST_NS = 20_000
HOLD_MAX_NS = 1_000_000


class _ThreadState(threading.local):
    def __init__(self) -> None:
        self.tid = threading.get_native_id()
        self.modules: list[tuple[str, int]] = []  # (scope name, start_ns)


class PortableCollector:
    """Collect host ops, labels, module scopes and per-op device time through public APIs.

    ``start()`` then ``stop() -> dict`` (a Kineto-format Chrome trace document). Optional
    keywords are for tests and tuning: ``event_source`` builds the ``EventSource`` of a device
    (a fake one in tests), ``device_timing`` forces device events on or off (default: on when
    an accelerator is available), ``max_outstanding`` bounds unresolved event pairs per device.
    ``hold_idle_device`` (CUDA and ROCm only, off by default): when an op finds the device idle,
    a spin kernel as long as the op's last launch keeps the device busy until the op is queued,
    so that its pair times the op's work rather than the device's wait for the host; it makes
    per-op device time closer to Kineto's where the host is the bottleneck, and steps slower
    (docs/portable.md gives both).
    """

    def __init__(
        self,
        record_shapes: bool = False,
        with_stack: bool = False,
        profile_memory: bool = False,
        with_modules: bool = False,
        *,
        event_source: Callable[[Any], EventSource] | None = None,
        device_timing: bool | None = None,
        max_outstanding: int = 2048,
        hold_idle_device: bool = False,
    ) -> None:
        self.record_shapes = record_shapes
        self.with_stack = with_stack
        self.profile_memory = profile_memory
        self.with_modules = with_modules
        self._event_source = event_source
        self._device_timing = device_timing
        self.max_outstanding = max_outstanding
        self.hold_idle_device = hold_idle_device
        self._running = False
        self._mode: Any = None
        self._hooks: list[Any] = []
        self._reset()

    def _reset(self) -> None:
        self._tls = _ThreadState()
        self._lock = threading.Lock()
        self._ext = itertools.count(1)
        # (func, tid, t0, t1, inner0, inner1, ext, shapes, stack, device key, stream, corr)
        self._ops: list[tuple[Any, ...]] = []
        self._annotations: list[tuple[str, int, int, int, int]] = []  # name, tid, t0, t1, ext
        # labels open now, by thread and record_function handle: (name, start_ns, external id)
        self._open_labels: dict[tuple[int, int], tuple[str, int, int]] = {}
        self._scopes: list[tuple[str, int, int, int]] = []  # name, tid, t0, t1
        self._memory: list[tuple[int, int, int, int, int, int, int, int]] = []
        self._mem_total: dict[tuple[int, int], int] = {}
        self._live: dict[int, tuple[int, int]] = {}  # storage id -> (bytes, address), while alive
        self._finalizers: list[weakref.finalize] = []
        self._module_names: dict[int, str] = {}
        self._module_counts: dict[str, int] = {}
        self._batchers: dict[tuple[str, int], EventBatcher] = {}
        # devices whose idle waits are held (``hold_idle_device``), with [holds, ns held]
        self._holds: dict[tuple[str, int], list[int]] = {}
        self._launch_ns: dict[Any, int] = {}  # op -> host launch time of its last timed call
        self._capturing_skips = 0
        self._t_start = 0
        self._t_stop = 0
        self._epoch_at_start = 0

    # -- lifecycle ----------------------------------------------------------------------
    def start(self) -> None:
        if self._running:
            raise ProfilerStateError("PortableCollector.start() called twice")
        import torch
        from torch.utils._python_dispatch import TorchDispatchMode

        self._reset()
        self._torch = torch
        self._accel = self._accelerator()
        # tuples, not sets: ``in`` on a tuple compares identity first, while a set would call
        # OpOverload.__hash__ (Python code) for every op on the hot path
        self._enter_ops = (
            torch.ops.profiler._record_function_enter_new.default,
            torch.ops.profiler._record_function_enter.default,
        )
        exit_packet = torch.ops.profiler._record_function_exit
        self._exit_ops = tuple(getattr(exit_packet, o) for o in exit_packet.overloads())
        special = self._enter_ops + self._exit_ops
        # Ops that never put work on a stream: views (their schema says the output aliases an
        # input; ``OpOverload.is_view``) and allocations. An event pair around one would time
        # nothing but the pair itself, and on a starved device the host's gap before the next
        # op: Kineto shows them with no device time, and so do we.
        aten = torch.ops.aten
        self._no_device_work = (
            aten.empty,
            aten.empty_strided,
            aten.empty_like,
            aten.new_empty,
            aten.new_empty_strided,
        )
        fast = not (self.record_shapes or self.with_stack or self.profile_memory or self._accel is not None)
        on_op = self._on_op
        clock = time.perf_counter_ns
        native_tid = threading.get_native_id
        append = self._ops.append
        next_ext = self._ext.__next__

        class _Mode(TorchDispatchMode):
            @classmethod
            def ignore_compile_internals(cls) -> bool:
                # torch.compile runs the compiled artifact with the mode on (what it launches
                # is what the user pays for) and compiles with it off, instead of skipping
                # compilation altogether while a mode is active.
                return True

            def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
                if fast and func not in special:
                    # the common case, kept to the bare minimum: two clock reads and an append
                    t0 = clock()
                    out = func(*args, **kwargs) if kwargs else func(*args)
                    t1 = clock()
                    append((func, native_tid(), t0, t1, t0, t1, next_ext(), None, None, None, -1, -1))
                    return out
                return on_op(func, args, kwargs or {})

        _warm_dispatch(torch, TorchDispatchMode)
        self._epoch_at_start = time.time_ns()
        self._t_start = time.perf_counter_ns()
        if self._accel is not None:
            self._batcher_for(self._accel.type, self._accel.index or 0)
        if self.with_modules:
            from torch.nn.modules import module as nn_module

            self._hooks = [
                nn_module.register_module_forward_pre_hook(self._module_enter),
                nn_module.register_module_forward_hook(self._module_exit, always_call=True),
            ]
        self._mode = _Mode()
        self._mode.__enter__()
        self._running = True

    def check_stoppable(self) -> None:
        """Raise ``ProfilerStateError`` when ``stop()`` cannot run now, before anything changes:
        the caller can leave the user's mode and stop again (the profile was marked stopped
        first, its cycle lost and our mode left on the dispatch stack for good)."""
        if not self._running:
            raise ProfilerStateError("PortableCollector.stop() called before start()")
        top = _current_dispatch_mode()
        if top is not None and top is not self._mode:
            # dispatch modes are a stack: exiting ours now would pop the user's mode instead
            raise ProfilerStateError(
                f"PortableCollector.stop() inside another dispatch mode ({type(top).__name__}) "
                "entered after start(); stop the profiler outside it"
            )

    def stop(self) -> dict[str, Any]:
        self.check_stoppable()
        stopped = time.perf_counter_ns()  # where labels still open end
        self._mode.__exit__(None, None, None)
        self._mode = None
        for h in self._hooks:
            h.remove()
        self._hooks = []
        self._running = False
        for fin in self._finalizers:  # storages that outlive the session must not pin it
            fin.detach()
        self._finalizers = []
        for batcher in self._batchers.values():
            batcher.flush()
            batcher.calibrate()
        self._t_stop = time.perf_counter_ns()
        # labels still open end at stop, as Kineto ends them: a cycle that ends inside
        # ``Optimizer.step``'s label (`torchscope run`) keeps its last step's label
        for (tid, _), (name, t0, ext) in self._open_labels.items():
            self._annotations.append((name, tid, t0, stopped, ext))
        self._open_labels = {}
        return self._document()

    @property
    def running(self) -> bool:
        return self._running

    # -- the hot path -------------------------------------------------------------------
    def _accelerator(self) -> Any:
        if self._device_timing is False:
            return None
        acc = self._torch.accelerator
        if self._event_source is None and not acc.is_available():
            return None
        dev = acc.current_accelerator() if acc.is_available() else None
        if dev is None:  # an injected event source times host ops (tests, fakes)
            return self._torch.device("cpu") if self._event_source is not None else None
        return self._torch.device(dev.type, acc.current_device_index())

    def _batcher_for(self, dtype: str, index: int) -> EventBatcher:
        key = (dtype, index)
        batcher = self._batchers.get(key)
        if batcher is None:
            device = self._torch.device(dtype, index) if dtype != "cpu" else self._torch.device("cpu")
            source = (self._event_source or TorchEventSource)(device)
            batcher = EventBatcher(source, max_outstanding=self.max_outstanding)
            can_hold = getattr(source, "can_hold", None)
            if self.hold_idle_device and can_hold is not None and can_hold():
                source.hold(1)  # type: ignore[attr-defined]  # measures the spin now, not in an op
                self._holds[key] = [0, 0]
            batcher.calibrate()
            self._batchers[key] = batcher
        return batcher

    def _op_device(self, args: Any, kwargs: dict[str, Any]) -> Any:
        """The accelerator an op runs on: its first tensor off the host, else its ``device=``.

        A CPU scalar tensor may come first (``cpu_scalar + cuda_tensor``), so host tensors
        only count when nothing else is on a device.
        """
        tensor = self._torch.Tensor
        host = None
        for a in (*args, *kwargs.values()):
            t = a[0] if isinstance(a, (list, tuple)) and a else a
            if isinstance(t, tensor):
                dev = t.device
                if dev.type not in _HOST_DEVICE_TYPES:
                    return dev
                host = host or dev
        requested = kwargs.get("device")
        if requested is not None:
            return self._torch.device(requested)
        return host

    def _on_op(self, func: Any, args: Any, kwargs: dict[str, Any]) -> Any:
        clock = time.perf_counter_ns
        if func in self._enter_ops:
            return self._annotation_enter(func, args, kwargs)
        if func in self._exit_ops:
            return self._annotation_exit(func, args, kwargs)
        tls = self._tls
        ext = next(self._ext)
        shapes = self._describe(args, kwargs) if self.record_shapes else None
        stack = self._stack() if self.with_stack else None
        # an op writing into an input (``out=``, ``resize_``) may grow its storage: its size
        # before the op tells a new buffer from the same one
        before = self._storage_sizes(args, kwargs) if self.profile_memory and _aliased_returns(func) else None
        device = None
        if self._accel is not None and not (func.is_view or func._overloadpacket in self._no_device_work):
            dev = self._op_device(args, kwargs)
            if dev is not None and (dev.type not in _HOST_DEVICE_TYPES or self._event_source is not None):
                device = dev
        t0 = clock()
        if device is None:
            out = func(*args, **kwargs)
            t1 = clock()
            self._ops.append((func, tls.tid, t0, t1, t0, t1, ext, shapes, stack, None, -1, -1))
        else:
            out, record = self._timed(func, args, kwargs, device, ext, t0, shapes, stack)
            self._ops.append(record)
            t1 = record[3]
        if self.profile_memory:
            self._track_memory(func, out, t1 - 1 if t1 > t0 else t1, tls.tid, before)
        return out

    def _timed(
        self,
        func: Any,
        args: Any,
        kwargs: dict[str, Any],
        device: Any,
        ext: int,
        t0: int,
        shapes: Any,
        stack: Any,
    ) -> tuple[Any, tuple[Any, ...]]:
        clock = time.perf_counter_ns
        torch = self._torch
        index = device.index if device.index is not None else self._default_index(device)
        if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
            # events recorded during CUDA-graph capture become graph nodes that cannot be timed
            self._capturing_skips += 1
            out = func(*args, **kwargs)
            t1 = clock()
            return out, (func, self._tls.tid, t0, t1, t0, t1, ext, shapes, stack, None, -1, -1)
        batcher = self._batchers.get((device.type, index))
        if batcher is None:
            with self._lock:
                batcher = self._batcher_for(device.type, index)
        stream_id = self._stream_id(device)
        source = batcher.source
        held = self._holds.get((device.type, index))
        with self._lock:
            batcher.before_op()
            idle = held is not None and batcher.drained()
        if idle and held is not None:
            # the device finished everything queued: a pair started now would also time its
            # wait for the host to launch the op's kernels; a spin as long as that launch
            # keeps it busy until they are queued (docs/portable.md)
            ns = min(self._launch_ns.get(func, HOLD_FIRST_NS), HOLD_MAX_NS) + HOLD_MARGIN_NS
            source.hold(ns)  # type: ignore[attr-defined]
            held[0] += 1
            held[1] += ns
        # the launch span opens before the start event is recorded: on an idle device that
        # event runs at once, and a span opened after it had the device start ~1 µs before its
        # launch ("host and device clocks disagree" on 309 of 444 pairs, on an H200)
        inner0 = clock()
        start = source.record()
        out = func(*args, **kwargs)
        inner1 = clock()
        end = source.record()
        self._launch_ns[func] = inner1 - inner0
        with self._lock:  # autograd may run backward ops on its own device threads
            batcher.push(ext, start, end)
        t1 = clock()
        return out, (
            func,
            self._tls.tid,
            t0,
            t1,
            inner0,
            inner1,
            ext,
            shapes,
            stack,
            (device.type, index),
            stream_id,
            ext,
        )

    def _default_index(self, device: Any) -> int:
        if device.type == "cpu":
            return 0
        try:
            return int(self._torch.accelerator.current_device_index())
        except (RuntimeError, AttributeError):
            return 0

    def _stream_id(self, device: Any) -> int:
        if device.type == "cpu":
            return 0
        try:
            return int(self._torch.accelerator.current_stream(device).stream_id)
        except (RuntimeError, AttributeError):
            return 0

    # -- record_function labels and module scopes -----------------------------------------
    def _annotation_enter(self, func: Any, args: Any, kwargs: dict[str, Any]) -> Any:
        name = str(args[0]) if args else str(kwargs.get("name", ""))
        t0 = time.perf_counter_ns()
        handle = func(*args, **kwargs)
        self._open_labels[(self._tls.tid, _handle_key(handle))] = (name, t0, next(self._ext))
        return handle

    def _annotation_exit(self, func: Any, args: Any, kwargs: dict[str, Any]) -> Any:
        out = func(*args, **kwargs)
        t1 = time.perf_counter_ns()
        tls = self._tls
        # the label its handle opened, not the newest: labels need not close in order (a
        # ``step()`` called from inside ``Optimizer.step``'s label, as `torchscope run` does,
        # closes the step's label first); one entered before start() has no start: dropped
        handle = args[0] if args else kwargs.get("handle")
        opened = self._open_labels.pop((tls.tid, _handle_key(handle)), None)
        if opened is not None:
            name, t0, ext = opened
            self._annotations.append((name, tls.tid, t0, t1, ext))
        return out

    def _module_enter(self, module: Any, inputs: Any) -> None:
        key = id(module)
        name = self._module_names.get(key)
        if name is None:
            cls = type(module).__name__
            n = self._module_counts.get(cls, 0)
            self._module_counts[cls] = n + 1
            name = self._module_names[key] = f"nn.Module: {cls}_{n}"
        self._tls.modules.append((name, time.perf_counter_ns()))

    def _module_exit(self, module: Any, inputs: Any, output: Any) -> None:
        t1 = time.perf_counter_ns()
        tls = self._tls
        if tls.modules:
            name, t0 = tls.modules.pop()
            self._scopes.append((name, tls.tid, t0, t1))

    # -- shapes, stacks, memory -----------------------------------------------------------
    def _describe(self, args: Any, kwargs: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
        tensor = self._torch.Tensor
        return [_describe_value(a, tensor) for a in args], {
            k: _describe_value(v, tensor) for k, v in kwargs.items()
        }

    def _stack(self) -> tuple[tuple[str, int, str], ...]:
        frames: list[tuple[str, int, str]] = []
        f: Any = sys._getframe(3)
        while f is not None and len(frames) < _STACK_DEPTH:
            code = f.f_code
            filename = code.co_filename
            if "/torch/" not in filename and "torchscope/capture" not in filename:
                frames.append((filename, f.f_lineno, code.co_name))
            f = f.f_back
        return tuple(frames)

    def _storage_sizes(self, args: Any, kwargs: dict[str, Any]) -> dict[int, int]:
        """The bytes of each input tensor's storage, by storage id."""
        sizes: dict[int, int] = {}
        for a in (*args, *kwargs.values()):
            for t in a if isinstance(a, (list, tuple)) else (a,):
                storage = self._storage_of(t)
                if storage is not None:
                    sizes[id(storage)] = int(storage.nbytes())
        return sizes

    def _storage_of(self, value: Any) -> Any:
        """The storage of a tensor that has one (not ``meta``, not a wrapper without it), else None."""
        if not isinstance(value, self._torch.Tensor) or value.device.type == "meta":
            return None
        try:
            return value.untyped_storage()
        except (RuntimeError, NotImplementedError):
            return None

    def _track_memory(self, func: Any, out: Any, ts: int, tid: int, before: dict[int, int] | None = None) -> None:
        outs = out if isinstance(out, (list, tuple)) else (out,)
        # an output its schema says aliases an input (``mul_``'s self, an ``out=``, a view) is
        # no new storage, unless the op grew it (``before``: the inputs' sizes): one made
        # before start() was taken for the op's allocation
        aliased = _aliased_returns(func)
        for i, t in enumerate(outs):
            storage = self._storage_of(t)
            if storage is None:
                continue
            key = id(storage)
            nbytes = int(storage.nbytes())
            if i in aliased:
                old = (before or {}).get(key)
                if old is None or nbytes <= old:
                    continue
            elif key in self._live:
                continue
            addr = int(storage.data_ptr())
            dev = t.device
            dtype_code = _DEVICE_TYPE_CODES.get(dev.type, 20)  # renamed PrivateUse1 backends: 20
            dev_id = -1 if dev.type == "cpu" else (dev.index or 0)
            was = self._live.get(key)
            self._live[key] = (nbytes, addr)
            self._memory_event(ts, tid, dtype_code, dev_id, addr, nbytes)
            if was is None:
                self._finalizers.append(weakref.finalize(storage, self._memory_free, key, tid, dtype_code, dev_id))
            elif was[0]:  # grown: a new buffer, then the old one freed (as the allocator, and Kineto)
                self._memory_event(ts, tid, dtype_code, dev_id, was[1], -was[0])

    def _memory_event(self, ts: int, tid: int, dtype_code: int, dev_id: int, addr: int, nbytes: int) -> None:
        total = self._mem_total.get((dtype_code, dev_id), 0) + nbytes
        self._mem_total[(dtype_code, dev_id)] = total
        reserved = 0
        if dtype_code != 0:  # on a device, the allocator's own counters beat our running sum
            try:
                acc = self._torch.accelerator
                total = int(acc.memory_allocated(dev_id))
                reserved = int(acc.memory_reserved(dev_id))
            except (RuntimeError, AttributeError, TypeError, ValueError):
                pass
        self._memory.append((ts, tid, dtype_code, dev_id, addr, nbytes, total, reserved))

    def _memory_free(self, key: int, tid: int, dtype_code: int, dev_id: int) -> None:
        live = self._live.pop(key, None)  # its size and address now (an op may have grown it)
        if live is None or not self._running:
            return
        self._memory_event(time.perf_counter_ns(), tid, dtype_code, dev_id, live[1], -live[0])

    # -- the document -------------------------------------------------------------------
    def _document(self) -> dict[str, Any]:
        from torchscope.capture.portable_doc import build_document

        return build_document(self)


def _aliased_returns(func: Any) -> frozenset[int]:
    """The positions of the op's outputs that alias an input, by its schema (cached per op)."""
    got = _ALIASED.get(func)
    if got is None:
        try:
            returns = func._schema.returns
        except AttributeError:
            returns = []
        got = _ALIASED[func] = frozenset(i for i, r in enumerate(returns) if r.alias_info is not None)
    return got


_ALIASED: dict[Any, frozenset[int]] = {}


def _handle_key(handle: Any) -> int:
    """The same key for a record_function handle at its enter and its exit: the dispatcher
    hands the exit a new Python wrapper of the handle, whose hash is the C++ object's."""
    try:
        return hash(handle)
    except TypeError:
        return id(handle)


def _describe_value(v: Any, tensor: Any) -> tuple[Any, ...]:
    """A compact, reference-free description of one op input, formatted at stop()."""
    if isinstance(v, tensor):
        return ("T", tuple(v.shape), v.dtype, _strides(v))
    if isinstance(v, (list, tuple)):
        if v and isinstance(v[0], tensor):
            ts = [t for t in v if isinstance(t, tensor)]
            return ("TL", [tuple(t.shape) for t in ts], [_strides(t) for t in ts])
        return ("SL", str(list(v)))
    if v is None:
        return ("N",)
    if isinstance(v, (bool, int, float, complex)):
        return ("S", str(v))
    return ("O", str(v))


_WARM = False


def _current_dispatch_mode() -> Any:
    """The innermost active TorchDispatchMode, or None when torch cannot tell us."""
    try:
        from torch.utils._python_dispatch import _get_current_dispatch_mode
    except ImportError:  # pragma: no cover - older or newer torch without the helper
        return None
    return _get_current_dispatch_mode()


def _warm_dispatch(torch: Any, mode_type: Any) -> None:
    """Pay, before the clock starts, the one-time cost of the first op under a dispatch mode.

    The first op dispatched to Python in a process imports and initializes seconds' worth of
    torch machinery; inside the session it would show up as one absurdly long first op.
    """
    global _WARM
    if _WARM:
        return

    class _Noop(mode_type):  # type: ignore[misc, valid-type]
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            return func(*args, **(kwargs or {}))

    with _Noop():
        torch.zeros(1).add_(1)
    _WARM = True


def _strides(t: Any) -> tuple[int, ...]:
    try:
        return tuple(t.stride())
    except (RuntimeError, NotImplementedError):  # sparse and other layouts without strides
        return ()
