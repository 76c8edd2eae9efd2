"""The reader on every real trace: nothing lost, times exact, launches linked."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest

import torchscope
from torchscope.errors import TraceError
from torchscope.trace import TraceSet, read_chrome, read_chrome_document
from torchscope.trace.schema import EVENTS_SCHEMA, FLOWS_SCHEMA, MEMORY_SCHEMA, THREADS_SCHEMA

from .conftest import TRACES, raw_counts, read_once


def test_every_trace_keeps_every_event(trace_path: Path) -> None:
    trace = read_once(trace_path)
    raw = raw_counts(trace_path)
    ev = trace.events
    assert dict(ev.schema) == EVENTS_SCHEMA
    assert dict(trace.memory.schema) == MEMORY_SCHEMA
    assert dict(trace.flows.schema) == FLOWS_SCHEMA
    assert dict(trace.threads.schema) == THREADS_SCHEMA
    ours = dict(ev.group_by(pl.col("cat").cast(pl.String)).len().iter_rows())
    assert ours == dict(raw.by_cat)
    assert trace.memory.height == raw.memory
    assert trace.meta.warnings == ()


def test_every_trace_keeps_exact_durations(trace_path: Path) -> None:
    trace = read_once(trace_path)
    raw = raw_counts(trace_path)
    sums = trace.events.group_by(pl.col("cat").cast(pl.String)).agg(pl.col("dur_ns").sum())
    ours = {k: v for k, v in sums.iter_rows() if k in raw.dur_ns_by_cat}
    assert ours == raw.dur_ns_by_cat


def test_every_trace_derives_consistent_links(trace_path: Path) -> None:
    trace = read_once(trace_path)
    ev = trace.events
    n = ev.height
    assert ev["id"].to_list() == list(range(n))
    start = ev["start_ns"].to_numpy()
    dur = ev["dur_ns"].to_numpy()
    assert (np.diff(start) >= 0).all()
    assert (ev["self_ns"] >= 0).all() and (ev["self_ns"] <= ev["dur_ns"]).all()
    # a parent encloses its child, on the same thread, one level up
    kids = ev.filter(pl.col("parent") >= 0)
    par = ev[kids["parent"].to_numpy()]
    assert (par["start_ns"] <= kids["start_ns"]).all()
    assert ((par["start_ns"] + par["dur_ns"]) >= (kids["start_ns"] + kids["dur_ns"])).all()
    assert (par["tid"] == kids["tid"]).all() and (par["pid"] == kids["pid"]).all()
    assert (par["depth"] + 1 == kids["depth"]).all()
    # every device event whose runtime call is in the trace is linked to it
    runtime_corr = set(ev.filter(pl.col("kind") == "runtime")["correlation"].drop_nulls().to_list())
    device = ev.filter(pl.col("kind").is_in(["kernel", "memcpy", "memset"]))
    launched_here = device.filter(pl.col("correlation").is_in(list(runtime_corr)))
    assert (launched_here["launcher"] >= 0).all()
    lau = ev[launched_here["launcher"].to_numpy()]
    assert (lau["kind"] == "runtime").all()
    assert (lau["correlation"] == launched_here["correlation"]).all()
    assert (launched_here["op"].to_numpy() == lau["op"].to_numpy()).all()
    assert dur.min(initial=0) >= 0


def test_every_launch_flow_to_device_work_starts_at_its_launcher(trace_path: Path) -> None:
    """A launch flow starts at the runtime call the device work's ``launcher`` names. By time
    alone, 63 of diff_control's flows started at a ``cudaFuncSetAttribute`` of no duration
    written in the same microsecond as the launch (its correlation id says otherwise)."""
    trace = read_once(trace_path)
    kind = trace.events["kind"].cast(pl.String)
    flows = trace.flows.filter(
        pl.col("kind").cast(pl.String).is_in(["ac2g", "async_cpu_to_gpu", "async"])
        & (pl.col("src") >= 0)
        & (pl.col("dst") >= 0)
    )
    to_device = flows.filter(pl.Series(kind.gather(flows["dst"]).is_in(["kernel", "memcpy", "memset"])))
    launcher = trace.events["launcher"].gather(to_device["dst"])
    assert (launcher == to_device["src"]).all()


def test_kinds_of_a_current_cuda_trace(traces_dir: Path) -> None:
    trace = torchscope.load(traces_dir / "cuda" / "nccl_rank0_of_2.json.gz")
    assert not isinstance(trace, TraceSet)
    counts = dict(trace.events.group_by(pl.col("kind").cast(pl.String)).len().iter_rows())
    assert counts == {
        "cpu_op": 14319,
        "collective": 27,
        "user_annotation": 42,
        "runtime": 8740,
        "kernel": 2700,
        "memcpy": 960,
        "memset": 114,
        "device_annotation": 30,
        "instant": 2,
        "span": 1,
    }
    assert (trace.meta.rank, trace.meta.world_size, trace.meta.backend) == (0, 2, "nccl")
    assert trace.meta.device_properties[0]["name"] == "NVIDIA A100-PG509-200"
    assert trace.meta.base_time_ns == 1711964646000000000
    k = trace.kernels
    assert (k["launcher"] >= 0).all() and (k["op"] >= 0).all() and (k["step"] >= 0).all()
    assert sorted(k["stream"].unique().to_list()) == [7, 40]
    # a cudnn kernel's op is the ATen op that launched it
    bn = k.filter(pl.col("name").cast(pl.String).str.contains("bn_bw_1C11_kernel_new")).row(0, named=True)
    assert trace.events["name"][bn["op"]] == "aten::cudnn_batch_norm_backward"
    assert bn["grid"] == "[512, 1, 1]" and bn["registers_per_thread"] == 40


def test_2021_dialect_maps_to_current_kinds(traces_dir: Path) -> None:
    trace = read_chrome(traces_dir / "tensorboard_samples" / "resnet50_num_workers_0.pt.trace.json.gz")
    counts = dict(trace.events.group_by(pl.col("kind").cast(pl.String)).len().iter_rows())
    assert counts["kernel"] == 8772 and counts["runtime"] == 11923 and counts["memcpy"] == 12
    assert trace.steps["step"].to_list() == [5, 6, 7, 8, 9, 10]
    k = trace.kernels
    assert (k["launcher"] >= 0).all() and (k["external_id"].is_not_null()).all()
    assert (k["device"] == 0).all() and (k["stream"] == 7).all()
    assert trace.memory.height == 12838 and (trace.memory["op"] >= 0).sum() > 9000
    threads = trace.threads.filter(pl.col("label") == "stream 7")
    assert threads["tid"].to_list() == [7]


def test_mtia_links_device_work_by_flow(traces_dir: Path) -> None:
    trace = read_chrome(traces_dir / "other_devices" / "mtia_inference.json.gz")
    k = trace.kernels
    assert k.height == 1313
    linked = k.filter(pl.col("launcher") >= 0)
    assert (trace.events[linked["launcher"].to_numpy()]["cat"] == "mtia_runtime").all()
    # every ac2g flow that ends on a device event names that event's launcher
    flows = trace.flows.filter((pl.col("kind") == "ac2g") & (pl.col("dst") >= 0) & (pl.col("src") >= 0))
    to_device = flows.filter(pl.Series(trace.events["kind"].gather(flows["dst"]) == "kernel"))
    assert to_device.height == linked.height == 991
    got = dict(zip(linked["id"].to_list(), linked["launcher"].to_list(), strict=False))
    assert all(
        got[d] == s for s, d in zip(to_device["src"].to_list(), to_device["dst"].to_list(), strict=False)
    )


@pytest.mark.parametrize(
    ("name", "flows"),
    [
        ("cuda/diff_control_rank3_of_8.json.gz", 24692),
        ("cuda/nccl_rank1_of_2_profile_memory.json.gz", 42373),
        ("tensorboard_samples/resnet50_num_workers_0.pt.trace.json.gz", 9096),
    ],
)
def test_flows_bound_when_first_read_equal_flows_bound_in_the_read(
    traces_dir: Path, monkeypatch: pytest.MonkeyPatch, name: str, flows: int
) -> None:
    """Every device event found its launch by correlation id: the flows wait until read."""
    from torchscope.trace import derive

    later = read_chrome(traces_dir / name)
    assert not isinstance(later.__dict__["_flows_table"], pl.DataFrame)  # not bound yet
    monkeypatch.setattr(derive, "_flows_launch", lambda *_: True)  # as MTIA's read binds them
    now = read_chrome(traces_dir / name)
    assert isinstance(now.__dict__["_flows_table"], pl.DataFrame)
    assert later.flows.height == flows
    assert later.flows.equals(now.flows) and later.equals(now)
    assert later.flows.schema == FLOWS_SCHEMA


def test_mtia_flows_are_bound_in_the_read(traces_dir: Path) -> None:
    """Its device events carry no correlation id: their launches come from the flows."""
    trace = read_chrome(traces_dir / "other_devices" / "mtia_inference.json.gz")
    assert isinstance(trace.__dict__["_flows_table"], pl.DataFrame)


def test_a_trace_pickles_with_its_flows(traces_dir: Path) -> None:
    import pickle

    trace = read_chrome(traces_dir / "cuda" / "triton_kernel.json.gz")
    back = pickle.loads(pickle.dumps(trace))
    assert back.flows.height == 2 and back.equals(trace)


def test_self_time_subtracts_the_union_of_overlapping_children() -> None:
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "outer", "pid": 1, "tid": 1, "ts": 0, "dur": 100},
        {"ph": "X", "cat": "python_function", "name": "a", "pid": 1, "tid": 1, "ts": 10, "dur": 40},
        {"ph": "X", "cat": "python_function", "name": "b", "pid": 1, "tid": 1, "ts": 30, "dur": 40},
        {"ph": "X", "cat": "cpu_op", "name": "inner", "pid": 1, "tid": 1, "ts": 12, "dur": 5},
    ]
    trace = read_chrome_document(events, "mem")
    rows = {r["name"]: r for r in trace.events.iter_rows(named=True)}
    # a and b overlap on [30, 50): the union covers [10, 70) = 60 us of outer's 100, and [30, 50)
    # is b's, not a's too (b starts inside a and ends after it): 40 + 5 + 15 + 40 = 100
    assert rows["outer"]["self_ns"] == 40_000 and rows["b"]["self_ns"] == 40_000
    assert rows["a"]["self_ns"] == 15_000 and rows["inner"]["parent"] == rows["a"]["id"]
    assert rows["b"]["parent"] == rows["outer"]["id"] and rows["b"]["depth"] == 1


def test_string_ids_and_float_timestamps() -> None:
    events = [
        {
            "ph": "X",
            "cat": "kernel",
            "name": "k",
            "pid": 0,
            "tid": "stream 7",
            "ts": 1.5,
            "dur": 2.25,
            "args": {"correlation": 5, "stream": 7, "device": 0},
        },
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaLaunchKernel",
            "pid": 9,
            "tid": "9",
            "ts": 1.001,
            "dur": 0.4,
            "args": {"correlation": 5},
        },
        {
            "ph": "X",
            "cat": "Trace",
            "name": "PyTorch Profiler (0)",
            "pid": "Spans",
            "tid": "PyTorch Profiler",
            "ts": 0,
            "dur": 10,
        },
    ]
    trace = read_chrome_document({"traceEvents": events}, "doc")
    k = trace.kernels.row(0, named=True)
    assert (k["start_ns"], k["dur_ns"], k["stream"], k["tid"]) == (1500, 2250, 7, 7)
    rt = trace.runtime.row(0, named=True)
    assert (rt["tid"], rt["start_ns"], rt["dur_ns"]) == (9, 1001, 400)
    assert k["launcher"] == rt["id"]
    span = trace.of_kind("span").row(0, named=True)
    assert span["pid"] < 0 and span["tid"] < 0
    labels = set(trace.threads["label"].drop_nulls().to_list())
    assert {"stream 7", "PyTorch Profiler"} <= labels


def test_directory_loads_ranks_in_parallel(traces_dir: Path) -> None:
    ranks = torchscope.load(traces_dir / "multirank")
    assert isinstance(ranks, TraceSet)
    assert list(ranks) == ["rank0", "rank1"]
    assert ranks["rank0"].kernels.height == 1154 and ranks["rank1"].kernels.height == 1104


def test_tensorboard_log_dir_is_keyed_by_worker(traces_dir: Path) -> None:
    logs = torchscope.load(traces_dir / "tensorboard_samples")
    assert isinstance(logs, TraceSet)
    assert list(logs) == ["resnet50_num_workers_0", "resnet50_num_workers_4"]


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"", "empty"),
        (b"hello", "not JSON"),
        (b'{"traceEvents": [{"ph": "X"', "not valid JSON"),
        (b'{"foo": 1}', "no 'traceEvents'"),
        (gzip.compress(b'{"traceEvents": []}', mtime=0)[:-9], "gzip"),
        (b"[1, 2, 3]", "not a trace: no events"),
        (b'["a", "b"]', "not a trace: no events"),
        (b'{"traceEvents": [1, 2, {"x": 1}]}', "not a trace: no events"),
        (b'[{"name": "x"}]', "not a trace: no events"),
        (b"[]", "not a trace: no events"),
        (b'{"traceEvents": []}', "not a trace: no events"),
    ],
    ids=[
        "empty",
        "text",
        "truncated-json",
        "not-a-trace",
        "truncated-gzip",
        "numbers",
        "strings",
        "no-event-objects",
        "event-without-phase-or-time",
        "empty-list",
        "empty-trace-events",
    ],
)
def test_bad_files_name_the_file_and_the_problem(tmp_path: Path, content: bytes, problem: str) -> None:
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    with pytest.raises(TraceError) as info:
        torchscope.load(path)
    assert str(path) in str(info.value) and problem in str(info.value)
    assert "\n" not in str(info.value)


def test_missing_path_and_empty_directory(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="no such file"):
        torchscope.load(tmp_path / "nope.json")
    with pytest.raises(TraceError, match="no trace files"):
        torchscope.load(tmp_path)


def test_repairs_are_warned_not_raised(tmp_path: Path) -> None:
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "ok", "pid": 1, "tid": 1, "ts": 0, "dur": "5"},
        {"ph": "X", "cat": "cpu_op", "name": "no_ts", "pid": 1, "tid": 1, "dur": 5},
        {"ph": "X", "cat": "cpu_op", "name": "neg", "pid": 1, "tid": 1, "ts": 1, "dur": -3},
    ]
    path = tmp_path / "t.json"
    path.write_text(json.dumps(events))
    trace = read_chrome(path)
    assert trace.events["name"].to_list() == ["ok", "neg"]
    assert trace.events["dur_ns"].to_list() == [5000, 0]
    assert any("without a usable 'ts'" in w for w in trace.meta.warnings)
    assert any("negative" in w for w in trace.meta.warnings)


@pytest.mark.parametrize(
    "name",
    ["other_devices/mtia_inference.json.gz", "tensorboard_samples/resnet50_num_workers_4.pt.trace.json.gz"],
)
def test_large_files_read_in_pieces_give_the_same_trace(
    traces_dir: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    from torchscope.trace import reader

    whole = read_once(traces_dir / name)
    monkeypatch.setattr(reader, "CHUNK_BYTES", 200_000)  # dozens of pieces
    for threads in (1, 3):  # scanned one after another, or several at once and taken in order
        monkeypatch.setattr(reader, "SCAN_THREADS", threads)
        pieces = read_chrome(traces_dir / name)
        assert pieces.equals(whole)
        assert pieces.meta.extra == whole.meta.extra


def test_a_blank_line_before_the_first_event_does_not_keep_a_file_in_one_piece(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from torchscope.trace import reader

    # torch 2.13's Kineto layout: "[", a line of spaces, then the events; the separator
    # between events has no such line (every large CPU cycle stayed in one piece)
    events = [
        {"ph": "X", "cat": "cpu_op", "name": f"op{i % 7}", "pid": 1, "tid": 1, "ts": 10 * i, "dur": 5}
        for i in range(2000)
    ]
    body = "},\n  {".join(json.dumps(e, indent=4)[1:-1] for e in events)
    text = ('{\n  "traceEvents": [\n    \n  {' + body + "}\n]}").encode()
    path = tmp_path / "t.json"
    path.write_bytes(text)
    whole = read_chrome(path)
    monkeypatch.setattr(reader, "CHUNK_BYTES", 8192)
    lo = text.index(b"[") + 1
    cuts = reader._cut_points(text, lo, len(text) - 2)
    assert len(cuts) >= 10
    assert all(text[close : begin + 1] == b"},\n  {" for close, begin in cuts)
    assert read_chrome(path).equals(whole)
    assert whole.events.height == 2000


def test_pieces_the_scanner_declines_keep_their_place_when_scanned_in_parallel(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from torchscope.trace import reader

    # every 97th event has a duration written as a string: the scanner declines its piece,
    # msgspec reads it (with a warning), and the event order must still be the file's
    events = [
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": f"op{i}",
            "pid": 1,
            "tid": 1,
            "ts": 10 * i,
            "dur": str(5) if i % 97 == 0 else 5,
        }
        for i in range(3000)
    ]
    text = ('{\n  "traceEvents": [\n  ' + ",\n  ".join(json.dumps(e) for e in events) + "\n]}").encode()
    monkeypatch.setattr(reader, "CHUNK_BYTES", 4096)  # ~40 pieces, some declined
    got = {}
    for threads in (1, 4):
        monkeypatch.setattr(reader, "SCAN_THREADS", threads)
        got[threads] = reader.read_chrome_document(text, "t.json")
    assert got[4].equals(got[1]) and got[4].meta.warnings == got[1].meta.warnings
    assert got[4].events.sort("start_ns")["name"].to_list() == [f"op{i}" for i in range(3000)]


def test_a_value_too_large_is_one_warning_saying_what_became_of_the_event() -> None:
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "ok", "pid": 1, "tid": 1, "ts": 0, "dur": 5},
        {"ph": "X", "cat": "cpu_op", "name": "big_ts", "pid": 1, "tid": 1, "ts": 9.3e15, "dur": 1},
        {"ph": "X", "cat": "cpu_op", "name": "big_dur", "pid": 1, "tid": 1, "ts": 10, "dur": 1e30},
    ]
    trace = read_chrome_document(json.dumps(events), "t.json")
    assert trace.events["name"].to_list() == ["ok", "big_dur"]  # the event without a usable ts goes
    assert trace.events["dur_ns"].to_list() == [5000, 0]  # the one without a usable dur stays, at 0
    assert list(trace.meta.warnings) == [
        "1 complete events had no usable 'dur' (1 too large to represent); read as 0",
        "dropped 1 events without a usable 'ts' (1 too large to represent)",
    ]


def test_negative_memory_totals_are_unknown_not_a_peak() -> None:
    memory = {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 1, "tid": 1}
    events = [
        {
            **memory,
            "ts": 1,
            "args": {
                "Device Type": 1,
                "Device Id": 0,
                "Addr": 1,
                "Bytes": 512,
                "Total Allocated": -1,
                "Total Reserved": 2048,
            },
        },
        {
            **memory,
            "ts": 2,
            "args": {
                "Device Type": 1,
                "Device Id": 0,
                "Addr": 1,
                "Bytes": -512,
                "Total Allocated": 0,
                "Total Reserved": 2048,
            },
        },
    ]
    trace = read_chrome_document(json.dumps(events), "t.json")
    assert trace.memory["total_allocated"].to_list() == [None, 0]
    assert trace.memory["total_reserved"].to_list() == [2048, 2048]
    assert (
        "1 memory events have a negative total allocated or reserved; read as unknown" in trace.meta.warnings
    )


def test_a_stream_spelled_two_ways_gets_one_label_whichever_piece_names_it_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from torchscope.trace import reader

    # pieces are made into tables on several threads, so which spelling is seen first varies:
    # the label must not
    def doc(first: str, second: str) -> bytes:
        events = [
            {
                "ph": "X",
                "cat": "kernel",
                "name": "k",
                "pid": 0,
                "tid": first if i < 1500 else second,
                "ts": 10 * i,
                "dur": 5,
            }
            for i in range(3000)
        ]
        return ('{\n  "traceEvents": [\n  ' + ",\n  ".join(json.dumps(e) for e in events) + "\n]}").encode()

    monkeypatch.setattr(reader, "CHUNK_BYTES", 4096)
    monkeypatch.setattr(reader, "SCAN_THREADS", 4)
    labels = set()
    for first, second in (("stream 7", " stream 7 "), (" stream 7 ", "stream 7")):
        threads = reader.read_chrome_document(doc(first, second), "t.json").threads
        labels.add(tuple(threads.filter(pl.col("tid") == 7)["label"].to_list()))
    assert labels == {(" stream 7 ",)}


def test_device_clock_offset_is_warned() -> None:
    events = [
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaLaunchKernel",
            "pid": 1,
            "tid": 1,
            "ts": 1000 + i * 10,
            "dur": 5,
            "args": {"correlation": i},
        }
        for i in range(20)
    ] + [
        {
            "ph": "X",
            "cat": "kernel",
            "name": "k",
            "pid": 0,
            "tid": 7,
            "ts": 500 + i * 10,
            "dur": 5,
            "args": {"correlation": i, "device": 0, "stream": 7},
        }
        for i in range(20)
    ]
    trace = read_chrome_document(events, "skewed")
    assert any("clocks disagree" in w and "20 of 20" in w for w in trace.meta.warnings)


def test_large_directories_are_read_in_worker_processes(
    traces_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from torchscope.trace import loader

    monkeypatch.setattr(loader, "_PROCESS_THRESHOLD", 0)  # force the process pool
    ranks = loader.load(traces_dir / "multirank")
    assert isinstance(ranks, TraceSet) and list(ranks) == ["rank0", "rank1"]
    assert ranks["rank0"].equals(read_once(traces_dir / "multirank" / "rank-0.json.gz"))


def test_unknown_categories_are_kept_with_their_args() -> None:
    events = [
        {
            "ph": "X",
            "cat": "my_vendor_thing",
            "name": "dma",
            "pid": 3,
            "tid": 1,
            "ts": 5,
            "dur": 2,
            "args": {"queue": 4, "note": "x"},
        },
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1, "dur": 9},
        {"ph": "X", "cat": "cpu_op", "name": "no_pid", "tid": 1, "ts": 2, "dur": 1},
    ]
    trace = read_chrome_document(events, "vendor")
    other = trace.of_kind("other").row(0, named=True)
    assert other["cat"] == "my_vendor_thing" and json.loads(other["args"]) == {"queue": 4, "note": "x"}
    assert trace.ops["args"].is_null().all()
    assert any("pid/tid values were missing" in w for w in trace.meta.warnings)


def test_absurdly_nested_json_is_not_a_trace_and_deep_args_do_not_lose_the_file(tmp_path: Path) -> None:
    deep = tmp_path / "deep.json"
    deep.write_bytes(b"[" * 100_000 + b"]" * 100_000)
    with pytest.raises(TraceError, match="not a trace: no events"):
        read_chrome(deep)
    # 10k levels of args in one event: that value is kept as text, every event is read
    events = [
        {"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 1, "ts": i, "dur": 1}
        for i in range(4)
    ]
    text = json.dumps({"traceEvents": events}).encode()
    text = text.replace(b'"dur": 1}', b'"dur": 1, "args": {"x": ' + b"[" * 10_000 + b"]" * 10_000 + b"}}", 1)
    trace = read_chrome_document(text, "deep args")
    assert trace.events["name"].to_list() == ["op0", "op1", "op2", "op3"]
    assert any("nested deeper than 200 levels as JSON text" in w for w in trace.meta.warnings)


def test_a_bad_file_in_a_directory_is_skipped_and_named(
    traces_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rank broken beyond repair, or a config file beside the traces, must not lose the other
    ranks: it is skipped, and the TraceSet (and every report of it) says which and why."""
    from torchscope.render.payload import build_payload
    from torchscope.trace import loader

    (tmp_path / "rank-0.json.gz").symlink_to(traces_dir / "multirank" / "rank-0.json.gz")
    (tmp_path / "rank-1.json").write_text('{"traceEvents": [')
    (tmp_path / "config.json").write_text('{"lr": 0.1}')
    for threshold in (10**12, 0):  # threads, then worker processes
        monkeypatch.setattr(loader, "_PROCESS_THRESHOLD", threshold)
        job = loader.load(tmp_path)
        assert isinstance(job, TraceSet) and list(job) == ["rank0"]
        # a config file is told apart by its head and left out silently (docs/jobs.md)
        assert len(job.skipped) == 1 and not any("config.json" in w for w in job.skipped)
        assert job.skipped[0].startswith("skipped rank-1.json: not valid JSON")
        assert build_payload(job, with_timeline=False)["warnings"][:1] == list(job.skipped)


def test_random_bytes_named_gz_are_said_to_be_neither_gzip_nor_json(
    traces_dir: Path, tmp_path: Path
) -> None:
    """A new user's random bytes saved as ``rank-5.json.gz`` were skipped as "not JSON": the
    name promised gzip, and the docs' "not a readable gzip file" is for a damaged stream."""
    from torchscope.trace import loader

    junk = bytes(range(7, 256)) * 40  # no gzip header, no JSON
    (tmp_path / "rank-0.json.gz").symlink_to(traces_dir / "multirank" / "rank-0.json.gz")
    (tmp_path / "rank-5.json.gz").write_bytes(junk)
    said = "neither gzip (no gzip header, though named .gz) nor JSON (does not start with '{' or '[')"
    job = loader.load(tmp_path)
    assert isinstance(job, TraceSet) and list(job) == ["rank0"]
    assert job.skipped == (f"skipped rank-5.json.gz: {said}",)
    with pytest.raises(TraceError) as err:
        read_chrome(tmp_path / "rank-5.json.gz")
    assert str(err.value) == f"{tmp_path / 'rank-5.json.gz'}: {said}"
    (tmp_path / "rank-5.json").write_bytes(junk)  # named as JSON: only "not JSON"
    with pytest.raises(TraceError, match=r"rank-5\.json: not JSON \(does not start with"):
        read_chrome(tmp_path / "rank-5.json")


def test_a_directory_with_no_readable_trace_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "rank-1.json").write_text('{"traceEvents": [')
    with pytest.raises(TraceError, match=r"rank-1\.json: not valid JSON"):
        torchscope.load(tmp_path)


def test_gzip_of_several_members_reads_whole(tmp_path: Path) -> None:
    """``cat a.gz b.gz`` is valid gzip: the one-buffer inflate must not stop at the first member."""
    text = b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 5, "dur": 2}]}'
    path = tmp_path / "two_members.json.gz"
    path.write_bytes(gzip.compress(text[:40]) + gzip.compress(text[40:]))
    trace = read_chrome(path)
    assert trace.events["name"].cast(str).to_list() == ["aten::mm"]


def test_a_byte_order_mark_is_read_past(traces_dir: Path, tmp_path: Path) -> None:
    """Windows editors and PowerShell's Out-File start UTF-8 text with a BOM; plain or gzip."""
    text = gzip.decompress((traces_dir / "cuda" / "nccl_rank0_of_2.json.gz").read_bytes())
    plain, packed = tmp_path / "bom.json", tmp_path / "bom.json.gz"
    plain.write_bytes(b"\xef\xbb\xbf" + text)
    packed.write_bytes(gzip.compress(b"\xef\xbb\xbf" + text, mtime=0))
    expected = read_chrome(traces_dir / "cuda" / "nccl_rank0_of_2.json.gz")
    for path in (plain, packed):
        got = read_chrome(path)
        assert got.events.equals(expected.events) and got.meta.warnings == ()


@pytest.mark.parametrize("packed", [False, True], ids=["json", "gzip"])
@pytest.mark.parametrize("pieces", [False, True], ids=["whole", "pieces"])
def test_a_truncated_trace_keeps_its_complete_events(
    traces_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, packed: bool, pieces: bool
) -> None:
    """A copy cut short, or a writer killed mid-file: the events before the cut are read, and
    a warning says the file was cut (not silent, and not the whole run lost to one line)."""
    from torchscope.trace import reader
    from torchscope.trace.json_repair import cut_after_last_event

    if pieces:  # the large-file path: the event list is decoded in pieces
        monkeypatch.setattr(reader, "CHUNK_BYTES", 64 * 1024)
    source = traces_dir / "cuda" / "nccl_rank0_of_2.json.gz"
    whole = gzip.decompress(source.read_bytes())
    path = tmp_path / ("cut.json.gz" if packed else "cut.json")
    if packed:
        blob = source.read_bytes()
        path.write_bytes(blob[: len(blob) // 2])
    else:
        path.write_bytes(whole[: 2 * len(whole) // 3])
    got = read_chrome(path)
    assert any("truncated" in w for w in got.meta.warnings)
    full = read_chrome(source)
    assert full.events.height // 3 < got.events.height < full.events.height
    # exactly the events written before the cut: what the same text, closed by hand, holds
    inflated = reader.read_bytes(path, [])
    closed = cut_after_last_event(inflated)
    assert closed is not None
    assert got.events.equals(read_chrome_document(closed[0]).events)


def test_nanosecond_times_beyond_a_double_are_read_exactly() -> None:
    # Kineto writes ns as three decimals of epoch microseconds (1712195495521133.783): a double
    # holds those only to 0.25 us, which shifted every event and broke nesting (children outside
    # their parents, self times up to 29% high). Both decoders read the digits exactly.
    from decimal import Decimal

    from torchscope.trace import reader

    path = TRACES / "cuda" / "rank0_ns_resolution.pt.trace.json.gz"
    doc = json.loads(gzip.decompress(path.read_bytes()), parse_float=Decimal)
    want = sorted(
        (int(Decimal(e["ts"]) * 1000), int(Decimal(e.get("dur", 0)) * 1000))
        for e in doc["traceEvents"]
        if e.get("ph") == "X" and e.get("name") != "[memory]"
    )
    saved = reader.SCANNER_ENABLED
    try:
        for scanner in (True, False):
            reader.SCANNER_ENABLED = scanner
            ev = read_chrome(path).events.filter(pl.col("dur_ns") > 0)
            got = sorted(zip(ev["start_ns"].to_list(), ev["dur_ns"].to_list(), strict=True))
            assert got == [w for w in want if w[1] > 0], f"scanner={scanner}"
    finally:
        reader.SCANNER_ENABLED = saved
    ev = read_chrome(path).events
    first = ev.filter(pl.col("name") == "aten::convolution_backward").row(0, named=True)
    assert (first["start_ns"], first["dur_ns"]) == (1712195495521133783, 131797)


CUDA_TRUTH = Path(__file__).resolve().parents[1] / "data" / "cuda_truth"


def test_kinetos_overhead_events_do_not_make_the_reader_decode_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every CUDA trace of torch >= 2.11 has Kineto's "overhead" spans (Activity Buffer Request),
    a category we do not model, without args: they once made the reader decode the whole
    document a second time for their args (a third of a 143 MB trace's load)."""
    from torchscope.trace import reader

    def refuse(text: bytes) -> None:
        raise AssertionError("decoded the whole document a second time")

    monkeypatch.setattr(reader, "_raw_args_events", refuse)
    trace = read_chrome(CUDA_TRUTH / "resnet18.pt.trace.json.gz")  # recorded on an H200
    other = trace.of_kind("other")
    assert other["name"].cast(str).to_list() == ["Activity Buffer Request"] * 2
    assert other["args"].is_null().all()


@pytest.mark.parametrize("pieces", [False, True])
def test_unknown_categories_args_are_cut_from_the_text(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, pieces: bool) -> None:
    """The scanner says where each event's args start: the verbatim args of an unknown category
    are cut from there, in a file read whole or in pieces, without a second decode; the
    msgspec path (a document the scanner declines) still keeps them."""
    from torchscope.trace import reader

    thing = {"queue": 3, "nested": {"s": "}{", "l": [1, 2.5, None]}, "note": "é"}
    events = [
        {"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 1, "ts": 10 * i, "dur": 5} for i in range(400)
    ]
    events[123] = {"ph": "X", "cat": "vendor_dma", "name": "dma", "pid": 1, "tid": 2, "ts": 3, "dur": 1, "args": thing}
    events[321] = {"ph": "i", "cat": "vendor_dma", "name": "mark", "pid": 1, "tid": 2, "ts": 4, "args": {}}
    path = tmp_path / "vendor.json"
    path.write_text(json.dumps({"traceEvents": events}))
    if pieces:
        monkeypatch.setattr(reader, "CHUNK_BYTES", 2048)
    scanned = read_chrome(path)
    monkeypatch.setattr(reader, "SCANNER_ENABLED", False)
    decoded = read_chrome(path)
    assert scanned.equals(decoded)
    other = scanned.of_kind("other").sort("start_ns")
    assert other["name"].cast(str).to_list() == ["dma", "mark"]
    assert json.loads(other["args"][0]) == thing and other["args"][1] == "{}"


def _string_view_bytes(col: pl.Series) -> int:
    """The bytes a String column's views point at, null rows included (Arrow's string views:
    16 bytes each, the length first). A null row is expected to point at nothing."""
    arr = col.rechunk().to_arrow(compat_level=pl.CompatLevel.newest())
    views = np.frombuffer(arr.buffers()[1], dtype=np.int32).reshape(-1, 4)
    return int(views[:, 0].sum())


@pytest.mark.parametrize("pieces", [False, True])
def test_a_long_unknown_args_value_is_held_by_its_event_alone(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, pieces: bool
) -> None:
    """A new user's 4 MB args value on one event among 123k made ``report --html`` take 7 s
    (50 MB: more than 5 minutes): every event without args pointed at that text, and Polars'
    string functions read it once per such event. Each null row now points at nothing."""
    from torchscope.render.payload import _detail_values
    from torchscope.render.text import DISPLAY_CHARS
    from torchscope.trace import reader

    blob = "ab;" * 20_000
    events = [
        {"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 1, "ts": 10 * i, "dur": 5} for i in range(3000)
    ]
    events[700] = {"ph": "X", "cat": "vendor_dma", "name": "dma", "pid": 1, "tid": 2, "ts": 3, "dur": 1, "args": {"p": blob}}
    path = tmp_path / "vendor.json"
    path.write_text(json.dumps({"traceEvents": events}))
    if pieces:
        monkeypatch.setattr(reader, "CHUNK_BYTES", 16 * 1024)
    args = read_chrome(path).events["args"]
    (text,) = (a for a in args.to_list() if a is not None)
    assert json.loads(text) == {"p": blob}
    assert _string_view_bytes(args) == len(text)  # was 3000 x the text: 180 MB of views
    shown = [v for v in _detail_values(args) if v is not None]
    assert shown == [f"{text[:DISPLAY_CHARS]}… ({len(text):,} characters)"]


@pytest.mark.parametrize(
    ("where", "args_text"),
    [("name", '{"q": 1}'), ("args", '{"q": 1, "s": "x\\ufffdy"}')],
)
def test_a_lone_surrogate_escape_keeps_the_unknown_categories_args(tmp_path: Path, where: str, args_text: str) -> None:
    """``\\ud800`` followed by a character, in a name or in an unknown category's args: msgspec
    calls it "unexpected end of hex escape" when it skips the string. The file failed to load
    (in args), or every unknown category's args were dropped without a word (in a name)."""
    events = [{"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 1, "ts": 10 * i, "dur": 5} for i in range(5)]
    events.append({"ph": "X", "cat": "vendor_dma", "name": "dma", "pid": 1, "tid": 2, "ts": 3, "dur": 1, "args": {"q": 1}})
    text = json.dumps({"traceEvents": events})
    text = text.replace('"op2"', '"bad\\ud800x"') if where == "name" else text.replace('{"q": 1}', '{"q": 1, "s": "x\\ud800y"}')
    path = tmp_path / "t.json"
    path.write_text(text)
    trace = read_chrome(path)
    assert trace.of_kind("other")["args"].to_list() == [args_text]
    assert trace.meta.warnings == ("replaced 1 unpaired UTF-16 surrogate escape with U+FFFD",)


def test_a_large_files_pieces_give_one_warning_each(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Each ~8 MB piece said its own "N events had a negative duration" and "dropped malformed
    fields of N events": a 105 MB file printed 24 lines. The pieces' counts are summed into the
    line a whole read gives."""
    from torchscope.trace import reader

    events = [{"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 1, "ts": 10 * i, "dur": 5} for i in range(600)]
    for i in range(0, 600, 50):
        events[i]["dur"] = -3  # 12 negative durations, spread over every piece
    for i in range(25, 600, 100):
        events[i]["args"] = {"External id": "not a number"}  # 6 malformed fields: msgspec reads the piece
    path = tmp_path / "big.json"  # one event per line, as Kineto writes: where pieces are cut
    path.write_text('{"traceEvents": [\n  ' + ",\n  ".join(map(json.dumps, events)) + "\n]}")
    whole = read_chrome(path)
    monkeypatch.setattr(reader, "CHUNK_BYTES", 2048)
    pieces = read_chrome(path)
    assert "12 events had a negative duration; read as 0" in whole.meta.warnings
    assert sorted(pieces.meta.warnings) == sorted(whole.meta.warnings)
    assert pieces.events.equals(whole.events)


def _kineto_text(n: int = 600) -> bytes:
    """A trace in Kineto's layout: one event per line, then ``],`` and the keys Kineto writes
    after the events, ``"traceName"`` last."""
    events = [{"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 1, "ts": 10 * i, "dur": 5} for i in range(n)]
    body = "},\n  {".join(json.dumps(e)[1:-1] for e in events)
    return (
        '{\n  "schemaVersion": 1,\n  "traceEvents": [\n  {' + body + "}\n  ],"
        '"displayTimeUnit": "ms", "traceName": "/tmp/torchscope-x/cycle-1.pt.trace.json" }'
    ).encode()


@pytest.mark.parametrize("pieces", [False, True], ids=["whole", "pieces"])
def test_a_truncated_files_warning_counts_the_bytes_of_the_whole_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, pieces: bool
) -> None:
    """A file over 8 x CHUNK_BYTES is read in pieces: the warning gave the last piece's byte
    counts (a 118 MB file cut at 90% said "its first 9,258,590 of 9,258,622 bytes")."""
    from torchscope.trace import reader

    text = _kineto_text()
    cut = text[: text.index(b'"name": "op540"')]  # at 90%, inside the 541st event
    path = tmp_path / "cut.json"
    path.write_bytes(cut)
    if pieces:
        monkeypatch.setattr(reader, "CHUNK_BYTES", 2048)  # ~25 pieces
    trace = read_chrome(path)
    kept = cut.rindex(b"},\n  {") + 1  # after the last complete event's "}"
    assert (kept, len(cut)) == (48_960, 48_993)
    assert trace.meta.warnings == (
        "the file ends mid-event (truncated?): read the events in its first 48,960 of 48,993 bytes",
    )
    assert trace.events.height == 540


@pytest.mark.parametrize("pieces", [False, True], ids=["whole", "pieces"])
@pytest.mark.parametrize(
    ("drop", "key"), [(3, ' "traceName"'), (len(' "traceName": "/tmp/torchscope-x/cycle-1.pt.trace.json" }'), "")]
)
def test_a_file_cut_after_its_event_list_keeps_every_event(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, pieces: bool, drop: int, key: str
) -> None:
    """Cut inside the top-level key after the list's ``]`` (a 131 MB trace less its last 3 bytes,
    inside ``"traceName"``), or right after the comma before it: every event is complete and
    read (the last one was lost), the keys before the broken one are kept, and the warning
    names the key that is left out."""
    from torchscope.trace import reader

    path = tmp_path / "cut.json"
    path.write_bytes(_kineto_text()[:-drop])
    if pieces:
        monkeypatch.setattr(reader, "CHUNK_BYTES", 2048)
    trace = read_chrome(path)
    assert trace.events.height == 600
    assert trace.meta.warnings == (
        f"the file ends in its top-level key{key}, after the events (truncated?): read all its events, not that key",
    )
    assert trace.meta.profiler_settings["displayTimeUnit"] == "ms"
    assert "traceName" not in trace.meta.extra


@pytest.mark.parametrize("drop", [2, 5, 12])
def test_a_file_cut_inside_a_number_after_its_event_list_drops_that_key(tmp_path: Path, drop: int) -> None:
    """Kineto writes ``"baseTimeNanoseconds": 1711964646000000000`` last: a cut inside that
    number still parses when closed, so it was kept cut short (a base time 100 to 10^10 times
    too small) and the warning said "the file ends after an event". A number the text ends in
    may be cut: the key is left out and the warning names it."""
    text = gzip.decompress((TRACES / "cuda" / "nccl_rank0_of_2.json.gz").read_bytes())
    path = tmp_path / "cut.json"
    path.write_bytes(text[:-drop])
    trace = read_chrome(path)
    assert trace.meta.warnings == (
        'the file ends in its top-level key "baseTimeNanoseconds", after the events (truncated?): read all its'
        " events, not that key",
    )
    assert trace.meta.base_time_ns is None
    assert trace.events.height == read_once(TRACES / "cuda" / "nccl_rank0_of_2.json.gz").events.height


def test_a_file_missing_only_its_closing_brace_says_so(tmp_path: Path) -> None:
    text = gzip.decompress((TRACES / "cuda" / "nccl_rank0_of_2.json.gz").read_bytes())
    path = tmp_path / "cut.json"
    path.write_bytes(text[: text.rindex(b',\n  "baseTimeNanoseconds"')] + b"\n")  # ... "ms" then no "}"
    trace = read_chrome(path)
    assert trace.meta.warnings == ("the file ends before its closing brace (truncated?): read all its events and keys",)
    assert trace.meta.profiler_settings["displayTimeUnit"] == "ms"


@pytest.mark.parametrize("scanner", [True, False], ids=["scanner", "msgspec"])
@pytest.mark.parametrize(
    ("durations", "expected_ns", "unusable"),
    [
        # integers, one event without: read from the null counts alone
        (['"dur": 3', "", '"dur": 7'], [3000, 0, 7000], "1 complete events had no usable 'dur'; read as 0"),
        # Kineto's three decimals, one event without
        (['"dur": 3.250', "", '"dur": 7.001'], [3250, 0, 7001], "1 complete events had no usable 'dur'; read as 0"),
        # both ways in one file, and one too large for int64 ns
        (
            ['"dur": 3', '"dur": 7.001', '"dur": 9300000000000000'],
            [3000, 7001, 0],
            "1 complete events had no usable 'dur' (1 too large to represent); read as 0",
        ),
    ],
    ids=["integers", "decimals", "mixed"],
)
def test_times_present_one_way_and_absent_on_some_are_read_exactly(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    scanner: bool,
    durations: list[str],
    expected_ns: list[int],
    unusable: str,
) -> None:
    """``us_to_ns`` takes the few-nulls shortcut only when every present value is written one
    way; each way gives the ns the digits say, with or without our scanner, and an event
    without a usable ``dur`` is still said."""
    from torchscope.trace import reader

    monkeypatch.setattr(reader, "SCANNER_ENABLED", scanner)
    names = ["aten::a", "aten::b", "aten::c"]
    lines = [
        f'{{"ph": "X", "cat": "cpu_op", "name": "{name}", "pid": 1, "tid": 1, "ts": {10 * k}'
        + (f", {dur}}}" if dur else "}")
        for k, (name, dur) in enumerate(zip(names, durations, strict=True))
    ]
    path = tmp_path / "durs.json"
    path.write_text('{"traceEvents": [' + ",\n".join(lines) + "]}")
    trace = read_chrome(path)
    got = dict(zip(trace.events["name"].cast(pl.String), trace.events["dur_ns"], strict=True))
    assert got == dict(zip(names, expected_ns, strict=True))
    assert trace.events.sort("name")["start_ns"].to_list() == [0, 10000, 20000]
    assert unusable in trace.meta.warnings


def test_a_runs_own_threads_are_left_out_even_where_torch_wrote_no_thread_id(tmp_path: Path) -> None:
    """``torchscope run`` names its threads in each cycle (``torchscope_tool_threads``); one that
    made no Python call during the cycle has its frames written with tid 0, where any idle
    thread's land. Ours (``torchscope/runner/``) go, whatever their tid; another idle thread's
    frames at tid 0, and the script's, stay; the file is not changed."""
    pid = 4242

    def ev(name: str, tid: int, ts: int, dur: int, cat: str = "python_function") -> dict[str, object]:
        return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur}

    events = [
        ev("ProfilerStep#3", pid, 0, 100, "user_annotation"),
        ev("train.py(9): <module>", pid, 1, 98),
        ev("aten::mm", pid, 10, 20, "cpu_op"),
        # the sampler made calls: its own tid
        ev("torchscope/runner/tool_thread.py(47): _run", 77, 0, 100),
        ev("torchscope/runner/sampler.py(302): _loop", 77, 1, 98),
        # the cap's watcher slept through the cycle: tid 0
        ev("torchscope/runner/tool_thread.py(47): _run", 0, 0, 100),
        ev("torchscope/runner/bounds.py(181): _watch", 0, 0, 99),
        # a DataLoader's idle feeder thread: tid 0 too, and not ours
        ev("threading.py(1002): _bootstrap", 0, 0, 98),
        {"ph": "M", "name": "thread_name", "pid": pid, "tid": 77, "args": {"name": "thread 77 (python)"}},
    ]
    doc = {"traceEvents": events, "torchscope_tool_threads": {"pid": pid, "tids": [77, 78]}}
    path = tmp_path / "cycle.json"
    path.write_text(json.dumps(doc))
    trace = read_chrome(path)
    kept = sorted(
        zip(trace.events["tid"].to_list(), trace.events["name"].cast(pl.String).to_list(), strict=True)
    )
    assert kept == [
        (0, "threading.py(1002): _bootstrap"),
        (pid, "ProfilerStep#3"),
        (pid, "aten::mm"),
        (pid, "train.py(9): <module>"),
    ]
    assert 77 not in trace.threads["tid"].to_list()
    assert json.loads(path.read_text()) == doc
    # without the key (torch's own trace, or a user's file), nothing is left out
    del doc["torchscope_tool_threads"]
    path.write_text(json.dumps(doc))
    assert read_chrome(path).events.height == 8
