"""Headless Chromium (Debian's, driven by Playwright) for the dashboard tests."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = os.environ.get("TORCHSCOPE_CHROMIUM", "/usr/bin/chromium")
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"the dashboard tests drive Debian's Chromium at {CHROMIUM} (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


@pytest.fixture()
def page(browser: Any) -> Iterator[Any]:
    # bypass_csp: the page CSP forbids eval, which Playwright needs for wait_for_function; the
    # escaping tests therefore prove that escaping alone keeps hostile names inert.
    context = browser.new_context(
        viewport={"width": 1400, "height": 900}, accept_downloads=True, bypass_csp=True
    )
    pg = context.new_page()
    pg.errors = []  # console errors and uncaught exceptions, checked by the tests
    pg.on("console", lambda m: pg.errors.append(m.text) if m.type == "error" else None)
    pg.on("pageerror", lambda e: pg.errors.append(str(e)))
    yield pg
    context.close()
