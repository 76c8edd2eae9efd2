"""Fixtures for the analysis tests: real traces, each loaded once per session."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

import torchscope
from torchscope.trace.model import Trace, TraceSet


@pytest.fixture(scope="session")
def load(traces_dir: Path) -> Callable[[str], Trace | TraceSet]:
    cache: dict[str, Trace | TraceSet] = {}

    def _load(rel: str) -> Trace | TraceSet:
        if rel not in cache:
            cache[rel] = torchscope.load(traces_dir / rel)
        return cache[rel]

    return _load


@pytest.fixture(scope="session")
def load_trace(load: Callable[[str], Trace | TraceSet]) -> Callable[[str], Trace]:
    def _one(rel: str) -> Trace:
        t = load(rel)
        assert isinstance(t, Trace)
        return t

    return _one
