"""Portable collector vs Kineto (torch.profiler): collection overhead and what each one sees.

Run: ``.venv/bin/python benchmarks/portable_vs_kineto.py`` (CPU; about a minute on 2 cores).
On a machine with CUDA it also runs the device comparison: per-op device time from the
portable collector's event pairs vs the sum of that op's kernels from Kineto (CUPTI).

Prints, for one run in one go:
1. per-op collection overhead of both on a workload of small ops, and the ratio
   (target: portable <= 3x Kineto), measured in-loop, with stop(), and with the JSON written;
2. the CPU comparison on our models: op counts and host time of the top ops, side by side;
3. with CUDA: the top-20 ops' device time, portable vs Kineto, and their agreement.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl
import torch

from torchscope.capture.portable import PortableCollector
from torchscope.models import resnet18, transformer_block
from torchscope.models.perceptron import MLP
from torchscope.trace.model import Trace
from torchscope.trace.reader import read_chrome_document

TMP = Path(tempfile.mkdtemp(prefix="portable_bench_"))


# -- 1. overhead on small ops ---------------------------------------------------------------
def small_ops(device: torch.device, iters: int) -> tuple[Callable[[], None], int]:
    a = torch.randn(16, device=device)
    b = torch.randn(16, device=device)

    def work() -> None:
        x = a
        for _ in range(iters):
            x = torch.relu(x.mul(b).add(a))

    return work, 3 * iters


def _sync(device: torch.device) -> None:
    if device.type != "cpu":
        torch.accelerator.synchronize(device)


def _kineto_activities(device: torch.device) -> list[Any]:
    acts = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        acts.append(torch.profiler.ProfilerActivity.CUDA)
    return acts


def overhead(device: torch.device, iters: int, repeat: int) -> None:
    work, n_ops = small_ops(device, iters)
    work()
    _sync(device)
    rows: dict[str, list[float]] = {
        k: [] for k in ("base", "k_loop", "k_stop", "k_file", "p_loop", "p_stop", "p_file")
    }
    for _ in range(repeat):
        t0 = time.perf_counter()
        work()
        _sync(device)
        rows["base"].append(time.perf_counter() - t0)

        t0 = time.perf_counter()
        with torch.profiler.profile(activities=_kineto_activities(device)) as prof:
            work()
            _sync(device)
            t1 = time.perf_counter()
        t2 = time.perf_counter()
        prof.export_chrome_trace(str(TMP / "kineto.json"))
        t3 = time.perf_counter()
        rows["k_loop"].append(t1 - t0)
        rows["k_stop"].append(t2 - t0)
        rows["k_file"].append(t3 - t0)

        t0 = time.perf_counter()
        collector = PortableCollector()
        collector.start()
        work()
        _sync(device)
        t1 = time.perf_counter()
        doc = collector.stop()
        t2 = time.perf_counter()
        (TMP / "portable.json").write_text(json.dumps(doc))
        t3 = time.perf_counter()
        rows["p_loop"].append(t1 - t0)
        rows["p_stop"].append(t2 - t0)
        rows["p_file"].append(t3 - t0)

    # the fastest of the runs: on a shared machine the minimum is the least disturbed estimate
    med = {k: min(v) for k, v in rows.items()}
    per_op = {k: (v - med["base"]) / n_ops * 1e6 for k, v in med.items()}
    print(f"\n== 1. collection overhead, {n_ops} small ops on {device} (fastest of {repeat}) ==")
    print(f"  no profiler: {med['base'] / n_ops * 1e6:.2f} us/op")
    print(f"  {'':28}{'Kineto':>12}{'portable':>12}{'ratio':>8}")
    for label, k, p in (
        ("in the loop", "k_loop", "p_loop"),
        ("+ stop()", "k_stop", "p_stop"),
        ("+ JSON trace written", "k_file", "p_file"),
    ):
        ratio = per_op[p] / per_op[k] if per_op[k] > 0 else float("nan")
        print(f"  overhead {label:19}{per_op[k]:>9.2f} us{per_op[p]:>9.2f} us{ratio:>7.2f}x")
    ratio = per_op["p_stop"] / per_op["k_stop"]
    verdict = "meets" if ratio <= 3.0 else "MISSES"
    print(f"  portable/Kineto per-op overhead (session incl. stop): {ratio:.2f}x — {verdict} the 3x target")


# -- 2. CPU comparison on models --------------------------------------------------------------
def workloads(device: torch.device) -> dict[str, Callable[[], None]]:
    torch.manual_seed(0)
    mlp, x_mlp = MLP((512, 1024, 1024, 10)).to(device), torch.randn(32, 512, device=device)
    res, x_res = (
        resnet18().to(device),
        torch.randn(8 if device.type != "cpu" else 2, 3, 112, 112, device=device),
    )
    tfm, x_tfm = transformer_block().to(device), torch.randn(4, 64, 256, device=device)
    return {
        "mlp (fwd+bwd)": lambda: mlp(x_mlp).sum().backward(),
        "resnet18 (fwd+bwd)": lambda: res(x_res).sum().backward(),
        "transformer_block (fwd+bwd)": lambda: tfm(x_tfm).sum().backward(),
    }


def capture_kineto(fn: Callable[[], None], device: torch.device, save: Path | None = None) -> Trace:
    with torch.profiler.profile(activities=_kineto_activities(device), record_shapes=True) as prof:
        fn()
        _sync(device)
    path = save or TMP / "kineto_model.json"
    prof.export_chrome_trace(str(path))
    return read_chrome_document(json.loads(path.read_text()), str(path))


def capture_portable(
    fn: Callable[[], None],
    device: torch.device,
    save: Path | None = None,
    stats: dict[str, Any] | None = None,
    hold: bool = True,
) -> Trace:
    """The portable collector's Trace of ``fn``; ``stats`` receives its per-device batch stats
    and the wall time of ``fn`` under it (``wall_s``)."""
    collector = PortableCollector(record_shapes=True, hold_idle_device=hold)
    collector.start()
    t = time.perf_counter()
    fn()
    _sync(device)
    wall = time.perf_counter() - t
    doc = collector.stop()
    if save is not None:
        save.write_text(json.dumps(doc))
    if stats is not None:
        stats.update(doc["portable"]["batches"], wall_s=wall)
    return read_chrome_document(doc, "portable")


def host_table(trace: Trace) -> pl.DataFrame:
    return (
        trace.ops.group_by(pl.col("name").cast(pl.String))
        .agg(pl.len().alias("count"), (pl.col("dur_ns").sum() / 1000).alias("host_us"))
        .sort("host_us", descending=True)
    )


def cpu_comparison(device: torch.device) -> None:
    print(f"\n== 2. host-side comparison on our models ({device}) ==")
    for name, fn in workloads(device).items():
        fn()
        kineto, portable = capture_kineto(fn, device), capture_portable(fn, device)
        k, p = host_table(kineto), host_table(portable)
        both = p.join(k, on="name", how="left", suffix="_kineto").head(12)
        seen = set(p["name"].to_list())
        matched = sum(int(r["count"] == r["count_kineto"]) for r in both.iter_rows(named=True))
        print(
            f"\n  {name}: portable sees {p.height} op names / {portable.ops.height} ops; Kineto "
            f"{k.height} / {kineto.ops.height} (Kineto also records ops nested inside ops); "
            f"{len(seen - set(k['name'].to_list()))} names only portable sees"
        )
        print(f"  {'op':32}{'count':>7}{'Kineto':>8}{'host us':>11}{'Kineto':>11}")
        for r in both.iter_rows(named=True):
            kc = r["count_kineto"] if r["count_kineto"] is not None else 0
            ku = r["host_us_kineto"] if r["host_us_kineto"] is not None else 0.0
            print(f"  {r['name'][:31]:32}{r['count']:>7}{kc:>8}{r['host_us']:>11.1f}{ku:>11.1f}")
        print(f"  counts equal for {matched} of the top {both.height} ops")


# -- 3. CUDA: per-op device time ---------------------------------------------------------------
def kineto_device_time_by_op(trace: Trace, names: set[str]) -> dict[str, float]:
    """Kineto kernel time per op: each kernel charged to its outermost ancestor op in ``names``.

    The portable collector times the op that reached the dispatch mode (``aten::convolution``);
    Kineto's kernel hangs off the innermost op (``aten::cudnn_convolution``). Walking up to the
    outermost ancestor the portable side also names makes the two sums comparable.
    """
    ev = trace.events
    parent = ev["parent"].to_list()
    name = ev["name"].cast(pl.String).to_list()
    kind = ev["kind"].cast(pl.String).to_list()
    totals: dict[str, float] = {}
    for row in trace.device_events.iter_rows(named=True):
        op = row["op"]
        charged = None
        while op is not None and op >= 0:
            if kind[op] == "cpu_op" and name[op] in names:
                charged = name[op]
            op = parent[op]
        if charged is not None:
            totals[charged] = totals.get(charged, 0.0) + row["dur_ns"] / 1000
    return totals


def cuda_comparison(device: torch.device, batch: int, save: Path | None = None) -> None:
    """Top-20 ops' device time, portable against Kineto, with the idle device held (the
    default) and without (``hold_idle_device=False``), on the same warmed-up step."""
    print(f"\n== 3. device time per op on {torch.cuda.get_device_name(device)}, ResNet-18 batch {batch} ==")
    torch.backends.cudnn.benchmark = True
    model = resnet18().to(device)
    x = torch.randn(batch, 3, 224, 224, device=device)

    def step() -> None:
        model(x).sum().backward()

    for _ in range(3):
        step()
    _sync(device)
    t = time.perf_counter()
    step()
    _sync(device)
    print(f"  unprofiled step: {(time.perf_counter() - t) * 1000:.1f} ms")
    saved = save / f"kineto_resnet18_batch{batch}.json" if save else None
    kineto = capture_kineto(step, device, saved)
    for hold in (True, False):
        stats: dict[str, Any] = {}
        saved = save / f"portable_resnet18_batch{batch}{'' if hold else '_nohold'}.json" if save else None
        portable = capture_portable(step, device, saved, stats, hold=hold)
        wall_s = stats.pop("wall_s")
        print(f"  -- portable, {'idle device held' if hold else 'no hold'}: step {wall_s * 1000:.1f} ms under it")
        compare_device_times(kineto, portable, stats)


def compare_device_times(kineto: Trace, portable: Trace, stats: dict[str, Any]) -> None:
    p = portable.kernels.group_by(pl.col("name").cast(pl.String)).agg(
        (pl.col("dur_ns").sum() / 1000).alias("us")
    )
    p_tot = dict(zip(p["name"].to_list(), p["us"].to_list(), strict=True))
    k_tot = kineto_device_time_by_op(kineto, set(p_tot))
    top = sorted(p_tot, key=lambda n: -p_tot[n])[:20]
    print(f"  {'op':34}{'portable us':>13}{'Kineto us':>12}{'diff':>8}")
    for n in top:
        k = k_tot.get(n, 0.0)
        diff = (p_tot[n] - k) / k * 100 if k else float("nan")
        print(f"  {n[:33]:34}{p_tot[n]:>13.1f}{k:>12.1f}{diff:>7.1f}%")
    pk, kk = sum(p_tot[n] for n in top), sum(k_tot.get(n, 0.0) for n in top)
    print(
        f"  top-20 total: portable {pk:.1f} us, Kineto {kk:.1f} us, diff {(pk - kk) / kk * 100:+.2f}% (target within 5%)"
    )
    for name, st in stats.items():
        total_us = portable.kernels["dur_ns"].sum() / 1000
        print(
            f"  {name}: {st['begun_before_launch']} of {st['resolved']} pairs began before the host finished "
            f"launching their op ({st['begun_before_launch_ns'] / 1000 / (total_us or 1) * 100:.1f}% of the "
            f"portable device time: an upper bound there); {st.get('held_idle', 0)} idle waits held "
            f"({st.get('held_idle_ns', 0) / 1000:.0f} us of spin)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=4000, help="small-op loop iterations (3 ops each)")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument(
        "--cuda-batch",
        default="64,256",
        help="ResNet-18 batch sizes for the device comparison: a small batch leaves the device waiting on "
        "the host (an event pair then also times the host's launch gaps), a large one keeps it busy",
    )
    parser.add_argument("--skip-cpu", action="store_true", help="only the device sections (on a GPU machine)")
    parser.add_argument("--save", type=Path, help="write both device comparisons' traces into this folder")
    args = parser.parse_args()
    print(f"torch {torch.__version__}; accelerator: {torch.accelerator.current_accelerator()}")
    torch.set_num_threads(1)
    cpu = torch.device("cpu")
    if not args.skip_cpu:
        overhead(cpu, args.iters, args.repeat)
        cpu_comparison(cpu)
    if args.save:
        args.save.mkdir(parents=True, exist_ok=True)
    if torch.cuda.is_available():
        cuda = torch.device("cuda", 0)
        overhead(cuda, args.iters, args.repeat)
        for batch in map(int, args.cuda_batch.split(",")):
            cuda_comparison(cuda, batch, args.save)
    else:
        print("\n== 3. device time per op: skipped, no CUDA device on this machine ==")


if __name__ == "__main__":
    main()
