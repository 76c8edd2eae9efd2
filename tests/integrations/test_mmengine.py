"""An mmengine Runner built from a config dict that names our hook, on CPU with a tiny model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("mmengine")

import torch  # noqa: E402
from mmengine.model import BaseModel  # noqa: E402
from mmengine.registry import DATASETS, MODELS  # noqa: E402
from mmengine.runner import Runner  # noqa: E402


@MODELS.register_module(force=True)
class TorchscopeTinyModel(BaseModel):  # type: ignore[misc]
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))

    def forward(self, x: torch.Tensor, y: torch.Tensor, mode: str = "tensor") -> object:
        out = self.net(x)
        return {"loss": torch.nn.functional.mse_loss(out, y)} if mode == "loss" else out


@MODELS.register_module(force=True)
class TorchscopeFailingModel(TorchscopeTinyModel):
    """Raises in its fourth training forward: a bad batch."""

    calls = 0

    def forward(self, x: torch.Tensor, y: torch.Tensor, mode: str = "tensor") -> object:
        TorchscopeFailingModel.calls += 1
        if TorchscopeFailingModel.calls == 4:
            raise ValueError("bad batch")
        return super().forward(x, y, mode)


@DATASETS.register_module(force=True)
class TorchscopeTinyDataset(torch.utils.data.Dataset):  # type: ignore[misc]
    def __init__(self, n: int = 64) -> None:
        g = torch.Generator().manual_seed(0)
        self.x, self.y = torch.randn(n, 8, generator=g), torch.randn(n, 1, generator=g)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"x": self.x[i], "y": self.y[i]}


def _run_config(tmp_path: Path, max_iters: int, custom_hooks: str, model: str = "TorchscopeTinyModel") -> Runner:
    """A runner built from a config file (the user's path: the file imports our hook by module
    name and lists it in ``custom_hooks``), trained."""
    from mmengine.config import Config

    config = tmp_path / "tiny_config.py"
    config.write_text(
        f"""
model = dict(type={model!r})
work_dir = {str(tmp_path / "work")!r}
train_dataloader = dict(
    dataset=dict(type="TorchscopeTinyDataset"),
    sampler=dict(type="DefaultSampler", shuffle=False),
    batch_size=4,
    collate_fn=dict(type="default_collate"),
)
train_cfg = dict(by_epoch=False, max_iters={max_iters})
optim_wrapper = dict(optimizer=dict(type="SGD", lr=0.01))
default_hooks = dict(checkpoint=None)
custom_imports = dict(imports=["torchscope.integrations.mmengine"], allow_failed_imports=False)
custom_hooks = {custom_hooks}
"""
    )
    runner = Runner.from_cfg(Config.fromfile(str(config)))
    runner.train()
    return runner


def test_runner_from_a_config_file_that_names_our_hook(tmp_path: Path) -> None:
    """The user's path: a config file imports the hook by module name and lists it in custom_hooks."""
    trace_path = tmp_path / "mm_trace.json"
    hooks = f"""[
    dict(
        type="TorchscopeProfilerHook",
        by_epoch=False,
        profile_times=6,
        schedule=dict(wait=1, warmup=1, active=3, repeat=1),
        json_trace_path={str(trace_path)!r},
    )
]"""
    runner = _run_config(tmp_path, 8, hooks)
    hook = next(h for h in runner.hooks if type(h).__name__ == "TorchscopeProfilerHook")
    from torchscope.capture.profiler import profile

    assert isinstance(hook.profiler, profile)  # mmengine's torch.profiler.profile(...) was ours
    json.loads(trace_path.read_text())  # the file mmengine's hook writes, where it writes it
    import torchscope

    trace = torchscope.load(trace_path)
    assert trace.steps.height == 3
    assert {"aten::addmm", "aten::mse_loss"} <= set(trace.events["name"].cast(str).to_list())
    assert hook.report_path is not None and hook.report_path.is_file()
    assert hook.report_path.parent == Path(runner.log_dir) / "torchscope"
    assert hook.summary is not None and "where the time goes (3 steps" in hook.summary


def test_a_schedule_that_repeats_reports_every_cycle(tmp_path: Path) -> None:
    """With ``repeat`` > 1 the report read only the last cycle (``export_chrome_trace``); each
    cycle is now written for it, and the cycles are reported as a job. ``tb_trace`` works
    without the deleted TensorBoard plugin installed (mmengine checked for it)."""
    import builtins

    tb = tmp_path / "tb"
    hooks = f"""[
    dict(
        type="TorchscopeProfilerHook",
        by_epoch=False,
        profile_times=12,
        schedule=dict(wait=1, warmup=1, active=2, repeat=3),
        on_trace_ready=dict(type="tb_trace", dir_name={str(tb)!r}),
    )
]"""
    real_import = builtins.__import__

    def no_tb_plugin(name: str, *args: object, **kwargs: object) -> object:
        if name == "torch_tb_profiler":
            raise ImportError("No module named 'torch_tb_profiler'")
        return real_import(name, *args, **kwargs)

    builtins.__import__ = no_tb_plugin  # type: ignore[assignment]
    try:
        runner = _run_config(tmp_path, 12, hooks)
    finally:
        builtins.__import__ = real_import
    hook = next(h for h in runner.hooks if type(h).__name__ == "TorchscopeProfilerHook")
    assert len(list(tb.glob("*.pt.trace.json"))) == 3  # the handler's files, where it writes them
    ours = sorted((Path(runner.log_dir) / "torchscope").glob("rank0.cycle*.pt.trace.json"))
    assert [p.name for p in ours] == [f"rank0.cycle{n}.pt.trace.json" for n in (0, 1, 2)]
    import torchscope

    assert [torchscope.load(p).steps.height for p in ours] == [2, 2, 2]
    assert hook.summary is not None and "cycles" in hook.summary
    assert (Path(runner.log_dir) / "torchscope" / "report.ranks").is_dir()  # each cycle's dashboard


def test_under_another_profile_the_hook_stays_off_and_training_goes_on(tmp_path: Path) -> None:
    """A user's ``torchscope.profile()`` around ``runner.train()``: the hook's first cycle was
    lost ("another torchscope profiler is already recording") and raised into the training."""
    import torchscope

    hooks = '[dict(type="TorchscopeProfilerHook", by_epoch=False, profile_times=6)]'
    with torchscope.profile() as prof:
        runner = _run_config(tmp_path, 8, hooks)
    assert runner.iter == 8
    assert len(prof.key_averages()) > 0  # the user's profile has the run
    assert list((tmp_path / "work").rglob("torchscope/report.html")) == []


def test_a_run_that_raised_is_written_when_the_next_run_begins(tmp_path: Path) -> None:
    """mmengine calls no hook when a run raises: its profiler kept recording, and the next
    runner in the process (a caught error, a retry) died at its hook's first cycle."""
    hooks = '[dict(type="TorchscopeProfilerHook", by_epoch=False, profile_times=6)]'
    first = tmp_path / "first"
    first.mkdir()
    with pytest.raises(ValueError, match="bad batch"):
        _run_config(first, 8, hooks, model="TorchscopeFailingModel")
    assert list(first.rglob("torchscope/report.html")) == []  # still recording
    second = tmp_path / "second"
    second.mkdir()
    runner = _run_config(second, 8, hooks)
    assert runner.iter == 8
    (cut,) = first.rglob("torchscope/report.html")  # written as the second run began
    assert cut.is_file() and len(list(second.rglob("torchscope/report.html"))) == 1
