"""The dashboard's Job view, in headless Chromium (as tests/browser drives it)."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from torchscope.cli.main import main

CHROMIUM = os.environ.get("TORCHSCOPE_CHROMIUM", "/usr/bin/chromium")


def test_job_view_opens_first_and_names_the_straggler(
    gloo_job: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with _job_page(gloo_job, tmp_path, capsys) as (page, errors):
        assert page.locator("#view").get_attribute("data-rendered") == "job"
        assert (
            page.locator("[data-testid=job-run]").inner_text().startswith("job: 2 ranks, 1 cycle, gloo")
        )
        cards = page.locator(".card").all_inner_texts()
        assert any(c.startswith("straggler") and c.endswith("rank 1") for c in cards)
        assert page.locator("[data-testid=job-ranks] tbody tr").count() == 2
        # ranks in their order (they came last first: 127 down to 0 in a job of 128)
        ranks = page.eval_on_selector_all("[data-testid=job-ranks] tbody tr td:first-child", "t => t.map(x => x.textContent)")
        assert ranks == ["0", "1"]
        first = page.locator("[data-testid=job-recommendations] .rec .t").first.inner_text()
        assert first == "straggler"  # a finding of the job as a whole: no "on N of M ranks", as the terminal
        # the page holds the job summary only: no per-trace tab saying "no steps" about a job
        tabs = page.eval_on_selector_all("#tabs button", "bs => bs.map(b => b.dataset.view)")
        assert "job" in tabs and not {"overview", "operators", "kernels", "timeline", "flame"} & set(tabs)
        # the Report tab holds each run's sections of --json (it held one table of the runs)
        page.click("#tabs button[data-view=report]")
        page.wait_for_selector("#view[data-rendered=report]")
        sections = page.eval_on_selector_all("#view .section", "s => s.map(x => x.dataset.section)")
        assert {"steps_ns", "cycle_table", "collectives", "straggler", "per_rank", "recommendations"} <= set(sections)
        assert page.locator("#view h2", has_text="Run job").count() == 1
        # a job's times are ns: shown as durations (they read 97570000)
        median = page.inner_text("#view .section[data-section=median_breakdown_ns]")
        assert ("ms" in median or "µs" in median) and not re.search(r"\d{6}", median.replace(",", ""))
    assert errors == []


def test_job_cards_are_the_steps_themselves(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Finding 4: on a one-rank log dir, the cards are the shortest and longest step (not the
    median twice)."""
    from tests.job.test_jobs import _log_dir

    from torchscope.job import analyse_job
    from torchscope.render.console import fmt_ns

    root = tmp_path / "log"
    _log_dir(root, slow_step=8)
    steps = analyse_job(root, engine="local:1")["runs"][0]["steps_ns"]
    with _job_page(root, tmp_path, capsys) as (page, errors):
        cards = [" ".join(c.split()) for c in page.locator(".card").all_inner_texts()]
    assert f"shortest step {fmt_ns(steps['min'])}" in cards
    assert f"median step (6 steps) {fmt_ns(steps['median'])}" in cards
    assert f"longest step {fmt_ns(steps['max'])} (cycle {steps['max_cycle']})" in cards
    assert steps["min"] < steps["median"] < steps["max"]
    assert errors == []


@contextmanager
def _job_page(
    root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> Iterator[tuple[Any, list[str]]]:
    """``report ROOT --html`` opened in headless Chromium: the page, and the errors it logs."""
    if not Path(CHROMIUM).exists():
        pytest.fail(f"the dashboard tests drive Debian's Chromium at {CHROMIUM} (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    html = tmp_path / "job.html"
    assert main(["report", str(root), "--html", str(html), "--engine", "local:1"]) == 0
    capsys.readouterr()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.goto(html.resolve().as_uri())
        page.wait_for_selector("[data-testid=job-run]")
        yield page, errors
        browser.close()


def test_the_job_page_shows_the_terminals_step_by_category(
    gloo_job: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The terminal said "median rank's (rank N) mean step by category: ..." and the page did
    not say it at all; the same numbers now stand in both."""
    assert main(["report", str(gloo_job), "--no-html", "--engine", "local:1"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if "mean step by category: " in x)
    head, _, said = line.partition(": ")
    terminal = [part.rsplit(" (", 1) for part in said.split(", ")]
    with _job_page(gloo_job, tmp_path, capsys) as (page, errors):
        assert page.get_by_role("heading", name="Median rank's (rank").inner_text() == head[0].upper() + head[1:]
        rows = page.locator("[data-testid=job-categories] tbody tr").all_inner_texts()
    shown = [r.split("\t") for r in rows]
    assert [(c, v, s) for c, v, s in shown] == [
        (nv.rsplit(" ", 2)[0], " ".join(nv.rsplit(" ", 2)[1:]), share.rstrip(")")) for nv, share in terminal
    ]
    assert errors == []


def test_a_left_out_cycle_has_no_step_times_and_evidence_has_units(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A new user's finds on the Job tab: a cycle that is only the profile's exit showed
    "0 ns" as its shortest, median and longest step (the terminal says it has none), and a
    finding's evidence showed its share raw (0.1034) where a trace's page shows 10.3 %."""
    import torch

    import torchscope

    model = torch.nn.Sequential(*[torch.nn.Linear(16, 16) for _ in range(24)])
    opt = torch.optim.Adam(model.parameters(), foreach=False)  # optimizer_foreach, with a share
    root = tmp_path / "log"
    sched = torchscope.schedule(wait=0, warmup=0, active=1)
    handler = torchscope.tensorboard_trace_handler(str(root))
    with torchscope.profile(schedule=sched, on_trace_ready=handler, with_stack=True) as prof:
        for _ in range(2):
            model(torch.randn(4, 16)).sum().backward()
            opt.step()
            opt.zero_grad()
            prof.step()
    with _job_page(root, tmp_path, capsys) as (page, errors):
        rows = [r.split("\t") for r in page.locator("[data-testid=job-cycles] tbody tr").all_inner_texts()]
        assert [r[0] for r in rows] == ["0", "1", "2"]
        # each cycle's file beside its number (a run names its cycles step_N, the job 0, 1, 2)
        assert all(r[1].endswith(".pt.trace.json") for r in rows) and len({r[1] for r in rows}) == 3
        assert rows[2][4:7] == ["–", "–", "–"] and "only the profile's exit" in rows[2][-1]
        assert all(cell.endswith(("µs", "ms")) for cell in rows[0][4:7])
        cards = page.locator("[data-testid=job-recommendations] .rec")
        foreach = cards.filter(has_text="optimizer_foreach")
        foreach.locator("summary").click()
        # where it fired, in the terminal's words (job.render): 2 of the 3 cycles, the third the
        # exit, and which cycle's numbers the message quotes
        title = foreach.locator(".t").inner_text()
        assert title.startswith("optimizer_foreach (in 2 cycles; worst: cycle ") and title[-2:] in ("0)", "1)")
        share = foreach.locator("dd").last.inner_text()
        assert share.endswith("%") and not share.startswith("0.")
    assert errors == []


def test_the_job_page_opens_on_the_warnings_and_the_ranks_read(
    traces_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # a job with a rank that could not be read: the terminal said so, the Job tab (where the page
    # opens) showed "3 ranks" and no warning; they were on the Report tab only
    import gzip
    import json

    root = tmp_path / "three"
    root.mkdir()
    for r in range(3):
        with gzip.open(traces_dir / "multirank" / f"rank-{r % 2}.json.gz") as fh:
            doc = json.load(fh)
        doc["distributedInfo"] = {**doc["distributedInfo"], "rank": r, "world_size": 3}
        text = json.dumps(doc)
        (root / f"rank-{r}.json").write_text(text if r != 2 else text[:3000] + "@" + text[3000:])
    with _job_page(root, tmp_path, capsys) as (page, errors):
        head = page.locator("[data-testid=job-run]").inner_text()
        assert head == "three: 2 ranks read (1 more could not be: see the warnings), 1 cycle, nccl"
        box = page.locator("[data-testid=job-warnings]")
        assert box.locator("summary").inner_text() == "1 warning"
        box.locator("summary").click()
        assert box.locator("li").first.inner_text().startswith("skipped ")
    assert errors == []
