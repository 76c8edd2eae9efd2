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
from collections.abc import Callable
from typing import NamedTuple

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


# the longest line that can be one member of Kineto's layout: a frame's or a kernel's name,
# however templated, is far shorter
MAX_LINE = 1 << 20


def escape_raw_strings(text: bytes) -> tuple[bytes, list[str]]:
    """``text`` with the raw string values Kineto left unescaped re-encoded, and those values.

    Returns ``text`` itself and an empty list when nothing needed repair (the usual case costs
    one regular-expression pass: ~0.08 s on a 54 MB trace).
    """
    parts: list[bytes] = []
    repaired: list[str] = []
    done = 0  # text[:done] is in parts
    looked = -1  # the start of the last line looked at and left alone
    start = searched = 0  # the line holding text[searched] starts at ``start``
    for match in _BROKEN_VALUE.finditer(text):
        # the line's start, searched for only since the last find: searched back from each
        # find to the text's start, a 104 MB line of damage with many finds took 8 minutes
        line_end = text.rfind(b"\n", searched, match.start())
        start = start if line_end < 0 else line_end + 1
        searched = match.start()
        if start < done or start == looked:
            continue  # a second find on a line already repaired, or already left alone
        end = text.find(b"\n", match.end())
        end = len(text) if end < 0 else end
        looked = start
        if end - start > MAX_LINE:
            # not one member of Kineto's: a compact file's one line, or a damaged stretch.
            # Looked at whole for each find it held, a 10 MB line took hours (a new user's
            # corrupted trace hung the command); the caller gives its one-line error instead
            continue
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


_KEY_AHEAD = re.compile(rb'\s*"[^"\\\n]{0,200}"\s*:')
# the start of a key after a comma (its name maybe cut short too), or nothing more: the end
_KEY_START = re.compile(rb'\s*(?:"([^"\\\n]{0,200})|$)')
# the last event's "}", the list's "]" and a comma: where the keys after the events begin
_LIST_END = re.compile(rb"\}\s*\]\s*,")
KEYS_WINDOW = 64 * 1024  # the keys Kineto writes after the events are a few short strings


class Cut(NamedTuple):
    """A truncated document closed again: ``text``, and how many bytes of the input it keeps.
    ``lost_key``: when the cut fell in a top-level key after the event list, that key's name
    (as far as it was written; "" when the cut came right after its comma), and every event
    was kept; None when the cut fell in the event list."""

    text: bytes
    kept: int
    lost_key: str | None = None
    whole_list: bool = False  # the event list and the keys after it were whole: only "}" was missing


def cut_after_last_event(
    text: bytes, tries: int = 8, is_document: Callable[[bytes], bool] | None = None
) -> Cut | None:
    """A truncated trace (a process killed while writing it, a copy cut short) cut after its
    last complete event and closed again; None when no cut makes it a document.

    Events are separated by ``},`` and white space before the next entry (an event, or
    anything else a damaged list holds); the same can occur inside an event's ``args``, so up
    to ``tries`` such places, from the end, are tried until one decodes. A text that lacks only
    its closing brackets is closed as it is, and one cut in a top-level key written after the
    list (Kineto's ``"traceName"``) loses that key only (``_cut_after_list``).

    ``is_document``: what says a candidate is a document (default: Python's lenient parser,
    which takes what the reader repairs; the scanner's syntax check, when the text is known to
    need no repair, is ~50x faster: 1.2 s of a 50 MB cut file's read).
    """
    is_document = is_document or _is_document
    bare = text[:64].lstrip().startswith(b"[")
    # a cut before the event list's key would leave a document without events (the keys
    # before it, such as "deviceProperties", end in "}],"): no cut comes before it
    events_key = 0 if bare else text.find(b'"traceEvents"', 0, 1 << 20)
    if events_key < 0:
        return None
    close = b"]" if bare else b"]}"
    # cut after the last event's "}" or the list's "]": only the closing brackets are missing
    stripped = text.rstrip()
    for tail in (close, close[1:]) if stripped[-1:] in (b"}", b"]") else ():
        if tail and is_document(candidate := stripped + tail):
            return Cut(candidate, len(stripped))
    if not bare:
        after_list = _cut_after_list(text, tries, is_document, events_key)
        if after_list is not None:
            return after_list
    end = len(text)
    for _ in range(tries):
        k = text.rfind(b"},", events_key, end)
        if k < 0:
            return None
        end = k
        if _KEY_AHEAD.match(text, k + 2):
            continue  # '}, "key": ...': inside an event's args, not between list entries
        candidate = _closed(text, k + 1, close)
        if is_document(candidate):
            return Cut(candidate, k + 1)
    return None


def _closed(text: bytes, at: int, close: bytes) -> bytes:
    """``text[:at] + close`` in one copy (the slice and the sum made two: 70 MB of fresh pages
    for a 35 MB file, ~20 ms of page faults)."""
    return b"".join((memoryview(text)[:at], close))


def _cut_after_list(text: bytes, tries: int, is_document: Callable[[bytes], bool], events_key: int) -> Cut | None:
    """The document less the top-level key the text ends in, when that key comes after the
    event list's ``]``: every event is complete, so none is dropped (cutting at the last ``},``
    lost the last event of a 131 MB trace cut 3 bytes short, inside ``"traceName"``). The keys
    written whole before the broken one are kept. The list's end is looked for in the last
    ``KEYS_WINDOW`` bytes only, and the text is parsed once per top-level comma tried (up to
    ``tries``), usually once; only a list that ends after the event list's key
    (``events_key``) is taken for it."""
    ends = list(_LIST_END.finditer(text, max(events_key, len(text) - KEYS_WINDOW)))
    if not ends:
        return None
    stripped = text.rstrip()
    # only the closing brace is missing: when the text ends where a value ends for sure (a cut
    # in a number, "baseTimeNanoseconds": 17119646, closed as well, and said "the file ends
    # after an event" with a wrong number kept)
    if stripped[-1:] in (b'"', b"]", b"}", b"e", b"l") and is_document(candidate := stripped + b"}"):
        return Cut(candidate, len(stripped), whole_list=True)
    for k in reversed(_top_level_commas(text, ends[-1].end() - 1)[-tries:]):
        candidate = _closed(text, k, b"}")
        if is_document(candidate):
            key = _KEY_START.match(text, k + 1)
            return Cut(candidate, k, (key.group(1) or b"").decode("utf-8", "replace") if key else "")
    return None


def _top_level_commas(text: bytes, start: int) -> list[int]:
    """Where the commas between the members of ``text[start:]`` are: outside strings and
    outside nested arrays and objects (``text[start]`` is the first such comma)."""
    commas: list[int] = []
    depth = 0
    in_string = escaped = False
    for i in range(start, len(text)):
        c = text[i]
        if in_string:
            if escaped:
                escaped = False
            elif c == 0x5C:  # backslash
                escaped = True
            elif c == 0x22:  # quote
                in_string = False
        elif c == 0x22:
            in_string = True
        elif c in b"[{":
            depth += 1
        elif c in b"]}":
            depth -= 1
        elif c == 0x2C and depth == 0:  # comma
            commas.append(i)
    return commas


def _is_document(candidate: bytes) -> bool:
    """Whether ``candidate`` is one JSON document, up to what the reader repairs anyway (bytes
    that are not UTF-8, raw control characters in strings, nesting beyond Python's stack)."""
    try:
        json.loads(candidate.decode("utf-8", "replace"), strict=False)
    except ValueError:
        return False
    except RecursionError:
        return True  # complete as far as we can tell; too deep values are kept as text later
    return True


# -- bytes and values that are not JSON, though a writer meant them as values -----------------
# Each repair below runs only after the decoder refused the text, and only the one the error
# points at first (the caller decodes again and comes back for the next): a valid file never
# pays for them. Each returns the text unchanged and no note when it finds nothing to do.

NEST_LIMIT = 200  # deeper values are kept as text: real traces nest < 10, decoders give up ~1000

_LONE_SURROGATE = re.compile(
    rb"(\\\\)|\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}|\\u[dD][89a-fA-F][0-9a-fA-F]{2}"
)
_STRING = rb'"[^"\\]*(?:\\.[^"\\]*)*"'
# Up to 4096 tokens that need nothing (strings without raw control characters, ordinary numbers,
# punctuation, true/false/null) in one match, so that the Python callback runs once per run of
# them rather than once per string (bounded, because the regex engine keeps state per repeat).
_CLEAN_RUN = (
    rb'(?:"[^"\\\x00-\x1f]*(?:\\.[^"\\\x00-\x1f]*)*"|null|[^"NIin0-9-]+'
    rb"|-?[0-9]{1,299}(?:\.[0-9]+)?(?:[eE][+-]?[0-9]{1,2})?(?![0-9.eE])){1,4096}"
)
_BAD_NUMBER = rb"-?(?:Infinity|NaN|inf|nan)|-?(?:\d{300,}(?:\.\d+)?(?:[eE][+-]?\d+)?|\d+(?:\.\d+)?[eE][+-]?\d{3,})"
_VALUES = re.compile(rb"(" + _CLEAN_RUN + rb")|(" + _STRING + rb")|" + _BAD_NUMBER, re.DOTALL)
_NESTING = re.compile(rb"(" + _STRING + rb")|[\[{]|[\]}]", re.DOTALL)
_RAW_CONTROL = re.compile(rb"[\x00-\x1f]")
# a "string" of white space and JSON punctuation only, a line end and a comma or colon among
# them: the text between two values of Kineto's layout (``",\n    "``), read as a string
# because a stray quote before it shifted every string after it (damage, not a value to
# escape; a value of raw white space alone, ``"\n\t"``, is one)
_PUNCTUATION_ONLY = re.compile(rb'"[ \t\r\n,:\[\]{}]*"')


def _between_values(string: bytes) -> bool:
    return bool(_PUNCTUATION_ONLY.fullmatch(string)) and b"\n" in string and (b"," in string or b":" in string)


class _Shifted(Exception):
    """The strings are out of step: no value-by-value repair makes this text JSON."""


def replace_invalid_utf8(text: bytes) -> tuple[bytes, str | None]:
    """``text`` with bytes that are not UTF-8 (surrogate halves encoded as bytes included)
    replaced by U+FFFD, and a note naming how many; ``text`` itself when it is valid."""
    if text.isascii():
        return text, None
    try:
        text.decode("utf-8")
        return text, None
    except UnicodeDecodeError:
        pass
    fixed = text.decode("utf-8", "replace")
    count = fixed.count("\ufffd") - text.count("\ufffd".encode())
    note = f"replaced {count:,} invalid UTF-8 byte sequence{'s' if count != 1 else ''} with U+FFFD"
    return fixed.encode("utf-8"), note


def replace_lone_surrogates(text: bytes) -> tuple[bytes, str | None]:
    """``text`` with ``\\uD800``-style escapes of half a UTF-16 pair replaced by ``\\uFFFD``
    (an escaped backslash before ``u`` is text, not an escape, and is kept)."""
    count = 0

    def fix(m: re.Match[bytes]) -> bytes:
        nonlocal count
        if m.group(1) is not None or len(m.group(0)) == 12:
            return m.group(0)  # an escaped backslash, or a whole surrogate pair
        count += 1
        return b"\\ufffd"

    fixed = _LONE_SURROGATE.sub(fix, text)
    if not count:
        return text, None
    return (
        fixed,
        f"replaced {count:,} unpaired UTF-16 surrogate escape{'s' if count != 1 else ''} with U+FFFD",
    )


def nonfinite_note(count: int) -> str | None:
    """The warning for ``count`` numbers read as null (NaN, inf, 1E400); None for none. One
    wording for every decoder that reads them (the repairs below, the scanner, msgspec's)."""
    if not count:
        return None
    # the noun right after the count, so that a large file's pieces merge into one line
    # (``reader.merge_counted``): "read 2 NaNs, ... number" was made of "read 1 NaN, ..." twice
    return f"read {count:,} number{'s' if count != 1 else ''} JSON has no value for (NaN, Infinity, inf, out of range) as null"


def repair_values(text: bytes) -> tuple[bytes, list[str]]:
    """``text`` with what JSON does not allow but writers emit made into JSON: ``NaN`` and
    ``Infinity`` (Python's ``json.dump`` writes them by default) and numbers too large for a
    double (``1E400``) become ``null``; raw control characters and NUL inside strings are
    escaped. Strings are matched whole, so nothing inside a string is taken for a number."""
    numbers = controls = 0

    def fix(m: re.Match[bytes]) -> bytes:
        nonlocal numbers, controls
        if m.group(1) is not None:
            return m.group(1)
        if m.group(2) is not None:
            if _RAW_CONTROL.search(m.group(2)) is None:
                return m.group(2)  # a string broken some other way: not ours to change
            if _between_values(m.group(2)):
                raise _Shifted
            controls += 1
            return _RAW_CONTROL.sub(lambda c: b"\\u%04x" % c.group(0)[0], m.group(2))
        token = m.group(0)
        if token[-1:] not in (b"N", b"y", b"f", b"n") and _finite(token):
            return token  # 1E-400 (zero) or 1E300: a number a double holds
        numbers += 1
        return b"null"

    try:
        fixed = _VALUES.sub(fix, text)
    except _Shifted:
        # 4 KB of binary junk 267 MB into a trace: its one odd quote made the 1.5M values after
        # it "strings with raw line ends", escaped into one 104 MB line (10 s per pass, and no
        # JSON at the end): the decoder's one-line error says where the damage is instead
        return text, []
    notes = [note] if (note := nonfinite_note(numbers)) else []
    if controls:
        notes.append(f"escaped raw control characters in {controls:,} string{'s' if controls != 1 else ''}")
    return (fixed, notes) if notes else (text, [])


def _finite(token: bytes) -> bool:
    try:
        return abs(float(token)) != float("inf")
    except (ValueError, OverflowError):
        return False


def flatten_deep_values(text: bytes, limit: int = NEST_LIMIT) -> tuple[bytes, str | None]:
    """``text`` with every value nested more than ``limit`` levels deep replaced by a string
    holding its JSON text, so that a decoder with a recursion limit reads the rest."""
    parts: list[bytes] = []
    done = depth = kept = 0
    start = -1  # where the value being kept as text opens
    for m in _NESTING.finditer(text):
        if m.group(1) is not None:
            continue
        if m.group(0) in b"[{":
            depth += 1
            if depth == limit + 1 and start < 0:
                start = m.start()
        else:
            depth -= 1
            if depth == limit and start >= 0:
                raw = text[start : m.end()].decode("utf-8", "replace")
                parts += [text[done:start], json.dumps(raw).encode()]
                done, start = m.end(), -1
                kept += 1
    if not kept:
        return text, None
    parts.append(text[done:])
    return b"".join(parts), (
        f"kept {kept:,} value{'s' if kept != 1 else ''} nested deeper than {limit} levels as JSON text"
    )


_JSON_KINDS = {
    type(None): "a bare null",
    bool: "a bare true/false",
    int: "a bare number",
    float: "a bare number",
    str: "a bare string",
}


def not_a_document(text: bytes, whole: bool, name: str = "") -> str:
    """Why ``text``, which does not start with ``{`` or ``[``, is not a trace: empty, only white
    space, a JSON value that is no object or list (``null``: valid JSON, so "not JSON" was
    wrong), or not JSON at all. ``whole``: ``text`` is the whole file, not its head. ``name``:
    the file's, which may promise gzip (gzip is told by its first bytes, not its name)."""
    body = text.strip()
    if whole and not text:
        return "file is empty"
    if whole and not body:
        return "file holds only white space"
    if whole and len(body) <= 4096:
        try:
            value = json.loads(body)
        except (ValueError, RecursionError):
            pass
        else:
            return f"JSON, but {_JSON_KINDS.get(type(value), 'a bare value')}: not a trace (an object or a list of events)"
    if name.endswith(".gz"):  # random bytes saved as rank-5.json.gz were only "not JSON"
        return "neither gzip (no gzip header, though named .gz) nor JSON (does not start with '{' or '[')"
    return "not JSON (does not start with '{' or '[')"
