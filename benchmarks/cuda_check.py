"""The CUDA path on a real GPU: live capture with kernels, torch's tables vs ours, the advisor.

Run on a machine with CUDA: ``python benchmarks/cuda_check.py --out DIR`` (about two minutes).
A CPU machine cannot check any of this: CPU-only tests read traces other projects recorded on
GPUs, but a live Kineto session with CUPTI kernels, and the advisor's rules on kernels our
own workloads launched, need a GPU. It prints, in one go:

1. **torch vs us on the same session.** torch.profiler records a training step with CPU and
   CUDA activities; torch's ``key_averages()`` is compared row by row with ours computed from
   the JSON it exported (count, self/total CPU time, self/total device time). Both tables are
   printed, so the layout can be compared by eye too.
2. **The drop-in profiler live.** ``torchscope.profile`` with a schedule, ``record_shapes``,
   ``profile_memory``, ``with_stack`` and ``tensorboard_trace_handler`` on two training loops:
   one with the mistakes the advisor names (fp32 matmuls without TF32 or AMP, dimensions not
   multiples of 8, a host copy of every batch, ``.item()`` every step, a float64 op, tiny
   kernels) and one without them. Prints the seconds from the last step to the printed table,
   kernels seen, and which rules fired on each loop against which were expected to.
3. ``torchscope report`` on the log directory both loops wrote (CLI, HTML included).
4. ``torchscope run`` (no code change) on a CUDA training script of ``--run-seconds``.

The traces are written under ``--out`` so that they can be read again on a CPU machine.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import torch

import torchscope
from torchscope.analysis.advisor import advise
from torchscope.compat.averages import key_averages
from torchscope.models.training import fixed_step, flawed_step, resnet_step

# ``--device cpu`` runs the same script on a CPU machine (no kernels): a dry run of its code
DEV = torch.device("cuda", 0)


def sync() -> None:
    if DEV.type == "cuda":
        torch.cuda.synchronize()


def activities(mod: object) -> list[object]:
    acts = [mod.ProfilerActivity.CPU]  # type: ignore[attr-defined]
    if DEV.type == "cuda":
        acts.append(mod.ProfilerActivity.CUDA)  # type: ignore[attr-defined]
    return acts


def section(title: str) -> None:
    print(f"\n== {title} ==", flush=True)


def guarded(fn: Callable[[], None]) -> bool:
    """Run one section; a failure prints its traceback and the next section still runs."""
    try:
        fn()
        return True
    except Exception:
        traceback.print_exc()
        return False


# -- 1. torch's key_averages vs ours on one session -------------------------------------------
def same_session(out: Path) -> None:
    section("1. torch.profiler's key_averages vs ours from its exported JSON (ResNet-18 step)")
    step = resnet_step(DEV)
    for _ in range(3):
        step()
    sync()
    with torch.profiler.profile(activities=activities(torch.profiler), record_shapes=True) as prof:
        for _ in range(2):
            step()
        sync()
    path = out / "resnet18_torch.pt.trace.json"
    prof.export_chrome_trace(str(path))
    theirs = {e.key: e for e in prof.key_averages()}
    trace = torchscope.load(path)
    ours_avg = key_averages(trace)
    ours = {e.key: e for e in ours_avg}
    print(
        f"  trace: {trace.ops.height} ops, {trace.kernels.height} kernels, "
        f"{trace.device_events.height} device events"
    )
    fields = ("count", "self_cpu_time_total", "cpu_time_total", "self_device_time_total", "device_time_total")
    by_device = sorted(theirs, key=lambda k: -theirs[k].device_time_total)
    worst: dict[str, float] = dict.fromkeys(fields, 0.0)
    missing = [k for k in theirs if k not in ours]
    print(f"  keys: torch {len(theirs)}, ours {len(ours)}, torch's not in ours: {missing[:8]}")
    print(f"  {'key (top 20 by device time)':40}{'count':>11}{'self dev us':>22}{'dev total us':>22}")
    for key in by_device[:20]:
        t, o = theirs[key], ours.get(key)
        if o is None:
            print(f"  {key[:39]:40} MISSING in ours")
            continue
        print(
            f"  {key[:39]:40}{t.count:>5} {o.count:>5}"
            f"{t.self_device_time_total:>11.1f}{o.self_device_time_total:>11.1f}"
            f"{t.device_time_total:>11.1f}{o.device_time_total:>11.1f}"
        )
    # the documented differences (docs/api.md, "CUDA sessions"): a device-side annotation's self
    # time, and the kernel torch charges a second time to Kineto's buffer request and its ancestors
    documented: set[str] = set()
    for e in prof.events():
        if e.name == "Activity Buffer Request":
            p = e
            while p is not None:
                documented.add(p.name)
                p = p.cpu_parent

    def keyed(rows: object, device_annotation: object) -> dict[tuple[str, bool], object]:
        return {(r.key, bool(device_annotation(r))): r for r in rows}  # type: ignore[attr-defined]

    t_rows = keyed(
        prof.key_averages(), lambda r: r.is_user_annotation and str(r.device_type) != "DeviceType.CPU"
    )
    o_rows = keyed(ours_avg, lambda r: r.is_user_annotation and r.is_device)
    for (key, dev_ann), t in t_rows.items():
        o = o_rows.get((key, dev_ann))
        if o is None:
            continue
        for f in fields:
            if f.endswith("device_time_total") and (key in documented or dev_ann):
                continue
            a, b = float(getattr(t, f)), float(getattr(o, f))
            rel = abs(a - b) / max(abs(a), 1.0)
            worst[f] = max(worst[f], rel)
    print("  worst relative difference over all keys: " + ", ".join(f"{f} {v:.2%}" for f, v in worst.items()))
    print(f"  (device times not compared where docs/api.md documents a difference: {sorted(documented)})")
    print("\n  torch's table:")
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=8))
    print("  ours (from the exported JSON):")
    print(ours_avg.table(sort_by="cuda_time_total", row_limit=8))


# -- 2. the drop-in profiler on a flawed and a fixed training loop -----------------------------
def flawed_loop(steps: int, step_fn: Callable[[], None]) -> None:
    step = flawed_step(DEV)
    for _ in range(steps):
        step()
        step_fn()


def fixed_loop(steps: int, step_fn: Callable[[], None]) -> None:
    step = fixed_step(DEV)
    for _ in range(steps):
        step()
        step_fn()


EXPECTED = {
    "flawed": {
        "tf32_matmul",
        "enable_amp",
        "pageable_memcpy",
        "host_device_sync",
        "cpu_tensor_copied_to_device",
        "double_precision",  # x.double().std(): ~1.5 % of the steps on an H200
    },
    "fixed": set(),
}
# rules whose firing on the fixed loop would be a false alarm
NEVER_ON_FIXED = {
    "tf32_matmul",
    "enable_amp",
    "matmul_dims_not_multiple_of_8",
    "host_device_sync",
    "cpu_tensor_copied_to_device",
    "double_precision",
    "optimizer_foreach",
    "zero_grad_set_to_none",
}


def live(out: Path, name: str, loop: Callable[[int, Callable[[], None]], None]) -> None:
    section(f"2. torchscope.profile live on the {name} loop (schedule wait=1 warmup=1 active=3)")
    logdir = out / "logs" / name
    loop(3, lambda: None)  # warm up cuBLAS and the allocator outside the profiler
    sync()
    with torchscope.profile(
        activities=activities(torchscope),
        schedule=torchscope.schedule(wait=1, warmup=1, active=3, repeat=1),
        on_trace_ready=torchscope.tensorboard_trace_handler(str(logdir), use_gzip=True),
        record_shapes=True,
        profile_memory=True,
        with_stack=True,
    ) as prof:
        loop(5, prof.step)
        sync()
        t_end = time.perf_counter()
    table = prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=12)
    t_table = time.perf_counter()
    print(table)
    trace = prof.trace()
    kernels = trace.kernels
    print(
        f"  last step -> printed table: {t_table - t_end:.2f} s; {trace.ops.height} ops, "
        f"{kernels.height} kernels, {trace.device_events.height} device events, "
        f"{trace.memory.height} memory events; files: {sorted(p.name for p in logdir.iterdir())}"
    )
    if kernels.height:
        import polars as pl

        top = (
            kernels.group_by(pl.col("name").cast(pl.String))
            .agg(pl.len().alias("n"), (pl.col("dur_ns").sum() / 1000).alias("us"))
            .sort("us", descending=True)
        )
        print("  top kernels:")
        for r in top.head(10).iter_rows(named=True):
            print(f"    {r['us']:>10.1f} us {r['n']:>5}x  {r['name'][:150]}")
        copies = trace.device_events.filter(pl.col("kind").cast(pl.String) != "kernel")
        names = copies.group_by(pl.col("name").cast(pl.String), pl.col("kind").cast(pl.String)).len()
        print(f"  other device events: {names.rows()}")
        print(f"  device properties: {trace.meta.device_properties[:1]}")
    findings = advise(trace, min_share=0)
    shown = {f.rule for f in advise(trace)}  # what a user sees: from 1% of the profiled time
    fired = {f.rule for f in findings}
    for f in findings:
        share = "" if f.share is None else f" (share {f.share:.1%})"
        hidden = "" if f.rule in shown else " [below the 1% floor: not shown]"
        print(f"  [{f.rule}]{share}{hidden} {f.message}\n      fix: {f.fix}")
    fired = shown
    want = EXPECTED[name]
    print(f"  expected and fired: {sorted(want & fired)}")
    print(f"  expected, NOT fired: {sorted(want - fired)}")
    if name == "fixed":
        print(f"  false alarms on the fixed loop: {sorted(fired & NEVER_ON_FIXED)}")
    else:
        print(f"  fired beyond the expected: {sorted(fired - want)}")


def cli_report(out: Path) -> None:
    section("3. torchscope report on the log directory (two runs)")
    html = out / "report.html"
    t0 = time.perf_counter()
    cmd = [sys.executable, "-m", "torchscope", "report", str(out / "logs"), "--html", str(html)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    print(
        f"  exit {done.returncode} in {time.perf_counter() - t0:.2f} s; html {html.stat().st_size if html.exists() else 0} bytes"
    )
    print(done.stdout[-6000:])
    print(done.stderr[-3000:])


TRAIN_SCRIPT = """
import time, torch
from torch import nn
torch.backends.cuda.matmul.allow_tf32 = False
model = nn.Sequential(*[nn.Sequential(nn.Linear(1000, 1000), nn.ReLU()) for _ in range(6)], nn.Linear(1000, 10)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
host_x, host_y = torch.randn(4096, 1000), torch.randint(0, 10, (4096,))
end = time.time() + float(__import__("sys").argv[1])
steps = 0
while time.time() < end:
    x, y = host_x.to("cuda"), host_y.to("cuda")
    opt.zero_grad()
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    print_loss = loss.item()
    steps += 1
print("steps", steps, "loss", print_loss)
"""


def zero_code(out: Path, seconds: float) -> None:
    section(f"4. torchscope run (no code change) on a CUDA training script for {seconds:.0f} s")
    script = out / "train_cuda.py"
    script.write_text(TRAIN_SCRIPT)
    run_dir = out / "run"
    t0 = time.perf_counter()
    cmd = [sys.executable, "-m", "torchscope", "run", "--out", str(run_dir), str(script), str(seconds)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    print(
        f"  exit {done.returncode} in {time.perf_counter() - t0:.1f} s; files: {sorted(p.name for p in run_dir.rglob('*'))[:12]}"
    )
    print(done.stdout[-2000:])
    print(done.stderr[-6000:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--device", default="cuda", help="cuda (the check) or cpu (a dry run of the script)")
    parser.add_argument(
        "--run-seconds", type=float, default=20.0, help="length of the torchscope run section"
    )
    args = parser.parse_args()
    global DEV
    DEV = torch.device(args.device, 0) if args.device == "cuda" else torch.device(args.device)
    args.out.mkdir(parents=True, exist_ok=True)
    print(
        f"torch {torch.__version__}, {torch.cuda.get_device_name(0) if DEV.type == 'cuda' else 'cpu'}, torchscope from {torchscope.__file__}"
    )
    ok = [
        guarded(lambda: same_session(args.out)),
        guarded(lambda: live(args.out, "flawed", flawed_loop)),
        guarded(lambda: live(args.out, "fixed", fixed_loop)),
        guarded(lambda: cli_report(args.out)),
        guarded(lambda: zero_code(args.out, args.run_seconds)),
    ]
    print(f"\nsections passed without an exception: {sum(ok)} of {len(ok)}")


if __name__ == "__main__":
    main()
