"""The load progress bar shows only on slow loads, and only where someone can see it."""

from __future__ import annotations

import time

import pytest

from torchscope.trace import progress


def test_bar_appears_only_after_the_delay(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(progress, "DELAY_S", 30.0)  # far beyond any pause of a busy machine
    with progress.LoadProgress("big.json", enabled=True) as quick:
        pass
    assert not quick.shown
    monkeypatch.setattr(progress, "DELAY_S", 0.05)
    with progress.LoadProgress("big.json", total=3, enabled=True) as slow:
        deadline = time.monotonic() + 20  # the timer thread imports rich: slow on a busy machine
        while not slow.shown and time.monotonic() < deadline:
            time.sleep(0.05)
        slow.phase("decode")
        slow.advance("rank1.json")
        assert slow.shown
        assert slow._description() == "big.json: rank1.json"


def test_no_bar_when_stderr_is_not_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(progress, "DELAY_S", 0.0)
    monkeypatch.setattr("sys.stderr.isatty", lambda: False, raising=False)
    with progress.LoadProgress("x.json") as bar:
        time.sleep(0.05)
    assert not bar.enabled and not bar.shown
