"""``torchscope export``: a trace to another format: Chrome/Perfetto JSON, our Parquet store, or folded stacks.

Folded stacks (``frame;frame;frame value``, value in microseconds of self time) are what
flame-graph tools (flamegraph.pl, speedscope, inferno) read.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from torchscope.cli.base import EXIT_OK
from torchscope.cli.common import (
    input_warnings,
    load_single,
    output_target,
    print_json,
    progress,
    read_early,
    warn_on_stderr,
)
from torchscope.writes import write_atomically

FORMATS = ("chrome", "parquet", "stacks")


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
        if args.output:
            output_target("-o", args.output, args.path)  # never the input: refused before any work
        trace = load_single(args.path, read_early(args.path))
        # a cut file's export is a clean-looking whole trace: say what was read, as table does
        warnings = input_warnings(trace)
        warn_on_stderr(self.name, warnings)
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
                from torchscope.analysis.flame import DEEPER, STACK_DEPTH_CAP, folded_stacks

                lines = folded_stacks(trace)
                if any(p.endswith(DEEPER) for p, _ in lines):
                    capped = f"stacks deeper than {STACK_DEPTH_CAP:,} frames end in one frame '{DEEPER}' with their time"
                    warnings.append(capped)
                    warn_on_stderr(self.name, [capped])
                text = "".join(f"{p} {v}\n" for p, v in lines)
                written = write_atomically(out, lambda tmp: tmp.write_text(text, encoding="utf-8"))
                detail = {"stacks": len(lines)}
        if args.json:
            print_json({"format": args.to, "path": str(written), **detail, "warnings": warnings})
        else:
            print(f"wrote {written} ({args.to}, {', '.join(f'{v:,} {k}' for k, v in detail.items())})")
        return EXIT_OK


COMMAND = ExportCommand()
