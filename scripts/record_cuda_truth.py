"""Record torch.profiler's own answers on a real CUDA session, for differential tests on CPU.

Run on a machine with a CUDA GPU: ``python scripts/record_cuda_truth.py --out DIR``.
For each workload it profiles two training steps with torch.profiler (CPU + CUDA activities),
exports the Chrome trace torch writes (``NAME.pt.trace.json.gz``) and writes what torch
itself computed from the same session (``NAME.torch.json.gz``): ``key_averages()`` row by row,
grouped by name and by name and input shapes, every FunctionEvent's tree position and device
time, and the printed tables. ``tests/compat/test_cuda_truth.py`` then checks, on any
machine, that our ``key_averages`` of the exported trace agrees with torch's, and where it
deliberately does not. The workloads are small (a ResNet-18 step, an MLP with the mistakes the
advisor names, the same MLP done right) so the files stay in ``tests/data/cuda_truth``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from torchscope.models.training import fixed_step, flawed_step, resnet_step

DEV = torch.device("cuda", 0)  # ``--device cpu``: a dry run of this script on a CPU machine


def sync() -> None:
    if DEV.type == "cuda":
        torch.cuda.synchronize()


AVG_FIELDS = (
    "count",
    "self_cpu_time_total",
    "cpu_time_total",
    "self_device_time_total",
    "device_time_total",
    "cpu_memory_usage",
    "self_cpu_memory_usage",
    "device_memory_usage",
    "self_device_memory_usage",
)


def avg_rows(averages: Any, by_shape: bool) -> list[dict[str, Any]]:
    rows = []
    for e in averages:
        row = {"key": e.key, **{f: float(getattr(e, f)) for f in AVG_FIELDS}}
        if by_shape:
            row["input_shapes"] = str(e.input_shapes)
        rows.append(row)
    return rows


def event_rows(events: Any) -> list[dict[str, Any]]:
    index = {id(e): i for i, e in enumerate(events)}
    rows = []
    for e in events:
        parent = getattr(e, "cpu_parent", None)
        rows.append(
            {
                "name": e.name,
                "thread": e.thread,
                "device_type": str(e.device_type),
                "start_us": e.time_range.start,
                "end_us": e.time_range.end,
                "parent": index.get(id(parent)) if parent is not None else None,
                "self_cpu_time_total": float(e.self_cpu_time_total),
                "self_device_time_total": float(e.self_device_time_total),
                "device_time_total": float(e.device_time_total),
                "kernels": [[k.name, float(k.duration)] for k in getattr(e, "kernels", [])],
            }
        )
    return rows


def record(out: Path, name: str, make: Callable[[], Callable[[], None]], **options: Any) -> None:
    step = make()
    for _ in range(3):
        step()
    sync()
    acts = [torch.profiler.ProfilerActivity.CPU]
    if DEV.type == "cuda":
        acts.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=acts, record_shapes=True, **options) as prof:
        for _ in range(2):
            step()
        sync()
    raw = out / f"{name}.pt.trace.json"
    prof.export_chrome_trace(str(raw))
    with raw.open("rb") as src, gzip.open(out / f"{name}.pt.trace.json.gz", "wb", compresslevel=9) as dst:
        shutil.copyfileobj(src, dst)
    raw.unlink()
    truth = {
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(0) if DEV.type == "cuda" else "cpu",
        "options": {"record_shapes": True, **options},
        "key_averages": avg_rows(prof.key_averages(), by_shape=False),
        "key_averages_by_shape": avg_rows(prof.key_averages(group_by_input_shape=True), by_shape=True),
        "events": event_rows(prof.events()),
        "tables": {
            sort: prof.key_averages().table(sort_by=sort, row_limit=15)
            for sort in ("cuda_time_total", "self_cuda_time_total", "cpu_time_total")
        },
    }
    with gzip.open(out / f"{name}.torch.json.gz", "wt", compresslevel=9) as f:
        json.dump(truth, f)
    print(f"{name}: {len(truth['events'])} events, {len(truth['key_averages'])} keys")
    print(truth["tables"]["self_cuda_time_total"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    global DEV
    DEV = torch.device(args.device)
    args.out.mkdir(parents=True, exist_ok=True)
    record(args.out, "resnet18", lambda: resnet_step(DEV))
    record(args.out, "mlp_flawed", lambda: flawed_step(DEV), profile_memory=True)
    # with Python stacks: the advisor's rules name the user's line (torch 2.11 lists no frames)
    record(args.out, "mlp_flawed_stack", lambda: flawed_step(DEV), profile_memory=True, with_stack=True)
    record(args.out, "mlp_fixed", lambda: fixed_step(DEV), profile_memory=True)


if __name__ == "__main__":
    main()
