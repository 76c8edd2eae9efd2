"""Texts that end early: telling a file cut short from a broken one, and scanning what it kept.

A process killed while Kineto writes, a copy interrupted, a disk full: the file stops mid-event.
The reader keeps every complete event, and each warning it gives says ``CUT_MARK``. This module
imports no Polars, so that ``files.Prefetch`` can scan a file cut short on its thread while the
reader's modules import (the cut and its second scan cost ~0.15 s of a 35 MB file, which was
added to the load after the imports).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import msgspec

from torchscope.trace.json_repair import Cut, cut_after_last_event

try:  # our C scanner (optional: without a compiler the reader decodes with msgspec)
    from torchscope.trace import _scan
except ImportError:  # pragma: no cover - depends on the build
    _scan = None  # type: ignore[assignment]

# every warning of a file cut short says so with this, and a cut trace is checked for what it lost
CUT_MARK = "(truncated?)"

# What a decoder raises on text it refuses: msgspec's DecodeError, UnicodeDecodeError for bytes
# that are not UTF-8, RecursionError for nesting deeper than Python's stack.
REFUSALS = (msgspec.DecodeError, UnicodeDecodeError, RecursionError)

BYTE = re.compile(r"\(byte (\d+)\)")
# what a crash or a copy leaves after the bytes a file was cut at: white space (an editor's
# newline), zeros (a file extended before its data reached the disk)
TAIL_FILL = b" \t\r\n\x00"


def said_cut(warnings: tuple[str, ...] | list[str]) -> bool:
    """Whether a reader's warnings say it cut the file short."""
    return any(CUT_MARK in w for w in warnings)


@dataclass(frozen=True)
class Place:
    """Where a text made from a piece of the file sits in it: its byte ``i`` is the file's byte
    ``i + shift`` (negative shifts: the piece was given a ``[`` or ``{"traceEvents":[``), and
    the file has ``size`` bytes. Warnings give offsets in the file: a 118 MB file cut at 90%
    said "the first 9,258,590 of 9,258,622 bytes", the numbers of its last ~8 MB piece."""

    shift: int
    size: int


def ends_early(message: str, data: bytes) -> bool:
    """Whether a decoder's refusal ``message`` of ``data`` means only that the text stops early.

    msgspec says "truncated" when the text ends between values, but "invalid number" for one
    cut after its "." or "e" (~0.5 % of cut points in Kineto's files, whose times have
    decimals), "invalid character" after a "-", and names the fill after a cut; all of these
    point at the end of the text's content. "trailing characters" is a whole document followed
    by other bytes, zeros too (a padded copy): not a file cut short (its last top-level key was
    dropped as if it had been cut in it)."""
    if "truncated" in message:
        return True
    if "trailing characters" in message:
        return False
    at = BYTE.search(message)
    return at is not None and int(at.group(1)) >= len(data.rstrip(TAIL_FILL))


def cut_warning(cut: Cut, data: bytes, place: Place) -> str:
    """What the cut of a truncated text (``data``, at ``place`` in the file) kept, in words."""
    if cut.lost_key is not None:
        key = f' "{cut.lost_key}"' if cut.lost_key else ""
        return (
            f"the file ends in its top-level key{key}, after the events {CUT_MARK}: read all its"
            " events, not that key"
        )
    content = data.rstrip(TAIL_FILL)
    if cut.whole_list:
        return f"the file ends before its closing brace {CUT_MARK}: read all its events and keys"
    if cut.kept >= len(content) and content.endswith(b"]"):
        return f"the file ends before its closing brackets {CUT_MARK}: read all its events"
    if cut.kept >= len(content):
        # it ends right after an event's "}": whether more events were to follow, nobody knows
        return (
            f"the file ends after an event, before the event list's end {CUT_MARK}: read every event in its"
            f" {place.size:,} bytes, but more may have followed"
        )
    return mid_event_warning(cut.kept + place.shift, place.size)


def mid_event_warning(kept: int, size: int) -> str:
    """The warning for a file of ``size`` bytes cut mid-event, its events read up to ``kept``."""
    return f"the file ends mid-event {CUT_MARK}: read the events in its first {kept:,} of {size:,} bytes"


def scan_cut_short(text: bytes, place: Place, *, refused: bool = False) -> tuple[Any, bytes, str | None] | None:
    """``scan_trace`` of ``text``, or of it cut after its last complete event when its only
    fault is that it ends early, with the warning msgspec's path gives (the text scanned, the
    warning or None); None when the scanner declines it or anything else is wrong with it.

    Only then: a text with another fault (a raw newline in a string, a bad byte) is cut by
    msgspec's path only after its repairs, or refused, and cutting it first would drop complete
    events. msgspec's syntax check alone (into ``Raw``, ~10 ms for 16 MB) says which it is.
    """
    whole = None if refused else _scan.scan_trace(text)  # ``refused``: the scanner declined it already
    if whole is not None:
        return whole, text, None
    try:
        msgspec.json.decode(text, type=msgspec.Raw)
        return None  # valid JSON the scanner does not take: msgspec reads it
    except REFUSALS as exc:
        if not ends_early(str(exc), text):
            return None
    cut = cut_after_last_event(text.rstrip(TAIL_FILL), is_document=_scanned_as_document)
    whole = None if cut is None else _scan.scan_trace(cut.text)
    if cut is None or whole is None:
        return None
    return whole, cut.text, cut_warning(cut, text, place)


def _scanned_as_document(candidate: bytes) -> bool:
    """Whether the scanner's syntax check takes ``candidate`` as one trace document."""
    doc = _scan.scan_document(candidate)
    return doc is not None and doc[0] >= 0
