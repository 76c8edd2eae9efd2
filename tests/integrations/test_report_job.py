"""The report every integration ends with reads a directory of several ranks as a job.

Rank by rank in the training process (``local:1``), reduced to the job's summary: the same
lines ``torchscope report DIR`` prints, the job's page, and a headline from the job's numbers.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import torchscope
from torchscope.integrations._report import headline, report_traces, summary_text


def _as_rank(src: Path, dst: Path, rank: int) -> None:
    data = json.loads(gzip.decompress(src.read_bytes()))
    data["distributedInfo"] = {**data["distributedInfo"], "rank": rank, "world_size": 2}
    dst.write_text(json.dumps(data))


def test_a_directory_of_ranks_is_reported_as_a_job(traces_dir: Path, tmp_path: Path) -> None:
    src = traces_dir / "cuda" / "nccl_rank0_of_2.json.gz"
    logs = tmp_path / "torchscope"
    logs.mkdir()
    for rank in (0, 1):
        _as_rank(src, logs / f"rank{rank}.1.pt.trace.json", rank)
    payload, page = report_traces(logs, logs / "report.html", "torchscope: Lightning fit")
    job = payload["report"]
    assert job["kind"] == "job" and page.is_file()
    (run,) = job["runs"]
    assert run["ranks"] == 2 and [r["rank"] for r in run["per_rank"]] == [0, 1]
    text = summary_text(payload)
    assert text.splitlines()[0].startswith("== torchscope: 2 ranks, 1 cycle, nccl")
    events = torchscope.load(src).events.height
    assert headline(payload) == {
        "step_time_ms": round(run["step_ns"]["median"] / 1e6, 3),
        "events": 2 * events,
        "top_finding": run["recommendations"][0]["rule"],
        "top_finding_message": run["recommendations"][0]["message"],
    }
    assert "torchscope-data" in page.read_text()


def test_one_ranks_cycles_get_their_full_views_beside_the_job_page(traces_dir: Path, tmp_path: Path) -> None:
    src = traces_dir / "cuda" / "backward_thread_small.json"
    logs = tmp_path / "torchscope"
    logs.mkdir()
    for stamp in (1, 2):  # one rank, two cycles: a single-device run with repeat=2
        (logs / f"rank0.{stamp}.pt.trace.json").write_bytes(src.read_bytes())
    payload, page = report_traces(logs, logs / "report.html", "torchscope: Lightning fit")
    (run,) = payload["report"]["runs"]
    views = run["per_rank"][0]["views"]
    assert views == sorted(views) and len(views) == 2
    for view in views:
        assert view.startswith("report.ranks/") and "torchscope-data" in (logs / view).read_text()
    assert "where the time goes" in summary_text(payload)  # the median cycle in full, as report DIR
