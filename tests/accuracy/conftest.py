"""Workloads shared by the accuracy tests: our ResNet-18 and transformer block, small inputs."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # faults.py, also for subprocesses
