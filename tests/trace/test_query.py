"""SQL over a trace, a set of ranks, and a folder of saved ranks gives the DataFrame answers."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

import torchscope
from torchscope.errors import TraceError
from torchscope.trace import TraceSet
from torchscope.trace.query import sql

pytest.importorskip("duckdb")

KERNELS_PER_RANK = (
    "SELECT trace, count(*) AS n, sum(dur_ns)::BIGINT AS ns FROM kernels GROUP BY trace ORDER BY trace"
)


@pytest.fixture(scope="module")
def ranks(traces_dir: Path) -> TraceSet:
    loaded = torchscope.load(traces_dir / "multirank")
    assert isinstance(loaded, TraceSet)
    return loaded


def test_sql_over_one_trace_matches_polars(ranks: TraceSet) -> None:
    trace = ranks["rank0"]
    got = trace.sql(
        "SELECT name, sum(self_ns)::BIGINT AS s FROM ops GROUP BY name ORDER BY s DESC, name LIMIT 5"
    )
    want = (
        trace.ops.group_by(pl.col("name").cast(pl.String))
        .agg(pl.col("self_ns").sum().alias("s"))
        .sort(["s", "name"], descending=[True, False])
        .head(5)
    )
    assert got.rows() == want.rows()


def test_sql_over_ranks_in_memory_and_saved(ranks: TraceSet, tmp_path: Path) -> None:
    expected = [(k, t.kernels.height, int(t.kernels["dur_ns"].sum())) for k, t in ranks.items()]
    assert ranks.sql(KERNELS_PER_RANK).rows() == expected
    ranks.save(tmp_path / "runs")
    assert sql(KERNELS_PER_RANK, tmp_path / "runs").rows() == expected  # straight from Parquet
    one = sql("SELECT count(*) FROM kernels", tmp_path / "runs" / "rank1").item()
    assert one == ranks["rank1"].kernels.height


def test_sql_errors_are_trace_errors(ranks: TraceSet) -> None:
    with pytest.raises(TraceError, match="nope"):
        ranks["rank0"].sql("SELECT nope FROM kernels")
