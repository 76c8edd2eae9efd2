"""``torchscope serve LOGDIR``: the dashboard for a log directory over HTTP, refreshing as traces arrive.

The successor of the TensorBoard profiler plugin for a TensorBoard-style log directory. Safe by
default: binds 127.0.0.1, serves only trace files found under LOGDIR (named by their path
relative to it, checked after resolving links), never executes anything from a trace, and
answers every other path with 404. The page polls ``api/runs``; payloads are cached per file
and rebuilt when the file changes.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from torchscope.cli.base import EXIT_BAD_INPUT, EXIT_OK
from torchscope.errors import TraceError

LOOPBACK = ("127.0.0.1", "localhost", "::1")
TRACE_SUFFIXES = (".json", ".json.gz")


class LogDir:
    """The traces under one directory, and their dashboard payloads (cached by mtime and size)."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self._cache: dict[str, tuple[tuple[float, int], bytes]] = {}
        self._lock = threading.Lock()

    def runs(self) -> list[dict[str, Any]]:
        out = []
        for p in sorted(self.root.rglob("*")):
            if not p.is_file() or not p.name.endswith(TRACE_SUFFIXES) or self.resolve(self.rel(p)) is None:
                continue
            st = p.stat()
            out.append({"id": self.rel(p), "name": self.rel(p), "size": st.st_size, "mtime": st.st_mtime})
        return out

    def rel(self, p: Path) -> str:
        return p.relative_to(self.root).as_posix()

    def resolve(self, rel: str) -> Path | None:
        """The file ``rel`` names, only if it is a trace file inside the log directory."""
        if not rel or "\x00" in rel:
            return None
        try:
            p = (self.root / rel).resolve()
            p.relative_to(self.root)
        except (ValueError, OSError):
            return None
        return p if p.is_file() and p.name.endswith(TRACE_SUFFIXES) else None

    def payload(self, rel: str) -> bytes:
        path = self.resolve(rel)
        if path is None:
            raise FileNotFoundError(rel)
        st = path.stat()
        key = (st.st_mtime, st.st_size)
        with self._lock:
            hit = self._cache.get(rel)
        if hit is not None and hit[0] == key:
            return hit[1]
        from torchscope.cli.common import load_single
        from torchscope.render.payload import build_payload

        data = json.dumps(build_payload(load_single(path), title=rel), allow_nan=False).encode()
        with self._lock:
            self._cache[rel] = (key, data)
        return data


def make_handler(logdir: LogDir, poll_ms: int) -> type[BaseHTTPRequestHandler]:
    from torchscope.render.html import serve_page

    page = serve_page(f"{logdir.root.name}", poll_ms=poll_ms).encode()

    class Handler(BaseHTTPRequestHandler):
        server_version = "torchscope"
        sys_version = ""

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
            pass

        def _send(self, status: int, body: bytes, ctype: str, extra: dict[str, str] | None = None) -> None:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("X-Content-Type-Options", "nosniff")
            self.send_header("Cache-Control", "no-store")
            for k, v in (extra or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:  # noqa: N802 - stdlib name
            url = urlsplit(self.path)
            query = parse_qs(url.query)
            rel = (query.get("id") or [""])[0]
            try:
                if url.path in ("/", "/index.html"):
                    self._send(HTTPStatus.OK, page, "text/html; charset=utf-8")
                elif url.path == "/api/runs":
                    body = json.dumps({"logdir": str(logdir.root), "runs": logdir.runs()}).encode()
                    self._send(HTTPStatus.OK, body, "application/json")
                elif url.path == "/api/payload":
                    self._send(HTTPStatus.OK, logdir.payload(rel), "application/json")
                elif url.path == "/api/file":
                    path = logdir.resolve(rel)
                    if path is None:
                        raise FileNotFoundError(rel)
                    name = path.name.replace('"', "")
                    self._send(
                        HTTPStatus.OK,
                        path.read_bytes(),
                        "application/octet-stream",
                        {"Content-Disposition": f'attachment; filename="{name}"'},
                    )
                else:
                    self._send(HTTPStatus.NOT_FOUND, b"not found", "text/plain")
            except FileNotFoundError:
                self._send(HTTPStatus.NOT_FOUND, b"not found", "text/plain")
            except TraceError as exc:
                self._send(HTTPStatus.UNPROCESSABLE_ENTITY, str(exc).encode(), "text/plain; charset=utf-8")

        def do_POST(self) -> None:  # noqa: N802
            self._send(HTTPStatus.METHOD_NOT_ALLOWED, b"read-only", "text/plain")

    return Handler


def make_server(
    logdir: str | Path, host: str = "127.0.0.1", port: int = 0, poll_ms: int = 5000
) -> ThreadingHTTPServer:
    """A ready (not yet serving) server for ``logdir``; port 0 picks a free port."""
    root = Path(logdir)
    if not root.is_dir():
        raise TraceError(str(logdir), "not a directory")
    server = ThreadingHTTPServer((host, port), make_handler(LogDir(root), poll_ms))
    server.daemon_threads = True
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
            "--poll", type=float, default=5.0, help="seconds between the page's refreshes (default 5)"
        )
        parser.add_argument("--json", action="store_true", help="print the URL as JSON once listening")

    def run(self, args: argparse.Namespace) -> int:
        try:
            server = make_server(args.logdir, args.host, args.port, int(args.poll * 1000))
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
