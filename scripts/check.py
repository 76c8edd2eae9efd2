"""The whole suite in one command: lint, type check, tests. Used by the README and .ci/run."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

PY = sys.executable
FRONTEND = Path(__file__).resolve().parent.parent / "frontend"


def run(*cmd: str, cwd: Path | None = None) -> int:
    print("+", " ".join(cmd), flush=True)
    return subprocess.call(list(cmd), cwd=cwd)


def typecheck_js() -> int:
    """The dashboard's JavaScript (JSDoc types) checked by tsc, a dev dependency in frontend/."""
    npm = shutil.which("npm")
    if npm is None:
        print(
            "skip: npm not found, so the dashboard's JavaScript type check (tsc, frontend/) did not run",
            flush=True,
        )
        return 0
    return run(npm, "ci", "--no-audit", "--no-fund", cwd=FRONTEND) or run(
        npm, "exec", "--", "tsc", "-p", "tsconfig.json", cwd=FRONTEND
    )


def warm_first_import_caches() -> None:
    """Import, once and alone, the test dependencies that write a cache on their first import.

    yapf (mmengine's config formatter) pickles its grammar to ~/.cache/YAPF on first import
    without a lock; two pytest workers collecting tests/integrations/test_mmengine.py at once on
    a fresh machine then read a half-written pickle (EOFError at collection, a failed run).
    """
    subprocess.run(
        [PY, "-c", "import importlib.util as u\nif u.find_spec('mmengine'): import mmengine"],
        check=False,
        capture_output=True,
    )


def main() -> int:
    failed = 0
    failed |= run(PY, "-m", "ruff", "check", "src", "tests", "benchmarks", "scripts")
    failed |= run(PY, "-m", "mypy")
    failed |= typecheck_js()
    workers = os.environ.get("TORCHSCOPE_TEST_WORKERS", "2")
    warm_first_import_caches()
    failed |= run(PY, "-m", "pytest", "-q", "-n", workers, *sys.argv[1:])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
