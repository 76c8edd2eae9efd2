"""The Python hot-spot sampler: attribution and op coverage."""

from __future__ import annotations

import time
from pathlib import Path
from types import CodeType

import numpy as np
import pytest

from torchscope.runner.sampler import Sampler, covered_by, hot_frame


def _busy_python(seconds: float) -> int:
    end, n = time.perf_counter() + seconds, 0
    while time.perf_counter() < end:
        n += 1
    return n


def test_covered_by_handles_nesting_and_gaps() -> None:
    starts = np.array([0, 10, 12, 40])
    ends = np.array([30, 11, 20, 50])
    t = np.array([-1, 0, 25, 30, 35, 45, 50])
    assert covered_by(t, starts, ends).tolist() == [False, True, True, False, False, True, False]


def test_sampler_finds_a_busy_function() -> None:
    s = Sampler(interval_s=0.001)
    s.start()
    _busy_python(0.25)
    hs = s.stop()
    rows = hs.table()
    top = rows[0]
    assert top["function"] == "_busy_python" and top["self_pct"] > 60.0
    assert 0.15e9 < sum(r["self_ns"] for r in rows) < 1.5e9


def test_library_time_goes_to_the_call_the_user_made() -> None:
    user = ("/home/me/train.py", "forward", 10)
    public = ("/x/site-packages/numpy/_core/numeric.py", "argwhere", 600)
    helper = ("/x/site-packages/numpy/_core/fromnumeric.py", "_wrapfunc", 40)
    inner = ("/x/site-packages/numpy/_core/fromnumeric.py", "transpose", 60)
    assert hot_frame((helper, inner, public, user)) == public
    assert hot_frame((user, public)) == user
    # private helpers alone, entered from C (``a.sum()``'s ``_sum``, ``np.sort``'s dispatcher): the
    # user's line keeps the time; with no user frame, the helper itself
    private = ("/x/site-packages/numpy/_core/_methods.py", "_sum", 47)
    assert hot_frame((private, user)) == user
    assert hot_frame((private,)) == private
    # torch's own Python is the model running: its time goes to the user's line that called it
    ctor = ("/x/site-packages/torch/optim/sgd.py", "__init__", 29)
    lazy = ("/x/site-packages/torch/_compile.py", "inner", 42)
    assert hot_frame((lazy, ctor, user)) == user
    backward = ("/x/site-packages/torch/_tensor.py", "backward", 566)
    engine = ("/x/site-packages/torch/autograd/__init__.py", "backward", 250)
    assert hot_frame((engine, backward, user)) == user
    assert hot_frame((engine, backward)) == backward  # no user frame: the library's own


def test_script_only_keeps_the_script_frames_and_drops_everything_outside_it(tmp_path: Path) -> None:
    from torchscope.runner.target import Target, execute

    script = tmp_path / "spin.py"
    script.write_text(
        "import time\n"
        "def spin(s):\n"
        "    end = time.perf_counter() + s\n"
        "    while time.perf_counter() < end:\n"
        "        pass\n"
        "spin(0.15)\n"
    )
    s = Sampler(interval_s=0.001, script_only=True)
    s.start()
    _busy_python(0.1)  # our own work, outside the script: no hot spot
    assert execute(Target(str(script))).exit_code == 0  # as the runner runs it
    hs = s.stop()
    rows = hs.table()
    assert {(r["function"], r["file"]) for r in rows} <= {("spin", str(script)), ("<module>", str(script))}
    assert rows[0]["function"] == "spin"
    module = next(r for r in rows if r["function"] == "<module>")
    assert module["total_pct"] == 100.0  # every kept sample is inside the script


def test_our_own_frames_are_never_hot_spots() -> None:
    # torchscope installed editable lives outside site-packages; the step hook the runner wraps
    # around the user's optimizer.step() must not show up as a hot spot of the user's script
    import torchscope
    from torchscope.runner.sampler import _skipped

    package = Path(torchscope.__file__).parent
    for ours in ("capture/profiler.py", "runner/session.py", "cli/run.py", "__main__.py"):
        assert _skipped(str(package / ours)), ours
    assert not _skipped("/home/me/train.py")
    assert not _skipped("/env/site-packages/torch/optim/optimizer.py")


def test_a_module_level_training_loop_charges_self_time_to_the_calls_into_torch() -> None:
    """Finding 9: an Adam loop written at module level gave ``<module>`` 100 % self and every
    other row 0. Each sample's self time now goes to the call the user's line made into torch
    (``Adam.step`` at the ``opt.step()`` line), and the self column adds up to the run."""
    from torchscope.runner.target import Target, execute

    script = Path(__file__).parents[1] / "cli" / "scripts" / "adam_loop.py"
    lines = script.read_text().splitlines()
    step_line = lines.index("    opt.step()") + 1
    backward_line = lines.index("    loss.backward()") + 1
    s = Sampler(interval_s=0.001, script_only=True)
    s.start()
    assert execute(Target(str(script), ("80",))).exit_code == 0
    rows = s.stop().table(limit=10_000)
    by_key = {(r["function"], r["line"]): r for r in rows}
    step = by_key[("Adam.step", step_line)]
    backward = by_key[("Tensor.backward", backward_line)]
    assert step["file"] == backward["file"] == str(script)  # placed at the user's lines
    assert step["self_ns"] > 0 and backward["self_ns"] > 0
    assert step["self_ns"] == step["total_ns"]  # a call row holds only its own samples
    # the script's own module (the imports it makes run other modules' ``<module>`` frames)
    module = next(r for r in rows if r["function"] == "<module>" and r["file"] == str(script))
    assert module["total_pct"] == 100.0 and module["self_ns"] < module["total_ns"]
    # every sample's self time is charged exactly once: the column sums to the run
    assert abs(sum(r["self_ns"] for r in rows) - module["total_ns"]) <= len(rows)
    for r in rows:
        assert r["self_ns"] <= r["total_ns"]


def test_an_inherited_optimizer_step_is_named_by_the_class_that_stepped() -> None:
    """AdamW's step is Adam's code: its row says ``AdamW.step`` when AdamW stepped, and stays
    ``Adam.step`` when Adam stepped too (the samples cannot tell the two apart)."""
    import torch

    from torchscope.runner.sampler import HotSpots

    p = torch.zeros(1, requires_grad=True)
    torch.optim.Adam([p]), torch.optim.AdamW([p])  # torch wraps each class's step on first use
    empty = np.zeros(0, dtype=np.int64)
    hs = HotSpots(1_000_000, 0, empty, empty.astype(np.int32), ((),), (("train.py", "Adam.step", 12),))
    assert hs.named_by_class({torch.optim.AdamW}).hot == (("train.py", "AdamW.step", 12),)
    assert hs.named_by_class({torch.optim.Adam, torch.optim.AdamW}).hot == hs.hot
    assert hs.named_by_class({torch.optim.Adam}).hot == hs.hot


def test_a_sample_after_an_unrecorded_gap_weighs_only_its_own_interval() -> None:
    """Two recorded windows with unrecorded time between them (the default schedule): the
    sampler keeps sampling in the gap, so the first sample of the second window weighs one
    interval, not the whole gap as when the gaps were recomputed after dropping the gap's samples."""
    from torchscope.runner.sampler import HotSpots

    ms = 1_000_000
    user = (("train.py", "<module>", 1),)
    loader = (("train.py", "load", 5), *user)
    # 1 ms samples: 0..9 in window A (load), 10..499 unrecorded (load), 500..509 in window B
    times = np.arange(510, dtype=np.int64) * ms + ms
    ids = np.zeros(510, dtype=np.int32)
    ids[500] = 1  # the first sample of window B is in load()
    hs = HotSpots(ms, 0, times, ids, (user, loader))
    recorded = (times <= 10 * ms) | (times > 500 * ms)
    rows = {r["function"]: r for r in hs.windowed(recorded, hs.weights_ns).table()}
    assert rows["<module>"]["total_ns"] == 20 * ms
    assert rows["load"]["total_ns"] == 1 * ms and rows["load"]["samples"] == 1
    # the old way (gaps recomputed among the recorded samples only) gave load() the gap: 491 ms
    old = HotSpots(ms, 0, times[recorded], ids[recorded], (user, loader))
    assert {r["function"]: r["total_ns"] for r in old.table()}["load"] == 491 * ms


def test_a_long_gap_goes_to_the_call_that_held_the_gil() -> None:
    """The sample after a gap (a C call holding the GIL) is taken at the first check after the
    call returns: in the frame that made it, which keeps the gap (``json.dumps``, in ``encode``
    under ``prep``, though the sample before it was in another function: the frames both
    shared, ``<module>``, took 529 ms of a new user's 540). Where that sample's leaf was just
    entered (``transpose``, the call after ``nonzero``), the stack without it keeps the gap."""
    from torchscope.runner.sampler import _charge_long_gaps

    module = ("/home/me/gil.py", "<module>", 1)
    prep = ("/home/me/gil.py", "prep", 6)
    loop = ("/home/me/gil.py", "loop", 20)
    dumps = ("/usr/lib/python3.12/json/__init__.py", "dumps", 183)
    encode = ("/usr/lib/python3.12/json/encoder.py", "encode", 183)
    forward = ("/home/me/masking.py", "forward", 13)
    argwhere = ("/x/site-packages/numpy/_core/numeric.py", "argwhere", 624)
    nonzero = ("/x/site-packages/numpy/_core/fromnumeric.py", "nonzero", 2000)
    transpose = ("/x/site-packages/numpy/_core/fromnumeric.py", "transpose", 604)
    stacks = [
        (loop, module),
        (encode, dumps, prep, module),
        (nonzero, argwhere, forward, module),
        (transpose, argwhere, forward, module),  # transpose just entered: its caller is sid 4
        (argwhere, forward, module),
    ]
    ms = 1_000_000
    times = np.array([0, 1, 109, 110, 111, 170], dtype=np.int64) * ms  # gaps before samples 2 and 5
    ids = np.array([0, 0, 1, 1, 2, 3], dtype=np.int32)
    _charge_long_gaps(times, ids, stacks, np.full(6, ms), {3: 4})
    assert ids.tolist() == [0, 0, 1, 1, 2, 4]


def test_a_pure_python_function_between_module_level_calls_keeps_its_time(tmp_path: Path) -> None:
    # the seed's masking case as a user writes it: numpy per row, called at module level between
    # other calls. The sampler got the GIL only every switch interval (5 ms), and each such gap
    # went to the frames the samples around it shared: <module> took the function's time.
    from torchscope.runner.target import Target, execute

    script = tmp_path / "mask.py"
    spent_file = tmp_path / "spent"
    script.write_text(
        "import time\n"
        "import numpy as np\n"
        "rng = np.random.default_rng(0)\n"
        "def find_hard_examples(mask):\n"
        "    return [np.argwhere(row).ravel().tolist() for row in mask]\n"
        "spent = 0.0\n"
        "for i in range(12):\n"
        "    mask = rng.random((3000, 50)) > 0.5\n"
        "    t = time.perf_counter(); find_hard_examples(mask); spent += time.perf_counter() - t\n"
        f"open({str(spent_file)!r}, 'w').write(str(spent))\n"
    )
    s = Sampler(interval_s=0.001, script_only=True)
    s.start()
    assert execute(Target(str(script))).exit_code == 0
    hs = s.stop()
    spent_ns = float(spent_file.read_text()) * 1e9
    rows = {r["function"]: r for r in hs.table()}
    found = rows["find_hard_examples"]["total_ns"]
    assert found > 0.6 * spent_ns, (found, spent_ns)  # was: nearly all of it <module>'s self


def test_a_row_is_placed_at_the_line_that_holds_its_time(tmp_path: Path) -> None:
    """A training loop written at module level read "<module> train.py:1", its busy line
    nowhere (a new user's find): a row's location is the line that held most of its own time,
    its ``line`` still where the function starts. The advice names that line too."""
    from torchscope.runner.target import Target, execute

    script = tmp_path / "busy.py"
    script.write_text(
        "import time\n"
        "def helper():\n"
        "    end = time.perf_counter() + 0.15\n"
        "    while time.perf_counter() < end:\n"
        "        pass\n"
        "end = time.perf_counter() + 0.3\n"
        "while time.perf_counter() < end:\n"
        "    pass\n"
        "helper()\n"
    )
    s = Sampler(interval_s=0.001, script_only=True)
    s.start()
    assert execute(Target(str(script))).exit_code == 0
    rows = {r["function"]: r for r in s.stop().table()}
    assert rows["<module>"]["line"] == 1 and rows["<module>"]["hot_line"] in (7, 8)
    assert rows["<module>"]["location"].endswith(f"busy.py:{rows['<module>']['hot_line']}")
    assert rows["helper"]["line"] == 2 and rows["helper"]["hot_line"] in (4, 5)


def test_a_long_run_keeps_a_bounded_number_of_samples_that_still_add_up_to_its_time() -> None:
    """At ``max_samples`` the sampler drops every other sample taken while nothing was
    recorded: memory stays bounded however long the run, the samples still cover the whole time
    sampled, and those taken while a cycle was recorded are all kept."""
    recording = [False]
    s = Sampler(interval_s=0.001, max_samples=200, recording=lambda: recording[0])
    s.start()
    began = time.time_ns()
    _busy_python(0.3)
    # on busy cores the sampler takes fewer than 1,000 samples a second: go on until it thinned
    give_up = time.monotonic() + 20
    # (read without a buffer view: the sampler appending meanwhile raised BufferError, and
    # its thread ended with its arrays of different lengths)
    while not any(level > 0 for level in s._levels.tolist()) and time.monotonic() < give_up:
        _busy_python(0.05)
    recording[0] = True
    recorded_from = time.time_ns()
    _busy_python(0.05)
    recorded_to = time.time_ns()
    recording[0] = False
    _busy_python(0.3)
    hs = s.stop()
    sampled_ns = time.time_ns() - began
    assert hs.samples <= 200
    assert hs.spans_ns is not None and (hs.spans_ns > 2 * hs.interval_ns).any()  # thinned
    # every sample of the recorded 50 ms is there, each standing for its own interval
    kept = np.frombuffer(s._recorded, dtype=np.int8) == 1
    times = np.frombuffer(s._times, dtype=np.int64)
    assert kept.sum() >= 5 and (np.frombuffer(s._levels, dtype=np.int8)[kept] == 0).all()
    slack = 10 * hs.interval_ns  # a sample's time and its flag are read one after the other
    assert recorded_from - slack <= times[kept].min() and times[kept].max() <= recorded_to + slack
    assert hs.table()[0]["function"] == "_busy_python"
    covered = int(hs.weights_ns.sum())
    assert 0.8 * sampled_ns < covered < 1.1 * sampled_ns


def test_a_run_recorded_throughout_is_thinned_too() -> None:
    s = Sampler(interval_s=0.001, max_samples=64)  # recording None: every sample was recorded
    s.start()
    began = time.time_ns()
    _busy_python(0.4)
    hs = s.stop()
    sampled_ns = time.time_ns() - began
    assert hs.samples <= 64
    assert 0.8 * sampled_ns < int(hs.weights_ns.sum()) < 1.1 * sampled_ns


def test_thinning_keeps_recorded_samples_and_the_total_time() -> None:
    """``_thin`` on a known stream: 1 ms samples, stack 1 while a cycle was recorded (samples
    400-449), stack 0 before and after."""
    s = Sampler(interval_s=0.001, max_samples=10**9)
    ms = 1_000_000
    n = 1000
    recorded = np.zeros(n, dtype=np.int8)
    recorded[400:450] = 1
    s._times.frombytes((np.arange(n, dtype=np.int64) * ms).tobytes())
    s._stack_ids.frombytes(recorded.astype(np.int32).tobytes())
    s._levels.frombytes(np.zeros(n, np.int8).tobytes())
    s._recorded.frombytes(recorded.tobytes())
    user = ("/home/me/train.py", "loop", 1)
    s._stacks = {((), ()): 0, ((user[0],), (1,)): 1}  # placeholders: from_samples is not used
    for _ in range(3):
        s._thin()
    times = np.frombuffer(s._times, dtype=np.int64)
    ids = np.frombuffer(s._stack_ids, dtype=np.int32)
    levels = np.frombuffer(s._levels, dtype=np.int8)
    assert len(times) < 0.2 * n  # 950 unrecorded samples thinned three times, 50 kept
    assert (times[ids == 1] == np.arange(400, 450) * ms).all() and (levels[ids == 1] == 0).all()
    assert times[-1] == (n - 1) * ms  # the last sample stays: it holds the end of the run
    # each sample stands for its gap: the first unrecorded sample after the cycle takes none of it
    gaps = np.diff(times, prepend=times[0] - (ms << int(levels[0])))
    assert gaps.sum() == n * ms
    assert gaps[ids == 1].tolist() == [ms] * 50
    after = int(np.flatnonzero(ids == 1)[-1]) + 1
    assert gaps[after] <= 8 * ms and levels[after] <= 3


def test_under_the_portable_collector_an_op_call_reads_as_it_does_under_kineto(tmp_path: Path) -> None:
    """The portable collector runs every op from its dispatch mode, in Python: a sample taken
    there held torch's plumbing (``_disable_dynamo.<locals>.inner``, ``OpOverload.__call__``),
    which named a row at the user's line for a ``torch.randn``. Now an op call is the user's
    line, as when it is all C; a call into torch's Python (``Tensor.backward``) keeps its name."""
    from torchscope.capture.portable import PortableCollector
    from torchscope.runner.target import Target, execute

    script = tmp_path / "ops_at_module_level.py"
    script.write_text(
        "import torch\n"
        "w = torch.randn(64, 64, requires_grad=True)\n"
        "for _ in range(400):\n"
        "    x = torch.randn(64, 64).mul(2).add(1).relu()\n"
        "    (x @ w).sum().backward()\n"
    )
    s = Sampler(interval_s=0.0005, script_only=True)
    collector = PortableCollector()
    collector.start()
    s.start()
    try:
        assert execute(Target(str(script), ())).exit_code == 0
    finally:
        hot = s.stop()
        collector.stop()
    rows = hot.table(limit=10_000)
    charged = {r["function"] for r in rows if r["self_ns"] > 0}
    assert "<module>" in charged and "Tensor.backward" in charged
    assert charged <= {"<module>", "Tensor.backward"}, charged
    assert {r["file"] for r in rows if r["self_ns"] > 0} == {str(script)}


def test_a_call_through_a_decorators_inner_function_is_named_by_its_implementation(tmp_path: Path) -> None:
    """``F.max_pool2d`` is ``boolean_dispatch``'s inner ``fn`` around ``_max_pool2d``: its row
    was named ``annotate`` (the few samples inside the ``torch.jit.annotate`` it calls) or
    ``boolean_dispatch.<locals>.fn``, from one run to the next."""
    from torchscope.runner.target import Target, execute

    script = tmp_path / "pool.py"
    script.write_text(
        "import torch\nimport torch.nn.functional as F\nx = torch.randn(8, 16, 64, 64)\n"
        "for _ in range(40):\n    y = F.max_pool2d(x, 2)\n"
    )
    s = Sampler(interval_s=0.0005, script_only=True)
    s.start()
    assert execute(Target(str(script), ())).exit_code == 0
    rows = [r for r in s.stop().table(limit=10_000) if r["self_ns"] > 0 and r["file"] == str(script)]
    pool = [r for r in rows if r["line"] == 5]
    assert [r["function"] for r in pool] == ["max_pool2d"]


def test_a_location_keeps_its_root_when_cutting_would_leave_only_the_root_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A script at ``/tmp/cc/train.py`` was shown as ``tmp/cc/train.py`` (read as relative);
    longer paths keep their last three parts, site-packages its package path."""
    from torchscope.runner.sampler import _short

    monkeypatch.chdir(tmp_path)  # a cwd that holds none of the paths below
    assert _short("/tmp/cc/train.py") == "/tmp/cc/train.py"
    assert _short("/home/me/work/cc/train.py") == "work/cc/train.py"
    assert _short("/venv/lib/python3.12/site-packages/numpy/_core/numeric.py") == "numpy/_core/numeric.py"


def test_a_function_of_one_or_two_samples_has_no_outside_ops_share() -> None:
    """One sample made a function 0 % or 100 % "outside ops" (``makedirs`` 0 % beside
    ``manual_seed`` 100 %, neither of which runs an op): too few to tell, so no share."""
    from torchscope.runner.sampler import HotSpots

    busy, rare = ("train.py", "busy", 3), ("train.py", "rare", 9)
    hs = HotSpots(
        interval_ns=1_000_000,
        native_id=1,
        times_ns=np.arange(1, 7, dtype=np.int64) * 1_000_000,
        stack_ids=np.array([0, 0, 0, 0, 1, 0]),
        stacks=((busy,), (rare,)),
        spans_ns=np.full(6, 1_000_000, dtype=np.int64),
    )
    rows = {r["function"]: r for r in hs.table(np.array([True, False, True, True, False, True]))}
    assert rows["busy"]["samples"] == 5 and rows["busy"]["outside_ops_pct"] == 20.0  # 1 of 5
    assert rows["rare"]["samples"] == 1 and rows["rare"]["outside_ops_pct"] is None


def _code(path: str, name: str) -> CodeType:
    """The code object of a function ``name`` as if defined in ``path``."""
    module = compile(f"def {name}():\n    pass\n", path, "exec")
    return next(c for c in module.co_consts if isinstance(c, CodeType))


def _nested_code(path: str, outer: str, name: str) -> CodeType:
    """The code object of ``outer``'s inner function ``name`` (qualname ``outer.<locals>.name``)."""
    module = compile(f"def {outer}():\n    def {name}():\n        pass\n", path, "exec")
    top = next(c for c in module.co_consts if isinstance(c, CodeType))
    return next(c for c in top.co_consts if isinstance(c, CodeType))


def test_a_sample_in_a_modes_exit_under_the_disable_wrapper_is_the_users_line() -> None:
    """A sample in a dispatch mode's ``__exit__`` under the disable wrapper (portable collector)
    has no call a user would name: no label, and the row was named by the wrapper itself,
    "_disable_dynamo.<locals>.inner" (a CI run of the test below). The user's line keeps it."""
    from torchscope.runner.sampler import _library_calls

    site = "/venv/lib/python3.11/site-packages/torch/"
    user = _code("/home/me/train.py", "train_step")
    inner = _nested_code(site + "_compile.py", "_disable_dynamo", "inner")
    assert inner.co_qualname == "_disable_dynamo.<locals>.inner"
    exit_ = _code(site + "utils/_python_dispatch.py", "__exit__")
    assert _library_calls([(0, (exit_, inner, user), (120, 50, 4))]) == {}
    # a call into torch's Python under the same user line keeps its name
    backward = _code(site + "_tensor.py", "backward")
    assert _library_calls([(1, (backward, user), (566, 5))]) == {1: ("/home/me/train.py", "backward", 5)}


def test_a_call_into_numpy_is_placed_at_the_users_line() -> None:
    """The seed's masking case: time inside ``np.argwhere`` is a row named ``argwhere`` at the
    script's line that called it (a row at NumPy's ``numeric.py:624`` named a file the user
    never opens, and the advice said so too). NumPy's private helpers entered from C have no
    call the user wrote: the user's line keeps them (``hot_frame``)."""
    from torchscope.runner.sampler import _library_calls

    site = "/venv/lib/python3.12/site-packages/numpy/_core/"
    user = _code("/home/me/mask.py", "forward")
    argwhere = _code(site + "numeric.py", "argwhere")
    wrapfunc = _code(site + "fromnumeric.py", "_wrapfunc")
    transpose = _code(site + "fromnumeric.py", "transpose")
    calls = _library_calls(
        [(0, (wrapfunc, transpose, argwhere, user), (57, 640, 650, 19)), (1, (argwhere, user), (651, 19))]
    )
    assert calls == {0: ("/home/me/mask.py", "argwhere", 19), 1: ("/home/me/mask.py", "argwhere", 19)}
    # the same call from another line is another row
    assert _library_calls([(2, (argwhere, user), (651, 23))]) == {2: ("/home/me/mask.py", "argwhere", 23)}
    private_sum = _code(site + "_methods.py", "_sum")
    assert _library_calls([(3, (private_sum, user), (50, 19))]) == {}
    # an import statement runs through importlib's frozen frames: it is "import" at its line
    exec_module = _code("<frozen importlib._bootstrap_external>", "exec_module")
    find_and_load = _code("<frozen importlib._bootstrap>", "_find_and_load")
    assert _library_calls([(4, (exec_module, find_and_load, user), (940, 1360, 2))]) == {
        4: ("/home/me/mask.py", "import", 2)
    }


def test_a_sample_inside_the_disable_wrappers_checks_is_charged_to_the_users_line() -> None:
    """Under the portable collector each op call passes torch's disable wrapper (``_fn`` in
    ``torch/_dynamo/eval_frame.py``), which asks ``torch.compiler.is_exporting()``: a sample
    taken in that check kept ``is_exporting`` as the leaf, a function of the script's in its
    table (one run in hundreds of the test below). The wrapper's module and the predicates it
    calls are plumbing: the sample is the user's line."""
    from torchscope.runner.sampler import _kept_frames

    site = "/venv/lib/python3.11/site-packages/torch/"
    user = _code("/home/me/train.py", "step")
    stack = (
        _code(site + "compiler/__init__.py", "is_exporting"),
        _code(site + "_dynamo/eval_frame.py", "_callback_from_stance"),
        _code(site + "_dynamo/eval_frame.py", "_fn"),
        user,
    )
    assert _kept_frames(stack, (630, 900, 1106, 7)) == [(user, 7)]
    # torch's own Python that is not the wrapper's keeps its name (``Tensor.backward``)
    backward = _code(site + "_tensor.py", "backward")
    assert _kept_frames((backward, user), (566, 9)) == [(backward, 566), (user, 9)]
