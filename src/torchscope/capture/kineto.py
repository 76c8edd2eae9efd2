"""The bridge to PyTorch's own collector: one Kineto (or portable) session per profiling cycle.

Collection is PyTorch's: we drive ``torch.autograd.profiler.profile``'s ``_prepare_trace``,
``_start_trace`` and ``__exit__`` exactly as ``torch.profiler`` does, so the events, the
overhead and the device support are Kineto's. What we never do is call its Python
post-processing (``_parse_kineto_results`` and ``EventList``, one Python object per event):
right after ``stop()`` the C++ writer saves the results to a private temporary file, the
C++ results are released (they are most of the memory after ``stop()``), and the Trace is
read from that file only when someone asks for a table or the events. The same file serves
``export_chrome_trace`` (a copy), so a ``tensorboard_trace_handler`` cycle costs one C++ write.

The portable session (``backend="portable"``) drives ``capture.portable.PortableCollector``
instead, for devices Kineto cannot see in this torch build.
"""

from __future__ import annotations

import gzip
import mmap
import os
import shutil
import tempfile
import time
import weakref
from pathlib import Path
from typing import Any

from torchscope.errors import TraceError
from torchscope.process_memory import return_free_memory, rss_mb
from torchscope.trace.model import Trace

LIVE_SOURCE = "live capture"


def _read_saved(path: Path) -> Trace:
    """Read a cycle Kineto saved into our scratch directory, through a read-only map of the file
    (no copy of the text: read + scan of a 46 MB cycle took 0.065 s instead of 0.085 s). We own
    the file, so nobody truncates it under the map."""
    from torchscope.trace.reader import read_chrome_document

    with open(path, "rb") as f:
        try:
            text = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError):  # an empty file, or a file system that cannot map files
            return read_chrome_document(f.read(), LIVE_SOURCE)
        with text:
            return read_chrome_document(text, LIVE_SOURCE)


class Cycle:
    """The result of one profiling cycle: a saved Kineto JSON file or a portable document."""

    def __init__(self, *, path: Path | None = None, document: dict[str, Any] | None = None) -> None:
        self.path = path
        self.document = document
        self._trace: Trace | None = None
        # how this cycle ended: Kineto's own stop, our save, RSS while Kineto held the results
        self.stats: dict[str, float | None] = {}

    @property
    def trace(self) -> Trace:
        """The cycle's Trace, read on first use."""
        if self._trace is None:
            from torchscope.trace.reader import read_chrome_document

            if self.path is not None:
                self._trace = _read_saved(self.path)
            else:
                self._trace = read_chrome_document(self.document or {"traceEvents": []}, LIVE_SOURCE)
        return self._trace

    def export(self, path: str | os.PathLike[str]) -> None:
        """Write the cycle as Chrome trace JSON (gzip when the name ends in ``.gz``)."""
        target = Path(path)
        if target.parent and not target.parent.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
        gz = target.name.endswith(".gz")
        if self.path is not None:
            if gz:
                with open(self.path, "rb") as src, gzip.open(target, "wb", compresslevel=6) as dst:
                    shutil.copyfileobj(src, dst, 1 << 20)
            else:
                shutil.copyfile(self.path, target)
            return
        import msgspec

        data = msgspec.json.encode(self.document or {"traceEvents": []})
        if gz:
            with gzip.open(target, "wb", compresslevel=6) as dst:
                dst.write(data)
        else:
            target.write_bytes(data)

    def discard(self) -> None:
        """Delete the saved file (the Trace, if read, stays usable)."""
        if self.path is not None:
            self.path.unlink(missing_ok=True)


class _Scratch:
    """A private temporary directory for saved cycles, removed with its owner."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="torchscope-"))
        self._finalizer = weakref.finalize(self, shutil.rmtree, str(self.dir), True)
        self._n = 0

    def next_path(self) -> Path:
        self._n += 1
        return self.dir / f"cycle-{self._n}.pt.trace.json"


class KinetoSession:
    """One Kineto session: prepare (warm up), start recording, stop into a ``Cycle``."""

    def __init__(self, options: dict[str, Any], scratch: _Scratch) -> None:
        from torch.autograd import profiler as autograd_profiler

        self._scratch = scratch
        self._profiler = autograd_profiler.profile(use_kineto=True, **options)
        self.use_device: str | None = self._profiler.use_device

    def prepare(self) -> None:
        self._profiler._prepare_trace()

    def start(self) -> None:
        self._profiler._start_trace()

    def stop(self) -> Cycle:
        prof = self._profiler
        t0 = time.perf_counter()
        prof.__exit__(None, None, None)
        t1 = time.perf_counter()
        rss_with_results = rss_mb()
        results = prof.kineto_results
        prof.kineto_results = None  # free Kineto's C++ results as soon as they are saved
        path = self._scratch.next_path()
        if results is None:
            raise TraceError(LIVE_SOURCE, "Kineto returned no results for this cycle")
        results.save(str(path))
        del results
        return_free_memory()
        cycle = Cycle(path=path)
        cycle.stats = {
            "kineto_stop_s": t1 - t0,
            "save_s": time.perf_counter() - t1,
            "rss_with_results_mb": rss_with_results,
        }
        return cycle


class PortableSession:
    """A session of the portable collector (no Kineto), for devices Kineto cannot trace."""

    def __init__(
        self, record_shapes: bool, with_stack: bool, profile_memory: bool, with_modules: bool
    ) -> None:
        try:
            from torchscope.capture.portable import PortableCollector
        except ImportError as exc:  # pragma: no cover - the module ships with torchscope
            raise RuntimeError(f"backend='portable' is not available in this install: {exc}") from exc
        self._collector = PortableCollector(
            record_shapes=record_shapes,
            with_stack=with_stack,
            profile_memory=profile_memory,
            with_modules=with_modules,
        )
        self.use_device: str | None = None

    def prepare(self) -> None:
        """The portable collector has nothing to warm up."""

    def start(self) -> None:
        self._collector.start()

    def stop(self) -> Cycle:
        return Cycle(document=self._collector.stop())
