"""What a load and a one-shot command set up before their work, and why (measured, 2 cores).

* **No cyclic garbage collection during a load.** Importing polars and NumPy and building the
  columns allocate hundreds of thousands of objects and no cycles worth collecting, so the
  collections Python runs meanwhile (full ones among them) are pure cost: ~5 % of a load's
  CPU by ``perf``, and -0.04 s median on loading ``nccl_rank1_of_2_profile_memory.json.gz``
  plus its table. Reference counting still frees everything; collection resumes after.
* **No OpenBLAS worker thread in a command that reads traces.** NumPy's OpenBLAS starts a
  thread per core at import that spins for ~0.1 s waiting for work; on 2 cores it took 8 % of
  a ``torchscope table`` run's CPU from the file's read and the imports it overlaps. We never
  multiply matrices there, so those commands ask for one BLAS thread (none spawned) unless
  the user chose a number. Not for ``torchscope run``, ``demo`` or ``accuracy``: they run the
  user's (or a model's) code, whose NumPy may need the threads. Nor on ``import torchscope``,
  which a training script does.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator
from contextlib import contextmanager

BLAS_THREADS = "OPENBLAS_NUM_THREADS"


@contextmanager
def gc_paused() -> Iterator[None]:
    """Cyclic garbage collection off inside the block (back on after, if it was on)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


@contextmanager
def command_without_gc(ends_process: bool) -> Iterator[None]:
    """``gc_paused`` for a command; when the process ends with it (the ``torchscope`` command
    itself, not a test calling ``main``), collection stays off and every object is frozen at
    the end, so that neither a collection on resuming nor the interpreter's last one at exit
    walks the hundreds of thousands of objects the imports made (~2 % of a ``table`` run)."""
    if not ends_process:
        with gc_paused():
            yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()


def one_blas_thread() -> None:
    """Ask OpenBLAS for no worker threads, if NumPy is not loaded yet and no one chose."""
    import sys

    if "numpy" in sys.modules or BLAS_THREADS in os.environ:
        return
    os.environ[BLAS_THREADS] = "1"
