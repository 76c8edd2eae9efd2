"""``torchscope demo``: profile our ResNet-18 training on the CPU, the README's first command.

It shows the whole drop-in path on a fresh machine with nothing but torch: a scheduled
``profile`` (wait 1, warmup 1, active 3) with ``tensorboard_trace_handler``, the key-averages
table torch users know, a Chrome trace for chrome://tracing or Perfetto, and a TensorBoard-style
log directory that ``torchscope report``, HTA and the TensorBoard plugin read.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from torchscope.cli.base import EXIT_OK
from torchscope.errors import TraceError


class DemoCommand:
    name = "demo"
    help = "Profile the built-in ResNet-18 (CPU): print the table, write a Chrome trace and a log dir."
    epilog = (
        "examples:\n"
        "  torchscope demo\n"
        "  torchscope demo --out /tmp/demo --steps 8\n"
        "  torchscope report torchscope-out/demo/log"
    )

    def configure(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--out", default="torchscope-out/demo", help="output directory (default torchscope-out/demo)"
        )
        parser.add_argument(
            "--steps", type=int, default=6, help="training steps to run, at least 5 (default 6)"
        )
        parser.add_argument("--batch", type=int, default=4, help="images per step (default 4)")
        parser.add_argument("--size", type=int, default=64, help="image height and width (default 64)")
        parser.add_argument("--row-limit", type=int, default=15, help="rows in the table (default 15)")
        parser.add_argument(
            "--json", action="store_true", help="print the written paths and top rows as JSON"
        )

    def run(self, args: argparse.Namespace) -> int:
        if args.steps < 5:
            raise TraceError(
                "--steps",
                f"the schedule needs at least 5 steps (wait 1, warmup 1, active 3), got {args.steps}",
            )
        result = run_demo(Path(args.out), steps=args.steps, batch=args.batch, size=args.size)
        prof = result.pop("profiler")
        if args.json:
            rows = prof.key_averages().to_polars().sort("self_cpu_time_total", descending=True)
            result["top"] = (
                rows.head(args.row_limit)
                .select("key", "count", "self_cpu_time_total", "cpu_time_total")
                .to_dicts()
            )
            print(json.dumps(result, indent=2))
            return EXIT_OK
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.row_limit))
        recorded = ", ".join(map(str, result["profiled_steps"]))
        print(f"profiled steps {recorded} of 0-{args.steps - 1} in {result['seconds']:.1f}s")
        print(
            f"Chrome trace:   {result['chrome_trace']}  (open in https://ui.perfetto.dev or chrome://tracing)"
        )
        print(f"TensorBoard log: {result['log_dir']}  (torchscope report {result['log_dir']})")
        return EXIT_OK


def run_demo(out: Path, *, steps: int = 6, batch: int = 4, size: int = 64) -> dict[str, Any]:
    """Profile ResNet-18 training steps; returns paths, timings and the profiler."""
    import torch

    from torchscope import ProfilerActivity, profile, record_function, schedule, tensorboard_trace_handler
    from torchscope.models import resnet18

    out.mkdir(parents=True, exist_ok=True)
    log_dir = out / "log"
    chrome = out / "resnet18.pt.trace.json"
    torch.manual_seed(0)
    model = resnet18(num_classes=10)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    images = torch.randn(batch, 3, size, size)
    labels = torch.randint(0, 10, (batch,))
    recorded: list[int] = []

    def on_ready(prof: Any) -> None:
        tensorboard_trace_handler(str(log_dir), worker_name="demo")(prof)
        prof.export_chrome_trace(str(chrome))
        recorded.append(prof.step_num)

    plan = schedule(wait=1, warmup=1, active=3, repeat=1)
    start = time.perf_counter()
    with profile(
        activities=[ProfilerActivity.CPU],
        schedule=plan,
        on_trace_ready=on_ready,
        record_shapes=True,
        profile_memory=True,
    ) as prof:
        for _ in range(steps):
            with record_function("forward"):
                loss = torch.nn.functional.cross_entropy(model(images), labels)
            with record_function("backward"):
                loss.backward()
            with record_function("optimizer"):
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
            prof.step()
    return {
        "chrome_trace": str(chrome),
        "log_dir": str(log_dir),
        "profiled_steps": [s for s in range(steps) if plan(s).name.startswith("RECORD")],
        "cycles": recorded,
        "seconds": time.perf_counter() - start,
        "profiler": prof,
    }


COMMAND = DemoCommand()
