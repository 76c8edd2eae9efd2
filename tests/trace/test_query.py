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


def test_an_empty_answer_is_an_empty_frame_with_its_columns(ranks: TraceSet, tmp_path: Path) -> None:
    """It raised "Must pass schema, or at least one RecordBatch" from inside Polars."""
    got = ranks["rank0"].sql("SELECT name, dur_ns FROM kernels WHERE CAST(name AS VARCHAR) = 'nope'")
    assert got.height == 0 and got.columns == ["name", "dur_ns"]
    flows = ranks.sql("SELECT kind, count(*) AS n FROM flows GROUP BY 1")  # these ranks have none
    assert flows.height == 0 and flows.columns == ["kind", "n"]
    ranks.save(tmp_path / "saved")
    assert sql("SELECT * FROM flows", tmp_path / "saved").height == 0


def test_sql_without_pyarrow_says_what_to_install(ranks: TraceSet, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "pyarrow", None)  # as if it were not installed
    with pytest.raises(TraceError, match=r"pyarrow is missing\): pip install 'torchscope\[sql\]'"):
        ranks["rank0"].sql("SELECT count(*) FROM kernels")
