"""The timeline, drill-downs and diff waterfall in a real browser, on a real trace: each
interaction checked against what the Trace (or the report) says in Python."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest

import torchscope
from torchscope.render.html import write_html
from torchscope.render.payload import build_payload
from torchscope.render.units import fmt

pytestmark = pytest.mark.browser
RESNET = "tensorboard_samples/resnet50_num_workers_0.pt.trace.json.gz"
CTL = "TorchscopeTimeline.controllerOf(document.querySelector('[data-testid=timeline-canvas]'))"


@pytest.fixture(scope="module")
def resnet(traces_dir: Path, tmp_path_factory: Any) -> dict[str, Any]:
    trace = torchscope.load(traces_dir / RESNET)
    payload = build_payload(trace)
    html = write_html(payload, tmp_path_factory.mktemp("tl") / "resnet.html")
    events = trace.events.filter(pl.col("dur_ns") > 0).with_row_index("i")
    t0 = int(trace.events["start_ns"].min())  # type: ignore[arg-type]
    return {"trace": trace, "payload": payload, "url": html.as_uri(), "events": events, "t0": t0}


def open_timeline(page: Any, url: str) -> Any:
    page.goto(url)
    page.wait_for_selector("#view[data-rendered=overview]")
    page.click("#tabs button[data-view=timeline]")
    page.wait_for_selector("[data-testid=timeline][data-ready]")
    return page.query_selector("[data-testid=timeline-canvas]")


def visible(canvas: Any) -> tuple[float, float]:
    return float(canvas.get_attribute("data-x0")), float(canvas.get_attribute("data-x1"))


def click_event(page: Any, index: int) -> None:
    """Bring event `index` into view, then click it with the mouse."""
    page.evaluate(
        f"i => {{ const c = {CTL}.cols; {CTL}.show(c.start[i] - c.dur[i], c.start[i] + 2 * c.dur[i]); }}",
        index,
    )
    box = page.evaluate(
        f"i => {{ const c = document.querySelector('[data-testid=timeline-canvas]').getBoundingClientRect(),"
        f" r = {CTL}.rectOf(i); return {{x: c.left + r.x + r.w / 2, y: c.top + r.y + r.h / 2}}; }}",
        index,
    )
    page.mouse.click(box["x"], box["y"])
    page.wait_for_function(
        f"document.querySelector('[data-testid=timeline-selection]').dataset.event === '{index}'"
    )


def test_keyboard_zooms_and_pans_the_visible_range(resnet: dict[str, Any], page: Any) -> None:
    canvas = open_timeline(page, resnet["url"])
    x0, x1 = visible(canvas)
    assert (
        x0 == 0
        and x1 == resnet["events"].select((pl.col("start_ns") + pl.col("dur_ns")).max()).item() - resnet["t0"]
    )
    canvas.focus()
    page.keyboard.press("w")  # zoom in about the centre: 80 % of the span
    a0, a1 = visible(canvas)
    assert a1 - a0 == pytest.approx(0.8 * (x1 - x0)) and (a0 + a1) / 2 == pytest.approx((x0 + x1) / 2)
    page.keyboard.press("d")  # pan right by a tenth of the span
    b0, b1 = visible(canvas)
    assert b0 == pytest.approx(a0 + 0.1 * (a1 - a0)) and b1 - b0 == pytest.approx(a1 - a0)
    page.keyboard.press("a")
    page.keyboard.press("s")
    c0, c1 = visible(canvas)
    assert c1 - c0 == pytest.approx(x1 - x0) and c0 == pytest.approx(x0, abs=1e-3 * (x1 - x0))
    # panned far left or right, the view stays on the trace (it went on into negative time,
    # "0 rectangles"): at most a tenth of it outside
    for _ in range(40):
        page.keyboard.press("a")
    d0, d1 = visible(canvas)
    assert d0 == pytest.approx(-0.1 * (d1 - d0)) and d1 - d0 == pytest.approx(x1 - x0)
    for _ in range(40):
        page.keyboard.press("d")
    e0, e1 = visible(canvas)
    assert e1 == pytest.approx(x1 + 0.1 * (e1 - e0))
    assert page.errors == []


def test_search_counts_and_walks_the_matches(resnet: dict[str, Any], page: Any) -> None:
    canvas = open_timeline(page, resnet["url"])
    ev = resnet["events"]
    hits = ev.filter(
        pl.col("name").cast(pl.String).str.to_lowercase().str.contains("batch_norm", literal=True)
    )
    assert hits.height > 100
    page.fill("[data-testid=timeline-search]", "BATCH_norm")
    page.press("[data-testid=timeline-search]", "Enter")
    count = page.wait_for_selector("[data-testid=timeline-search-count][data-count]")
    assert int(count.get_attribute("data-count")) == hits.height
    assert count.text_content().strip() == f"1 of {hits.height} matches"
    first, second = hits.row(0, named=True), hits.row(1, named=True)
    sel = page.query_selector("[data-testid=timeline-selection]")
    assert sel.get_attribute("data-event") == str(first["i"])
    x0, x1 = visible(canvas)
    assert x0 <= first["start_ns"] - resnet["t0"] <= x1  # the view jumped to it
    page.click("[data-testid=search-next]")
    page.wait_for_function(
        f"document.querySelector('[data-testid=timeline-selection]').dataset.event === '{second['i']}'"
    )
    assert count.text_content().strip() == f"2 of {hits.height} matches"
    page.click("[data-testid=search-prev]")
    page.click("[data-testid=search-prev]")  # wraps to the last
    last = hits.row(hits.height - 1, named=True)
    page.wait_for_function(
        f"document.querySelector('[data-testid=timeline-selection]').dataset.event === '{last['i']}'"
    )
    assert page.errors == []


def test_details_show_the_events_args_shapes_and_stack(resnet: dict[str, Any], page: Any) -> None:
    open_timeline(page, resnet["url"])
    ev = resnet["events"]
    op = ev.filter((pl.col("name") == "aten::cudnn_convolution") & pl.col("input_dims").is_not_null()).row(
        0, named=True
    )
    click_event(page, op["i"])
    text = page.inner_text("[data-testid=event-details]")
    assert "aten::cudnn_convolution" in text and "cpu_op" in text
    assert op["input_dims"] in text and op["input_types"] in text
    assert f"external id\n{op['external_id']}" in text
    parent = ev.row(int(np.flatnonzero(ev["id"].to_numpy() == op["parent"])[0]), named=True)
    assert parent["name"] in text.split("stack\n", 1)[1]  # the enclosing op heads the stack
    assert page.errors == []


def test_arrows_lead_from_an_op_to_its_kernels_and_back(resnet: dict[str, Any], page: Any) -> None:
    open_timeline(page, resnet["url"])
    ev = resnet["events"]
    op = ev.filter(pl.col("name") == "aten::cudnn_convolution").row(0, named=True)
    kernels = ev.filter((pl.col("op") == op["id"]) & pl.col("kind").is_in(["kernel", "memcpy", "memset"]))
    assert kernels.height >= 1
    click_event(page, op["i"])
    buttons = page.query_selector_all("[data-testid=launched-kernels] [data-testid=goto-kernel]")
    assert len(buttons) == kernels.height
    assert f"launched {kernels.height} kernels/copies" in page.inner_text("[data-testid=launched-kernels]")
    buttons[0].click()
    first = kernels.row(0, named=True)
    page.wait_for_function(
        f"document.querySelector('[data-testid=timeline-selection]').dataset.event === '{first['i']}'"
    )
    text = page.inner_text("[data-testid=event-details]")
    assert first["name"][:40] in text
    # the kernel's launch parameters and its correlation id, as the Trace has them
    for key, col in (
        ("grid", "grid"),
        ("block", "block"),
        ("registers per thread", "registers_per_thread"),
        ("correlation", "correlation"),
    ):
        assert f"{key}\n{first[col]}\n" in text
    page.click("[data-testid=goto-launcher]")  # and back to the op that launched it
    page.wait_for_function(
        f"document.querySelector('[data-testid=timeline-selection]').dataset.event === '{op['i']}'"
    )
    assert page.errors == []


def test_range_aggregate_equals_the_sum_in_python(resnet: dict[str, Any], page: Any) -> None:
    canvas = open_timeline(page, resnet["url"])
    box = canvas.bounding_box()
    page.keyboard.down("Shift")
    page.mouse.move(box["x"] + 400, box["y"] + 120)
    page.mouse.down()
    page.mouse.move(box["x"] + 520, box["y"] + 140, steps=4)
    page.mouse.up()
    page.keyboard.up("Shift")
    agg = page.wait_for_selector("[data-testid=timeline-aggregate][data-total-ns]")
    a, b = float(agg.get_attribute("data-a")), float(agg.get_attribute("data-b"))
    assert b - a > 0
    ev = resnet["events"]
    start = (ev["start_ns"] - resnet["t0"]).to_numpy().astype(np.float64)
    inside = np.minimum(b, start + ev["dur_ns"].to_numpy()) - np.maximum(a, start)
    keep = inside > 0
    assert float(agg.get_attribute("data-total-ns")) == pytest.approx(inside[keep].sum(), rel=1e-12)
    per_name = (
        pl.DataFrame({"name": ev["name"].cast(pl.String), "t": inside})
        .filter(keep)
        .group_by("name")
        .agg(pl.col("t").sum())
        .sort("t", descending=True)
    )
    top = page.eval_on_selector_all(
        "[data-testid=range-table] tbody tr:first-child td", "tds => tds.map(t => t.textContent)"
    )
    assert top[0] == per_name["name"][0]
    assert top[3] == fmt(per_name["t"][0] / 1000, "us")
    assert page.errors == []


def test_zoom_to_step_shows_the_reports_step(resnet: dict[str, Any], page: Any) -> None:
    canvas = open_timeline(page, resnet["url"])
    step = resnet["payload"]["report"]["steps"][1]
    page.select_option("[data-testid=timeline-step]", label=f"step {step['step']}")
    x0, x1 = visible(canvas)
    assert x0 == pytest.approx(step["start_us"] * 1000 - resnet["t0"]) and x1 - x0 == pytest.approx(
        step["dur_us"] * 1000
    )
    assert page.errors == []


def test_diff_waterfall_walks_from_a_to_b(traces_dir: Path, tmp_path: Path, page: Any) -> None:
    a = torchscope.load(traces_dir / "cuda/diff_control_rank3_of_8.json.gz")
    b = torchscope.load(traces_dir / "cuda/diff_test_rank1_of_2.json.gz")
    payload = build_payload(a, compare=b, with_timeline=False)
    page.goto(write_html(payload, tmp_path / "diff.html").as_uri())
    page.click("#tabs button[data-view=diff]")
    svg = page.wait_for_selector("[data-testid=diff-waterfall]")
    d = payload["diff"]["report"]
    cats = [c for c, x in d["breakdown_us"].items() if c != "Total" and x["delta"]]
    titles = svg.eval_on_selector_all("rect title", "ts => ts.map(t => t.textContent)")
    assert len(titles) == len(cats) + 2
    assert titles[0].endswith(fmt(d["step_us"]["a"], "us")) and titles[-1].endswith(
        fmt(d["step_us"]["b"], "us")
    )
    kernel = d["breakdown_us"]["Kernel"]["delta"]
    assert f"Kernel: +{fmt(kernel, 'us')}" in titles
    # how long each side's steps took, as the terminal says it
    a_steps, b_steps = d["step_us"]["a_steps"], d["step_us"]["b_steps"]
    assert page.text_content("[data-testid=diff-spread]") == (
        f"steps took {fmt(a_steps['shortest'], 'us')}–{fmt(a_steps['longest'], 'us')} in A"
        f" (median {fmt(a_steps['median'], 'us')}) and {fmt(b_steps['shortest'], 'us')}–"
        f"{fmt(b_steps['longest'], 'us')} in B (median {fmt(b_steps['median'], 'us')})"
    )
    # the changes that explain it follow; those the terminal dims as noise are dimmed here too
    assert page.query_selector("[data-testid=diff-table] tbody tr")
    noise = [x["name"] for x in d["changes"] if x.get("noise")]
    assert len(noise) == 112
    dimmed = page.eval_on_selector_all(
        "[data-testid=diff-table] tbody tr.noise td:first-child", "t => t.map(x => x.title || x.textContent)"
    )
    assert len(dimmed) == len(noise)
    assert page.is_visible("text=Dimmed: the same calls")
    assert page.errors == []


def test_diff_waterfall_labels_long_names_inside_the_chart(
    traces_dir: Path, tmp_path: Path, page: Any
) -> None:
    """Two runs' files of one name are labelled by their folders ("A: runA/traces/...");
    at a fixed 190 px label column such a label began 25 px left of the chart, its "A:" cut
    off. The column widens to its labels; a longer one keeps its start and end, whole in a
    tooltip."""
    sides = []
    for run in ("runA_of_the_baseline_model", "runB_of_the_baseline_model"):
        (tmp_path / run / "traces").mkdir(parents=True)
        path = tmp_path / run / "traces" / "step_4.pt.trace.json.gz"
        path.symlink_to(traces_dir / "cuda/diff_control_rank3_of_8.json.gz")
        sides.append(torchscope.load(path))
    payload = build_payload(sides[0], compare=sides[1], with_timeline=False)
    page.goto(write_html(payload, tmp_path / "diff.html").as_uri())
    page.click("#tabs button[data-view=diff]")
    svg = page.wait_for_selector("[data-testid=diff-waterfall]")
    labels = svg.eval_on_selector_all(
        "text[text-anchor=end]",
        "ts => ts.filter(t => t.querySelector('title')).map(t => [t.firstChild.textContent, t.getBBox().x,"
        " t.querySelector('title').textContent])",
    )
    full_a = f"A: {payload['diff']['a']}"
    assert full_a == "A: runA_of_the_baseline_model/traces/step_4.pt.trace.json.gz"
    shown, x, whole = labels[0]
    assert (
        shown.startswith("A: runA_of_the") and shown.endswith("step_4.pt.trace.json.gz") and whole == full_a
    )
    assert min(x for _, x, _ in labels) >= 0  # every label inside the chart
    assert page.errors == []


def test_charts_use_round_ticks_and_mark_the_memory_peak(resnet: dict[str, Any], page: Any) -> None:
    page.goto(resnet["url"])
    page.wait_for_selector("[data-testid=step-chart]")
    ticks = page.eval_on_selector_all(
        "[data-testid=step-chart] text[text-anchor=end]", "t => t.map(x => x.textContent)"
    )
    assert ticks[:3] == ["0 ns", "50 ms", "100 ms"]
    page.click("#tabs button[data-view=memory]")
    marks = page.eval_on_selector_all("[data-testid=peak-marker] text", "t => t.map(x => x.textContent)")
    peaks = resnet["payload"]["report"]["memory"]["peaks"]
    assert sorted(m.split(" in ")[0] for m in marks) == sorted(
        f"peak {fmt(p['peak_allocated_bytes'], 'bytes')}" for p in peaks
    )
    assert page.errors == []


def test_stack_and_module_drill_downs_on_a_live_capture(tmp_path: Path, page: Any) -> None:
    import torch
    from torch.profiler import profile

    from torchscope.models import mlp

    model = mlp((32, 64, 10))
    with profile(with_stack=True, with_modules=True, record_shapes=True) as prof:
        for _ in range(2):
            model(torch.randn(4, 32)).sum().backward()
    prof.export_chrome_trace(str(tmp_path / "mlp.json"))
    payload = build_payload(torchscope.load(tmp_path / "mlp.json"))
    report = payload["report"]
    page.goto(write_html(payload, tmp_path / "mlp.html").as_uri())
    # operators -> call stacks
    page.click("#tabs button[data-view=operators]")
    page.fill("[data-testid=filter]", "aten::linear")
    page.click("[data-testid=ops-table] tbody tr:has(td:text-is('aten::linear'))")
    stacks = sorted(r["stack"] for r in report["call_stacks"] if r["name"] == "aten::linear")
    assert len(stacks) >= 2  # two Linear layers: two call sites, one input shape each
    got = []
    for i in range(page.eval_on_selector_all("[data-testid=drill-shapes] tbody tr", "r => r.length")):
        page.click(f"[data-testid=drill-shapes] tbody tr:nth-child({i + 1})")
        got += page.eval_on_selector_all(
            "[data-testid=drill-stacks] tbody tr td:first-child", "t => t.map(x => x.textContent)"
        )
    assert sorted(got) == stacks
    # modules -> the ops each calls itself
    page.click("#tabs button[data-view=modules]")
    path = next(r["path"] for r in report["modules"] if r["module"] == "Linear_0")
    page.click(f"[data-testid=module-tree] button[data-path='{path}']")
    rows = page.eval_on_selector_all(
        "[data-testid=drill-module-ops] tbody tr",
        "r => r.map(x => x.cells[0].textContent + ' ' + x.cells[1].textContent)",
    )
    assert (
        rows
        == [f"{r['name']} {r['calls']}" for r in report["module_ops"] if r["path"] == path]
        == ["aten::linear 2"]
    )
    assert page.errors == []


def test_hostile_names_in_search_details_and_range_stay_text(tmp_path: Path, page: Any) -> None:
    data = Path(__file__).resolve().parents[1] / "data"
    html = write_html(
        build_payload(torchscope.load(data / "hostile_names.pt.trace.json")), tmp_path / "h.html"
    )
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    canvas = open_timeline(page, html.as_uri())
    page.fill("[data-testid=timeline-search]", "<script>")
    page.press("[data-testid=timeline-search]", "Enter")
    count = page.wait_for_selector("[data-testid=timeline-search-count][data-count]")
    assert int(count.get_attribute("data-count")) >= 1
    assert "<script>window.__pwned=" in page.inner_text(
        "[data-testid=event-details]"
    )  # the first match, as text
    box = canvas.bounding_box()
    page.keyboard.down("Shift")
    page.mouse.move(box["x"] + 205, box["y"] + 60)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] - 5, box["y"] + 80, steps=3)
    page.mouse.up()
    page.keyboard.up("Shift")
    page.wait_for_selector("[data-testid=range-table]")
    assert "<script>window.__pwned=1</script>" in page.inner_text("[data-testid=range-table]")
    assert page.evaluate("window.__pwned") is None and dialogs == []
    assert page.query_selector("#view img, #view script, #view svg[onload]") is None
    assert page.errors == []


def test_wheel_zooms_at_the_pointer_and_drag_pans(resnet: dict[str, Any], page: Any) -> None:
    canvas = open_timeline(page, resnet["url"])
    box = canvas.bounding_box()
    x0, x1 = visible(canvas)
    px = 700  # the pointer, in canvas px; the label column is 200 px wide
    at = x0 + (px - 200) / (box["width"] - 200) * (x1 - x0)
    page.mouse.move(box["x"] + px, box["y"] + 100)
    page.mouse.wheel(0, -100)  # zoom in: 80 % of the span, the time under the pointer stays
    page.wait_for_function(
        f"Number(document.querySelector('[data-testid=timeline-canvas]').dataset.x1) < {x1}"
    )
    a0, a1 = visible(canvas)
    assert a1 - a0 == pytest.approx(0.8 * (x1 - x0))
    assert a0 + (px - 200) / (box["width"] - 200) * (a1 - a0) == pytest.approx(at)
    page.mouse.down()
    page.mouse.move(box["x"] + px - 100, box["y"] + 100, steps=5)  # drag left: later times come in
    page.mouse.up()
    b0, b1 = visible(canvas)
    assert b0 - a0 == pytest.approx(100 / (box["width"] - 200) * (a1 - a0)) and b1 - b0 == pytest.approx(
        a1 - a0
    )
    assert page.errors == []


def test_a_search_with_no_match_clears_the_last_selection(tmp_path: Path, page: Any) -> None:
    """A new user searched for an event, then for a name with no match: the first one's details
    stayed, beside "no match", and read as the second search's result."""
    data = Path(__file__).resolve().parents[1] / "data"
    html = write_html(
        build_payload(torchscope.load(data / "hostile_names.pt.trace.json")), tmp_path / "h.html"
    )
    open_timeline(page, html.as_uri())
    page.fill("[data-testid=timeline-search]", "<script>")
    page.press("[data-testid=timeline-search]", "Enter")
    page.wait_for_selector("[data-testid=event-details]")
    page.fill("[data-testid=timeline-search]", "no_such_event_name")
    page.press("[data-testid=timeline-search]", "Enter")
    page.wait_for_selector("[data-testid=timeline-search-count][data-count='0']")
    assert page.query_selector("[data-testid=event-details]") is None
    assert 'named like "no_such_event_name"' in page.inner_text("[data-testid=timeline-selection]")
    assert page.errors == []
