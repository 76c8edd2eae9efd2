"""``torchscope table``: torch's ``key_averages().table()`` for any trace file, without torch.

Same columns, sort keys and grouping options as torch, so a table made from a trace copied
off a cluster reads like the one the training script would have printed.
"""

from __future__ import annotations

import argparse

from torchscope.cli.base import EXIT_OK
from torchscope.cli.common import load_single, print_json, progress
from torchscope.errors import TraceError


class TableCommand:
    name = "table"
    help = "Print torch's key-averages table for a trace file."
    epilog = """examples:
  torchscope table trace.json.gz
  torchscope table trace.json.gz --sort-by self_cpu_time_total --row-limit 20
  torchscope table trace.json.gz --group-by-input-shape
  torchscope table trace.json.gz --group-by-stack 5 --json"""

    def configure(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("path", metavar="TRACE", help="a trace file")
        parser.add_argument(
            "--sort-by", default=None, help="a torch sort key, e.g. cpu_time_total, self_cuda_time_total"
        )
        parser.add_argument(
            "--row-limit", type=int, default=30, help="rows to print (default 30; -1 for all)"
        )
        parser.add_argument(
            "--group-by-input-shape", action="store_true", help="one row per op and input shapes"
        )
        parser.add_argument(
            "--group-by-stack", type=int, default=0, metavar="N", help="group by the top N Python frames"
        )
        parser.add_argument(
            "--json", action="store_true", help="the rows as JSON (times in us, memory in bytes)"
        )

    def run(self, args: argparse.Namespace) -> int:
        from torchscope.analysis.key_averages import key_averages

        trace = load_single(args.path)
        with progress("averaging"):
            ka = key_averages(
                trace, group_by_input_shape=args.group_by_input_shape, group_by_stack_n=args.group_by_stack
            )
        if args.json:
            frame = ka.to_polars()
            if args.sort_by:
                from torchscope.render.torch_table import sort_column

                key = sort_column(args.sort_by)
                if key in frame.columns:
                    frame = frame.sort(key, descending=True)
            if args.row_limit >= 0:
                frame = frame.head(args.row_limit)
            print_json(frame.to_dicts())
        else:
            try:
                text = ka.table(sort_by=args.sort_by, row_limit=args.row_limit)
            except AttributeError as exc:  # torch's error for an unknown sort key
                raise TraceError("--sort-by", str(exc)) from None
            print(text)
        return EXIT_OK


COMMAND = TableCommand()
