"""This process's resident memory: how much there is, and giving freed memory back.

Shared by live capture (after Kineto's results are saved) and the trace reader (between
phases), which both free large C allocations just before building large Polars ones.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys


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
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.malloc_trim(0)
    except (OSError, AttributeError):  # musl or no libc: nothing to do
        pass
