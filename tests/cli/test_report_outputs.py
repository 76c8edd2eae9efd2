"""Where ``report``/``diff`` write: a page that cannot be written, or would overwrite the input,
is a one-line error with exit code 2 (a new user's findings), and row counts are at least 1."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from torchscope.errors import TraceError
from torchscope.trace import read_chrome

SMALL = "cuda/backward_thread_small.json"


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "torchscope", *args], capture_output=True, text=True, timeout=300, check=False
    )


def test_html_onto_the_input_is_refused_and_the_trace_kept(traces_dir: Path, tmp_path: Path) -> None:
    trace = tmp_path / "victim.json"
    shutil.copy(traces_dir / SMALL, trace)
    before = trace.read_bytes()
    for args in (("report", str(trace)), ("diff", str(traces_dir / SMALL), str(trace))):
        done = _cli(*args, "--html", str(trace))
        assert done.returncode == 2
        assert done.stderr.strip().splitlines() == [
            f"torchscope {args[0]}: error: --html {trace} is the input trace {trace}: it would be "
            "overwritten; name another file"
        ]
        assert trace.read_bytes() == before


@pytest.mark.parametrize("where", ["/dev/null/x.html", "DIR"])
def test_a_page_that_cannot_be_written_is_one_line(traces_dir: Path, tmp_path: Path, where: str) -> None:
    target = str(tmp_path) if where == "DIR" else where  # a directory, or under a file
    done = _cli("report", str(traces_dir / SMALL), "--html", target)
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"torchscope report: error: {target}: cannot write the dashboard here: ")
    assert "Traceback" not in done.stderr


def test_a_row_count_below_one_is_a_usage_error(traces_dir: Path) -> None:
    done = _cli("report", str(traces_dir / SMALL), "--no-html", "--top", "-3")
    assert done.returncode == 2 and "argument --top: -3 is less than 1" in done.stderr


def test_reading_a_directory_as_a_file_names_it(tmp_path: Path) -> None:
    with pytest.raises(TraceError) as err:
        read_chrome(tmp_path)
    assert str(err.value) == f"{tmp_path}: is a directory; use torchscope.load() for log directories"


@pytest.mark.skipif(sys.platform != "linux", reason="a file name that is not UTF-8")
def test_a_path_that_is_not_utf8_still_gets_its_page(traces_dir: Path, tmp_path: Path) -> None:
    folder = os.fsencode(tmp_path) + b"/we\xffird"
    os.makedirs(folder)
    trace = folder + b"/t.json"
    shutil.copy(traces_dir / SMALL, os.fsdecode(trace))
    page = tmp_path / "page.html"
    done = subprocess.run(
        [sys.executable, "-m", "torchscope", "report", trace, "--html", str(page)],
        capture_output=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    text = page.read_text(encoding="utf-8")  # valid UTF-8: the name's bad byte is an escape
    assert "we\\udcffird" in text and "Traceback" not in done.stderr.decode("utf-8", "replace")
