"""Benchmark: what op-by-op accuracy comparison costs, on our ResNet-18 and transformer block.

For each model and input (one training step, forward + backward, the target in bfloat16) it
times, in one process:
  plain      the target run alone
  reference  the same step once in the reference dtype/device (float64 on CPU): what live
             compare runs beside the target, op by op
  live       the target under ``torchscope.accuracy.compare`` (float64 CPU reference)
  dump       the target under ``torchscope.accuracy.dump`` in statistics mode (level "all":
             ops and module calls; the size per op counts every file of the dump)
and prints live / plain, live / (2 x reference) (the target, "no slower than running the
reference twice": at most 1.00), floor = (plain + reference) / (2 x reference) (live compare
runs both, so it cannot go below this; on CPU a bfloat16 step costs about as much as a float64
one, so the floor alone is near 1.0), dump / plain, and the statistics-mode dump size per op
(target: under 1 KB). Each timing is the best of ``--repeat`` runs after one warm-up. Run:
  .venv/bin/python benchmarks/accuracy.py [--repeat N] [--threads N]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from torchscope import models
from torchscope.accuracy import compare, dump
from torchscope.accuracy.torch_metrics import C_LOOP

# the tests' small inputs, and larger ones where compute, not per-output metrics, dominates
CASES: list[tuple[str, tuple[int, ...]]] = [
    ("resnet18", (1, 3, 32, 32)),
    ("transformer_block", (2, 16, 256)),
    ("resnet18", (8, 3, 64, 64)),
    ("transformer_block", (8, 128, 256)),
]


def build(name: str, shape: tuple[int, ...], dtype: torch.dtype) -> tuple[Any, torch.Tensor]:
    torch.manual_seed(0)
    model = getattr(models, name)().double().eval()
    return model.to(dtype), torch.randn(*shape, dtype=torch.float64).to(dtype)


def best(fn: Callable[[], None], repeat: int) -> float:
    fn()  # warm-up: first-call dispatch caches, lazy imports
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def bench(name: str, shape: tuple[int, ...], repeat: int) -> dict[str, float]:
    model, x = build(name, shape, torch.bfloat16)
    ref_model, ref_x = build(name, shape, torch.float64)

    def plain() -> None:  # one training step: gradients start from None, as after zero_grad()
        model.zero_grad(set_to_none=True)
        model(x).float().sum().backward()

    def reference() -> None:
        ref_model.zero_grad(set_to_none=True)
        ref_model(ref_x).sum().backward()

    def live() -> None:
        with compare(model):
            plain()

    out: dict[str, float] = {
        "plain": best(plain, repeat),
        "reference": best(reference, repeat),
        "live": best(live, repeat),
    }
    with tempfile.TemporaryDirectory() as tmp:

        def dumped() -> None:
            with dump(Path(tmp) / "d", model):
                plain()

        out["dump"] = best(dumped, repeat)
        d = Path(tmp) / "d"
        ops = json.loads((d / "meta.json").read_text())["ops"]
        size = sum(p.stat().st_size for p in d.iterdir())
        out["ops"] = float(ops)
        out["bytes_per_op"] = size / ops
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--threads",
        type=int,
        default=0,
        help="torch threads (0: torch's default); 1 is steadier on a shared machine",
    )
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads; target bfloat16, reference CPU float64;"
        f" live metrics by {'the C loop (torchscope.accuracy._fused)' if C_LOOP else 'torch ops (no C extension)'}"
    )
    header = (
        f"{'model':<18} {'input':<12} {'ops':>5} {'plain':>8} {'ref':>8} {'live':>8} {'dump':>8}  "
        f"{'live/plain':>10} {'live/(2*ref)':>12} {'floor':>6} {'dump/plain':>10} {'B/op':>6}"
    )
    print(header)
    for name, shape in CASES:
        r = bench(name, shape, args.repeat)
        twice = 2 * r["reference"]
        print(
            f"{name:<18} {'x'.join(map(str, shape)):<12} {int(r['ops']):>5} {r['plain']:>7.3f}s "
            f"{r['reference']:>7.3f}s {r['live']:>7.3f}s {r['dump']:>7.3f}s  "
            f"{r['live'] / r['plain']:>9.2f}x {r['live'] / twice:>11.2f}x "
            f"{(r['plain'] + r['reference']) / twice:>5.2f}x {r['dump'] / r['plain']:>9.2f}x "
            f"{r['bytes_per_op']:>6.0f}"
        )


if __name__ == "__main__":
    main()
