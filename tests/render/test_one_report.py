"""One report, three renderers: the terminal, the page and --json show the same numbers.

The same real trace is rendered as terminal text, as the HTML payload the page receives (read
back out of the written file) and as ``report --json``; every number the terminal's tables
print must be the JSON's value in its declared unit, and the page must receive exactly the
JSON's rows. (tests/browser checks the page's own formatting of those rows.)
"""

from __future__ import annotations

import html as htmllib
import json
import re
from pathlib import Path
from typing import Any

import pytest

import torchscope
from torchscope.analysis import keys as K
from torchscope.cli.main import main
from torchscope.render.console import KERNEL_COLUMNS, op_columns, table_cells
from torchscope.render.payload import build_payload
from torchscope.render.text import TABLE_CHARS, cut_strings, display
from torchscope.render.units import fmt, fmt_bytes, fmt_offset, fmt_us

CUDA = "cuda/nccl_rank1_of_2_profile_memory.json.gz"
CPU = "cpu/cpu_only_gloo_rank34.pt.trace.json.gz"


def embedded_payload(page: str) -> dict[str, Any]:
    """The JSON the page reads, out of its <script type="application/json"> block."""
    m = re.search(r'<script type="application/json" id="torchscope-data">(.*?)</script>', page, re.S)
    assert m is not None
    return json.loads(m.group(1))  # type: ignore[no-any-return]


def three_ways(path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[dict, dict, str]:  # type: ignore[type-arg]
    page = tmp_path / "r.html"
    assert main(["report", str(path), "--json", "--html", str(page)]) == 0
    as_json = json.loads(capsys.readouterr().out)
    assert main(["report", str(path), "--no-html", "--top", "10"]) == 0
    text = capsys.readouterr().out
    return as_json, embedded_payload(page.read_text(encoding="utf-8")), text


def row_line(text: str, name: str, cells: list[str]) -> str:
    """The terminal line of a table row: it starts with the (cut) name and holds ``cells`` in order."""
    shown = display(name, TABLE_CHARS)
    lines = [ln for ln in text.splitlines() if ln.startswith("│ ") and ln[2:].startswith(shown[:40])]
    for ln in lines:
        got = [c.strip() for c in ln.split("│")[2:-1]]
        if got == cells:
            return ln
    raise AssertionError(f"no row {shown[:40]!r} with {cells} in:\n" + "\n".join(lines))


@pytest.mark.parametrize("name", [CUDA, CPU])
def test_terminal_page_and_json_show_the_same_numbers(
    name: str, traces_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    as_json, page, text = three_ways(traces_dir / name, tmp_path, capsys)
    units = as_json[K.UNITS]
    # the page receives the --json report itself (names cut for display; none is long here)
    report = {k: v for k, v in as_json.items() if k not in (K.WARNINGS, "html")}
    assert page["report"] == cut_strings(report)
    assert page["warnings"] == as_json[K.WARNINGS]
    # every number in the report has a declared unit
    assert_units_declared(report, units)

    # the terminal: the first rows of each table, every cell the JSON's value in its unit
    ops = as_json[K.OPERATORS]
    assert ops, "the trace has ops"
    for r in ops[:10]:
        row_line(text, r["name"], table_cells(r, op_columns(as_json), units))
    for r in as_json[K.KERNELS][:10]:
        row_line(text, r["name"], table_cells(r, KERNEL_COLUMNS, units))
    start = as_json[K.META]["start_us"]
    for s in as_json[K.STEPS][:10]:
        assert re.search(
            rf"│\s+{s['step']} │\s+{re.escape(fmt_offset(s['start_us'], start))} │\s+{re.escape(fmt_us(s['dur_us']))} │",
            text,
        )
    device = any(s[K.BREAKDOWN_US]["Kernel"] for s in as_json[K.STEPS])
    avg = as_json[K.BREAKDOWN_US] if device else as_json[K.HOST_BREAKDOWN_US]
    assert f"average {fmt_us(avg['Total'])} per step" in text
    for cat, us in avg.items():
        if cat != "Total" and us:
            assert re.search(rf"│ {re.escape(cat)}\s+│\s+{re.escape(fmt_us(us))} │", text), cat
    for p in as_json[K.MEMORY][K.MEMORY_PEAKS]:
        assert (
            f"memory {p['device']}: peak allocated {fmt_bytes(p['peak_allocated_bytes'])} at "
            f"{fmt_offset(p['peak_ts_us'], start)}"
        ) in text
    for rec in as_json[K.RECOMMENDATIONS]:
        assert f"{rec['rule']}: {rec['message'][:60]}" in text.replace("\n", " ")
    # the file's own words: its first event starts the report's clock, exactly
    m = as_json[K.META]
    assert round(m["span_us"] * 1000) == round(m["end_us"] * 1000) - round(m["start_us"] * 1000)


def assert_units_declared(
    value: Any, units: dict[str, str], key: str = "", inherited: str | None = None
) -> None:
    """Every number sits under a key whose unit ``units`` declares (a map inherits its key's)."""
    if isinstance(value, dict):
        for k, v in value.items():
            if key in ("evidence",) and k not in units:
                assert not isinstance(v, float), f"evidence {k} has no unit"
            own = units.get(k)
            assert_units_declared(v, units, k, own or inherited)
    elif isinstance(value, list):
        for v in value:
            assert_units_declared(v, units, key, inherited)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        assert inherited is not None or key in ("report_version",), f"{key} = {value} has no unit"


def test_timestamps_print_back_exactly_what_the_file_wrote(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """1666149715033200 µs is 1666149715033200 in --json (a float conversion made it ...200.2),
    and the terminal shows it relative to the trace's first event."""
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1666149715033100, "dur": 20},
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#7", "pid": 1, "tid": 1,
         "ts": 1666149715033200, "dur": 1500.25},
        {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 1666149715033300.125, "dur": 7},
    ]  # fmt: skip
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    assert main(["report", str(path), "--json", "--no-html"]) == 0
    out = capsys.readouterr().out
    assert '"start_us": 1666149715033200,' in out and '"dur_us": 1500.25,' in out
    assert '"start_us": 1666149715033100,' in out  # meta: the trace's first event
    assert main(["report", str(path), "--no-html"]) == 0
    text = capsys.readouterr().out
    assert re.search(r"│\s+7 │\s+\+100\.0 µs │\s+1\.500 ms │", text)


def two_op_trace(path: Path, name: str, **top: Any) -> Path:
    """A trace of an op named ``name`` and an ``aten::add``."""
    events = [
        {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": 10, "dur": 5},
        {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 20, "dur": 3},
    ]
    path.write_text(json.dumps({"traceEvents": events, **top}))
    return path


def test_control_characters_never_reach_the_terminal_raw(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    evil = "aten::\x1b[2J\x1b]8;;http://evil/\x07click\x1b]8;;\x07\rover\u202ewritten\x9b31m"
    path = two_op_trace(tmp_path / "evil.json", evil, deviceProperties=[{"name": "\x1b[31mGPU"}])
    assert main(["report", str(path), "--no-html"]) == 0
    text = capsys.readouterr().out
    assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202e]", text)
    assert "aten::\\x1b[2J\\x1b]8;;http://evil/\\x07click" in text and "\\u202ewritten\\x9b31m" in text
    # --json keeps the name as the file wrote it (JSON escapes it)
    assert main(["report", str(path), "--json", "--no-html"]) == 0
    assert evil in {r["name"] for r in json.loads(capsys.readouterr().out)[K.OPERATORS]}


def test_a_huge_name_is_cut_in_the_terminal_and_the_page(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A 5 MB op name (issue 17's 50 MB one hung the terminal renderer): one short row, a small
    page, the whole name in --json."""
    huge = "aten::" + "y" * 5_000_000
    path = two_op_trace(tmp_path / "huge.json", huge)
    page = tmp_path / "h.html"
    assert main(["report", str(path), "--html", str(page)]) == 0
    text = capsys.readouterr().out
    assert len(text) < 20_000 and "…(5,000,006characters)" in re.sub(r"[\s│]", "", text)
    assert page.stat().st_size < 500_000
    embedded = embedded_payload(page.read_text(encoding="utf-8"))
    shown = {r["name"] for r in embedded["report"][K.OPERATORS]}
    assert max(len(n) for n in embedded["runs"][0]["timeline"]["names"]) < 2000
    assert any(n.startswith("aten::yyy") and n.endswith("… (5,000,006 characters)") for n in shown)
    assert main(["report", str(path), "--json", "--no-html"]) == 0
    assert huge in {r["name"] for r in json.loads(capsys.readouterr().out)[K.OPERATORS]}


def test_a_truncated_trace_says_so_in_the_terminal_and_the_page(
    traces_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import gzip

    raw = gzip.decompress((traces_dir / "cuda/alexnet_benchmark.json.gz").read_bytes())
    path = tmp_path / "cut.json"
    path.write_bytes(raw[: len(raw) * 2 // 3])
    warnings = list(torchscope.load(path).meta.warnings)
    assert warnings, "the reader names what it repaired"
    page = tmp_path / "c.html"
    assert main(["report", str(path), "--html", str(page)]) == 0
    text = capsys.readouterr().out
    assert f"input warning {warnings[0][:50]}" in text.replace("\n", " ")
    got = embedded_payload(page.read_text(encoding="utf-8"))["report"][K.META]["warnings"]
    assert got == warnings


def test_memory_leak_addresses_are_hex(tmp_path: Path) -> None:
    """Four steps, each keeping one more 4 KiB block that is never freed: leaks, shown in hex."""
    events: list[dict[str, Any]] = []
    for step in range(4):
        t0 = 100.0 * step
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}", "pid": 1,
                       "tid": 1, "ts": t0, "dur": 90.0})
        events.append({"ph": "X", "cat": "cpu_op", "name": "aten::empty", "pid": 1, "tid": 1,
                       "ts": t0 + 1, "dur": 10.0})
        events.append({"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1,
                       "tid": 1, "ts": t0 + 2, "args": {"Device Type": 0, "Device Id": -1,
                       "Addr": 0x7F0000 + 0x1000 * step, "Bytes": 4096,
                       "Total Allocated": 4096 * (step + 1), "Total Reserved": 0}})
    path = tmp_path / "grow.json"
    path.write_text(json.dumps({"traceEvents": events}))
    payload = build_payload(torchscope.load(path), with_timeline=False)
    leaks = payload["report"][K.MEMORY][K.MEMORY_LEAKS]
    assert leaks and {x["addr"] for x in leaks} <= {"0x7f0000", "0x7f1000", "0x7f2000", "0x7f3000"}


def test_units_format_by_the_declared_unit() -> None:
    assert (
        fmt(1500, "us") == "1.500 ms"
        and fmt(1500, "bytes") == "1.46 KiB"
        and fmt(0.25, "fraction") == "25.0 %"
    )
    assert fmt(3, "id") == "3" and fmt(1234, "count") == "1,234" and fmt(None, "us") == "–"
    assert fmt(1_000_100, "timestamp_us", 1_000_000) == "+100.0 µs"
    assert htmllib.escape("x") == "x"


def test_the_page_reads_only_keys_that_analysis_keys_defines() -> None:
    """The page's JS cannot import analysis.keys: every report section it reads must be one of them."""
    html = Path(torchscope.__file__).parent / "render" / "html"
    js = "\n".join(p.read_text(encoding="utf-8") for p in sorted(html.glob("*.js")))
    read = set(re.findall(r"(?:rep\(\)|\bR|\bD)\.([a-z_]+)", js))
    read |= set(re.findall(r'reportPart\("[^"]+", "([a-z_]+)"', js))
    defined = {v for k, v in vars(K).items() if k.isupper() and isinstance(v, str)}
    assert read and read <= defined, read - defined


def test_json_writes_fractional_microseconds_exactly() -> None:
    """A float cannot hold 1712195495502094.565 (it prints ...094.5); --json writes the
    nanoseconds' exact decimal, and no string in the data can pose as such a number."""
    from torchscope.analysis.report_model import us_of
    from torchscope.cli.common import exact_json

    data = {"ts_us": us_of(1712195495502094565), "d_us": us_of(-1500), "n": us_of(100), "s": '"us-0:0"'}
    assert json.loads(exact_json(data)) == {
        "ts_us": 1712195495502094.565,
        "d_us": -1.5,
        "n": 0.1,
        "s": '"us-0:0"',
    }
    text = exact_json(data)
    assert '"ts_us": 1712195495502094.565,' in text and '"d_us": -1.5,' in text and '"n": 0.1,' in text
