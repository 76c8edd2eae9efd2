"""Views of an ``AccuracyResult``: the dashboard's ``"accuracy"`` section and the terminal table.

``accuracy_section(result)`` is the dict the dashboard renders (documented in
docs/accuracy.md): JSON-ready, flat rows, the first divergence first. ``print_result`` writes
the same findings to the terminal with Rich. Neither needs torch.
"""

from __future__ import annotations

import math
from typing import Any

from torchscope.accuracy.metrics import TensorMetrics
from torchscope.accuracy.result import WORST_METRICS, AccuracyResult, OpResult

# the per-op columns of the dashboard (and of --json), in display order
OP_COLUMNS = (
    "index",
    "op",
    "module",
    "call_site",
    "direction",
    "grad_fn",
    "input_shapes",
    "dtypes",
    "status",
    *WORST_METRICS,
    "mutated_inputs",
    "cascade",
    "note",
)


def _clean(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def op_row(op: OpResult) -> dict[str, Any]:
    """One flat, JSON-ready row for an op: identity, then the metrics of its worst output."""
    d = op.as_dict()
    return {k: _clean(d.get(k)) for k in OP_COLUMNS}


def accuracy_section(result: AccuracyResult, limit: int = 500) -> dict[str, Any]:
    """The dashboard's ``"accuracy"`` dict: first divergence, ops, modules, summary.

    ``ops`` holds, in execution order, every diverged op and then the worst of the others, up to
    ``limit`` rows, so the view stays small on long runs while never hiding a divergence.
    """
    first = result.first_divergence
    keep = {o.index for o in result.diverged}
    for o in result.top(len(result.ops)):
        if len(keep) >= limit:
            break
        keep.add(o.index)
    ops = [op_row(o) for o in result.ops if o.index in keep]
    first_module = result.first_module_divergence
    return {
        "first_divergence": op_row(first) if first is not None else None,
        "first_module_divergence": op_row(first_module) if first_module is not None else None,
        "module_calls": [op_row(m) for m in result.module_calls[:limit]],
        "ops": ops,
        "top": [op_row(o) for o in result.top(10)],
        "modules": [{k: _clean(v) for k, v in m.items()} for m in result.modules()],
        "only_in_target": result.only_in_target,
        "only_in_reference": result.only_in_reference,
        "summary": result.summary(),
    }


def dashboard_payload(result: AccuracyResult, title: str | None = None) -> dict[str, Any]:
    """A dashboard payload holding only the Accuracy view (no trace), for ``--html``."""
    from torchscope.render.payload import PAYLOAD_VERSION

    return {
        "version": PAYLOAD_VERSION,
        "title": title or f"accuracy: {result.target} vs {result.reference}",
        "source": result.target,
        "runs": [],
        "report": None,
        "distributed": None,
        "diff": None,
        "accuracy": accuracy_section(result),
    }


def _fmt(v: Any) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:.3g}"
    return str(v)


def non_finite(w: TensorMetrics) -> str | None:
    """ "62 of 4,096 outputs inf (reference 0)": NaN/Inf counts in words, when there are any.

    They come first: cosine and max_abs are computed on the finite elements only, so an fp16
    overflow reads "cosine=1 max_abs=14.8" while its outputs are infinite."""
    parts = []
    for what, mine, ref in (("NaN", w.nan, w.ref_nan), ("inf", w.inf, w.ref_inf)):
        if mine or ref:
            parts.append(f"{mine:,} of {w.numel:,} outputs {what} (reference {ref:,})")
    return "; ".join(parts) or None


def metrics_line(w: TensorMetrics) -> str:
    """The one-line description of a tensor's error: NaN/Inf counts first, then the metrics of
    the finite elements (named as such when some were left out)."""
    specials = non_finite(w)
    numbers = f"cosine={_fmt(w.cosine)} max_abs={_fmt(w.max_abs_error)}"
    if specials is None:
        return f"{w.problem or ''}  {numbers}".strip()
    return f"{specials}; {w.problem + '; ' if w.problem else ''}on the finite outputs: {numbers}"


_SHORT_DIRECTION = {"forward": "fwd", "backward": "bwd"}  # the usual abbreviations, not "for"/"bac"


def _specials_note(w: TensorMetrics | None) -> str:
    """ " (62 inf)" for the status column: the table's metrics are of the finite outputs."""
    if w is None:
        return ""
    parts = [f"{n:,} {what}" for what, n in (("NaN", w.nan), ("inf", w.inf)) if n]
    return f" ({', '.join(parts)})" if parts else ""


def _top_table(title: str, records: list[OpResult]) -> Any:
    """A Rich table of ops (or module calls), worst first."""
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=title, show_lines=False)
    for col in ("#", "op", "module", "dir", "max abs", "max rel", "rel L2", "cosine", "status"):
        numeric = col in ("#", "max abs", "max rel", "rel L2", "cosine")
        table.add_column(col, justify="right" if numeric else "left", overflow="fold")
    for o in records:
        w = o.worst
        table.add_row(
            str(o.index),
            escape(o.op),
            escape(o.module),
            _SHORT_DIRECTION.get(o.direction, o.direction),
            _fmt(w.max_abs_error if w else None),
            _fmt(w.max_rel_error if w else None),
            _fmt(w.rel_l2_error if w else None),
            _fmt(w.cosine if w else None),
            o.status + (" (cascade)" if o.cascade else "") + _specials_note(w),
        )
    return table


def print_result(result: AccuracyResult, top: int = 10) -> None:
    """The findings on the terminal: summary, first divergence, top ops, modules; and for dumps
    with module records, the first divergent module and the worst module calls."""
    import sys

    from rich.markup import escape

    from torchscope.render.console import terminal

    console = terminal(sys.stdout)
    s = result.summary()
    calls = (
        f"; {s['module_calls']} module calls, {s['module_calls_diverged']} over tolerance"
        if result.module_calls
        else ""
    )
    console.print(
        f"[bold]accuracy[/bold] ({s['mode']}): {escape(s['target'])} vs {escape(s['reference'])}: "
        f"{s['ops']} ops, {s['compared']} compared, {s['diverged']} over tolerance, "
        f"{s['random']} random, {s['skipped']} skipped{calls}"
    )
    for warning in result.warnings:
        console.print(f"[yellow]warning:[/yellow] {escape(warning)}")
    if result.ops:
        _print_ops(console, result, top)
    if not result.module_calls:
        return
    fm = result.first_module_divergence
    if fm is None:
        console.print(
            "[green]no first divergent module[/green]: every module call whose inputs agreed stayed within tolerance"
        )
    else:
        fw = fm.worst
        console.print(
            f"[bold red]first divergent module[/bold red]: #{fm.index} {escape(fm.module or '(top level)')} "
            f"{escape(fm.op)} ({fm.direction})" + (f"  {escape(metrics_line(fw))}" if fw is not None else "")
        )
    console.print(_top_table(f"top {top} module calls by error", result.top_module_calls(top)))


def _print_ops(console: Any, result: AccuracyResult, top: int) -> None:
    from rich.markup import escape
    from rich.table import Table

    first = result.first_divergence
    if first is None:
        console.print(
            "[green]no first divergence[/green]: every op whose inputs agreed stayed within tolerance"
        )
    else:
        w = first.worst
        where = f" in {first.module}" if first.module else ""
        console.print(
            f"[bold red]first divergence[/bold red]: #{first.index} {escape(first.op)} ({first.direction}){escape(where)}"
            + (f" at {escape(first.call_site)}" if first.call_site else "")
        )
        if first.mutated_inputs:
            console.print(f"  modified inputs in place: {', '.join(first.mutated_inputs)}")
        if w is not None:
            console.print(f"  {escape(metrics_line(w))}")
    console.print(_top_table(f"top {top} ops by error", result.top(top)))
    mods = sorted(
        result.modules(),
        key=lambda m: (-m["diverged"], m["max_abs_error"] is None, -(m["max_abs_error"] or 0.0)),
    )[:top]
    mt = Table(title="ops by module")
    for col in ("module", "ops", "diverged", "max abs", "min cosine", "worst op"):
        mt.add_column(col, overflow="fold")
    for m in mods:
        mt.add_row(
            escape(m["module"] or "(top level)"),
            str(m["ops"]),
            str(m["diverged"]),
            _fmt(m["max_abs_error"]),
            _fmt(m["min_cosine"]),
            escape(str(m["worst_op"])),
        )
    console.print(mt)
