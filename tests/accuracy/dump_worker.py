"""Run workloads under ``dump`` in their own process: ``dump_worker.py JOBS_JSON``.

Each job is ``[model, dtype, out_dir, fault or "-", tensors patterns or "", level]``. The tests start
it twice, as two machines would: one process dumps the targets (low precision, maybe a broken
kernel), the other the float64 references. Only the dump directories pass between them.
"""

from __future__ import annotations

import json
import sys
from contextlib import nullcontext
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from faults import fault  # noqa: E402
from workloads import build, step  # noqa: E402

from torchscope.accuracy import dump  # noqa: E402


def main() -> None:
    for name, dtype_name, out, broken, tensors, level in json.loads(sys.argv[1]):
        model, x = build(name, getattr(torch, dtype_name))
        save = tensors.split(",") if tensors else False
        with (
            fault(broken) if broken != "-" else nullcontext(),
            dump(out, model, level=level, tensors=save, label=f"{name} {dtype_name}"),
        ):
            step(model, x)


if __name__ == "__main__":
    main()
