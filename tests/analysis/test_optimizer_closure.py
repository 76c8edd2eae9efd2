"""An optimizer step that runs its closure (Lightning's ``optimizer.step(closure)``, LBFGS): the
forward and backward inside it are not Optimizer time in the host breakdown."""

from __future__ import annotations

from collections.abc import Callable
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


def _record(path: Path, model: nn.Module, make_optimizer: Callable[..., torch.optim.Optimizer], batch: int) -> Trace:
    """``ACTIVE`` recorded steps (after one warm-up) of ``optimizer.step(closure)``, with the
    forward and backward in the closure, as Lightning's automatic optimization runs a step."""
    opt = make_optimizer(model.parameters())
    width = next(model.parameters()).shape[1]
    x, y = torch.randn(batch, width), torch.randn(batch, 1)

    def closure() -> torch.Tensor:
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
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 1))
    # a batch of 256 makes the forward and backward ~18x the SGD update on a quiet machine (64
    # made them ~6x, and a busy one running the suite on both cores once brought that under 2x)
    trace = _record(tmp_path / "closure.pt.trace.json", model, lambda p: torch.optim.SGD(p, lr=0.01), 256)
    hb = overview(trace).host_breakdown_ns
    ev = trace.events.with_columns(pl.col("name").cast(pl.String))
    steps = ev.filter(pl.col("name") == "Optimizer.step#SGD.step")
    assert steps.height == ACTIVE
    backward = ev.filter(pl.col("name").str.starts_with("autograd::engine::evaluate_function: "))
    # the Optimizer category is each step's time outside its closure call: from the first op
    # autograd records (the forward's) to the end of the last backward node
    optimizer = []
    for start, dur in steps.select("start_ns", "dur_ns").iter_rows():
        inside = ev.filter((pl.col("start_ns") >= start) & (pl.col("start_ns") < start + dur))
        backward = inside.filter(pl.col("name").str.starts_with("autograd::engine::evaluate_function: "))
        assert backward.height > 0  # the closure's backward ran inside the step
        first_forward = int(inside.filter((pl.col("kind") == "cpu_op") & (pl.col("seq") >= 0))["start_ns"].min())
        last_backward = int((backward["start_ns"] + backward["dur_ns"]).max())
        optimizer.append(dur - (last_backward - first_forward))
    assert abs(hb["Optimizer"] - np.mean(optimizer)) <= 1  # ns, the mean over the steps
    # the forward and backward, most of each step, are Operators now (they were Optimizer)
    assert hb["Operators"] > 2 * hb["Optimizer"]
    assert hb["Optimizer"] < 0.5 * np.mean(steps["dur_ns"].to_numpy())


def test_lbfgs_math_between_its_closure_calls_stays_optimizer_time(tmp_path: Path) -> None:
    """LBFGS calls its closure several times a step and does its own math (``dot``, ``add_``,
    without grad) between the calls: that math is Optimizer, the calls' forward and backward
    are not (counting from the last backward node on made LBFGS's math Operators)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 1))
    trace = _record(tmp_path / "lbfgs.pt.trace.json", model, lambda p: torch.optim.LBFGS(p, max_iter=5), 32)
    hb = overview(trace).host_breakdown_ns
    ev = trace.events.with_columns(pl.col("name").cast(pl.String))
    # the optimizer's own ops at the top of its step (their children are theirs): no grad, so no
    # sequence number
    step_ids = ev.filter(pl.col("name") == "Optimizer.step#LBFGS.step")["id"]
    own = ev.filter(pl.col("parent").is_in(step_ids.implode()) & (pl.col("kind") == "cpu_op") & pl.col("seq").is_null())
    assert own.filter(pl.col("name") == "aten::dot").height > 0
    assert hb["Optimizer"] >= own["dur_ns"].sum() / ACTIVE
    # and each closure call's forward and backward is not Optimizer
    closure_ops = ev.filter(pl.col("name").is_in(["aten::linear", "aten::mse_loss"]))
    assert hb["Operators"] >= closure_ops["dur_ns"].sum() / ACTIVE
