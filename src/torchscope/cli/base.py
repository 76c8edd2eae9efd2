"""The one small protocol every ``torchscope`` subcommand implements.

A subcommand is a module in ``torchscope.cli`` exposing ``COMMAND``, an object with a
``name``, a one-line ``help``, an ``epilog`` of examples, ``configure(parser)`` and
``run(args) -> int``. ``cli.main`` discovers them from ``SUBCOMMANDS`` and imports each only
when it is used, so ``torchscope --help`` stays fast and torch is never imported needlessly.
"""

from __future__ import annotations

import argparse
from typing import Protocol

EXIT_OK = 0
EXIT_BAD_INPUT = 2


class Command(Protocol):
    name: str
    help: str
    epilog: str

    def configure(self, parser: argparse.ArgumentParser) -> None:
        """Add this command's arguments."""

    def run(self, args: argparse.Namespace) -> int:
        """Do the work; return the process exit code."""
