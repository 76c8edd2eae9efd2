"""``torchscope export``: a trace to another format: Chrome/Perfetto JSON, our Parquet store, or folded stacks.

Folded stacks (``frame;frame;frame value``, value in microseconds of self time) are what
flame-graph tools (flamegraph.pl, speedscope, inferno) read.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import polars as pl

from torchscope.cli.base import EXIT_OK
from torchscope.cli.common import load_single, print_json, progress
from torchscope.trace.derive import overhead_holders, profiler_overhead
from torchscope.trace.model import Trace
from torchscope.trace.schema import HOST_KINDS

FORMATS = ("chrome", "parquet", "stacks")


def folded_stacks(trace: Trace) -> list[tuple[str, int]]:
    """Host self time per call path, ``(path, self_us)``, paths as ``root;...;leaf`` per thread.

    Every host event is a frame, the runtime calls too (``cudaStreamSynchronize`` under an
    ``.item()``, ``cudaMemcpyAsync`` under a copy: their time is not their op's self time, so
    leaving them out lost it), and so is Kineto's own buffer request, under the op it ran in."""
    every = trace.events
    host = every["kind"].is_in(HOST_KINDS)
    nesting = every["parent"].fill_null(-1).to_numpy().astype(np.int64)
    rows, held_by = overhead_holders(every, host.to_numpy(), nesting)
    nesting[rows] = held_by  # Kineto's buffer request: under the op it ran in
    ev = every.with_columns(pl.Series("parent", nesting)).filter(host | profiler_overhead(every))
    if ev.height == 0:
        return []
    ids = ev["id"].to_numpy()
    pos = {int(i): k for k, i in enumerate(ids.tolist())}
    parent = ev["parent"].fill_null(-1).to_list()
    names = [n.replace(";", ":") for n in ev["name"].cast(pl.String).fill_null("?").to_list()]
    self_ns = ev["self_ns"].fill_null(0).to_numpy()
    tid = ev["tid"].to_list()
    paths: list[str] = [""] * ev.height
    for k in range(ev.height):  # rows are sorted by start: a parent precedes its children
        up = pos.get(parent[k], -1) if parent[k] is not None and parent[k] >= 0 else -1
        paths[k] = (paths[up] if up >= 0 else f"thread {tid[k]}") + ";" + names[k]
    frame = pl.DataFrame({"path": paths, "self_ns": self_ns.astype(np.int64)})
    agg = frame.group_by("path").agg(pl.col("self_ns").sum()).sort("path")
    return [(p, int(ns // 1000)) for p, ns in agg.iter_rows() if ns >= 1000]


class ExportCommand:
    name = "export"
    help = "Convert a trace: --to chrome (Perfetto), parquet (our store), or stacks (flame graph)."
    epilog = """examples:
  torchscope export trace.json.gz --to chrome -o trace.chrome.json.gz
  torchscope export trace.json.gz --to parquet -o trace.store
  torchscope export trace.json.gz --to stacks -o trace.folded && flamegraph.pl trace.folded > fg.svg"""

    def configure(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("path", metavar="TRACE", help="a trace file or our store directory")
        parser.add_argument("--to", required=True, choices=FORMATS, help="the output format")
        parser.add_argument(
            "-o", "--output", metavar="PATH", help="where to write (default: beside the input's name, here)"
        )
        parser.add_argument("--json", action="store_true", help="print what was written as JSON")

    def run(self, args: argparse.Namespace) -> int:
        trace = load_single(args.path)
        stem = Path(args.path).name.removesuffix(".gz").removesuffix(".json")
        default = {"chrome": f"{stem}.chrome.json.gz", "parquet": f"{stem}.store", "stacks": f"{stem}.folded"}
        out = Path(args.output or default[args.to])
        with progress(f"writing {out}"):
            if args.to == "chrome":
                written = trace.to_chrome(out)
                detail = {"events": trace.events.height}
            elif args.to == "parquet":
                written = trace.save(out)
                detail = {"events": trace.events.height}
            else:
                lines = folded_stacks(trace)
                out.write_text("".join(f"{p} {v}\n" for p, v in lines), encoding="utf-8")
                written = out
                detail = {"stacks": len(lines)}
        if args.json:
            print_json({"format": args.to, "path": str(written), **detail})
        else:
            print(f"wrote {written} ({args.to}, {', '.join(f'{k} {v:,}' for k, v in detail.items())})")
        return EXIT_OK


COMMAND = ExportCommand()
