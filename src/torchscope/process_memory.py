"""This process's resident memory: how much there is, and giving freed memory back.

Shared by live capture (after Kineto's results are saved) and the trace reader (between
phases), which both free large C allocations just before building large Polars ones.
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Callable
from functools import cache

# polars' allocator (jemalloc, built into polars) reads its options from this variable once,
# when polars loads; polars adds its own defaults in front of what it finds there
POLARS_ALLOCATOR_OPTIONS = "_RJEM_MALLOC_CONF"


def one_polars_arena() -> None:
    """Ask polars' allocator for one arena instead of four per core, if no one chose yet.

    Every thread that allocates gets an arena, and each arena keeps the pages its frees left
    until they decay (polars sets 0.5 s): a trace load frees ~100 MB of temporaries in a third
    of a second, so with the default arenas that garbage sits in several of them at once and
    sets the peak. One arena reuses it: the peak of loading
    ``nccl_rank1_of_2_profile_memory.json.gz`` fell from 239 to 225 MB and of a whole report
    from ~265 to ~230 MB, with load and report times unchanged on a 2-core machine. Small
    allocations still come from each thread's own cache; on many cores the large ones of a
    parallel query share the one arena's lock, which is why a user's setting is left alone.

    Does nothing when polars is already loaded (too late) or the user set the variable (their
    choice wins; set it to e.g. ``narenas:8`` to undo this).
    """
    if "polars" in sys.modules or POLARS_ALLOCATOR_OPTIONS in os.environ:
        return
    os.environ[POLARS_ALLOCATOR_OPTIONS] = "narenas:1"


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
