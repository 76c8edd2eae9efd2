"""``torchscope table``: torch's ``key_averages().table()`` for any trace file, without torch.

Same columns, sort keys and grouping options as torch, so a table made from a trace copied
off a cluster reads like the one the training script would have printed.
"""

from __future__ import annotations

import argparse

from torchscope.cli.base import EXIT_OK
from torchscope.cli.common import (
    input_warnings,
    load_single,
    print_json,
    progress,
    read_early,
    warn_on_stderr,
    whole_number,
)


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
            "--row-limit", type=whole_number, default=30, help="rows to print (default 30; -1 for all)"
        )
        parser.add_argument(
            "--group-by-input-shape", action="store_true", help="one row per op and input shapes"
        )
        parser.add_argument(
            "--tensor-list-shapes",
            action="store_true",
            help="with --group-by-input-shape: key tensor-list arguments (aten::cat's inputs) by "
            "their tensors' shapes; torch shows them as []",
        )
        parser.add_argument(
            "--group-by-stack", type=int, default=0, metavar="N", help="group by the top N Python frames"
        )
        parser.add_argument(
            "--no-python-frames",
            action="store_true",
            help="leave out the Python frames of with_stack=True, as torch 2.11 and older print the table",
        )
        parser.add_argument(
            "--json", action="store_true", help="the rows as JSON (times in us, memory in bytes)"
        )

    def run(self, args: argparse.Namespace) -> int:
        early = read_early(args.path)  # before the imports below, which it overlaps
        from torchscope.compat import TableOptions, key_averages
        from torchscope.compat.table import sorted_rows

        trace = load_single(args.path, early)
        warn_on_stderr(self.name, input_warnings(trace))  # a truncated file: say what was read
        options = TableOptions(sort_by=args.sort_by, row_limit=args.row_limit)
        with progress("averaging"):
            ka = key_averages(
                trace,
                group_by_input_shape=args.group_by_input_shape,
                group_by_stack_n=args.group_by_stack,
                tensor_list_shapes=args.tensor_list_shapes,
                python_functions=not args.no_python_frames,
            )
        if args.json:  # the rows the table would show, in its order
            frame = sorted_rows(ka.to_polars(), options)
            print_json(frame.to_dicts())
        else:
            # an unknown --sort-by is a UsageError: one line, exit 2
            table = ka.for_terminal().render(options)
            if len(ka) == 0:  # torch's table of no events is "": say why nothing is printed
                kinds = trace.events["kind"].value_counts(sort=True).head(3)
                held = ", ".join(f"{n:,} '{k}' events" for k, n in kinds.iter_rows()) or "no events"
                warn_on_stderr(self.name, [f"{args.path}: no operator events to tabulate (the trace holds {held})"])
            else:
                print(table)
        return EXIT_OK


COMMAND = TableCommand()
