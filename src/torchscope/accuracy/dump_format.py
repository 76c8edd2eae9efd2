"""The accuracy dump's on-disk format: file names, table schemas, and which columns a
comparison cannot do without. Torch-free, so that ``compare_dumps`` (``offline``) can check a
dump it reads against what ``dump`` writes, on a machine without torch.
"""

from __future__ import annotations

from typing import Any

import polars as pl

FORMAT = "torchscope-accuracy-dump"
VERSION = 2  # 2: module records, mutated_inputs; version 1 dumps are still read

OPS_SCHEMA: dict[str, Any] = {
    "index": pl.Int64,
    "op": pl.String,
    "overload": pl.String,
    "module": pl.String,
    "direction": pl.String,
    "grad_fn": pl.String,
    "call_site": pl.String,
    "status": pl.String,
    "note": pl.String,
    "mutated_inputs": pl.List(pl.String),
}
MODULES_SCHEMA: dict[str, Any] = {
    "index": pl.Int64,  # completion order: children before their parents
    "module": pl.String,
    "type": pl.String,  # the module's class name
    "call": pl.Int64,  # the module's n-th call (forward and backward of one call share it)
    "direction": pl.String,
    "status": pl.String,  # "ok", or "random": random numbers were drawn inside the call
}
TENSORS_SCHEMA: dict[str, Any] = {
    "op_index": pl.Int64,
    "role": pl.String,  # "input" or "output"
    "position": pl.Int64,
    "shape": pl.List(pl.Int64),
    "dtype": pl.String,
    "numel": pl.Int64,
    "min": pl.Float64,
    "max": pl.Float64,
    "mean": pl.Float64,
    "abs_mean": pl.Float64,
    "l2": pl.Float64,
    "nan": pl.Int64,
    "inf": pl.Int64,
    "checksum": pl.Int64,
    "sketch": pl.List(pl.Float64),
    "saved": pl.Boolean,
}

# Each table's schema, and the columns without which its rows cannot be aligned or compared
# (a dump lacking another column is compared with that column null, and a warning).
TABLES: dict[str, tuple[dict[str, Any], tuple[str, ...]]] = {
    "ops.parquet": (OPS_SCHEMA, ("index", "op", "direction", "status")),
    "modules.parquet": (MODULES_SCHEMA, ("index", "module", "type", "call", "direction", "status")),
    "tensors.parquet": (TENSORS_SCHEMA, ("op_index", "role", "position", "shape", "dtype", "numel")),
    "module_tensors.parquet": (TENSORS_SCHEMA, ("op_index", "role", "position", "shape", "dtype", "numel")),
}
# What an absent optional column reads as (null otherwise): the values ``dump`` writes when
# there is nothing to say, so that op selection and tolerances work as for a whole dump.
ABSENT: dict[str, Any] = {"overload": "default", "module": "", "call_site": "", "grad_fn": ""}
