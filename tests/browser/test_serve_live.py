"""``torchscope serve``'s page follows the log directory: the trace it shows is reloaded when
its file changes, and never shown after its file is gone or fails to load (a new user's
findings: the picker and the view disagreed)."""

from __future__ import annotations

import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from torchscope.cli.serve import make_server

A = "cuda/backward_thread_small.json"
B = "cuda/nccl_rank0_of_2.json.gz"


@pytest.fixture()
def served(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    logdir = tmp_path / "log"
    logdir.mkdir()
    server = make_server(logdir, "127.0.0.1", 0, poll_ms=300)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/", logdir
    finally:
        server.shutdown()
        server.server_close()


def _events_card(page: Any) -> str:
    page.wait_for_selector("#view[data-rendered=overview] .card")
    return str(page.locator(".card", has_text="events").first.inner_text())


def test_the_open_trace_follows_its_file(served: tuple[str, Path], traces_dir: Path, page: Any) -> None:
    url, logdir = served
    shutil.copy(traces_dir / A, logdir / "t.json")
    page.goto(url)
    first = _events_card(page)
    # the file is replaced by another trace: the page reloads it on its next poll
    shutil.copy(traces_dir / B, logdir / "t.json")
    page.wait_for_function(f"!document.querySelector('#view').innerText.includes({first!r})", timeout=30_000)
    assert _events_card(page) != first
    # the file is removed: the view says so and offers no tab of the trace that is gone
    (logdir / "t.json").unlink()
    shutil.copy(traces_dir / A, logdir / "other.json")
    page.wait_for_function(
        "document.querySelector('#view').innerText.includes('removed from the log directory')", timeout=30_000
    )
    assert page.locator("#tabs button").count() == 0
    assert page.errors == []


def test_a_trace_that_fails_to_load_leaves_no_tabs_of_the_previous_one(
    served: tuple[str, Path], traces_dir: Path, page: Any
) -> None:
    url, logdir = served
    shutil.copy(traces_dir / A, logdir / "a.json")
    (logdir / "b.pt.trace.json").write_text('{"traceEvents": [{"ph": "X", "name": ')  # cut short: refused
    page.goto(url)
    _events_card(page)
    page.select_option("#run-select", label="b.pt.trace.json")
    page.wait_for_function(
        "document.querySelector('#view').innerText.includes('Could not load')", timeout=30_000
    )
    assert page.locator("#tabs button").count() == 0
    # the 422 itself is the browser's console line; nothing else
    assert all("422" in e for e in page.errors)
