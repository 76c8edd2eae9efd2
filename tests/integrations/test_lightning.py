"""Lightning's Trainer with our profiler, on CPU with a tiny local model."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("lightning")

import torch  # noqa: E402
from lightning.pytorch import LightningModule, Trainer  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

from torchscope.integrations.lightning import TorchscopeProfiler  # noqa: E402


class TinyRegressor(LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def _loader() -> DataLoader:
    g = torch.Generator().manual_seed(0)
    return DataLoader(
        TensorDataset(torch.randn(64, 16, generator=g), torch.randn(64, 1, generator=g)), batch_size=8
    )


def _trainer(tmp_path: Path, profiler: object, max_steps: int = 8) -> Trainer:
    return Trainer(
        default_root_dir=str(tmp_path),
        max_steps=max_steps,
        accelerator="cpu",
        devices=1,
        profiler=profiler,  # type: ignore[arg-type]
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )


def test_trainer_fit_with_our_profiler_writes_rank_traces_and_prints_our_report(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    profiler = TorchscopeProfiler(wait=1, warmup=1, active=3, repeat=1)
    with caplog.at_level("INFO"):
        _trainer(tmp_path, profiler).fit(TinyRegressor(), _loader())
    traces = sorted((tmp_path / "torchscope").glob("rank0.*.pt.trace.json"))
    assert len(traces) == 1  # one cycle: wait 1, warm up 1, record 3 training steps
    import torchscope

    trace = torchscope.load(traces[0])
    assert trace.steps.height == 3
    names = set(trace.events["name"].cast(str).to_list())
    assert {"aten::addmm", "aten::mse_loss"} <= names
    assert profiler.report_path == tmp_path / "torchscope" / "report.html" and profiler.report_path.is_file()
    text = caplog.text
    assert "where the time goes (3 steps" in text and "top ops (by host time)" in text  # our summary
    assert f"dashboard: {profiler.report_path}" in text


def test_each_step_holds_one_whole_batch_and_the_closure_is_not_optimizer_time(tmp_path: Path) -> None:
    """Lightning runs ``training_step`` and backward inside ``optimizer.step(closure)``. Steps were
    marked where ``training_step`` ends, inside that optimizer step: each held one batch's
    backward and update and the next one's forward. Now each step holds one optimizer step
    whole, and the breakdown counts its closure as Operators, not Optimizer."""
    import polars as pl

    import torchscope
    from torchscope.analysis.overview import overview

    profiler = TorchscopeProfiler(wait=1, warmup=1, active=3, repeat=1)
    _trainer(tmp_path, profiler).fit(TinyRegressor(), _loader())
    (path,) = sorted((tmp_path / "torchscope").glob("rank0.*.pt.trace.json"))
    trace = torchscope.load(path)
    ev = trace.events.with_columns(pl.col("name").cast(pl.String))
    opt = ev.filter(pl.col("name") == "Optimizer.step#SGD.step")
    for start, dur in trace.steps.select("start_ns", "dur_ns").iter_rows():
        inside = opt.filter((pl.col("start_ns") >= start) & (pl.col("start_ns") + pl.col("dur_ns") <= start + dur))
        crossing = opt.filter((pl.col("start_ns") < start + dur) & (pl.col("start_ns") + pl.col("dur_ns") > start))
        assert inside.height == crossing.height == 1  # one optimizer step, whole, in each step
    # the closure's forward and backward (from the first op autograd records to the end of the
    # last backward node) are not Optimizer time: at most the rest of each optimizer step is
    rest = []
    for start, dur in opt.select("start_ns", "dur_ns").iter_rows():
        inside = ev.filter((pl.col("start_ns") >= start) & (pl.col("start_ns") < start + dur) & (pl.col("kind") == "cpu_op"))
        backward = inside.filter(pl.col("name").str.starts_with("autograd::engine::evaluate_function: "))
        first_forward = int(inside.filter(pl.col("seq") >= 0)["start_ns"].min())
        rest.append(dur - (int((backward["start_ns"] + backward["dur_ns"]).max()) - first_forward))
    zero_grad = ev.filter(pl.col("name").str.starts_with("Optimizer.zero_grad"))["dur_ns"].sum()
    hb = overview(trace).host_breakdown_ns
    assert hb["Optimizer"] <= (sum(rest) + zero_grad) / trace.steps.height + 1


class FailsAtBatch3(TinyRegressor):
    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        if batch_idx == 3:
            raise RuntimeError("bad batch")
        return super().training_step(batch, batch_idx)


def test_a_fit_that_raises_keeps_the_steps_recorded_and_reports_them(tmp_path: Path) -> None:
    """Lightning neither describes nor tears down its profiler when ``fit`` raises: the cycle
    being recorded was lost, no report was written, and at exit the profiler was stopped from
    ``__del__`` after torch was gone (``KeyError: 'torch'``)."""
    profiler = TorchscopeProfiler(wait=1, warmup=1, active=3, repeat=1)
    said = r"(?s)fit raised RuntimeError in training batch 3; the steps recorded before it:\n.*where the time goes \(1 step"
    with pytest.warns(UserWarning, match=said), pytest.raises(RuntimeError, match="bad batch"):
        _trainer(tmp_path, profiler).fit(FailsAtBatch3(), _loader())
    (path,) = sorted((tmp_path / "torchscope").glob("rank0.*.pt.trace.json"))
    import torchscope

    # batch 2 was recorded whole (batch 1 warmed up), and batch 3 up to where it raised (the
    # profile's exit, which the report leaves out of the step times and says so)
    assert torchscope.load(path).steps["step"].to_list() == [2, 3]
    assert profiler.payload is not None
    assert '"torchscope_cycle_ended_by": "error"' in path.read_text()  # the error cut that step
    assert profiler.report_path == tmp_path / "torchscope" / "report.html" and profiler.report_path.is_file()
    profiler.teardown(None)  # what Lightning's __del__ does later: nothing left to stop


def test_trainer_profiler_pytorch_is_ours_after_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``Trainer(profiler="pytorch")`` unchanged: after torchscope.install() its torch.profiler is
    ours, and its own trace file is written where Lightning writes it."""
    import torchscope
    from torchscope.capture.profiler import profile

    made: list[profile] = []
    original_init = profile.__init__

    def spy(self: profile, *args: object, **kwargs: object) -> None:
        made.append(self)
        original_init(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(profile, "__init__", spy)
    torchscope.install()
    try:
        _trainer(tmp_path, "pytorch").fit(TinyRegressor(), _loader())
    finally:
        torchscope.uninstall()
    assert made and all(type(p).__module__.startswith("torchscope.") for p in made)
    written = list(tmp_path.rglob("*.pt.trace.json")) + list(tmp_path.rglob("*_trace.json"))
    assert written, "Lightning's PyTorchProfiler wrote no trace"
    assert torchscope.load(written[0]).events.height > 0


def test_trainer_profiler_pytorch_under_torchscope_run(tmp_path: Path) -> None:
    """``torchscope run`` on a script with ``Trainer(profiler="pytorch")``: Lightning switches off
    any running profiler with ``torch.autograd._disable_profiler()`` before starting its own,
    which pulled Kineto's session from under ours (a segmentation fault, 139). Now the run steps
    aside cleanly, Lightning's own files appear, and its cycles are in our report."""
    import json
    import subprocess
    import sys

    out, logs = tmp_path / "run", tmp_path / "logs"
    script = Path(__file__).parent / "scripts" / "lightning_train.py"
    done = subprocess.run(
        [sys.executable, "-m", "torchscope", "run", "--out", str(out), str(script), str(logs), "pytorch", "1"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "rank 0 fit done" in done.stdout
    own = list(logs.glob("fit-*training_step*.pt.trace.json"))
    assert own  # Lightning's files, where Lightning writes them
    report = json.loads((out / "report.json").read_text())
    copies = [r for r in report["runs"] if r["name"].startswith("script_profiler1.cycle")]
    assert copies and all(report["report"]["ranks"][r["name"]]["meta"]["events"] > 0 for r in copies)
    assert any("stepped aside" in n for n in report["run"]["notes"])


def test_ddp_on_cpu_writes_a_trace_per_rank_and_rank_zero_reports_the_job(tmp_path: Path) -> None:
    """Two DDP processes (gloo on CPU): one trace per rank under the log dir, read as a job."""
    import os
    import subprocess
    import sys

    import torchscope

    script = Path(__file__).parent / "scripts" / "lightning_train.py"
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path), "torchscope", "2"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={**os.environ, "GLOO_SOCKET_IFNAME": "lo"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "rank 0 fit done" in done.stdout and "rank 1 fit done" in done.stdout
    out = tmp_path / "torchscope"
    for rank in (0, 1):
        assert len(list(out.glob(f"rank{rank}.*.pt.trace.json"))) == 1
    job = torchscope.load(out)
    assert list(job) == ["rank0", "rank1"] and all(t.steps.height == 3 for t in job.values())
    assert (out / "report.html").is_file()
    # rank 0 prints the job's summary, as `torchscope report DIR` does: both ranks, the collectives
    printed = done.stdout + done.stderr
    assert "== torchscope: 2 ranks, 1 cycle, gloo" in printed
    assert "collectives (matched across ranks by order in their group):" in printed


def test_a_folder_it_cannot_write_leaves_the_fit_alone(tmp_path: Path) -> None:
    """``dirpath`` under a file: the first recorded cycle raised from the profiler's step and
    killed the fit."""
    (tmp_path / "afile").write_text("")
    profiler = TorchscopeProfiler(dirpath=tmp_path / "afile" / "ts")
    trainer = _trainer(tmp_path, profiler)
    with pytest.warns(UserWarning, match=r"cannot write traces to .*afile is a file\); profiling is off"):
        trainer.fit(TinyRegressor(), _loader())
    assert trainer.global_step == 8 and profiler.report_path is None


def test_a_second_fit_into_the_same_folder_reports_itself_alone(tmp_path: Path) -> None:
    """With ``logger=False`` every fit writes to one folder: the second fit's report read "1
    rank, 2 cycles", the first fit's cycle among them, without a word."""
    for n in range(2):
        profiler = TorchscopeProfiler(dirpath=tmp_path)
        trainer = _trainer(tmp_path, profiler)
        if n == 0:
            trainer.fit(TinyRegressor(), _loader())
        else:
            with pytest.warns(UserWarning, match="left out 1 older trace in"):
                trainer.fit(TinyRegressor(), _loader())
    assert len(list((tmp_path / "torchscope").glob("rank0.*.pt.trace.json"))) == 2
    report = profiler.payload["report"]  # type: ignore[index]
    assert report["kind"] == "trace"  # this fit's one cycle, not a job of both fits


class WithValidation(TinyRegressor):
    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)


def test_validation_between_two_batches_is_in_no_step(tmp_path: Path) -> None:
    """A step ran from one batch's end to the next one's: the validation after an epoch's last
    batch was inside the next training step (120 ms among steps of 2 ms, and "Python outside
    ops 87 %"). Each step now holds its batch's fetch and its optimizer step, nothing else."""
    import polars as pl

    import torchscope

    profiler = TorchscopeProfiler(wait=6, warmup=0, active=4, repeat=1)  # steps 6-9: epoch 0 ends at 7
    trainer = _trainer(tmp_path, profiler, max_steps=12)
    trainer.fit(WithValidation(), _loader(), _loader())
    (path,) = sorted((tmp_path / "torchscope").glob("rank0.*.pt.trace.json"))
    trace = torchscope.load(path)
    assert trace.steps["step"].to_list() == [6, 7, 8, 9]
    ev = trace.events.with_columns(pl.col("name").cast(pl.String))
    losses = ev.filter(pl.col("name") == "aten::mse_loss")
    fetches = ev.filter(pl.col("name").str.starts_with("enumerate(DataLoader)"))
    opt = ev.filter(pl.col("name") == "Optimizer.step#SGD.step")
    for start, dur in trace.steps.select("start_ns", "dur_ns").iter_rows():
        within = (pl.col("start_ns") >= start) & (pl.col("start_ns") < start + dur)
        counts = tuple(f.filter(within).height for f in (losses, fetches, opt))
        assert counts == (1, 1, 1)  # its batch alone
    assert losses.height == 4 + 8  # and the 8 validation batches, outside every step
    assert trace.meta.extra.get("torchscope_cycle_ended_by") == "schedule"  # the last step is whole


def test_a_profiler_reused_for_a_second_fit_records_it_and_validate_prints_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The second fit of a reused profiler was not recorded, and printed the first fit's summary
    again, as did a ``validate()`` after the fit."""
    import logging

    profiler = TorchscopeProfiler(dirpath=tmp_path)
    with caplog.at_level(logging.INFO):
        trainer = _trainer(tmp_path, profiler)
        trainer.fit(WithValidation(), _loader())
        first = profiler.payload
        trainer.validate(trainer.lightning_module, _loader())
        assert caplog.text.count("where the time goes") == 1  # validate printed nothing
        with pytest.warns(UserWarning, match="left out 1 older trace"):
            _trainer(tmp_path, profiler).fit(TinyRegressor(), _loader())
    assert caplog.text.count("where the time goes") == 2
    assert len(list((tmp_path / "torchscope").glob("rank0.*.pt.trace.json"))) == 2
    assert profiler.payload is not first and profiler.payload["report"]["kind"] == "trace"  # type: ignore[index]
