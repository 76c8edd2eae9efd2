"""Shared fixtures: where the real traces live.

The suite reads real Kineto traces recorded on GPUs and accelerators by other projects (this
machine has none): the folder ``shared/traces`` beside the checkout, i.e. ``../shared/traces``
from the repository root (README, "Running the tests"). Without it the suite stops at once with
one message saying so, rather than failing in a hundred tests or skipping the trace tests
silently (their parameter lists would be empty).
"""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TRACES = REPO.parent / "shared" / "traces"

MISSING = (
    f"the real traces are missing: the suite reads them from {TRACES} (a folder 'shared/traces' beside "
    "the checkout, holding the files the README's 'Running the tests' lists, from "
    "HolisticTraceAnalysis' tests/data or kineto's tb_plugin/samples); put them there and run again"
)


def pytest_sessionstart(session: pytest.Session) -> None:
    if not TRACES.is_dir() or not any(TRACES.rglob("*.json*")):
        raise pytest.UsageError(MISSING)


@pytest.fixture(scope="session")
def traces_dir() -> Path:
    return TRACES
