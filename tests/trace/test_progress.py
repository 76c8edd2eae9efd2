"""The load progress bar shows only on slow loads, and only where someone can see it."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from torchscope.trace import progress


def test_bar_appears_only_after_the_delay(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(progress, "DELAY_S", 30.0)  # far beyond any pause of a busy machine
    with progress.LoadProgress("big.json", enabled=True) as quick:
        pass
    assert not quick.shown
    monkeypatch.setattr(progress, "DELAY_S", 0.05)
    with progress.LoadProgress("big.json", total=3, enabled=True) as slow:
        deadline = time.monotonic() + 20  # the timer thread imports rich: slow on a busy machine
        while not slow.shown and time.monotonic() < deadline:
            time.sleep(0.05)
        slow.phase("decode")
        slow.advance("rank1.json")
        assert slow.shown
        assert slow._description() == "big.json: rank1.json"


def test_no_bar_when_stderr_is_not_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(progress, "DELAY_S", 0.0)
    monkeypatch.setattr("sys.stderr.isatty", lambda: False, raising=False)
    with progress.LoadProgress("x.json") as bar:
        time.sleep(0.05)
    assert not bar.enabled and not bar.shown


def test_a_large_file_reports_its_pieces(traces_dir: Path) -> None:
    # a 2.5 GB trace showed only "linking events", "building columns", "linking events", ... for
    # its 20 s: a file read in pieces says how many of them are read
    from torchscope.trace.reader import read_chrome

    seen: list[tuple[int, int]] = []
    large = traces_dir / "other_devices" / "mtia_training_large.json.gz"
    read_chrome(large, on_piece=lambda d, t: seen.append((d, t)))
    # streamed (87 MB of text): the total is estimated from the share of the file inflated so
    # far, and is exact once the last piece is cut
    done = [d for d, _ in seen]
    assert done == list(range(1, len(seen) + 1)) and len(seen) == 5
    assert all(d < t for d, t in seen[:-1]) and seen[-1] == (5, 5)
    seen.clear()
    read_chrome(traces_dir / "cuda" / "backward_thread_small.json", on_piece=lambda d, t: seen.append((d, t)))
    assert seen == []  # read whole: no pieces to count


def test_pieces_make_a_bar_and_hold_the_phase(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(progress, "DELAY_S", 30.0)
    with progress.LoadProgress("big.json", enabled=True) as bar:
        bar.phase("inflate")
        assert bar._description() == "big.json: decoding JSON"
        bar.piece(1, 3)
        bar.phase("decode")
        bar.phase("columns")  # a piece's own phases: the display stays on the pieces
        assert (bar._description(), bar.total) == ("big.json: reading its pieces", 3)
        bar.piece(3, 3)
        bar.phase("columns")  # the last piece's: linking comes next
        assert bar._description() == "big.json: linking events"


def test_a_folder_counts_each_rank_when_it_is_read(
    traces_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ranks were counted in file order: three small ranks read while the first, large one
    was still being read showed "0/4" until it was done. Each is counted once it is read."""
    from torchscope.trace import loader
    from torchscope.trace.model import Trace
    from torchscope.trace.reader import read_chrome

    small = (traces_dir / "cuda" / "backward_thread_small.json").read_bytes()
    for rank in range(4):
        (tmp_path / f"rank{rank}.json").write_bytes(small)
    bars: list[progress.LoadProgress] = []

    class Kept(progress.LoadProgress):
        def __enter__(self) -> progress.LoadProgress:
            bars.append(self)
            return super().__enter__()

    counted_while_rank0_read: list[int] = []

    def read(path: Path) -> Trace:
        if path.name == "rank0.json":  # the large one: still read when the others are done
            deadline = time.monotonic() + 10
            while bars[0]._done < 3 and time.monotonic() < deadline:
                time.sleep(0.01)
            counted_while_rank0_read.append(bars[0]._done)
        return read_chrome(path)

    monkeypatch.setattr(loader, "LoadProgress", Kept)
    monkeypatch.setattr(loader.os, "cpu_count", lambda: 4)  # rank0 blocks one thread of four
    ranks = loader.load_dir(tmp_path, read, progress=False)
    assert len(ranks.traces) == 4
    assert counted_while_rank0_read == [3]  # "3/4" (it was 0/4)
