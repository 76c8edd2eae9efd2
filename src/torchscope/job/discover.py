"""Discovery: a log or job directory read as runs -> ranks -> cycles, from names and file heads.

A run is one training job, a rank one process of it, a cycle one ``on_trace_ready`` (one file).
The rank comes from the trace's ``distributedInfo`` (read from the first bytes of the file, never
the whole trace), else from ``rank-N``/``rank_N``/``rankN`` in the file or folder name, else the
run is one rank. A worker name with a pid or a file timestamp is never a rank. The run is the
folder the files sit in (``tb/baseline/``, ``tb/bigger/``), less a torchrun-style ``rank-N/``
folder. Files that cannot be opened are skipped and named, never dropped silently.
"""

from __future__ import annotations

import json
import os
import re
import stat
import zlib
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from torchscope.runner import cycle_names
from torchscope.trace.json_repair import not_a_document
from torchscope.writes import hidden

HEAD_BYTES = 64 * 1024  # enough for distributedInfo, which Kineto writes before the events
TRACE_SUFFIXES = (".json", ".json.gz")
_RANK = re.compile(r"(?<![a-z])rank[-_]?(\d+)", re.IGNORECASE)
# tensorboard_trace_handler: {worker}.{time_ns or ms}.pt.trace.json[.gz]
_TB = re.compile(r"^(?P<worker>.+?)\.(?P<stamp>\d+)\.pt\.trace\.json(\.gz)?$")
# the writer of torchscope run's cycles (``runner.cycle_names``: step_N, the setup-only run,
# the script's own profiler's copies), as a run's worker and family
_RUN_WRITER = "torchscope run"
_DIST = re.compile(r'"distributedInfo"\s*:\s*\{')
_DIST_RANK = re.compile(r'"rank"\s*:\s*(\d+)')
_DIST_WORLD = re.compile(r'"world_size"\s*:\s*(\d+)')
_DIST_BACKEND = re.compile(r'"backend"\s*:\s*"([^"]*)"')
_EVENTS = re.compile(r'"traceEvents"\s*:')
# keys only Kineto writes beside its events: a file holding them and no events is a damaged
# trace (its events lost), not a config file, whatever it is named
_KINETO_HEAD = re.compile(r'"(?:schemaVersion|deviceProperties|distributedInfo)"\s*:')
# our own outputs: torchscope run's run.json ("exit_code" ... "wall_s"), its report.json (a
# payload: "version" ... "title") and `report --json` ("report_version" ... "kind"): never traces
_OURS = re.compile(
    r'^\{\s*"(exit_code|version|report_version)"\s*:[^{]{0,400}"(wall_s|generated|title|kind)"\s*:'
)


@dataclass(frozen=True)
class RankFiles:
    """One rank of one run: its cycles, one file each, in the order they were written."""

    run: str
    rank: int
    files: tuple[Path, ...]
    world_size: int | None = None
    backend: str | None = None
    rank_from: str = "distributedInfo"  # or "name", or "single" (no rank anywhere: one rank)

    @property
    def cycles(self) -> int:
        return len(self.files)

    @property
    def step_files(self) -> tuple[Path, ...]:
        """Its cycles that hold its steps, in one numbering (``cycle_names.reported``): not
        ``torchscope run``'s setup-only cycle (no step, as the run's own summary says), nor its
        cycles from before a script's own profiler took over. A diff compares steps."""
        keep = cycle_names.reported([f.name for f in self.files])
        return tuple(f for f, k in zip(self.files, keep, strict=True) if k)


@dataclass(frozen=True)
class Run:
    name: str
    ranks: tuple[RankFiles, ...]
    # every world size its files' heads name: more than one means files of different jobs
    world_sizes: tuple[int, ...] = ()

    @property
    def cycles(self) -> int:
        return max((r.cycles for r in self.ranks), default=0)

    @property
    def world_size(self) -> int:
        sizes = [r.world_size for r in self.ranks if r.world_size]
        return max(sizes) if sizes else len(self.ranks)


@dataclass(frozen=True)
class Discovery:
    root: Path
    runs: tuple[Run, ...]
    skipped: tuple[str, ...] = field(default=())  # "skipped FILE: why", one line each

    @property
    def rank_files(self) -> list[RankFiles]:
        return [r for run in self.runs for r in run.ranks]

    @property
    def is_job(self) -> bool:
        """More than one trace to read: several runs, ranks or cycles."""
        return sum(len(r.files) for r in self.rank_files) > 1


def mixed_world_sizes(found: Discovery) -> list[str]:
    """A warning per run whose files name different world sizes: traces of different jobs in
    one folder (a trace copied into another job's), which are still read as one job."""
    return [
        f"{run.name}: its traces name different world sizes ({', '.join(map(str, run.world_sizes))}):"
        " files of different jobs in one folder? They are read as one job"
        for run in found.runs
        if len(run.world_sizes) > 1
    ]


def ranks_named_otherwise(found: Discovery) -> list[str]:
    """A warning per run with files whose name says another rank than their ``distributedInfo``
    (which wins): 128 copies of one rank's trace named ``rank-0`` .. ``rank-127`` were read,
    without a word, as 128 cycles of the one rank they all say they are."""
    out = []
    for run in found.runs:
        odd = [
            (f, named, rf.rank)
            for rf in run.ranks
            if rf.rank_from == "distributedInfo"
            for f in rf.files
            if (named := rank_in_name(f, found.root)) is not None and named != rf.rank
        ]
        if odd:
            said = "; ".join(f"{f.relative_to(found.root)}: named rank {n}, says rank {r}" for f, n, r in odd[:3])
            out.append(
                f"{run.name}: {len(odd)} file{'s are' if len(odd) > 1 else ' is'} named for another rank than"
                f" {'their' if len(odd) > 1 else 'its'} distributedInfo says ({said}{'; ...' if len(odd) > 3 else ''});"
                " read as the rank the trace says (a rank with several files reads them as its cycles)"
            )
        outside = [rf.rank for rf in run.ranks if rf.world_size and not 0 <= rf.rank < rf.world_size]
        if outside:
            shown = ", ".join(map(str, outside[:5])) + (", ..." if len(outside) > 5 else "")
            out.append(
                f"{run.name}: rank{'s' if len(outside) > 1 else ''} {shown} {'are' if len(outside) > 1 else 'is'}"
                " outside the world size its traces name (ranks 0 to world size - 1): a trace of another job?"
            )
    return out


@dataclass(frozen=True)
class Head:
    rank: int | None = None
    world_size: int | None = None
    backend: str | None = None


class NotATrace(ValueError):
    """A JSON file that is no trace (a config, our own run.json/report.json), seen from its head.

    ``named``: whether it looked like a trace (its name says so), so that skipping it is said;
    a ``config.json`` beside the traces is left out silently.
    """

    def __init__(self, problem: str, *, named: bool) -> None:
        super().__init__(problem)
        self.named = named


def _inflated_head(path: Path, size: int) -> bytes:
    """The first ``size`` inflated bytes of a gzip file, or all of them when it inflates to
    fewer, a stream cut short included: ``gzip.open(...).read(size)`` raised EOFError for a
    cut stream of under ``size`` bytes, and the directory skipped a rank that ``torchscope
    table`` reads with a warning. Raises ``zlib.error`` when the bytes are not gzip."""
    out = bytearray()
    inflate = zlib.decompressobj(wbits=31)
    pending = b""
    with path.open("rb") as fh:
        while len(out) < size:
            if not pending:
                pending = fh.read(1 << 16)
                if not pending:
                    break
            if inflate.eof:  # the next member of a multi-member file, or the end of the data
                if pending[:2] != b"\x1f\x8b":
                    break
                inflate = zlib.decompressobj(wbits=31)
            out += inflate.decompress(pending, size - len(out))  # bounded: a stream of zeros inflates 1000x
            pending = inflate.unconsumed_tail or (inflate.unused_data if inflate.eof else b"")
    return bytes(out[:size])


def read_head(path: Path, size: int = HEAD_BYTES) -> Head:
    """``distributedInfo`` from the first ``size`` bytes of a trace (inflated when gzip'd).

    Raises ``OSError``/``ValueError`` when the file cannot be opened or is not JSON text, and
    ``NotATrace`` when the head shows it is none: the whole file was read without a
    ``traceEvents`` key, or it is our own output. A large file whose ``traceEvents`` come after
    the head stays a candidate (the reader says why when it is not one).
    """
    with path.open("rb") as fh:
        magic = fh.read(2)
    if magic == b"\x1f\x8b":  # gzip by its magic number, as the reader decides, not by its name
        try:
            raw = _inflated_head(path, size)
        except zlib.error as exc:
            raise ValueError(f"not a readable gzip file ({exc})") from exc
    else:  # plain JSON, whatever it is named (a trace named .json.gz was skipped here, read alone)
        with path.open("rb") as fh:
            raw = fh.read(size)
    text = raw.decode("utf-8", errors="replace")
    body = text.lstrip()
    if not body.startswith(("{", "[")):
        raise ValueError(not_a_document(raw, whole=len(raw) < size, name=path.name))
    if body.startswith("{") and _EVENTS.search(text) is None:
        if _OURS.match(body):
            raise NotATrace("torchscope's own output, not a trace", named=False)
        if len(raw) < size:  # the whole file, and no traceEvents in it
            if _KINETO_HEAD.search(text):
                raise NotATrace("Kineto's header but no 'traceEvents' key: a trace that lost its events", named=True)
            raise NotATrace("no 'traceEvents' key: not a trace", named="trace" in path.name.lower())
    m = _DIST.search(text)
    if m is None:
        return Head()
    info = text[m.end() : m.end() + 4096]
    # the first "rank" after the brace is distributedInfo's own ("ranks" lists are plural)
    r, w, b = _DIST_RANK.search(info), _DIST_WORLD.search(info), _DIST_BACKEND.search(info)
    return Head(
        rank=int(r.group(1)) if r else None,
        world_size=int(w.group(1)) if w else None,
        backend=b.group(1) if b else None,
    )


def trace_named(directory: Path) -> tuple[list[Path], list[tuple[Path, str]]]:
    """Every ``*.json[.gz]`` under a directory that is a regular file, sorted, never our own
    store's files nor hidden ones (``writes.hidden``: a dot-file such as our temporary
    ``.partial-PID-N-NAME``, or one in a dot-directory); and, from the same walk, the entries
    so named that are no regular file, with why (a link to a file that is gone, a FIFO, a
    socket, a device: they were left out without a word). Nothing is opened here (a FIFO
    would block)."""
    files: list[Path] = []
    odd: list[tuple[Path, str]] = []
    for f in directory.rglob("*"):
        if not f.name.endswith(TRACE_SUFFIXES) or hidden(f.relative_to(directory)):
            continue
        try:
            mode = f.stat().st_mode
        except FileNotFoundError:
            odd.append((f, "a symbolic link to a file that does not exist"))
            continue
        except OSError as exc:
            odd.append((f, f"cannot be looked at ({exc.strerror or exc})"))
            continue
        if stat.S_ISREG(mode):
            if not _in_store(f):
                files.append(f)
            continue
        what = (
            "a FIFO"
            if stat.S_ISFIFO(mode)
            else "a socket"
            if stat.S_ISSOCK(mode)
            else "a device"
            if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
            else None  # a folder named like a trace: walked into
        )
        if what is not None:
            odd.append((f, f"not a regular file ({what})"))
    return sorted(files), sorted(odd)


def _how_the_run_ended(path: Path, directory: Path) -> list[str]:
    """What a ``torchscope run``'s run.json says of a script that did not end well, in one line:
    a report of its run directory showed the traces and said nothing of the crash."""
    try:
        facts = json.loads(path.read_text(encoding="utf-8"))
        if facts.get("state") == "running":
            return [_run_not_ended(facts, path.relative_to(directory), path.parent / CRASH_FILE)]
        code, error = int(facts.get("exit_code", 0)), facts.get("error")
    except (OSError, ValueError, TypeError, AttributeError):
        return []
    said = []
    lost = facts.get("traces_not_written")
    if isinstance(lost, list) and lost:  # a full disk: no file is there to say they were recorded
        names = ", ".join(Path(str(p)).name for p in lost)
        said.append(
            f"{path.relative_to(directory)}: {len(lost)} recorded cycle{'s' if len(lost) != 1 else ''}"
            f" could not be written (a full disk?), so {'they are' if len(lost) != 1 else 'it is'} missing: {names}"
        )
    if code == 0:
        return said
    why = f" ({error})" if error else ""
    traces = facts.get("traces")
    kept = "it wrote no trace" if isinstance(traces, list) and not traces else "its traces end where it stopped"
    return [f"{path.relative_to(directory)}: the script exited {code}{why}: {kept}", *said]


# where ``torchscope run`` has Python's faulthandler write the stacks of a crash (a segfault in
# native code): a run that dies so leaves no run.json of its end, and was taken for a SIGKILL
CRASH_FILE = "crash.txt"


def _run_not_ended(facts: dict[str, object], rel: Path, crash: Path) -> str:
    """A run.json written at the start and never replaced: the run is still going (its process
    is alive on this machine), crashed (``crash``: what faulthandler wrote), or was killed
    before it could say how it ended."""
    import socket

    try:
        said = crash.read_text(encoding="utf-8", errors="replace").strip().splitlines()
    except OSError:
        said = []
    if said:
        return (
            f"{rel}: the run crashed ({said[0].strip()}; the Python stacks at the crash are in"
            f" {rel.parent / CRASH_FILE}): its traces end where it stopped, and a cycle being recorded then is lost"
        )

    pid, host = facts.get("pid"), facts.get("host")
    if host not in (None, socket.gethostname()):
        return (
            f"{rel}: the run on {host} has not recorded how it ended: it is still going there, or was"
            " killed (SIGKILL, e.g. the out-of-memory killer, or its machine stopped); its traces end"
            " where they stop"
        )
    if isinstance(pid, int) and pid > 0 and _alive(pid, facts.get("started")):
        return f"{rel}: the run is still going (process {pid}): its traces so far"
    return (
        f"{rel}: the run never recorded how it ended (killed by SIGKILL, e.g. the out-of-memory"
        " killer, or its machine stopped; or its last write failed, on a full disk): its traces end"
        " where it stopped, and a cycle being recorded then is lost"
    )


def _alive(pid: int, started: object) -> bool:
    """Whether ``pid`` is a live process that may be the run that wrote its record at
    ``started`` (ISO time): not a zombie (killed, not yet reaped), not a process that reused the
    number after the run (it started later). Where ``/proc`` is missing, any such process."""
    import datetime as dt

    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        boot = next(int(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines() if line.startswith("btime"))
    except FileNotFoundError:
        return False
    except (OSError, ValueError, IndexError, StopIteration):  # no /proc (macOS): ask the kernel
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except OSError:  # someone else's process of that number: alive
            return True
        return True
    if fields[0] in ("Z", "X"):  # dead, its parent not told yet
        return False
    try:
        began = boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")
        recorded = dt.datetime.fromisoformat(str(started)).timestamp()
    except (ValueError, TypeError, OSError):
        return True
    return began <= recorded + 2  # the record is written after the process starts (whole seconds)


def scan(directory: Path, files: list[Path] | None = None) -> tuple[list[tuple[Path, Head]], list[str]]:
    """The traces under a directory with their heads, and a "skipped FILE: why" line for each
    file left out that looked like a trace. Every ``*.json[.gz]`` is looked at (a trace is never
    dropped because another file's name differs); a config file, ``torchscope run``'s
    ``run.json``/``report.json`` are told apart by their first bytes and left out silently.
    ``files``: look only at these (under ``directory``), e.g. the ones ``serve`` lets out."""
    traces: list[tuple[Path, Head]] = []
    skipped: list[str] = []
    found, odd = trace_named(directory) if files is None else (files, [])
    for f in found:
        try:
            traces.append((f, read_head(f)))
        except NotATrace as exc:
            if exc.named:
                skipped.append(f"skipped {f.relative_to(directory)}: {exc}")
            elif f.name == "run.json":
                skipped.extend(_how_the_run_ended(f, directory))
        except (OSError, ValueError) as exc:
            skipped.append(f"skipped {f.relative_to(directory)}: {exc}")
    skipped.extend(f"skipped {f.relative_to(directory)}: {why}" for f, why in odd)
    return traces, skipped


def trace_files(directory: Path) -> list[Path]:
    """The trace files under a directory (see ``scan``)."""
    return [f for f, _ in scan(directory)[0]]


def _in_store(f: Path) -> bool:
    """Whether ``f`` is part of a ``Trace.save`` store (its meta.json), not a trace."""
    return (f.parent / "meta.json").is_file() and (f.parent / "events.parquet").is_file()


def rank_in_name(path: Path, root: Path) -> int | None:
    """``rank-N``/``rank_N``/``rankN`` in the file name, else in a folder between root and it."""
    for part in [path.name, *reversed(path.relative_to(root).parent.parts)]:
        m = _RANK.search(part)
        if m:
            return int(m.group(1))
    return None


def _run_of(path: Path, root: Path) -> str:
    """The folder the file sits in, relative to root; with torchrun-style ``rank-N`` folders
    (``OUT/rank-N/traces/``), the folder above the first of them; for ``torchscope run``'s own
    cycles (``OUT/traces/step_N...``, ``run...``, ``script_profilerK.cycleN...``), ``OUT`` (the
    run was headed "traces")."""
    parts = path.relative_to(root).parent.parts
    cut = next((i for i, p in enumerate(parts) if _RANK.fullmatch(p)), len(parts))
    ours = cycle_names.is_cycle_file(path.name)
    if cut == len(parts) and parts and parts[-1] == "traces" and ours:
        cut -= 1
    if parts[:cut]:
        return "/".join(parts[:cut])
    # the directory itself: by its name, also when given as "." or "..", or as OUT/traces
    here = root.resolve()
    if here.name == "traces" and ours and cut == len(parts) and here.parent.name:
        here = here.parent
    return here.name or str(root)


def _worker(path: Path) -> str:
    """The writer of a file without a rank: ``tensorboard_trace_handler``'s worker name (its
    cycles share it), ``torchscope run``'s cycle files (one run's cycles, whatever recorded
    them: ``cycle_names``), else the file's own name (a file of its own)."""
    m = _TB.match(path.name)
    if m:
        return m.group("worker")
    if cycle_names.is_cycle_file(path.name):
        return _RUN_WRITER
    for suffix in (".pt.trace.json.gz", ".pt.trace.json", ".json.gz", ".json"):
        if path.name.endswith(suffix):
            return path.name[: -len(suffix)]
    return path.name


def _family(path: Path) -> str:
    """The name shared by the files of one ranked run: ``tensorboard_trace_handler``'s files
    are all one run per folder (""), and so are ``torchscope run``'s (``rank-N.step_M``, and
    ``rank-N.script_profilerK.cycleM`` once the script's profiler took over); others by their
    name with each number a ``*`` (``nccl_rank*_of_*``)."""
    if _TB.match(path.name):
        return ""
    if cycle_names.is_cycle_file(path.name):
        return _RUN_WRITER
    return re.sub(r"\d+", "*", _worker(path))


def _cycle_order(path: Path) -> tuple[object, ...]:
    m = _TB.match(path.name)
    if m:
        return (int(m.group("stamp")), path.name)
    if cycle_names.is_cycle_file(path.name):  # as written: the setup, ours, the script's
        return (0, *cycle_names.written_order(path.name))
    return (0, *natural(path.name))


def natural(key: str) -> tuple[object, ...]:
    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", key))


def discover(root: str | Path, files: list[Path] | None = None) -> Discovery:
    """Runs, ranks and cycles of a directory, from file names and the first bytes of each file
    (only of ``files``, when given: paths under ``root``)."""
    root = Path(root)
    groups: dict[tuple[str, int | None, str], list[tuple[Path, Head]]] = defaultdict(list)
    found, skipped = scan(root, files)
    for f, head in found:
        run = _run_of(f, root)
        rank = head.rank if head.rank is not None else rank_in_name(f, root)
        # without any rank, each worker of a folder is its own run (never a rank: a pid is not one);
        # with one, files named alike (digits aside) are one run's ranks and cycles, and unrelated
        # traces in one folder (nccl_rank0_of_2, diff_test_rank1_of_2) are runs of their own
        worker = _worker(f) if rank is None else _family(f)
        groups[(run, rank, worker)].append((f, head))
    workers_per_run: dict[str, set[str]] = defaultdict(set)
    files_of: dict[tuple[str, str], list[Path]] = defaultdict(list)
    for (run, _rank, worker), members in groups.items():
        workers_per_run[run].add(worker)
        files_of[(run, worker)].extend(f for f, _ in members)
    runs: dict[str, list[RankFiles]] = defaultdict(list)
    world_sizes: dict[str, set[int]] = defaultdict(set)
    for (run, rank, worker), members in groups.items():
        name = run
        if len(workers_per_run[run]) > 1 and worker:
            alone = files_of[(run, worker)]  # a run of one file is named by it, not its pattern
            name = f"{run}/{_worker(alone[0]) if len(alone) == 1 else worker}"
        members.sort(key=lambda fh: _cycle_order(fh[0]))
        heads = [h for _, h in members]
        world_sizes[name].update(h.world_size for h in heads if h.world_size)
        runs[name].append(
            RankFiles(
                run=name,
                rank=0 if rank is None else rank,
                files=tuple(f for f, _ in members),
                world_size=next((h.world_size for h in heads if h.world_size), None),
                backend=next((h.backend for h in heads if h.backend), None),
                rank_from="single"
                if rank is None
                else ("distributedInfo" if heads[0].rank is not None else "name"),
            )
        )
    ordered = tuple(
        Run(name, tuple(sorted(ranks, key=lambda r: r.rank)), tuple(sorted(world_sizes[name])))
        for name, ranks in sorted(runs.items(), key=lambda kv: natural(kv[0]))
    )
    return Discovery(root=root, runs=ordered, skipped=tuple(skipped))
