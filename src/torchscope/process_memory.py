"""This process's resident memory: how much there is, and giving freed memory back.

Shared by live capture (after Kineto's results are saved) and the trace reader (between
phases), which both free large C allocations just before building large Polars ones.
"""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Callable
from functools import cache


def rss_mb() -> float | None:
    """This process's resident memory in MB (Linux; None elsewhere)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def return_free_memory() -> None:
    """Hand memory freed to C's heap back to the OS (glibc ``malloc_trim``; no-op elsewhere).

    Large blocks freed by C code (Kineto's results, the JSON text, the scanner's column buffers)
    otherwise stay resident: glibc serves blocks below its adaptive mmap threshold from a heap it
    rarely shrinks, and Polars allocates from its own (jemalloc), so neither Python nor Polars
    reuses them and the peak becomes their sum instead of about the larger.
    """
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, looked up once; None where there is none (musl, macOS, Windows).

    The C library already loaded into the process is asked for it (``CDLL(None)``), not found by
    name: ``ctypes.util.find_library`` runs ``ldconfig`` and cost 8 ms per call.
    """
    if not sys.platform.startswith("linux"):
        return None
    try:
        trim: Callable[[int], int] = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # musl: no malloc_trim
        return None
    return trim
