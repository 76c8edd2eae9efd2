"""``tensorboard_trace_handler``: write each finished cycle where TensorBoard and HTA look.

The file name is torch's, ``{worker}.{time_ns}.pt.trace.json[.gz]`` with the worker defaulting
to ``{hostname}_{pid}``, so the TensorBoard profiler plugin, HTA and ``torchscope report``
read a log directory written by us exactly like one written by torch. Torch-free: it only
calls the profiler's ``export_chrome_trace``.

Every file is written whole or not at all (``writes.write_atomically``, also when ``prof`` is
torch's own profiler): on a full disk torch's handler left a truncated trace and a 0-byte one,
which every reader then refuses.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from torchscope.errors import CycleLostError, warn_user, why_unwritable
from torchscope.writes import write_atomically


def tensorboard_trace_handler(
    dir_name: str,
    worker_name: str | None = None,
    use_gzip: bool = False,
    use_python_export: bool = False,
) -> Callable[[Any], None]:
    """An ``on_trace_ready`` callback that saves each cycle's trace into ``dir_name``."""

    def handler_fn(prof: Any) -> None:
        nonlocal worker_name
        if not os.path.isdir(dir_name):
            try:
                os.makedirs(dir_name, exist_ok=True)
            except Exception as exc:
                raise RuntimeError("Can't create directory: " + dir_name) from exc
        if not worker_name:
            worker_name = f"{socket.gethostname()}_{os.getpid()}"
        file_name = f"{worker_name}.{time.time_ns()}.pt.trace.json"
        if use_gzip:
            file_name += ".gz"
        target = os.path.join(dir_name, file_name)
        try:
            write_atomically(target, lambda tmp: prof.export_chrome_trace(str(tmp)))
        except CycleLostError:
            pass  # Kineto gave no trace for this cycle, and a warning said why: no empty file
        except OSError as exc:
            # as torch's handler (Kineto logs "Failed to write" and returns): a full disk loses
            # this cycle's file, not the training run it is profiling
            warn_user(
                f"torchscope: could not write {target}: {why_unwritable(Path(target), exc)};"
                " this cycle's trace is lost, the run goes on"
            )

    return handler_fn
