"""Benchmark: loading one trace far larger than the shared ones, streamed vs held whole.

Writes (once, into ``--dir``) a Kineto trace of ``--copies`` copies of
``other_devices/mtia_training_large.json.gz``'s events, each shifted in time after the one
before, gzipped, the way Kineto writes it (one event a line). Then loads it in fresh processes:

  streamed  ``torchscope.load`` as shipped: a text over 64 MB is read as it inflates, in pieces,
            and never held whole (``trace.files.TextStream``)
  whole     the same with the text held whole first (how every file was read before streaming:
            inflated into one buffer, then scanned in pieces)

and prints wall seconds, peak RSS, the size of the text and of the events table, and peak RSS
over the events table (what "memory bounded by the result, not the text" means). Run:

  .venv/bin/python benchmarks/large_file.py [--copies 14] [--dir /tmp/torchscope-large]

14 copies are 1.2 GB of text (62 MB gzipped, 1.9M events).
"""

from __future__ import annotations

import argparse
import functools
import gzip
import json
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT.parent / "shared" / "traces" / "other_devices" / "mtia_training_large.json.gz"
_TS = re.compile(rb'"ts": ([0-9.]+)')


def write_trace(path: Path, copies: int) -> int:
    """The large trace at ``path``; returns the size of its text."""
    text = gzip.decompress(SOURCE.read_bytes())
    lo = text.index(b"[", text.index(b'"traceEvents"')) + 1
    hi = text.index(b"\n  ]", lo)  # the list's end: the keys after it hold lists of their own
    head, body, tail = text[:lo], text[lo:hi].rstrip(), text[hi:]
    stamps = [float(m) for m in _TS.findall(body)]
    stamps = [t for t in stamps if t > 1e6]  # (instants at 0 mark the record window)
    span = max(stamps) - min(stamps) + 1000.0
    with gzip.open(path, "wb", compresslevel=1) as f:
        size = f.write(head)
        for copy in range(copies):
            shift = copy * span
            size += f.write(body if copy == 0 else b"," + _TS.sub(functools.partial(_shifted, shift), body))
        size += f.write(b"\n" + tail)
    return size


def _shifted(shift: float, m: re.Match[bytes]) -> bytes:
    return b'"ts": %.3f' % (float(m[1]) + shift)


def child(path: str, mode: str) -> None:
    import resource

    from torchscope.trace import files

    if mode == "whole":  # the prefetch holds the text whole, as every file was read before
        files.open_text = functools.partial(files.open_text, whole_up_to=1 << 40)
    import torchscope

    t = time.perf_counter()
    trace = torchscope.load(path)
    wall = time.perf_counter() - t
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        json.dumps(
            {
                "wall": wall,
                "peak_mb": peak,
                "events": trace.events.height,
                "events_mb": trace.events.estimated_size("mb"),
            }
        )
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--copies", type=int, default=14)
    ap.add_argument("--dir", default="/tmp/torchscope-large")
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(*args.child)
        return
    out = Path(args.dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"mtia_x{args.copies}.json.gz"
    if not path.exists():
        t = time.perf_counter()
        size = write_trace(path, args.copies)
        print(f"wrote {path} ({size / 2**20:,.0f} MB of text) in {time.perf_counter() - t:.0f} s")
    with gzip.open(path) as f:
        text_mb = sum(len(b) for b in iter(lambda: f.read(1 << 24), b"")) / 2**20
    print(f"{path.name}: {path.stat().st_size / 2**20:,.0f} MB on disk, {text_mb:,.0f} MB of text")
    got = {}
    for mode in ("streamed", "whole"):
        run = subprocess.run(
            [sys.executable, __file__, "--child", str(path), mode], capture_output=True, text=True, check=True
        )
        got[mode] = r = json.loads(run.stdout.strip().splitlines()[-1])
        print(
            f"  {mode:9s} {r['wall']:6.2f} s  peak RSS {r['peak_mb']:7,.0f} MB  {r['events']:,} events,"
            f" table {r['events_mb']:,.0f} MB: peak {r['peak_mb'] / r['events_mb']:.1f}x the table,"
            f" {r['peak_mb'] / text_mb:.2f}x the text"
        )
    s, w = got["streamed"], got["whole"]
    print(
        f"  streamed vs whole: {w['wall'] / s['wall']:.2f}x faster, {s['peak_mb'] / w['peak_mb']:.2f}x the peak"
    )


if __name__ == "__main__":
    main()
