"""A progress display for long loads that stays silent on short ones and in pipes.

Loading a 1 GB trace takes a while; loading a normal one takes a fraction of a second and
should print nothing. So the display appears only when stderr is a terminal *and* the work has
already taken more than a second (a timer thread starts it), and it vanishes when done. It is
a bar where the amount of work is known: a directory's files, a large file's pieces (which
the reader announces once it has cut the file); otherwise the phase and the time so far.
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
        from rich.progress import Progress

        with self._lock:
            if self._closed:
                return
            self._progress = Progress(*self._columns(), console=Console(stderr=True), transient=True)
            self._task = self._progress.add_task(self._description(), total=self.total, completed=self._done)
            self._progress.start()

    def _columns(self) -> list[Any]:
        from rich.progress import BarColumn, MofNCompleteColumn, SpinnerColumn, TextColumn, TimeElapsedColumn

        columns: list[Any] = [SpinnerColumn(), TextColumn("{task.description}")]
        if self.total:
            columns += [BarColumn(), MofNCompleteColumn()]
        return [*columns, TimeElapsedColumn()]

    def _description(self) -> str:
        return f"{self.label}: {self._text}"

    def phase(self, finished: str) -> None:
        """A reader phase finished (the ``on_phase`` callback of ``read_chrome``). While a large
        file's pieces are read, each piece ends a decode and a columns phase: the display stays
        on the pieces (it went back and forth between "building columns" and "linking events")."""
        with self._lock:
            if self.total and self._done < self.total and finished in ("decode", "columns"):
                return
            self._text = _NEXT.get(finished, finished)
            if self._progress is not None:
                self._progress.update(self._task, description=self._description())

    def piece(self, done: int, total: int) -> None:
        """``done`` of a large file's ``total`` pieces are read (``read_chrome``'s ``on_piece``)."""
        with self._lock:
            self.total, self._done = total, done
            self._text = "reading its pieces"
            if self._progress is not None:
                self._progress.columns = tuple(self._columns())  # a bar, now that there is a total
                self._progress.update(self._task, total=total, completed=done, description=self._description())

    def advance(self, text: str | None = None) -> None:
        """One more file of a directory is loaded."""
        with self._lock:
            self._done += 1
            if text is not None:
                self._text = text
            if self._progress is not None:
                self._progress.update(self._task, completed=self._done, description=self._description())
