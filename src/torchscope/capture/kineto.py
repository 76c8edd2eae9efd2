"""The bridge to PyTorch's own collector: one Kineto (or portable) session per profiling cycle.

Collection is PyTorch's: we drive ``torch.autograd.profiler.profile``'s ``_prepare_trace``,
``_start_trace`` and ``__exit__`` exactly as ``torch.profiler`` does, so the events, the
overhead and the device support are Kineto's. What we never do is call its Python
post-processing (``_parse_kineto_results`` and ``EventList``, one Python object per event):
right after ``stop()`` the C++ writer saves the results to a private temporary file, and the
Trace is read from that file only when someone asks for a table or the events. The C++ results
(most of the memory after ``stop()``) are freed on a second thread while our scanner reads the
file (it runs without the GIL), or right after ``on_trace_ready`` when the run goes on and
nobody read the cycle. The same file serves ``export_chrome_trace`` (a copy), so a
``tensorboard_trace_handler`` cycle costs one C++ write.

The portable session (``backend="portable"``) drives ``capture.portable.PortableCollector``
instead, for devices Kineto cannot see in this torch build.
"""

from __future__ import annotations

import gzip
import mmap
import os
import shutil
import tempfile
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

from torchscope.errors import TraceError
from torchscope.process_memory import return_free_memory, rss_mb
from torchscope.trace.json_repair import escape_raw_strings
from torchscope.trace.model import Trace

LIVE_SOURCE = "live capture"
# the options torch's memory profiler (``export_memory_timeline``) needs: with all of them on,
# a cycle keeps Kineto's results for it, as torch does
MEMORY_TIMELINE_OPTIONS = ("record_shapes", "profile_memory", "with_stack")


def _read_saved(path: Path, on_phase_start: Callable[[str], None] | None = None) -> Trace:
    """Read a cycle Kineto saved into our scratch directory, through a read-only map of the file
    (no copy of the text: read + scan of a 46 MB cycle took 0.065 s instead of 0.085 s). We own
    the file, so nobody truncates it under the map."""
    from torchscope.trace.reader import read_chrome_document

    with open(path, "rb") as f:
        try:
            text = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError):  # an empty file, or a file system that cannot map files
            return read_chrome_document(f.read(), LIVE_SOURCE, on_phase_start)
        with text:
            return read_chrome_document(text, LIVE_SOURCE, on_phase_start)


def _release_beside_the_scanner(results: Any) -> None:
    """Free Kineto's results on a thread of its own while this thread's scanner runs.

    Destroying the C++ results of 160k events takes ~0.09 s and handing the memory back
    (``malloc_trim``) ~0.04 s; the scanner then reading the saved cycle takes ~0.08 s without
    the GIL. The thread first waits for a go: were it to start running at once, it would hold
    the GIL through the destructor and ``start()`` would not return until it finished.
    """
    holder, go = [results], threading.Event()

    def release() -> None:
        go.wait()
        holder.clear()
        return_free_memory()

    try:
        threading.Thread(target=release, name="torchscope-release", daemon=True).start()
    except RuntimeError:  # no new threads (interpreter shutting down): free them here instead
        go.set()
        release()
        return
    go.set()  # the caller enters the scanner next, and lets the GIL go there


class Cycle:
    """The result of one profiling cycle: a saved Kineto JSON file or a portable document."""

    def __init__(
        self,
        *,
        path: Path | None = None,
        document: dict[str, Any] | None = None,
        kineto_results: Any = None,
        keep_kineto: bool = False,
    ) -> None:
        self.path = path
        self.document = document
        self._trace: Trace | None = None
        # Kineto's C++ results, already saved to ``path``: freed while the Trace is read (or by
        # ``release_kineto``), so that freeing them overlaps the read instead of preceding it;
        # kept until ``discard`` when torch's memory profiler needs them (``keep_kineto``)
        self._kineto = kineto_results
        self._keep_kineto = keep_kineto
        # how this cycle ended: Kineto's own stop, our save, RSS while Kineto held the results
        self.stats: dict[str, float | None] = {}

    @property
    def trace(self) -> Trace:
        """The cycle's Trace, read on first use."""
        if self._trace is None:
            from torchscope.trace.reader import read_chrome_document

            if self.path is not None:
                self._trace = _read_saved(self.path, self._release_while_decoding)
                self.release_kineto()  # if the read never reached the scanner
            else:
                self._trace = read_chrome_document(self.document or {"traceEvents": []}, LIVE_SOURCE)
        return self._trace

    def _release_while_decoding(self, phase: str) -> None:
        if phase == "decode" and self._kineto is not None and not self._keep_kineto:
            results, self._kineto = self._kineto, None
            _release_beside_the_scanner(results)

    @property
    def kineto_results(self) -> Any:
        """Kineto's results of this cycle while they are held (see ``keep_kineto``), else None."""
        return self._kineto

    def release_kineto(self, *, even_if_kept: bool = False) -> None:
        """Free Kineto's results now, if they are still held (a cycle nobody read); results kept
        for the memory profiler go only with ``even_if_kept``."""
        if self._kineto is not None and (even_if_kept or not self._keep_kineto):
            self._kineto = None
            return_free_memory()

    def export(self, path: str | os.PathLike[str]) -> None:
        """Write the cycle as Chrome trace JSON (gzip when the name ends in ``.gz``)."""
        target = Path(path)
        if target.parent and not target.parent.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
        gz = target.name.endswith(".gz")
        if self.path is not None:
            # Kineto's file, less the raw string values it sometimes leaves unescaped (without
            # the repair one stray quote makes the whole file unreadable to Perfetto and HTA)
            data, _ = escape_raw_strings(self.path.read_bytes())
        else:
            import msgspec

            data = msgspec.json.encode(self.document or {"traceEvents": []})
        if gz:
            with gzip.open(target, "wb", compresslevel=6) as dst:
                dst.write(data)
        else:
            target.write_bytes(data)

    def discard(self) -> None:
        """Delete the saved file (the Trace, if read, stays usable)."""
        self.release_kineto(even_if_kept=True)
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
        from torchscope.capture.redirect import torch_original

        torch_profile = torch_original("torch.autograd.profiler", "profile")  # ours when redirected

        self._scratch = scratch
        self._profiler = torch_profile(use_kineto=True, **options)
        self.use_device: str | None = self._profiler.use_device
        # torch's memory profiler reads Kineto's results: kept until the next cycle for it
        self._keep_kineto = all(options.get(k) for k in MEMORY_TIMELINE_OPTIONS)

    @property
    def trace_id(self) -> str:
        """The cycle's trace id (torch's ``get_trace_id``), made when the session is prepared."""
        return str(self._profiler.trace_id)

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
        prof.kineto_results = None  # the cycle holds them alone, and frees them when it is read
        path = self._scratch.next_path()
        if results is None:
            raise TraceError(LIVE_SOURCE, "Kineto returned no results for this cycle")
        results.save(str(path))
        cycle = Cycle(path=path, kineto_results=results, keep_kineto=self._keep_kineto)
        del results
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
