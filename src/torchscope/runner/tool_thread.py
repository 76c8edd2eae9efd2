"""The threads ``torchscope run`` runs beside the script (the stack sampler, the memory-cap
watcher), made so that a trace can tell them from the script's.

Why: with ``with_stack``, torch's Python tracer records every Python thread alive when a cycle
starts, ours included. A thread that made a call during the cycle is named by its native id,
which each cycle lists (``dialect.TOOL_THREADS_KEY``) and the reader leaves out. A thread that
made none (the cap's watcher sleeps 50 ms; a cycle of small steps is shorter) has only the
frames it was in when the cycle started, written with tid 0, where any idle thread's land too.
So a tool thread waits with no Python frame of anyone else's above it: started by ``_thread``
(no ``threading.py`` bootstrap frames) and waiting in a C call (``lock.acquire``), its frames
at any moment are ours alone, in ``torchscope/runner/``, and the reader can leave those out
whatever their tid (``dialect.TOOL_FRAME_PATTERN``: keep the loops in the modules it names).
"""

from __future__ import annotations

import _thread
import functools
import threading
from collections.abc import Callable


class ToolThread:
    """Runs ``loop(stopped)`` on a thread of its own, where ``stopped()`` waits up to
    ``interval_s`` and says whether ``stop()`` was called (a C call: no Python frame)."""

    def __init__(self, loop: Callable[[Callable[[], bool]], None], interval_s: float) -> None:
        self._loop = loop
        self._stop_lock = _thread.allocate_lock()
        self._stop_lock.acquire()  # held until stop(): acquiring it again is the wait
        self._ended = _thread.allocate_lock()
        self._stopped = functools.partial(self._stop_lock.acquire, True, interval_s)
        self._stop_asked = False
        self.native_id: int | None = None  # set once the thread runs (``start`` waits for it)

    def start(self) -> None:
        started = _thread.allocate_lock()
        started.acquire()
        self._ended.acquire()
        _thread.start_new_thread(self._run, (started,))
        started.acquire()  # the thread has said its native id

    def _run(self, started: _thread.LockType) -> None:
        self.native_id = threading.get_native_id()
        started.release()
        try:
            self._loop(self._stopped)
        finally:
            self._ended.release()

    def stop(self, timeout: float | None = None) -> None:
        """Ask the loop to end and wait for it (at most ``timeout`` seconds: None, no limit)."""
        if self.native_id is None or self._stop_asked:
            return
        self._stop_asked = True
        self._stop_lock.release()
        if self._ended.acquire(True, -1 if timeout is None else timeout):
            self._ended.release()
