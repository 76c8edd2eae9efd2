"""torchscope asks polars' allocator for one arena (``process_memory.one_polars_arena``), and
only when nobody chose: each case runs in a fresh interpreter, since the allocator reads its
options once, when polars loads."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

VAR = "_RJEM_MALLOC_CONF"


def _options_after(imports: str, preset: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != VAR}
    if preset is not None:
        env[VAR] = preset
    code = f"import os; {imports}; print(os.environ.get({VAR!r}, ''))"
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout.strip()


def test_importing_torchscope_first_gives_polars_one_arena() -> None:
    options = _options_after("import torchscope, polars", None)
    # polars puts its own defaults in front of what it found, so ours is what it read
    assert options.split(",")[-1] == "narenas:1"


@pytest.mark.parametrize(
    ("imports", "preset"),
    [
        ("import torchscope, polars", "narenas:4"),  # the user's choice wins
        ("import polars, torchscope", None),  # polars' allocator already chose
    ],
)
def test_no_arena_option_when_someone_chose_first(imports: str, preset: str | None) -> None:
    assert "narenas:1" not in _options_after(imports, preset)
