"""The operators drill-down as a chain in the page, on real CUDA traces: op -> its input-shape
rows -> a shape's call stacks and the kernels it launched (adding up to the shape's device
total); kernel -> the ops that launched it. Every name stays text."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

import torchscope
from torchscope.analysis import report_model as M
from torchscope.render.html import write_html
from torchscope.render.payload import build_payload
from torchscope.render.units import fmt

RESNET = "tensorboard_samples/resnet50_num_workers_0.pt.trace.json.gz"
NCCL = "cuda/nccl_rank1_of_2_profile_memory.json.gz"
NS = "cuda/rank0_ns_resolution.pt.trace.json.gz"


@pytest.fixture(scope="module")
def pages(traces_dir: Path, tmp_path_factory: Any) -> dict[str, dict[str, Any]]:
    out = {}
    for rel in (RESNET, NCCL, NS):
        payload = build_payload(torchscope.load(traces_dir / rel), with_timeline=False)
        html = write_html(payload, tmp_path_factory.mktemp("chain") / "page.html")
        out[rel] = {"report": payload["report"], "url": html.as_uri()}
    return out


def texts(page: Any, sel: str, cell: int = 0) -> list[str]:
    return page.eval_on_selector_all(f"{sel} tbody tr", f"r => r.map(x => x.cells[{cell}].textContent)")


def open_op(page: Any, url: str, name: str) -> None:
    page.goto(url)
    page.click("#tabs button[data-view=operators]")
    page.fill("[data-testid=filter]", name)
    page.click(f"[data-testid=ops-table] tbody tr:has(td:text-is('{name}'))")


def test_op_to_shape_to_its_kernels_adding_up(pages: dict[str, dict[str, Any]], page: Any) -> None:
    report, url = pages[RESNET]["report"], pages[RESNET]["url"]
    name = "aten::cudnn_convolution"
    open_op(page, url, name)
    shapes = [r for r in report["operators_by_shape"] if r["name"] == name]
    assert len(shapes) > 1
    assert texts(page, "[data-testid=drill-shapes]") == [
        r["input_dims"] if r["input_dims"] != M.OTHER_SHAPES else f"{M.OTHER_SHAPES}: {r['shapes']} shapes"
        for r in shapes
    ]
    # the third shape row: its kernels, and their sum is the row's device total
    shape = shapes[2]
    page.click("[data-testid=drill-shapes] tbody tr:nth-child(3)")
    # the picked shape stays marked, and only it
    picked = page.eval_on_selector_all(
        "[data-testid=drill-shapes] tr.picked", "r => r.map(x => x.cells[0].textContent)"
    )
    assert picked == [shape["input_dims"]]
    kernels = [
        r for r in report["kernels_by_op"] if r["op_name"] == name and r["input_dims"] == shape["input_dims"]
    ]
    assert kernels and texts(page, "[data-testid=drill-kernels]") == [r["name"] for r in kernels]
    assert texts(page, "[data-testid=drill-kernels]", 2) == [fmt(r["total_us"], "us") for r in kernels]
    total = sum(round(r["total_us"] * 1000) for r in kernels)
    assert total == round(shape["device_total_us"] * 1000) > 0
    assert page.inner_text("[data-testid=drill-kernels-sum]") == (
        f"sum {fmt(total / 1000, 'us')} = the shape's device total {fmt(shape['device_total_us'], 'us')}"
    )
    assert page.inner_text("[data-testid=shape-drill] h4") == f"{name} · input shapes {shape['input_dims']}"
    assert page.errors == []


def test_an_op_with_many_kernels_ends_with_the_rest(pages: dict[str, dict[str, Any]], page: Any) -> None:
    """One shape row opens by itself; its top kernels then "(other kernels)" add up to it."""
    report, url = pages[NCCL]["report"], pages[NCCL]["url"]
    name = "CompiledFunctionBackward"
    open_op(page, url, name)
    (shape,) = [r for r in report["operators_by_shape"] if r["name"] == name]
    got = texts(page, "[data-testid=drill-kernels]")
    rows = [r for r in report["kernels_by_op"] if r["op_name"] == name]
    assert got == [r["name"] for r in rows] and got[-1] == M.OTHER_KERNELS and len(got) == 9
    # an enclosing op: the kernels were launched by the ops it calls, none by itself
    assert set(texts(page, "[data-testid=drill-kernels]", 4)) == {fmt(0, "us")}
    assert page.inner_text("[data-testid=drill-kernels-sum]").endswith(
        f"= the shape's device total {fmt(shape['device_total_us'], 'us')} (the top kernels, then {M.OTHER_KERNELS})"
    )
    assert page.errors == []


def test_kernel_to_all_the_ops_that_launched_it(pages: dict[str, dict[str, Any]], page: Any) -> None:
    """volta_sgemm_128x32_nt: 20 calls; "Launched by" once showed only aten::mm's 5 (the op rows
    the report kept), not aten::convolution_backward's 15. Its rows now add up to the kernel's."""
    report, url = pages[NS]["report"], pages[NS]["url"]
    page.goto(url)
    page.click("#tabs button[data-view=kernels]")
    kernel = "volta_sgemm_128x32_nt"
    page.fill("[data-testid=filter]", kernel)
    page.click(f"[data-testid=kernels-table] tbody tr:has(td:text-is('{kernel}'))")
    assert texts(page, "[data-testid=drill-launchers]") == ["aten::convolution_backward", "aten::mm"]
    assert texts(page, "[data-testid=drill-launchers]", 1) == [fmt(15, "count"), fmt(5, "count")]
    assert texts(page, "[data-testid=drill-launchers]", 2) == [fmt(7173.975, "us"), fmt(98.048, "us")]
    (k,) = [x for x in report["kernels"] if x["name"] == kernel]
    assert page.inner_text("[data-testid=drill-launchers-sum]") == (
        f"sum {fmt(20, 'count')} calls, {fmt(k['total_us'], 'us')} = the kernel's {fmt(20, 'count')} calls, {fmt(k['total_us'], 'us')}"
    )
    assert page.errors == []


def test_an_op_with_many_shapes_says_so_and_opens_none(pages: dict[str, dict[str, Any]], page: Any) -> None:
    """aten::relu_ on resnet50 (294 calls, 12 shapes) showed one shape row of 18 calls and opened
    it as if it were the op's only shape."""
    report, url = pages[RESNET]["report"], pages[RESNET]["url"]
    open_op(page, url, "aten::relu_")
    rows = [r for r in report["operators_by_shape"] if r["name"] == "aten::relu_"]
    got = texts(page, "[data-testid=drill-shapes]")
    assert len(got) == 9 and got[-1] == f"{M.OTHER_SHAPES}: 4 shapes"
    assert sum(int(c.replace(",", "")) for c in texts(page, "[data-testid=drill-shapes]", 1)) == 294
    top = 294 - rows[-1]["calls"]
    assert page.inner_text("[data-testid=drill-shapes-cover]") == (
        f"the top 8 of 12 input shapes: {top} of 294 calls; {M.OTHER_SHAPES} holds the other 4"
    )
    assert page.query_selector("[data-testid=shape-drill] h4") is None  # nothing opened by itself
    # the remainder row opens like any other: its kernels add up to its device total
    page.click("[data-testid=drill-shapes] tbody tr:nth-child(9)")
    assert page.inner_text("[data-testid=drill-kernels-sum]").startswith(
        f"sum {fmt(rows[-1]['device_total_us'], 'us')} ="
    )
    assert page.errors == []


def test_hints_name_the_setting_only_when_it_was_off(tmp_path: Path, page: Any) -> None:
    """An annotation has no input shapes or stacks whatever the settings; an op says
    record_shapes / with_stack only when the trace shows they were off."""
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile

    model = torch.nn.Linear(16, 8)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_stack=True) as prof:
        for _ in range(2):
            model(torch.randn(4, 16)).sum().backward()
            opt.step()
    prof.export_chrome_trace(str(tmp_path / "t.json"))
    payload = build_payload(torchscope.load(tmp_path / "t.json"), with_timeline=False)
    assert payload["report"]["meta"]["record_shapes"] and payload["report"]["meta"]["with_stack"]
    url = write_html(payload, tmp_path / "t.html").as_uri()
    open_op(page, url, "Optimizer.step#SGD.step")
    assert texts(page, "[data-testid=drill-shapes]") == ["(none: an annotation has no inputs)"]
    assert (
        page.inner_text("[data-testid=drill-stacks]")
        == "none: Python call stacks are kept for ops, not annotations"
    )
    # an op of the same trace: its shapes and stacks, no advice
    open_op(page, url, "aten::addmm")
    assert texts(page, "[data-testid=drill-shapes]") == ["[[8], [4, 16], [16, 8], [], []]"]
    assert "test_hints_name_the_setting_only_when_it_was_off" in page.inner_text("[data-testid=drill-stacks]")
    assert "record_shapes" not in page.inner_text("[data-testid=op-drill]")
    assert page.errors == []


def test_hints_advise_the_settings_a_trace_ran_without(pages: dict[str, dict[str, Any]], page: Any) -> None:
    """rank0_ns_resolution has no input shapes and no Python frames anywhere."""
    report, url = pages[NS]["report"], pages[NS]["url"]
    assert (report["meta"]["record_shapes"], report["meta"]["with_stack"]) == (False, False)
    open_op(page, url, "aten::mm")
    assert texts(page, "[data-testid=drill-shapes]") == ["(not recorded: profile with record_shapes=True)"]
    assert page.inner_text("[data-testid=drill-stacks]") == (
        "none: the trace has no Python stacks (profile with with_stack=True)"
    )
    open_op(page, url, "Optimizer.step#SGD.step")
    assert texts(page, "[data-testid=drill-shapes]") == ["(none: an annotation has no inputs)"]
    assert page.errors == []


def test_hostile_op_names_stay_text_along_the_chain(tmp_path: Path, page: Any) -> None:
    data = Path(__file__).resolve().parents[1] / "data"
    payload = build_payload(torchscope.load(data / "hostile_names.pt.trace.json"), with_timeline=False)
    hostile = next(r for r in payload["report"]["operators"] if "<" in r["name"])
    page.on("dialog", lambda d: d.dismiss())
    page.goto(write_html(payload, tmp_path / "h.html").as_uri())
    page.click("#tabs button[data-view=operators]")
    row = texts(page, "[data-testid=ops-table]").index(hostile["name"])
    page.click(f"[data-testid=ops-table] tbody tr:nth-child({row + 1})")
    assert page.inner_text("[data-testid=op-drill] h3") == hostile["name"]
    assert page.evaluate("() => window.__pwned") is None
    assert page.query_selector("#view script, #view img") is None
    assert page.errors == []


def test_report_tables_label_their_columns_and_say_yes_or_no(
    pages: dict[str, dict[str, Any]], page: Any
) -> None:
    """Kernel types showed "kernel type | us | pct", the Report tab "peak ts" and "dur", and
    "tensor core eligible" true/false where the Kernels table says yes/no."""
    page.goto(pages[RESNET]["url"])
    page.click("#tabs button[data-view=kernels]")
    heads = page.eval_on_selector_all(
        "h3:text-is('Kernel types') + table thead th, h3:text-is('Kernel types') + div table thead th",
        "r => r.map(x => x.textContent.trim())",
    )
    assert heads[:3] == ["kernel type", "time", "share"] or [h.rstrip(" ▲▼") for h in heads[:3]] == [
        "kernel type",
        "time",
        "share",
    ]
    page.click("#tabs button[data-view=report]")
    text = page.inner_text("#view")
    assert "peak ts" not in text and not re.search(r"\bdur\b", text)
    assert "\tduration" in text and "peak time" in text
    cells = page.eval_on_selector_all(
        "[data-section=operators_by_shape] table tbody tr",
        "r => r.map(x => x.cells[[...x.closest('table').tHead.rows[0].cells].findIndex(c => c.textContent.startsWith('tensor core eligible'))].textContent)",
    )
    assert cells and set(cells) <= {"yes", "no"} and "yes" in cells
    assert page.errors == []
