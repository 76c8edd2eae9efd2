"""Our own temporaries, and any dot-file or dot-directory, are no traces to any directory scan.

``write_atomically`` writes each trace as ``.partial-PID-N-NAME`` and renames it; a log
directory copied while one was being written held that half file, and ``report DIR`` showed it
as another cycle, ``torchscope.load(DIR)`` read it as the rank's last cycle (and not the real
ones), and ``serve`` listed it. A notebook's ``.ipynb_checkpoints/`` copy was another run.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from pathlib import Path

import torchscope
from torchscope.cli.main import main
from torchscope.cli.serve import LogDir, run_id
from torchscope.job.discover import discover
from torchscope.writes import temporary_sibling

SMALL = "cuda/backward_thread_small.json"


def _copied_while_writing(traces_dir: Path, root: Path) -> Path:
    """A log directory of one worker's two finished cycles, copied while the third was being
    written (its temporary holds half of it), and a notebook's checkpoint copy of a cycle."""
    root.mkdir()
    whole = (traces_dir / SMALL).read_bytes()
    for stamp in (100, 200):
        (root / f"w.{stamp}.pt.trace.json").write_bytes(whole)
    partial = temporary_sibling(root / "w.300.pt.trace.json")
    partial.write_bytes(whole[: len(whole) // 2])
    (root / ".ipynb_checkpoints").mkdir()
    shutil.copy(traces_dir / SMALL, root / ".ipynb_checkpoints" / "w.150.pt.trace.json")
    return root


def test_discovery_and_load_see_only_the_finished_cycles(traces_dir: Path, tmp_path: Path) -> None:
    root = _copied_while_writing(traces_dir, tmp_path / "log")
    found = discover(root)
    assert [(run.name, run.cycles, [f.name for r in run.ranks for f in r.files]) for run in found.runs] == [
        ("log", 2, ["w.100.pt.trace.json", "w.200.pt.trace.json"])
    ]
    loaded = torchscope.load(root)
    assert (list(loaded.traces), loaded.members, loaded.skipped) == (["w.100", "w.200"], "cycles", ())


def test_report_of_the_directory_counts_one_run_of_two_cycles(
    traces_dir: Path, tmp_path: Path
) -> None:
    root = _copied_while_writing(traces_dir, tmp_path / "log")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["report", str(root), "--no-html", "--json"]) == 0
    runs = json.loads(out.getvalue())["runs"]
    assert [(r["run"], r["ranks"], r["cycles"]) for r in runs] == [("log", 1, 2)]


def test_serve_neither_lists_nor_serves_hidden_files(traces_dir: Path, tmp_path: Path) -> None:
    root = _copied_while_writing(traces_dir, tmp_path / "log")
    logdir = LogDir(root)
    assert [r["name"] for r in logdir.runs()] == [
        "log (job: 1 rank, 2 cycles)",
        "w.100.pt.trace.json",
        "w.200.pt.trace.json",
    ]
    partial = next(p.name for p in root.iterdir() if p.name.startswith(".partial-"))
    for hidden in (partial, ".ipynb_checkpoints/w.150.pt.trace.json"):
        assert logdir.resolve(run_id(hidden.encode())) is None
