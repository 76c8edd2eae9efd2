"""The terminal summary: where the time goes, top ops and kernels, Python hot spots, advice.

Reads the same payload as the dashboard (``render.payload``), so the terminal and the HTML
never disagree. Rich tables, widths that fit the terminal, units on every number.
"""

from __future__ import annotations

from typing import IO, Any

from rich.console import Console
from rich.table import Table

# Piped output has no width to fit: rich's default of 80 columns folded op names mid-word
# ("aten::empty_strid" / "ed"), so a pipe or a file gets this width and a terminal its own.
PIPE_WIDTH = 140


def terminal(file: IO[str]) -> Console:
    """A console on ``file``: the terminal's width, or ``PIPE_WIDTH`` when it is not a terminal."""
    return Console(file=file, width=None if file.isatty() else PIPE_WIDTH)


def fmt_ns(ns: float | None) -> str:
    if ns is None:
        return "–"
    a = abs(ns)
    if a >= 1e9:
        return f"{ns / 1e9:.3f} s"
    if a >= 1e6:
        return f"{ns / 1e6:.3f} ms"
    if a >= 1e3:
        return f"{ns / 1e3:.1f} µs"
    return f"{ns:.0f} ns"


def fmt_bytes(n: float | None) -> str:
    if n is None:
        return "–"
    v, units = float(abs(n)), ("B", "KiB", "MiB", "GiB", "TiB")
    i = 0
    while v >= 1024 and i < len(units) - 1:
        v /= 1024
        i += 1
    return f"{'-' if n < 0 else ''}{v:.2f} {units[i]}" if i else f"{int(n)} B"


def _recommendations(payload: dict[str, Any]) -> list[Any]:
    report = payload.get("report") or {}
    for key in ("recommendations", "findings", "advice", "advisor"):
        value = report.get(key) if isinstance(report, dict) else None
        if isinstance(value, list):
            return value
    return []


def _rec_line(rec: Any) -> str:
    if not isinstance(rec, dict):
        return str(rec)
    title = rec.get("title") or rec.get("name") or rec.get("rule") or rec.get("id") or "finding"
    msg = rec.get("message") or rec.get("summary") or rec.get("text") or rec.get("description") or ""
    line = f"[bold]{_esc(title)}[/bold]: {_esc(msg)}" if msg else f"[bold]{_esc(title)}[/bold]"
    if rec.get("rank") is not None:
        line += f" (rank {_esc(rec['rank'])})"
    if rec.get("fix"):
        line += f"\n    [green]fix[/green]: {_esc(rec['fix'])}"
    return line


def _esc(text: Any) -> str:
    """Trace strings are user input: never let them be read as Rich markup."""
    from rich.markup import escape

    return escape(str(text))


def print_summary(payload: dict[str, Any], console: Console, *, top: int = 10) -> None:
    """Print the summary of every run in ``payload`` (first run in full, the others in brief)."""
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
    for i, run in enumerate(payload.get("runs") or []):
        _print_run(run, console, top=top if i == 0 else 3)
    hot = payload.get("hotspots") or []
    if hot:
        t = Table(
            title="Python hot spots (sampled; 'outside ops' = time the op profiler does not see)",
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
            out = r.get("outside_ops_pct")
            t.add_row(
                _esc(r["function"]),
                _esc(r["location"]),
                fmt_ns(r["self_ns"]),
                fmt_ns(r["total_ns"]),
                f"{r['total_pct']:.1f} %",
                "–" if out is None else f"{out:.0f} %",
            )
        console.print(t)
    recs = _recommendations(payload)
    if recs:
        console.print("[bold]recommendations[/bold]")
        for rec in recs:
            console.print(f"  • {_rec_line(rec)}")
    for w in payload.get("warnings") or []:
        console.print(f"[yellow]warning[/yellow] {_esc(w)}")


def _print_run(run: dict[str, Any], console: Console, *, top: int) -> None:
    sm = run.get("summary") or {}
    console.print(
        f"[bold]{_esc(run.get('name'))}[/bold]  {sm.get('events', 0):,} events over {fmt_ns(sm.get('span_ns'))}"
        + (f" · rank {sm['rank']}" if sm.get("rank") is not None else "")
        + (f"/{sm['world_size']}" if sm.get("rank") is not None and sm.get("world_size") is not None else "")
    )
    ov = run.get("overview") or {}
    steps = ov.get("steps") or []
    device = any((s.get("Kernel") or 0) + (s.get("Memcpy") or 0) for s in steps)
    avg = ov.get("breakdown_ns") if device else ov.get("host_breakdown_ns")
    if avg and avg.get("Total"):
        total = avg["Total"]
        label = f"{len(steps)} steps" if ov.get("steps_from_trace") else "the whole run as one step"
        # the heading is printed on its own: as a title it wrapped to the narrow table's width
        console.print(f"[italic]where the time goes ({label}, average {fmt_ns(total)} per step)[/italic]")
        t = Table()
        t.add_column("category")
        t.add_column("per step", justify="right")
        t.add_column("share", justify="right")
        for cat, ns in avg.items():
            if cat != "Total" and ns:
                t.add_row(cat, fmt_ns(ns), f"{100.0 * ns / total:.1f} %")
        console.print(t)
    ops = run.get("ops") or []
    if ops:
        # a column of zeros says nothing: device time only where the trace has device work
        with_device = any(r.get("device_self_ns") for r in ops)
        t = Table(title="top ops by self time", title_justify="left")
        columns = [("name", "left"), ("calls", "right"), ("self", "right"), ("total", "right")]
        for col, just in columns + ([("device", "right")] if with_device else []):
            t.add_column(col, justify=just, overflow="fold")  # type: ignore[arg-type]
        for r in ops[:top]:
            cells = [_esc(r["name"]), f"{r['calls']:,}", fmt_ns(r["self_ns"]), fmt_ns(r["total_ns"])]
            t.add_row(*cells, *([fmt_ns(r.get("device_self_ns"))] if with_device else []))
        console.print(t)
    kernels = run.get("kernels") or []
    if kernels:
        t = Table(title="top kernels", title_justify="left")
        for col, just in (("name", "left"), ("calls", "right"), ("total", "right"), ("share", "right")):
            t.add_column(col, justify=just, overflow="fold")  # type: ignore[arg-type]
        for r in kernels[:top]:
            name = r["name"] if len(r["name"]) < 90 else r["name"][:87] + "…"
            t.add_row(_esc(name), f"{r['calls']:,}", fmt_ns(r["total_ns"]), f"{r['pct']:.1f} %")
        console.print(t)
    for d in (run.get("memory") or {}).get("devices") or []:
        console.print(f"memory {d['label']}: peak allocated {fmt_bytes(d['peak_allocated'])}")
