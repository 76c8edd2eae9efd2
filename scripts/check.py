"""The whole suite in one command: lint, type check, tests. Used by the README and .ci/run."""

from __future__ import annotations

import os
import subprocess
import sys

PY = sys.executable


def run(*cmd: str) -> int:
    print("+", " ".join(cmd), flush=True)
    return subprocess.call(list(cmd))


def main() -> int:
    failed = 0
    failed |= run(PY, "-m", "ruff", "check", "src", "tests", "benchmarks", "scripts")
    failed |= run(PY, "-m", "mypy")
    workers = os.environ.get("TORCHSCOPE_TEST_WORKERS", "2")
    failed |= run(PY, "-m", "pytest", "-q", "-n", workers, *sys.argv[1:])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
