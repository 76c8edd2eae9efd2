"""``key_averages()``'s rows as torch.profiler gives them: ``KeyAverage`` (torch's
``FunctionEventAvg``) and ``KeyAverages`` (torch's ``EventList`` of averages, plus DataFrames).

The numbers come from ``analysis.key_averages.averages_frame``; this module only wraps its
frame in torch's attribute names and hands it to the table (``compat.table``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, overload

import polars as pl

from torchscope.analysis.key_averages import (
    averages_frame,
    infer_device,
    parse_shapes,
    trace_counts_flops,
    trace_uses_memory,
)
from torchscope.compat.table import TableOptions, build_table, format_time
from torchscope.render.text import visible
from torchscope.trace.model import Trace


class CudaAliases:
    """torch's older ``cuda_*`` names for the device columns, shared by rows and events.

    Users' scripts written for torch < 2.4 read ``cuda_time_total`` and friends; the rows of
    ``key_averages()`` and the events of ``events()`` both answer to them.
    """

    device_time_total: float
    self_device_time_total: float
    device_memory_usage: int
    self_device_memory_usage: int

    @property
    def cuda_time_total(self) -> float:
        return self.device_time_total

    @property
    def self_cuda_time_total(self) -> float:
        return self.self_device_time_total

    @property
    def cuda_memory_usage(self) -> int:
        return self.device_memory_usage

    @property
    def self_cuda_memory_usage(self) -> int:
        return self.self_device_memory_usage


class FormattedTimes:
    """torch's ``*_str`` properties (``cpu_time_total_str``, ...), shared by rows and events."""

    cpu_time_total: float
    self_cpu_time_total: float
    device_time_total: float
    self_device_time_total: float

    @property
    def cpu_time(self) -> float:  # pragma: no cover - every subclass defines its own
        raise NotImplementedError

    @property
    def device_time(self) -> float:  # pragma: no cover - every subclass defines its own
        raise NotImplementedError

    @property
    def cpu_time_str(self) -> str:
        return format_time(self.cpu_time)

    @property
    def device_time_str(self) -> str:
        return format_time(self.device_time)

    @property
    def cpu_time_total_str(self) -> str:
        return format_time(self.cpu_time_total)

    @property
    def device_time_total_str(self) -> str:
        return format_time(self.device_time_total)

    @property
    def self_cpu_time_total_str(self) -> str:
        return format_time(self.self_cpu_time_total)

    @property
    def self_device_time_total_str(self) -> str:
        return format_time(self.self_device_time_total)


@dataclass(frozen=True)
class KeyAverage(CudaAliases, FormattedTimes):
    """One row of ``key_averages()``: torch's ``FunctionEventAvg`` attribute names, times in us."""

    key: str
    count: int
    cpu_time_total: float
    self_cpu_time_total: float
    device_time_total: float
    self_device_time_total: float
    cpu_memory_usage: int
    self_cpu_memory_usage: int
    device_memory_usage: int
    self_device_memory_usage: int
    input_shapes: Any  # nested lists when grouped by input shape, else "" (as torch)
    stack: list[str] = field(default_factory=list)
    flops: int = 0
    overload_name: str = ""
    is_device: bool = False
    is_user_annotation: bool = False
    is_top_level: bool = True
    node_id: int = -1
    is_async: bool = False
    is_remote: bool = False
    use_device: str | None = None
    is_legacy: bool = False  # torch's legacy (pre-Kineto) profiler: never
    scope: int = 0  # torch's RecordScope.FUNCTION

    @property
    def device_type(self) -> Any:
        """torch's ``DeviceType`` of the row (needs torch: rows of loaded traces rarely ask)."""
        from torch.autograd import DeviceType

        return DeviceType.CUDA if self.is_device else DeviceType.CPU

    @property
    def cpu_time(self) -> float:
        """Average CPU time per call (us)."""
        return self.cpu_time_total / self.count if self.count else 0.0

    @property
    def device_time(self) -> float:
        return self.device_time_total / self.count if self.count else 0.0

    # torch's older name for the device column
    cuda_time = device_time


def _row(values: dict[str, Any], use_device: str | None = None) -> KeyAverage:
    """A row as torch shows it: ``input_shapes`` a list when grouped by shape, else ``""``."""
    shapes = values["input_shapes"]
    values = {**values, "input_shapes": parse_shapes(shapes) if shapes else ""}
    return KeyAverage(**values, use_device=use_device)


class KeyAverages:
    """The result of ``key_averages()``: rows like torch's ``EventList``, plus DataFrames."""

    def __init__(
        self,
        frame: pl.DataFrame,
        *,
        use_device: str | None = None,
        profile_memory: bool = False,
        with_flops: bool = False,
    ) -> None:
        self.frame = frame
        self.use_device = use_device
        self.profile_memory = profile_memory
        self.with_flops = with_flops

    def __len__(self) -> int:
        return self.frame.height

    def __iter__(self) -> Iterator[KeyAverage]:
        for row in self.frame.iter_rows(named=True):
            yield _row(row, self.use_device)

    @overload
    def __getitem__(self, index: int) -> KeyAverage: ...
    @overload
    def __getitem__(self, index: slice) -> list[KeyAverage]: ...
    def __getitem__(self, index: int | slice) -> KeyAverage | list[KeyAverage]:
        if isinstance(index, slice):
            return list(self)[index]
        if index < 0:
            index += self.frame.height
        if not 0 <= index < self.frame.height:
            raise IndexError(index)
        return _row(self.frame.row(index, named=True), self.use_device)

    def total_average(self) -> KeyAverage:
        """All rows summed into one ``Total`` row (torch's ``EventList.total_average``)."""
        sums = self.frame.select(
            pl.col(c).sum()
            for c in self.frame.columns
            if c.endswith(("_total", "_usage")) or c in ("count", "flops")
        ).row(0, named=True)
        return KeyAverage(key="Total", input_shapes="", use_device=self.use_device, **sums)

    @property
    def self_cpu_time_total(self) -> float:
        """Sum of self CPU time over all rows (us), the table's footer."""
        return float(self.frame["self_cpu_time_total"].sum()) if self.frame.height else 0.0

    def for_terminal(self) -> KeyAverages:
        """The same rows with control characters in names and stack frames made visible
        (``\\x1b``, ``\\n``): for ``torchscope table``, which prints a file's names to a terminal.
        ``table()`` itself prints names as they are, as torch's does."""
        frame = self.frame
        names = pl.concat([frame["key"], frame["overload_name"], frame["stack"].explode().drop_nulls()])
        mapping = {n: shown for n in names.unique().to_list() if (shown := visible(n)) != n}
        if mapping:
            frame = frame.with_columns(
                pl.col("key", "overload_name").replace(mapping),
                pl.col("stack").list.eval(pl.element().replace(mapping)),
            )
        return KeyAverages(
            frame, use_device=self.use_device, profile_memory=self.profile_memory, with_flops=self.with_flops
        )

    def table(
        self,
        sort_by: str | None = None,
        row_limit: int | None = 100,
        max_src_column_width: int | None = 75,
        max_name_column_width: int | None = 55,
        max_shapes_column_width: int | None = 80,
        header: str | None = None,
        top_level_events_only: bool = False,
        time_unit: str | None = None,
    ) -> str:
        """torch's table, same keywords and layout: see ``torchscope.compat.table``."""
        return self.render(
            TableOptions(
                sort_by=sort_by,
                row_limit=row_limit,
                max_src_column_width=max_src_column_width,
                max_name_column_width=max_name_column_width,
                max_shapes_column_width=max_shapes_column_width,
                header=header,
                top_level_events_only=top_level_events_only,
                time_unit=time_unit,
            )
        )

    def render(self, options: TableOptions) -> str:
        """The table for options made once (``TableOptions``)."""
        return build_table(
            self.frame,
            options,
            use_device=self.use_device,
            profile_memory=self.profile_memory,
            with_flops=self.with_flops,
        )

    def __str__(self) -> str:
        return self.table()

    def __repr__(self) -> str:
        return f"KeyAverages({self.frame.height} rows)"

    def to_polars(self) -> pl.DataFrame:
        """The rows as a DataFrame (times in us, memory in bytes), with ``cpu_time`` averages."""
        return self.frame.with_columns(
            (pl.col("cpu_time_total") / pl.col("count")).alias("cpu_time"),
            (pl.col("device_time_total") / pl.col("count")).alias("device_time"),
        )

    def to_pandas(self) -> Any:
        """The same as ``to_polars()`` as a pandas DataFrame (needs pandas and pyarrow)."""
        return self.to_polars().to_pandas()


def key_averages(
    trace: Trace | list[Trace],
    group_by_input_shape: bool = False,
    group_by_stack_n: int = 0,
    group_by_overload_name: bool = False,
    *,
    use_device: str | None = None,
    profile_memory: bool | None = None,
    with_flops: bool | None = None,
    tensor_list_shapes: bool = False,
    overload_names: bool = False,
    python_functions: bool = True,
) -> KeyAverages:
    """Average events by name (and input shapes / top-N stack frames), as torch does.

    ``trace`` may be a list of Traces (several cycles of one session with ``acc_events``).
    ``use_device``, ``profile_memory`` and ``with_flops`` default to what the trace shows
    (``with_flops``: the setting Kineto writes in the file's header; the FLOPs themselves are
    not in the file, they are counted from the recorded shapes as the live table counts them).
    ``overload_names``: the trace was recorded with torch's ``capture_overload_names`` (its op
    names carry the overload, ``aten::add.Tensor``); only then does ``group_by_overload_name``
    split rows, as in torch.
    ``tensor_list_shapes=True`` keys tensor-list arguments by their tensors' shapes (torch
    shows ``[]`` for them; see docs/api.md).
    ``python_functions=False`` leaves the Python frames of ``with_stack=True`` out, as torch 2.11
    and older did (2.12 and later list them); the live profiler follows the installed torch.
    """
    traces = trace if isinstance(trace, list) else [trace]
    if use_device is None:
        use_device = next((d for d in map(infer_device, traces) if d), None)
    if profile_memory is None:
        profile_memory = trace_uses_memory(traces)
    if with_flops is None:
        with_flops = trace_counts_flops(traces)
    frame = averages_frame(
        traces,
        group_by_input_shape,
        group_by_stack_n,
        group_by_overload_name,
        with_flops=with_flops,
        tensor_list_shapes=tensor_list_shapes,
        overload_names=overload_names,
        python_functions=python_functions,
    )
    return KeyAverages(frame, use_device=use_device, profile_memory=profile_memory, with_flops=with_flops)
