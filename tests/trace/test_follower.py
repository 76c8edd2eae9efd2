"""Scanning a Kineto file while it is written (``_scan.Follower``, ``kineto.follow_save``).

Live capture's save holds the GIL for ~0.8 s per 142 MB; the follower scans the events
meanwhile on a native thread, and the reader takes its pieces instead of scanning them again.
Whatever it scanned, the Trace must be the one the file gives when read as any other file, and
anything the follower cannot vouch for must send the reader back to that ordinary read.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from torchscope.capture.kineto import FOLLOWED_PIECE_CHUNKS
from torchscope.trace import reader
from torchscope.trace.reader import read_chrome_document

pytestmark = pytest.mark.skipif(
    reader._scan is None or not hasattr(reader._scan, "Follower"), reason="no C scanner follower here"
)

CHUNK = 8192


def _events(n: int) -> list[dict[str, Any]]:
    """Ops with shapes, every 50th an event of a category we do not model (its args are kept
    verbatim from the file, by their offset in it), and a few memory events."""
    out: list[dict[str, Any]] = []
    for i in range(n):
        if i % 50 == 0:
            out.append(
                {"ph": "X", "cat": "mystery", "name": "m", "pid": 7, "tid": 8, "ts": 10 * i, "dur": 1,
                 "args": {"what": [i, {"k": "v"}]}}
            )
        elif i % 37 == 0:
            out.append(
                {"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[memory]", "pid": 7, "tid": 7,
                 "ts": 10 * i, "args": {"Device Type": 0, "Device Id": -1, "Addr": 4096 + i, "Bytes": 64}}
            )
        else:
            out.append(
                {"ph": "X", "cat": "cpu_op", "name": f"aten::op{i % 13}", "pid": 7, "tid": 7, "ts": 10 * i,
                 "dur": 4, "args": {"External id": i, "Input Dims": [[2, 3]], "Input type": ["float"]}}
            )
    return out


def kineto_text(events: list[dict[str, Any]], *, head: str = "", tail: str = ', "traceName": "t.json"') -> bytes:
    """A document laid out as torch 2.13's Kineto writes it: top-level keys, then one event a
    line ("[", a line of spaces, each event indented), then the keys after the events."""
    body = "},\n  {".join(json.dumps(e, indent=4)[1:-1] for e in events)
    return (
        '{\n  "schemaVersion": 1,\n  "deviceProperties": [],' + head + '\n  "displayTimeUnit": "ms",\n'
        '  "traceEvents": [\n    \n  {' + body + "}\n  ]" + tail + " }"
    ).encode()


def write_slowly(path: Path, text: bytes, *, via_temporary: bool = True) -> None:
    """Write ``text`` a few KB at a time, as Kineto's writer does: into ``path.tmp``, renamed
    when done (torch 2.13), or into ``path`` itself."""
    target = path.with_name(path.name + ".tmp") if via_temporary else path
    with open(target, "wb") as f:
        for i in range(0, len(text), 4096):
            f.write(text[i : i + 4096])
            f.flush()
            time.sleep(0.0002)
    if via_temporary:
        os.replace(target, path)


def followed_while_written(
    path: Path, text: bytes, monkeypatch: pytest.MonkeyPatch, **how: bool
) -> reader.Followed | None:
    from torchscope.capture.kineto import follow_save

    with monkeypatch.context() as patch:  # small pieces while following; the reads as usual
        patch.setattr(reader, "CHUNK_BYTES", CHUNK)
        with follow_save(path) as follower:
            write_slowly(path, text, **how)
    assert follower is not None
    return follower.finish()


def read_with(path: Path, followed: reader.Followed | None) -> reader.Trace:
    return read_chrome_document(path.read_bytes(), "cycle", followed=followed)


@pytest.mark.parametrize("via_temporary", [True, False], ids=["temporary-renamed", "written-in-place"])
def test_a_file_followed_while_written_reads_as_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, via_temporary: bool
) -> None:
    events = _events(1500)
    text = kineto_text(events)
    path = tmp_path / "cycle.json"
    followed = followed_while_written(path, text, monkeypatch, via_temporary=via_temporary)
    assert followed is not None
    lo, pieces, rest = followed
    assert text[lo - 1 : lo] == b"[" and len(pieces) >= len(text) // (2 * FOLLOWED_PIECE_CHUNKS * CHUNK)
    # cut where the reader cuts: after an event's "}", before the next one's "{"
    assert all(text[end - 1 : end] == b"}" and text[begin : begin + 1] == b"{" for begin, end, _ in pieces)
    assert text[rest : rest + 1] == b"{" and rest == pieces[-1][1] + len(b",\n  ")

    trace = read_with(path, followed)
    ordinary = read_chrome_document(text, "cycle")
    assert trace.equals(ordinary) and trace.meta == ordinary.meta
    assert trace.meta.extra["traceName"] == "t.json" and trace.meta.schema_version == 1
    # the verbatim args of the events we do not model, those of the tail included
    mystery = trace.events.filter(trace.events["cat"] == "mystery").sort("start_ns")
    assert mystery.height == 30
    assert [json.loads(a) for a in mystery["args"].to_list()] == [{"what": [i, {"k": "v"}]} for i in range(0, 1500, 50)]
    assert trace.memory.height == sum(1 for e in events if e["name"] == "[memory]")


def test_a_piece_the_scanner_declines_ends_the_follow_and_the_file_is_read_as_any_other(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events = _events(1500)
    events[701]["dur"] = "7"  # a duration written as a string: msgspec reads it, the scanner not
    text = kineto_text(events)
    path = tmp_path / "cycle.json"
    assert followed_while_written(path, text, monkeypatch) is None
    trace = read_with(path, None)
    assert trace.equals(read_chrome_document(text, "cycle"))
    assert trace.events.filter(trace.events["dur_ns"] == 7000).height == 1


def test_a_raw_newline_in_a_name_that_looks_like_a_separator_is_never_a_cut(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events = _events(1500)
    text = kineto_text(events)
    # a label whose name holds the very bytes Kineto writes between two events, unescaped (a
    # raw newline inside a string: not JSON, repaired by the reader)
    at = text.index(b'"aten::op5"', len(text) // 3)
    text = text[:at] + b'"x},\n  {y"' + text[at + len(b'"aten::op5"') :]
    path = tmp_path / "cycle.json"
    followed = followed_while_written(path, text, monkeypatch)
    assert followed is None
    trace = read_with(path, followed)
    assert trace.equals(read_chrome_document(text, "cycle"))
    assert trace.events.filter(trace.events["name"] == "x},\n  {y").height == 1
    assert any("raw" in w or "control" in w or "escaped" in w for w in trace.meta.warnings)


@pytest.mark.parametrize(
    "layout",
    ["one-line", "traceEvents-as-a-value", "nested-traceEvents-first"],
)
def test_a_head_the_follower_does_not_handle_leaves_the_read_to_the_reader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, layout: str
) -> None:
    events = _events(2000)
    if layout == "one-line":
        text = json.dumps({"traceEvents": events, "traceName": "t.json"}).encode()
    elif layout == "traceEvents-as-a-value":
        text = kineto_text(events, head='\n  "note": ["traceEvents", 1],')
    else:  # a key of that name inside an earlier value: the head check refuses it
        text = kineto_text(events, head='\n  "other": {"traceEvents": [\n  {"ph": "M"}]},')
    path = tmp_path / "cycle.json"
    followed = followed_while_written(path, text, monkeypatch)
    trace = read_with(path, followed)
    assert trace.equals(read_chrome_document(text, "cycle"))
    assert trace.events.height == sum(1 for e in events if e["name"] != "[memory]")


def test_a_key_before_and_after_the_events_is_the_whole_documents_duplicate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events = _events(1500)
    text = kineto_text(events, head='\n  "traceName": "first",')
    path = tmp_path / "cycle.json"
    followed = followed_while_written(path, text, monkeypatch)
    assert followed is not None  # the follower saw a fine head: the reader's check refuses it
    assert read_with(path, followed).equals(read_chrome_document(text, "cycle"))


def test_a_follow_that_never_saw_the_file_scanned_nothing(tmp_path: Path) -> None:
    follower = reader._scan.Follower(str(tmp_path / "a.tmp"), str(tmp_path / "a"), CHUNK)
    assert follower.finish() is None
    assert follower.finish() is None  # a second call too


def _native_threads() -> int:
    return len(os.listdir("/proc/self/task"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts threads in /proc")
def test_a_follower_nobody_finishes_ends_its_thread_when_dropped(tmp_path: Path) -> None:
    """A cycle nobody reads drops its follower: its thread must end then, not scan on or wait
    for a file that never comes (a scheduled run makes one a cycle)."""
    before = _native_threads()
    waiting = reader._scan.Follower(str(tmp_path / "never.tmp"), str(tmp_path / "never"), CHUNK)
    path = tmp_path / "cycle.json"
    path.write_bytes(kineto_text(_events(1500)))
    done = reader._scan.Follower(str(tmp_path / "x.tmp"), str(path), 4096)
    done.complete()
    assert _native_threads() >= before + 1
    del waiting, done  # joined and freed, not left running
    assert _native_threads() == before
    with pytest.raises(ValueError, match="chunk"):
        reader._scan.Follower("a", "b", 10)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork")
def test_a_child_forked_while_the_thread_runs_drops_its_copy_without_waiting_for_it(tmp_path: Path) -> None:
    """A DataLoader worker forked right after a cycle's save inherits the follower but not its
    thread: dropping the copy must not wait for a thread that is not there."""
    import signal
    import warnings

    follower = reader._scan.Follower(str(tmp_path / "never.tmp"), str(tmp_path / "never"), CHUNK)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork() with threads running
        pid = os.fork()
    if pid == 0:  # the child: drop its copy, say whether finish() gave nothing, and leave
        got = follower.finish()
        del follower
        os._exit(0 if got is None else 1)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.05)
    else:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        pytest.fail("the forked child hung dropping its copy of the follower")
    assert os.waitstatus_to_exitcode(status) == 0
    assert follower.finish() is None  # the parent's own thread, joined as usual
