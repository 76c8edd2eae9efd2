"""``torchscope serve`` lists each run of several ranks or cycles once, as a job, and serves
its job view (what ``torchscope report DIR`` shows), reading only the files it lists."""

from __future__ import annotations

import base64
import gzip
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from .test_serve_hostile import Served

SOURCE = "cuda/nccl_rank0_of_2.json.gz"


def _as_rank(text: bytes, dst: Path, rank: int) -> None:
    data = json.loads(text)
    data["distributedInfo"] = {**data["distributedInfo"], "rank": rank, "world_size": 2}
    dst.write_text(json.dumps(data))


@pytest.fixture()
def served_job(tmp_path: Path, traces_dir: Path) -> Iterator[Served]:
    text = gzip.decompress((traces_dir / SOURCE).read_bytes())
    run = tmp_path / "log" / "ddp"
    run.mkdir(parents=True)
    for rank in (0, 1):  # two ranks, two cycles each (tensorboard_trace_handler's names)
        for stamp in (1, 2):
            _as_rank(text, run / f"rank{rank}.{stamp}.pt.trace.json", rank)
    served = Served(tmp_path / "log")
    yield served
    served.close()


def test_a_run_of_ranks_and_cycles_is_listed_once_as_a_job(served_job: Served) -> None:
    runs = served_job.runs()
    assert runs[0]["kind"] == "job" and runs[0]["name"] == "ddp (job: 2 ranks, 2 cycles)"
    assert [r.get("kind") for r in runs[1:]] == [None] * 4  # each file still on its own
    status, _, body = served_job.get("/api/payload?id=" + runs[0]["id"])
    assert status == 200
    payload = json.loads(body)
    (run,) = payload["report"]["runs"]
    assert payload["job"] and payload["runs"] == []
    assert (run["ranks"], run["cycles"]) == (2, 2) and [r["steps"] for r in run["per_rank"]] == [6, 6]


def test_a_job_id_names_only_a_listed_run(served_job: Served, tmp_path: Path) -> None:
    made_up = "job~" + base64.urlsafe_b64encode(b"../elsewhere").rstrip(b"=").decode()
    assert served_job.get("/api/payload?id=" + made_up)[0] == 404
    # a link to a trace outside the log directory is not listed, so never part of a job
    outside = tmp_path / "outside.pt.trace.json"
    (tmp_path / "log" / "ddp" / "rank0.1.pt.trace.json").rename(outside)
    os.symlink(outside, tmp_path / "log" / "ddp" / "rank0.1.pt.trace.json")
    job = served_job.runs()[0]
    assert job["name"] == "ddp (job: 2 ranks, 2 cycles)"  # rank 0 keeps 1 cycle, rank 1 has 2
    status, _, body = served_job.get("/api/payload?id=" + job["id"])
    assert status == 200
    (run,) = json.loads(body)["report"]["runs"]
    assert [r["cycles"] for r in run["per_rank"]] == [1, 2]


def test_a_jobs_unreadable_file_is_named_and_a_config_is_never_served(
    served_job: Served, tmp_path: Path
) -> None:
    run = tmp_path / "log" / "ddp"
    (run / "rank1.3.pt.trace.json.gz").write_bytes(b"not gzip at all")  # named like a cycle
    (run / "config.json").write_text('{"lr": 0.1, "epochs": 3}')
    runs = served_job.runs()
    assert "config.json" not in {r["name"].rsplit("/", 1)[-1] for r in runs}
    config_id = base64.urlsafe_b64encode(b"ddp/config.json").rstrip(b"=").decode()
    assert served_job.get("/api/file?id=" + config_id)[0] == 404  # not listed, not served
    assert served_job.get("/api/payload?id=" + config_id)[0] == 404
    status, _, body = served_job.get("/api/payload?id=" + runs[0]["id"])
    assert status == 200
    assert any(w.startswith("skipped ddp/rank1.3.pt.trace.json.gz: ") for w in json.loads(body)["warnings"])


def test_cycles_are_listed_in_number_order(tmp_path: Path, traces_dir: Path) -> None:
    """A run's step_N files were listed as text sorts them: step_1, step_11, step_23, step_3."""
    traces = tmp_path / "log" / "run" / "traces"
    traces.mkdir(parents=True)
    text = gzip.decompress((traces_dir / SOURCE).read_bytes())
    for n in (3, 11, 1, 23):
        (traces / f"step_{n}.pt.trace.json").write_bytes(text)
    served = Served(tmp_path / "log")
    try:
        files = [r["name"] for r in served.runs() if r.get("kind") != "job"]
    finally:
        served.close()
    assert [Path(name).name for name in files] == [f"step_{n}.pt.trace.json" for n in (1, 3, 11, 23)]


def test_a_run_whose_script_has_its_own_profiler_is_listed_as_one_job(
    tmp_path: Path, traces_dir: Path
) -> None:
    """torchscope run's setup-only cycle and the copies of the script's profiler's cycles were
    loose files, no job: discovery knew only its step_N names."""
    traces = tmp_path / "log" / "prof2" / "traces"
    traces.mkdir(parents=True)
    text = gzip.decompress((traces_dir / SOURCE).read_bytes())
    for name in ("run", "script_profiler1.cycle1", "script_profiler1.cycle2", "script_profiler1.cycle3"):
        (traces / f"{name}.pt.trace.json").write_bytes(text)
    served = Served(tmp_path / "log")
    try:
        jobs = [r["name"] for r in served.runs() if r.get("kind") == "job"]
    finally:
        served.close()
    assert jobs == ["prof2 (job: 1 rank, 4 cycles)"]
