"""``torchscope.profiler``: replacing ``torch.profiler`` by ``torchscope.profiler`` in a script
works (it was a ``ModuleNotFoundError``), and it offers exactly torch.profiler's public names."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.profiler

import torchscope
import torchscope.profiler


def test_a_seed_script_renamed_mechanically_prints_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    from torchscope.profiler import (
        DeviceType,
        ExecutionTraceObserver,
        ProfilerAction,
        ProfilerActivity,
        kineto_available,
        profile,
        record_function,
        schedule,
        supported_activities,
        tensorboard_trace_handler,
    )

    assert ProfilerActivity.CPU in supported_activities() and kineto_available() in (True, False)
    assert (DeviceType.CPU, ProfilerAction.RECORD, ExecutionTraceObserver) is not None
    assert (schedule, tensorboard_trace_handler) == (torchscope.schedule, torchscope.tensorboard_trace_handler)
    x = torch.randn(32, 32)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof, record_function("model_inference"):
        x.mm(x).relu()
    print(prof.key_averages().table(sort_by="cpu_time_total", row_limit=5))
    table = capsys.readouterr().out
    assert "Self CPU time total" in table and "model_inference" in table and "aten::mm" in table


def test_the_module_alias_drives_a_schedule_and_the_trace_handler(tmp_path: Path) -> None:
    import torchscope.profiler as tp

    with tp.profile(
        activities=[tp.ProfilerActivity.CPU],
        schedule=tp.schedule(wait=1, warmup=1, active=2),
        on_trace_ready=tp.tensorboard_trace_handler(str(tmp_path), worker_name="w"),
    ) as prof:
        for _ in range(4):
            torch.randn(8, 8).relu()
            prof.step()
    (written,) = tmp_path.iterdir()
    assert written.name.startswith("w.") and written.name.endswith(".pt.trace.json")
    assert torchscope.load(written).events.height > 0


def test_every_public_torch_profiler_name_is_offered_or_listed_as_not_offered() -> None:
    """torch.profiler.__all__ is our names plus NOT_OFFERED, exactly: a name torch adds fails
    here until it is implemented or listed (and documented in docs/api.md)."""
    ours = set(torchscope.profiler.__all__)
    assert len(torchscope.profiler.NOT_OFFERED) == 0  # all ten of torch 2.13 are offered
    assert ours | torchscope.profiler.NOT_OFFERED == set(torch.profiler.__all__)
    assert not ours & torchscope.profiler.NOT_OFFERED
    for name in ours:  # the same objects as the top level's, nothing faked
        assert getattr(torchscope.profiler, name) is getattr(torchscope, name)
    # what the top level offers of torch.profiler's is all here too
    assert ours <= set(torchscope.__all__)


def test_a_torch_name_we_do_not_mirror_says_where_it_is() -> None:
    with pytest.raises(AttributeError) as err:
        torchscope.profiler.itt  # noqa: B018
    assert str(err.value).endswith("for torch's own, use torch.profiler.itt")


def test_importing_it_imports_no_torch_and_it_is_reachable_from_the_package() -> None:
    code = (
        "import sys, torchscope, torchscope.profiler as tp; assert 'torch' not in sys.modules; "
        "import torchscope as ts; assert ts.profiler is tp; print(sorted(dir(tp))[:2])"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['DeviceType', 'ExecutionTraceObserver']"


@pytest.mark.parametrize("argv", [["--help"], ["run", "--help"]])
def test_the_commands_help_imports_no_numpy_polars_or_torch(argv: list[str]) -> None:
    """``torchscope --help`` loads every subcommand for its text; ``run``'s option defaults
    (``runner.bounds``) pulled in the runner's session and NumPy with it (0.16 s, now 0.08 s)."""
    code = (
        "import sys; from torchscope.cli.main import main\n"
        f"try:\n    main({argv!r})\nexcept SystemExit as e:\n    assert e.code == 0, e.code\n"
        "heavy = sorted(m for m in ('numpy', 'polars', 'torch') if m in sys.modules)\n"
        "print('heavy:', heavy, file=sys.stderr)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert "usage: torchscope" in done.stdout
    assert done.stderr.strip().splitlines()[-1] == "heavy: []"
