"""Repair the one kind of invalid JSON that PyTorch's own profiler writes: a raw string value.

Kineto copies some names into the trace without JSON escaping. Seen with torch 2.13 and
``with_stack=True`` (a ``torchscope run`` of a training script, once in a few dozen runs): the
Python tracer named a frame ``torch/profiler/_cupti_monitor.py(0):`` followed by four spaces
and three double quotes, and Kineto wrote those quotes as they are — three stray quotes, and
the whole file is invalid JSON (torch.profiler's own ``export_chrome_trace`` writes the same
file, and Perfetto refuses it). Losing a whole run to one frame name is not acceptable, so we
repair it.

Kineto writes one key per line (``    "name": "...",``), so such a value can be told and fixed
line by line: a line that holds one string member, does not parse as JSON on its own, and has
a stray quote, a raw control character or a bad escape inside its value is re-encoded with the
value taken as raw text. Nothing else is touched, and the caller decodes the result again, so a
file broken in any other way still gets its one-line error.
"""

from __future__ import annotations

import json
import re

# A string value (after ``": "``) whose valid part ends in something a JSON string cannot hold:
# a quote followed by more than white space and a delimiter, a raw control character (other
# than the line's own end), or a backslash that starts no JSON escape.
_BROKEN_VALUE = re.compile(
    rb'": "(?:[^"\\\x00-\x1f]|\\["\\/bfnrtu])*'
    rb'(?:"[ \t]*[^,:}\]\s]|[\x00-\x09\x0b-\x1f]|\\[^"\\/bfnrtu])'
)
# A whole line holding one string member: indentation, ``"key": "``, the value, ``"`` and an
# optional comma. The value is everything up to the line's last quote.
_ONE_MEMBER_LINE = re.compile(rb'([ \t]*"[^"\\\n]*": )"(.*)"([ \t]*,?[ \t\r]*)', re.DOTALL)


def escape_raw_strings(text: bytes) -> tuple[bytes, list[str]]:
    """``text`` with the raw string values Kineto left unescaped re-encoded, and those values.

    Returns ``text`` itself and an empty list when nothing needed repair (the usual case costs
    one regular-expression pass: ~0.08 s on a 54 MB trace).
    """
    parts: list[bytes] = []
    repaired: list[str] = []
    done = 0  # text[:done] is in parts
    for match in _BROKEN_VALUE.finditer(text):
        start = text.rfind(b"\n", 0, match.start()) + 1
        if start < done:
            continue  # a second find on a line already repaired
        end = text.find(b"\n", match.end())
        end = len(text) if end < 0 else end
        line = _ONE_MEMBER_LINE.fullmatch(text, start, end)
        if line is None or _parses(text[start:end]):
            continue  # not Kineto's one-member layout, or valid after all: leave it alone
        value = line.group(2).decode("utf-8", "replace")
        fixed = line.group(1) + json.dumps(value, ensure_ascii=False).encode() + line.group(3)
        parts += [text[done:start], fixed]
        done = end
        repaired.append(value)
    if not repaired:
        return text, []
    parts.append(text[done:])
    return b"".join(parts), repaired


def _parses(line: bytes) -> bool:
    """Whether one ``"key": value,`` line is valid JSON as the only member of an object."""
    try:
        json.loads(b"{" + line.rstrip().rstrip(b",") + b"}")
    except ValueError:
        return False
    return True


def describe(repaired: list[str]) -> str:
    """The warning a read with repairs carries: how many values, and the first of them."""
    first = repaired[0] if len(repaired[0]) <= 80 else repaired[0][:77] + "..."
    return (
        f"repaired {len(repaired)} string value{'s' if len(repaired) != 1 else ''} written without"
        f" JSON escaping (a Kineto bug; first: {first!r})"
    )


def cut_after_last_event(text: bytes, tries: int = 5) -> tuple[bytes, int] | None:
    """A truncated trace (a process killed while writing it, a copy cut short) cut after its
    last complete event and closed again, and how many bytes of ``text`` it keeps; None when
    no cut makes it a document.

    Events are separated by ``},`` and white space before the next ``{``; the same can occur
    inside an event's ``args``, so up to ``tries`` such places, from the end, are tried until
    one decodes.
    """
    bare = text[:64].lstrip().startswith(b"[")
    if not bare and b'"traceEvents"' not in text[:1 << 20]:
        return None
    close = b"]" if bare else b"]}"
    end = len(text)
    for _ in range(tries):
        k = text.rfind(b"},", 0, end)
        if k < 0:
            return None
        after = text[k + 2 : k + 64].lstrip()
        end = k
        if not after.startswith(b"{") and after:
            continue
        candidate = text[: k + 1] + close
        try:
            json.loads(candidate)
        except ValueError:
            continue
        return candidate, k + 1
    return None
