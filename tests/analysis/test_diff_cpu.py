"""``diff`` of two real CPU-only runs: the report's host categories, and the ops a change added
ranked before the same-count ops whose time jitters on a shared CPU."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile, schedule

from torchscope.analysis.advisor import advise
from torchscope.analysis.diff import STRUCTURAL, SURE_FLOORS, diff_traces
from torchscope.analysis.overview import HOST_CATEGORIES, overview
from torchscope.render.payload import distinct_labels
from torchscope.trace.loader import load
from torchscope.trace.model import Trace

BATCH = 16
ACTIVE = 3


def _record(out: Path, augment: bool) -> Trace:
    """A small convnet trained for a few steps; ``augment`` adds a per-sample Python loop of
    flip + mul (BATCH flips and BATCH muls per step), the change the diff must find."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 16 * 16, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(BATCH, 3, 16, 16), torch.randint(0, 10, (BATCH,))
    path = out / "traces" / "step.pt.trace.json"
    path.parent.mkdir(parents=True)
    with profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=0, warmup=1, active=ACTIVE),
        on_trace_ready=lambda p: p.export_chrome_trace(str(path)),
    ) as prof:
        for _ in range(1 + ACTIVE):
            xb = torch.stack([s.flip(-1).mul(0.5) for s in x]) if augment else x
            opt.zero_grad()
            nn.functional.cross_entropy(model(xb), y).backward()
            opt.step()
            prof.step()
    loaded = load(path)
    assert isinstance(loaded, Trace)
    return loaded


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Trace, Trace]:
    root = tmp_path_factory.mktemp("runs")
    return _record(root / "base", False), _record(root / "slow", True)


def test_a_cpu_diff_uses_the_reports_host_categories(runs: tuple[Trace, Trace]) -> None:
    a, b = runs
    d = diff_traces(a, b)
    assert d.categories == HOST_CATEGORIES
    r = d.to_dict()
    assert "Operators" in r["breakdown_us"] and "CPU Exec" not in r["breakdown_us"]
    # the same numbers the report shows for each run (its host breakdown, per step), to the
    # nanosecond as the report writes averages
    ops_a = overview(a).host_breakdown_ns["Operators"] / 1e3
    assert r["breakdown_us"]["Operators"]["a"] == pytest.approx(ops_a, abs=0.0005)
    assert sum(v["delta"] for v in r["breakdown_us"].values()) == pytest.approx(
        r["step_us"]["delta"], abs=0.01
    )


def test_the_added_ops_lead_the_diff(runs: tuple[Trace, Trace]) -> None:
    """Whatever the CPU's jitter, ops whose call counts changed come first; flip and mul
    appeared with BATCH calls per step, and only a same-count change many times the noise floor
    is ranked above them."""
    d = diff_traces(*runs)
    ch = d.changes
    floor = 0.01 * max(d.a.step_ns, d.b.step_ns)
    rows = list(ch.iter_rows(named=True))
    at = {r["name"]: i for i, r in enumerate(rows)}
    for op in ("aten::flip", "aten::mul"):
        assert rows[at[op]]["status"] == "appeared"
        assert (rows[at[op]]["a_calls"], rows[at[op]]["b_calls"]) == (0.0, float(BATCH))
    # above them only sure changes: structural ones, or same-count ones of SURE_FLOORS floors
    # (an op 1.7 ms faster outranks a kernel that appeared with 1 us)
    for r in rows[: max(at["aten::flip"], at["aten::mul"])]:
        assert r["status"] in STRUCTURAL or abs(r["delta_ns"]) >= SURE_FLOORS * floor
    # noise is a same-count change under 1% of the longer step, and it is listed last
    noise = ch.filter(ch["noise"])
    assert all(s == "time_changed" for s in noise["status"])
    assert (noise["delta_ns"].abs() < floor).all()
    assert ch["noise"].to_list() == sorted(ch["noise"].to_list())


def test_equal_file_names_are_labelled_by_their_distinct_folders() -> None:
    assert distinct_labels(
        "runs/base/traces/step_8.pt.trace.json", "runs/slow/traces/step_8.pt.trace.json"
    ) == (
        "base/traces/step_8.pt.trace.json",
        "slow/traces/step_8.pt.trace.json",
    )
    assert distinct_labels("a/x.json", "a/y.json") == ("x.json", "y.json")
    assert distinct_labels("a/x.json", "a/x.json") == ("x.json", "x.json")


def test_the_pages_diff_names_two_runs_files_of_one_name_by_their_folders(
    traces_dir: Path, tmp_path: Path
) -> None:
    """``torchscope diff a/traces/step_40.pt.trace.json b/traces/step_40.pt.trace.json --html``:
    the page's Diff view said "Diff: step_40 → step_40", "A: step_40", "B: step_40"."""
    from torchscope.render.payload import build_payload

    sides = []
    for run in ("a", "b"):
        (tmp_path / run / "traces").mkdir(parents=True)
        path = tmp_path / run / "traces" / "step_40.json.gz"
        path.symlink_to(traces_dir / "cpu" / "cpu_only_gloo_rank34.pt.trace.json.gz")
        sides.append(load(path))
    a, b = sides
    assert isinstance(a, Trace) and isinstance(b, Trace)
    diff = build_payload(a, compare=b, with_timeline=False)["diff"]
    assert (diff["a"], diff["b"]) == ("a/traces/step_40.json.gz", "b/traces/step_40.json.gz")
    other = tmp_path / "b" / "traces" / "step_22.json.gz"  # names that differ stay short
    other.symlink_to(traces_dir / "cpu" / "cpu_only_gloo_rank34.pt.trace.json.gz")
    c = load(other)
    assert isinstance(c, Trace)
    diff = build_payload(a, compare=c, with_timeline=False)["diff"]
    assert (diff["a"], diff["b"]) == ("step_40", "step_22")


def test_cpu_only_communication_is_one_name_in_the_table_and_the_advice(
    load_trace: Callable[[str], Trace],
) -> None:
    """cpu_only_gloo_rank34: the 178.777 ms of its 210.109 ms step that gloo:all_reduce (on its
    worker threads) covers is Communication in the host breakdown (it was "Other"), the same
    85.1 % communication_heavy reports."""
    t = load_trace("cpu/cpu_only_gloo_rank34.pt.trace.json.gz")
    hb = overview(t).host_breakdown_ns
    assert hb["Communication"] == pytest.approx(178_777_000, abs=1_000)
    assert hb["Other"] == 0
    comm = next(f for f in advise(t) if f.rule == "communication_heavy")
    assert comm.evidence["share"] == pytest.approx(hb["Communication"] / hb["Total"], abs=1e-3)
