"""Our key_averages of a real CUDA session against torch's own, on a machine without a GPU.

``tests/data/cuda_truth`` holds three sessions recorded on an NVIDIA H200 with torch 2.11
(``scripts/record_cuda_truth.py``): the Chrome trace torch exported, and what torch itself
computed from the same session (``key_averages()`` by name and by input shape, each event's
parent and device time, the printed tables). Every value must agree, except where torch is
wrong and we deliberately differ (docs/api.md, "CUDA sessions"):

* Kineto's "Activity Buffer Request" takes the correlation id of the CUDA call it interrupted,
  so torch charges that call's kernel or copy to it *as well as* to the op that launched it:
  the op's ancestors count that device time twice. We count it once, at the op.
* A device-side annotation (``gpu_user_annotation``) is a range around kernels, not work: its
  self device time is 0 with us (torch: its length), as for every trace.
* torch 2.11 left Python frames out of ``key_averages`` (2.12 put them in; 2.13, the torch we
  follow, keeps them): by default our extra rows are exactly the Python frames, and torch's
  ``[memory]`` row holds the frees those frames enclose; with ``python_functions=False`` (what
  the live profiler passes under torch < 2.12) the rows are torch 2.11's.
"""

from __future__ import annotations

import gzip
import json
import re
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest

import torchscope
from torchscope.compat.averages import key_averages

DATA = Path(__file__).parents[1] / "data" / "cuda_truth"
CASES = ("resnet18", "mlp_flawed", "mlp_flawed_stack", "mlp_fixed")
TIMES = ("self_cpu_time_total", "cpu_time_total", "self_device_time_total", "device_time_total")
MEMORY = ("cpu_memory_usage", "self_cpu_memory_usage", "device_memory_usage", "self_device_memory_usage")
ABR = "Activity Buffer Request"


def _truth(name: str) -> dict[str, Any]:
    with gzip.open(DATA / f"{name}.torch.json.gz", "rt") as f:
        return json.load(f)


@pytest.fixture(scope="module", params=CASES)
def case(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any], torchscope.Trace]:
    name = request.param
    return name, _truth(name), torchscope.load(DATA / f"{name}.pt.trace.json.gz")


def _python_frames(trace: torchscope.Trace) -> set[str]:
    ev = trace.events
    return set(ev.filter(ev["kind"] == "python_function")["name"].cast(str).to_list())


def _rows(rows: list[Any], field: Any) -> dict[tuple[str, str, int], Any]:
    """Rows keyed by (key, input shapes, occurrence): torch lists a name twice when it is both a
    host annotation and a device annotation (``Optimizer.step#SGD.step``), in the same order as ours."""
    seen: Counter[tuple[str, str]] = Counter()
    out = {}
    for r in rows:
        shapes = field(r, "input_shapes")
        k = (field(r, "key"), "" if shapes is None or shapes == "" else str(shapes))
        out[(*k, seen[k])] = r
        seen[k] += 1
    return out


def _abr_double_count(truth: dict[str, Any]) -> Counter[str]:
    """Device time torch counts twice, by key: each buffer request's stolen kernels, at every
    ancestor of the request (the op that launched them already counts them)."""
    events = truth["events"]
    extra: Counter[str] = Counter()
    for e in events:
        if e["name"] != ABR:
            continue
        cur = e["parent"]
        while cur is not None:
            extra[events[cur]["name"]] += e["device_time_total"]
            cur = events[cur]["parent"]
    return extra


def _stolen(truth: dict[str, Any]) -> float:
    return sum(e["device_time_total"] for e in truth["events"] if e["name"] == ABR)


def test_the_same_keys_as_torch_but_torch_211s_missing_python_frames(case: Any) -> None:
    name, truth, trace = case
    frames = _python_frames(trace)
    ours = {r.key for r in key_averages(trace)}
    theirs = {r["key"] for r in truth["key_averages"]}
    assert truth["torch"].startswith("2.11") and truth["options"].get("with_stack", False) == bool(frames)
    assert ours - theirs == frames  # only the Python frames torch 2.11 did not list
    assert theirs - ours == ({"[memory]"} if frames else set())
    assert ABR in ours and ABR in theirs  # Kineto's own overhead is a row, as in torch


def _lists_frames(truth: dict[str, Any]) -> bool:
    """Whether the torch that recorded the truth listed Python frames (2.12 and later)."""
    major, minor = (int(p) for p in truth["torch"].split(".")[:2])
    return (major, minor) >= (2, 12)


@pytest.mark.parametrize("name", CASES)
def test_every_time_and_byte_is_torchs_but_for_the_documented_differences(name: str) -> None:
    """As the recording torch built its tables: torch 2.11 without the Python frames, which
    ``python_functions=False`` leaves out (the live profiler does so under torch < 2.12), so the
    with_stack session agrees too, ``[memory]`` rows included."""
    truth, trace = _truth(name), torchscope.load(DATA / f"{name}.pt.trace.json.gz")
    frames = _lists_frames(truth)
    for group, by_shape in (("key_averages", False), ("key_averages_by_shape", True)):
        theirs = _rows(truth[group], lambda r, f: r.get(f))
        ours = key_averages(trace, group_by_input_shape=by_shape, python_functions=frames)
        mine = _rows(list(ours), lambda r, f: getattr(r, f))
        assert set(mine) == set(theirs), (name, group)
        double = _abr_double_count(truth)
        dev_diff: defaultdict[str, float] = defaultdict(float)
        for k, o in mine.items():
            t = theirs[k]
            assert o.count == t["count"], (name, k)
            for f in ("self_cpu_time_total", "cpu_time_total", *MEMORY):
                assert getattr(o, f) == pytest.approx(t[f], abs=2e-3), (name, group, k, f)
            if o.is_device and o.is_user_annotation:  # a device-side annotation: no self time here
                assert o.self_device_time_total == 0 and t["self_device_time_total"] == t["device_time_total"]
                # Kineto writes its ends rounded to the ns: a few ns off torch's in-memory length
                assert o.device_time_total == pytest.approx(t["device_time_total"], abs=1e-2)
                continue
            if k[0] == ABR:  # the device time it took is not its own
                assert o.device_time_total == o.self_device_time_total == 0
                assert t["device_time_total"] == pytest.approx(_stolen(truth), abs=2e-3)
                continue
            assert o.self_device_time_total == pytest.approx(t["self_device_time_total"], abs=2e-3), (name, k)
            dev_diff[k[0]] += t["device_time_total"] - o.device_time_total
        # torch's device totals exceed ours by exactly the time it counted twice
        for key, diff in dev_diff.items():
            assert diff == pytest.approx(double.get(key, 0.0), abs=5e-3), (name, group, key)


def test_the_double_count_is_real_on_these_sessions() -> None:
    """The exception above is not vacuous: each session has a buffer request that stole device
    time inside an op (a pageable host copy of 16 MB: 1.30 ms, counted twice by torch)."""
    flawed = _abr_double_count(_truth("mlp_flawed"))
    assert flawed["aten::copy_"] == pytest.approx(1298.319, abs=1e-3)
    assert flawed["aten::to"] == flawed["aten::_to_copy"] == flawed["aten::copy_"]
    assert _abr_double_count(_truth("resnet18"))["aten::cudnn_convolution"] == pytest.approx(
        315.870, abs=1e-3
    )


def _same_to_last_digit(a: str, b: str) -> bool:
    """``661.981us`` and ``661.982us`` agree: torch sums float microseconds, we sum integer
    nanoseconds, and a half-way value may round either way in the last printed digit."""
    num = re.compile(r"^(-?\d+(?:\.(\d+))?)(\D*)$")
    ma, mb = num.match(a), num.match(b)
    if not (ma and mb) or ma.group(3) != mb.group(3):
        return a == b
    ulp = 10.0 ** -len(ma.group(2) or "")
    return abs(float(ma.group(1)) - float(mb.group(1))) <= ulp * 1.01


def test_tables_list_torchs_rows_in_torchs_order(case: Any) -> None:
    """Sorted by CPU total (where no documented difference applies), the table is torch's: the
    same header, the same rows in the same order, and the same totals line."""
    name, truth, trace = case
    table = key_averages(trace, python_functions=_lists_frames(truth)).table(
        sort_by="cpu_time_total", row_limit=15
    )
    ours, theirs = table.splitlines(), truth["tables"]["cpu_time_total"].splitlines()
    assert ours[:3] == theirs[:3]  # rule, header, rule
    assert [line[:55] for line in ours] == [line[:55] for line in theirs]  # the Name column
    for mine, torchs in zip(ours, theirs, strict=True):  # the CPU columns, to their last digit
        for a, b in zip(mine[56:127].split(), torchs[56:127].split(), strict=True):
            assert _same_to_last_digit(a, b), (name, mine, torchs)
    assert [line for line in ours if line.startswith("Self CPU time total")] == [
        line for line in theirs if line.startswith("Self CPU time total")
    ]


def test_the_cli_prints_torch_211s_table_of_a_with_stack_session(capsys: pytest.CaptureFixture[str]) -> None:
    from torchscope.cli.main import main

    truth = _truth("mlp_flawed_stack")
    path = DATA / "mlp_flawed_stack.pt.trace.json.gz"
    assert (
        main(["table", str(path), "--sort-by", "cpu_time_total", "--row-limit", "15", "--no-python-frames"])
        == 0
    )
    ours = capsys.readouterr().out.splitlines()
    theirs = truth["tables"]["cpu_time_total"].splitlines()
    assert [line[:55] for line in ours if line.strip()] == [line[:55] for line in theirs if line.strip()]
    assert "Self CPU time total: 8.541ms" in ours
