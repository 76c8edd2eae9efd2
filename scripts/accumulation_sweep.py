"""Live compare of correct float32 accumulating ops on many random inputs: any false divergence?

Each case runs under ``torchscope.accuracy.compare`` (float64 reference) for ``--seeds`` seeds
at one thread. Prints the divergences found (a correct kernel should give none) and, per op, the
worst error ratio, split by whether the accumulation-widened tolerance judged it. The numbers
docs/accuracy.md quotes come from:
  .venv/bin/python scripts/accumulation_sweep.py --seeds 40
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import torch

from torchscope.accuracy import compare
from torchscope.accuracy.tolerance import LIVE_DEFAULTS


def _conv_step() -> None:
    x = torch.randn(4, 64, 24, 24, requires_grad=True)
    conv = torch.nn.Conv2d(64, 64, 3, padding=1)
    conv(x.to(memory_format=torch.channels_last)).sum().backward()


CASES: dict[str, Callable[[], object]] = {
    "sum of 36,864 N(0,1)": lambda: torch.randn(36864).sum(),
    "sum of 10^6 U(0,1)": lambda: torch.rand(1_000_000).sum(),
    "mean over 20,000": lambda: (torch.randn(64, 20000) + 0.5).mean(dim=1),
    "mm N(0,1) K=65536": lambda: torch.randn(8, 65536) @ torch.randn(65536, 8),
    "mm U(0,1) K=65536": lambda: torch.rand(8, 65536) @ torch.rand(65536, 8),
    "bmm K=8192": lambda: torch.bmm(torch.randn(4, 32, 8192), torch.randn(4, 8192, 32)),
    "addmm K=16384": lambda: torch.addmm(torch.randn(64), torch.randn(16, 16384), torch.randn(16384, 64)),
    "cumsum of 10^5": lambda: torch.randn(100000).cumsum(0),
    "conv 64x64x3x3 fwd+bwd": _conv_step,
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=40)
    args = ap.parse_args()
    torch.set_num_threads(1)
    base_rtol = LIVE_DEFAULTS["float32"][0]
    worst: dict[tuple[str, str, bool], float] = {}
    false_alarms = []
    for seed in range(args.seeds):
        for case, run in CASES.items():
            torch.manual_seed(seed)
            with compare() as result:
                run()
            for op in result.compared:
                if op.worst is None:
                    continue
                key = (case, op.op, op.worst.rtol > base_rtol)
                worst[key] = max(worst.get(key, 0.0), op.worst.error_ratio or 0.0)
                if op.status == "diverged":
                    false_alarms.append((seed, case, op.op, op.worst.error_ratio))
    print(f"false divergences in {args.seeds} seeds x {len(CASES)} cases: {false_alarms or 'none'}")
    print(f"{'case':26s} {'op':28s} {'judged by':18s} worst error ratio")
    for (case, op, wide), ratio in sorted(worst.items()):
        if ratio > 0:
            print(f"{case:26s} {op:28s} {'widened' if wide else 'per element':18s} {ratio:.3f}")


if __name__ == "__main__":
    main()
