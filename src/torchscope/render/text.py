"""Trace strings made safe to show: control characters visible, huge names cut.

Names in a trace are user input. Raw escape sequences (``ESC [ 2 J``, OSC 8 links, a bare
carriage return) would drive the user's terminal, and a 50 MB op name made the terminal's
table layout run for minutes. Every renderer passes names through ``display`` (the terminal)
or ``cut`` (the page, whose DOM renders control characters inert but would still carry
megabytes); the Trace and ``--json`` keep the full text.
"""

from __future__ import annotations

import re
from typing import Any

DISPLAY_CHARS = 400  # a name longer than this is cut for display (C++ template kernels reach ~300)
TABLE_CHARS = 120  # in a terminal table cell: three lines of a folded name at most
# C0 controls but tab, DEL, C1 controls, and the Unicode line/paragraph separators and bidi
# overrides that reorder what the reader sees
_CONTROL = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def cut(text: str, limit: int = DISPLAY_CHARS) -> str:
    """``text``, or its first ``limit`` characters and how long it was."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text):,} characters)"


def visible(text: str) -> str:
    """Control characters as visible escapes (``\\x1b``, ``\\n``), so none reaches a terminal raw."""
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1] if m.group() != "\n" else "\\n", text)


def display(value: Any, limit: int = DISPLAY_CHARS) -> str:
    """A trace string for the terminal: cut first (so escaping never walks 50 MB), then made visible."""
    return visible(cut(str(value), limit))


def cut_strings(value: Any, limit: int = 4 * DISPLAY_CHARS) -> Any:
    """A JSON-able value with every long string cut (the page's copy of the report).

    What holds no long string is returned itself, not copied: the page's report is then the
    report, and an edit to it (``torchscope run`` naming sampled culprits) reaches every renderer.
    """
    if isinstance(value, str):
        return cut(value, limit)
    if isinstance(value, dict):
        items = {k: cut_strings(v, limit) for k, v in value.items()}
        return value if all(items[k] is value[k] for k in value) else items
    if isinstance(value, list):
        parts = [cut_strings(v, limit) for v in value]
        return value if all(a is b for a, b in zip(parts, value, strict=True)) else parts
    return value
