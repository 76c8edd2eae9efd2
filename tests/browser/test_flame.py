"""The flame graph in a real browser, on real traces: click to zoom, search, hover, diff, escaping."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import torchscope
from torchscope.render.console import fmt_ns
from torchscope.render.html import write_html
from torchscope.render.payload import build_payload
from torchscope.trace.model import Trace

pytestmark = pytest.mark.browser
ALEXNET = "cuda/alexnet_benchmark.json.gz"


def load(path: Path) -> Trace:
    trace = torchscope.load(path)
    assert isinstance(trace, Trace)
    return trace


def open_flame(page: Any, html: Path, pick: int = 0) -> None:
    page.goto(html.as_uri())
    page.wait_for_selector("#view[data-rendered=overview]")
    page.click("#tabs button[data-view=flame]")
    page.wait_for_selector("[data-testid=flame-canvas]")
    if pick:
        page.select_option("[data-testid=flame-pick]", str(pick))
        page.wait_for_function(f"document.querySelector('[data-testid=flame-pick]').value === '{pick}'")


def rect(page: Any, node: int) -> dict[str, float]:
    """Where node ``node`` is drawn, in page coordinates."""
    r = page.evaluate(
        """(node) => {
            const c = document.querySelector('[data-testid=flame-canvas]');
            const box = c.getBoundingClientRect(), r = TorchscopeFlame.controllerOf(c).rectOf(node);
            return r && { x: box.left + r.x, y: box.top + r.y, w: r.w, h: r.h, canvas: box.width };
        }""",
        node,
    )
    assert r is not None, f"node {node} is not drawn"
    return r  # type: ignore[no-any-return]


def centre(r: dict[str, float]) -> tuple[float, float]:
    return r["x"] + r["w"] / 2, r["y"] + r["h"] / 2


@pytest.fixture(scope="module")
def alexnet(traces_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    payload = build_payload(load(traces_dir / ALEXNET))
    out = write_html(payload, tmp_path_factory.mktemp("flame") / "alexnet.html")
    return out, payload["runs"][0]["flame"]


def test_click_zooms_and_breadcrumb_resets(page: Any, alexnet: tuple[Path, dict[str, Any]]) -> None:
    html, flames = alexnet
    tree = flames["host"]
    open_flame(page, html)
    # the biggest frame two levels down (below the thread): zoom into it
    depth2 = [i for i, p in enumerate(tree["parent"]) if p > 0 and tree["parent"][p] == 0]
    node = max(depth2, key=lambda i: tree["total"][i])
    before = rect(page, node)
    page.mouse.click(*centre(before))
    canvas = page.locator("[data-testid=flame-canvas]")
    assert canvas.get_attribute("data-zoom") == str(node)
    after = rect(page, node)
    assert after["w"] == pytest.approx(after["canvas"]) and after["w"] > before["w"] * 0.999
    crumbs = page.locator("[data-testid=flame-crumbs] button").all_inner_texts()
    assert crumbs[0] == "all" and crumbs[-1] == tree["names"][tree["name"][node]][:47]
    page.locator("[data-testid=flame-crumbs] button").first.click()
    assert canvas.get_attribute("data-zoom") == "0"
    page.mouse.click(*centre(rect(page, node)))
    page.click("[data-testid=flame-reset]")
    assert canvas.get_attribute("data-zoom") == "0"
    assert page.errors == []


def test_search_highlights_and_counts_matches(page: Any, alexnet: tuple[Path, dict[str, Any]]) -> None:
    html, flames = alexnet
    tree = flames["host"]
    open_flame(page, html)
    names = [tree["names"][k] for k in tree["name"]]
    expected = [i for i, n in enumerate(names) if "aten::" in n]
    # the share counts a matching frame once, not again for a matching frame inside it
    outer = [i for i in expected if not any(a in expected for a in ancestors(tree["parent"], i))]
    share = 100 * sum(tree["total"][i] for i in outer) / tree["total"][0]
    page.fill("[data-testid=flame-search]", "ATEN::")
    found = page.locator("[data-testid=flame-matches]")
    assert found.get_attribute("data-count") == str(len(expected)) and len(expected) > 1
    assert f"({share:.1f} % of all)" in found.inner_text()
    page.fill("[data-testid=flame-search]", "")
    assert found.get_attribute("data-count") == "0"
    assert page.errors == []


def ancestors(parent: list[int], i: int) -> list[int]:
    out = []
    while parent[i] >= 0:
        i = parent[i]
        out.append(i)
    return out


def test_hover_shows_total_and_self_with_units(page: Any, alexnet: tuple[Path, dict[str, Any]]) -> None:
    html, flames = alexnet
    tree = flames["device"]
    open_flame(page, html, pick=1)  # the device tree: kernels under their launching ops
    leaf = max(
        (i for i in range(len(tree["name"])) if i not in tree["parent"]), key=lambda i: tree["total"][i]
    )
    page.mouse.move(*centre(rect(page, leaf)))
    tip = page.locator("[data-testid=flame-tip]")
    tip.wait_for(state="visible")
    text = tip.inner_text()
    total, root = tree["total"][leaf], tree["total"][0]
    assert text.splitlines()[0] == tree["names"][tree["name"][leaf]]
    assert f"total {fmt_ns(total)} ({100 * total / root:.1f} % of all)" in text
    assert f"self  {fmt_ns(tree['self'][leaf])} (" in text
    assert any(unit in text for unit in (" ms (", " µs (", " s ("))
    page.mouse.move(5, 5)
    assert page.locator("[data-testid=flame-tip]").is_hidden()
    assert page.errors == []


def test_diff_flame_colours_by_change(page: Any, traces_dir: Path, tmp_path: Path) -> None:
    a, b = load(traces_dir / "multirank/rank-0.json.gz"), load(traces_dir / "multirank/rank-1.json.gz")
    payload = build_payload(a, compare=b, with_timeline=False)
    tree = payload["diff"]["flame"]["host"]
    html = write_html(payload, tmp_path / "diff.html")
    open_flame(page, html)
    keys = page.eval_on_selector_all("[data-testid=flame-pick] option", "os => os.map(o => o.dataset.key)")
    assert keys == ["host", "device", "diff-host", "diff-device"]
    open_flame(page, html, pick=keys.index("diff-host"))
    changed = max(range(1, len(tree["name"])), key=lambda i: abs(tree["total"][i] - tree["base"][i]))
    page.mouse.move(*centre(rect(page, changed)))
    text = page.locator("[data-testid=flame-tip]").inner_text()
    a_ns, b_ns = tree["base"][changed], tree["total"][changed]
    assert f"A {fmt_ns(a_ns)} → B {fmt_ns(b_ns)}" in text  # the page formats time as the terminal does
    assert page.errors == []


def test_trace_names_stay_text(page: Any, tmp_path: Path) -> None:
    hostile = '<img src=x onerror="document.body.dataset.pwned=1">'
    events = [
        {"ph": "X", "cat": "cpu_op", "name": hostile, "ts": 0, "dur": 100, "pid": 1, "tid": 1},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 10, "dur": 50, "pid": 1, "tid": 1},
    ]
    src = tmp_path / "hostile.json"
    src.write_text(json.dumps({"traceEvents": events}))
    html = write_html(build_payload(load(src)), tmp_path / "hostile.html")
    open_flame(page, html)
    tree = build_payload(load(src))["runs"][0]["flame"]["host"]
    node = [tree["names"][k] for k in tree["name"]].index(hostile)
    page.mouse.click(*centre(rect(page, node)))
    page.mouse.move(*centre(rect(page, node)))
    assert page.locator("[data-testid=flame-tip]").inner_text().splitlines()[0] == hostile
    assert page.locator("[data-testid=flame-crumbs] button").last.get_attribute("title") == hostile
    assert page.locator("#view img").count() == 0 and page.evaluate("document.body.dataset.pwned") is None
    assert page.errors == []
