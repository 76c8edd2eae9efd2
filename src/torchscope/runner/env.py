"""The environment summary ``torchscope run`` prints first: what the numbers were measured on.

A profile is only comparable with another taken on the same torch, devices and thread count;
``torch.utils.bottleneck`` printed the same facts for the same reason.
"""

from __future__ import annotations

import os
import platform
import sys
from typing import Any


def environment() -> dict[str, Any]:
    """torch version and build, devices, threads, Python and OS; torch is imported here."""
    import torch

    env: dict[str, Any] = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "torch_cuda_build": torch.version.cuda,
        "torch_hip_build": getattr(torch.version, "hip", None),
        "intra_op_threads": torch.get_num_threads(),
        "inter_op_threads": torch.get_num_interop_threads(),
        "devices": [],
    }
    try:
        import numpy

        env["numpy"] = numpy.__version__
    except ImportError:  # pragma: no cover - numpy is a dependency
        pass
    devices: list[dict[str, Any]] = []
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            devices.append(
                {
                    "type": "cuda",
                    "index": i,
                    "name": p.name,
                    "memory_bytes": int(p.total_memory),
                    "sm_count": int(p.multi_processor_count),
                    "capability": f"{p.major}.{p.minor}",
                }
            )
    xpu = getattr(torch, "xpu", None)
    if xpu is not None and xpu.is_available():
        for i in range(xpu.device_count()):
            devices.append({"type": "xpu", "index": i, "name": str(xpu.get_device_name(i))})
    env["devices"] = devices
    return env
