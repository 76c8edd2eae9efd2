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
