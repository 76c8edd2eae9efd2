"""How long ``prof.events()`` takes after ``stop()``: torch.profiler vs torchscope.

Each side profiles the same 200 training steps of our MLP (32,200 events) in its own process,
then times ``stop()`` and the first ``prof.events()`` (torch's ``FunctionEvent`` objects, with
their parents and children): the wait of a script or framework that walks the events rather
than printing a table. Usage::

    .venv/bin/python benchmarks/events.py [--steps 200] [--record-shapes]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from typing import Any


def child(tool: str, steps: int, shapes: bool) -> dict[str, Any]:
    import torch

    from torchscope.models.training import small_mlp_step

    if tool == "torch":
        from torch.profiler import profile
    else:
        from torchscope import profile  # type: ignore[assignment]
    torch.set_num_threads(1)
    train_step = small_mlp_step()
    prof = profile(record_shapes=shapes)
    prof.start()
    for _ in range(steps):
        train_step()
    t0 = time.perf_counter()
    prof.stop()
    t1 = time.perf_counter()
    events = prof.events()
    t2 = time.perf_counter()
    return {"events": len(events), "stop_s": t1 - t0, "events_s": t2 - t1, "total_s": t2 - t0}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--record-shapes", action="store_true")
    ap.add_argument("--child", choices=["torch", "torchscope"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.steps, args.record_shapes)))
        return 0
    res = {}
    for tool in ("torch", "torchscope"):
        cmd = [sys.executable, __file__, "--child", tool, "--steps", str(args.steps)]
        cmd += ["--record-shapes"] if args.record_shapes else []
        out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
        res[tool] = r = json.loads(out.strip().splitlines()[-1])
        print(f"{tool:11} {r['events']} events: stop() {r['stop_s']:.2f} s, events() {r['events_s']:.2f} s, both {r['total_s']:.2f} s")
    print(f"stop() + events(): torchscope {res['torch']['total_s'] / res['torchscope']['total_s']:.1f}x faster")
    return 0


if __name__ == "__main__":
    sys.exit(main())
