"""A progress display for long loads that stays silent on short ones and in pipes.

Loading a 1 GB trace takes a while; loading a normal one takes a fraction of a second and
should print nothing. So the bar appears only when stderr is a terminal *and* the work has
already taken more than a second (a timer thread starts it), and it vanishes when done.
"""

from __future__ import annotations

import sys
import threading
from types import TracebackType
from typing import Any

DELAY_S = 1.0
_NEXT = {
    "inflate": "decoding JSON",
    "decode": "building columns",
    "columns": "linking events",
    "derive": "done",
}


class LoadProgress:
    """``with LoadProgress("trace.json", total=None) as p: ... p.phase("decode") / p.advance()``."""

    def __init__(self, label: str, total: int | None = None, enabled: bool | None = None) -> None:
        self.label = label
        self.total = total
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self._lock = threading.Lock()
        self._progress: Any = None
        self._task: Any = None
        self._text = "reading"
        self._done = 0
        self._timer: threading.Timer | None = None
        self._closed = False

    def __enter__(self) -> LoadProgress:
        if self.enabled:
            self._timer = threading.Timer(DELAY_S, self._start)
            self._timer.daemon = True
            self._timer.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        with self._lock:
            self._closed = True
            if self._timer is not None:
                self._timer.cancel()
            if self._progress is not None:
                self._progress.stop()

    @property
    def shown(self) -> bool:
        return self._progress is not None

    def _start(self) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            SpinnerColumn,
            TextColumn,
            TimeElapsedColumn,
        )

        with self._lock:
            if self._closed:
                return
            columns: list[Any] = [SpinnerColumn(), TextColumn("{task.description}")]
            if self.total:
                columns += [BarColumn(), MofNCompleteColumn()]
            columns.append(TimeElapsedColumn())
            self._progress = Progress(*columns, console=Console(stderr=True), transient=True)
            self._task = self._progress.add_task(self._description(), total=self.total, completed=self._done)
            self._progress.start()

    def _description(self) -> str:
        return f"{self.label}: {self._text}"

    def phase(self, finished: str) -> None:
        """A reader phase finished (the ``on_phase`` callback of ``read_chrome``)."""
        with self._lock:
            self._text = _NEXT.get(finished, finished)
            if self._progress is not None:
                self._progress.update(self._task, description=self._description())

    def advance(self, text: str | None = None) -> None:
        """One more file of a directory is loaded."""
        with self._lock:
            self._done += 1
            if text is not None:
                self._text = text
            if self._progress is not None:
                self._progress.update(self._task, completed=self._done, description=self._description())
