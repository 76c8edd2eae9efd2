"""The terminal summary reads the same payload and never interprets trace strings as markup."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

import torchscope
from torchscope.render.console import fmt_bytes, fmt_ns, print_summary
from torchscope.render.payload import build_payload

DATA = Path(__file__).resolve().parents[1] / "data"


def test_units() -> None:
    assert fmt_ns(1_500) == "1.5 µs" and fmt_ns(2_000_000) == "2.000 ms" and fmt_ns(3e9) == "3.000 s"
    assert fmt_bytes(512) == "512 B" and fmt_bytes(3 * 1024**2) == "3.00 MiB"


def test_summary_shows_ops_kernels_and_escapes_markup() -> None:
    payload = build_payload(torchscope.load(DATA / "hostile_names.pt.trace.json"))
    console = Console(record=True, width=200)
    print_summary(payload, console)
    text = console.export_text()
    assert "[bold red]rich markup[/bold red]" in text  # printed literally, not styled
    assert "<script>window.__pwned=1</script>" in text
    assert "top kernels" in text and "peak allocated 4.00 KiB" in text
