"""The bridge to PyTorch's own collector: one Kineto (or portable) session per profiling cycle.

Collection is PyTorch's: we drive ``torch.autograd.profiler.profile``'s ``_prepare_trace``,
``_start_trace`` and ``__exit__`` exactly as ``torch.profiler`` does, so the events, the
overhead and the device support are Kineto's. What we never do is call its Python
post-processing (``_parse_kineto_results`` and ``EventList``, one Python object per event):
right after ``stop()`` the C++ writer saves the results to a private temporary file, and the
Trace is read from that file only when someone asks for a table or the events. The C++ results
(most of the memory after ``stop()``) are freed when torch frees its own: right after
``on_trace_ready`` when the run goes on, when the next cycle is prepared, or with the profile
object; never while a table is waited for (their destructor holds the GIL for 0.15-0.5 s per
160k events, see ``Cycle.trace``). The same file serves ``export_chrome_trace`` (a copy), so a
``tensorboard_trace_handler`` cycle costs one C++ write.

Kineto's writer changes some names as it writes them (``record_function`` labels with any
character outside printable ASCII become "unknown", a backslash becomes "/", a newline is
dropped), while torch's tables read the true names from the results in memory. Before the
results are freed, the read (or the free of a cycle nobody read) looks for a sign of such a
change and, only then, takes the true names of the changed events from the results
(``_changed_names``), which the Trace gets in place of Kineto's text.

The portable session (``backend="portable"``) drives ``capture.portable.PortableCollector``
instead, for devices Kineto cannot see in this torch build.
"""

from __future__ import annotations

import _signal
import contextlib
import gzip
import mmap
import os
import re
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from torchscope.errors import CycleLostError, TraceError, warn_user
from torchscope.process_memory import return_free_memory, rss_mb
from torchscope.trace.files import OwnedMap
from torchscope.trace.json_repair import escape_raw_strings
from torchscope.trace.model import Trace

if TYPE_CHECKING:
    import polars as pl

    from torchscope.trace._scan import Follower
    from torchscope.trace.reader import Followed

LIVE_SOURCE = "live capture"
# the options torch's memory profiler (``export_memory_timeline``) needs: with all of them on,
# a cycle keeps Kineto's results for it, as torch does
MEMORY_TIMELINE_OPTIONS = ("record_shapes", "profile_memory", "with_stack")


def _read_saved(path: Path, followed: Followed | None = None) -> Trace:
    """Read a cycle Kineto saved into our scratch directory, through a read-only map of the file
    (no copy of the text: read + scan of a 46 MB cycle took 0.065 s instead of 0.085 s). We own
    the file, so nobody truncates it under the map. ``followed``: what was scanned while Kineto
    wrote it (``_Scratch.save``)."""
    from torchscope.startup import gc_paused
    from torchscope.trace.reader import read_chrome_document

    # no collection meanwhile: in a training process a full one walks every object of the
    # model's program, and reading a cycle makes many objects and no cycles (``startup``)
    with open(path, "rb") as f, gc_paused():
        try:
            text = OwnedMap(f.fileno(), 0, access=mmap.ACCESS_READ)  # its pages go as they are read
        except (OSError, ValueError):  # an empty file, or a file system that cannot map files
            return read_chrome_document(f.read(), LIVE_SOURCE)
        with text:
            return read_chrome_document(text, LIVE_SOURCE, followed=followed)


_Look = TypeVar("_Look")


def _look_at_saved(path: Path, look: Callable[[bytes | mmap.mmap], _Look]) -> _Look:
    """``look`` at a saved cycle's text through a read-only map of the file (a cycle is
    hundreds of MB: no copy), or at its bytes where it cannot be mapped (an empty file, a file
    system that cannot map files)."""
    with open(path, "rb") as f:
        try:
            text = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError):
            return look(f.read())
        with text:
            return look(text)


# a name Kineto's writer would change: a character outside printable ASCII, or a backslash
_CHANGED_BY_KINETO = r"[^ -\[\]-~]"
# the signs of a change in the saved file: a name turned into "unknown", or a label whose
# backslash became "/" (``_changed_names``; a label changed only by a dropped newline leaves no sign)
_UNKNOWN_NAME = b'"name": "unknown"'
_LABEL = b'user_annotation",'  # the category of a label, host or device side
_NAME_AFTER_LABEL = re.compile(rb'\s*"name": "')


def _kineto_changed_a_name(text: bytes | mmap.mmap) -> bool:
    """Whether the saved file shows a sign that Kineto's writer changed a name: one search of
    the file for "unknown", one for the labels, and a look at each label's name (labels are
    few beside the events, whose names are never looked at one by one)."""
    if text.find(_UNKNOWN_NAME) >= 0:
        return True
    at = text.find(_LABEL)
    while at >= 0:
        at += len(_LABEL)
        name = _NAME_AFTER_LABEL.match(text, at)
        if name is not None:
            end = text.find(b'"', name.end())
            if text.find(b"/", name.end(), end) >= 0:
                return True
        at = text.find(_LABEL, at)
    return False


def _trace_shows_a_changed_name(trace: Trace) -> bool:
    """The signs ``_kineto_changed_a_name`` looks for in the file, looked for in the Trace read
    from it: among its distinct names and its few labels, instead of two passes over the text
    (0.09 s of a 142 MB cycle, on the way to the table when the results are kept)."""
    import polars as pl

    names = trace.events.select(pl.col("name").cast(pl.String), "cat")
    if names.filter(pl.col("name") == "unknown").height:
        return True
    labels = names.filter(pl.col("cat").is_in(["user_annotation", "gpu_user_annotation"]))
    return bool(labels["name"].str.contains("/", literal=True).any())


def _changed_names(results: Any, path: Path, trace: Trace | None = None) -> pl.DataFrame | None:
    """The true names of the events whose name Kineto's writer changed, keyed by Kineto's start
    time, duration and correlation id (``start_ns`` is Kineto's clock, not yet the file's); None
    when the saved file (or the ``trace`` read from it) shows no sign of a change, which is
    nearly always."""
    changed = (
        _trace_shows_a_changed_name(trace) if trace is not None else _look_at_saved(path, _kineto_changed_a_name)
    )
    if not changed:
        return None
    import polars as pl

    schema = {"kineto_start_ns": pl.Int64, "dur_ns": pl.Int64, "correlation": pl.Int64, "true_name": pl.String}
    found: list[pl.DataFrame] = [pl.DataFrame(_python_frames_renamed(results, path, trace), schema=schema)]
    events = results.events()
    if events:
        # every name through one C-level map, the test in Polars: no Python loop over the events
        try:
            texts = list(map(type(events[0]).name, events))
        except UnicodeDecodeError:  # a name that is not UTF-8 (seen in torch 2.13 with with_stack)
            texts = [_name_or_none(e) for e in events]
        names = pl.Series("true_name", texts, dtype=pl.String)
        rows = names.str.contains(_CHANGED_BY_KINETO).fill_null(False).arg_true().to_list()
        picked = [events[i] for i in rows]
        found.append(
            pl.DataFrame(
                {
                    "kineto_start_ns": [e.start_ns() for e in picked],
                    "dur_ns": [e.duration_ns() for e in picked],
                    "correlation": [e.correlation_id() for e in picked],
                    "true_name": names.gather(rows),
                },
                schema=schema,
            )
        )
    table = pl.concat(found)
    return table if table.height else None


# a Python frame Kineto's writer renamed: its category, then the name it wrote instead
_RENAMED_FRAME = re.compile(rb'"cat": "python_function",\s*"name": "unknown"')


def _python_frames_renamed(results: Any, path: Path, trace: Trace | None) -> dict[str, list[Any]]:
    """The true names of the Python frames (``with_stack``) Kineto's writer renamed "unknown":
    a function or file name outside ASCII (``größe``, a project under ``/home/josé``), which
    torch's tables show as written. They are not among ``results.events()``; they are walked
    out of the results' event tree, only when the cycle shows such a frame."""
    import polars as pl

    rows: dict[str, list[Any]] = {"kineto_start_ns": [], "dur_ns": [], "correlation": [], "true_name": []}
    if trace is not None:
        ev = trace.events
        shows = ev.filter((ev["kind"] == "python_function") & (ev["name"].cast(pl.String) == "unknown")).height
    else:
        shows = _look_at_saved(path, lambda text: _RENAMED_FRAME.search(text) is not None)
    if not shows:
        return rows
    try:
        stack = list(results.experimental_event_tree())
    except Exception:  # noqa: BLE001 - an older torch without the tree: Kineto's names stay
        return rows
    changed = re.compile(_CHANGED_BY_KINETO)
    while stack:
        node = stack.pop()
        stack.extend(node.children)
        if not str(node.tag).endswith("PyCall"):
            continue
        try:
            name = node.name
        except UnicodeDecodeError:
            continue
        if changed.search(name):
            rows["kineto_start_ns"].append(node.start_time_ns)
            rows["dur_ns"].append(node.duration_time_ns)
            rows["correlation"].append(None)
            rows["true_name"].append(name)
    return rows


def _name_or_none(event: Any) -> str | None:
    """An event's name, None when it is not UTF-8 (Kineto's text then stays)."""
    try:
        return str(event.name())
    except UnicodeDecodeError:
        return None


def restore_names(trace: Trace, changed: pl.DataFrame | None) -> Trace:
    """``trace`` with the true names of the events Kineto's writer renamed (``_changed_names``).

    An event is found by its start and duration in the file's time base (Kineto's start less
    ``baseTimeNanoseconds``) and by its correlation id (the file's "External id"); a device-side
    annotation, which has none there, by its start and duration alone."""
    base = trace.meta.base_time_ns
    if changed is None or changed.is_empty() or base is None:
        return trace
    import dataclasses

    import polars as pl

    events = trace.events
    keyed = changed.with_columns((pl.col("kineto_start_ns") - base).alias("start_ns"))
    found = (
        events.select("start_ns", "dur_ns", "external_id", "cat")
        .with_row_index("row")
        .join(keyed, on=["start_ns", "dur_ns"], how="inner")
        .filter(
            (pl.col("external_id") == pl.col("correlation"))
            | pl.col("cat").is_in(["gpu_user_annotation", "python_function"])  # no id in the file
        )
        .unique("row", keep="first")
    )
    if found.is_empty():
        return trace
    names = events["name"].cast(pl.String).scatter(found["row"], found["true_name"])
    events = events.with_columns(names.cast(events.schema["name"]).alias("name"))
    return dataclasses.replace(trace, events=events)


class _Names:
    """The changed names of one cycle (``_changed_names``), looked for once."""

    def __init__(self) -> None:
        self.table: pl.DataFrame | None = None

    def take(self, results: Any, path: Path, trace: Trace | None = None) -> None:
        try:
            self.table = _changed_names(results, path, trace)
        except Exception:  # noqa: BLE001 - a failed look keeps Kineto's names, never the read
            self.table = None


def _valid_json(path: Path) -> bool:
    """Whether our scanner takes the saved file as it is (one pass without the GIL, ~1.5 GB/s):
    then it holds no raw string to repair (``escape_raw_strings``), since the scanner refuses
    a stray quote, a raw control character and a bad escape in any string, modelled or not."""
    from torchscope.trace.files import _scan

    if _scan is None:
        return False
    doc = _look_at_saved(path, _scan.scan_document)
    return doc is not None and doc[0] >= 0


# Kineto ends its file with ``"traceName": PATH``, the path it wrote: our temporary
# (/tmp/torchscope-cycles-.../cycle-1.pt.trace.json), gone once the cycle is saved elsewhere
_TRACE_NAME = b'"traceName": '
_TAIL = 4096  # the file's last bytes, where that key is


def _named_tail(tail: bytes, name: str) -> bytes | None:
    """``tail`` (a trace's last bytes) with its ``"traceName"`` made ``name``; None when it ends
    in no such key (then the file is copied as it is)."""
    import json

    at = tail.rfind(_TRACE_NAME)
    if at < 0:
        return None
    try:
        text = tail[at + len(_TRACE_NAME) :].decode("utf-8")
        _, end = json.JSONDecoder().raw_decode(text)
    except ValueError:  # a path cut by the tail's start, or no string: left as it is
        return None
    rest = text[end:]
    if rest.strip() != "}":
        return None
    return tail[:at] + _TRACE_NAME + json.dumps(name).encode() + rest.encode()


def _named_trace(trace: Trace, name: str) -> Trace:
    """``trace`` with the ``"traceName"`` it read from Kineto's file (``_TRACE_NAME``) made
    ``name``, for a copy written from the Trace."""
    import dataclasses

    if "traceName" not in trace.meta.extra:
        return trace
    meta = dataclasses.replace(trace.meta, extra={**trace.meta.extra, "traceName": name})
    return dataclasses.replace(trace, meta=meta)


def _copy_file(source: Path, target: Path, gz: bool, name: str | None = None) -> None:
    """``source`` copied to ``target`` (in the kernel), or gzip-compressed into it in 1 MB
    blocks: never the whole text in memory. ``name``: the ``"traceName"`` the copy says
    (``_named_tail``), the path it is saved as, not the temporary Kineto wrote."""
    cut, tail = 0, None
    if name is not None:
        size = source.stat().st_size
        cut = max(0, size - _TAIL)
        with open(source, "rb") as src:
            src.seek(cut)
            tail = _named_tail(src.read(), name)
    if not gz:
        shutil.copyfile(source, target)
        if tail is not None:
            with open(target, "r+b") as dst:
                dst.seek(cut)
                dst.write(tail)
                dst.truncate()
        return
    with open(source, "rb") as src, gzip.open(target, "wb", compresslevel=6) as dst:
        if tail is None:
            shutil.copyfileobj(src, dst, 1 << 20)
            return
        left = cut
        while left:
            block = src.read(min(left, 1 << 20))
            if not block:
                break
            dst.write(block)
            left -= len(block)
        dst.write(tail)


class Cycle:
    """The result of one profiling cycle: a saved Kineto JSON file or a portable document."""

    def __init__(
        self,
        *,
        path: Path | None = None,
        document: dict[str, Any] | None = None,
        kineto_results: Any = None,
        keep_kineto: bool = False,
        lost: str | None = None,
        follower: Follower | None = None,
    ) -> None:
        self.path = path
        # what scanned ``path`` while Kineto wrote it (``follow_save``), then what it scanned
        # (``_take_followed``): for the read that usually follows stop(), and to vouch for the
        # file at an export; dropped with Kineto's results when the run goes on unread
        self._follower = follower
        self._followed: Followed | None = None
        self.document = document
        self.lost = lost  # why Kineto gave no trace for this cycle (the warning it gave), if so
        self._trace: Trace | None = None
        # Kineto's C++ results, already saved to ``path``: freed by ``release_kineto`` (after
        # ``on_trace_ready`` when the run goes on, at the next cycle's prepare) or with the
        # cycle, never by the read (see ``trace``); a run that goes on keeps them until the
        # next cycle when torch's memory profiler needs them (``keep_kineto``)
        self._kineto = kineto_results
        self._keep_kineto = keep_kineto
        self._names: _Names | None = None  # the names Kineto's writer changed, once looked for
        # how this cycle ended: Kineto's own stop, our save, RSS while Kineto held the results
        self.stats: dict[str, float | None] = {}
        self.read_s = 0.0  # how long the Trace's read took (``trace``), once it is read

    @classmethod
    def lost_one(cls, reason: str) -> Cycle:
        """An empty cycle Kineto gave no trace for, and why (the warning the user was given)."""
        return cls(document={"traceEvents": []}, lost=reason)

    @property
    def trace(self) -> Trace:
        """The cycle's Trace, read on first use.

        The read leaves Kineto's results alone: their destructor holds the GIL the whole time
        it runs (0.15 s for 161k events without options, 0.5 s with ``record_shapes``, 2
        cores), so freeing them on a thread beside the read queued every step of the read
        that needs the GIL behind it. The read after ``stop()`` took 0.72-0.79 s with
        ``record_shapes`` that way, and 0.22 s with the results left until torch would free
        them (the peak rose from 1.09x to 1.12x the RSS after ``stop()``).
        """
        if self._trace is None:
            from torchscope.trace.reader import read_chrome_document

            t0 = time.perf_counter()
            if self.path is not None:
                followed = self._take_followed()
                self._followed = None  # the read takes the pieces: nothing kept beside the Trace
                trace = _read_saved(self.path, followed)
                del followed
                self._take_names(trace)
                if self._names is not None:
                    trace = restore_names(trace, self._names.table)
                self._trace = trace
            else:
                self._trace = read_chrome_document(self.document or {"traceEvents": []}, LIVE_SOURCE)
            self.read_s = time.perf_counter() - t0
        return self._trace

    def _take_followed(self) -> Followed | None:
        """What the follower scanned (it is waited for the first time), kept until the read."""
        if self._follower is not None:
            follower, self._follower = self._follower, None
            self._followed = follower.finish()
        return self._followed

    def _vouched_for(self, saved: Path) -> bool:
        """Whether what the follower scanned, with the head and tail checked, vouches that the
        saved file is JSON our scanner takes: the export's look at the whole file
        (``_valid_json``: 0.06 s for 43 MB, 0.17 s for 142 MB) is then spared at each cycle end
        of a ``tensorboard_trace_handler`` run with the seeds' options."""
        followed = self._take_followed()
        if followed is None:
            return False
        from torchscope.trace.reader import followed_document

        return _look_at_saved(saved, lambda text: followed_document(text, followed) is not None)

    @property
    def kineto_results(self) -> Any:
        """Kineto's results of this cycle while they are held (see ``keep_kineto``), else None."""
        return self._kineto

    def release_scan(self) -> None:
        """Drop what was scanned while the file was written (a read without it scans the file)."""
        self._follower = None
        self._followed = None

    def release_kineto(self, *, even_if_kept: bool = False) -> None:
        """Free Kineto's results now, if they are still held; results kept for the memory
        profiler go only with ``even_if_kept``. The names Kineto's writer changed
        are taken from them first, for the read that may come later. What was scanned while the
        file was written goes too."""
        self.release_scan()
        if self._kineto is not None and (even_if_kept or not self._keep_kineto):
            self._take_names()
            self._kineto = None
            return_free_memory()

    def _take_names(self, trace: Trace | None = None) -> None:
        """Look for the names Kineto's writer changed, while its results are here to give the
        true ones: in ``trace`` when it has been read, else in the saved file."""
        if self._names is None and self._kineto is not None and self.path is not None:
            self._names = _Names()
            self._names.take(self._kineto, self.path, trace)

    def export(self, path: str | os.PathLike[str]) -> None:
        """Write the cycle as Chrome trace JSON (gzip when the name ends in ``.gz``), whole or not
        at all (``writes.write_atomically``: on a full disk a ``WriteError`` naming ``path``, and
        no truncated or 0-byte file).

        Kineto's saved file is copied as it is, in the kernel, unless a name needs its true
        text (then the Trace is written) or the file needs repair. Neither needs the Trace:
        a ``tensorboard_trace_handler`` at each cycle's end read the whole cycle (0.7 s for
        142 MB) and searched it for raw strings in Python (0.9 s) before this, which made a
        scheduled run slower than torch's at every cycle end. A cycle Kineto gave no trace
        for raises ``CycleLostError`` rather than writing an empty one.
        """
        from torchscope.writes import destination, write_atomically, write_data

        if self.lost is not None:
            raise CycleLostError(os.fspath(path), self.lost)
        target = Path(path)
        name = os.fspath(destination(target))  # the file's own name: never a temporary's
        gz = target.name.endswith(".gz")
        if self.path is not None and self.names_restored:
            # Kineto's file has its changed names: write the Trace, which has the true ones
            from torchscope.trace.chrome_writer import write_chrome

            write_chrome(_named_trace(self.trace, name), target)
            return
        saved = self.path
        if saved is not None and (self._vouched_for(saved) or _valid_json(saved)):
            write_atomically(target, lambda tmp: _copy_file(saved, tmp, gz, name))
            return
        if self.path is not None:
            # Kineto's file, less the raw string values it sometimes leaves unescaped (without
            # the repair one stray quote makes the whole file unreadable to Perfetto and HTA)
            data, _ = escape_raw_strings(self.path.read_bytes())
            named = _named_tail(data[-_TAIL:], name)
            if named is not None:
                data = data[:-_TAIL] + named
        else:
            import msgspec

            data = msgspec.json.encode(self.document or {"traceEvents": []})
        write_data(target, data, compresslevel=6)

    @property
    def names_restored(self) -> bool:
        """Whether Kineto's writer changed names that the Trace restores: looked for in the
        saved file while Kineto's results are held (no read of the Trace), else while the
        Trace is read."""
        self._take_names()
        if self._names is None:
            self.trace  # noqa: B018 - the look happens while the Trace is read
        table = self._names.table if self._names is not None else None
        return table is not None and not table.is_empty()

    def discard(self) -> None:
        """Delete the saved file (the Trace, if read, stays usable)."""
        if self._names is None:  # nobody will read it: no look for names
            self._names = _Names()
        self.release_kineto(even_if_kept=True)
        if self.path is not None:
            self.path.unlink(missing_ok=True)


def _kineto_writing(path: Path) -> Path:
    """Where Kineto's writer puts ``path`` while it writes it: ``PATH.tmp``, renamed when done
    (torch 2.13; older writers write ``path`` itself)."""
    return path.with_name(path.name + ".tmp")


def _scratch_prefix() -> str:
    """The name every scratch directory of this host starts with (then the owner's pid)."""
    return f"torchscope-cycles-{socket.gethostname()}-"


def sweep_abandoned_scratch(root: Path) -> list[Path]:
    """Remove the scratch directories of this host's processes that no longer exist, and say
    which: a process killed (SIGKILL, an OOM kill, a preempted job's SIGTERM) leaves its saved
    cycles behind, hundreds of MB each, and no later run removed them. A directory whose
    process is alive (or whose liveness we may not ask: another user's) is left alone."""
    removed = []
    prefix = _scratch_prefix()
    for d in root.glob(prefix + "*"):
        pid = d.name[len(prefix) :].split("-", 1)[0]
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(d, ignore_errors=True)
            removed.append(d)
        except OSError:  # alive, another user's
            pass
    return removed


class _Scratch:
    """A private temporary directory for saved cycles, removed with its owner; those that
    killed owners left are removed when the next one is made (``sweep_abandoned_scratch``)."""

    def __init__(self) -> None:
        root = Path(tempfile.gettempdir())
        with contextlib.suppress(OSError):
            sweep_abandoned_scratch(root)
        self.dir = Path(tempfile.mkdtemp(prefix=f"{_scratch_prefix()}{os.getpid()}-", dir=root))
        self._finalizer = weakref.finalize(self, shutil.rmtree, str(self.dir), True)
        self._n = 0

    def next_path(self) -> Path:
        self._n += 1
        return self.dir / f"cycle-{self._n}.pt.trace.json"

    def save(self, results: Any, *, follow: bool = False) -> tuple[Path, Follower | None] | str:
        """Kineto's ``results`` saved as JSON here: the path and, with ``follow``, the
        ``_scan.Follower`` that scans it meanwhile (``follow_save``), or (a ``str``) the
        one-line warning saying why not.

        Kineto's writer fails without a word when the disk fills (no file, or a cut one), and
        reading the missing file then raised a raw FileNotFoundError from the user's
        ``key_averages()``, or a TraceReadyError out of ``step()`` that ended the training.
        Kineto saves a result once only ("Trace is already saved"), so there is no second try
        elsewhere: the cycle is lost, the warning says where there was no room and what to set.
        """
        path = self.next_path()
        with follow_save(path, follow) as follower:
            results.save(str(path))
        if _saved_whole(path):
            return path, follower
        del follower  # cancels its thread
        # what Kineto's writer left: its temporary, which held the full disk's space and made
        # every later cycle lost too
        for left in (path, _kineto_writing(path)):
            left.unlink(missing_ok=True)
        return (
            f"torchscope: could not save this cycle's trace in {self.dir} ({_room(self.dir)}),"
            " so this cycle has no events; set TMPDIR to a directory with room (a cycle's JSON"
            " takes ~300 bytes an event)"
        )


# The follower's pieces are twice the reader's (``reader.CHUNK_BYTES``): their tables are all
# built after Kineto's save lets the GIL go, where each piece's fixed cost is paid in a row.
# Measured on 2 cores, the seeds' three options, 366k events (141 MB): the read after stop()
# took 0.28-0.29 s with 32 MB pieces against 0.30-0.35 s with 16 MB, and 0.35 s with 64 MB
# (the last piece then left one core idle); the peak did not move (1449-1454 MB against
# 1440-1447 MB).
FOLLOWED_PIECE_CHUNKS = 2


@contextlib.contextmanager
def follow_save(path: Path, follow: bool = True) -> Iterator[Follower | None]:
    """Scan the events of ``path`` on a native thread while the block writes it (Kineto's
    save, which holds the GIL and leaves the other cores idle for ~0.8 s per 142 MB).

    Asked for (``follow``) when the cycle keeps Kineto's results for the memory profiler, the
    seeds' three options, whose cycles are the largest. With one option or none, 161k-366k
    events on 2 cores, the follower's pieces held their columns beside the results (+20-48 MB
    at the peak) and the read after ``stop()`` scanned the file in about 0.1 s anyway: it
    saved 0.1 s with ``with_stack`` alone and nothing measurable with the others.

    Yields the ``_scan.Follower`` (None without our scanner, or not ``follow``): after the
    block, it scans the pieces left and ends on its own; its ``finish`` hands over what it
    scanned, for the read (``Cycle.trace``). It follows Kineto's temporary
    (``_kineto_writing``), or ``path`` itself for a Kineto that writes it directly. Measured on 2
    cores, the seeds' three options, 366k events: the read after ``stop()`` fell from 0.58 s
    to ~0.4 s, and the save took as long as before.
    """
    from torchscope.trace.files import _scan
    from torchscope.trace.reader import CHUNK_BYTES

    make = None if _scan is None or not follow else getattr(_scan, "Follower", None)
    if make is None:
        yield None
        return
    following = make(str(_kineto_writing(path)), str(path), FOLLOWED_PIECE_CHUNKS * CHUNK_BYTES)
    try:
        yield following
    finally:
        following.complete()


def _saved_whole(path: Path) -> bool:
    """Whether Kineto's writer finished ``path``: it exists and its JSON ends (a full disk
    leaves no file, or one cut anywhere)."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            f.seek(max(0, size - 64))
            tail = f.read().rstrip()
    except OSError:
        return False
    return tail.endswith((b"}", b"]"))


def _room(directory: Path) -> str:
    try:
        return f"{shutil.disk_usage(directory).free / 2**20:,.0f} MB free"
    except OSError as exc:
        return exc.strerror or str(exc)


class KinetoSession:
    """One Kineto session: prepare (warm up), start recording, stop into a ``Cycle``."""

    def __init__(self, options: dict[str, Any], scratch: _Scratch) -> None:
        from torchscope.capture.redirect import OWNED, torch_original

        torch_profile = torch_original("torch.autograd.profiler", "profile")  # ours when redirected

        self._scratch = scratch
        self._profiler = torch_profile(use_kineto=True, **options)
        setattr(self._profiler, OWNED, True)  # ours, not a script's (``redirect.guard_torch_profiler``)
        self.use_device: str | None = self._profiler.use_device
        # torch's memory profiler reads Kineto's results: kept until the next cycle for it
        self._keep_kineto = all(options.get(k) for k in MEMORY_TIMELINE_OPTIONS)
        # torch profiler sessions started in this process when ours was last prepared or
        # started (``_profiler_starts``); another count means another profiler took Kineto, and
        # it stays another (the count only grows) until this one-cycle session ends
        self._starts_seen = _profiler_starts()

    @property
    def trace_id(self) -> str:
        """The cycle's trace id (torch's ``get_trace_id``), made when the session is prepared."""
        return str(self._profiler.trace_id)

    def prepare(self) -> None:
        self._profiler._prepare_trace()
        self._starts_seen = _profiler_starts()

    def start(self) -> None:
        if _profiler_starts() != self._starts_seen:
            # another profiler started (and ended) Kineto during our warm-up: our prepared
            # session is gone, and enabling without it makes the stop crash the process
            return
        self._profiler._start_trace()
        # read inline, not through _profiler_starts(): Kineto records Python frames from here
        # on, and each call of ours would become a row of the user's with_stack table
        self._starts_seen = _STARTS[0]

    def stop(self) -> Cycle:
        prof = self._profiler
        torch = sys.modules.get("torch")
        if torch is None:  # the interpreter is shutting down: a profile stopped from a __del__
            return Cycle.lost_one("torchscope: the profile was stopped while Python shut down")
        # kineto_recording(), inline (torch is imported: this session made it)
        enabled = getattr(torch._C._autograd, "_profiler_enabled", None)
        if _STARTS[0] != self._starts_seen or (enabled is not None and not enabled()):
            return self._stopped_by_another()
        t0 = time.perf_counter()
        prof.__exit__(None, None, None)
        t1 = time.perf_counter()
        rss_with_results = rss_mb()
        results = prof.kineto_results
        prof.kineto_results = None  # the cycle holds them alone, and frees them when it is read
        if results is None:
            raise TraceError(LIVE_SOURCE, "Kineto returned no results for this cycle")
        saved = self._scratch.save(results, follow=self._keep_kineto)
        if isinstance(saved, str):  # no room: the cycle is lost, and the warning says so
            warn_user(saved)
            del results
            return_free_memory()
            return Cycle.lost_one(saved)
        path, follower = saved
        cycle = Cycle(path=path, kineto_results=results, keep_kineto=self._keep_kineto, follower=follower)
        del follower
        del results
        cycle.stats = {
            "kineto_stop_s": t1 - t0,
            "save_s": time.perf_counter() - t1,
            "rss_with_results_mb": rss_with_results,
        }
        return cycle


    def abandon(self) -> None:
        """Stop Kineto for a profile nobody can stop any more (garbage-collected while it
        recorded, or still recording when the interpreter exits), dropping its events. Left
        alone when another profiler took Kineto since, or it is not recording."""
        if _profiler_starts() != self._starts_seen or not kineto_recording():
            return
        with contextlib.suppress(Exception):  # at exit or in a collection: never raise there
            self._profiler.__exit__(None, None, None)
        self._profiler.kineto_results = None

    def _stopped_by_another(self) -> Cycle:
        """The cycle of a session another profiler took: a ``torch.profiler.profile`` entered
        inside ours shares Kineto's one session and ends it on exit. Kineto then hands our stop
        an empty result whose ``save`` crashes the process (a segfault, seen with torch 2.13),
        and after one during our warm-up, disabling crashes it; so Kineto is not touched again,
        the cycle is empty and a warning says why (torch gives its outer profiler an empty
        table without a word, or crashes)."""
        self._profiler.kineto_results = None
        problem = (
            "torchscope: another profiler (a torch.profiler.profile inside this one?) stopped"
            " Kineto while torchscope was recording, so this cycle has no events; profile with"
            " one profiler at a time, or run the script under `torchscope run`, which turns the"
            " script's own torch.profiler into ours"
        )
        warn_user(problem)
        return Cycle.lost_one(problem)


@contextlib.contextmanager
def ctrl_c_deferred() -> Iterator[None]:
    """Hold a Ctrl-C (SIGINT) back until the block is done, then deliver it as it would have
    been (the handler that was in place: KeyboardInterrupt by default); ``hold_ctrl_c`` and
    ``deliver_ctrl_c`` as a context manager.

    Stopping a cycle is Kineto's disable, torch's bookkeeping and our save: a Ctrl-C landing
    between two of them lost the cycle, and left torch's "profiler enabled" flag set with Kineto
    off, so every later profile in the process was refused. Only the main thread receives
    signals; elsewhere (and where signals cannot be handled) the block runs as it is."""
    held = hold_ctrl_c()
    try:
        yield
    finally:
        deliver_ctrl_c(held)


# The main thread, and signal's C functions: ``hold_ctrl_c`` runs while Kineto still records
# with_stack's Python frames, and each Python call there (contextlib, threading, signal's enum
# conversions: 15 frames) became a row of the user's table that torch's does not have.
_MAIN_THREAD = threading.main_thread().ident
_SIGINT = int(signal.SIGINT)


def hold_ctrl_c() -> tuple[Any, list[Any]] | None:
    """Start holding a Ctrl-C back (``ctrl_c_deferred``): the handler it replaced and the
    frames caught meanwhile, or None where it cannot (not the main thread, a handler set
    outside Python, signals not handled here)."""
    if threading.get_ident() != _MAIN_THREAD:
        return None
    try:
        if _signal.getsignal(_SIGINT) is None:  # a handler set outside Python: not ours to swap
            return None
        caught: list[Any] = []
        return _signal.signal(_SIGINT, lambda signum, frame: caught.append(frame)), caught
    except (ValueError, OSError):
        return None


def deliver_ctrl_c(held: tuple[Any, list[Any]] | None) -> None:
    """Put the handler back, and deliver a Ctrl-C caught meanwhile as it would have come."""
    if held is None:
        return
    previous, caught = held
    _signal.signal(_SIGINT, previous)
    if caught:
        if callable(previous):
            previous(_SIGINT, caught[0])
        elif previous == signal.SIG_DFL:
            os.kill(os.getpid(), _SIGINT)


_STARTS = [0]  # torch profiler sessions started in this process since we began counting


def _profiler_starts() -> int:
    """How many torch profiler sessions (ours and anyone's) have started recording, counted by
    wrapping torch's start hook, which every ``torch.autograd.profiler.profile`` (and so every
    ``torch.profiler.profile``) calls as it enables Kineto. Installed on first use."""
    import torch.autograd.profiler as autograd_profiler

    hook = autograd_profiler._run_on_profiler_start
    if not getattr(hook, "_torchscope_counts", False):

        def counting_start(*args: Any, **kwargs: Any) -> Any:
            _STARTS[0] += 1
            return hook(*args, **kwargs)

        counting_start._torchscope_counts = True  # type: ignore[attr-defined]
        autograd_profiler._run_on_profiler_start = counting_start
    return _STARTS[0]


def kineto_recording() -> bool:
    """Whether the process's one Kineto session is still on (False once another profiler ended
    it); True where torch cannot tell."""
    import torch

    enabled = getattr(torch._C._autograd, "_profiler_enabled", None)
    return bool(enabled()) if enabled is not None else True


class Elsewhere:
    """The session of a profile entered while another profiler records (Kineto has one session
    per process): it records nothing and its cycle is empty, ``lost`` with the warning's reason."""

    use_device: str | None = None

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def prepare(self) -> None:
        """Nothing to prepare: the running profiler owns Kineto."""

    def start(self) -> None:
        """Nothing to start."""

    def stop(self) -> Cycle:
        return Cycle.lost_one(self.reason)


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

    def check_stoppable(self) -> None:
        self._collector.check_stoppable()

    def stop(self) -> Cycle:
        return Cycle(document=self._collector.stop())
