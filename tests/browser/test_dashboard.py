"""The dashboard in a real browser: every view renders, tables sort, the timeline zooms, serve works."""

from __future__ import annotations

import json
import shutil
import threading
from pathlib import Path
from typing import Any

import pytest

import torchscope
from torchscope.cli.main import main
from torchscope.cli.serve import make_server
from torchscope.render.html import write_html
from torchscope.render.payload import build_payload

pytestmark = pytest.mark.browser
DATA = Path(__file__).resolve().parents[1] / "data"
SCRIPTS = Path(__file__).resolve().parents[1] / "cli" / "scripts"
REAL = ["multirank"] + sorted(
    str(p.relative_to(Path(__file__).resolve().parents[2].parent / "shared" / "traces"))
    for folder in ("tensorboard_samples", "cuda", "multirank")
    for p in (Path(__file__).resolve().parents[2].parent / "shared" / "traces" / folder).glob("*.json*")
)


def views(page: Any) -> list[str]:
    return page.eval_on_selector_all("#tabs button", "bs => bs.map(b => b.dataset.view)")


def visit_every_view(page: Any) -> dict[str, str]:
    """Click each tab; return the text each view rendered."""
    seen = {}
    for v in views(page):
        page.click(f"#tabs button[data-view={v}]")
        page.wait_for_selector(f"#view[data-rendered={v}]")
        seen[v] = page.inner_text("#view")
    return seen


def check_dashboard(page: Any, url: str) -> dict[str, str]:
    page.goto(url)
    page.wait_for_selector("#view[data-rendered=overview]")
    seen = visit_every_view(page)
    assert {"overview", "operators", "kernels", "memory", "modules", "distributed", "timeline"} <= set(seen)
    for v, text in seen.items():
        assert len(text.strip()) > len(v) + 5, f"{v} rendered nothing"
    # Overview shows a number with a unit, not a placeholder
    assert any(u in seen["overview"] for u in (" ms", " µs", " s\n", " s "))
    # a table sorts: ops by calls, descending then ascending
    page.click("#tabs button[data-view=operators]")
    if page.query_selector("[data-testid=ops-table]"):
        page.click("[data-testid=ops-table] th[data-key=calls]")
        calls = [
            int(x.replace(",", ""))
            for x in page.eval_on_selector_all(
                "[data-testid=ops-table] tbody tr td:nth-child(3)", "tds => tds.map(t => t.textContent)"
            )
        ]
        assert calls == sorted(calls, reverse=True)
        page.click("[data-testid=ops-table] th[data-key=calls]")
        calls = [
            int(x.replace(",", ""))
            for x in page.eval_on_selector_all(
                "[data-testid=ops-table] tbody tr td:nth-child(3)", "tds => tds.map(t => t.textContent)"
            )
        ]
        assert calls == sorted(calls)
    # the timeline zooms
    page.click("#tabs button[data-view=timeline]")
    canvas = page.wait_for_selector("[data-testid=timeline-canvas]")
    page.wait_for_function("document.querySelector('[data-testid=timeline-canvas]').dataset.x1 !== undefined")
    span0 = float(canvas.get_attribute("data-x1")) - float(canvas.get_attribute("data-x0"))
    page.click("[data-testid=zoom-in]")
    span1 = float(canvas.get_attribute("data-x1")) - float(canvas.get_attribute("data-x0"))
    assert span1 == pytest.approx(span0 / 2, rel=1e-6)
    assert page.errors == []
    return seen


@pytest.mark.parametrize("name", REAL)
def test_report_of_each_real_trace(name: str, traces_dir: Path, tmp_path: Path, page: Any) -> None:
    html = write_html(build_payload(torchscope.load(traces_dir / name)), tmp_path / "r.html")
    check_dashboard(page, html.resolve().as_uri())


def test_distributed_view_of_two_ranks(traces_dir: Path, tmp_path: Path, page: Any) -> None:
    html = write_html(build_payload(torchscope.load(traces_dir / "multirank")), tmp_path / "m.html")
    page.goto(html.resolve().as_uri())
    page.wait_for_selector("#view[data-rendered=overview]")
    # a rank's findings' evidence in that rank's units (the set's own report has none of them:
    # the share showed as 0.2739, the time per step as a bare number)
    overview = page.eval_on_selector("#view", "v => v.textContent")
    assert "27.4 %" in overview and "168.465 ms" in overview and "0.2739" not in overview
    page.click("#tabs button[data-view=distributed]")
    page.wait_for_selector("[data-testid=dist-table]")
    rows = page.eval_on_selector_all(
        "[data-testid=dist-table] tbody tr td:first-child", "tds => tds.map(t => t.textContent)"
    )
    assert sorted(rows) == ["rank0", "rank1"]
    # keys read as words and values carry their units (were "computation_ns", "39619.9000")
    text = page.inner_text("#view")
    assert "computation" in text and "computation_us" not in text and "mean_us" not in text
    assert "39.620 ms" in text and "8.703 ms" in text  # rank 0's mean SendRecv; its wait for rank 1
    assert page.eval_on_selector_all("#run-select option", "os => os.map(o => o.textContent)") == [
        "rank0",
        "rank1",
    ]
    page.select_option("#run-select", "1")
    page.click("#tabs button[data-view=operators]")
    page.wait_for_selector("[data-testid=ops-table]")
    assert page.errors == []


def test_diff_view(traces_dir: Path, tmp_path: Path, page: Any) -> None:
    a = torchscope.load(traces_dir / "tensorboard_samples/resnet50_num_workers_0.pt.trace.json.gz")
    b = torchscope.load(traces_dir / "tensorboard_samples/resnet50_num_workers_4.pt.trace.json.gz")
    html = write_html(build_payload(a, compare=b), tmp_path / "d.html")
    page.goto(html.resolve().as_uri())
    page.click("#tabs button[data-view=diff]")
    page.wait_for_selector("[data-testid=diff-table]")
    first = page.inner_text("[data-testid=diff-table] tbody tr:first-child td:first-child")
    assert first.startswith("enumerate(DataLoader)")
    assert page.errors == []


def test_report_of_a_live_run(tmp_path: Path, page: Any) -> None:
    out = tmp_path / "run"
    assert (
        main(
            [
                "run",
                "--out",
                str(out),
                "--memory",
                "--stack",
                "--no-summary",
                str(SCRIPTS / "train_resnet.py"),
                "--steps",
                "2",
            ]
        )
        == 0
    )
    seen = check_dashboard(page, (out / "report.html").resolve().as_uri())
    assert "aten::convolution_backward" in seen["operators"]
    assert "cpu peak allocated" in seen["memory"]
    assert "ResNet18_0" in seen["modules"]
    assert "Python hot spots" in seen["overview"] and "exit code" in seen["overview"]
    # the Overview agrees with the terminal: 2 optimizer steps are 2 steps, setup shown apart
    page.click("#tabs button[data-view=overview]")
    cards = page.inner_text("[data-testid=overview-cards]")
    assert "steps\n2" in cards and "setup (before step 0)" in cards


def test_hostile_names_show_as_text_and_run_nothing(tmp_path: Path, page: Any) -> None:
    src = tmp_path / 'x<img src=y onerror="window.__pwned=9">.json'
    shutil.copy(DATA / "hostile_names.pt.trace.json", src)
    html = write_html(build_payload(torchscope.load(src)), tmp_path / "h.html")
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.goto(html.resolve().as_uri())
    page.wait_for_selector("#view[data-rendered=overview]")
    seen = visit_every_view(page)
    page.click("#tabs button[data-view=timeline]")
    page.click("[data-testid=zoom-in]")
    assert page.evaluate("window.__pwned") is None and dialogs == []
    assert page.query_selector("#view img, #view script, #view svg[onload]") is None
    assert "<script>window.__pwned=1</script>" in seen["operators"]
    assert '<img src=x onerror="window.__pwned=2">' in seen["operators"]
    assert '"><svg onload=window.__pwned=3>' in seen["kernels"]
    assert page.title().startswith('x<img src=y onerror="window.__pwned=9">')


def test_serve_end_to_end_refreshes_as_traces_arrive(tmp_path: Path, traces_dir: Path, page: Any) -> None:
    logdir = tmp_path / "log"
    logdir.mkdir()
    shutil.copy(traces_dir / "multirank/rank-0.json.gz", logdir / "rank-0.json.gz")
    server = make_server(logdir, "127.0.0.1", 0, poll_ms=300)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/"
        check_dashboard(page, url)
        assert page.eval_on_selector_all("#run-select option", "os => os.length") == 1
        shutil.copy(traces_dir / "multirank/rank-1.json.gz", logdir / "rank-1.json.gz")
        # the two ranks are one job, listed first, then each file
        page.wait_for_function("document.querySelectorAll('#run-select option').length === 3", timeout=20_000)
        page.select_option("#run-select", index=0)
        page.wait_for_function("document.querySelector('#view').dataset.rendered === 'job'", timeout=60_000)
        assert "2 ranks" in page.inner_text("#view")
        page.select_option("#run-select", "rank-1.json.gz")
        page.wait_for_function(
            "document.querySelector('#title').textContent === 'rank-1.json.gz'", timeout=60_000
        )
        page.wait_for_selector("#view[data-rendered]")
        with page.expect_download() as dl:
            page.click("#tabs button[data-view=timeline]")
            page.click("[data-testid=export-chrome]")
        assert Path(dl.value.path()).read_bytes() == (logdir / "rank-1.json.gz").read_bytes()
        assert page.errors == []
    finally:
        server.shutdown()
        server.server_close()


def test_accuracy_view_from_a_live_comparison(traces_dir: Path, tmp_path: Path, page: Any) -> None:
    import torch

    from torchscope.accuracy import accuracy_section, compare
    from torchscope.models import mlp

    model = mlp((32, 64, 10)).to(torch.bfloat16)
    with compare(model) as result:
        model(torch.randn(4, 32, dtype=torch.bfloat16))
    section = accuracy_section(result)
    trace = torchscope.load(traces_dir / "cuda/triton_kernel.json.gz")
    html = write_html(build_payload(trace, extra={"accuracy": section}), tmp_path / "a.html")
    page.goto(html.resolve().as_uri())
    page.click("#tabs button[data-view=accuracy]")
    page.wait_for_selector("#view[data-rendered=accuracy]")
    text = page.inner_text("#view")
    headline = "First divergence" if section["first_divergence"] else "No divergence beyond tolerance"
    assert headline in text
    assert "aten::addmm" in text and "net.0" in text
    assert page.errors == []


def table_text(page: Any, testid: str, rows: int) -> list[list[str]]:
    return page.eval_on_selector_all(  # type: ignore[no-any-return]
        f"[data-testid={testid}] tbody tr",
        f"trs => trs.slice(0, {rows}).map(tr => [...tr.querySelectorAll('td')].map(td => td.textContent))",
    )


@pytest.mark.parametrize(
    "name", ["cuda/nccl_rank1_of_2_profile_memory.json.gz", "cpu/cpu_only_gloo_rank34.pt.trace.json.gz"]
)
def test_views_show_the_json_rows(
    name: str, traces_dir: Path, tmp_path: Path, page: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """The Operators, Kernels and Memory tables show report --json's rows, in its order, each
    number formatted by the unit the report declares (app.js's fmt agrees with render.units)."""
    import json

    from torchscope.render.units import fmt

    html = tmp_path / "r.html"
    assert main(["report", str(traces_dir / name), "--json", "--html", str(html)]) == 0
    rep = json.loads(capsys.readouterr().out)
    units, start = rep["units"], rep["meta"]["start_us"]

    def expected(rows: list[dict[str, Any]], fields: list[str | None], n: int = 15) -> list[list[str]]:
        return [[str(r[f]) if f in ("name", "kind", "device") else fmt(r[f], units[f], start) if f else "" for f in fields]
                for r in rows[:n]]  # fmt: skip

    page.goto(html.resolve().as_uri())
    page.click("#tabs button[data-view=operators]")
    page.wait_for_selector("[data-testid=ops-table]")
    op_fields = ["name", "kind", "calls", "host_self_us", "host_total_us", "host_avg_us", "host_max_us",
                 "device_self_us", "device_total_us"]  # fmt: skip
    assert table_text(page, "ops-table", 15) == expected(rep["operators"], op_fields)
    if rep["kernels"]:
        page.click("#tabs button[data-view=kernels]")
        page.wait_for_selector("[data-testid=kernels-table]")
        k_fields = [
            "name",
            "count",
            "total_us",
            "share_pct",
            "mean_us",
            "min_us",
            "max_us",
            "occupancy_pct",
            "blocks_per_sm",
        ]
        got = [row[:-1] for row in table_text(page, "kernels-table", 15)]  # the last: Tensor Cores yes/no
        assert got == expected(rep["kernels"], k_fields)
    if rep["memory"]["by_op"]:
        page.click("#tabs button[data-view=memory]")
        page.wait_for_selector("[data-testid=memory-table]")
        m_fields = ["name", "device", "allocations", "self_allocated_bytes", "self_freed_bytes",
                    "total_allocated_bytes", "total_net_bytes"]  # fmt: skip
        assert table_text(page, "memory-table", 15) == expected(rep["memory"]["by_op"], m_fields)
        cards = page.inner_text("[data-testid=memory-cards]")
        for p in rep["memory"]["peaks"]:
            assert (
                f"{fmt(p['peak_allocated_bytes'], 'bytes')} at {fmt(p['peak_ts_us'], 'timestamp_us', start)}"
                in cards
            )
    page.click("#tabs button[data-view=overview]")
    page.wait_for_selector("[data-testid=steps-table]")
    steps = [
        [fmt(s["step"], "id"), fmt(s["start_us"], "timestamp_us", start), fmt(s["dur_us"], "us")]
        for s in rep["steps"]
    ]
    assert table_text(page, "steps-table", 50) == steps
    # the Report tab is sections with units, not raw JSON
    page.click("#tabs button[data-view=report]")
    page.wait_for_selector("#view[data-rendered=report]")
    text = page.inner_text("#view")
    assert "The trace" in text and "Step time by category" in text and '"report_version"' not in text
    assert fmt(rep["meta"]["span_us"], "us") in text
    assert page.errors == []


def test_a_run_of_several_cycles_opens_on_the_latest(tmp_path: Path, page: Any) -> None:
    """The terminal shows the latest cycle in full; the page used to open on the first (setup)."""
    out = tmp_path / "cycles"
    script = Path(__file__).resolve().parents[1] / "cli" / "scripts" / "linear_steps.py"
    assert main(["run", "--out", str(out), "--no-summary", "--sample-ms", "0", str(script), "45"]) == 0
    page.goto((out / "report.html").resolve().as_uri())
    page.wait_for_selector("#view[data-rendered=overview]")
    names = page.eval_on_selector_all("#run-select option", "os => os.map(o => o.textContent)")
    assert names == ["step_4", "step_22", "step_40"]
    assert page.eval_on_selector("#run-select", "s => s.options[s.selectedIndex].textContent") == "step_40"
    # the run's notes, which the terminal alone said: the schedule's steps
    notes = page.inner_text("[data-testid=run-notes]")
    assert "default schedule: recorded 11 of the run's 45 steps (0–4, 20–22, 38–40)" in notes
    page.click("#tabs button[data-view=report]")
    page.wait_for_selector("#view[data-rendered=report]")
    assert "Cycle step_40" in page.eval_on_selector_all("#view h2", "hs => hs.map(x => x.textContent)")  # not "Rank"
    # the run knows its torch (Kineto's file does not say it): "torch version –" before
    import torch

    assert f"torch version\n{torch.__version__}\n" in page.inner_text("#view")
    assert page.errors == []


def test_a_run_opens_on_its_latest_cycle_with_a_step_and_shows_that_cycle_s_findings(
    tmp_path: Path, page: Any
) -> None:
    """The page opens on the cycle the terminal shows, the latest with a step, and its
    Recommendations are that cycle's (they were the run's for every cycle: "94% ... over 3
    calls" under a cycle of 5). (A last cycle of no step, which the page once opened on, is no
    longer written.)"""
    out = tmp_path / "stub"
    script = Path(__file__).resolve().parents[1] / "cli" / "scripts" / "busy_python_steps.py"
    schedule = ["--wait", "0", "--warmup", "1", "--active", "2", "--repeat", "0"]
    assert main(["run", "--out", str(out), "--no-summary", *schedule, str(script)]) == 0
    cycles = json.loads((out / "report.json").read_text())["report"]["ranks"]
    # the last cycle holds step 7 whole and the work after it (no step): named by its last step
    assert list(cycles) == ["step_2", "step_5", "step_7"]
    cycle = cycles["step_7"]
    page.goto((out / "report.html").resolve().as_uri())
    page.wait_for_selector("#view[data-rendered=overview]")
    assert page.eval_on_selector("#run-select", "s => s.options[s.selectedIndex].textContent") == "step_7"
    assert "Findings of step_7" in page.inner_text("[data-testid=recommendations-of]")
    shown = page.inner_text("[data-testid=recommendations]")
    assert cycle["recommendations"] and all(f["message"][:40] in shown for f in cycle["recommendations"])
    assert page.errors == []


def test_a_trace_of_many_steps_shows_every_run_of_steps_inside_the_chart(tmp_path: Path, page: Any) -> None:
    """5,000 steps are 2,000 rows of runs of consecutive steps. With a 1 px floor per bar the step
    chart ran to 2,100 px of its 900, the last 60 % cut off, and the steps table said "2000 of
    2000 rows" over the 1,000 it draws."""
    events = []
    for k in range(5000):
        t = 10 * k
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{k}", "pid": 1, "tid": 1, "ts": t, "dur": 9})
        events.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": t + 1, "dur": 5})
    src = tmp_path / "steps.json"
    src.write_text(json.dumps({"traceEvents": events}))
    html = tmp_path / "steps.html"
    assert main(["report", str(src), "--html", str(html), "--json"]) == 0
    page.goto(html.as_uri() + "#overview")
    page.wait_for_selector("[data-testid=step-chart]")
    right, width, bars = page.evaluate(
        """() => { const svg = document.querySelector('[data-testid=step-chart]'); let m = 0;
        svg.querySelectorAll('rect').forEach(r => { m = Math.max(m, +r.getAttribute('x') + +r.getAttribute('width')); });
        return [m, +svg.getAttribute('width'), svg.querySelectorAll('rect').length]; }"""
    )
    assert right <= width == 900 and bars == 2 * 2000  # operators and outside-ops stacked per run
    assert page.get_by_test_id("steps-grouped").inner_text() == "2,000 runs of consecutive steps, each bar their mean step."
    assert page.get_by_text("the first 1000 of 2000 rows; filter or sort to see others").count() == 1
    assert page.errors == []
