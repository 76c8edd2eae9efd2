"""``torchscope accuracy run|dump|compare``: find the first op where a device or dtype diverges.

``run`` executes a script (or one of our example models) under a live comparison against a
reference; ``dump`` records a run into a dump directory; ``compare`` compares two dumps, from
two machines, offline. All three print the findings, or ``--json`` (the dashboard's section).
"""

from __future__ import annotations

import argparse
import json
import os
import runpy
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from torchscope.cli.base import EXIT_OK
from torchscope.cli.common import at_least_one
from torchscope.errors import TraceError, UsageError

EXIT_DIVERGED = 1
MODELS = ("resnet18", "transformer_block", "mlp")


def _add_workload(p: argparse.ArgumentParser) -> None:
    p.add_argument("script", nargs="?", help="a Python script to run: options first, then SCRIPT -- ARGS")
    p.add_argument("script_args", nargs="*", help=argparse.SUPPRESS)
    p.add_argument(
        "--model", choices=MODELS, help="run one of torchscope's example models instead of a script"
    )
    p.add_argument("--dtype", default="float32", help="the example model's dtype (default float32)")
    p.add_argument("--input", default=None, help="the example model's input shape, e.g. 1,3,32,32")
    p.add_argument("--no-backward", action="store_true", help="forward only (default: forward and backward)")
    p.add_argument("--train", action="store_true", help="example model in training mode (default eval)")
    p.add_argument("--seed", type=int, default=0, help="seed of weights and input (default 0)")
    p.add_argument("--include", action="append", default=[], metavar="PATTERN", help="only ops matching")
    p.add_argument("--exclude", action="append", default=[], metavar="PATTERN", help="skip ops matching")
    p.add_argument("--with-stack", action="store_true", help="record each forward op's Python call site")


def _add_output(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print the findings as JSON (the dashboard's section)")
    p.add_argument("--top", type=at_least_one, default=10, help="ops in the terminal table (default 10)")
    p.add_argument("--check", action="store_true", help="exit with code 1 when a first divergence is found")
    p.add_argument("--html", metavar="FILE", help="also write the dashboard (its Accuracy view) to FILE")


def _tolerances(items: list[str], live: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items:
        pattern, _, value = item.partition("=")
        try:
            nums = [float(v) for v in value.split(",") if v]
        except ValueError:
            nums = []
        if not pattern or not nums or len(nums) > 2:
            raise TraceError("--tol", f"expected PATTERN=RTOL[,ATOL], got {item!r}")
        out[pattern] = (nums[0], nums[1] if len(nums) > 1 else 0.0) if live else nums[0]
    return out


def _workload(args: argparse.Namespace) -> tuple[Callable[[], None], Any]:
    """A function running the user's workload, and the model (for module paths) when known."""
    if args.model:
        import torch

        from torchscope import models

        torch.manual_seed(args.seed)
        model = getattr(models, args.model)()
        model = model.train() if args.train else model.eval()
        default = {"resnet18": "1,3,32,32", "transformer_block": "2,16,256", "mlp": "4,512"}[args.model]
        try:
            shape = [int(s) for s in (args.input or default).split(",")]
            dtype = getattr(torch, args.dtype)
        except (ValueError, AttributeError):
            raise TraceError("--input/--dtype", f"bad shape {args.input!r} or dtype {args.dtype!r}") from None
        x = torch.randn(*shape, dtype=torch.float64).to(dtype)
        model = model.to(dtype)

        def run_model() -> None:
            out = model(x)
            if not args.no_backward:
                out.float().sum().backward()

        return run_model, model
    if not args.script:
        raise UsageError("name a script to run, or --model")
    path = Path(args.script)
    if not path.is_file():
        raise TraceError(str(path), "no such script")
    script_args = [a for a in args.script_args if a != "--"]

    def run_script() -> None:
        saved = sys.argv
        sys.argv = [str(path), *script_args]
        try:
            runpy.run_path(str(path), run_name="__main__")
        except SystemExit as exc:  # a script that ends with sys.exit(0) still gets its findings
            if exc.code not in (None, 0):
                raise
        finally:
            sys.argv = saved

    return run_script, None


PIPED_WIDTH = 140  # the width ``report`` uses when stdout is not a terminal


def _print_full_width(show: Callable[[], None]) -> None:
    """Run ``show`` with rich at full width when stdout is a file or pipe.

    rich falls back to 80 columns off a terminal, which squeezed the op table into 7-character
    cells in ``torchscope accuracy run ... > f``; rich reads ``COLUMNS``, so it is set for the call.
    """
    if sys.stdout.isatty() or "COLUMNS" in os.environ:
        show()
        return
    os.environ["COLUMNS"] = str(PIPED_WIDTH)
    try:
        show()
    finally:
        os.environ.pop("COLUMNS", None)


def _finish(result: Any, args: argparse.Namespace) -> int:
    from torchscope.accuracy.report import accuracy_section, dashboard_payload, print_result

    if args.html:
        from torchscope.render.html import write_html

        write_html(dashboard_payload(result), args.html)
    if args.json:
        json.dump(accuracy_section(result), sys.stdout, indent=1, default=str, allow_nan=False)
        sys.stdout.write("\n")
    else:
        _print_full_width(lambda: print_result(result, top=args.top))
    # an op or a module: a bug written in Python (a module's forward scaled by 1.001) diverges
    # modules with no op to blame, and the gate passed it
    diverged = result.first_divergence is not None or result.first_module_divergence is not None
    return EXIT_DIVERGED if args.check and diverged else EXIT_OK


class AccuracyCommand:
    name = "accuracy"
    help = "Compare a run op by op against a reference: find the first op that diverges."
    epilog = """examples:
  torchscope accuracy run --model resnet18 --dtype bfloat16
  torchscope accuracy run --json train.py -- --steps 1
  torchscope accuracy dump out_a --model transformer_block --dtype float16
  torchscope accuracy dump out_b --model transformer_block --dtype float64
  torchscope accuracy compare out_a out_b --json"""

    def configure(self, parser: argparse.ArgumentParser) -> None:
        sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
        run = sub.add_parser("run", help="live compare: every op also runs on a reference")
        _add_workload(run)
        run.add_argument("--reference-device", default="cpu", help="device of the reference (default cpu)")
        run.add_argument(
            "--reference-dtype", default="float64", help="dtype of the reference, or 'same' (default float64)"
        )
        run.add_argument(
            "--tol", action="append", default=[], metavar="PATTERN=RTOL[,ATOL]", help="per-op tolerance"
        )
        _add_output(run)
        dump = sub.add_parser("dump", help="record every op's inputs and outputs into a dump directory")
        dump.add_argument("out", help="the dump directory to write")
        _add_workload(dump)
        dump.add_argument(
            "--tensors",
            action="append",
            default=[],
            metavar="PATTERN",
            help="also save full tensors of matching ops ('*': all)",
        )
        dump.add_argument(
            "--level",
            choices=("all", "op", "module"),
            default="all",
            help="record ops, nn.Module calls, or both (default all)",
        )
        dump.add_argument("--json", action="store_true", help="print the dump's meta.json")
        compare = sub.add_parser("compare", help="compare two dumps (target, reference) offline")
        compare.add_argument("target", help="the dump under test")
        compare.add_argument("reference", help="the reference dump")
        compare.add_argument(
            "--tol", action="append", default=[], metavar="PATTERN=RTOL", help="per-op relative L2 tolerance"
        )
        compare.add_argument(
            "--include", action="append", default=[], metavar="PATTERN", help="only ops matching"
        )
        compare.add_argument(
            "--exclude", action="append", default=[], metavar="PATTERN", help="skip ops matching"
        )
        _add_output(compare)

    def run(self, args: argparse.Namespace) -> int:
        if args.action == "compare":
            from torchscope.accuracy.offline import compare_dumps

            result = compare_dumps(
                args.target,
                args.reference,
                overrides=_tolerances(args.tol, live=False),
                include=args.include,
                exclude=args.exclude,
            )
            return _finish(result, args)
        fn, model = _workload(args)
        ctx: AbstractContextManager[Any]
        if args.action == "dump":
            from torchscope.accuracy.dump import dump

            save: list[str] | bool = True if "*" in args.tensors else list(args.tensors)
            ctx = dump(
                args.out,
                model,
                level=args.level,
                tensors=save,
                include=args.include,
                exclude=args.exclude,
                with_stack=args.with_stack,
            )
            with ctx:
                fn()
            meta = json.loads((Path(args.out) / "meta.json").read_text())
            if args.json:
                json.dump(meta, sys.stdout, indent=1)
                sys.stdout.write("\n")
            else:
                print(
                    f"dump: {args.out}: {meta['ops']} ops, {meta['modules']} module calls, "
                    f"{meta['tensors']} tensors, {meta['saved_tensors']} saved"
                )
            return EXIT_OK
        from torchscope.accuracy.live import compare

        ref_dtype = None if args.reference_dtype == "same" else args.reference_dtype
        ctx = compare(
            model,
            reference_device=args.reference_device,
            reference_dtype=ref_dtype,
            overrides=_tolerances(args.tol, live=True),
            include=args.include,
            exclude=args.exclude,
            with_stack=args.with_stack,
        )
        with ctx as result:
            fn()
        return _finish(result, args)


COMMAND = AccuracyCommand()
