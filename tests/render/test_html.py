"""The single-file dashboard: self-contained, and no trace string can become markup."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import torchscope
from torchscope.render.html import embed_json, render_html, serve_page
from torchscope.render.payload import build_payload

DATA = Path(__file__).resolve().parents[1] / "data"


def test_embedded_json_cannot_close_the_script_block() -> None:
    text = embed_json({"name": "</script><script>alert(1)</script>", "amp": "a&b", "ls": "\u2028"})
    assert "<" not in text and ">" not in text and "&" not in text
    assert json.loads(text) == {"name": "</script><script>alert(1)</script>", "amp": "a&b", "ls": "\u2028"}


def test_hostile_trace_renders_no_markup(tmp_path: Path) -> None:
    src = tmp_path / 'x<img src=y onerror="window.__pwned=9">.json'
    shutil.copy(DATA / "hostile_names.pt.trace.json", src)
    page = render_html(build_payload(torchscope.load(src)))
    assert page.count("<script") == 2  # our JSON block and our code, nothing from the trace
    assert "<img" not in page and "<svg" not in page
    assert "&lt;img" in page.split("</title>")[0]  # the file name in the title is escaped
    # the CSP names exactly our script's hash: injected inline handlers could not run
    csp = re.search(r"script-src \'(sha256-[^\']+)\'", page)
    assert csp is not None and "unsafe-inline" not in csp.group(0)


def test_page_is_self_contained(traces_dir: Path) -> None:
    page = render_html(build_payload(torchscope.load(traces_dir / "cuda/triton_kernel.json.gz")))
    assert not re.search(r'(src|href)=["\']?https?:', page)  # no network
    assert "fetch(" in page  # the serve transport exists in the same front-end...
    assert '"transport":"serve"' in serve_page("log")  # ...and serve's page carries no data
