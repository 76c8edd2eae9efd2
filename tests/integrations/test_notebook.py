"""A notebook executed headless (nbclient + ipykernel): rich display, torchscope.show, %%torchscope."""

from __future__ import annotations

from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")


def _outputs(cell: dict) -> str:
    text = []
    for out in cell.get("outputs", []):
        data = out.get("data") or {}
        text.append(
            str(data.get("text/html", "")) + str(data.get("text/plain", "")) + str(out.get("text", ""))
        )
    return "\n".join(text)


def test_notebook_renders_reports_inline(tmp_path: Path, traces_dir: Path) -> None:
    from nbclient import NotebookClient

    real = sorted((traces_dir / "cuda").glob("*.json*"))[0]
    cells = [
        "import torch, torchscope",
        f"trace = torchscope.load({str(real)!r})\ntrace",
        "%load_ext torchscope",
        "%%torchscope\nx = torch.randn(64, 64)\nfor _ in range(3):\n    y = (x @ x).relu()",
        "_torchscope.key_averages()",
        "torchscope.show(trace, height=400);",
        "torchscope.show(trace, height=300)",  # a cell ending in show(): still one dashboard
    ]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    out = [_outputs(c) for c in nb.cells]
    assert (
        "torchscope-summary" in out[1] and "top ops (by device time, then host time)" in out[1]
    )  # the Trace displays as our summary
    assert "events over" in out[1]
    assert (
        "torchscope-summary" in out[3] and "aten::mm" in out[3] and "aten::relu" in out[3]
    )  # the magic's report
    assert "<table" in out[4] and "aten::mm" in out[4]  # KeyAverages as an HTML table
    assert '<iframe sandbox="allow-scripts" srcdoc="' in out[5]  # the dashboard inline, offline, sandboxed
    assert "http://" not in out[5].split("srcdoc=")[0]
    # each shown once: no terminal copy of the summary beside its HTML, one dashboard per show()
    assert len(nb.cells[1].outputs) == 1 and len(nb.cells[3].outputs) == 1
    assert len(nb.cells[6].outputs) == 1 and out[6].count("<iframe") == 1


def test_a_magic_cell_that_raises_does_not_record_the_traceback_being_formatted() -> None:
    """IPython formats a failing cell's traceback inside ``run_cell``: recorded with ``--stack``
    it was 110k events of ``inspect``/``posixpath`` against the cell's 1.7k, and the report said
    98 % "Python outside ops". The profile now stops before the traceback is shown."""
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    try:
        shell.run_cell("%load_ext torchscope")
        body = "import torch\nx = torch.randn(64, 64)\nfor _ in range(5):\n    y = (x @ x).relu()\n"
        shell.run_cell("%%torchscope --stack\n" + body)
        whole = shell.user_ns["_torchscope"].events()
        shell.run_cell("%%torchscope --stack\n" + body + "raise ValueError('bad cell')\n")
        cut = shell.user_ns["_torchscope"].events()
        assert sum(e.name == "aten::mm" for e in cut) == 5  # the cell's work, recorded
        assert len(cut) < 1.5 * len(whole)
        assert not [e for e in cut if "inspect.py(" in e.name or "ultratb.py(" in e.name]  # the formatting
        assert "showtraceback" not in vars(shell)  # IPython's own again
    finally:
        InteractiveShell.clear_instance()


def test_a_magic_cell_ending_in_a_value_does_not_record_its_printing(capsys: pytest.CaptureFixture[str]) -> None:
    """A cell that ends in ``model(x)`` has IPython print the tensor inside ``run_cell``: the
    recorded ops were mostly the printing (``aten::select`` x96, ``aten::item`` x69). An
    unknown option was ignored without a word."""
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    try:
        shell.run_cell("%load_ext torchscope")
        shell.run_cell("%%torchscope\nimport torch\nx = torch.randn(8, 8)\n(x @ x).relu()\n")
        names = [e.name for e in shell.user_ns["_torchscope"].events()]
        assert names.count("aten::mm") == 1 and names.count("aten::relu") == 1
        assert "aten::select" not in names and "aten::item" not in names  # the tensor's printing
        assert "tensor([[" in capsys.readouterr().out  # still shown below the cell
        assert "start_displayhook" not in vars(shell.displayhook)  # IPython's own again
        shell.run_cell("%%torchscope\n(x @ x).relu();  # shown by no cell\n")
        assert "tensor(" not in capsys.readouterr().out
        assert "quiet" not in vars(shell.displayhook)
        result = shell.run_cell("%%torchscope --no-such-option\nx = 1\n")
        assert not result.success
        assert "%%torchscope: unknown option --no-such-option (it takes --memory, --stack)" in capsys.readouterr().err
    finally:
        InteractiveShell.clear_instance()
