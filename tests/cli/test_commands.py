"""report, table, diff, export and serve on the real traces, as a user runs them."""

from __future__ import annotations

import gzip
import json
import shutil
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from torchscope.analysis.report_model import us_of
from torchscope.cli.main import main
from torchscope.cli.serve import make_server, run_id

TB0 = "tensorboard_samples/resnet50_num_workers_0.pt.trace.json.gz"


def _raw_events(path: Path) -> list[dict]:
    with gzip.open(path, "rt") as f:
        data = json.load(f)
    return data["traceEvents"] if isinstance(data, dict) else data


def test_report_json_and_html(traces_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    html = tmp_path / "r.html"
    assert main(["report", str(traces_dir / TB0), "--json", "--html", str(html)]) == 0
    out = json.loads(capsys.readouterr().out)
    # one object, keys named after the analyses (analysis.keys), no dashboard payload
    assert "runs" not in out and out["kind"] == "trace"
    assert set(out["breakdown_us"]) >= {"Kernel", "DataLoader", "CPU Exec", "Total"}
    # the DataLoader is this sample's bottleneck, and the advisor says so
    assert out["breakdown_us"]["DataLoader"] > 0.3 * out["breakdown_us"]["Total"]
    # and only the DataLoader: with a 9.4 ms median launch delay the launch queue is deep, so the
    # device's idle time is not launch overhead and CUDA graphs would not help (no launch_bound)
    rules = {r["rule"] for r in out["recommendations"]}
    assert "dataloader_bottleneck" in rules and "launch_bound" not in rules
    # differential against plain json: the top kernel's count and total equal the file's own
    raw = _raw_events(traces_dir / TB0)
    top = out["kernels"][0]
    durations = [e["dur"] for e in raw if e.get("cat") == "Kernel" and e.get("name") == top["name"]]
    assert top["count"] == len(durations)
    assert top["total_us"] == pytest.approx(sum(durations), abs=1.0)
    assert out["html"] == str(html)
    text = html.read_text()
    assert text.count("<script") == 2 and "resnet50_num_workers_0" in text


def test_report_terminal_summary(
    traces_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["report", str(traces_dir / "multirank")]) == 0
    text = capsys.readouterr().out
    # a folder of ranks is one job: one summary, not one block per rank (docs/jobs.md)
    assert text.startswith("== multirank: 2 ranks of 128, 1 cycle, nccl") and "recommendations" in text
    assert (tmp_path / "multirank.torchscope.html").is_file()


def test_table_matches_torch_layout(traces_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(
            [
                "table",
                str(traces_dir / "cuda/alexnet_benchmark.json.gz"),
                "--sort-by",
                "cuda_time_total",
                "--row-limit",
                "5",
            ]
        )
        == 0
    )
    lines = capsys.readouterr().out.splitlines()
    header = next(line for line in lines if "Name" in line)
    for col in ("Self CPU %", "CPU total", "Self CUDA", "# of Calls"):
        assert col in header
    assert any(line.startswith("Self CPU time total:") for line in lines)
    assert (
        main(
            [
                "table",
                str(traces_dir / "cuda/alexnet_benchmark.json.gz"),
                "--json",
                "--row-limit",
                "3",
                "--sort-by",
                "self_cpu_time_total",
            ]
        )
        == 0
    )
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == 3 and rows[0]["self_cpu_time_total"] >= rows[1]["self_cpu_time_total"]


def test_a_table_of_a_trace_without_ops_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A browser's DevTools trace is Chrome-format but holds no operators: ``table`` printed
    nothing at all (torch's table of no events is an empty string) and exited 0."""
    path = tmp_path / "devtools.json"
    task = {"ph": "X", "cat": "devtools.timeline", "name": "RunTask", "pid": 1, "tid": 2, "ts": 1000, "dur": 50}
    path.write_text(json.dumps({"traceEvents": [task, {**task, "ts": 2000}]}))
    assert main(["table", str(path)]) == 0
    out, err = capsys.readouterr()
    assert out == ""
    assert err.strip() == (
        f"torchscope table: warning: {path}: no operator events to tabulate (the trace holds 2 'other' events)"
    )



def test_table_shows_control_characters_in_names_as_escapes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Op names are the trace's text: ``torchscope table`` printed an ESC sequence, a bell and a
    newline raw (the terminal ran them, and the row broke in two); ``--json`` keeps them."""
    path = tmp_path / "names.json"
    op = {"ph": "X", "cat": "cpu_op", "pid": 1, "tid": 1, "dur": 10}
    events = [{**op, "name": "evil\x1b[2J\x07", "ts": 0}, {**op, "name": "two\nlines", "ts": 20}]
    path.write_text(json.dumps({"traceEvents": events}))
    assert main(["table", str(path)]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out
    rows = [line.split()[0] for line in out.splitlines()[3:5]]
    assert sorted(rows) == ["evil\\x1b[2J\\x07", "two\\nlines"]
    assert main(["table", str(path), "--json"]) == 0
    assert {r["key"] for r in json.loads(capsys.readouterr().out)} == {"evil\x1b[2J\x07", "two\nlines"}


def test_diff_of_a_trace_without_steps_says_both_are_compared_whole(
    traces_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """alexnet_benchmark has no ProfilerStep: diff_control's 6 steps were summed into one and the
    header read "(1 step)" on both sides, as if one step of each had been compared."""
    a, b = traces_dir / "cuda/alexnet_benchmark.json.gz", traces_dir / "cuda/diff_control_rank3_of_8.json.gz"
    assert main(["diff", str(a), str(b)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "A has no ProfilerStep steps, so both are compared as whole traces: B's 6 steps count as 1 step" in out
    assert main(["diff", str(a), str(b), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert (d["a"]["steps"], d["a"]["kept"], d["b"]["steps"], d["b"]["kept"]) == (1, 1, 1, 6)

def test_diff_names_the_changed_ops(
    traces_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = traces_dir / TB0, traces_dir / "tensorboard_samples/resnet50_num_workers_4.pt.trace.json.gz"
    assert main(["diff", str(a), str(b), "--json", "--html", str(tmp_path / "d.html")]) == 0
    diff = json.loads(capsys.readouterr().out)
    # 4 DataLoader workers take the loading off the main thread: its biggest change
    first = diff["changes"][0]
    assert first["name"].startswith("enumerate(DataLoader)") and first["delta_us"] < 0
    assert diff["a"]["source"].endswith("resnet50_num_workers_0.pt.trace.json.gz")
    assert (tmp_path / "d.html").is_file()


def test_diff_of_two_runs_of_several_ranks(
    traces_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Directories of ranks are compared per step, averaged over ranks (the analyses' diff);
    a run against itself changes nothing, and against one of its ranks, that rank's share."""
    from torchscope.analysis.diff import diff_traces
    from torchscope.trace.loader import load

    runs = traces_dir / "multirank"
    assert main(["diff", str(runs), str(runs), "--json"]) == 0
    same = json.loads(capsys.readouterr().out)
    # every op row (the JSON was cut at 50 while the docs said every row): 164 distinct ops
    assert same["step_us"]["ratio"] == 1.0 and len(same["operators"]) == 164
    assert {r["status"] for r in same["operators"]} == {"unchanged"}
    assert all(r["delta_us"] == 0 for r in same["changes"])
    one = runs / "rank-1.json.gz"
    assert main(["diff", str(runs), str(one), "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    expected = diff_traces(load(runs), load(one)).operators.row(0, named=True)
    assert (got["operators"][0]["name"], got["operators"][0]["delta_us"]) == (
        expected["name"],
        us_of(expected["delta_ns"]),
    )
    assert main(["diff", str(runs), str(one)]) == 0
    assert "averaged over ranks" in capsys.readouterr().out
    assert main(["diff", str(runs), str(one), "--html", str(tmp_path / "d.html")]) == 2
    assert "--html draws the diff of two single traces" in capsys.readouterr().err


def test_export_stacks_sum_to_host_self_time(traces_dir: Path, tmp_path: Path) -> None:
    import torchscope

    src = traces_dir / "cuda/alexnet_benchmark.json.gz"
    out = tmp_path / "a.folded"
    assert main(["export", str(src), "--to", "stacks", "-o", str(out)]) == 0
    lines = out.read_text().splitlines()
    assert lines and all(line.rsplit(" ", 1)[1].isdigit() for line in lines)
    trace = torchscope.load(src)
    import polars as pl

    from torchscope.trace.schema import HOST_KINDS

    host = trace.events.filter(pl.col("kind").is_in(HOST_KINDS))
    total_us = int(host["self_ns"].sum()) // 1000
    folded_us = sum(int(line.rsplit(" ", 1)[1]) for line in lines)
    assert (
        total_us - len(lines) - 2000 <= folded_us <= total_us
    )  # rounding down per path, sub-us paths dropped
    assert any(";aten::conv2d;" in line for line in lines)


def test_export_stacks_keep_the_cuda_calls_an_op_waits_in(tmp_path: Path) -> None:
    """On an H200 step with .item() and pageable copies, the flame graph showed the ops as cheap:
    their cudaStreamSynchronize and cudaMemcpyAsync (and Kineto's buffer request) were no frame,
    and their time was in no frame at all. Now the main thread's stacks add up to its events."""
    import polars as pl

    import torchscope

    src = Path(__file__).parents[1] / "data" / "cuda_truth" / "mlp_flawed.pt.trace.json.gz"
    out = tmp_path / "f.folded"
    assert main(["export", str(src), "--to", "stacks", "-o", str(out)]) == 0
    lines = [line.rsplit(" ", 1) for line in out.read_text().splitlines()]
    trace = torchscope.load(src)
    ev = trace.events
    main_tid = int(ev.filter(pl.col("kind") == "cpu_op")["tid"][0])
    top = ev.filter((pl.col("tid") == main_tid) & (pl.col("parent") < 0) & (pl.col("kind") != "instant"))
    on_main = [int(v) for p, v in lines if p.startswith(f"thread {main_tid};")]
    assert (
        int(top["dur_ns"].sum()) // 1000 - len(on_main) - 1
        <= sum(on_main)
        <= int(top["dur_ns"].sum()) // 1000
    )
    assert any(p.endswith(";aten::_local_scalar_dense;cudaStreamSynchronize") for p, _ in lines)
    assert any(p.endswith(";aten::copy_;Activity Buffer Request") for p, _ in lines)


def test_bad_input_exits_2(tmp_path: Path, traces_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(tmp_path / "nope.json")]) == 2
    assert "nope.json" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert main(["table", str(bad)]) == 2
    assert main(["table", str(traces_dir / TB0), "--sort-by", "bogus"]) == 2


@pytest.fixture()
def served(tmp_path: Path, traces_dir: Path) -> Iterator[tuple[str, Path]]:
    logdir = tmp_path / "log"
    (logdir / "run1").mkdir(parents=True)
    shutil.copy(traces_dir / "multirank/rank-0.json.gz", logdir / "run1" / "worker0.pt.trace.json.gz")
    (tmp_path / "secret.json").write_text('{"traceEvents": []}')
    server = make_server(logdir, "127.0.0.1", 0, poll_ms=200)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/", logdir
    finally:
        server.shutdown()
        server.server_close()


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=60) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_serve_lists_serves_and_confines_to_logdir(served: tuple[str, Path], traces_dir: Path) -> None:
    url, logdir = served
    status, page = _get(url)
    assert status == 200 and b'"transport":"serve"' in page
    runs = json.loads(_get(url + "api/runs")[1])["runs"]
    assert [r["name"] for r in runs] == ["run1/worker0.pt.trace.json.gz"]
    rid = runs[0]["id"]  # an id the server generates, never a path
    status, body = _get(url + f"api/payload?id={rid}")
    payload = json.loads(body)
    assert status == 200 and payload["report"]["meta"]["events"] > 1000
    status, body = _get(url + f"api/file?id={rid}")
    assert status == 200 and body == (traces_dir / "multirank/rank-0.json.gz").read_bytes()
    # nothing outside the log directory, nothing that is not a trace, no other paths
    for bad in (
        "api/file?id=../secret.json",
        "api/file?id=%2Fetc%2Fpasswd",
        "api/payload?id=../secret.json",
        "etc/passwd",
        "../secret.json",
    ):
        assert _get(url + bad)[0] == 404, bad
    (logdir / "link.json").symlink_to(logdir.parent / "secret.json")
    assert _get(url + f"api/file?id={run_id(b'link.json')}")[0] == 404
    # a trace that arrives later is listed on the next poll
    shutil.copy(traces_dir / "multirank/rank-1.json.gz", logdir / "run1" / "worker1.pt.trace.json.gz")
    runs = json.loads(_get(url + "api/runs")[1])["runs"]
    # the folder now holds a job of two ranks: listed once as a job, first, then each file
    assert [r["name"] for r in runs] == [
        "run1 (job: 2 ranks, 1 cycle)",
        "run1/worker0.pt.trace.json.gz",
        "run1/worker1.pt.trace.json.gz",
    ]


def test_export_chrome_and_parquet_round_trip(
    traces_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import polars as pl

    import torchscope

    src = traces_dir / "cuda/alexnet_benchmark.json.gz"
    original = torchscope.load(src)
    for fmt, out in (("chrome", tmp_path / "a.chrome.json.gz"), ("parquet", tmp_path / "a.store")):
        assert main(["export", str(src), "--to", fmt, "-o", str(out), "--json"]) == 0
        written = json.loads(capsys.readouterr().out)
        assert written["format"] == fmt and Path(written["path"]).exists()
        again = torchscope.load(written["path"])
        assert isinstance(again, torchscope.Trace)
        for kind in ("cpu_op", "kernel", "memcpy"):
            a = original.of_kind(kind)
            b = again.of_kind(kind)
            assert b.height == a.height, (fmt, kind)
            assert int(b["dur_ns"].sum()) == pytest.approx(int(a["dur_ns"].sum()), abs=a.height * 1000)
        assert again.ops.filter(pl.col("name") == "aten::conv2d").height == 10


def test_export_of_a_cut_file_says_what_was_read(
    traces_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The export of a cut file printed only "wrote ...": a clean-looking trace whose readers
    never learn that the end is missing. It warns as table and report do."""
    text = (traces_dir / "cuda/backward_thread_small.json").read_bytes()
    cut = tmp_path / "cut.json"
    cut.write_bytes(text[: len(text) * 3 // 5])
    assert main(["export", str(cut), "--to", "chrome", "-o", str(tmp_path / "c.json"), "--json"]) == 0
    got = capsys.readouterr()
    written = json.loads(got.out)
    assert len(written["warnings"]) == 1 and "the file ends mid-event (truncated?)" in written["warnings"][0]
    assert f"torchscope export: warning: {cut}: the file ends mid-event (truncated?)" in got.err


def test_report_leaves_out_an_unknown_world_size(
    traces_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # alexnet_benchmark.json.gz names rank 0 but no world size
    assert main(["report", str(traces_dir / "cuda" / "alexnet_benchmark.json.gz"), "--no-html"]) == 0
    out = capsys.readouterr().out
    assert "870 events over 43.459 s · rank 0\n" in out and "None" not in out


def test_report_shows_rank_of_world_size(traces_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(traces_dir / "cuda" / "diff_control_rank3_of_8.json.gz"), "--no-html"]) == 0
    assert "rank 3 of 8" in capsys.readouterr().out


def test_accuracy_table_uses_full_width_when_piped(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    assert main(["accuracy", "run", "--model", "mlp", "--dtype", "bfloat16"]) == 0
    out = capsys.readouterr().out  # captured: not a terminal, as with `> f`
    lines = out.splitlines()
    # the summary is one line and op names are whole, not folded into 7-character cells
    assert lines[0].startswith("accuracy (live): ") and lines[0].endswith("0 skipped")
    assert "│ aten::addmm " in out and "│ aten::mm " in out
    assert "COLUMNS" not in __import__("os").environ


def test_piped_diff_keeps_each_op_name_on_one_line(
    traces_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Piped output is not folded to 80 columns (rich's default split "aten::empty_strided")."""
    a, b = (
        traces_dir / "cuda/diff_control_rank3_of_8.json.gz",
        traces_dir / "cuda/diff_test_rank1_of_2.json.gz",
    )
    from torchscope.analysis.diff import diff_traces
    from torchscope.trace.loader import load

    assert main(["diff", str(a), str(b), "--top", "10"]) == 0
    out = capsys.readouterr().out
    table = out[out.index("ops and kernels by change per step") :]
    rows = [line.split("│") for line in table.splitlines() if line.startswith("│")]
    names = [cells[1].strip() for cells in rows]
    expected = diff_traces(load(a), load(b)).changes["name"].head(10).to_list()
    # each name that fits the column is whole on its row, in the diff's order
    assert all(n in names for n in expected if len(n) <= 50)
    assert [n for n in names if n in expected] == [n for n in expected if n in set(names)]
    assert all(name for name in names)


def test_export_never_overwrites_its_input_and_says_why_it_cannot_write(
    traces_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "in.json.gz"
    shutil.copy(traces_dir / "cuda/nccl_rank0_of_2.json.gz", trace)
    (tmp_path / "link.json.gz").symlink_to(trace)
    before = trace.read_bytes()
    for to, target in (("stacks", trace), ("chrome", tmp_path / "link.json.gz")):
        assert main(["export", str(trace), "--to", to, "-o", str(target)]) == 2
        err = capsys.readouterr().err.strip()
        assert err == (
            f"torchscope export: error: -o {target} is the input trace {trace}: it would be "
            "overwritten; name another file"
        )
    assert trace.read_bytes() == before
    # a path that cannot be written: one line naming it, exit 2 (it was a traceback for stacks)
    assert main(["export", str(trace), "--to", "stacks", "-o", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip() == f"torchscope export: error: {tmp_path}: cannot write: Is a directory"
    # under a file: that file is named ("File exists", from making the parent, named nothing)
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    assert main(["report", str(trace), "--html", str(a_file / "x.html")]) == 2
    assert capsys.readouterr().err.strip().endswith(f"cannot write the dashboard here: {a_file} is not a directory")
    assert main(["export", str(trace), "--to", "parquet", "-o", str(a_file / "store")]) == 2
    assert capsys.readouterr().err.strip() == (
        f"torchscope export: error: {a_file / 'store'}: cannot write: {a_file} is not a directory"
    )


def test_table_takes_any_row_limit_and_a_closed_pipe_is_no_error(traces_dir: Path) -> None:
    import subprocess
    import sys

    trace = traces_dir / "cuda/nccl_rank0_of_2.json.gz"
    code = "from torchscope.cli.main import main; import sys; sys.exit(main(sys.argv[1:]))"
    for argv in (
        ["table", str(trace), "--row-limit", str(2**64)],
        ["report", str(trace), "--no-html"],
        ["diff", str(trace), str(trace)],
        ["export", str(trace), "--to", "chrome", "-o", "/dev/stdout"],
    ):
        # ``| head -1``: the reader closes the pipe after one line
        proc = subprocess.Popen([sys.executable, "-c", code, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert proc.stdout is not None
        proc.stdout.readline()
        proc.stdout.close()
        err = proc.stderr.read().decode() if proc.stderr else ""
        # every command exits 0, quietly (the report and diff exited 1 through rich's console,
        # export 2 with "cannot write: Broken pipe")
        assert proc.wait(timeout=120) == 0 and err == "", (argv[0], err)


def test_table_and_diff_say_what_a_damaged_input_lost(
    traces_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # report printed these; table and diff read the same truncated file without a word
    whole = traces_dir / "cuda/nccl_rank0_of_2.json.gz"
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(whole.read_bytes()[:100_000])
    assert main(["table", str(cut), "--row-limit", "3"]) == 0
    out, err = capsys.readouterr()
    assert "Self CPU time total" in out and "warning" not in out  # stdout stays torch's table
    assert f"torchscope table: warning: {cut}: the gzip stream is truncated" in err
    assert main(["diff", str(cut), str(whole), "--json"]) == 0
    out, err = capsys.readouterr()
    json.loads(out)
    assert f"torchscope diff: warning: {cut}: the file ends mid-event (truncated?)" in err


def test_diff_refuses_a_directory_of_several_runs(
    traces_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # two unrelated runs in one folder were averaged as ranks of one run (a x12 "step time")
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    shutil.copy(traces_dir / "multirank/rank-0.json.gz", mixed / "a_rank0.json.gz")
    shutil.copy(traces_dir / "cuda/nccl_rank0_of_2.json.gz", mixed)
    assert main(["diff", str(traces_dir / "multirank"), str(mixed), "--json"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.strip() == (
        f"torchscope diff: error: {mixed} holds 2 runs (mixed/a_rank0, mixed/nccl_rank0_of_2): diff compares"
        f" one run with another; `torchscope report {mixed}` shows each"
    )


def test_contradictory_report_options_and_an_unchanged_diff_say_so(
    traces_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = traces_dir / "cuda/nccl_rank0_of_2.json.gz"
    page = tmp_path / "z.html"
    for argv, problem in (
        (["--html", str(page), "--no-html"], "--html and --no-html contradict each other: give one"),
        (["--html", ""], "--html needs a file name"),
    ):
        assert main(["report", str(trace), *argv]) == 2
        assert capsys.readouterr().err.strip() == f"torchscope report: error: {problem}"
    assert not page.exists()
    assert main(["diff", str(trace), str(trace)]) == 0
    assert "no op or kernel changed: the same calls and times per step" in capsys.readouterr().out
