"""Modules: time by ``nn.Module``, as a tree of paths.

With ``with_stack``/``with_modules`` the profiler records a ``python_function`` event named
``nn.Module: ResNet_0`` around every module call (older traces use a user annotation of the
same form). Nesting those gives the module tree; each node carries its host time and the
device time of the kernels launched beneath it, so a user sees which layer is expensive.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from torchscope.analysis.operators import _device_time_per_row
from torchscope.trace.model import Trace
from torchscope.trace.tree import nearest_ancestor

MODULE_PREFIX = "nn.Module: "


def module_tree(trace: Trace) -> pl.DataFrame:
    """path, module, depth, calls, host_ns, device_ns per module path, in tree order."""
    ev = trace.events
    is_mod = (
        ev["kind"].is_in(["python_function", "user_annotation"])
        & ev["name"].cat.starts_with(MODULE_PREFIX)
    ).to_numpy()
    empty = pl.DataFrame(
        schema={
            "path": pl.String,
            "module": pl.String,
            "depth": pl.Int32,
            "calls": pl.UInt32,
            "host_ns": pl.Int64,
            "device_ns": pl.Int64,
        }
    )
    if not is_mod.any():
        return empty
    parent, mods, path_of, depth_of = _module_paths(trace, is_mod)
    _, dev_total = _device_time_per_row(trace)
    df = pl.DataFrame(
        {
            "path": [path_of[r] for r in mods.tolist()],
            "depth": [depth_of[r] for r in mods.tolist()],
            "host_ns": ev["dur_ns"].to_numpy()[mods],
            "device_ns": dev_total[mods],
            "first": ev["start_ns"].to_numpy()[mods],
        }
    )
    return (
        df.group_by("path")
        .agg(
            pl.col("depth").first().cast(pl.Int32),
            pl.len().alias("calls"),
            pl.col("host_ns").sum(),
            pl.col("device_ns").sum(),
            pl.col("first").min(),
        )
        .with_columns(pl.col("path").str.split("/").list.last().alias("module"))
        .sort("path")
        .select("path", "module", "depth", "calls", "host_ns", "device_ns")
    )


def _module_paths(
    trace: Trace, is_mod: np.ndarray
) -> tuple[np.ndarray, np.ndarray, dict[int, str], dict[int, int]]:
    """(parent column, module event rows, each module row's path, each one's depth)."""
    ev = trace.events
    parent = ev["parent"].fill_null(-1).to_numpy().astype(np.int64)
    names_ = ev["name"].cast(pl.String).to_numpy()
    mods = np.flatnonzero(is_mod)
    # nearest enclosing module of each module event
    mod_parent = nearest_ancestor(parent, mods, is_mod)
    # paths in start order: parents come before children
    path_of: dict[int, str] = {}
    depth_of: dict[int, int] = {}
    for row, par in zip(mods.tolist(), mod_parent.tolist(), strict=True):
        short = str(names_[row])[len(MODULE_PREFIX) :]
        if par >= 0 and par in path_of:
            path_of[row] = path_of[par] + "/" + short
            depth_of[row] = depth_of[par] + 1
        else:
            path_of[row] = short
            depth_of[row] = 0
    return parent, mods, path_of, depth_of


def module_ops(trace: Trace) -> pl.DataFrame:
    """path, name, calls, host_ns, device_ns: the ops a module calls itself (an op's nearest
    enclosing op or module is the module; the ops they call are theirs), biggest first.

    The drill-down from a module to its ops; its host time plus its submodules' is the
    module's, less the Python time between ops.
    """
    ev = trace.events
    schema = {
        "path": pl.String,
        "name": pl.String,
        "calls": pl.UInt32,
        "host_ns": pl.Int64,
        "device_ns": pl.Int64,
    }
    is_mod = (
        ev["kind"].is_in(["python_function", "user_annotation"])
        & ev["name"].cat.starts_with(MODULE_PREFIX)
    ).to_numpy()
    if not is_mod.any():
        return pl.DataFrame(schema=schema)
    parent, _, path_of, _ = _module_paths(trace, is_mod)
    is_op = (ev["kind"] == "cpu_op").to_numpy()
    ops = np.flatnonzero(is_op)
    owner = nearest_ancestor(parent, ops, is_mod | is_op)
    mine = (owner >= 0) & is_mod[np.maximum(owner, 0)]
    ops, owner = ops[mine], owner[mine]
    if ops.size == 0:
        return pl.DataFrame(schema=schema)
    _, dev_total = _device_time_per_row(trace)
    return (
        pl.DataFrame(
            {
                "path": [path_of[int(o)] for o in owner.tolist()],
                "name": ev["name"].cast(pl.String).to_numpy()[ops],
                "host_ns": ev["dur_ns"].to_numpy()[ops],
                "device_ns": dev_total[ops],
            }
        )
        .group_by("path", "name")
        .agg(pl.len().alias("calls"), pl.col("host_ns").sum(), pl.col("device_ns").sum())
        .sort(["host_ns", "path", "name"], descending=[True, False, False])
        .select(list(schema))
        .cast(schema)  # type: ignore[arg-type]
    )
