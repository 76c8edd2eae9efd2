"""Entry point of the ``torchscope`` command: dispatches to one module per subcommand."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from torchscope.cli.base import EXIT_BAD_INPUT, Command
from torchscope.errors import TraceError, UsageError, WriteError
from torchscope.startup import command_without_gc, one_blas_thread

# name -> module; each module defines COMMAND (see cli.base.Command).
SUBCOMMANDS: dict[str, str] = {
    "run": "torchscope.cli.run",
    "report": "torchscope.cli.report",
    "table": "torchscope.cli.table",
    "diff": "torchscope.cli.diff",
    "serve": "torchscope.cli.serve",
    "export": "torchscope.cli.export",
    "accuracy": "torchscope.cli.accuracy",
    "demo": "torchscope.cli.demo",
}


def _load(module: str) -> Command | None:
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name == module:
            return None
        raise
    return mod.COMMAND  # type: ignore[no-any-return]


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="torchscope",
        description="Profile PyTorch programs and analyse any PyTorch profiler trace.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, module in SUBCOMMANDS.items():
        if only is not None and name != only:
            # keep --help listing cheap: register the name with a placeholder
            sub.add_parser(name, add_help=False)
            continue
        command = _load(module)
        if command is None:
            continue
        p = sub.add_parser(
            name,
            help=command.help,
            description=command.help,
            epilog=command.epilog,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        command.configure(p)
        p.set_defaults(_command=command)
    return parser


# commands that only read traces and exit: set up as ``startup`` says
ONE_SHOT = ("report", "table", "diff", "export")


def main(argv: Sequence[str] | None = None) -> int:
    """The command line ``argv`` (default: this process's own, which then ends with it)."""
    ends_process = argv is None
    argv = list(sys.argv[1:] if argv is None else argv)
    first = next((a for a in argv if not a.startswith("-")), None)
    if first in ONE_SHOT:
        one_blas_thread()  # before anything imports NumPy
        with command_without_gc(ends_process):
            return _main(argv, first)
    return _main(argv, first)


def _main(argv: list[str], first: str | None) -> int:
    parser = build_parser(only=first if first in SUBCOMMANDS else None)
    args = parser.parse_args(argv)
    command: Command | None = getattr(args, "_command", None)
    if command is None:
        parser.print_help()
        return EXIT_BAD_INPUT if argv else 0
    args._argv = argv  # the command line as given (run.json records it whole)
    try:
        return command.run(args)
    except (TraceError, UsageError, WriteError) as exc:  # bad input, argument or output: one line, exit 2
        print(f"torchscope {command.name}: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        return 130
    except MemoryError:  # one line, not a traceback from deep inside (what was built is freed)
        print(
            f"torchscope {command.name}: error: out of memory: this input needs more memory than the"
            " process could get",
            file=sys.stderr,
        )
        return 1
    except BrokenPipeError:
        # the reader of our output stopped early (``| head``): not an error; what is left goes
        # nowhere, so the interpreter's flush at exit does not raise again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
