"""The dashboard's Accuracy view shows what accuracy_section hands it (headless Chromium)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from faults import fault
from workloads import build, step

from torchscope.accuracy import compare
from torchscope.accuracy.report import dashboard_payload
from torchscope.render.html import write_html

CHROMIUM = os.environ.get("TORCHSCOPE_CHROMIUM", "/usr/bin/chromium")


@pytest.mark.browser
def test_accuracy_view_names_the_first_divergence(tmp_path: Path) -> None:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"the dashboard tests drive Debian's Chromium at {CHROMIUM} (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    model, x = build("transformer_block", torch.bfloat16)
    with fault("gelu_backward"), compare(model) as result:
        step(model, x)
    page_path = write_html(dashboard_payload(result), tmp_path / "accuracy.html")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(page_path.resolve().as_uri() + "#accuracy")
        card = page.locator("[data-testid=first-divergence]")
        card.wait_for()
        text = card.inner_text()
        browser.close()
    assert errors == []
    assert "aten::gelu_backward" in text and "ff.1" in text and "backward" in text
