"""``torchscope run``: profile a whole script or module with no code change (bottleneck's successor).

The script runs in this process as ``python script.py args`` would: its stdout, stderr and exit
code pass through untouched; our summary goes to stderr after it finishes, and the run
directory (``--out``) holds the traces, ``report.html`` (open it offline, attach it to a bug),
``report.json`` and ``run.json``. A script that crashes still leaves all of them.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import json
import os
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

from torchscope.errors import TraceError, UsageError, why_unwritable
from torchscope.runner.bounds import DEFAULT_CAP_MB, DEFAULT_REPEAT


class RunCommand:
    name = "run"
    help = "Profile a Python script or module without changing it; print a summary and write a report."
    epilog = """examples:
  torchscope run train.py --lr 0.1
  torchscope run --out prof/ --memory --stack train.py
  torchscope run --wait 1 --warmup 1 --active 3 train.py     # steps = optimizer.step() calls
  torchscope run --all train.py                               # the whole run, no cap
  torchscope run -m mypkg.train --epochs 1
notes:
  options for torchscope come before the script; everything after it goes to the script.
  the script's exit code is torchscope's exit code.
  bounded by default: steps 0-4 (with the setup), 20-22 and 38-40; every cycle stops at
  --cap-mb of profiler memory. A script's own torch.profiler is redirected to torchscope's."""

    def configure(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "-m", dest="module", action="store_true", help="run a module (the first argument) like python -m"
        )
        parser.add_argument(
            "--out", metavar="DIR", help="the run directory (default: torchscope-out/NAME-TIME)"
        )
        parser.add_argument(
            "--activities", metavar="LIST", help="comma list of cpu,cuda,xpu,mtia (default: cpu + available)"
        )
        for name in ("wait", "warmup", "active"):
            parser.add_argument(f"--{name}", type=int, metavar="N", help=f"schedule: {name} steps per cycle")
        parser.add_argument(
            "--repeat",
            type=int,
            metavar="N",
            help=f"schedule: cycles (default {DEFAULT_REPEAT}; 0 = until the end)",
        )
        parser.add_argument(
            "--skip-first", type=int, default=0, metavar="N", help="schedule: steps to skip first"
        )
        parser.add_argument(
            "--all", dest="record_all", action="store_true", help="record the whole run, no schedule, no cap"
        )
        parser.add_argument(
            "--cap-mb",
            type=float,
            default=DEFAULT_CAP_MB,
            metavar="MB",
            help=f"stop recording when a cycle has added MB to the process (default {DEFAULT_CAP_MB})",
        )
        parser.add_argument(
            "--no-redirect",
            action="store_true",
            help="leave torch.profiler's names to torch (the script's own profiler is then not ours)",
        )
        parser.add_argument("--memory", action="store_true", help="record allocations (profile_memory)")
        parser.add_argument("--stack", action="store_true", help="record Python stacks (with_stack)")
        parser.add_argument("--no-shapes", action="store_true", help="do not record input shapes")
        parser.add_argument(
            "--sample-ms", type=float, default=1.0, help="hot-spot sampling interval in ms (0: off)"
        )
        parser.add_argument(
            "--no-summary", action="store_true", help="write the run directory, print nothing"
        )
        parser.add_argument(
            "--json", action="store_true", help="print the run's facts and file paths as JSON on stderr"
        )
        parser.add_argument(
            "target", nargs=argparse.REMAINDER, metavar="script.py [args...]", help="what to run"
        )

    def run(self, args: argparse.Namespace) -> int:
        from torchscope.runner.launch import launch_rank
        from torchscope.runner.session import ACTIVITIES, RunOptions, profile_target
        from torchscope.runner.target import Target, interrupt_exit_code, stop_signals_interrupt

        if not args.target:
            raise TraceError(
                "run", "name a script (torchscope run train.py) or a module (torchscope run -m pkg.mod)"
            )
        name, script_args = args.target[0], tuple(args.target[1:])
        if not args.module and not Path(name).is_file():
            raise TraceError(name, "no such script")
        activities = None
        if args.activities:
            activities = tuple(a.strip().lower() for a in args.activities.split(",") if a.strip())
            bad = [a for a in activities if a not in ACTIVITIES]
            if bad:
                raise TraceError(
                    "--activities", f"unknown {', '.join(bad)}; choose from {', '.join(ACTIVITIES)}"
                )
        launch = launch_rank()
        # under torchrun every rank must name the same job directory: the launcher's run id
        # is the same in all of them, a time stamp may not be
        stamp = (launch.run_id[:8] if launch and launch.run_id else None) or _dt.datetime.now().strftime(
            "%Y%m%d-%H%M%S"
        )
        # a module's whole dotted name (pkg.train and pkg.eval were both "pkg"), a script's stem
        label = name if args.module else (Path(name).stem or name)
        job = Path(args.out) if args.out else Path("torchscope-out") / f"{label}-{stamp}"
        # absolute before the script runs: one that changes directory had the run's files written
        # under its new directory, and run.json left "running" in the one the user named
        job = Path(os.path.abspath(job))
        out = job / launch.directory if launch is not None else job
        if args.record_all and (args.wait is not None or args.warmup is not None or args.active is not None):
            raise TraceError("--all", "records the whole run; leave out --wait/--warmup/--active")
        _check_options(args)
        _check_writable(out)  # before the script runs: a bad --out is ours, not the script's
        _set_aside_earlier_run(out)
        _record_start(out, _command(args))
        options = RunOptions(
            out=out,
            activities=activities,
            wait=args.wait,
            warmup=args.warmup,
            active=args.active,
            repeat=args.repeat,
            skip_first=args.skip_first,
            memory=args.memory,
            stack=args.stack,
            record_shapes=not args.no_shapes,
            sample_interval_s=max(args.sample_ms, 0.0) / 1000.0,
            launch=launch,
            record_all=args.record_all,
            cap_mb=args.cap_mb,
            redirect=not args.no_redirect,
        )
        if args.record_all and not args.json:
            # no cap holds the recording then: say what it costs before the script runs (a
            # 17 s run with --memory --stack passed 9 GB while its one cycle was saved)
            print(
                "torchscope run: --all records the whole run as one cycle with no memory cap;"
                " Kineto holds and saves several KB of memory an event (a tight loop of small ops:"
                " 2-3 GB for each second it runs): stop early with Ctrl-C, or leave out --all to"
                " keep a cap",
                file=sys.stderr,
            )
        target = Target(name, script_args, is_module=args.module)
        try:
            with stop_signals_interrupt(), _crash_stacks(out):
                result = profile_target(target, options)
                self._report(result, options, args)
        except KeyboardInterrupt as exc:  # a second Ctrl-C or stop signal while saving, or one before the script ran
            from torchscope.runner.session import RUN_PHASE

            written = sorted(p.name for p in (out / "traces").glob("*.pt.trace.json*"))
            kept = f"{len(written)} trace file(s) in {out / 'traces'}" if written else "no trace file"
            when = {
                "saving after Ctrl-C": "interrupted again: stopped saving",
                "saving": "interrupted: stopped saving",
            }.get(RUN_PHASE[0], "interrupted while starting")
            print(f"torchscope run: {when}; {kept}, no report", file=sys.stderr)
            code = interrupt_exit_code(exc)
            traces = [str(out / "traces" / name) for name in written]
            _write_record(out, {"exit_code": code, "state": "ended", "error": when, "wall_s": None, "traces": traces})
            return code
        return result.exit_code

    def _report(self, result: object, options: object, args: argparse.Namespace) -> None:
        """Write report.html/report.json/run.json; our failures never change the script's exit code
        and are one line each on stderr."""
        from torchscope.runner.results import build_run_payload, write_run_dir
        from torchscope.runner.session import RunOptions, RunResult

        assert isinstance(result, RunResult) and isinstance(options, RunOptions)
        command = _command(args)
        files: dict[str, str] = {}
        payload = None
        for problem in result.problems:  # the cycles' writes came first: so do their errors
            if problem.startswith("could not write"):
                _our_error(problem)
        try:
            payload = build_run_payload(result, options, command)
            files = {k: str(v) for k, v in write_run_dir(payload, options.out).items()}
        except OSError as exc:  # a WriteError names the file (report.html or report.json)
            _our_error(f"could not write {exc.filename or f'the report in {options.out}'}: {exc.strerror or exc}")
        except Exception as exc:  # noqa: BLE001 - the trace is on disk; report what failed
            _our_error(f"could not build the report: {type(exc).__name__}: {exc}")
        facts = {
            "exit_code": result.exit_code,
            "state": "ended",
            "error": result.error,
            "wall_s": round(result.wall_s, 3),
            "optimizer_steps": result.steps,
            "setup_s": None if result.setup_s is None else round(result.setup_s, 3),
            "out": str(options.out),
            "traces": [str(p) for p in result.trace_paths],
            "notes": list(result.notes),
            **files,
        }
        if result.unwritten_paths:  # the cycles a full disk lost: no file says they were recorded
            facts["traces_not_written"] = [str(p) for p in result.unwritten_paths]
        from torchscope.runner.target import SIGNALS_WHILE_SAVING

        if SIGNALS_WHILE_SAVING:  # saved through it: the script's exit code and error stand
            facts["signals_while_saving"] = list(SIGNALS_WHILE_SAVING)
        _write_record(options.out, facts, say_failure=True)
        launch = options.launch
        if args.json:
            print(json.dumps(facts), file=sys.stderr)
        elif not args.no_summary and (launch is None or launch.rank == 0):  # one summary per job
            _print_summary(payload, result, options, files)


def _command(args: argparse.Namespace) -> list[str]:
    """The command line as run.json and the report give it: as typed, our options included
    (``--out``, the schedule), when ``main`` passed it on; else rebuilt from the target."""
    given = getattr(args, "_argv", None)
    if given is not None:
        return ["torchscope", *given]
    return ["torchscope", "run", *(["-m"] if args.module else []), *args.target]


# what a run writes in its directory (the script's own files beside them are left alone)
RUN_OUTPUTS = ("traces", "run.json", "report.json", "report.html")


def _set_aside_earlier_run(out: Path) -> None:
    """An ``--out`` that holds an earlier run's files: they are moved into a hidden
    ``.earlier-TIME/`` folder there, and a line says so. Left beside the new ones, the earlier
    run's cycles were read with them (``torchscope report DIR`` saw two runs, its advice from
    the stale one) while report.json listed only the new."""
    # an earlier run is one that left its record or its cycles (a user's own report.html is none)
    ran = (out / "run.json").is_file() or any((out / "traces").glob("*.pt.trace.json*"))
    earlier = [out / name for name in RUN_OUTPUTS if (out / name).exists()]
    if not ran or not earlier:
        return
    aside = out / f".earlier-{_dt.datetime.now().strftime('%Y%m%d-%H%M%S-%f')}"
    moved: list[Path] = []
    try:
        aside.mkdir()
        for path in earlier:
            path.rename(aside / path.name)
            moved.append(path)
    except OSError as exc:
        for path in moved:  # all or nothing: the earlier run stays whole where it was
            (aside / path.name).rename(path)
        with contextlib.suppress(OSError):
            aside.rmdir()
        print(
            f"torchscope run: warning: {out} holds an earlier run whose files could not be set aside "
            f"({exc.strerror or exc}); a report of {out} will read them with this run's",
            file=sys.stderr,
        )
        return
    print(f"torchscope run: {out} held an earlier run: its files are now in {aside}", file=sys.stderr)


def _record_start(out: Path, command: list[str]) -> None:
    """run.json saying the run has begun and which process runs it, replaced when it ends: a
    run killed by SIGKILL (the out-of-memory killer, ``kill -9``) or with its machine ends
    without a word, and its directory showed finished-looking traces and no run.json. A report
    of the directory now says the run never recorded its end (``job.discover``). Not written
    when it cannot be: the run's own record at the end says why."""
    import socket

    facts: dict[str, object] = {
        "exit_code": None,
        "state": "running",
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "started": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "wall_s": None,  # within the head ``job.discover`` tells our files by
        "command": command,
    }
    _write_record(out, facts)
    _reserve_room(out)


# A hidden file beside run.json, written when the run starts and removed just before the run's
# final record: a disk the traces filled had no room left for that record (its temporary needs
# room while the old run.json still holds its own), and run.json stayed "running", which a
# report reads as a run killed by SIGKILL although the script exited 0. 64 KiB holds the record
# of hundreds of cycles; random bytes, since a compressing file system stores zeros in nothing.
RECORD_ROOM = ".run.json-room"
ROOM_BYTES = 64 * 1024


def _reserve_room(out: Path) -> None:
    """Keep ``ROOM_BYTES`` of the disk for the run's final record (``RECORD_ROOM``); nothing
    when the disk has not even that (the final record then says what it can)."""
    room = out / RECORD_ROOM
    try:
        room.write_bytes(os.urandom(ROOM_BYTES))
    except OSError:
        with contextlib.suppress(OSError):
            room.unlink()


@contextlib.contextmanager
def _crash_stacks(out: Path) -> Iterator[None]:
    """Python's faulthandler writes every thread's stack to ``OUT/crash.txt`` if the process
    crashes (a segfault in native code): such a run leaves no record of its end, and a report of
    its directory said it was killed by SIGKILL. Left as it is when the user turned it on (their
    choice of file wins); the file is removed when nothing crashed."""
    import faulthandler

    from torchscope.job.discover import CRASH_FILE

    if faulthandler.is_enabled():
        yield
        return
    path = out / CRASH_FILE
    try:
        sink = open(path, "w", encoding="utf-8")  # noqa: SIM115 - held open for the run
    except OSError:
        yield
        return
    faulthandler.enable(file=sink, all_threads=True)
    try:
        yield
    finally:
        faulthandler.disable()
        sink.close()
        with contextlib.suppress(OSError):
            if path.stat().st_size == 0:
                path.unlink()


def _write_record(out: Path, facts: Mapping[str, object], *, say_failure: bool = False) -> None:
    """run.json holding ``facts``, whole or not at all. A failure is one line on stderr when
    ``say_failure`` (the run's final record); the record at the start and the one after a
    second Ctrl-C are left unsaid (the final one, or the interruption's line, speaks)."""
    from torchscope.writes import write_atomically

    if facts.get("state") == "ended":  # the last record: the room kept for it is its own now
        with contextlib.suppress(OSError):
            (out / RECORD_ROOM).unlink()
    text = json.dumps(facts, indent=1)
    try:
        write_atomically(out / "run.json", lambda tmp: tmp.write_text(text, encoding="utf-8"))
    except OSError as exc:
        if say_failure:
            _our_error(f"could not write {out / 'run.json'}: {exc.strerror or exc}")


def _our_error(message: str) -> None:
    print(f"torchscope run: error: {message}", file=sys.stderr)


def _check_options(args: argparse.Namespace) -> None:
    """Every number the run takes is valid, or a one-line error (exit 2) before the script runs:
    ``--wait -1`` used to end in an AssertionError traceback, ``--active 0`` was taken silently."""
    minimum = {"wait": 0, "warmup": 0, "active": 1, "repeat": 0, "skip_first": 0}
    for name, least in minimum.items():
        value = getattr(args, name)
        if value is not None and value < least:
            flag = "--" + name.replace("_", "-")
            need = "1 or more" if least else "0 or more"
            raise UsageError(
                f"{flag} must be {need} steps, not {value}"
                if name != "repeat"
                else f"{flag} must be 0 (until the end) or more cycles, not {value}"
            )
    if not args.cap_mb > 0:  # also NaN
        raise UsageError(f"--cap-mb must be more than 0 MB, not {args.cap_mb:g}")
    if not args.sample_ms >= 0:
        raise UsageError(f"--sample-ms must be 0 (off) or more, not {args.sample_ms:g}")
    if args.record_all and (args.repeat is not None or args.skip_first):
        raise UsageError("--all records the whole run; leave out --repeat/--skip-first")
    shaped = args.wait is not None or args.warmup is not None or args.active is not None
    if not args.record_all and not shaped and (args.repeat is not None or args.skip_first):
        # taken silently before: `--repeat 0` alone still recorded the default 3 cycles
        raise UsageError(
            "--repeat and --skip-first shape a schedule: give --wait/--warmup/--active with them "
            "(e.g. --wait 14 --warmup 1 --active 3 --repeat 0), or use --all to record everything"
        )


def _check_writable(out: Path) -> None:
    """The run directory can be made and written, or a one-line error (exit 2) before the script."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / f".torchscope-probe-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise TraceError(str(out), f"cannot write the run directory here: {why_unwritable(out / 'probe', exc)}") from None


def _print_summary(payload: dict | None, result: object, options: object, files: dict[str, str]) -> None:
    """The report of one cycle in full (the latest), then one line per cycle, then the run's line."""
    from torchscope.render.console import print_summary, terminal
    from torchscope.render.payload import full_report
    from torchscope.render.units import fmt_us
    from torchscope.runner.session import RunOptions, RunResult

    assert isinstance(result, RunResult) and isinstance(options, RunOptions)
    console = terminal(sys.stderr)
    runs = (payload or {}).get("runs") or []
    report = (full_report(payload) if payload is not None else None) or {}
    cycles: dict[str, dict] = report.get("ranks") or {} if report.get("kind") == "traceset" else {}
    names = list(cycles)
    # the latest cycle with a step in full: a run that ended in the middle of its schedule's
    # cycle (``--repeat 0``) left a last one of a few events and no step, which was shown as
    # "the whole run as one step, average 170.5 µs per step" above seven real cycles
    stepped = [bool((cycles[n].get("meta") or {}).get("steps_from_trace")) for n in names]
    shown = next((i for i in reversed(range(len(names))) if stepped[i]), len(names) - 1)
    if payload is not None and len(cycles) > 1:
        # the report of a run with several cycles is a set of them: one in full here
        run = runs[shown] if shown < len(runs) else {}
        one = {"report": cycles[names[shown]], "runs": [{**run, "name": names[shown]}], "hotspots_cycles": len(cycles)}
        print_summary({**payload, **one}, console)
    elif payload is not None:
        print_summary(payload, console)
    if len(cycles) > 1:
        which = "the last" if shown == len(names) - 1 else f"{names[shown]}, the last with a step,"
        # the page is named only when it was written: on a full disk it was not, and the line
        # sent the user to a report.html that was not there
        where = ", each in report.html" if "html" in files else ""
        console.print(f"[bold]cycles[/bold] ({len(cycles)}; {which} is shown above{where})")
        for (name, cycle), has_steps in zip(cycles.items(), stepped, strict=True):
            total = (cycle.get("breakdown_us") or {}).get("Total") or (
                cycle.get("host_breakdown_us") or {}
            ).get("Total")
            top = (cycle.get("operators") or [{}])[0].get("name", "–")
            n = len(cycle.get("steps") or [])
            time_text = f"{n} step{'s' if n != 1 else ''}, {fmt_us(total)} per step" if has_steps else f"no step, {fmt_us(total)}"
            if (cycle.get("meta") or {}).get("only_cut_step"):  # by the script's error or the cap
                time_text = f"one step, cut short, {fmt_us(total)}"
            # each cycle's findings by rule: the summary above is the latest cycle's alone, and a
            # finding of an earlier one never reached the terminal (a new user's find)
            rules = list(dict.fromkeys(f.get("rule") for f in cycle.get("recommendations") or []))
            found = f"; findings: {', '.join(map(str, rules))}" if rules else ""
            console.print(
                f"  {name}: {time_text}, {(cycle.get('meta') or {}).get('events', 0):,} events, top op {top}{found}"
            )
    for note in result.notes:
        console.print(f"[bold]torchscope run[/bold]: {note}")
    console.print(
        f"[bold]torchscope run[/bold]: {result.target.display} exited {result.exit_code} after "
        f"{result.wall_s:.2f} s, {result.steps} optimizer steps"
        + (f" after {result.setup_s:.2f} s of setup" if result.setup_s is not None else "")
        + f" · run directory {options.out}"
        + (f" · report {files['html']}" if "html" in files else "")
    )
    launch = options.launch
    if launch is not None:
        console.print(
            f"[bold]torchscope run[/bold]: this is rank 0 of {launch.world_size}; each rank writes "
            f"{options.out.parent}/rank-N. All ranks together, once they finish: "
            f"torchscope report {options.out.parent}"
        )


COMMAND = RunCommand()
