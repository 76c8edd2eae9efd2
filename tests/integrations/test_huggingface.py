"""Hugging Face Trainer.train with our callback, on CPU with a tiny model built from a config
(no download), and accelerate's accelerator.profile() under redirection."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("transformers")

import torch  # noqa: E402
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments  # noqa: E402

from torchscope.integrations.huggingface import TorchscopeCallback  # noqa: E402


def _dataset(n: int = 48) -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 100, (n, 12), generator=g)
    return [
        {
            "input_ids": ids[i],
            "attention_mask": torch.ones(12, dtype=torch.long),
            "labels": torch.tensor(i % 2),
        }
        for i in range(n)
    ]


def _tiny_bert() -> BertForSequenceClassification:
    config = BertConfig(
        vocab_size=100,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=32,
        num_labels=2,
    )
    torch.manual_seed(0)
    return BertForSequenceClassification(config)


def _args(tmp_path: Path) -> TrainingArguments:
    return TrainingArguments(
        output_dir=str(tmp_path),
        max_steps=8,
        per_device_train_batch_size=4,
        use_cpu=True,
        report_to=[],
        save_strategy="no",
        logging_steps=4,
        disable_tqdm=True,
    )


def test_trainer_train_with_the_callback_writes_traces_dashboard_and_logs(tmp_path: Path) -> None:
    callback = TorchscopeCallback(wait=1, warmup=1, active=3, repeat=1)
    trainer = Trainer(model=_tiny_bert(), args=_args(tmp_path), train_dataset=_dataset())
    trainer.add_callback(callback)
    trainer.train()
    traces = sorted((tmp_path / "torchscope").glob("rank0.*.pt.trace.json"))
    assert len(traces) == 1
    import torchscope

    trace = torchscope.load(traces[0])
    assert trace.steps.height == 3  # steps 2-4 of 8: wait 1, warm up 1, record 3
    names = set(trace.events["name"].cast(str).to_list())
    assert {"aten::addmm", "aten::embedding"} <= names
    assert callback.report_path == tmp_path / "torchscope" / "report.html" and callback.report_path.is_file()
    logged = [e for e in trainer.state.log_history if "torchscope/step_time_ms" in e]
    assert len(logged) == 1 and logged[0]["torchscope/step_time_ms"] > 0 and logged[0]["step"] == 8
    assert logged[0]["torchscope/events"] == trace.events.height
    assert callback.summary is not None and "where the time goes (3 steps" in callback.summary


def test_accelerate_profile_is_ours_after_install(tmp_path: Path) -> None:
    pytest.importorskip("accelerate")
    from accelerate import Accelerator
    from accelerate.utils import ProfileKwargs

    import torchscope
    from torchscope.capture.profiler import profile

    torchscope.install()
    try:
        accelerator = Accelerator(
            cpu=True,
            kwargs_handlers=[ProfileKwargs(activities=["cpu"], output_trace_dir=str(tmp_path / "acc"))],
        )
        model = accelerator.prepare(torch.nn.Linear(8, 8))
        with accelerator.profile() as prof:
            model(torch.randn(4, 8)).sum().backward()
        assert isinstance(prof, profile)
        assert prof.key_averages().table(row_limit=5).count("aten::") >= 1
    finally:
        torchscope.uninstall()
    written = list((tmp_path / "acc").rglob("*.json"))
    assert written and torchscope.load(written[0]).events.height > 0


def test_the_same_callback_added_twice_steps_once_per_optimizer_step(tmp_path: Path) -> None:
    """Trainer calls a callback once per time it was added: the same one added twice stepped
    the profiler twice a step, so every other step was an empty ``ProfilerStep`` of ~50 µs."""
    callback = TorchscopeCallback(wait=1, warmup=1, active=3, repeat=1)
    trainer = Trainer(model=_tiny_bert(), args=_args(tmp_path), train_dataset=_dataset())
    trainer.add_callback(callback)
    trainer.add_callback(callback)  # transformers warns, and keeps both
    trainer.train()
    (path,) = sorted((tmp_path / "torchscope").glob("rank0.*.pt.trace.json"))
    import polars as pl

    import torchscope

    trace = torchscope.load(path)
    assert trace.steps["step"].to_list() == [2, 3, 4]
    opt = trace.events.filter(pl.col("name").cast(pl.String).str.starts_with("Optimizer.step#"))
    for start, dur in trace.steps.select("start_ns", "dur_ns").iter_rows():  # each step is a real one
        assert opt.filter((pl.col("start_ns") >= start) & (pl.col("start_ns") < start + dur)).height == 1
    logged = [e for e in trainer.state.log_history if "torchscope/step_time_ms" in e]
    assert len(logged) == 1


def test_a_train_that_raises_still_writes_its_steps_at_exit(tmp_path: Path) -> None:
    """Trainer calls no callback when ``train()`` raises: the cycle being recorded was lost and
    nothing said so. At exit it is written, with the report, and a warning says why."""
    import subprocess
    import sys
    import textwrap

    script = tmp_path / "fails.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import sys
            sys.path.insert(0, {str(Path(__file__).parent)!r})
            from test_huggingface import _args, _dataset, _tiny_bert
            from transformers import Trainer
            from torchscope.integrations.huggingface import TorchscopeCallback

            class Fails(list):
                calls = 0

                def __getitem__(self, i):
                    Fails.calls += 1
                    if Fails.calls == 21:  # in the 6th batch of 4: step 5, the third recorded one
                        raise ValueError("bad sample")
                    return list.__getitem__(self, i)

            trainer = Trainer(model=_tiny_bert(), args=_args({str(tmp_path)!r}), train_dataset=Fails(_dataset()))
            trainer.add_callback(TorchscopeCallback(wait=1, warmup=1, active=3, repeat=1))
            trainer.train()
            """
        )
    )
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 1 and "ValueError: bad sample" in done.stderr
    assert "Trainer.train ended without on_train_end (it raised?)" in done.stderr
    (path,) = sorted((tmp_path / "torchscope").glob("rank0.*.pt.trace.json"))
    import torchscope

    assert torchscope.load(path).steps.height >= 2
    # the report is whole: built before the thread pools stop at exit (it read "cannot schedule
    # new futures after interpreter shutdown", and the page had no steps)
    assert "cannot schedule new futures" not in done.stderr
    page = (tmp_path / "torchscope" / "report.html").read_text()
    assert "aten::addmm" in page and "cannot schedule new futures" not in page


class _FailsOnce(list):  # type: ignore[type-arg]
    """A dataset whose ``at``-th read raises, once (a notebook's bad batch, then a retry)."""

    def __init__(self, items: list[dict[str, torch.Tensor]], at: int) -> None:
        super().__init__(items)
        self.reads, self.at = 0, at

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:  # type: ignore[override]
        self.reads += 1
        if self.reads == self.at:
            raise ValueError("bad sample")
        return list.__getitem__(self, i)


def test_a_caught_error_then_a_retry_writes_the_first_cycle_and_records_the_retry(tmp_path: Path) -> None:
    """A train() that raised, caught, kept recording: its open step swallowed the whole retry
    (one ProfilerStep of 33 optimizer steps), and the retry's callback stayed off."""
    import torchscope

    callback = TorchscopeCallback(wait=0, warmup=0, active=4, repeat=1)
    trainer = Trainer(model=_tiny_bert(), args=_args(tmp_path), train_dataset=_FailsOnce(_dataset(), at=10))
    trainer.add_callback(callback)
    with pytest.raises(ValueError, match="bad sample"):
        trainer.train()
    first = sorted((tmp_path / "torchscope").glob("rank0.*.pt.trace.json"))
    assert first == [] and callback.report_path is None  # still recording, as Trainer said nothing
    trainer.train()  # the retry: the first train's steps are written as it begins
    traces = sorted((tmp_path / "torchscope").glob("rank0.*.pt.trace.json"), key=lambda f: f.stat().st_mtime)
    assert len(traces) == 2
    cut, retry = (torchscope.load(f) for f in traces)
    assert cut.steps.height == 2  # step 0 whole, step 1 the error cut (its trace says so)
    assert cut.meta.extra.get("torchscope_cycle_ended_by") == "error"
    assert retry.steps.height == 4
    assert callback.report_path is not None and callback.headline is not None
    # the retry's report is the retry's alone: its events, not the failed run's too
    assert callback.headline["events"] == retry.events.height


def test_an_output_dir_it_cannot_write_leaves_the_training_alone(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """output_dir/torchscope a file: the callback's first cycle raised from on_step_end and the
    training died at step 5."""
    (tmp_path / "torchscope").write_text("not a folder")
    callback = TorchscopeCallback()
    trainer = Trainer(model=_tiny_bert(), args=_args(tmp_path), train_dataset=_dataset())
    trainer.add_callback(callback)
    with caplog.at_level("WARNING", logger="transformers.trainer"):
        trainer.train()
    assert trainer.state.global_step == 8 and callback.report_path is None
    said = [r.getMessage() for r in caplog.records if "torchscope" in r.getMessage()]
    assert said == [
        f"torchscope: cannot write traces to {tmp_path / 'torchscope'} ({tmp_path / 'torchscope'} is a file); profiling is off"
    ]


def test_a_second_run_into_the_same_output_dir_reports_itself_alone(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Three runs with one output_dir logged torchscope/events 5814, 11628, 17442: each report
    read every earlier run's traces too, without a word."""
    logged = []
    for _ in range(2):
        trainer = Trainer(model=_tiny_bert(), args=_args(tmp_path), train_dataset=_dataset())
        callback = TorchscopeCallback()
        trainer.add_callback(callback)
        with caplog.at_level("WARNING", logger="transformers.trainer"):
            trainer.train()
        (entry,) = [e for e in trainer.state.log_history if "torchscope/events" in e]
        logged.append(entry["torchscope/events"])
    traces = sorted((tmp_path / "torchscope").glob("rank0.*.pt.trace.json"), key=lambda f: f.stat().st_mtime)
    import torchscope

    assert logged == [torchscope.load(f).events.height for f in traces]
    assert any("left out 1 older trace in" in r.getMessage() for r in caplog.records)


def test_a_run_that_ends_before_a_recorded_step_logs_no_step_time(tmp_path: Path) -> None:
    """max_steps=2 under wait=1, warmup=1: the trace is only the profile's exit, and its 0.5 ms
    went into log_history as torchscope/step_time_ms."""
    args = _args(tmp_path)
    args.max_steps = 2
    trainer = Trainer(model=_tiny_bert(), args=args, train_dataset=_dataset())
    trainer.add_callback(TorchscopeCallback())
    trainer.train()
    (entry,) = [e for e in trainer.state.log_history if "torchscope/events" in e]
    assert entry["torchscope/step_time_ms"] is None and entry["torchscope/events"] > 0
