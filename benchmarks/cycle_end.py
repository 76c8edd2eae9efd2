"""Benchmark: what a scheduled profile costs the training loop at each cycle end, torch vs us.

A schedule with ``tensorboard_trace_handler`` ends a cycle inside ``prof.step()``: Kineto stops,
the cycle is saved and the handler writes it into the log directory, all before the next
training step runs. Nobody asks for a table, so this is the whole cost a scheduled run pays.
Both sides train our MLP (SGD, batch 8) in a fresh process with the same schedule; each prints
the ``step()`` calls that took over 50 ms (the cycle ends, and the step that starts the next
cycle's warm-up) and the wall time of the whole loop. Then the ratio of the mean cycle end.

    .venv/bin/python benchmarks/cycle_end.py [--active 300] [--repeat 3] [--record-shapes]
        [--profile-memory] [--with-stack] [--use-gzip]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from typing import Any

OPTIONS = ("record_shapes", "profile_memory", "with_stack")


def child(tool: str, active: int, repeat: int, options: dict[str, bool], use_gzip: bool, logdir: str) -> dict[str, Any]:
    import torch

    from torchscope.models.training import small_mlp_step

    if tool == "torch":
        from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler
    else:
        from torchscope import ProfilerActivity, profile, schedule, tensorboard_trace_handler  # type: ignore[assignment]

    torch.set_num_threads(1)
    train_step = small_mlp_step()

    for _ in range(50):
        train_step()
    steps = repeat * (active + 2) + 10
    slow: list[float] = []
    prof = profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=1, warmup=1, active=active, repeat=repeat),
        on_trace_ready=tensorboard_trace_handler(logdir, use_gzip=use_gzip),
        **options,
    )
    t0 = time.perf_counter()
    with prof:
        for _ in range(steps):
            train_step()
            t = time.perf_counter()
            prof.step()
            took = time.perf_counter() - t
            if took > 0.05:
                slow.append(took)
    return {"total_s": time.perf_counter() - t0, "slow_steps_s": slow}


def run(tool: str, args: argparse.Namespace, options: dict[str, bool]) -> dict[str, Any]:
    flags = [f"--{name.replace('_', '-')}" for name, on in options.items() if on]
    with tempfile.TemporaryDirectory(prefix="cycle-end-") as logdir:
        cmd = [sys.executable, __file__, "--child", tool, "--logdir", logdir, "--active", str(args.active)]
        cmd += ["--repeat", str(args.repeat), *flags, *(["--use-gzip"] if args.use_gzip else [])]
        done = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--active", type=int, default=300, help="recorded steps per cycle (~160 events each)")
    ap.add_argument("--repeat", type=int, default=3, help="cycles")
    for name in OPTIONS:
        ap.add_argument(f"--{name.replace('_', '-')}", action="store_true", help=f"profile(..., {name}=True)")
    ap.add_argument("--use-gzip", action="store_true", help="tensorboard_trace_handler(..., use_gzip=True)")
    ap.add_argument("--child", choices=["torch", "torchscope"], help=argparse.SUPPRESS)
    ap.add_argument("--logdir", help=argparse.SUPPRESS)
    args = ap.parse_args()
    options = {name: bool(getattr(args, name)) for name in OPTIONS}
    if args.child:
        print(json.dumps(child(args.child, args.active, args.repeat, options, args.use_gzip, args.logdir)))
        return 0
    chosen = ", ".join(k for k, on in options.items() if on) or "no options"
    print(f"-- {args.repeat} cycles of {args.active} steps, {chosen}{', gzip' if args.use_gzip else ''}")
    means = {}
    for tool in ("torch", "torchscope"):
        r = run(tool, args, options)
        ends = sorted(r["slow_steps_s"], reverse=True)[: args.repeat]  # the cycle ends are the longest
        means[tool] = sum(ends) / max(len(ends), 1)
        listed = ", ".join(f"{s:.2f}" for s in r["slow_steps_s"])
        print(f"{tool:11} whole loop {r['total_s']:6.2f} s   step() over 50 ms: {listed}")
    print(f"mean cycle end: torchscope {means['torchscope']:.2f} s vs torch {means['torch']:.2f} s "
          f"({means['torchscope'] / max(means['torch'], 1e-9):.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
