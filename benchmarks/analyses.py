"""Benchmark: the whole torchscope report against HTA and torch-tb-profiler, load time included.

Same files, same work on each side, each side in its own process (so peak memory is its own):
  ours  torchscope.load + build_report (every analysis, the advisor included)
  cli   ``torchscope report FILE --json`` as a user runs it (argument parsing, the same report,
        and the JSON printed), timed inside its process as the other sides are
  HTA   TraceAnalysis(trace_dir) + temporal, kernel type and idle time breakdowns
  tb    RunProfileData.parse + process + analyze per rank (overview, ops, kernels, memory, advice)
Prints wall seconds, peak RSS and our speedup over the faster peer. Run:
  .venv/bin/python benchmarks/analyses.py [--repeat N]
"""

from __future__ import annotations

import argparse
import json
import logging
import resource
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT.parent / "shared" / "traces"
CASES = {
    "cuda/nccl_rank1_of_2_profile_memory.json.gz": TRACES / "cuda" / "nccl_rank1_of_2_profile_memory.json.gz",
    "multirank/": TRACES / "multirank",
}


def _files(path: Path) -> list[Path]:
    return sorted(path.glob("*.json*")) if path.is_dir() else [path]


SPLIT: dict[str, float] = {}


def run_ours(path: Path) -> None:
    # in the order ``torchscope report FILE --json`` runs: the file starts inflating and scanning
    # before the reader's and the analyses' modules import (``trace.files.prefetch``), so
    # "load" includes the reader's imports and "import" is the analyses' alone
    t0 = time.perf_counter()
    import torchscope

    t1 = time.perf_counter()
    trace = torchscope.load(path)
    t2 = time.perf_counter()
    from torchscope.analysis.report import build_report

    t3 = time.perf_counter()
    json.dumps(build_report(trace))
    t4 = time.perf_counter()
    SPLIT.update({"import": (t1 - t0) + (t3 - t2), "load": t2 - t1, "report": t4 - t3})


def run_cli(path: Path) -> None:
    import contextlib
    import io

    from torchscope.cli.main import main

    # as the ``torchscope`` command runs it: its own command line, a process that ends with it
    sys.argv = ["torchscope", "report", str(path), "--json"]
    with contextlib.redirect_stdout(io.StringIO()):
        assert main() == 0


def run_hta(path: Path) -> None:
    from hta.trace_analysis import TraceAnalysis

    with tempfile.TemporaryDirectory() as d:
        if not path.is_dir():
            (Path(d) / path.name).symlink_to(path)
            path = Path(d)
        ta = TraceAnalysis(trace_dir=str(path))
        ta.get_temporal_breakdown(visualize=False)
        ta.get_gpu_kernel_breakdown(visualize=False, include_memory_kernels=True)
        ta.get_idle_time_breakdown(ranks=sorted(ta.t.traces), visualize=False)


def run_tb(path: Path) -> None:
    from torch_tb_profiler.profiler.data import RunProfileData

    with tempfile.TemporaryDirectory() as cache:
        for i, f in enumerate(_files(path)):
            parsed = RunProfileData.parse(f"worker{i}", "span", str(f), cache)
            run = parsed[0] if isinstance(parsed, tuple) else parsed
            run.process()
            run.analyze()


SIDES = {"ours": run_ours, "ours (CLI)": run_cli, "HTA": run_hta, "tb-profiler": run_tb}


def child(side: str, path: str) -> None:
    logging.disable(logging.WARNING)
    warnings.filterwarnings("ignore")
    t = time.perf_counter()
    SIDES[side](Path(path))
    secs = time.perf_counter() - t
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"secs": secs, "rss_mb": rss_mb, "split": SPLIT}))


def measure(side: str, path: Path, repeat: int) -> tuple[float, float, dict[str, float]]:
    best, rss, split = float("inf"), 0.0, {}
    for _ in range(repeat):
        out = subprocess.run(
            [sys.executable, __file__, "--child", side, str(path)], capture_output=True, text=True, check=True
        )
        r = json.loads(out.stdout.strip().splitlines()[-1])
        if r["secs"] < best:
            best, split = r["secs"], r["split"]
        rss = max(rss, r["rss_mb"])
    return best, rss, split


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=1, help="runs per side; the best is kept")
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(*args.child)
        return
    for label, path in CASES.items():
        res = {side: measure(side, path, args.repeat) for side in SIDES}
        print(f"\n{label}")
        for side, (secs, rss, split) in res.items():
            parts = "  (" + ", ".join(f"{k} {v:.2f}" for k, v in split.items()) + ")" if split else ""
            print(f"  {side:12s} {secs:7.2f} s   peak RSS {rss:7.0f} MB{parts}")
        peer = min(("HTA", "tb-profiler"), key=lambda s: res[s][0])
        print(f"  ours is {res[peer][0] / res['ours'][0]:.1f}x faster than the faster peer ({peer})")
        print(f"  ours (CLI) is {res[peer][0] / res['ours (CLI)'][0]:.1f}x faster than {peer}")


if __name__ == "__main__":
    main()
