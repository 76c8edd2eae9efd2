"""``import torchscope`` imports no framework (nor torch); the environment variable redirects."""

from __future__ import annotations

import os
import subprocess
import sys


def _python(code: str, **env: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
        env={**os.environ, **env},
    )
    return done.stdout.strip()


def test_import_torchscope_imports_no_framework() -> None:
    code = (
        "import sys, torchscope, torchscope.integrations\n"
        "print(sorted(m for m in ('torch', 'lightning', 'transformers', 'accelerate', 'mmengine', 'IPython')"
        " if m in sys.modules))"
    )
    env = {k: v for k, v in os.environ.items() if k != "TORCHSCOPE_REDIRECT"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert done.stdout.strip() == "[]"


def test_environment_variable_redirects_torch_profiler_for_that_process() -> None:
    code = (
        "import torchscope, torch.profiler, torch.autograd.profiler\n"
        "print(torch.profiler.profile.__module__, torch.autograd.profiler.profile.__module__)"
    )
    assert _python(code, TORCHSCOPE_REDIRECT="1") == "torchscope.capture.profiler torchscope.capture.redirect"
    assert _python(code, TORCHSCOPE_REDIRECT="0") == "torch.profiler.profiler torch.autograd.profiler"
