"""An optimizer step that runs its closure (Lightning's ``optimizer.step(closure)``, LBFGS): the
forward and backward inside it are not Optimizer time in the host breakdown."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import torch
from torch import nn

from torchscope import ProfilerActivity, profile, schedule
from torchscope.analysis.overview import overview
from torchscope.trace.loader import load
from torchscope.trace.model import Trace

ACTIVE = 3


def _record(path: Path) -> Trace:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(64, 256), torch.randn(64, 1)

    def closure() -> torch.Tensor:  # as Lightning's automatic optimization runs a step
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        return loss

    with profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=0, warmup=1, active=ACTIVE),
        on_trace_ready=lambda p: p.export_chrome_trace(str(path)),
    ) as prof:
        for _ in range(1 + ACTIVE):
            opt.step(closure)
            prof.step()
    return load(path)  # type: ignore[return-value]


def test_the_closure_inside_an_optimizer_step_is_not_optimizer_time(tmp_path: Path) -> None:
    trace = _record(tmp_path / "closure.pt.trace.json")
    hb = overview(trace).host_breakdown_ns
    ev = trace.events.with_columns(pl.col("name").cast(pl.String))
    steps = ev.filter(pl.col("name") == "Optimizer.step#SGD.step")
    assert steps.height == ACTIVE
    backward = ev.filter(pl.col("name").str.starts_with("autograd::engine::evaluate_function: "))
    zero_grad = ev.filter(pl.col("name") == "Optimizer.zero_grad#SGD.zero_grad")
    # the Optimizer category is each step's time after its last backward node (the update),
    # and the closure's zero_grad, an optimizer's annotation of its own
    optimizer = []
    for start, dur in steps.select("start_ns", "dur_ns").iter_rows():
        inside = backward.filter((pl.col("start_ns") >= start) & (pl.col("start_ns") < start + dur))
        assert inside.height > 0  # the closure's backward ran inside the step
        zeroing = zero_grad.filter((pl.col("start_ns") >= start) & (pl.col("start_ns") < start + dur))
        assert zeroing.height == 1
        optimizer.append(start + dur - int((inside["start_ns"] + inside["dur_ns"]).max()) + zeroing["dur_ns"][0])
    assert abs(hb["Optimizer"] - np.mean(optimizer)) <= 1  # ns, the mean over the steps
    # the forward and backward, most of each step, are Operators now (they were Optimizer)
    assert hb["Operators"] > 2 * hb["Optimizer"]
    assert hb["Optimizer"] < 0.5 * np.mean(steps["dur_ns"].to_numpy())
