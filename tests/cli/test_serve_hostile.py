"""``torchscope serve`` against an attacker: DNS rebinding, header injection, odd file names,
link loops, FIFOs, and 200 clients at once for one uncached trace.

Requests go out on raw sockets (``http.client``) so that the Host header, repeated headers and
byte-level names are exactly what an attacker would send, not what urllib would clean up.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from torchscope.cli import serve
from torchscope.cli.serve import content_disposition, make_server, run_id

SMALL = "cuda/backward_thread_small.json"
BIG = "cuda/diff_control_rank3_of_8.json.gz"  # 1.7 MB gzip, 35 MB of JSON


class Served:
    def __init__(self, logdir: Path, host: str = "127.0.0.1") -> None:
        self.logdir = logdir
        self.server = make_server(logdir, host, 0, poll_ms=200)
        self.port = int(self.server.server_address[1])
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def get(
        self, path: str, host: str | None = None, headers: dict[str, str] | None = None, timeout: float = 120
    ) -> tuple[int, dict[str, str], bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            conn.putrequest("GET", path, skip_host=True, skip_accept_encoding=True)
            if host is not False:
                conn.putheader("Host", host if host is not None else f"127.0.0.1:{self.port}")
            for k, v in (headers or {}).items():
                conn.putheader(k, v)
            conn.endheaders()
            r = conn.getresponse()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
        finally:
            conn.close()

    def runs(self) -> list[dict[str, Any]]:
        status, _, body = self.get("/api/runs")
        assert status == 200
        return list(json.loads(body)["runs"])

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture()
def logdir(tmp_path: Path, traces_dir: Path) -> Path:
    root = tmp_path / "log"
    root.mkdir()
    shutil.copy(traces_dir / SMALL, root / "plain.json")
    (tmp_path / "secret.json").write_text('{"traceEvents": [{"ph": "X", "name": "secret"}]}')
    return root


@pytest.fixture()
def served(logdir: Path) -> Iterator[Served]:
    s = Served(logdir)
    try:
        yield s
    finally:
        s.close()


def test_only_our_own_host_is_answered(served: Served) -> None:
    port = served.port
    plain = run_id(b"plain.json")
    for path in ("/", "/api/runs", f"/api/payload?id={plain}", f"/api/file?id={plain}"):
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"LOCALHOST:{port}"):
            assert served.get(path, host)[0] == 200, (path, host)
        # DNS rebinding: the attacker's domain resolves to 127.0.0.1, the Host header says so
        for host in (
            f"evil.example:{port}",
            "evil.example",
            f"127.0.0.1.evil.example:{port}",
            f"localhost.:{port}",
            f"127.0.0.1:{port + 1}",
            "127.0.0.1",
            f"127.0.0.2:{port}",
            f"[::1]:{port}",
            "",
        ):
            status, _, body = served.get(path, host)
            assert status == 421 and b"traceEvents" not in body and b"plain" not in body, (path, host)
    # no Host at all (HTTP/1.0 style), or two of them
    assert served.get("/api/runs", host=False)[0] == 421  # type: ignore[arg-type]
    assert served.get("/api/runs", headers={"Host": "evil.example"})[0] == 421
    # a page on another site that reaches us (a form, a fetch with no-cors) carries its Origin
    status, _, _ = served.get("/api/runs", headers={"Origin": "http://evil.example"})
    assert status == 403
    assert served.get("/api/runs", headers={"Origin": f"http://127.0.0.1:{port}"})[0] == 200


def test_bound_by_name_the_printed_address_is_answered(logdir: Path) -> None:
    s = Served(logdir, host="localhost")
    try:
        bound = str(s.server.server_address[0])  # what the printed URL names
        assert s.get("/api/runs", f"{bound}:{s.port}")[0] == 200
        assert s.get("/api/runs", f"localhost:{s.port}")[0] == 200
        assert s.get("/api/runs", f"evil.example:{s.port}")[0] == 421
    finally:
        s.close()


def test_host_check_when_bound_to_every_address(logdir: Path) -> None:
    s = Served(logdir, host="0.0.0.0")
    try:
        assert s.get("/api/runs", f"127.0.0.1:{s.port}")[0] == 200
        assert s.get("/api/runs", f"192.0.2.7:{s.port}")[0] == 200  # an address literal
        assert s.get("/api/runs", f"evil.example:{s.port}")[0] == 421  # a domain name: never
    finally:
        s.close()


ODD_NAMES = [
    b"a\r\nSet-Cookie: pwned=1\r\nX-Injected: 1.json",
    "r\u00e9sum\u00e9 \u65e5\u672c.json".encode(),
    "line\u2028sep\u2029para.json".encode(),
    b"bad \xff\xfe utf8.json",
    b'quote" back\\slash %41 semi;colon.json',
    b"\x1b]8;;http:evil\x07ansi\x1b[31m.json",
]


def test_any_file_name_is_listed_downloaded_and_never_reaches_a_header_raw(
    served: Served, logdir: Path
) -> None:
    body_of = (logdir / "plain.json").read_bytes()
    for name in ODD_NAMES:
        with open(os.path.join(os.fsencode(logdir), name), "wb") as f:
            f.write(body_of)
    runs = {r["id"]: r for r in served.runs()}
    for name in ODD_NAMES:
        rid = run_id(name)
        assert rid in runs, name
        assert runs[rid]["name"] == name.decode("utf-8", "replace")
        status, headers, body = served.get(f"/api/file?id={rid}")
        assert status == 200 and body == body_of, name
        assert "set-cookie" not in headers and "x-injected" not in headers
        disposition = headers["content-disposition"]
        assert disposition == content_disposition(name)
        assert disposition.isascii() and "\r" not in disposition and "\n" not in disposition
        # what a browser decodes from filename* is the name itself (invalid UTF-8 as U+FFFD)
        from urllib.parse import unquote

        encoded = disposition.split("filename*=UTF-8''", 1)[1]
        assert unquote(encoded, errors="strict") == name.decode("utf-8", "replace")
        status, _, payload = served.get(f"/api/payload?id={rid}")
        assert status == 200 and json.loads(payload)["report"]["meta"]["events"] > 0  # payload v2


def test_links_loops_fifos_and_traversal_are_404s_and_never_hang(
    served: Served, logdir: Path, tmp_path: Path
) -> None:
    (logdir / "loop.json").symlink_to("loop.json")
    (logdir / "a.json").symlink_to("b.json")
    (logdir / "b.json").symlink_to("a.json")
    (logdir / "broken.json").symlink_to("nowhere.json")
    (logdir / "out.json").symlink_to(tmp_path / "secret.json")
    (logdir / "sub").mkdir()
    (logdir / "sub" / "up").symlink_to("..")  # a directory loop
    (logdir / "sub" / "outside").symlink_to(tmp_path)  # a directory outside the log directory
    shutil.copy(logdir / "plain.json", logdir / "sub" / "inner.json")
    os.mkfifo(logdir / "fifo.json")  # opening it would block until a writer comes
    listed = sorted(r["name"] for r in served.runs())
    assert listed == ["plain.json", "sub/inner.json"]
    for rel in (
        b"loop.json",
        b"a.json",
        b"broken.json",
        b"out.json",
        b"fifo.json",
        b"sub/outside/secret.json",
        b"../secret.json",
        os.fsencode(tmp_path / "secret.json"),
        b"sub/../../secret.json",
        b"plain.json\x00.json",
        b"",
    ):
        for api in ("file", "payload"):
            status, _, body = served.get(f"/api/{api}?id={run_id(rel)}", timeout=30)
            assert status == 404 and b"secret" not in body, (api, rel)
    for bad in (
        "%2e%2e/secret.json",
        "not%20base64%20!",
        "%ff%fe",
        "../secret.json",
        "/etc/passwd",
        "a" * 20000,
    ):
        assert served.get(f"/api/file?id={bad}", timeout=30)[0] in (404, 414), bad
    assert served.get(f"/api/file?id={run_id(b'sub/up/sub/inner.json')}")[0] == 200


def test_200_concurrent_clients_share_one_build(logdir: Path, traces_dir: Path, monkeypatch: Any) -> None:
    shutil.copy(traces_dir / BIG, logdir / "big.json.gz")
    builds: list[str] = []
    real = serve.build_payload_bytes

    def counting(path: Path, title: str) -> bytes:
        builds.append(title)
        return real(path, title)

    monkeypatch.setattr(serve, "build_payload_bytes", counting)
    s = Served(logdir)
    try:
        rid = run_id(b"big.json.gz")
        with ThreadPoolExecutor(200) as pool:
            answers = list(pool.map(lambda _: s.get(f"/api/payload?id={rid}", timeout=600), range(200)))
        assert [a[0] for a in answers] == [200] * 200
        assert len({a[2] for a in answers}) == 1
        assert builds == ["big.json.gz"]  # one build, shared by all 200
        os.utime(logdir / "big.json.gz", ns=(0, 0))  # a new version of the file: built again
        assert s.get(f"/api/payload?id={rid}", timeout=600)[0] == 200
        assert builds == ["big.json.gz", "big.json.gz"]
    finally:
        s.close()


def _peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads peak RSS from /proc")
def test_200_concurrent_clients_as_separate_process_all_answered(
    logdir: Path, traces_dir: Path, capsys: Any
) -> None:
    shutil.copy(traces_dir / BIG, logdir / "big.json.gz")
    proc = subprocess.Popen(
        [sys.executable, "-m", "torchscope", "serve", str(logdir), "--port", "0", "--json"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        url = json.loads(proc.stdout.readline())["url"]
        port = int(url.rstrip("/").rsplit(":", 1)[1])
        idle = _peak_rss_mb(proc.pid)
        rid = run_id(b"big.json.gz")

        def one(_: int) -> tuple[int, int]:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
            try:
                conn.request("GET", f"/api/payload?id={rid}")
                r = conn.getresponse()
                return r.status, len(r.read())
            finally:
                conn.close()

        start = time.perf_counter()
        with ThreadPoolExecutor(200) as pool:
            answers = list(pool.map(one, range(200)))
        took = time.perf_counter() - start
        assert [a[0] for a in answers] == [200] * 200 and len({a[1] for a in answers}) == 1
        peak = _peak_rss_mb(proc.pid)
        with capsys.disabled():
            print(
                f"\nserve: 200 concurrent clients for one uncached {BIG}: all answered in {took:.1f} s;"
                f" server peak RSS {peak:.0f} MB (idle {idle:.0f} MB)"
            )
        # one build of one payload, not 200: the issue saw 6.5 GB here
        assert peak < 2048
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_config_and_our_own_outputs_are_not_listed(served: Served, logdir: Path) -> None:
    """A config file, torchscope run's run.json/report.json beside the traces are no runs: the
    page must not list them, nor open one first (finding 10)."""
    (logdir / "config.json").write_text('{"lr": 0.1}')
    (logdir / "run.json").write_text(json.dumps({"exit_code": 0, "error": None, "wall_s": 1.5}))
    report = {"version": 2, "title": "torchscope run x.py", "runs": [{"name": "x" * 100_000}]}
    (logdir / "report.json").write_text(json.dumps(report))  # bigger than the head we read
    (logdir / "cut.json").write_text('{"traceEvents": [{"ph": "X"')  # a damaged trace stays listed
    assert [r["name"] for r in served.runs()] == ["cut.json", "plain.json"]
    (logdir / "config.json").write_text('{"traceEvents": []}')  # changed into a trace: listed now
    assert [r["name"] for r in served.runs()] == ["config.json", "cut.json", "plain.json"]
