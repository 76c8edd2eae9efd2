"""Read one trace file in a child process and save it to our store: ``python -m torchscope.trace._worker``.

``load`` of a directory with large ranks reads them in parallel in fresh interpreters (the
JSON decode holds the GIL, so threads would take turns). A fresh ``python -m`` process,
unlike a ``multiprocessing`` worker, never re-imports the user's ``__main__`` script; the
parent reads the saved Parquet back in a fraction of the time the JSON took.
"""

from __future__ import annotations

import sys
from pathlib import Path

from torchscope.errors import TraceError
from torchscope.trace.reader import read_chrome
from torchscope.trace.store import save_trace


def main(argv: list[str]) -> int:
    source, target = argv
    try:
        save_trace(read_chrome(source), Path(target))
    except TraceError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
