"""``torchscope serve LOGDIR``: the dashboard for a log directory over HTTP, refreshing as traces arrive.

The successor of the TensorBoard profiler plugin for a TensorBoard-style log directory. Safe on a
shared or hostile network, by design rather than by luck:

- **DNS rebinding.** A page on any site the user visits can make its own domain resolve to
  127.0.0.1 and then read this server as "same origin". So only requests whose ``Host`` header
  names the address we are bound to (and our port) are answered; anything else gets 421. A
  cross-site ``Origin`` gets 403.
- **Names from the file system never reach a header raw.** Traces are addressed by ids we
  generate (the base64url of the path's bytes relative to LOGDIR, so any name the OS allows,
  non-UTF-8 bytes included, round-trips); a download's name goes out as RFC 6266/5987
  ``filename*`` (percent-encoded UTF-8) beside an ASCII fallback.
- **Confinement.** An id resolves only to a regular trace file inside LOGDIR after following
  links; loops, broken links, FIFOs and devices are 404s (a FIFO is never opened: opening one
  blocks).
- **Bounded work.** A fixed pool of worker threads answers connections (a listen backlog of
  128 holds the rest); a payload is built once per file version (path, mtime, size, inode),
  shared by every request that wants it while it is being built, a couple of builds at most run
  at a time, and built payloads are kept in a cache of bounded size.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import contextlib
import ipaddress
import json
import os
import queue
import socket
import stat
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, quote, urlsplit

from torchscope.cli.base import EXIT_BAD_INPUT, EXIT_OK
from torchscope.errors import TraceError
from torchscope.writes import hidden

if TYPE_CHECKING:
    from torchscope.job.discover import Run

LOOPBACK = ("127.0.0.1", "localhost", "::1")
TRACE_SUFFIXES = (b".json", b".json.gz")

WORKERS = 8  # threads answering requests; a slow client holds one for at most TIMEOUT_S
BACKLOG = 128  # connections the kernel holds before we accept them
QUEUED = 1024  # accepted connections waiting for a worker; beyond that: 503 at once
TIMEOUT_S = 30.0  # per socket operation, so that a client that stops reading frees its worker
BUILDS = 2  # payloads built at once (each holds a whole Trace while it builds)
CACHE_BYTES = 256 * 1024 * 1024  # built payloads kept (least recently used dropped first)
COPY_BYTES = 1 << 20  # downloads are streamed in pieces of this size, never read whole


# -- ids and names ------------------------------------------------------------------------------
def run_id(rel: bytes) -> str:
    """The id of the file at ``rel`` (bytes relative to LOGDIR): base64url, no padding."""
    return base64.urlsafe_b64encode(rel).rstrip(b"=").decode("ascii")


def rel_of(run: str) -> bytes | None:
    """The relative path an id names, or None when it is not one of our ids."""
    if not run or len(run) > 8192 or not run.isascii():
        return None
    try:
        return base64.urlsafe_b64decode(run + "=" * (-len(run) % 4))
    except (binascii.Error, ValueError):
        return None


# a run of several ranks or cycles is listed once, as a job: its id is this prefix (outside the
# base64url alphabet of file ids) and its name in base64url
JOB_PREFIX = "job~"


def job_id(name: str) -> str:
    return (
        JOB_PREFIX + base64.urlsafe_b64encode(name.encode("utf-8", "surrogateescape")).rstrip(b"=").decode()
    )


def display_name(raw: bytes) -> str:
    """A file name as text for the page: invalid UTF-8 shown as U+FFFD (the id keeps the bytes)."""
    return raw.decode("utf-8", "replace")


def content_disposition(name: bytes) -> str:
    """``attachment`` with the name per RFC 6266: an ASCII fallback (anything outside printable
    ASCII, quotes and backslashes become ``_``) and ``filename*`` in percent-encoded UTF-8."""
    text = display_name(name)
    fallback = "".join(c if " " <= c <= "~" and c not in '"\\%' else "_" for c in text) or "trace"
    return f"attachment; filename=\"{fallback}\"; filename*=UTF-8''{quote(text, safe='')}"


# -- the log directory --------------------------------------------------------------------------
class _Entry:
    """A payload being built or built, for one version of one file."""

    def __init__(self, version: tuple[int, ...]) -> None:
        self.version = version
        self.future: Future[bytes] = Future()
        self.size = 0


class LogDir:
    """The traces under one directory, and their dashboard payloads (one build per file version)."""

    def __init__(self, root: Path, builder: Callable[[Path, str], bytes] | None = None) -> None:
        self.root = root.resolve()
        self._root_b = os.fsencode(self.root)
        self._build = builder or build_payload_bytes
        self._cache: OrderedDict[str, _Entry] = OrderedDict()
        self._cached_bytes = 0
        self._kinds: dict[bytes, tuple[tuple[int, ...], bool]] = {}  # head verdicts per file version
        # the runs of several files, found from the listed files (again only when they change)
        self._jobs: tuple[tuple[tuple[bytes, tuple[int, ...]], ...], dict[str, Run]] = ((), {})
        self._skipped: tuple[str, ...] = ()  # "skipped FILE: why" of the last discovery
        self._lock = threading.Lock()
        self._builds = threading.BoundedSemaphore(BUILDS)

    def _walk(self) -> Iterator[bytes]:
        """Relative paths (bytes) of the trace files under the root, following links to
        directories once each (a loop is visited once), in sorted order."""
        seen: set[tuple[int, int]] = set()
        for top, dirs, files in os.walk(self._root_b, followlinks=True, onerror=lambda _e: None):
            try:
                st = os.stat(top)
            except OSError:
                dirs[:] = []
                continue
            if (st.st_dev, st.st_ino) in seen:
                dirs[:] = []
                continue
            seen.add((st.st_dev, st.st_ino))
            if not _inside(os.path.realpath(top), self._root_b):
                dirs[:] = []  # a link out of the log directory: nothing there is served
                continue
            from torchscope.job.discover import natural

            # in number order, as discovery orders cycles: step_3 before step_11 (it listed
            # step_1, step_11, ..., step_23, step_3)
            dirs[:] = sorted((d for d in dirs if not hidden(d)), key=lambda d: natural(os.fsdecode(d)))
            for name in sorted(files, key=lambda f: natural(os.fsdecode(f))):
                if name.endswith(TRACE_SUFFIXES) and not hidden(name):
                    yield os.path.relpath(os.path.join(top, name), self._root_b)

    def runs(self) -> list[dict[str, Any]]:
        """The traces to list: each run of several ranks or cycles once, as a job (as
        ``torchscope report DIR`` reads it), first; then every trace file on its own. A config
        file, ``torchscope run``'s run.json/report.json are no runs (told apart by their first
        bytes, once per file version)."""
        files: dict[Path, dict[str, Any]] = {}  # by the path discovery names each file with
        listed: list[tuple[bytes, tuple[int, ...]]] = []
        for rel in self._walk():
            found = self._stat(rel)
            if found is None or not self._looks_like_trace(rel, *found):
                continue
            st = found[1]
            listed.append((rel, (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)))
            files[self.root / os.fsdecode(rel)] = {
                "id": run_id(rel),
                "name": display_name(rel),
                "size": st.st_size,
                "mtime": st.st_mtime,
            }
        jobs = []
        for name, run in self._runs_of(tuple(listed)).items():
            # a job's size and time are its files' as just listed (no second stat of each)
            stats = [files[f] for r in run.ranks for f in r.files if f in files]
            jobs.append(
                {
                    "id": job_id(name),
                    "name": f"{display_name(os.fsencode(name))} (job: {len(run.ranks)} rank{'s' * (len(run.ranks) != 1)}, "
                    f"{run.cycles} cycle{'s' * (run.cycles != 1)})",
                    "kind": "job",
                    "size": sum(f["size"] for f in stats),
                    "mtime": max((f["mtime"] for f in stats), default=0.0),
                }
            )
        return jobs + list(files.values())

    def _runs_of(self, listed: tuple[tuple[bytes, tuple[int, ...]], ...]) -> dict[str, Run]:
        """The runs of more than one file among the listed ones (``job.discover``, on exactly
        these files: nothing the listing leaves out is read), found again only when they change."""
        with self._lock:
            if self._jobs[0] == listed:
                return self._jobs[1]
        from torchscope.job.discover import discover

        paths = [self.root / os.fsdecode(rel) for rel, _ in listed]
        found = discover(self.root, files=paths)
        jobs = {run.name: run for run in found.runs if sum(len(r.files) for r in run.ranks) > 1}
        with self._lock:
            self._jobs = (listed, jobs)
            self._skipped = found.skipped
        return jobs

    def _looks_like_trace(self, rel: bytes, real: bytes, st: os.stat_result) -> bool:
        """Whether the file's head could be a trace (``job.discover.read_head``); an unreadable
        file stays listed, so that opening it says why."""
        from torchscope.job.discover import NotATrace, read_head

        version = (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)
        known = self._kinds.get(rel)
        if known is not None and known[0] == version:
            return known[1]
        try:
            read_head(Path(os.fsdecode(real)))
            verdict = True
        except NotATrace:
            verdict = False
        except (OSError, ValueError):
            verdict = True
        with self._lock:
            self._kinds[rel] = (version, verdict)
        return verdict

    def _stat(self, rel: bytes) -> tuple[bytes, os.stat_result] | None:
        """The real path and stat of ``rel``, only if it is a regular trace file inside the root."""
        if not rel or b"\x00" in rel or not rel.endswith(TRACE_SUFFIXES) or hidden(rel):
            return None  # hidden files (our temporaries) are neither listed nor served
        try:
            real = os.path.realpath(os.path.join(self._root_b, rel), strict=True)
            st = os.stat(real)
        except (OSError, ValueError, RuntimeError):  # missing, a broken link, a loop
            return None
        if not _inside(real, self._root_b) or not stat.S_ISREG(st.st_mode):
            return None
        if not real.endswith(TRACE_SUFFIXES):
            return None
        return real, st

    def resolve(self, run: str) -> Path | None:
        """The file the id ``run`` names, only if it is a trace file inside the log directory."""
        rel = rel_of(run)
        found = None if rel is None else self._stat(rel)
        return None if found is None else Path(os.fsdecode(found[0]))

    def open(self, run: str) -> tuple[Any, int, bytes]:
        """An open binary file, its size and its base name (bytes); FileNotFoundError otherwise.

        Opened without blocking and checked again on the descriptor, so that a file swapped for
        a FIFO after the check is refused, never waited on.
        """
        rel = rel_of(run)
        found = None if rel is None else self._stat(rel)
        if found is None or rel is None or not self._looks_like_trace(rel, *found):
            raise FileNotFoundError(run)  # not listed (a config file, run.json): not served either
        try:
            fd = os.open(found[0], os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            raise FileNotFoundError(run) from None
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise FileNotFoundError(run)
        return os.fdopen(fd, "rb"), st.st_size, os.path.basename(found[0])

    def payload(self, run: str) -> bytes:
        """The dashboard payload of the file ``run`` names (or of the job, for a job's id), built
        once per version of its files: concurrent requests for it wait for the one build (or its
        error)."""
        if run.startswith(JOB_PREFIX):
            return self._job_payload(run)
        rel = rel_of(run)
        found = None if rel is None else self._stat(rel)
        if found is None or rel is None or not self._looks_like_trace(rel, *found):
            raise FileNotFoundError(run)
        real, st = found
        version = (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)
        path, title = Path(os.fsdecode(real)), display_name(rel)
        return self._cached(run, version, lambda: self._build(path, title))

    def _job_payload(self, run: str) -> bytes:
        """The job view of one run of several files, from the listing's discovery (a job id
        the listing does not hold is not found)."""

        def listed() -> Run | None:
            return next((j for name, j in self._jobs[1].items() if job_id(name) == run), None)

        job = listed()
        if job is None:  # not listed yet (a page opened on a link): list, then look again
            self.runs()
            job = listed()
        if job is None:
            raise FileNotFoundError(run)
        version: tuple[int, ...] = ()
        for path in (f for r in job.ranks for f in r.files):
            try:
                st = path.stat()
            except OSError:
                raise FileNotFoundError(run) from None
            version += (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)
        # the files of the run's folders that could not be read, named as `report DIR` names them
        folders = {p.parent.relative_to(self.root).as_posix() for r in job.ranks for p in r.files}
        skipped = tuple(
            line
            for line in self._skipped
            if (line.removeprefix("skipped ").split(": ", 1)[0].rpartition("/")[0] or ".") in folders
        )
        return self._cached(run, version, lambda: build_job_bytes(self.root, job, skipped))

    def _cached(self, run: str, version: tuple[int, ...], build: Callable[[], bytes]) -> bytes:
        """``build()``'s bytes for this version of ``run``, built once (see ``payload``)."""
        with self._lock:
            entry = self._cache.get(run)
            mine = entry is None or entry.version != version
            if mine:
                if entry is not None:
                    self._forget(run)
                entry = _Entry(version)
                self._cache[run] = entry
            else:
                self._cache.move_to_end(run)
        assert entry is not None
        if mine:
            self._fill(run, entry, build)
        return entry.future.result()

    def _fill(self, run: str, entry: _Entry, build: Callable[[], bytes]) -> None:
        try:
            with self._builds:
                data = build()
        except TraceError as exc:  # the same answer for this version until the file changes
            entry.future.set_exception(exc)
            return
        except BaseException as exc:  # MemoryError, a bug: tell the waiters, do not keep it
            entry.future.set_exception(exc)
            with self._lock:
                if self._cache.get(run) is entry:
                    self._forget(run)
            raise
        entry.future.set_result(data)
        with self._lock:
            if self._cache.get(run) is not entry:
                return
            entry.size = len(data)
            self._cached_bytes += entry.size
            while self._cached_bytes > CACHE_BYTES and len(self._cache) > 1:
                oldest = next(iter(self._cache))
                self._forget(oldest if oldest != run else list(self._cache)[1])

    def _forget(self, run: str) -> None:
        """Drop a cache entry (callers hold the lock); requests already waiting keep their future."""
        entry = self._cache.pop(run)
        self._cached_bytes -= entry.size


def _inside(path: bytes, root: bytes) -> bool:
    return os.path.commonpath([path, root]) == root


def build_job_bytes(root: Path, run: Run, skipped: tuple[str, ...] = ()) -> bytes:
    """The job view of one run (its ranks and cycles), as ``torchscope report DIR`` builds it;
    ``skipped``: the files of its folders that could not be read."""
    from torchscope.job.discover import Discovery
    from torchscope.job.pipeline import analyse_job
    from torchscope.job.render import job_payload

    job = analyse_job(root, progress=False, found=Discovery(root=root, runs=(run,), skipped=skipped))
    return json.dumps(job_payload(job, run.name), allow_nan=False).encode()


def build_payload_bytes(path: Path, title: str) -> bytes:
    """The dashboard payload of one trace file, as the JSON the page fetches."""
    from torchscope.cli.common import load_single
    from torchscope.render.payload import build_payload

    return json.dumps(build_payload(load_single(path), title=title), allow_nan=False).encode()


# -- who may ask ----------------------------------------------------------------------------------
def allowed_hosts(host: str, port: int, extra: tuple[str, ...] = ()) -> Callable[[str], bool]:
    """A test of a request's ``Host`` header: the bound address or its loopback name, with our
    port. Bound to a wildcard or another address (the user chose to be reachable), IP literals
    and this machine's names are accepted too, but still no other name: a rebinding domain
    never is."""
    names = {host.lower(), *(e.lower() for e in extra)}
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host.lower() == "localhost"
    if loopback:
        names.add("localhost")
    else:
        names |= {socket.gethostname().lower(), socket.getfqdn().lower()}

    def ok(header: str) -> bool:
        value = header.strip().lower()
        if value.startswith("["):
            name, _, rest = value[1:].partition("]")
            if rest and not rest.startswith(":"):
                return False
            port_text = rest[1:]
        else:
            name, _, port_text = value.partition(":")
        if (port_text or "80") != str(port):
            return False
        if name in names:
            return True
        if loopback:
            return False  # only our own names: a rebinding domain resolves to us too
        try:
            ipaddress.ip_address(name)  # an address literal cannot be a rebinding domain
        except ValueError:
            return False
        return True

    return ok


# -- HTTP -----------------------------------------------------------------------------------------
def make_handler(
    logdir: LogDir, poll_ms: int, host_ok: Callable[[str], bool] | None = None
) -> type[BaseHTTPRequestHandler]:
    from torchscope.render.html import serve_page

    page = serve_page(f"{display_name(os.fsencode(logdir.root.name))}", poll_ms=poll_ms).encode()

    class Handler(BaseHTTPRequestHandler):
        server_version = "torchscope"
        sys_version = ""
        timeout = TIMEOUT_S

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
            pass

        def _head(self, status: int, length: int, ctype: str, extra: dict[str, str] | None = None) -> None:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(length))
            self.send_header("X-Content-Type-Options", "nosniff")
            self.send_header("Cache-Control", "no-store")
            self.send_header("Connection", "close")
            for k, v in (extra or {}).items():
                self.send_header(k, v)
            self.end_headers()

        def _send(self, status: int, body: bytes, ctype: str, extra: dict[str, str] | None = None) -> None:
            self._head(status, len(body), ctype, extra)
            self.wfile.write(body)

        def _refused(self) -> bool:
            """Answer and return True when the request does not come from our own page."""
            hosts = self.headers.get_all("Host") or []
            if len(hosts) != 1 or (host_ok is not None and not host_ok(hosts[0])):
                self._send(HTTPStatus.MISDIRECTED_REQUEST, b"unknown host", "text/plain")
                return True
            origin = self.headers.get("Origin")
            if origin is not None and urlsplit(origin).netloc.lower() != hosts[0].strip().lower():
                self._send(HTTPStatus.FORBIDDEN, b"cross-origin request", "text/plain")
                return True
            return False

        def do_GET(self) -> None:  # noqa: N802 - stdlib name
            if self._refused():
                return
            url = urlsplit(self.path)
            run = (parse_qs(url.query).get("id") or [""])[0]
            try:
                if url.path in ("/", "/index.html"):
                    self._send(HTTPStatus.OK, page, "text/html; charset=utf-8")
                elif url.path == "/api/runs":
                    listing = {"logdir": display_name(os.fsencode(logdir.root)), "runs": logdir.runs()}
                    self._send(HTTPStatus.OK, json.dumps(listing).encode(), "application/json")
                elif url.path == "/api/payload":
                    self._send(HTTPStatus.OK, logdir.payload(run), "application/json")
                elif url.path == "/api/file":
                    self._file(run)
                else:
                    self._send(HTTPStatus.NOT_FOUND, b"not found", "text/plain")
            except FileNotFoundError:
                self._send(HTTPStatus.NOT_FOUND, b"not found", "text/plain")
            except TraceError as exc:
                body = str(exc).encode("utf-8", "replace")
                self._send(HTTPStatus.UNPROCESSABLE_ENTITY, body, "text/plain; charset=utf-8")

        def _file(self, run: str) -> None:
            f, size, name = logdir.open(run)
            with f:
                disposition = {"Content-Disposition": content_disposition(name)}
                self._head(HTTPStatus.OK, size, "application/octet-stream", disposition)
                left = size  # the length we announced, even if the file grows meanwhile
                while left > 0 and (chunk := f.read(min(COPY_BYTES, left))):
                    self.wfile.write(chunk)
                    left -= len(chunk)

        def do_POST(self) -> None:  # noqa: N802
            if not self._refused():
                self._send(HTTPStatus.METHOD_NOT_ALLOWED, b"read-only", "text/plain")

    return Handler


class PooledHTTPServer(HTTPServer):
    """An HTTP server whose connections are answered by a fixed pool of daemon threads.

    ``ThreadingHTTPServer`` starts a thread per connection: 200 clients at once are 200 threads,
    each free to build its own copy of a payload. Here the accept loop hands sockets to a queue
    that ``WORKERS`` threads drain; what does not fit the queue is told 503 at once.
    """

    request_queue_size = BACKLOG
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler]) -> None:
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, handler)
        self._queue: queue.Queue[tuple[Any, Any] | None] = queue.Queue(QUEUED)
        self._workers = [
            threading.Thread(target=self._work, name=f"torchscope-serve-{i}", daemon=True)
            for i in range(WORKERS)
        ]
        for t in self._workers:
            t.start()

    def process_request(self, request: Any, client_address: Any) -> None:
        try:
            self._queue.put_nowait((request, client_address))
        except queue.Full:
            with contextlib.suppress(OSError):
                request.sendall(b"HTTP/1.0 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n")
            self.shutdown_request(request)

    def _work(self) -> None:
        while (item := self._queue.get()) is not None:
            request, client_address = item
            try:
                self.finish_request(request, client_address)
            except Exception:
                self.handle_error(request, client_address)
            finally:
                self.shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, TimeoutError)):
            return  # the client went away or stalled: nothing to report
        super().handle_error(request, client_address)

    def server_close(self) -> None:
        super().server_close()
        for _ in self._workers:
            try:
                self._queue.put_nowait(None)
            except queue.Full:
                break


def make_server(
    logdir: str | Path,
    host: str = "127.0.0.1",
    port: int = 0,
    poll_ms: int = 5000,
    allow_hosts: tuple[str, ...] = (),
) -> PooledHTTPServer:
    """A ready (not yet serving) server for ``logdir``; port 0 picks a free port."""
    root = Path(logdir)
    if not root.is_dir():
        raise TraceError(str(logdir), "not a directory")
    holder: list[Callable[[str], bool]] = []
    server = PooledHTTPServer((host, port), make_handler(LogDir(root), poll_ms, lambda h: holder[0](h)))
    bound, port = str(server.server_address[0]), int(server.server_address[1])
    # the address a name such as "localhost" bound to is the one the printed URL names
    holder.append(allowed_hosts(host, port, (*allow_hosts, bound)))
    return server


class ServeCommand:
    name = "serve"
    help = "Serve the dashboard for a log directory on 127.0.0.1, refreshing as traces arrive."
    epilog = """examples:
  torchscope serve ./log
  torchscope serve ./log --port 8080
  torchscope serve ./log --host 0.0.0.0   # reachable from other machines: only on a trusted network"""

    def configure(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "logdir", metavar="LOGDIR", help="a directory of traces (TensorBoard layout or per-rank files)"
        )
        parser.add_argument("--port", type=int, default=6006, help="port (default 6006; 0 picks a free one)")
        parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
        parser.add_argument(
            "--allow-host",
            action="append",
            default=[],
            metavar="NAME",
            help="also answer requests addressed to NAME (a DNS name of this machine); repeatable",
        )
        parser.add_argument(
            "--poll", type=float, default=5.0, help="seconds between the page's refreshes (default 5)"
        )
        parser.add_argument("--json", action="store_true", help="print the URL as JSON once listening")

    def run(self, args: argparse.Namespace) -> int:
        try:
            server = make_server(
                args.logdir, args.host, args.port, int(args.poll * 1000), tuple(args.allow_host)
            )
        except OSError as exc:
            print(
                f"torchscope serve: error: cannot listen on {args.host}:{args.port}: {exc.strerror}",
                file=sys.stderr,
            )
            return EXIT_BAD_INPUT
        host, port = str(server.server_address[0]), int(server.server_address[1])
        url = f"http://{'[' + host + ']' if ':' in host else host}:{port}/"
        if args.host not in LOOPBACK:
            print(
                f"warning: serving on {args.host}: anyone who can reach this machine can read these traces",
                file=sys.stderr,
            )
        if args.json:
            print(json.dumps({"url": url, "logdir": str(Path(args.logdir).resolve())}), flush=True)
        else:
            print(f"serving {args.logdir} at {url} (Ctrl-C to stop)", flush=True)
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            server.server_close()
        return EXIT_OK


COMMAND = ServeCommand()
