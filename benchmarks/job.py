"""Benchmark: an N-rank job reported by ``torchscope report`` and by HTA, on real rank traces.

Builds ``N`` ranks from a real NCCL rank trace in ``../shared/traces`` (default
``cuda/diff_control_rank3_of_8``, the issue's reference): ``distributedInfo`` rank and world size
rewritten per rank, and a few ranks made slower (their compute kernels 30% longer, and they
arrive later at every collective: each NCCL kernel starts later by half its length). Then runs,
each in its own process tree:
  ours  ``torchscope report JOB --html FILE`` (the job path: discover, map per rank, reduce)
  HTA   ``TraceAnalysis(trace_dir=JOB)`` + temporal breakdown + comm/comp overlap
and prints wall seconds, the peak RSS of the whole process tree (sampled every 20 ms), the HTML
size and the terminal line count, plus one rank's ``torchscope.load`` time to compare the wall
time with (ranks x one load) / cores. Run:
  .venv/bin/python benchmarks/job.py 32 [--hta] [--slow 3] [--src cuda/X.json.gz] [--keep DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT.parent / "shared" / "traces"
HTA_MEMORY_CAP = 16 * 1024**3  # HTA's address space in its child: it fails rather than OOM the machine


def _slower(data: dict[str, Any], how: float) -> dict[str, Any]:
    """This rank computes ``how`` x 60% longer and reaches each collective later by ``how`` x
    its length (``how`` < 1), on a copy."""
    data = {**data, "traceEvents": [dict(e) for e in data["traceEvents"]]}
    for e in data["traceEvents"]:
        if e.get("cat") != "kernel" or "dur" not in e:
            continue
        if str(e.get("name", "")).startswith("nccl"):
            late = e["dur"] * how
            e["ts"] += late
            e["dur"] -= late
        else:
            e["dur"] *= 1 + 0.6 * how
    return data


def build_job(src: Path, out: Path, ranks: int, slow: list[int]) -> None:
    """``out/rank-N.pt.trace.json.gz`` for N in 0..ranks-1 (gzip level 1: fast to write)."""
    out.mkdir(parents=True, exist_ok=True)
    with gzip.open(src, "rt") as fh:
        data = json.load(fh)
    marker = '"rank": 987654321'
    data["distributedInfo"] = {**data.get("distributedInfo", {}), "rank": 987654321, "world_size": ranks}
    fast_text = json.dumps(data)
    # the first slow rank is the slowest (arrives 60% into each collective), the others less so
    slow_text = {r: json.dumps(_slower(data, 0.6 / (i + 1))) for i, r in enumerate(slow)}
    for r in range(ranks):
        text = slow_text.get(r, fast_text).replace(marker, f'"rank": {r}', 1)
        with gzip.open(out / f"rank-{r}.pt.trace.json.gz", "wt", compresslevel=1) as fh:
            fh.write(text)


class TreePeak:
    """The peak of the summed RSS of a process and all its descendants, sampled in a thread."""

    def __init__(self, pid: int, every_s: float = 0.02) -> None:
        self.proc = psutil.Process(pid)
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(every_s,), daemon=True)
        self._thread.start()

    def _run(self, every_s: float) -> None:
        while not self._stop.is_set():
            try:
                procs = [self.proc, *self.proc.children(recursive=True)]
            except psutil.Error:
                return
            total = 0
            for p in procs:
                with contextlib.suppress(psutil.Error):
                    total += p.memory_info().rss
            self.peak = max(self.peak, total)
            time.sleep(every_s)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak


def measure(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> dict[str, Any]:
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    peak = TreePeak(proc.pid)
    stdout, stderr = proc.communicate()
    secs = time.perf_counter() - t0
    return {
        "secs": secs,
        "peak_mb": peak.stop() / 2**20,
        "rc": proc.returncode,
        "lines": len(stdout.splitlines()),
        "stdout": stdout,
        "stderr": stderr[-2000:],
    }


HTA_SCRIPT = """
import logging, resource, sys, warnings
warnings.filterwarnings("ignore"); logging.disable(logging.WARNING)
resource.setrlimit(resource.RLIMIT_AS, ({cap}, {cap}))
from hta.trace_analysis import TraceAnalysis
ta = TraceAnalysis(trace_dir=sys.argv[1])
ta.get_temporal_breakdown(visualize=False)
ta.get_comm_comp_overlap(visualize=False)
print("ranks", len(ta.t.traces))
"""

LOAD_SCRIPT = """
import sys, time
import torchscope
t0 = time.perf_counter(); torchscope.load(sys.argv[1], progress=False); print(time.perf_counter() - t0)
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("ranks", type=int)
    ap.add_argument("--src", default="cuda/diff_control_rank3_of_8.json.gz", help="under ../shared/traces")
    ap.add_argument("--slow", type=int, default=3, help="how many ranks are made slower (default 3)")
    ap.add_argument("--hta", action="store_true", help="also run HTA on the same folder")
    ap.add_argument("--keep", metavar="DIR", help="build the job here and keep it (reused when present)")
    ap.add_argument("--engine", default="local")
    args = ap.parse_args()

    slow = list(dict.fromkeys((i * 7 + 5) % args.ranks for i in range(min(args.slow, args.ranks))))
    tmp = Path(tempfile.mkdtemp(prefix="torchscope-job-"))
    job = Path(args.keep) if args.keep else tmp / "job"
    try:
        stamp = job / ".built"
        if not stamp.is_file() or stamp.read_text() != f"{args.src} {args.ranks} {slow}":
            t0 = time.perf_counter()
            shutil.rmtree(job, ignore_errors=True)
            build_job(TRACES / args.src, job, args.ranks, slow)
            stamp.write_text(f"{args.src} {args.ranks} {slow}")
            print(
                f"built {args.ranks} ranks from {args.src} in {time.perf_counter() - t0:.0f} s; slow ranks {slow}"
            )
        json_mb = sum(f.stat().st_size for f in job.glob("*.gz")) / 2**20
        cores = len(os.sched_getaffinity(0))
        one = subprocess.run(
            [sys.executable, "-c", LOAD_SCRIPT, str(job / "rank-0.pt.trace.json.gz")],
            capture_output=True,
            text=True,
            check=True,
        )
        one_load = float(one.stdout.strip())
        html = tmp / "job.html"
        ours = measure(
            [
                sys.executable,
                "-m",
                "torchscope",
                "report",
                str(job),
                "--html",
                str(html),
                "--engine",
                args.engine,
            ],
            tmp,
        )
        if ours["rc"] != 0:
            print(ours["stderr"])
        straggler = next(
            (ln for ln in ours["stdout"].splitlines() if ln.startswith("straggler:")), "straggler: -"
        )
        ideal = args.ranks * one_load / cores
        print(
            f"ranks={args.ranks} gz={json_mb:.0f} MB cores={cores} one_load={one_load:.2f}s\n"
            f"ours: {ours['secs']:.1f} s, peak RSS (tree) {ours['peak_mb']:.0f} MB, HTML "
            f"{html.stat().st_size / 2**20:.2f} MB, {ours['lines']} terminal lines, "
            f"wall / ((ranks x one load) / cores) = {ours['secs'] / ideal:.2f}\n  {straggler}"
        )
        if args.hta:
            env = {**os.environ, "PYTHONWARNINGS": "ignore"}
            hta = measure([sys.executable, "-c", HTA_SCRIPT.format(cap=HTA_MEMORY_CAP), str(job)], tmp, env)
            if hta["rc"] != 0:
                print(f"HTA failed (rc {hta['rc']}): {hta['stderr'][-600:]}")
            print(
                f"HTA:  {hta['secs']:.1f} s, peak RSS (tree) {hta['peak_mb']:.0f} MB\n"
                f"ours vs HTA: {hta['secs'] / ours['secs']:.1f}x faster, "
                f"{ours['peak_mb'] / max(hta['peak_mb'], 1):.2f} of its peak memory"
            )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
