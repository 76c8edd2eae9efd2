"""Name patterns are tested once per distinct name and matched back: the verdict per row must be
exactly the row-by-row one, for text and categorical names, with nulls, in any hash order."""

from __future__ import annotations

import re

import polars as pl
import pytest

from torchscope.analysis import names

# many distinct names, so that a hash-ordered unique() would shuffle them between evaluations
OPS = [f"aten::op{i}" for i in range(3000)] + [
    "aten::mm",
    "aten::mul",
    "aten::bmm",
    "MmBackward0",
    "aten::addmm_",
]
NAMES = (OPS * 3)[::-1] + [None, "ProfilerStep#12", "Optimizer.step#SGD.step", "ncclDevKernel_AllReduce"]


@pytest.mark.parametrize("dtype", [pl.String, pl.Categorical])
def test_every_pattern_agrees_with_testing_each_row(dtype: pl.DataType) -> None:
    df = pl.DataFrame({"name": pl.Series(NAMES, dtype=pl.String).cast(dtype)})
    eligible = df.select(names.TENSOR_CORE_ELIGIBLE_OP).to_series()
    pattern = re.compile(r"^(aten::(mm|bmm|addmm_?)|(Mm)\w*Backward\d*)$")
    expected = [None if n is None else bool(pattern.match(n)) for n in NAMES]
    assert eligible.to_list() == expected
    assert eligible.sum() == 3 * 4  # mm, bmm, MmBackward0, addmm_ (three times each): not mul
    step = df.select(names.PROFILER_STEP).to_series().to_list()
    assert step == [None if n is None else n.startswith("ProfilerStep#") for n in NAMES]
    comm = df.select(names.COMM_KERNEL).to_series().to_list()
    assert comm == [None if n is None else n.startswith("ncclDev") for n in NAMES]


def test_a_frame_with_an_expression_and_a_filter() -> None:
    """The shape analyses use: combined with other columns, inside ``filter`` and ``when``."""
    df = pl.DataFrame({"name": NAMES, "kind": ["cpu_op"] * len(NAMES)})
    got = df.filter(names.TENSOR_CORE_ELIGIBLE_OP & (pl.col("kind") == "cpu_op"))["name"].to_list()
    assert sorted(set(got)) == ["MmBackward0", "aten::addmm_", "aten::bmm", "aten::mm"] and len(got) == 12
    roles = df.select(
        pl.when(names.OPTIMIZER).then(pl.lit("opt")).when(names.PROFILER_STEP).then(pl.lit("step")).alias("r")
    )["r"]
    assert roles.value_counts().sort("r").rows() == [(None, len(NAMES) - 2), ("opt", 1), ("step", 1)]
