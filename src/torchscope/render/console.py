"""The terminal summary: where the time goes, top ops and kernels, memory, advice, warnings.

A renderer of the analyses' report (``analysis.report``), as the page and ``--json`` are: the
rows and numbers are the report's, in its order, formatted by the units the report declares
(``render.units``). Trace strings pass through ``render.text.display``: control characters
shown as escapes, huge names cut, Rich markup escaped. Widths fit the terminal.
"""

from __future__ import annotations

from typing import IO, Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from torchscope.analysis import keys as K
from torchscope.analysis.overview import BREAKDOWN_CATEGORIES, HOST_CATEGORIES
from torchscope.render.payload import full_report
from torchscope.render.text import DISPLAY_CHARS, TABLE_CHARS, display
from torchscope.render.units import fmt, fmt_bytes, fmt_ns, fmt_offset, fmt_us

__all__ = ["PIPE_WIDTH", "fmt_bytes", "fmt_ns", "print_report", "print_summary", "terminal"]

# Piped output has no width to fit: rich's default of 80 columns folded op names mid-word
# ("aten::empty_strid" / "ed"), so a pipe or a file gets this width and a terminal its own.
PIPE_WIDTH = 140


class _PipedConsole(Console):
    """Rich's console, but a reader that stops early (``| head``) raises ``BrokenPipeError``,
    which every command answers with exit 0 (``cli.main``); Rich's own answer was exit 1, so
    ``report F | head`` failed where ``table F | head`` did not."""

    def on_broken_pipe(self) -> None:
        raise BrokenPipeError


# a trace of instants (or nothing timed): the single report and a job's run block say it alike
NO_TIMED_WORK = "no step recorded: no op, annotation or device work with a duration in the trace"


def terminal(file: IO[str]) -> Console:
    """A console on ``file``: the terminal's width, or ``PIPE_WIDTH`` when it is not a terminal."""
    return _PipedConsole(file=file, width=None if file.isatty() else PIPE_WIDTH)


def _esc(text: Any, limit: int = DISPLAY_CHARS) -> str:
    """A trace string for Rich: control characters visible, cut when huge, markup inert."""
    return escape(display(text, limit))


def cell(text: Any) -> str:
    """A name in a table cell: cut to ``TABLE_CHARS`` (a C++ kernel name folded over 15 lines)."""
    return _esc(text, TABLE_CHARS)


# The numeric columns of the terminal's tables: (heading, report field).
OP_COLUMNS = [("calls", "calls"), ("host self", "host_self_us"), ("host total", "host_total_us")]
OP_DEVICE_COLUMNS = [("device self", "device_self_us"), ("device total", "device_total_us")]
KERNEL_COLUMNS = [("calls", "count"), ("total", "total_us"), ("mean", "mean_us"), ("share", "share_pct")]


def table_cells(row: dict[str, Any], columns: list[tuple[str, str]], units: dict[str, str]) -> list[str]:
    """The text of one table row's numbers, as the terminal and the page show them."""
    return [fmt(row.get(field), units.get(field)) for _, field in columns]


def _table(title: str, name: str, rows: list[dict[str, Any]], columns: list[tuple[str, str]],
           units: dict[str, str], name_field: str = "name") -> Table:  # fmt: skip
    t = Table(title=title, title_justify="left")
    t.add_column(name, justify="left", overflow="fold")
    for col, _ in columns:
        t.add_column(col, justify="right", no_wrap=True)
    for r in rows:
        name_text = r.get(name_field)
        t.add_row(cell("–" if name_text is None else name_text), *table_cells(r, columns, units))
    return t


def op_columns(report: dict[str, Any]) -> list[tuple[str, str]]:
    """A column of zeros says nothing: device time only where the trace has device work."""
    with_device = any(r.get("device_total_us") for r in report.get(K.OPERATORS) or [])
    return OP_COLUMNS + (OP_DEVICE_COLUMNS if with_device else [])


def print_report(report: dict[str, Any], console: Console, *, name: str = "", top: int = 10) -> None:
    """One trace's report in the terminal."""
    units = report.get(K.UNITS) or {}
    meta = report.get(K.META) or {}
    start = meta.get("start_us")
    rank = meta.get("rank")
    console.print(
        f"[bold]{_esc(name or report.get(K.SOURCE))}[/bold]  {fmt(meta.get('events'), 'count')} event{'' if meta.get('events') == 1 else 's'} over "
        f"{fmt_us(meta.get('span_us'))}"
        + (f" · rank {rank}" if rank is not None else "")
        + (f" of {meta['world_size']}" if rank is not None and meta.get("world_size") is not None else "")
    )
    for w in meta.get("warnings") or []:
        console.print(f"[yellow]input warning[/yellow] {_esc(w)}")
    for note in meta.get("notes") or []:
        console.print(f"[cyan]note[/cyan] {_esc(note)}")
    steps = report.get(K.STEPS) or []
    device = any(s[K.BREAKDOWN_US].get(c) for s in steps for c in ("Kernel", "Memcpy", "Memset"))
    avg = report.get(K.BREAKDOWN_US) if device else report.get(K.HOST_BREAKDOWN_US)
    if avg and avg.get("Total"):
        total = avg["Total"]
        n = sum(s.get("steps", 1) for s in steps)
        label = (
            "only the profile's exit, no step of the run"
            if meta.get("only_exit")
            else ("one step, cut short" if meta.get("steps_from_trace") else "the run up to the cut")
            if meta.get("only_cut_step")  # by what: the note printed above says
            else f"{n} step{'s' if n != 1 else ''}"
            if meta.get("steps_from_trace")
            else "the whole run as one step"
        )
        # the heading is printed on its own: as a title it wrapped to the narrow table's width
        spent = f"{fmt_us(total)} in all" if meta.get("only_exit") or meta.get("only_cut_step") else f"average {fmt_us(total)} per step"
        console.print(f"[italic]where the time goes ({label}, {spent})[/italic]")
        t = Table()
        t.add_column("category")
        t.add_column("per step", justify="right")
        t.add_column("share", justify="right")
        for cat in BREAKDOWN_CATEGORIES if device else HOST_CATEGORIES:
            if avg.get(cat):
                t.add_row(cat, fmt_us(avg[cat]), fmt(100.0 * avg[cat] / total, "percent"))
        console.print(t)
    elif not steps:  # nothing with a duration: say so rather than print nothing at all
        console.print(f"[italic]{NO_TIMED_WORK}[/italic]")
    if meta.get("steps_from_trace") and steps:
        grouped = any(s.get("steps", 1) > 1 for s in steps)
        console.print(
            "[italic]steps (start: time since the trace's first event"
            + (f"; {len(steps)} runs of consecutive steps, duration their mean" if grouped else "")
            + ")[/italic]"
        )
        t = Table()
        for col in ("steps" if grouped else "step", "start", "mean duration" if grouped else "duration"):
            t.add_column(col, justify="right")
        for s in steps[:top]:
            label = f"{s['step']}–{s['last_step']}" if s.get("steps", 1) > 1 else str(s["step"])
            t.add_row(label, fmt_offset(s["start_us"], start), fmt_us(s["dur_us"]))
        console.print(t)
    ops = report.get(K.OPERATORS) or []
    if ops:
        title = (
            "top ops (by device time, then host time)"
            if op_columns(report) != OP_COLUMNS
            else "top ops (by host time)"
        )
        console.print(_table(title, "name", ops[:top], op_columns(report), units))
    kernels = report.get(K.KERNELS) or []
    if kernels:
        console.print(_table("top kernels (by total time)", "name", kernels[:top], KERNEL_COLUMNS, units))
    for p in (report.get(K.MEMORY) or {}).get(K.MEMORY_PEAKS) or []:
        if p.get("peak_allocated_bytes") is None:  # the file gave no usable totals
            console.print(
                f"memory {_esc(p['device'])}: peak allocated unknown (no usable totals in the trace)"
            )
            continue
        console.print(
            f"memory {_esc(p['device'])}: peak allocated {fmt_bytes(p['peak_allocated_bytes'])} at "
            f"{fmt_offset(p['peak_ts_us'], start)}"
            + (f" in {_esc(p['peak_op'])}" if p.get("peak_op") else "")
        )


def _print_distributed(report: dict[str, Any], console: Console) -> None:
    rows = (report.get(K.DISTRIBUTED) or {}).get("ranks") or []
    if not rows:
        return
    units = report.get(K.UNITS) or {}
    columns = [("steps", "steps"), ("avg step", "step_us"), ("computation", "computation_us"),
               ("communication", "communication_us"), ("overlap", "overlap_us"), ("vs fastest", "vs_fastest_pct")]  # fmt: skip
    t = _table("ranks (per step)", "rank", rows, columns, units, name_field="name")
    console.print(t)
    slow = report[K.DISTRIBUTED].get("slowest_rank")
    if slow is not None:
        console.print(f"slowest rank (most computation per step): {slow}")


def _rec_line(rec: dict[str, Any]) -> str:
    line = f"[bold]{_esc(rec['rule'])}[/bold]: {_esc(rec['message'])}"
    if rec.get("rank") is not None:
        line += f" (rank {rec['rank']})"
    if rec.get("fix"):
        line += f"\n    [green]fix[/green]: {_esc(rec['fix'])}"
    return line


def print_summary(payload: dict[str, Any], console: Console, *, top: int = 10) -> None:
    """Print the report in ``payload`` (each trace of a set: the first in full, the others in brief)."""
    env = payload.get("env")
    if env:
        devices = (
            ", ".join(f"{d.get('type')}:{d.get('index')} {d.get('name')}" for d in env.get("devices", []))
            or "none"
        )
        console.print(
            f"[bold]environment[/bold]  torch {env.get('torch')} · python {env.get('python')} · "
            f"threads {env.get('intra_op_threads')} · devices {_esc(devices)}"
        )
    report = full_report(payload) or {}
    if report.get(K.KIND) == "traceset":
        for i, (name, r) in enumerate((report.get(K.RANKS) or {}).items()):
            print_report(r, console, name=name, top=top if i == 0 else 3)
        _print_distributed(report, console)
    elif report:
        runs = payload.get("runs") or [{}]
        print_report(report, console, name=runs[0].get("name", ""), top=top)
    # the cycles the samples were placed on: a run's summary shows one cycle of several in full
    cycles = int(payload.get("hotspots_cycles") or len(payload.get("runs") or []))
    _print_hotspots(payload.get("hotspots") or [], console, top, cycles=cycles)
    recs = report.get(K.RECOMMENDATIONS) or []
    if recs:
        console.print("[bold]recommendations[/bold]")
        for rec in recs:
            console.print(f"  • {_rec_line(rec)}")
    for w in payload.get("warnings") or []:
        console.print(f"[yellow]warning[/yellow] {_esc(w)}")


def _print_hotspots(hot: list[dict[str, Any]], console: Console, top: int, cycles: int = 1) -> None:
    """The run's sampled hot spots: over every recorded cycle, said when there are several (they
    were printed under the last cycle's summary as if they were its own)."""
    if not hot:
        return
    over = f" over all {cycles} recorded cycles" if cycles > 1 else ""
    t = Table(
        title=f"Python hot spots{over} (sampled; 'outside ops' = time the op profiler does not see)",
        title_justify="left",
    )
    for col, just in (
        ("function", "left"),
        ("location", "left"),
        ("self", "right"),
        ("total", "right"),
        ("total %", "right"),
        ("outside ops", "right"),
    ):
        t.add_column(col, justify=just)  # type: ignore[arg-type]
    for r in hot[:top]:
        t.add_row(
            _esc(r["function"]),
            _esc(r["location"]),
            fmt_ns(r["self_ns"]),
            fmt_ns(r["total_ns"]),
            fmt(r["total_pct"], "percent"),
            fmt(r.get("outside_ops_pct"), "percent"),
        )
    console.print(t)
