"""Numbers as text, by the unit the report declares (``report["units"]``), for every renderer.

The terminal uses these functions and the page has their twins (``fmt`` in ``format.js``), written to
give the same text for the same number: rounding is half-up on integers (not Python's
half-even or ``toFixed``'s binary ties), so "1.0625 ms" reads the same in both. Timestamps
are shown relative to the trace's start ("+32.425 ms"), never as an absolute clock value.
"""

from __future__ import annotations

import math
from typing import Any

BYTE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def _half_up(num: int, den: int) -> int:
    """round(num / den), ties away from zero, in integers (num >= 0)."""
    return (2 * num + den) // (2 * den)


def _fixed(q: int, decimals: int) -> str:
    """The integer ``q`` scaled by 10**-decimals, as text ("12345", 3 -> "12.345")."""
    whole, frac = divmod(q, 10**decimals)
    return f"{whole:,}.{frac:0{decimals}d}" if decimals else f"{whole:,}"


def plural(n: int, word: str) -> str:
    """``n`` and ``word``, with an s unless one ("1 cycle", "2 cycles")."""
    return f"{n} {word}" + ("" if n == 1 else "s")


def fmt_us(us: float | None) -> str:
    """A duration in microseconds: ns, µs (1 decimal), ms or s (3 decimals)."""
    if us is None or (isinstance(us, float) and not math.isfinite(us)):
        return "–"
    ns = round(us * 1000)
    sign, a = ("-" if ns < 0 else ""), abs(ns)
    if a >= 1_000_000_000:
        return f"{sign}{_fixed(_half_up(a, 1_000_000), 3)} s"
    if a >= 1_000_000:
        return f"{sign}{_fixed(_half_up(a, 1000), 3)} ms"
    if a >= 1000:
        return f"{sign}{_fixed(_half_up(a, 100), 1)} µs"
    return f"{sign}{a} ns"


def fmt_ns(ns: float | None) -> str:
    return "–" if ns is None else fmt_us(ns / 1000)


def fmt_offset(ts_us: float | None, start_us: float | None) -> str:
    """A timestamp as the time since the trace's start: "+32.425 ms"."""
    if ts_us is None:
        return "–"
    return "+" + fmt_us(ts_us - (start_us or 0))


def fmt_bytes(n: float | None) -> str:
    if n is None:
        return "–"
    a, i = abs(int(n)), 0
    while a >= 1024 ** (i + 1) and i < len(BYTE_UNITS) - 1:
        i += 1
    sign = "-" if n < 0 else ""
    if i == 0:
        return f"{sign}{a} B"
    return f"{sign}{_fixed(_half_up(a * 100, 1024**i), 2)} {BYTE_UNITS[i]}"


def _decimals(v: float, decimals: int) -> str:
    q = math.floor(abs(v) * 10**decimals + 0.5)
    return ("-" if v < 0 and q else "") + _fixed(q, decimals)


def fmt_pct(p: float | None) -> str:
    return "–" if p is None else _decimals(p, 1) + " %"


def fmt_count(v: float | None) -> str:
    if v is None:
        return "–"
    if float(v).is_integer():
        return f"{int(v):,}"
    return _decimals(v, 2)


def fmt_si(v: float | None, unit: str) -> str:
    if v is None:
        return "–"
    prefixes, i, a = ("", "K", "M", "G", "T", "P", "E"), 0, abs(v)
    while a >= 1000 and i < len(prefixes) - 1:
        a /= 1000
        i += 1
    return f"{_decimals(a if v >= 0 else -a, 2)} {prefixes[i]}{unit}"


def fmt(value: Any, unit: str | None, start_us: float | None = None) -> str:
    """``value`` as text in ``unit`` (one of ``report_model``'s units; None: as is)."""
    if value is None:
        return "–"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if unit == "us":
        return fmt_us(value)
    if unit == "timestamp_us":
        return fmt_offset(value, start_us)
    if unit == "bytes":
        return fmt_bytes(value)
    if unit == "percent":
        return fmt_pct(value)
    if unit == "fraction":
        return fmt_pct(100 * value)
    if unit == "id":
        return str(value)
    if unit == "flop":
        return fmt_si(value, "FLOP")
    if unit == "flop/s":
        return fmt_si(value, "FLOP/s")
    if unit == "blocks/SM":
        return _decimals(value, 2)
    return fmt_count(value)
