"""The job pipeline: discover -> map (an engine runs ``summarize_rank`` per rank) -> reduce."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from torchscope.analysis import keys as K
from torchscope.errors import TraceError
from torchscope.job.discover import Discovery, discover, mixed_world_sizes, ranks_named_otherwise
from torchscope.job.engine import run_tasks, within_cores
from torchscope.job.reduce import reduce_run
from torchscope.trace.progress import LoadProgress


def analyse_job(
    root: str | Path,
    *,
    engine: str = "local",
    progress: bool | None = None,
    view_dir: str | Path | None = None,
    found: Discovery | None = None,
) -> dict[str, Any]:
    """The job report of a directory: ``{"kind": "job", "runs": [...], "warnings": [...]}``.

    ``view_dir``: also write each rank's full dashboard there (one HTML file per rank and cycle).
    """
    try:
        engine, engine_note = within_cores(engine)
    except ValueError as exc:
        raise TraceError(f"--engine {engine}", str(exc)) from None
    found = found or discover(root)
    tasks = [
        {
            "run": rf.run,
            "rank": rf.rank,
            "files": [str(f) for f in rf.files],
            "world_size": rf.world_size,
            "backend": rf.backend,
            "view_dir": str(view_dir) if view_dir else None,
            "root": str(root),
        }
        for rf in found.rank_files
    ]
    if not tasks:
        raise TraceError(str(root), "no readable trace files (*.json, *.json.gz) in this directory")
    with LoadProgress(Path(root).name or str(root), total=len(tasks), enabled=progress) as bar:
        results = run_tasks(tasks, engine, on_done=lambda t: bar.advance(f"{t['run']} rank {t['rank']}"))
    by_run: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in results:
        by_run[r["run"]].append(r)
    if not any(c for r in results for c in r["cycles"]):
        first = next((s for r in results for s in r["skipped"]), "no readable trace")
        raise TraceError(str(root), first)
    every = [reduce_run(run.name, by_run[run.name]) for run in found.runs]
    # a run none of whose traces could be read is no run: its files are named in the warnings
    runs = [run for run in every if any(r["cycles"] for r in by_run[run["run"]])]
    # what a reader kept of a damaged file (a cut trace) is said first, as for a single trace:
    # those numbers are in the job's, where a skipped file's are not (the terminal shows the
    # first few warnings; a new user's cut ranks were hidden behind three skipped ones)
    warnings = [
        f"{_shown(c['file'], Path(root))}: {w}"
        for run in by_run.values()
        for r in run
        for c in r["cycles"]
        for w in c.get("warnings", [])
    ]
    warnings += [
        *found.skipped,
        *mixed_world_sizes(found),
        *ranks_named_otherwise(found),
        *_uneven_cycles(found),
        *(s for run in every for s in run["skipped"]),
        *(n for run in runs for n in run["notes"]),
        *([engine_note] if engine_note else []),
    ]
    skipped = [s for s in (*found.skipped, *(s for run in every for s in run["skipped"])) if s.startswith("skipped ")]
    return {
        K.VERSION: K.REPORT_VERSION,
        K.KIND: "job",
        K.SOURCE: str(root),
        "runs": runs,
        "files_skipped": len(skipped),  # named, each with why, in the warnings
        "warnings": warnings,
    }


def _uneven_cycles(found: Discovery) -> list[str]:
    """Ranks of one run that wrote different numbers of cycles: cycles are paired across ranks by
    their order, so the k-th of one rank may be another step than the k-th of another."""
    out = []
    for run in found.runs:
        counts = {rf.rank: rf.cycles for rf in run.ranks}
        if len(set(counts.values())) > 1:
            said = ", ".join(f"rank {r}: {n}" for r, n in list(counts.items())[:6])
            out.append(
                f"{run.name}: its ranks wrote different numbers of cycles ({said}{', ...' if len(counts) > 6 else ''});"
                " cycles are paired by their order, so a cycle's ranks may come from different steps"
            )
    return out


def _shown(file: str, root: Path) -> str:
    """A cycle's file as the warnings name it: relative to the job's directory."""
    f = Path(file)
    return str(f.relative_to(root)) if f.is_relative_to(root) else file
