"""The HTML dashboard: one page (``index.html`` + the view modules + ``app.js`` + ``app.css``), two transports.

``render_html(payload)`` inlines our CSS, JS and the payload into a single self-contained file
that works offline and can be attached to a bug; ``serve_page()`` is the same page with no
data, which fetches it from ``torchscope serve``. The payload is embedded as JSON inside a
``<script type="application/json">`` block with ``<``, ``>`` and ``&`` escaped, so no string from
a trace can close the block; the page's Content-Security-Policy only runs the one script whose
hash it names, so even a markup injection could not execute.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import re
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

# the page's view modules, inlined before app.js in this order
VIEW_MODULES = (
    "charts.js",
    "flame.js",
    "timeline.js",
    "chain.js",
    "format.js",
    "dom.js",
    "table.js",
    "plots.js",
    "page.js",
    "view_overview.js",
    "view_operators.js",
    "view_kernels.js",
    "view_memory.js",
    "view_modules.js",
    "view_distributed.js",
    "view_diff.js",
    "view_accuracy.js",
    "view_report.js",
    "view_timeline.js",
    "view_job.js",
)


@cache
def _asset(name: str) -> str:
    return resources.files(__name__).joinpath(name).read_text(encoding="utf-8")


_SURROGATE = re.compile("[\ud800-\udfff]")


def embed_json(data: Any) -> str:
    """JSON text that is safe inside a ``<script>`` element."""
    text = json.dumps(data, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    # a lone surrogate (a file name that is not UTF-8, as Python decodes it) cannot be written
    # as UTF-8: inside a JSON string its escape is valid, and the page shows it as U+FFFD
    text = _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
    return (
        text.replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


def _script() -> str:
    """The page's one inline script: the view modules (each defines one global) then the app.

    One script keeps the Content-Security-Policy at a single hash; each file stays its own
    module in the source tree (the view modules are type-checked by ``tsc``, see ``frontend/``).
    """
    return "\n;\n".join(_asset(name) for name in VIEW_MODULES + ("app.js",))


def _page(title: str, data_json: str) -> str:
    js = _script()
    digest = base64.b64encode(hashlib.sha256(js.encode("utf-8")).digest()).decode()
    page = _asset("index.html")
    # Fill the placeholders in one pass each, data last, so no inserted text is re-scanned.
    for key, value in (
        ("__SCRIPT_HASH__", f"sha256-{digest}"),
        ("__TITLE__", html.escape(_SURROGATE.sub("\ufffd", title))),
        ("__CSS__", _asset("app.css")),
        ("__JS__", js),
    ):
        page = page.replace(key, value, 1)
    return page.replace("__DATA__", data_json, 1)


def render_html(payload: dict[str, Any]) -> str:
    """The self-contained dashboard for one payload (``render.payload.build_payload``)."""
    return _page(str(payload.get("title") or "torchscope report"), embed_json(payload))


def write_html(payload: dict[str, Any], path: str | Path) -> Path:
    """Write the page to ``path``, whole or not at all (``writes.write_atomically``); a path that
    cannot be written (a directory, a read-only folder, ``/dev/null/x``, a full disk) is a
    one-line ``WriteError`` naming it, not a traceback, and an older page stays as it was."""
    from torchscope.writes import write_atomically

    data = render_html(payload).encode("utf-8")
    return write_atomically(path, lambda tmp: tmp.write_bytes(data), problem="cannot write the dashboard here")


def serve_page(title: str, poll_ms: int = 5000) -> str:
    """The page ``torchscope serve`` returns: the same front-end, fetching its data."""
    return _page(title, embed_json({"transport": "serve", "title": title, "poll_ms": poll_ms}))
