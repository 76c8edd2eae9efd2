"""The reader keeps what is readable: damage to one value never loses the trace.

Each case damages a real trace (``nccl_rank0_of_2``, Kineto's one-key-per-line layout) the way
a writer or a disk does: bytes that are not UTF-8, a lone surrogate escape, ``NaN`` from
Python's ``json.dump``, ``1E400``, raw NUL and escape characters, args nested 10k levels deep,
garbage after the gzip stream. Every event is still read, the damaged value is repaired as the
warning says, and the warning names how many. Both read paths are covered: the whole document
and the event list in pieces (the large-file path, forced by a small ``CHUNK_BYTES``).
"""

from __future__ import annotations

import gzip
import json
import os
import re
import threading
from pathlib import Path
from typing import Any

import polars as pl
import pytest

import torchscope
from torchscope.errors import TraceError
from torchscope.trace import read_chrome

SOURCE = "cuda/nccl_rank0_of_2.json.gz"


@pytest.fixture(scope="module")
def original(traces_dir: Path) -> tuple[bytes, pl.DataFrame]:
    text = gzip.decompress((traces_dir / SOURCE).read_bytes())
    return text, read_chrome(traces_dir / SOURCE).events


def _names_of_kernel_launches(text: bytes) -> list[bytes]:
    return [line for line in text.splitlines() if b'"name": "cudaLaunchKernel"' in line]


def _damage_names(text: bytes, damaged: bytes, count: int) -> bytes:
    """``text`` with the first ``count`` ``cudaLaunchKernel`` names replaced by ``damaged``."""
    return text.replace(b'"name": "cudaLaunchKernel"', b'"name": "' + damaged + b'"', count)


CASES = {
    # bytes that are not UTF-8, and a UTF-16 surrogate half encoded as bytes (CESU/WTF-8)
    "invalid-utf8": (
        b"cuda\xffLaunch\xfeKernel",
        "cuda\ufffdLaunch\ufffdKernel",
        "2 invalid UTF-8 byte sequences",
    ),
    "surrogate-bytes": (
        b"cuda\xed\xa0\x80Kernel",
        "cuda\ufffd\ufffd\ufffdKernel",
        "3 invalid UTF-8 byte sequences",
    ),
    "lone-surrogate-escape": (b"cuda\\ud800Kernel", "cuda\ufffdKernel", "1 unpaired UTF-16 surrogate escape"),
    "nul-and-ansi": (
        b"cuda\x00\x1b[31mKernel",
        "cuda\x00\x1b[31mKernel",
        "escaped raw control characters in 1 string",
    ),
}


@pytest.mark.parametrize("pieces", [False, True], ids=["whole", "pieces"])
@pytest.mark.parametrize("case", list(CASES))
def test_a_damaged_name_keeps_every_event(
    original: tuple[bytes, pl.DataFrame],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    case: str,
    pieces: bool,
) -> None:
    from torchscope.trace import reader

    if pieces:
        monkeypatch.setattr(reader, "CHUNK_BYTES", 64 * 1024)
    text, expected = original
    damaged, read_as, warning = CASES[case]
    path = tmp_path / "damaged.json"
    path.write_bytes(_damage_names(text, damaged, 1))
    got = read_chrome(path)
    assert got.events.height == expected.height
    changed = got.events["name"] != expected["name"]
    assert int(changed.sum()) == 1
    assert got.events.filter(changed)["name"].to_list() == [read_as]
    assert got.events.drop("name").equals(expected.drop("name"))
    assert any(warning in w for w in got.meta.warnings), got.meta.warnings


@pytest.mark.parametrize("pieces", [False, True], ids=["whole", "pieces"])
@pytest.mark.parametrize(
    ("literal", "warning"),
    [
        (b"NaN", "read 3 numbers JSON has no value for"),
        (b"Infinity", "read 3 numbers JSON has no value for"),
        (b"-Infinity", "read 3 numbers JSON has no value for"),
        (b"1E400", "read 3 numbers JSON has no value for"),
        (b"inf", "read 3 numbers JSON has no value for"),  # C++ streams, as Kineto's writer (pytorch/kineto#105)
        (b"-nan", "read 3 numbers JSON has no value for"),
    ],
)
def test_nan_infinity_and_overflowing_numbers_become_null(
    original: tuple[bytes, pl.DataFrame],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    literal: bytes,
    warning: str,
    pieces: bool,
) -> None:
    """Python's ``json.dump`` writes NaN and Infinity by default; such a duration is null (read
    as 0 with the usual warning), every event is kept."""
    from torchscope.trace import reader

    if pieces:
        monkeypatch.setattr(reader, "CHUNK_BYTES", 64 * 1024)
    text, expected = original
    path = tmp_path / "nan.json"
    path.write_bytes(re.sub(rb'"dur": [0-9.]+', b'"dur": ' + literal, text, count=3))
    got = read_chrome(path)
    assert got.events.height == expected.height
    assert int((got.events["dur_ns"] != expected["dur_ns"]).sum()) <= 3
    assert any(warning in w and "as null" in w for w in got.meta.warnings), got.meta.warnings
    assert any("no usable 'dur'" in w for w in got.meta.warnings)


@pytest.mark.parametrize("literal", [b"inf", b"NaN", b"-nan", b"-Infinity"])
def test_kineto_writing_inf_for_a_bandwidth_reads_as_fast_as_a_clean_file(
    original: tuple[bytes, pl.DataFrame], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, literal: bytes
) -> None:
    """Kineto wrote ``"memory bandwidth (GB/s)": inf`` for a memcpy of zero duration
    (pytorch/kineto#105); json.load and the TensorBoard plugin failed on the whole file, and
    so did we ("not valid JSON"). An unmodelled value: every event is read exactly as in the
    clean file, with one warning, and by the scanner (the decoder's repairs were ~4x slower
    and twice the memory on a 35 MB trace)."""
    from torchscope.trace import reader

    text, expected = original
    damaged, n = re.subn(rb'("memory bandwidth \(GB/s\)": )[0-9.eE+-]+', rb"\1" + literal, text, count=5)
    assert n == 5
    path = tmp_path / "inf.json"
    path.write_bytes(damaged)

    def no_repairs(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the scanner declined the file")

    monkeypatch.setattr(reader, "_decode", no_repairs)
    got = read_chrome(path)
    assert got.events.equals(expected)
    assert got.meta.warnings == ("read 5 numbers JSON has no value for (NaN, Infinity, inf, out of range) as null",)


def test_a_string_that_looks_like_nan_is_left_alone(tmp_path: Path) -> None:
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "NaN 1E400 Infinity", "pid": 1, "tid": 1, "ts": 1, "dur": 2},
        {"ph": "X", "cat": "cpu_op", "name": "b", "pid": 1, "tid": 1, "ts": 5, "dur": float("nan")},
    ]
    path = tmp_path / "nan.json"
    path.write_text(json.dumps({"traceEvents": events}))  # json.dump writes NaN
    got = read_chrome(path)
    assert got.events["name"].to_list() == ["NaN 1E400 Infinity", "b"]
    assert got.events["dur_ns"].to_list() == [2000, 0]


def test_raw_control_characters_in_a_one_line_file_are_escaped(tmp_path: Path) -> None:
    events = [
        {"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 1, "ts": i, "dur": 1}
        for i in range(3)
    ]
    text = json.dumps({"traceEvents": events}).encode().replace(b'"op1"', b'"op\x00\x07\t1"')
    path = tmp_path / "ctrl.json"
    path.write_bytes(text)
    got = read_chrome(path)
    assert got.events["name"].to_list() == ["op0", "op\x00\x07\t1", "op2"]
    assert any("escaped raw control characters in 1 string" in w for w in got.meta.warnings)


def test_args_nested_10k_levels_are_kept_as_text(
    original: tuple[bytes, pl.DataFrame], tmp_path: Path
) -> None:
    text, expected = original
    deep = b"[" * 10_000 + b"]" * 10_000
    path = tmp_path / "deep.json"
    path.write_bytes(text.replace(b'"args": {', b'"args": {"deep": ' + deep + b",", 1))
    got = read_chrome(path)
    assert got.events.equals(expected)
    assert any("kept 1 value nested deeper than 200 levels as JSON text" in w for w in got.meta.warnings)


def test_garbage_after_the_gzip_stream_is_read_with_a_warning(
    original: tuple[bytes, pl.DataFrame], tmp_path: Path
) -> None:
    text, expected = original
    path = tmp_path / "tail.json.gz"
    path.write_bytes(gzip.compress(text, mtime=0) + b"appended by mistake\n" * 10)
    got = read_chrome(path)
    assert got.events.equals(expected)
    assert got.meta.warnings == (
        f"the gzip stream is followed by 200 bytes that are not gzip: read the {len(text):,} bytes it inflates to",
    )
    # two members (a file gzipped in parts) are one text, read without a warning
    half = text.index(b'{\n    "ph"', len(text) // 2)
    path.write_bytes(gzip.compress(text[:half], mtime=0) + gzip.compress(text[half:], mtime=0))
    assert read_chrome(path).events.equals(expected) and read_chrome(path).meta.warnings == ()


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes")
def test_a_named_pipe_is_refused_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / "trace.json"
    os.mkfifo(fifo)
    result: list[BaseException] = []

    def read() -> None:
        try:
            torchscope.load(fifo)
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            result.append(exc)

    worker = threading.Thread(target=read, daemon=True)
    worker.start()
    worker.join(60)  # not a speed bound: a hang is the failure (a FIFO open blocks for ever)
    if worker.is_alive():
        with open(fifo, "wb"):  # unblock the reader so the thread ends
            pass
        pytest.fail("loading a named pipe hangs")
    assert len(result) == 1 and isinstance(result[0], TraceError)
    assert str(result[0]) == f"{fifo}: is a named pipe (FIFO), not a trace file"


def test_a_device_is_refused() -> None:
    with pytest.raises(TraceError, match="/dev/zero: is a character device, not a trace file"):
        torchscope.load("/dev/zero")


def test_padding_is_read_without_copies(tmp_path: Path) -> None:
    """Megabytes of white space inside the event list (a writer that pads) are read; the file is
    not copied per piece of padding (the cut finder looked at the padding as indentation)."""
    from torchscope.trace import reader

    events = [
        {"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 1, "ts": i, "dur": 1}
        for i in range(3)
    ]
    path = tmp_path / "padded.json"
    path.write_bytes(b'{"traceEvents": [' + b" " * (4 << 20) + json.dumps(events)[1:].encode() + b"}")
    got = read_chrome(path)
    assert got.events["name"].to_list() == ["op0", "op1", "op2"]
    text = path.read_bytes()
    assert reader._cut_points(text, text.index(b"[") + 1, len(text)) == []
    only = tmp_path / "blank.json"
    only.write_bytes(b" \n" * 1000)
    with pytest.raises(TraceError, match="file holds only white space"):
        read_chrome(only)


def test_a_repaired_file_keeps_the_verbatim_args_of_vendor_events() -> None:
    from torchscope.trace import read_chrome_document

    events = [
        {
            "ph": "X",
            "cat": "my_vendor",
            "name": f"v{i}",
            "pid": 1,
            "tid": 1,
            "ts": i,
            "dur": 1,
            "args": {"q": i},
        }
        for i in range(3)
    ]
    text = json.dumps({"traceEvents": events}).encode().replace(b'"v1"', b'"v\xff1"')
    trace = read_chrome_document(text, "vendor")
    assert trace.events.select("name", "args").rows() == [
        ("v0", '{"q": 0}'),
        ("v\ufffd1", '{"q": 1}'),
        ("v2", '{"q": 2}'),
    ]


@pytest.mark.parametrize(
    ("damaged", "read_as", "warning"),
    [
        (b"NVIDIA \xffA100", "NVIDIA \ufffdA100", "replaced 1 invalid UTF-8 byte sequence"),
        (b"NVIDIA \\ud800A100", "NVIDIA \ufffdA100", "replaced 1 unpaired UTF-16 surrogate escape"),
    ],
)
def test_a_damaged_top_level_value_in_a_large_file(
    original: tuple[bytes, pl.DataFrame],
    monkeypatch: pytest.MonkeyPatch,
    damaged: bytes,
    read_as: str,
    warning: str,
) -> None:
    """The large-file path reads top-level keys from the spans the scanner found: a bad byte in
    ``deviceProperties`` is repaired there too (it was a bare UnicodeDecodeError)."""
    from torchscope.trace import reader

    monkeypatch.setattr(reader, "CHUNK_BYTES", 64 * 1024)
    text, expected = original
    trace = reader.read_chrome_document(text.replace(b"NVIDIA A100-PG509-200", damaged, 1), "large")
    assert trace.events.equals(expected)
    assert trace.meta.device_properties[0]["name"] == read_as
    assert any(warning in w for w in trace.meta.warnings)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (b"null", "JSON, but a bare null: not a trace (an object or a list of events)"),
        (b' "x" ', "JSON, but a bare string: not a trace (an object or a list of events)"),
        (b"garbage", "not JSON (does not start with '{' or '[')"),
    ],
)
def test_a_json_value_that_is_no_trace_is_not_called_not_json(tmp_path: Path, text: bytes, problem: str) -> None:
    # ``null`` is valid JSON: "not JSON" sent the user looking for a syntax error
    path = tmp_path / "x.json"
    path.write_bytes(text)
    with pytest.raises(TraceError) as err:
        read_chrome(path)
    assert str(err.value) == f"{path}: {problem}"


@pytest.mark.parametrize("scanner", [True, False])
def test_a_bad_byte_in_a_large_file_is_placed_in_the_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, scanner: bool
) -> None:
    """A ``:`` made ``;`` 236 MB into a 472 MB trace was said to be at byte 1,237,364: its
    place in the 16 MB piece decoded, not in the file."""
    from torchscope.trace import reader

    events = [{"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 1, "ts": 10 * i, "dur": 5} for i in range(400)]
    text = json.dumps({"traceEvents": events}, indent=0)
    at = text.index('"name": "op250"') + len('"name"')
    path = tmp_path / "bad.json"
    path.write_text(text[:at] + ";" + text[at + 1 :])
    monkeypatch.setattr(reader, "CHUNK_BYTES", 2048)  # read in pieces, as a file over 64 MB is
    monkeypatch.setattr(reader, "SCANNER_ENABLED", scanner)
    with pytest.raises(TraceError, match=re.escape(f"expected ':' (byte {at:,})")):
        read_chrome(path)
    monkeypatch.setattr(reader, "CHUNK_BYTES", 1 << 40)  # read whole: said the same way
    with pytest.raises(TraceError, match=re.escape(f"expected ':' (byte {at:,})")):
        read_chrome(path)


@pytest.mark.parametrize("scanner", [True, False])
def test_a_file_cut_in_its_first_events_keeps_them_not_the_keys_before_the_list(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, scanner: bool
) -> None:
    """A small trace cut a few events in was cut after the ``deviceProperties`` list that
    Kineto writes before the events (it too ends in ``}],``), which left a document without
    events: "not a trace: no 'traceEvents' key" for a file of 300 complete events (found by
    the mutation test when the scanner took such files and msgspec's path did not)."""
    from torchscope.trace import reader

    props = [{"id": 0, "name": "NVIDIA A100", "totalGlobalMem": 42297524224, "numSms": 108}]
    events = [{"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 1, "ts": 10 * i, "dur": 5} for i in range(40)]
    text = json.dumps({"schemaVersion": 1, "deviceProperties": props, "traceEvents": events}, indent=2)
    at = text.index('"name": "op3"')
    path = tmp_path / "cut.json"
    path.write_text(text[:at])
    monkeypatch.setattr(reader, "SCANNER_ENABLED", scanner)
    trace = read_chrome(path)
    assert trace.ops["name"].cast(str).to_list() == ["op0", "op1", "op2"]
    kept = text.rindex("},", 0, at) + 1
    assert list(trace.meta.warnings) == [
        f"the file ends mid-event (truncated?): read the events in its first {kept:,} of {at:,} bytes",
        "no runtime call or device work was read though the trace names a device: if the run used it, the file"
        " was cut before them (Kineto writes them after the host's ops), and device times, the step breakdown"
        " and device advice are missing",
    ]


@pytest.mark.parametrize("pieces", [True, False])
@pytest.mark.parametrize("raw_newline", [False, True])
@pytest.mark.parametrize("keep", [0.5, 0.93, 0.999, 1.0])
def test_a_file_cut_short_is_scanned_as_the_decoder_reads_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, keep: float, raw_newline: bool, pieces: bool
) -> None:
    """A 472 MB trace cut short went to msgspec whole (10 s, against 3 s for the whole file):
    the scanner declined the document. Its pieces are scanned now, the last cut after its last
    complete event; the Trace and the warning are msgspec's own, whether read in pieces or
    whole (a file up to 64 MB, ~4x its whole time through msgspec, is scanned cut too). A text
    with another fault (a raw newline in a name near the end) is left to msgspec, which
    repairs it before cutting: cutting it first would have dropped the complete events after
    that name."""
    from torchscope.trace import reader

    scans = reader._scan.scan_trace
    accepted: list[int] = []

    def counting(data: bytes, **kwargs: Any) -> Any:
        got = scans(data, **kwargs)
        if got is not None:
            accepted.append(len(data))
        return got

    monkeypatch.setattr(reader._scan, "scan_trace", counting)

    events = [
        {"ph": "X", "cat": "cpu_op", "name": f"op{i % 7}", "pid": 1, "tid": 1, "ts": 10 * i, "dur": 5,
         "args": {"External id": i}}
        for i in range(600)
    ]
    for i in (5, 580):  # unknown categories early and in the last piece: args cut from the text
        events[i] = {"ph": "X", "cat": "vendor_dma", "name": "dma", "pid": 1, "tid": 2, "ts": 10 * i, "dur": 1,
                     "args": {"q": i, "s": "}, {"}}
    if raw_newline:
        events[597]["name"] = "py(3): <lambda>RAW"
    doc = {"schemaVersion": 1, "traceEvents": events, "traceName": "t.json"}
    text = json.dumps(doc, indent=1).encode().replace(b"RAW", b"\n")
    path = tmp_path / "cut.json"
    path.write_bytes(text[: int(len(text) * keep)])
    if pieces:
        monkeypatch.setattr(reader, "CHUNK_BYTES", 4096)  # read in pieces, as a file over 64 MB is
    scanned = read_chrome(path)
    if (not raw_newline or keep < 0.99) and not (pieces and keep == 1.0):  # the cut text was scanned
        assert accepted and accepted[-1] <= path.stat().st_size + 2
    monkeypatch.setattr(reader, "SCANNER_ENABLED", False)
    decoded = read_chrome(path)
    assert scanned.equals(decoded) and scanned.meta.warnings == decoded.meta.warnings
    assert scanned.meta.schema_version == 1
    args = scanned.of_kind("other")["args"].to_list()
    assert [json.loads(a)["q"] for a in args] == [5, 580][: len(args)] and len(args) >= 1
    if keep < 1.0 and not raw_newline:
        assert len(scanned.meta.warnings) == 1 and "truncated?" in scanned.meta.warnings[0]
    if raw_newline and keep > 0.99:  # the name is repaired, not cut away with what follows it
        assert "py(3): <lambda>\n" in scanned.events["name"].cast(str).to_list()


@pytest.mark.parametrize("pieces", [False, True])
@pytest.mark.parametrize("scanner", [True, False])
@pytest.mark.parametrize(
    ("ending", "fill"),
    [("12.", b""), ("-", b""), ("1e", b""), ("1E+", b""), ("1", b"\n"), ("1", b"\x00" * 4096), ('"ab', b"\n")],
)
def test_a_file_cut_inside_a_number_or_followed_by_fill_keeps_its_events(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, ending: str, fill: bytes, pieces: bool, scanner: bool
) -> None:
    """A file cut right after a number's "." (Kineto writes times with decimals), "-" or "e"
    was refused whole ("invalid number"): ~0.5 % of cut points. So was a cut file followed by
    an editor's newline or by zeros (a file extended before its data reached the disk)."""
    from torchscope.trace import reader

    events = [{"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 1, "ts": 10.5 * i, "dur": 5.25} for i in range(300)]
    text = json.dumps({"schemaVersion": 1, "traceEvents": events}, indent=1)
    at = text.index('"name": "op250"')
    key = '"name": ' if ending.startswith('"') else '"ts": '
    cut = text[:at] + key + ending
    path = tmp_path / "cut.json"
    path.write_bytes(cut.encode() + fill)
    monkeypatch.setattr(reader, "SCANNER_ENABLED", scanner)
    if pieces:
        monkeypatch.setattr(reader, "CHUNK_BYTES", 2048)
    trace = read_chrome(path)
    assert trace.ops["name"].cast(str).to_list() == [f"op{i}" for i in range(250)]
    kept = text.rindex("},", 0, at) + 1
    assert list(trace.meta.warnings) == [
        f"the file ends mid-event (truncated?): read the events in its first {kept:,} of {len(cut) + len(fill):,} bytes"
    ]


def test_a_file_cut_right_after_an_event_does_not_claim_all_its_events(tmp_path: Path) -> None:
    """It said "read all its events" for a file cut after an event's "}" 20 % into it."""
    events = [{"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 1, "ts": 10 * i, "dur": 5} for i in range(50)]
    text = json.dumps({"traceEvents": events}, indent=1)
    at = text.index("}", text.index('"name": "op9"')) + 1
    path = tmp_path / "cut.json"
    path.write_text(text[:at])
    trace = read_chrome(path)
    assert trace.ops.height == 10
    assert list(trace.meta.warnings) == [
        f"the file ends after an event, before the event list's end (truncated?): read every event in its {at:,}"
        " bytes, but more may have followed"
    ]


@pytest.mark.parametrize(
    ("keep", "said", "steps"),
    [
        (
            37,
            "no runtime call or device work was read though the trace names a device: if the run used it, the file",
            list(range(1009, 1015)),
        ),
        (50, "5 steps (1009, 1010, 1011, 1012, 1013) have host ops but few or no runtime calls in what was read", [1014]),
        (80, "2 steps (1011, 1014) have host ops but few or no runtime calls in what was read", [1009, 1010]),
        (100, None, list(range(1009, 1015))),
    ],
)
def test_a_gpu_trace_cut_in_its_device_events_says_which_steps_lost_them(
    traces_dir: Path, tmp_path: Path, keep: int, said: str | None, steps: list[int]
) -> None:
    """Kineto writes the host's ops first and the runtime calls and kernels after them: a cut
    at 37 % kept all six steps and no kernel, one at 80 % kept kernels for five steps. Their
    reports read like a host-bound run (python_outside_ops, "busy only 0.8 %") with only "the
    file ends mid-event" to say otherwise. (Steps whose runtime calls were cut in part stay:
    at 80 % steps 1009 and 1010 show 30 ms of kernels a step, not the whole file's 46.)"""
    whole = gzip.decompress((traces_dir / "cuda/diff_control_rank3_of_8.json.gz").read_bytes())
    path = tmp_path / "cut.json"
    path.write_bytes(whole[: len(whole) * keep // 100])
    from torchscope.analysis.overview import overview

    trace = read_chrome(path)
    # the step breakdown keeps the longest run of steps that kept their runtime calls
    assert overview(trace).steps["step"].to_list() == steps
    warnings = trace.meta.warnings
    if said is None:
        assert warnings == ()
    else:
        assert len(warnings) == 2 and warnings[0].startswith("the file ends mid-event (truncated?)")
        assert warnings[1].startswith(said) and "device advice" in warnings[1]


def test_an_nccl_rank_without_device_properties_cut_before_its_device_events_says_so(
    traces_dir: Path, tmp_path: Path
) -> None:
    """multirank's ranks list no deviceProperties: cut at 39 %, before their runtime calls,
    they read as host-bound runs (two python_outside_ops findings) without a word."""
    whole = gzip.decompress((traces_dir / "multirank/rank-1.json.gz").read_bytes())
    path = tmp_path / "cut.json"
    path.write_bytes(whole[: len(whole) * 39 // 100])
    warnings = read_chrome(path).meta.warnings
    assert warnings[1].startswith("no runtime call or device work was read though the trace names a device")


def test_a_first_event_cut_after_a_decimal_point_is_called_truncated(tmp_path: Path) -> None:
    """It said "JSON is malformed: invalid number" where a cut after a digit says truncated."""
    path = tmp_path / "cut.json"
    path.write_text('{"traceEvents": [\n  {"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 1212075548353.')
    with pytest.raises(TraceError) as err:
        read_chrome(path)
    assert str(err.value) == f"{path}: not valid JSON (Input data was truncated)"


def test_a_last_step_cut_in_part_is_named(traces_dir: Path, tmp_path: Path) -> None:
    """nccl_rank0_of_2 cut at 90 % kept 1,437 of its last step's 2,911 runtime calls: the
    breakdown dropped that step (under 80 % of the previous one's device work) without a word."""
    from torchscope.analysis.overview import overview

    whole = gzip.decompress((traces_dir / "cuda/nccl_rank0_of_2.json.gz").read_bytes())
    path = tmp_path / "cut.json"
    path.write_bytes(whole[: len(whole) * 9 // 10])
    trace = read_chrome(path)
    assert trace.meta.warnings[1].startswith("1 step (6) has host ops but few or no runtime calls in what was read")
    assert overview(trace).steps["step"].to_list() == [4, 5]


def test_numbers_read_as_null_in_several_pieces_are_one_line() -> None:
    """Each piece of a large file counts its own: the lines merge into one with the sum (the
    first wording put "NaN" after the count, and 2 + 3 came out as "read 2 NaNs, ...
    number" and "read 3 NaN, ... numbers")."""
    from torchscope.trace.json_repair import nonfinite_note
    from torchscope.trace.reader import merge_counted

    pieces = [nonfinite_note(1), nonfinite_note(1), nonfinite_note(3)]
    assert merge_counted([p for p in pieces if p]) == [nonfinite_note(5)]
    assert nonfinite_note(5) == "read 5 numbers JSON has no value for (NaN, Infinity, inf, out of range) as null"


def test_a_nul_and_a_bad_byte_in_the_middle_of_a_real_trace_fail_in_one_line(
    traces_dir: Path, tmp_path: Path
) -> None:
    """A new user's corruption of ``nccl_rank0_of_2``: 50 bytes mid-file overwritten with a NUL,
    an invalid UTF-8 byte and "garbage {{{". The repairs turned the text into one 10 MB line,
    and the raw-string repair looked at that whole line again for each stray character in it:
    the command spun for over ten minutes. Now it is the one-line error, at once."""
    text = gzip.decompress((traces_dir / "cuda" / "nccl_rank0_of_2.json.gz").read_bytes())
    mid = len(text) // 2
    path = tmp_path / "corrupt.json"
    path.write_bytes(text[:mid] + b"\x00\xff garbage {{{" + text[mid + 50 :])
    with pytest.raises(TraceError, match=r"not valid JSON \(JSON is malformed: object keys must be strings"):
        read_chrome(path)


def test_a_step_name_without_a_step_number_is_no_step(tmp_path: Path) -> None:
    """``ProfilerStep#3000000000`` wrapped to step -1294967296 without a word, and
    ``ProfilerStep#-5``/``#x`` ended ``torchscope report`` in a cast error (exit 0, no
    summary). Such annotations are no steps now, and the reader says which."""
    from torchscope.analysis.report import build_report

    def annotation(name: str, ts: int) -> dict[str, Any]:
        return {"ph": "X", "cat": "user_annotation", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": 90}

    def op(ts: int) -> dict[str, Any]:
        return {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": ts, "dur": 50}

    events = [annotation("ProfilerStep#7", 0), op(10), annotation("ProfilerStep#3000000000", 100), op(110)]
    events += [annotation("ProfilerStep#-5", 200), op(210), annotation("ProfilerStep#x", 300), op(310)]
    path = tmp_path / "steps.json"
    path.write_text(json.dumps({"traceEvents": events}))
    trace = torchscope.load(path)
    assert trace.steps["step"].to_list() == [7]
    assert sorted(trace.events.filter(pl.col("name") == "aten::mm")["step"].to_list()) == [-1, -1, -1, 7]
    (said,) = [w for w in trace.meta.warnings if "ProfilerStep" in w]
    assert said.startswith("3 ProfilerStep annotations ('ProfilerStep#3000000000', 'ProfilerStep#-5',")
    assert said.endswith("have no step number in 0..2147483647, so they are not steps")
    report = build_report(trace)
    assert [s["step"] for s in report["steps"]] == [7]


def test_a_step_number_that_repeats_is_one_step_and_said(tmp_path: Path) -> None:
    """Two runs of steps 0-2 in one trace (traces joined, a loop that restarts its count) read
    "3 steps" without a word, and the later spans' ops were counted in the first spans' steps.
    Each number is one step, its first span; the later spans are in no step, and said."""
    from torchscope.analysis.report import build_report

    events: list[dict[str, Any]] = []
    for run in range(2):
        for step in range(3):
            ts = (run * 3 + step) * 1000
            events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}", "pid": 1, "tid": 1, "ts": ts, "dur": 1000})  # fmt: skip
            events.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": ts + 100, "dur": 500})  # fmt: skip
    path = tmp_path / "twice.json"
    path.write_text(json.dumps({"traceEvents": events}))
    trace = torchscope.load(path)
    assert trace.steps["start_ns"].to_list() == [0, 1_000_000, 2_000_000]
    assert trace.events.filter(pl.col("name") == "aten::mm")["step"].to_list() == [0, 1, 2, -1, -1, -1]
    (said,) = [w for w in trace.meta.warnings if "ProfilerStep" in w]
    assert said == (
        "3 ProfilerStep numbers (#0, #1, #2) occur more than once: each number is one step, its first span;"
        " the 3 later spans are in no step"
    )
    report = build_report(trace)
    assert [s["step"] for s in report["steps"]] == [0, 1, 2]
    assert report["breakdown_us"]["Total"] == pytest.approx(1000.0)


def test_a_symbolic_link_that_loops_or_points_nowhere_is_said_as_such(tmp_path: Path) -> None:
    loop = tmp_path / "loop.json"
    loop.symlink_to(loop.name)
    dangling = tmp_path / "dangling.json"
    dangling.symlink_to(tmp_path / "gone.json")
    with pytest.raises(TraceError, match=r"loop\.json: a symbolic link loop$"):
        torchscope.load(loop)
    with pytest.raises(TraceError, match=r"dangling\.json: a symbolic link to .*gone\.json, which does not exist$"):
        torchscope.load(dangling)
    with pytest.raises(TraceError, match=r"absent\.json: no such file or directory$"):
        torchscope.load(tmp_path / "absent.json")


def test_a_malformed_field_is_named_in_the_warning(tmp_path: Path) -> None:
    """"dropped malformed fields of 307 events" named none of them: an External id written as
    text is named, once. A timestamp that is a string is said once, with what became of its
    event (it was named here too: three lines for two events)."""
    op = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "dur": 5}
    events = [
        {**op, "ts": 0, "args": {"External id": "x"}},
        {**op, "ts": 10, "args": {"External id": "y"}},
        {**op, "ts": "late", "args": {"External id": 3}},
        {**op, "ts": 30, "args": {"External id": 4}},
    ]
    path = tmp_path / "fields.json"
    path.write_text(json.dumps({"traceEvents": events}))
    trace = read_chrome(path)
    assert [w for w in trace.meta.warnings if "malformed" in w or "'ts'" in w] == [
        "dropped malformed fields of 2 events (args.External id)",
        "dropped 1 events without a usable 'ts'",
    ]


def test_junk_with_a_stray_quote_mid_file_gets_its_error_not_a_repair(
    original: tuple[bytes, pl.DataFrame], tmp_path: Path
) -> None:
    """A new user overwrote 4 KB of a 355 MB trace with random bytes: their one odd quote put
    every later string out of step, so the repairs escaped the 1.5M "strings with raw line
    ends" between values into one 104 MB line and then searched it back from each find (8.5
    minutes before the error, in both read paths). The junk is named where it is, and the
    values after it are not rewritten into one line."""
    text = original[0]
    at = text.index(b'"name": "cudaLaunchKernel"', len(text) // 2)
    junk = b'\x8d/<|\xcb\xa7"\x05\xcd\x88oJ\n\xdc\xc4\x04\xeb\x1f\t\x99\xfa|,\xf3'
    path = tmp_path / "junk.json"
    path.write_bytes(text[:at] + junk + text[at + len(junk) :])
    with pytest.raises(TraceError) as raised:
        read_chrome(path)
    assert str(raised.value).startswith(f"{path}: not valid JSON (")
    assert f"(byte {at:,})" in str(raised.value)
    from torchscope.trace.json_repair import repair_values

    # one stray quote after a member's comma: every later "string" is the text between two
    # values, raw line end included; it was escaped (the values after joined into one line)
    end = text.index(b'"name": "cudaLaunchKernel",', len(text) // 2) + len(b'"name": "cudaLaunchKernel",')
    shifted = text[:end] + b'"' + text[end:]
    assert repair_values(shifted) == (shifted, [])
    # a value of raw white space is a value: escaped
    assert repair_values(b'["\n\t", "a"]') == (b'["\\u000a\\u0009", "a"]', ["escaped raw control characters in 1 string"])


def test_a_long_line_of_damage_is_looked_at_once(tmp_path: Path) -> None:
    """Each find of a value to repair looked for its line's start from the text's start: on
    one 64 MB line with a find every 256 bytes that is hours of searching, here one pass."""
    from torchscope.trace.json_repair import MAX_LINE, escape_raw_strings

    line = (b'"k": "a\x01' + b"x" * 248) * (1 << 18)
    text = b'{"traceEvents": [\n' + line + b"\n]}"
    assert len(line) > MAX_LINE
    result: list[tuple[bytes, list[str]]] = []
    worker = threading.Thread(target=lambda: result.append(escape_raw_strings(text)), daemon=True)
    worker.start()
    worker.join(60)  # not a speed bound: the quadratic search is the failure (hours)
    assert not worker.is_alive(), "the repair searched the line again for each find"
    assert result == [(text, [])]  # a line this long is no member of Kineto's: left alone
