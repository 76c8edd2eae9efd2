"""Notebooks: rich display of traces and tables, the dashboard inline, and a ``%%torchscope`` cell magic.

- In IPython/Jupyter a ``Trace`` or ``TraceSet`` shows as our report summary in HTML and a
  ``KeyAverages`` as a table (formatters registered by type name when ``torchscope`` is imported
  inside IPython, or by ``%load_ext torchscope``: nothing is imported for it).
- ``torchscope.show(x)`` embeds the whole dashboard under the cell: ``x`` is a ``Trace``, a
  ``TraceSet``, a trace path, a profiler, or a payload/report dict. The page is the offline
  ``report.html`` in a sandboxed ``<iframe srcdoc>`` (scripts run, nothing is fetched; no
  network, no same-origin access to the notebook).
- ``%load_ext torchscope`` adds ``%%torchscope``: the cell runs under ``torchscope.profile``
  (``%%torchscope --memory --stack`` for those options) and its summary is shown below it; the
  profiler is left in the notebook's namespace as ``_torchscope``.
"""

from __future__ import annotations

import contextlib
import html
import io
from collections.abc import Iterator
from typing import Any

FORMATTED_TYPES = (
    ("torchscope.trace.model", "Trace"),
    ("torchscope.trace.model", "TraceSet"),
    ("torchscope.compat.averages", "KeyAverages"),
)


def _payload(x: Any, *, views: bool = True) -> dict[str, Any]:
    """The dashboard payload of whatever the user has in hand."""
    from pathlib import Path

    from torchscope.render.payload import build_payload
    from torchscope.trace.model import Trace, TraceSet

    if isinstance(x, dict):
        return x
    if isinstance(x, (str, Path)):
        from torchscope.trace.loader import load

        x = load(x)
    if hasattr(x, "trace") and callable(x.trace) and not isinstance(x, (Trace, TraceSet)):  # a profiler
        traces = x.traces()
        x = traces[0] if len(traces) == 1 else TraceSet({f"cycle{i}": t for i, t in enumerate(traces)})
    if not isinstance(x, (Trace, TraceSet)):
        raise TypeError(
            f"torchscope.show: cannot show a {type(x).__name__}; give a Trace, TraceSet, path or profiler"
        )
    return build_payload(x, views=views)


def summary_html(x: Any) -> str:
    """Our terminal summary of ``x`` as HTML (colours kept, no scripts)."""
    from rich.console import Console

    from torchscope.render.console import print_summary

    # force_jupyter=False: inside a kernel rich would also send every print to the notebook,
    # and the summary would appear twice (once as terminal text, once as this HTML)
    console = Console(record=True, width=110, file=io.StringIO(), force_terminal=True, force_jupyter=False)
    print_summary(_payload(x, views=False), console)
    body = console.export_html(inline_styles=True, code_format="<pre style='font-size:12px'>{code}</pre>")
    return f"<div class='torchscope-summary'>{body}</div>"


def key_averages_html(averages: Any) -> str:
    """A ``KeyAverages`` as an HTML table (the columns of ``to_polars()``)."""
    return str(averages.to_polars()._repr_html_())


class InlineDashboard:
    """The dashboard of one subject, displayed inline by Jupyter (``_repr_html_``)."""

    def __init__(self, page: str, height: int) -> None:
        self.page = page
        self.height = height

    def _repr_html_(self) -> str:
        return (
            f'<iframe sandbox="allow-scripts" srcdoc="{html.escape(self.page, quote=True)}" '
            f'style="width:100%;height:{self.height}px;border:1px solid #ddd"></iframe>'
        )


def show(x: Any, height: int = 720) -> InlineDashboard | None:
    """Embed the dashboard of ``x`` in the notebook (offline, sandboxed).

    In IPython it is displayed here and nothing is returned (as ``plt.show()``), so a cell ending
    in ``torchscope.show(x)`` shows it once, not twice; outside IPython the object is returned."""
    from torchscope.render.html import render_html

    dashboard = InlineDashboard(render_html(_payload(x)), height)
    try:
        from IPython import get_ipython
        from IPython.display import display
    except ImportError:  # pragma: no cover - outside IPython the object is returned
        return dashboard
    if get_ipython() is None:
        return dashboard
    display(dashboard)
    return None


def register_formatters(shell: Any) -> None:
    """Show our types as HTML in ``shell``; by type name, so nothing is imported for it."""
    formatter = shell.display_formatter.formatters["text/html"]
    for module, name in FORMATTED_TYPES:
        func = key_averages_html if name == "KeyAverages" else summary_html
        formatter.for_type_by_name(module, name, func)


MAGIC_FLAGS = {"--memory", "--stack"}


def load_ipython_extension(shell: Any) -> None:
    """``%load_ext torchscope``: the formatters and the ``%%torchscope`` cell magic."""
    register_formatters(shell)

    def torchscope_magic(line: str, cell: str) -> None:
        from IPython.display import HTML, display

        from torchscope.capture.profiler import profile

        flags = set(line.split())
        if unknown := sorted(flags - MAGIC_FLAGS):
            from IPython.core.error import UsageError

            raise UsageError(f"%%torchscope: unknown option {', '.join(unknown)} (it takes --memory, --stack)")
        prof = profile(record_shapes=True, profile_memory="--memory" in flags, with_stack="--stack" in flags)
        with prof, _stopped_before_traceback(shell, prof), _stopped_before_display(shell, prof, cell):
            shell.run_cell(cell)
        shell.user_ns["_torchscope"] = prof
        display(HTML(summary_html(prof)))

    shell.register_magic_function(torchscope_magic, magic_kind="cell", magic_name="torchscope")


def _stopping_first(prof: Any, call: Any) -> Any:
    """``call``, after stopping ``prof`` if it still records."""

    def stop_then_call(*args: Any, **kwargs: Any) -> Any:
        if prof._started:
            prof.stop()
        return call(*args, **kwargs)

    return stop_then_call


@contextlib.contextmanager
def _patched(obj: Any, **attrs: Any) -> Iterator[None]:
    """``obj``'s attributes set to ``attrs`` for the block, then as they were: its own value
    put back, or the instance attribute removed so that its class's shows again."""
    own = {name: vars(obj)[name] for name in attrs if name in vars(obj)}
    for name, value in attrs.items():
        setattr(obj, name, value)
    try:
        yield
    finally:
        for name in attrs:
            if name in own:
                setattr(obj, name, own[name])
            else:
                delattr(obj, name)


def _stopped_before_traceback(shell: Any, prof: Any) -> contextlib.AbstractContextManager[None]:
    """A cell that raises has IPython format its traceback inside ``run_cell``: recorded, that
    was 110k events of ``inspect`` and ``posixpath`` against the cell's 1.7k, and 98 % of the
    report "Python outside ops". The profile stops before the traceback is shown."""
    return _patched(shell, showtraceback=_stopping_first(prof, shell.showtraceback))


def _stopped_before_display(shell: Any, prof: Any, cell: str) -> contextlib.AbstractContextManager[None]:
    """A cell ending in an expression has IPython show its value inside ``run_cell``: recorded,
    a cell of ``model(x)`` was mostly the tensor's printing (96 ``aten::select``, 69
    ``aten::item``). The profile stops as the value is about to be shown (after it was computed).
    A cell ending in ``;`` shows nothing, as any cell (IPython looks for the ``;`` in the magic's
    own line, which has none)."""
    hook = shell.displayhook
    quiet = getattr(hook, "semicolon_at_end_of_expression", None)
    silent = {"quiet": lambda: True} if quiet is not None and quiet(cell) else {}
    return _patched(hook, start_displayhook=_stopping_first(prof, hook.start_displayhook), **silent)


def register_if_in_ipython() -> None:
    """Register the formatters when ``torchscope`` is imported inside a running IPython."""
    import sys

    ipython = sys.modules.get("IPython")
    if ipython is None:
        return
    shell = ipython.get_ipython()
    if shell is not None and hasattr(shell, "display_formatter"):
        register_formatters(shell)
