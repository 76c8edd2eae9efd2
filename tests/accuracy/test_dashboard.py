"""The dashboard's Accuracy view shows what accuracy_section hands it (headless Chromium)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from faults import fault
from workloads import build, step

from torchscope.accuracy import AccuracyResult, compare
from torchscope.accuracy.report import dashboard_payload
from torchscope.render.html import write_html

CHROMIUM = os.environ.get("TORCHSCOPE_CHROMIUM", "/usr/bin/chromium")


def _open_accuracy_view(result: AccuracyResult, tmp_path: Path, card: str) -> tuple[str, list[str]]:
    """The text of the card ``card`` (a data-testid) and the section headings, after asserting
    that the page raised no error."""
    if not Path(CHROMIUM).exists():
        pytest.fail(f"the dashboard tests drive Debian's Chromium at {CHROMIUM} (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    page_path = write_html(dashboard_payload(result), tmp_path / "accuracy.html")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(page_path.resolve().as_uri() + "#accuracy")
        located = page.locator(f"[data-testid={card}]")
        located.wait_for()
        text = located.inner_text()
        headings = page.locator("h3").all_inner_texts()
        browser.close()
    assert errors == []
    return text, headings


@pytest.mark.browser
def test_accuracy_view_names_the_first_divergence(tmp_path: Path) -> None:
    model, x = build("transformer_block", torch.bfloat16)
    with fault("gelu_backward"), compare(model) as result:
        step(model, x)
    text, _ = _open_accuracy_view(result, tmp_path, "first-divergence")
    assert "aten::gelu_backward" in text and "ff.1" in text and "backward" in text


@pytest.mark.browser
def test_accuracy_view_names_the_first_divergent_module(tmp_path: Path) -> None:
    from torchscope.accuracy import compare_dumps, dump

    for name, dtype in (("target", torch.bfloat16), ("reference", torch.float64)):
        model, x = build("transformer_block", dtype)
        with fault("gelu_backward"), dump(tmp_path / name, model, level="module"):
            step(model, x)
    result = compare_dumps(tmp_path / "target", tmp_path / "reference")
    text, headings = _open_accuracy_view(result, tmp_path, "first-module-divergence")
    assert "First divergent module" in text and "nn.GELU" in text and "ff.1" in text and "backward" in text
    assert "Per module call" in headings
