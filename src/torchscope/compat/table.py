"""The ``key_averages().table()`` text, laid out exactly as torch 2.13 prints it.

Users read these tables every day and diff them across runs; a drop-in replacement must
print the same columns, headers, units, widths, percentages and footer lines for the same
options. The input is the ``KeyAverages`` frame (one row per key, times in microseconds), so
the table costs a sort and a format of the rows shown, whatever the trace size. Tests compare
the header and footer lines with torch's own output on the same workload.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import polars as pl

from torchscope.errors import UsageAttributeError

SPACING = 2
COLUMN_WIDTH = 12
FLOP_UNITS = ("FLOPs", "KFLOPs", "MFLOPs", "GFLOPs", "TFLOPs", "PFLOPs")
# sort keys torch accepts besides the frame's columns: averages and device aliases
_AVERAGES = {"cpu_time": "cpu_time_total", "device_time": "device_time_total"}


def format_time(us: float) -> str:
    """torch's time format: seconds, milliseconds or microseconds, three decimals."""
    if us >= 1e6:
        return f"{us / 1e6:.3f}s"
    if us >= 1e3:
        return f"{us / 1e3:.3f}ms"
    return f"{us:.3f}us"


def format_time_in(us: float, unit: str | None) -> str:
    """A time in the requested unit (``s``, ``ms``, ``us``), else torch's automatic choice."""
    if unit == "s":
        return f"{us / 1e6:.3f}s"
    if unit == "ms":
        return f"{us / 1e3:.3f}ms"
    if unit == "us":
        return f"{us:.3f}us"
    return format_time(us)


def format_share(us: float, total_us: float) -> str:
    """A percentage of ``total_us`` with two decimals; ``NaN`` when the total is zero."""
    if total_us == 0:
        return "NaN"
    return f"{us * 100.0 / total_us:.2f}%"


def format_memory(nbytes: int) -> str:
    """torch's memory format: GB, MB, KB with two decimals, or whole bytes."""
    kb, mb, gb = 1024, 1024**2, 1024**3
    if abs(nbytes) >= gb:
        return f"{nbytes / gb:.2f} GB"
    if abs(nbytes) >= mb:
        return f"{nbytes / mb:.2f} MB"
    if abs(nbytes) >= kb:
        return f"{nbytes / kb:.2f} KB"
    return f"{nbytes} B"


def sort_column(sort_by: str) -> str:
    """The frame column behind a torch ``sort_by`` key (``cuda``/``xpu`` mean the device)."""
    key = sort_by.replace("cuda", "device").replace("xpu", "device").replace("privateuse1", "device")
    return key


def _sorted(frame: pl.DataFrame, sort_by: str | None) -> pl.DataFrame:
    if sort_by is None:
        return frame
    key = sort_column(sort_by)
    if key in _AVERAGES:
        total = _AVERAGES[key]
        frame = frame.with_columns((pl.col(total) / pl.col("count")).fill_nan(0.0).alias(f"_avg_{key}"))
        key = f"_avg_{key}"
    elif key not in frame.columns or key in ("key", "stack", "input_shapes", "overload_name"):
        valid = [c for c in frame.columns if c.endswith(("_total", "_usage"))] + ["count", "cpu_time"]
        raise UsageAttributeError(
            f"cannot sort a profiler table by {sort_by!r}; valid keys: {', '.join(valid)}"
        )
    return frame.sort(key, descending=True, maintain_order=True)


def sorted_rows(frame: pl.DataFrame, options: TableOptions) -> pl.DataFrame:
    """The rows the table shows, in its order (``torchscope table --json`` prints these)."""
    shown = _sorted(frame, options.sort_by).select(frame.columns)
    if options.top_level_events_only:
        shown = shown.filter(pl.col("is_top_level"))
    if options.row_limit is not None and options.row_limit >= 0:
        shown = shown.head(options.row_limit)
    return shown


def _max(values: pl.Series) -> int:
    """The largest value of an integer column (0 when empty or all null)."""
    top = values.max()
    return int(top) if isinstance(top, (int, float)) else 0


def _flop_scale(smallest: int) -> tuple[float, str]:
    exp = max(0.0, min(math.log10(smallest) / 3, float(len(FLOP_UNITS) - 1)))
    return 10 ** (math.floor(exp) * -3.0), FLOP_UNITS[int(exp)]


def _trim_path(path: str, width: int) -> str:
    if len(path) > width:
        path = path[len(path) - width :]
        if len(path) > 3:
            path = "..." + path[3:]
    return path


@dataclass(frozen=True)
class TableOptions:
    """The options of torch's ``table()`` (same names, same defaults), made once and passed down.

    ``KeyAverages.table``, ``EventList.table``, ``profile.table`` and ``torchscope table`` take
    torch's keywords and build one of these; ``build_table`` and every helper below read it.
    """

    sort_by: str | None = None
    row_limit: int | None = 100
    max_src_column_width: int | None = 75
    max_name_column_width: int | None = 55
    max_shapes_column_width: int | None = 80
    header: str | None = None
    top_level_events_only: bool = False
    time_unit: str | None = None


@dataclass(frozen=True)
class _Layout:
    """What one table shows, decided once from the rows and the options."""

    options: TableOptions
    row_format: str
    n_columns: int
    sum_self_cpu: float
    sum_self_device: float
    has_overload_names: bool
    has_device_time: bool
    profile_memory: bool
    device_memory: bool
    has_input_shapes: bool
    shapes_width: int
    has_stack: bool
    src_width: int
    flop_scale: float | None

    def time(self, us: float) -> str:
        return format_time_in(us, self.options.time_unit)

    def clip(self, text: str) -> str:
        width = self.options.max_name_column_width
        if width is not None and len(text) >= width - 3:
            return text[: width - 3] + "..."
        return text


def build_table(
    frame: pl.DataFrame,
    options: TableOptions = TableOptions(),
    *,
    use_device: str | None = None,
    profile_memory: bool = False,
    with_flops: bool = False,
) -> str:
    """Render a ``KeyAverages`` frame as torch's table text (see module docstring)."""
    if frame.height == 0:
        return ""
    has_device_time = bool((frame["self_device_time_total"] > 0).any())
    has_device_mem = bool((frame["self_device_memory_usage"] > 0).any())
    if has_device_time and not use_device:
        use_device = "cuda"
    shapes_text = frame["input_shapes"].fill_null("")
    has_input_shapes = bool(((shapes_text != "") & (shapes_text != "[]")).any())
    has_overload_names = bool((frame["overload_name"].fill_null("") != "").any())

    frame = _sorted(frame, options.sort_by)
    name_width = _max(frame["key"].str.len_chars()) + 4
    if options.max_name_column_width is not None:
        name_width = min(name_width, options.max_name_column_width)
    shapes_width = _max(shapes_text.str.len_chars()) + 4
    if options.max_shapes_column_width is not None:
        shapes_width = min(shapes_width, options.max_shapes_column_width)
    stack_lens = frame["stack"].list.eval(pl.element().str.len_chars()).list.max()
    has_stack = bool(stack_lens.is_not_null().any())
    src_width = 0
    if has_stack:
        src_width = _max(stack_lens) + 4
        if options.max_src_column_width is not None:
            src_width = min(src_width, options.max_src_column_width)

    device = use_device.upper() if use_device is not None else "None"
    headers = ["Name"] + (["Overload Name"] if has_overload_names else [])
    headers += ["Self CPU %", "Self CPU", "CPU total %", "CPU total", "CPU time avg"]
    if has_device_time:
        headers += [f"Self {device}", f"Self {device} %", f"{device} total", f"{device} time avg"]
    if profile_memory:
        headers += ["CPU Mem", "Self CPU Mem"]
        if use_device and has_device_mem:
            headers += [f"{device} Mem", f"Self {device} Mem"]
    headers.append("# of Calls")

    widths: list[tuple[int, str]] = [(name_width, ">")]
    if has_overload_names:
        widths.append((name_width, ">"))
    widths += [(COLUMN_WIDTH, ">")] * (len(headers) - len(widths))
    if has_input_shapes:
        headers.append("Input Shapes")
        widths.append((shapes_width, ">"))
    if has_stack:
        headers.append("Source Location")
        widths.append((src_width, "<"))
    flop_scale: float | None = None
    if with_flops:
        positive = frame.filter(pl.col("flops") > 0)["flops"]
        if positive.len():
            flop_scale, flop_unit = _flop_scale(int(positive.min()))  # type: ignore[arg-type]
            headers.append(f"Total {flop_unit}")
            widths.append((COLUMN_WIDTH, ">"))

    layout = _Layout(
        options=options,
        row_format="".join("{: " + align + str(w) + "}" + " " * SPACING for w, align in widths),
        n_columns=len(headers),
        sum_self_cpu=float(frame["self_cpu_time_total"].sum()),
        sum_self_device=float(
            frame.filter(pl.col("is_device") & ~pl.col("is_user_annotation"))["self_device_time_total"].sum()
        ),
        has_overload_names=has_overload_names,
        has_device_time=has_device_time,
        profile_memory=profile_memory,
        device_memory=bool(use_device and has_device_mem),
        has_input_shapes=has_input_shapes,
        shapes_width=shapes_width,
        has_stack=has_stack,
        src_width=src_width,
        flop_scale=flop_scale,
    )
    separator = "".join("-" * w + " " * SPACING for w, _ in widths)
    line_length = sum(w + SPACING for w, _ in widths) - SPACING

    out: list[str] = []
    if options.header is not None:
        out += ["=" * line_length, options.header]
    if options.top_level_events_only:
        out += ["=" * line_length, "This report only display top-level ops statistics"]
    out += [separator, layout.row_format.format(*headers), separator]

    for row in sorted_rows(frame, replace(options, sort_by=None)).iter_rows(named=True):
        out += _row_lines(row, layout)
    out.append(separator)
    out.append(f"Self CPU time total: {layout.time(layout.sum_self_cpu)}")
    if has_device_time:
        out.append(f"Self {device} time total: {layout.time(layout.sum_self_device)}")
    return "\n".join(out) + "\n"


def _row_lines(row: dict[str, Any], layout: _Layout) -> list[str]:
    count = row["count"]
    time = layout.time
    values: list[Any] = [layout.clip(row["key"])]
    if layout.has_overload_names:
        values.append(layout.clip(row["overload_name"] or ""))
    values += [
        format_share(row["self_cpu_time_total"], layout.sum_self_cpu),
        time(row["self_cpu_time_total"]),
        format_share(row["cpu_time_total"], layout.sum_self_cpu),
        time(row["cpu_time_total"]),
        time(row["cpu_time_total"] / count if count else 0.0),
    ]
    if layout.has_device_time:
        values += [
            time(row["self_device_time_total"]),
            format_share(row["self_device_time_total"], layout.sum_self_device),
            time(row["device_time_total"]),
            time(row["device_time_total"] / count if count else 0.0),
        ]
    if layout.profile_memory:
        values += [format_memory(row["cpu_memory_usage"]), format_memory(row["self_cpu_memory_usage"])]
        if layout.device_memory:
            values += [
                format_memory(row["device_memory_usage"]),
                format_memory(row["self_device_memory_usage"]),
            ]
    values.append(count)
    if layout.has_input_shapes:
        values.append((row["input_shapes"] or "")[: layout.shapes_width])
    stack: Sequence[str] = row["stack"] or []
    if layout.has_stack:
        values.append(_trim_path(stack[0], layout.src_width) if stack else "")
    if layout.flop_scale is not None:
        flops = row["flops"]
        values.append("--" if flops <= 0 else f"{flops * layout.flop_scale:8.3f}")
    lines = [layout.row_format.format(*values)]
    if layout.has_stack:
        blanks = [""] * (layout.n_columns - 1)
        lines += [layout.row_format.format(*blanks, _trim_path(e, layout.src_width)) for e in stack[1:]]
        lines.append(layout.row_format.format(*blanks, ""))
    return lines
