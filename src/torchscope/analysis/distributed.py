"""Distributed: compare ranks, measure collectives, and find the rank the others wait for.

Over a ``TraceSet`` (a folder of ranks) this gives the TensorBoard plugin's distributed view:
each rank's step breakdown and its computation / communication / overlap / other split,
collective statistics from the communication kernels (count, time, message size, algorithm and
bus bandwidth when the trace records sizes), and the straggler: the rank with the most
computation per step, and how long each other rank sits in collectives waiting for it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from torchscope.analysis import names
from torchscope.analysis.frames import kinds
from torchscope.analysis.overview import BREAKDOWN_CATEGORIES, overview
from torchscope.trace.model import Trace, TraceSet

_COLL = re.compile(r"(AllReduce|AllGather|ReduceScatter|Broadcast|Reduce|AllToAll|SendRecv|Send|Recv)", re.I)
_ALGO = re.compile(r"_(RING|TREE|COLLNET\w*|NVLS\w*|PAT)(_(LL128|LL|SIMPLE))?", re.I)
# bus bandwidth factor per collective, n = world size (NCCL's performance notes)
_BUS = {
    "allreduce": lambda n: 2 * (n - 1) / n,
    "allgather": lambda n: (n - 1) / n,
    "reducescatter": lambda n: (n - 1) / n,
    "alltoall": lambda n: (n - 1) / n,
}


def rank_of(key: str, trace: Trace) -> int | None:
    """The trace's rank: its ``distributedInfo``, else ``rank-N``/``rank_N`` in its key, else
    None. Other digits in a key (a pid, a file timestamp) are never a rank."""
    from torchscope.job.discover import rank_in_name

    if trace.meta.rank is not None:
        return int(trace.meta.rank)
    return rank_in_name(Path(key), Path())


def ranks_of(ts: TraceSet) -> dict[str, int]:
    """Each member's rank (``rank_of``); members without one take, in order, the numbers no
    other member has (by position, they doubled a real rank 0). Every table of a set names
    ranks this way."""
    known = {key: rank_of(key, tr) for key, tr in ts.items()}
    taken = {r for r in known.values() if r is not None}
    free = (n for n in range(len(known) + len(taken) + 1) if n not in taken)
    return {key: next(free) if r is None else r for key, r in known.items()}


def collective_stats(trace: Trace) -> pl.DataFrame:
    """Per collective and algorithm: count, total/mean ns, bytes, algbw and busbw (GB/s)."""
    k = kinds(trace, "kernel").filter(names.COMM_KERNEL)
    world = trace.meta.world_size or 1
    empty = pl.DataFrame(
        schema={
            "collective": pl.String,
            "algorithm": pl.String,
            "count": pl.UInt32,
            "total_ns": pl.Int64,
            "mean_ns": pl.Float64,
            "bytes": pl.Int64,
            "algbw_gbps": pl.Float64,
            "busbw_gbps": pl.Float64,
        }
    )
    if k.height == 0:
        return empty
    nm = k["name"].cast(pl.String).to_list()
    coll = [(m.group(1) if (m := _COLL.search(s)) else "other") for s in nm]
    algo = [(m.group(0).lstrip("_") if (m := _ALGO.search(s)) else "") for s in nm]
    g = (
        k.with_columns(pl.Series("collective", coll), pl.Series("algorithm", algo))
        .group_by("collective", "algorithm")
        .agg(
            pl.len().alias("count"),
            pl.col("dur_ns").sum().alias("total_ns"),
            pl.col("dur_ns").mean().alias("mean_ns"),
            pl.col("bytes").sum().alias("bytes"),
            pl.col("dur_ns").filter(pl.col("bytes") > 0).sum().alias("sized_ns"),
        )
    )
    factor = [
        (_BUS.get(c.lower(), lambda n: 1.0)(world) if world > 1 else 1.0) for c in g["collective"].to_list()
    ]
    return (
        g.with_columns(
            pl.when(pl.col("sized_ns") > 0)
            .then(pl.col("bytes") / pl.col("sized_ns"))
            .otherwise(None)
            .alias("algbw_gbps")
        )
        .with_columns((pl.col("algbw_gbps") * pl.Series(factor)).alias("busbw_gbps"))
        .with_columns(pl.when(pl.col("sized_ns") > 0).then(pl.col("bytes")).otherwise(None).alias("bytes"))
        .drop("sized_ns")
        .sort(["total_ns", "collective", "algorithm"], descending=[True, False, False])
    )


@dataclass(frozen=True)
class Distributed:
    ranks: (
        pl.DataFrame
    )  # rank, steps, step_ns, <categories ns>, computation_ns, communication_ns, overlap_ns, other_ns
    collectives: pl.DataFrame  # rank + collective_stats columns
    slowest_rank: int | None
    wait_for_slowest: pl.DataFrame  # rank, wait_ns (extra collective time per step vs the slowest rank)


def distributed(ts: TraceSet) -> Distributed:
    rows = []
    colls = []
    numbers = ranks_of(ts)
    for key, tr in ts.items():
        r = numbers[key]
        ov = overview(tr)
        co = ov.comm_overlap
        n = max(co.height, 1)
        row: dict[str, float | int] = {
            "rank": r,
            "steps": ov.steps.height,
            "step_ns": ov.breakdown_ns["Total"],
        }
        row.update({c: ov.breakdown_ns[c] for c in BREAKDOWN_CATEGORIES})
        for c in ("computation_ns", "communication_ns", "overlap_ns", "other_ns"):
            row[c] = float(co[c].sum()) / n
        rows.append(row)
        cs = collective_stats(tr)
        colls.append(cs.with_columns(pl.lit(r, dtype=pl.Int64).alias("rank")).select("rank", *cs.columns))
    ranks = pl.DataFrame(rows).sort("rank") if rows else pl.DataFrame()
    collectives = pl.concat(colls) if colls else pl.DataFrame()
    slowest: int | None = None
    wait = pl.DataFrame(schema={"rank": pl.Int64, "wait_ns": pl.Float64})
    if ranks.height > 1:
        slowest = int(ranks["rank"][int(ranks["computation_ns"].arg_max() or 0)])
        base = float(ranks.filter(pl.col("rank") == slowest)["communication_ns"][0])
        wait = ranks.select("rank", (pl.col("communication_ns") - base).clip(0, None).alias("wait_ns"))
    return Distributed(ranks=ranks, collectives=collectives, slowest_rank=slowest, wait_for_slowest=wait)
