"""``diff`` of directories reads their files one at a time, as ``report DIR`` does.

A diff of two folders held every rank's Trace at once (two 32-rank folders of a 35 MB trace:
2.8 GB; one process's 50 cycles: 1.7 GB). The numbers must not change for it: a directory read
file by file gives the diff of the same directory loaded whole.
"""

from __future__ import annotations

import json
import shutil
import weakref
from pathlib import Path

import pytest

import torchscope
from torchscope.analysis.diff import JobDir, diff_traces
from torchscope.cli.main import main
from torchscope.trace.model import Trace

SOURCE = "cuda/nccl_rank0_of_2.json.gz"


@pytest.fixture
def cycles(tmp_path: Path, traces_dir: Path) -> Path:
    """One process's five cycles (``torchscope run``'s names), copies of one real trace."""
    root = tmp_path / "cycles" / "traces"
    root.mkdir(parents=True)
    for step in (4, 22, 40, 58, 76):
        shutil.copy(traces_dir / SOURCE, root / f"step_{step}.pt.trace.json.gz")
    return root.parent


def test_a_directory_read_file_by_file_gives_the_diff_of_it_loaded_whole(
    cycles: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    refs: list[weakref.ref[Trace]] = []
    most = 0
    read = JobDir.read

    def counting(self: JobDir, cycle: object) -> Trace | None:
        nonlocal most
        got = read(self, cycle)
        if got is not None:
            refs.append(weakref.ref(got))
            most = max(most, sum(r() is not None for r in refs))
        return got

    monkeypatch.setattr(JobDir, "read", counting)
    by_file = diff_traces(JobDir.of(cycles), JobDir.of(cycles)).to_dict()
    whole = torchscope.load(cycles)
    assert by_file == diff_traces(whole, whole).to_dict()
    # five copies of a trace of 3 steps: the same 3 step numbers in each, counted in each cycle
    assert (by_file["a"]["cycles"], by_file["a"]["kept"], by_file["a"]["steps"]) == (5, 3, 15)
    assert most <= 2  # one cycle at a time (two ranks at a time: ``_per_rank``)


def test_a_file_that_does_not_read_is_skipped_with_a_line(
    cycles: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = tmp_path / "other"
    shutil.copytree(cycles, other)
    # a trace's head (discovery takes it for one), and then no JSON at all
    (other / "traces" / "step_94.pt.trace.json").write_bytes(b'{"traceEvents": [{"ph": "X", @@@@ ]}')
    assert main(["diff", str(cycles), str(other), "--json"]) == 0
    out, err = capsys.readouterr()
    bad = other / "traces" / "step_94.pt.trace.json"
    assert f"warning: skipped {bad}: not valid JSON" in err  # the file's path: two folders in a diff
    assert [w for w in json.loads(out)["warnings"] if "step_94" in w] == [
        f"skipped {bad}: not valid JSON (JSON is malformed: object keys must be strings (byte 29))"
    ]
