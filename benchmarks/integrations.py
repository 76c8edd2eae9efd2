"""Benchmark: the time from the end of profiling to the printed summary, ours vs each framework's
stock profiler, on the same run (CPU, tiny local models, the same schedule: wait 1, warmup 1,
active ACTIVE training steps).

  lightning    Trainer(profiler=PyTorchProfiler(schedule=...)) vs Trainer(profiler=TorchscopeProfiler(...)):
               the time of Lightning's profiler.describe() (stops the profiler, prints the summary)
  huggingface  the recipe of the transformers docs (a TrainerCallback around torch.profiler, printing
               key_averages().table() at the end) vs TorchscopeCallback: on_train_end
  mmengine     ProfilerHook(on_trace_ready=dict(type="log_trace"), json_trace_path=...) vs
               TorchscopeProfilerHook (same arguments): all the time in the hook's after_train_iter
               and after_train_epoch (profiler steps, the cycle's stop, the table, the export)
  notebook     torch.profiler.profile + print(key_averages().table()) vs what %%torchscope shows
               (summary_html of the profiler), after the same cell

Each variant runs in its own process. Run:
  .venv/bin/python benchmarks/integrations.py [--active N] [--repeat N] [framework ...]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SCHEDULE = {"wait": 1, "warmup": 1, "repeat": 1}


def _timed(obj: Any, name: str, sink: list[float]) -> None:
    """Wrap ``obj.name`` so that each call's wall time is appended to ``sink``."""
    original = getattr(obj, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            sink.append(time.perf_counter() - t0)

    setattr(obj, name, wrapper)


def lightning(variant: str, active: int, out: Path) -> float:
    import torch
    from lightning.pytorch import LightningModule, Trainer
    from torch.utils.data import DataLoader, TensorDataset

    class Model(LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Sequential(*[torch.nn.Linear(128, 128) for _ in range(8)])

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            return self.net(batch[0]).pow(2).mean()

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.01)

    if variant == "stock":
        from lightning.pytorch.profilers import PyTorchProfiler

        profiler: Any = PyTorchProfiler(
            dirpath=str(out), schedule=torch.profiler.schedule(active=active, **SCHEDULE)
        )
    else:
        from torchscope.integrations.lightning import TorchscopeProfiler

        profiler = TorchscopeProfiler(dirpath=str(out), active=active, **SCHEDULE)
    times: list[float] = []
    _timed(profiler, "describe", times)
    data = DataLoader(TensorDataset(torch.randn(512, 128)), batch_size=16)
    trainer = Trainer(
        default_root_dir=str(out),
        max_steps=active + 4,
        accelerator="cpu",
        devices=1,
        profiler=profiler,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(Model(), data)
    return sum(times)


def _tiny_bert() -> Any:
    import torch
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(0)
    return BertForSequenceClassification(
        BertConfig(
            vocab_size=500,
            hidden_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=128,
            max_position_embeddings=64,
            num_labels=2,
        )
    )


def huggingface(variant: str, active: int, out: Path) -> float:
    import torch
    from transformers import Trainer, TrainerCallback, TrainingArguments

    class StockCallback(TrainerCallback):  # the transformers docs' torch.profiler recipe
        def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            self.prof = torch.profiler.profile(
                schedule=torch.profiler.schedule(active=active, **SCHEDULE),
                on_trace_ready=torch.profiler.tensorboard_trace_handler(str(out / "tb")),
                record_shapes=True,
            )
            self.prof.start()

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            self.prof.step()

        def on_train_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            self.prof.stop()
            print(self.prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=10))

    if variant == "stock":
        callback: Any = StockCallback()
    else:
        from torchscope.integrations.huggingface import TorchscopeCallback

        callback = TorchscopeCallback(active=active, **SCHEDULE)
    times: list[float] = []
    _timed(callback, "on_train_end", times)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 500, (256, 32), generator=g)
    data = [
        {
            "input_ids": ids[i],
            "attention_mask": torch.ones(32, dtype=torch.long),
            "labels": torch.tensor(i % 2),
        }
        for i in range(256)
    ]
    args = TrainingArguments(
        output_dir=str(out),
        max_steps=active + 4,
        per_device_train_batch_size=8,
        use_cpu=True,
        report_to=[],
        save_strategy="no",
        disable_tqdm=True,
        logging_steps=1000,
    )
    trainer = Trainer(model=_tiny_bert(), args=args, train_dataset=data, callbacks=[callback])
    trainer.train()
    return sum(times)


def mmengine(variant: str, active: int, out: Path) -> float:
    import torch
    from mmengine.config import Config
    from mmengine.model import BaseModel
    from mmengine.registry import DATASETS, MODELS
    from mmengine.runner import Runner

    @MODELS.register_module(force=True)
    class BenchModel(BaseModel):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Sequential(*[torch.nn.Linear(128, 128) for _ in range(8)])

        def forward(self, x: torch.Tensor, mode: str = "tensor") -> Any:
            y = self.net(x)
            return {"loss": y.pow(2).mean()} if mode == "loss" else y

    @DATASETS.register_module(force=True)
    class BenchData(torch.utils.data.Dataset):  # type: ignore[misc]
        def __len__(self) -> int:
            return 512

        def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
            return {"x": torch.randn(128)}

    hook = {
        "by_epoch": False,
        "profile_times": active + 2,
        "schedule": dict(active=active, **SCHEDULE),
        "json_trace_path": str(out / "mm_trace.json"),
    }
    if variant == "stock":
        hook.update(
            type="ProfilerHook",
            on_trace_ready=dict(type="log_trace", sort_by="self_cpu_time_total", row_limit=10),
        )
    else:
        hook.update(type="TorchscopeProfilerHook")
    config = out / "config.py"
    config.write_text(
        f"model = dict(type='BenchModel')\nwork_dir = {str(out / 'work')!r}\n"
        "train_dataloader = dict(dataset=dict(type='BenchData'), sampler=dict(type='DefaultSampler', shuffle=False),"
        " batch_size=16, collate_fn=dict(type='default_collate'))\n"
        f"train_cfg = dict(by_epoch=False, max_iters={active + 4})\n"
        "optim_wrapper = dict(optimizer=dict(type='SGD', lr=0.01))\ndefault_hooks = dict(checkpoint=None)\n"
        "custom_imports = dict(imports=['torchscope.integrations.mmengine'], allow_failed_imports=False)\n"
        f"custom_hooks = [{hook!r}]\n"
    )
    runner = Runner.from_cfg(Config.fromfile(str(config)))
    times: list[float] = []
    for h in runner.hooks:
        if "ProfilerHook" in type(h).__name__:
            # the stock hook prints its table when the cycle ends (inside after_train_iter), ours
            # when profiling ends: both are inside these two hooks, with the steps' own cost
            _timed(h, "after_train_iter", times)
            _timed(h, "after_train_epoch", times)
    runner.train()
    return sum(times)


def notebook(variant: str, active: int, out: Path) -> float:
    import torch

    model = torch.nn.Sequential(*[torch.nn.Linear(128, 128) for _ in range(8)])
    x = torch.randn(16, 128)
    if variant == "stock":
        prof: Any = torch.profiler.profile(record_shapes=True)
    else:
        from torchscope import profile

        prof = profile(record_shapes=True)
    with prof:
        for _ in range(active):
            model(x).pow(2).mean().backward()
        t0 = time.perf_counter()
    if variant == "stock":
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=10))
    else:
        from torchscope.integrations.notebook import summary_html

        print(len(summary_html(prof)))
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("frameworks", nargs="*", default=["lightning", "huggingface", "mmengine", "notebook"])
    parser.add_argument("--active", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        framework, variant = args.child
        with tempfile.TemporaryDirectory() as tmp:
            seconds = globals()[framework](variant, args.active, Path(tmp))
        print("RESULT " + json.dumps({"seconds": seconds}))
        return
    for framework in args.frameworks:
        row = []
        for variant in ("stock", "ours"):
            runs = []
            for _ in range(args.repeat):
                done = subprocess.run(
                    [sys.executable, __file__, "--active", str(args.active), "--child", framework, variant],
                    capture_output=True,
                    text=True,
                    check=False,
                )
                line = next((x for x in done.stdout.splitlines() if x.startswith("RESULT ")), None)
                if line is None:
                    print(f"{framework} {variant}: failed\n{done.stderr[-1500:]}")
                    break
                runs.append(json.loads(line[7:])["seconds"])
            if runs:
                row.append(f"{variant} {min(runs):.2f}-{max(runs):.2f} s")
        print(
            f"{framework:12s} end of profiling -> printed summary ({args.active} active steps): "
            + ", ".join(row)
        )


if __name__ == "__main__":
    main()
