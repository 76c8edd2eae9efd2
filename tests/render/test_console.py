"""The terminal summary reads the same payload and never interprets trace strings as markup."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

import torchscope
from torchscope.render.console import fmt_bytes, fmt_ns, print_summary
from torchscope.render.payload import build_payload
from torchscope.render.units import fmt_pct, fmt_us

DATA = Path(__file__).resolve().parents[1] / "data"


def test_units() -> None:
    assert fmt_ns(1_500) == "1.5 µs" and fmt_ns(2_000_000) == "2.000 ms" and fmt_ns(3e9) == "3.000 s"
    assert fmt_bytes(512) == "512 B" and fmt_bytes(3 * 1024**2) == "3.00 MiB"
    # ties round half up on integers (Python's format would give "1.062 ms" and "1.12 KiB")
    assert fmt_us(1062.5) == "1.063 ms" and fmt_bytes(1152) == "1.13 KiB" and fmt_pct(12.25) == "12.3 %"
    assert fmt_us(-0.5) == "-500 ns" and fmt_us(1666149715033200) == "1,666,149,715.033 s"


def test_summary_shows_ops_kernels_and_escapes_markup() -> None:
    payload = build_payload(torchscope.load(DATA / "hostile_names.pt.trace.json"))
    console = Console(record=True, width=200)
    print_summary(payload, console)
    text = console.export_text()
    assert "[bold red]rich markup[/bold red]" in text  # printed literally, not styled
    assert "<script>window.__pwned=1</script>" in text
    assert "top kernels" in text and "peak allocated 4.00 KiB" in text


def _top_ops_header(path: Path) -> list[str]:
    console = Console(record=True, width=200)
    print_summary(build_payload(torchscope.load(path)), console)
    lines = console.export_text().splitlines()
    header = lines[lines.index(next(x for x in lines if x.startswith("top ops (by"))) + 2]
    return header.replace("┃", " ").split()


def test_device_column_only_where_the_trace_has_device_work(traces_dir: Path) -> None:
    assert _top_ops_header(traces_dir / "cpu" / "cpu_only_gloo_rank34.pt.trace.json.gz") == [
        "name",
        "calls",
        "host",
        "self",
        "host",
        "total",
    ]
    assert _top_ops_header(traces_dir / "cuda" / "nccl_rank0_of_2.json.gz")[-2:] == ["device", "total"]


def test_breakdown_heading_is_one_line_on_a_narrow_terminal(traces_dir: Path) -> None:
    console = Console(record=True, width=80)
    print_summary(build_payload(torchscope.load(traces_dir / "cuda" / "nccl_rank0_of_2.json.gz")), console)
    assert "where the time goes (3 steps, average 222.368 ms per step)" in console.export_text().splitlines()
