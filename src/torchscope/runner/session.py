"""One profiled run of a script: profiler, step detection, hot-spot sampler, run directory.

``profile_target`` starts our profiler (``torchscope.profile``: torch.profiler's API, Kineto or
the portable collector underneath, a ``Trace`` per cycle) and the sampler, runs the target in-process,
and stops both in a ``finally`` so that a script that raises (or calls ``sys.exit``) still
leaves its trace. Steps come from optimizer steps, so ``--wait/--warmup/--active`` schedules
work without code change: every ``optimizer.step()`` of the first optimizer that steps is a
``prof.step()``. With no schedule the whole run is recorded, still cut into ``ProfilerStep#N``
spans when the script steps an optimizer.
"""

from __future__ import annotations

import contextlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torchscope.runner.launch import LaunchRank
from torchscope.runner.sampler import HotSpots, Sampler
from torchscope.runner.target import Target, execute

ACTIVITIES = ("cpu", "cuda", "xpu", "mtia")


@dataclass(frozen=True)
class RunOptions:
    out: Path
    activities: tuple[str, ...] | None = None  # None: cpu plus every available accelerator
    wait: int | None = None
    warmup: int | None = None
    active: int | None = None
    repeat: int = 0
    skip_first: int = 0
    memory: bool = False
    stack: bool = False
    record_shapes: bool = True
    sample_interval_s: float = 0.001  # 0 turns the hot-spot sampler off
    launch: LaunchRank | None = None  # this process's rank when torchrun (or alike) started several

    @property
    def scheduled(self) -> bool:
        return self.active is not None or self.wait is not None or self.warmup is not None


@dataclass
class RunResult:
    target: Target
    exit_code: int
    error: str | None
    wall_s: float
    steps: int  # optimizer steps seen
    trace_paths: list[Path] = field(default_factory=list)
    traces: list[Any] = field(default_factory=list)  # the Trace of each written cycle, in order
    hotspots: HotSpots | None = None
    env: dict[str, Any] = field(default_factory=dict)
    step_marks: list[tuple[int, int]] = field(default_factory=list)  # (step number, wall ns)
    problems: list[str] = field(default_factory=list)  # our own failures; the script's run is unaffected
    setup_s: float | None = None  # wall seconds before the first training iteration (no step)


def _activities(names: tuple[str, ...] | None) -> list[Any]:
    import torch
    from torch.profiler import ProfilerActivity

    if names is None:
        chosen = ["cpu"]
        if torch.cuda.is_available():
            chosen.append("cuda")
        xpu = getattr(torch, "xpu", None)
        if xpu is not None and xpu.is_available():
            chosen.append("xpu")
        names = tuple(chosen)
    return [getattr(ProfilerActivity, n.upper()) for n in names]


def _warm_lazy_imports() -> None:
    """Import what torch imports lazily on a script's first optimizer, before recording.

    Constructing the first ``torch.optim`` optimizer imports ``torch._dynamo`` (and sympy): a
    few seconds (more under the sampler), which the hot spots then charged to ``SGD.__init__``
    (7 s, 82% of a ResNet-18 run), and with ``with_stack`` every Python frame of that import is
    recorded (a 2-step ResNet-18 run grew from 8 MB to 555 MB of trace). The import would happen
    anyway; doing it before the profiler and the sampler start keeps the profile about the
    user's program, in every mode.
    """
    with contextlib.suppress(Exception):  # a torch without dynamo has nothing to warm
        import torch._dynamo  # noqa: F401


def _record_everything(step: int) -> Any:
    from torchscope.capture.schedule import ProfilerAction

    return ProfilerAction.RECORD


SETUP_SPAN = "torchscope#setup"  # the work before the first training iteration
TAIL_SPAN = "torchscope#after_last_step"  # from the last optimizer.step() to the script's end


class _StepHook:
    """Turns optimizer steps into profiler steps; only the first optimizer that steps counts.

    Step N runs from the start of training iteration N to the end of its ``optimizer.step()``.
    The first iteration starts at the first ``nn.Module`` call (its forward pass); everything
    before it (imports, building the model and optimizer, loading data) is the ``setup`` span,
    not a step. Every later iteration starts where the previous ``optimizer.step()`` ended. A
    script that steps without calling a module has no detectable start: its first iteration
    stays in the setup span. The work after the last ``optimizer.step()`` is no step either.
    """

    def __init__(self, prof: Any, marks: list[tuple[int, int]], problems: list[str]) -> None:
        self.prof = prof
        self.marks = marks
        self.problems = problems
        self.owner: int | None = None
        self.count = 0
        self.t0_ns = time.time_ns()
        self.setup_ns: int | None = None  # wall ns from the start to the first iteration
        self._forward_handle: Any = None

    def start(self) -> None:
        """Start ``prof`` with the setup span open instead of ``ProfilerStep#0``."""
        from torch.autograd.profiler import record_function
        from torch.nn.modules.module import register_module_forward_pre_hook

        self.prof.record_steps = False  # start() would open ProfilerStep#0 here
        self.t0_ns = time.time_ns()
        self.prof.start()
        self.prof.record_steps = True
        rec = record_function(SETUP_SPAN)
        rec.__enter__()
        self.prof.step_rec_fn = rec  # closed by the profiler's next step() or stop()
        self._forward_handle = register_module_forward_pre_hook(self._first_forward)

    def _first_forward(self, module: Any, args: Any) -> None:
        self._disarm()
        if self.count:
            return
        from torch.autograd.profiler import record_function

        try:
            self.prof._exit_step()  # the setup span ends here
            rec = record_function(f"ProfilerStep#{self.prof.step_num}")
            rec.__enter__()
            self.prof.step_rec_fn = rec
            wall = time.time_ns()
            self.setup_ns = wall - self.t0_ns
            self.marks.append((int(self.prof.step_num), wall))
        except Exception as exc:  # noqa: BLE001 - never break the user's forward
            self.problems.append(f"first iteration: {type(exc).__name__}: {exc}")

    def _disarm(self) -> None:
        if self._forward_handle is not None:
            self._forward_handle.remove()
            self._forward_handle = None

    def finish(self) -> None:
        self._disarm()
        if self.setup_ns is None and self.count:
            self.setup_ns = self.marks[0][1] - self.t0_ns if self.marks else None

    def __call__(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if self.owner is None:
            self.owner = id(optimizer)
            self._disarm()
        elif id(optimizer) != self.owner:
            return
        self.count += 1
        wall = time.time_ns()
        try:
            self.prof.step()
        except Exception as exc:  # noqa: BLE001 - never break the user's optimizer.step()
            self.problems.append(f"profiler step {self.count}: {type(exc).__name__}: {exc}")
        self.marks.append((int(self.prof.step_num), wall))


def _rename_tail(path: Path, steps: int, problems: list[str]) -> None:
    """In the written trace, the span after the last ``optimizer.step()`` is no step."""
    try:
        data = path.read_bytes()
        old = f'"ProfilerStep#{steps}"'.encode()
        if old in data:
            path.write_bytes(data.replace(old, f'"{TAIL_SPAN}"'.encode()))
    except OSError as exc:
        problems.append(f"{path.name}: {type(exc).__name__}: {exc}")


def drop_tail_step(trace: Any, steps: int) -> Any:
    """``trace`` with ``ProfilerStep#N`` for N >= ``steps`` (the tail after the last step) renamed."""
    import dataclasses

    import polars as pl

    ev = trace.events
    name = pl.col("name").cast(pl.String)
    num = name.str.extract(r"^ProfilerStep#(\d+)$", 1).cast(pl.Int64)
    tail = (pl.col("kind") == "user_annotation") & num.is_not_null() & (num >= steps)
    if ev.height == 0 or not ev.select(tail.any()).item():
        return trace
    renamed = pl.when(tail).then(pl.lit(TAIL_SPAN)).otherwise(name).cast(ev.schema["name"])
    cols = [renamed.alias("name")]
    if "step" in ev.columns:  # events of the tail belong to no step
        cols.append(
            pl.when(pl.col("step") >= steps)
            .then(-1)
            .otherwise(pl.col("step"))
            .cast(ev.schema["step"])
            .alias("step")
        )
    return dataclasses.replace(trace, events=ev.with_columns(cols))


def profile_target(target: Target, options: RunOptions) -> RunResult:
    """Run ``target`` under the profiler; write traces under ``options.out / 'traces'``."""
    from torch.optim.optimizer import register_optimizer_step_post_hook

    from torchscope.capture.profiler import profile
    from torchscope.capture.schedule import schedule as make_schedule
    from torchscope.runner.env import environment

    traces_dir = options.out / "traces"
    traces_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    traces: list[Any] = []  # None where the cycle's Trace could not be built in memory
    problems: list[str] = []

    stopping: list[int] = []  # holds the optimizer step count once the script has ended

    # a rank's files carry its rank: the loader keys a directory of ranks by it
    prefix = f"{options.launch.directory}." if options.launch is not None else ""

    def on_ready(prof: Any) -> None:
        name = prefix + (f"step_{prof.step_num}" if options.scheduled else "run")
        path = traces_dir / f"{name}.pt.trace.json"
        prof.export_chrome_trace(str(path))  # the file first: it survives whatever follows
        written.append(path)
        if stopping:
            _rename_tail(path, stopping[0], problems)
        try:
            trace = prof.trace()
            prof.free_kineto_results()  # kept for export_memory_timeline, which the runner never calls
            traces.append(drop_tail_step(trace, stopping[0]) if stopping else trace)
        except Exception as exc:  # noqa: BLE001 - the file is on disk; the report says why
            problems.append(f"{path.name}: {type(exc).__name__}: {exc}")
            traces.append(None)

    # Always a schedule, so that every optimizer step is a ProfilerStep#N span; without
    # --wait/--warmup/--active it records the whole run as one cycle.
    schedule: Any = _record_everything
    if options.scheduled:
        schedule = make_schedule(
            wait=options.wait or 0,
            warmup=options.warmup or 0,
            active=options.active or 1,
            repeat=options.repeat,
            skip_first=options.skip_first,
        )
    prof = profile(
        activities=_activities(options.activities),
        schedule=schedule,
        on_trace_ready=on_ready,
        record_shapes=options.record_shapes,
        profile_memory=options.memory,
        with_stack=options.stack,
    )
    _warm_lazy_imports()  # in every mode: never charge torch's lazy imports to the script
    marks: list[tuple[int, int]] = []
    hook = _StepHook(prof, marks, problems)
    env = environment()
    sampler = (
        Sampler(interval_s=options.sample_interval_s, script_only=True)
        if options.sample_interval_s > 0
        else None
    )
    handle = register_optimizer_step_post_hook(hook)
    t0 = time.perf_counter()
    hook.start()
    if options.launch is not None:
        # the script initializes torch.distributed after recording starts, so the trace would
        # not say its rank; the launcher's variables do (a cycle that starts after the script's
        # init_process_group gets torch's own, fuller distributedInfo instead)
        launch = options.launch
        prof.add_metadata_json(
            "distributedInfo", json.dumps({"rank": launch.rank, "world_size": launch.world_size})
        )
    if sampler is not None:
        sampler.start()
    try:
        outcome = execute(target)
    finally:
        hotspots = sampler.stop() if sampler is not None else None
        wall_s = time.perf_counter() - t0
        handle.remove()
        hook.finish()
        stopping.append(hook.count)
        try:
            prof.stop()
        except Exception as exc:  # noqa: BLE001 - keep the script's exit code and what was written
            problems.append(f"profiler stop: {type(exc).__name__}: {exc}")
    return RunResult(
        setup_s=None if hook.setup_ns is None else hook.setup_ns / 1e9,
        target=target,
        exit_code=outcome.exit_code,
        error=outcome.error,
        wall_s=wall_s,
        steps=hook.count,
        trace_paths=written,
        traces=traces,
        hotspots=hotspots,
        env=env,
        step_marks=marks,
        problems=problems,
    )
