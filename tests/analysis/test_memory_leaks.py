"""Possible leaks are memory never freed by the end of the trace that grows step after step: a
steady per-step allocate/free pattern, and the last step's tensors still alive when the
profiler stops, are not leaks (issue 15); a list that gains a tensor every step is."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import torchscope
from torchscope.analysis.memory import leak_candidates, memory_timeline, outstanding_allocations
from torchscope.trace.model import Trace

torch = pytest.importorskip("torch")
from torch.profiler import ProfilerActivity, profile, schedule  # noqa: E402


def _train(path: Path, grow: bool) -> Trace:
    """Six profiled steps (one warm-up) of a small MLP with Adam; ``grow`` keeps one more
    100,000-float tensor each step."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    kept: list[Any] = []
    with profile(
        activities=[ProfilerActivity.CPU],
        profile_memory=True,
        schedule=schedule(wait=0, warmup=1, active=5, repeat=1),
        on_trace_ready=lambda p: p.export_chrome_trace(str(path)),
    ) as prof:
        for i in range(7):
            x = torch.randn(64, 256)
            loss = model(x).square().mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            if grow:
                kept.append(torch.empty(1000, 100).fill_(i))
            prof.step()
    t = torchscope.load(path)
    assert isinstance(t, Trace)
    return t


def test_a_steady_training_loop_has_no_leaks(tmp_path: Path) -> None:
    t = _train(tmp_path / "steady.json", grow=False)
    assert leak_candidates(t).height == 0
    # what is outstanding at the end is the last step's input and loss, still referenced
    out = outstanding_allocations(t)
    assert sorted(out["bytes"].to_list()) == [4, 64 * 256 * 4]
    assert set(out["op_name"]) == {"aten::mean", "aten::empty"}  # randn allocates through empty
    # memory returns to the same level at the start of every step
    assert memory_timeline(t)["allocated_bytes"].min() >= 0


def test_a_growing_list_is_named_with_its_op(tmp_path: Path) -> None:
    leaks = leak_candidates(_train(tmp_path / "grow.json", grow=True))
    assert leaks.height == 5  # one per profiled step
    assert set(leaks["bytes"]) == {1000 * 100 * 4} and set(leaks["op_name"]) == {"aten::empty"}


def _memory(ts: float, addr: int, nbytes: int, total: int) -> dict[str, Any]:
    args = {
        "Device Type": 0,
        "Device Id": -1,
        "Addr": addr,
        "Bytes": nbytes,
        "Total Allocated": total,
        "Total Reserved": 0,
    }
    return {
        "ph": "i",
        "s": "t",
        "cat": "cpu_instant_event",
        "name": "[memory]",
        "pid": 1,
        "tid": 1,
        "ts": ts,
        "args": args,
    }


def test_a_block_freed_and_reallocated_in_one_microsecond_is_not_a_leak(tmp_path: Path) -> None:
    """Microsecond traces give a free and the next allocation of the same block one timestamp;
    the recorded order decides, and a reused address proves the free."""
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::empty", "pid": 1, "tid": 1, "ts": 0.0, "dur": 10.0},
        _memory(1.0, 0x1000, 512, 512),
        _memory(2.0, 0x1000, -512, 0),
        _memory(2.0, 0x1000, 512, 512),
        _memory(3.0, 0x1000, -512, 0),
        _memory(4.0, 0x2000, 256, 256),  # allocated, then the address reused without a recorded free
        _memory(5.0, 0x2000, 256, 512),
        _memory(6.0, 0x2000, -256, 256),
    ]
    path = tmp_path / "reuse.json"
    path.write_text(json.dumps({"traceEvents": events}))
    t = torchscope.load(path)
    assert isinstance(t, Trace)
    assert outstanding_allocations(t).height == 0 and leak_candidates(t).height == 0
