"""The accuracy terminal line says NaN/Inf counts before the metrics of the finite outputs: an
fp16 overflow read "cosine=1 max_abs=14.8" while 62 outputs were inf."""

from __future__ import annotations

import pytest

from torchscope.accuracy import compare
from torchscope.accuracy.report import metrics_line, print_result

torch = pytest.importorskip("torch")


def test_an_fp16_overflow_leads_with_its_inf_count(capsys: pytest.CaptureFixture[str]) -> None:
    # 62 of 100 values square past float16's 65,504; the other 38 are exact
    x = torch.cat([torch.full((62,), 300.0), torch.linspace(1, 4, 38)]).half()
    with compare() as r:
        x * x
    first = r.first_divergence
    assert first is not None and first.op == "aten::mul" and first.worst is not None
    w = first.worst
    assert (w.inf, w.ref_inf, w.nan) == (62, 0, 0)
    line = metrics_line(w)
    assert line.startswith("62 of 100 outputs inf (reference 0); ")
    assert line.index("inf") < line.index("cosine=") and "on the finite outputs: cosine=" in line
    print_result(r)
    out = capsys.readouterr().out
    shown = next(s for s in out.splitlines() if "cosine=" in s)
    assert shown.strip().startswith("62 of 100 outputs inf (reference 0)")
    assert "diverged (62 inf)" in out


def test_a_finite_error_keeps_its_short_line() -> None:
    x = torch.linspace(1, 4, 100)
    with compare(overrides={"aten::mul": (0.0, 0.0)}) as r:
        (x.half() * 3.3).float()
    w = next(o for o in r if o.op == "aten::mul").worst
    assert w is not None and w.inf == w.nan == 0
    assert metrics_line(w).split("  ")[-1].startswith("cosine=")
