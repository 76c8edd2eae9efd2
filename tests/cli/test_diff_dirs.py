"""`torchscope diff` on two `torchscope run` directories: ranks are ranks, cycles are cycles.

A run directory holds one file per profiling cycle of each rank. Read as a set of ranks (each
cycle a "rank", each whole cycle one "step") the diff compared a cycle of A with a cycle of B,
so identical scripts whose cycles held different step counts showed ×0.5. These runs are real:
the same training script, profiled with different step counts so the cycle counts differ.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from torchscope.analysis.diff import diff_traces
from torchscope.cli.main import main
from torchscope.trace.loader import load

SCRIPT = Path(__file__).parent / "scripts" / "linear_steps.py"


def _run(out: Path, steps: int, active: int, repeat: int) -> Path:
    args = ["--wait", "1", "--warmup", "1", "--active", str(active), "--repeat", str(repeat)]
    code = main(["run", "--out", str(out), "--no-summary", *args, str(SCRIPT), str(steps)])
    assert code == 0
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    root = tmp_path_factory.mktemp("diffdirs")
    a = _run(root / "a", 14, 2, 3)  # three cycles: steps 2,3 · 6,7 · 10,11
    b = _run(root / "b", 20, 2, 2)  # two cycles: steps 2,3 · 6,7
    c = _run(root / "c", 8, 3, 1)  # one cycle of three steps: 2,3,4
    return a, b, c


def _cycles(run: Path) -> list[Path]:
    return sorted((run / "traces").glob("*.json"), key=lambda p: int(p.name.split("_")[1].split(".")[0]))


def _diff_json(a: Path, b: Path, capsys: pytest.CaptureFixture[str]) -> dict:
    assert main(["diff", str(a), str(b), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_run_directories_compare_the_steps_of_all_cycles(
    runs: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    a, b, _ = runs
    assert [len(_cycles(a)), len(_cycles(b))] == [3, 2]
    d = _diff_json(a, b, capsys)
    # the steps both runs kept, over the cycles that hold them; one rank on each side
    for side, kept in (("a", 6), ("b", 4)):
        assert d[side]["step_numbers"] == [2, 3, 6, 7]
        assert d[side]["steps"] == 4 and d[side]["cycles"] == 2
        assert d[side]["kept"] == kept and d[side]["ranks"] == 1
    # per step, the two Linear layers ran once each on both sides (a cycle taken as one step: 4)
    full = diff_traces(load(a), load(b)).operators
    addmm = full.filter(full["name"] == "aten::addmm").row(0, named=True)
    assert (addmm["a_calls"], addmm["b_calls"]) == (2.0, 2.0)
    assert not [r for r in d["changes"] if r["status"] == "count_changed"]
    # the directory's step time is the mean of the file-level diffs of the same steps
    pairs = zip(_cycles(a)[:2], _cycles(b), strict=True)
    per_cycle = [diff_traces(load(fa), load(fb)).to_dict()["step_us"] for fa, fb in pairs]
    for side in ("a", "b"):
        # to the nanosecond, as the report writes averages (us_of; each cycle's value rounded too)
        assert d["step_us"][side] == pytest.approx(sum(p[side] for p in per_cycle) / 2, abs=0.0011)

    assert main(["diff", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "A a (4 steps) · B b (4 steps)\n" in out  # one rank: nothing "averaged over ranks"
    assert "compared per step: 4 steps in 2 cycles vs 4 steps in 2 cycles" in out
    assert "only the steps both kept compared: A kept 6, 2 left out" in out


def test_files_numbered_differently_say_that_a_is_cut_to_bs_count(
    runs: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    a, _, c = runs
    three, two = _cycles(c)[0], _cycles(a)[1]  # steps 2,3,4 vs 6,7
    d = _diff_json(three, two, capsys)
    assert d["a"]["step_numbers"] == [2, 3] and d["b"]["step_numbers"] == [6, 7]
    assert main(["diff", str(three), str(two)]) == 0
    out = capsys.readouterr().out
    assert "only the first 2 of each (their step numbers differ) compared: A kept 3, 1 left out" in out
    assert "cycles" not in out  # two single files: no cycle line
    assert "compared in order" not in out  # one line says it


def test_files_of_as_many_steps_numbered_differently_say_so(
    runs: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """Steps 2, 3 against 6, 7 were compared without a word (only ``--json`` showed it) where
    the docs say the terminal says so."""
    a, _, _ = runs
    first, second = _cycles(a)[:2]
    assert main(["diff", str(first), str(second)]) == 0
    out = capsys.readouterr().out
    assert "compared in order, their step numbers differ: A's 2, 3 with B's 6, 7\n" in out
    assert "\nsteps took " in out and " in A (median " in out and " in B (median " in out
    assert main(["diff", str(first), str(first)]) == 0  # the same steps: nothing to say
    assert "compared in order" not in capsys.readouterr().out


def test_a_portable_trace_against_a_kineto_one_is_said(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The same model under the two collectors: the portable collector's own cost per op read as
    the program's ("Python outside ops +2.7 ms") without a word about the collectors."""
    import torch

    import torchscope

    model, x = torch.nn.Linear(32, 32), torch.randn(8, 32)
    for backend in ("kineto", "portable"):
        with torchscope.profile(backend=backend) as prof:
            model(x).sum().backward()
        prof.export_chrome_trace(str(tmp_path / f"{backend}.json"))
    kineto, portable = str(tmp_path / "kineto.json"), str(tmp_path / "portable.json")
    assert main(["diff", kineto, portable, "--json"]) == 0
    err = capsys.readouterr().err
    assert "A was recorded by Kineto, B by the portable collector" in err
    assert main(["diff", kineto, kineto, "--json"]) == 0
    assert "collector" not in capsys.readouterr().err


def test_a_run_whose_script_has_its_own_profiler_is_one_run_diff_compares(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The script's profiler took over before the first optimizer step: OUT/traces/ held ours,
    setup only ("run: no step"), and the copy of the script's cycle. ``report`` read them as 2
    runs (the setup a 13 ms step) and ``diff`` refused the folder ("holds 2 runs")."""
    out = tmp_path / "own"
    script = [str(SCRIPT.parent / "own_profiler.py"), str(tmp_path / "tb"), "0"]
    assert main(["run", "--out", str(out), "--no-summary", *script]) == 0
    capsys.readouterr()  # what the script printed
    assert sorted(p.name for p in (out / "traces").iterdir()) == [
        "run.pt.trace.json",
        "script_profiler1.cycle1.pt.trace.json",
    ]
    assert main(["report", str(out), "--json", "--no-html"]) == 0
    (run,) = json.loads(capsys.readouterr().out)["runs"]
    assert (run["run"], run["ranks"], run["cycles"]) == ("own", 1, 2)
    # the script's two active steps, and no step of the setup
    steps = load(out / "traces" / "script_profiler1.cycle1.pt.trace.json").steps["dur_ns"].to_list()
    assert run["steps_ns"]["count"] == 2 and run["steps_ns"]["max"] == max(steps)
    assert run["cycle_table"][0]["left_out"]

    d = _diff_json(out, out, capsys)
    for side in ("a", "b"):
        assert d[side]["step_numbers"] == [2, 3] and d[side]["cycles"] == 1 and d[side]["ranks"] == 1


def test_steps_before_the_scripts_profiler_are_not_matched_against_its_own_numbers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Three steps before the script's profiler starts: ours recorded them as steps 0-2
    (``step_2``), the script's profiler numbers its own ``step()`` calls, so its cycle holds
    steps 2 and 3 too: ``diff`` matched both "step 2"s ("5 steps in 2 cycles", step numbers
    [0, 1, 2, 3]). The run reports the script's cycles, in the script's numbering."""
    out = tmp_path / "own"
    script = [str(SCRIPT.parent / "own_profiler.py"), str(tmp_path / "tb"), "0", "0", "3"]
    assert main(["run", "--out", str(out), "--no-summary", *script]) == 0
    capsys.readouterr()
    assert sorted(p.name for p in (out / "traces").iterdir()) == [
        "script_profiler1.cycle1.pt.trace.json",
        "step_2.pt.trace.json",
    ]
    assert sorted(load(out / "traces" / "step_2.pt.trace.json").steps["step"].to_list()) == [0, 1, 2]
    assert main(["report", str(out), "--json", "--no-html"]) == 0
    (run,) = json.loads(capsys.readouterr().out)["runs"]
    assert run["steps_ns"]["count"] == 2  # the script's two active steps
    ours = next(row for row in run["cycle_table"] if row["file"].endswith("step_2.pt.trace.json"))
    assert ours["left_out"] and ours["note"].startswith("torchscope run's, before the script's own profiler took over")
    d = _diff_json(out, out, capsys)
    for side in ("a", "b"):
        assert d[side]["step_numbers"] == [2, 3] and d[side]["cycles"] == 1
