"""The keys of ``torchscope report --json`` and ``torchscope diff --json``, defined once.

Scripts that check for regressions read these keys, the CLI and the dashboard render them, and
docs/analyses.md documents them: every producer and consumer imports the names from here, so
a key cannot drift between them. Times are microseconds (keys end in ``_us``), memory bytes;
every report carries its units explicitly under ``units`` (``analysis.report_model.UNITS``).
Bump ``REPORT_VERSION`` when a key changes meaning; adding keys does not bump it.
"""

from __future__ import annotations

REPORT_VERSION = 5  # 2: typed report, units map, exact µs, hex addresses; 3: chain kernels_by_op;
# 4: operators_by_shape per kept op with an "(other shapes)" row; 5: a steps row may stand for a
# run of consecutive steps (above MAX_STEP_ROWS)

# -- report: one trace ----------------------------------------------------------------------
VERSION = "report_version"
KIND = "kind"  # "trace" or "traceset"
SOURCE = "source"
META = "meta"  # rank, world_size, backend, torch_version, devices, warnings, events, start_us, span_us, ...
STEPS = "steps"  # list of {step, last_step, steps, start_us, end_us, dur_us, breakdown_us, host_breakdown_us, comm_overlap_us}
BREAKDOWN_US = "breakdown_us"  # step average per TensorBoard category + "Total"
HOST_BREAKDOWN_US = "host_breakdown_us"  # step average per host category + "Total"
DEVICES = "devices"  # list of {device, kernel_us, utilization, sm_efficiency, achieved_occupancy, tensor_core_ratio}
COMM_OVERLAP = "comm_overlap"  # step average {computation_us, communication_us, overlap_us, other_us}
OPERATORS = "operators"  # top ops by device then host total time
OPERATORS_BY_SHAPE = "operators_by_shape"
CALL_STACKS = "call_stacks"
FLOPS = "flops"
KERNELS = "kernels"
KERNEL_LAUNCHERS = "kernel_launchers"  # per kept kernel: {name, op_name, count, total_us, ops}, adds up to it
KERNELS_BY_OP = "kernels_by_op"
KERNEL_TYPES = "kernel_types"  # HTA kernel type breakdown: {kernel_type, us, pct}
TEMPORAL_BREAKDOWN = "temporal_breakdown"  # HTA: {idle_us, compute_us, non_compute_us, span_us, *_pct}
COMM_COMP_OVERLAP = (
    "comm_comp_overlap"  # HTA: share of communication overlapped by computation (0..1 or null)
)
LAUNCH_STATS = "launch_stats"
IDLE_TIME = "idle_time"
QUEUE_LENGTH = "queue_length"
MEMORY = "memory"  # {peaks, by_op, leaks}
MEMORY_PEAKS = "peaks"
MEMORY_BY_OP = "by_op"
MEMORY_LEAKS = "leaks"
MODULES = "modules"
MODULE_OPS = "module_ops"  # {path, name, calls, host_us, device_us}: the ops each module calls itself
DISTRIBUTED = "distributed"  # traceset only: {ranks, collectives, slowest_rank, wait_for_slowest}
RANKS = "ranks"  # traceset only: {name: report of that rank}
RECOMMENDATIONS = "recommendations"  # list of {rule, message, evidence, fix} (+ rank in a traceset)
WARNINGS = "warnings"  # traceset: files not read; report --json: + what a view could not build
UNITS = "units"  # {field name: unit}: us, timestamp_us, bytes, percent, fraction, count, id, flop, ...

REPORT_KEYS: tuple[str, ...] = (
    VERSION,
    KIND,
    SOURCE,
    META,
    STEPS,
    BREAKDOWN_US,
    HOST_BREAKDOWN_US,
    DEVICES,
    COMM_OVERLAP,
    OPERATORS,
    OPERATORS_BY_SHAPE,
    CALL_STACKS,
    FLOPS,
    KERNELS,
    KERNEL_LAUNCHERS,
    KERNELS_BY_OP,
    KERNEL_TYPES,
    TEMPORAL_BREAKDOWN,
    COMM_COMP_OVERLAP,
    LAUNCH_STATS,
    IDLE_TIME,
    QUEUE_LENGTH,
    MEMORY,
    MODULES,
    MODULE_OPS,
    RECOMMENDATIONS,
    UNITS,
)
TRACESET_KEYS: tuple[str, ...] = (
    VERSION,
    KIND,
    SOURCE,
    STEPS,
    BREAKDOWN_US,
    HOST_BREAKDOWN_US,
    DISTRIBUTED,
    RANKS,
    RECOMMENDATIONS,
    WARNINGS,
    UNITS,
)

# -- diff -----------------------------------------------------------------------------------
DIFF_A = "a"
DIFF_B = "b"
DIFF_STEP = "step_us"  # {a, b, delta, ratio}
DIFF_BREAKDOWN = "breakdown_us"  # {category: {a, b, delta}}
DIFF_CHANGES = "changes"  # ops and kernels, sorted by |delta|: {what, name, status, a_us, b_us, delta_us, a_calls, b_calls}
DIFF_OPERATORS = "operators"
DIFF_KERNELS = "kernels"
DIFF_KEYS: tuple[str, ...] = (
    VERSION,
    DIFF_A,
    DIFF_B,
    DIFF_STEP,
    DIFF_BREAKDOWN,
    DIFF_CHANGES,
    DIFF_OPERATORS,
    DIFF_KERNELS,
)

# -- job: a directory read as runs -> ranks -> cycles (job/reduce.py; docs/jobs.md) ---------
# ``report DIR --json`` of a job is {report_version, kind: "job", source, runs: [...], warnings};
# each run carries the keys below. Times are integer or float nanoseconds (keys end in ``_ns``).
JOB_RUNS = "runs"
JOB_RUN = "run"  # the run's name (its folder)
JOB_RANKS = "ranks"  # how many ranks were read
JOB_RANKS_UNREAD = "ranks_unread"  # the ranks none of whose files could be read (warnings say why)
JOB_WORLD_SIZE = "world_size"
JOB_BACKEND = "backend"
JOB_CYCLES = "cycles"  # most cycles any rank has
JOB_STEP_NS = "step_ns"  # {min, median, max, min_rank, max_rank} over the ranks' median steps
JOB_STEPS_NS = "steps_ns"  # {count, min, median, max, max_rank, max_cycle} over every step of the run
JOB_CATEGORIES = (
    "categories"  # the breakdown's categories: the device ones, or the host ones on CPU-only runs
)
JOB_MEDIAN_RANK = "median_rank"
JOB_OUTLIERS = "outliers"  # [{rank, step_ns, vs_median_pct, by_category_ns}]
JOB_MEDIAN_BREAKDOWN_NS = "median_breakdown_ns"
JOB_COLLECTIVES = "collectives"  # collectives aligned across ranks: arrival skew and wait
JOB_RANK_WAITS = "rank_waits"  # per rank: how often it arrived last and the wait it caused
JOB_STRAGGLER = "straggler"  # {rank, ...} or null
JOB_CYCLE_TABLE = "cycle_table"  # one row per cycle
JOB_ONLY_EXITS = "only_exits"
JOB_PER_RANK = "per_rank"  # per-rank detail (--json only in the terminal's sense)
JOB_UNITS = "units"  # {evidence key: unit} of the run's recommendations
JOB_SKIPPED = "skipped"
JOB_NOTES = "notes"  # what limits the run's analyses (collectives that could not be matched)
JOB_RUN_KEYS: tuple[str, ...] = (
    JOB_RUN,
    JOB_RANKS,
    JOB_RANKS_UNREAD,
    JOB_WORLD_SIZE,
    JOB_BACKEND,
    JOB_CYCLES,
    JOB_STEP_NS,
    JOB_STEPS_NS,
    JOB_CATEGORIES,
    JOB_MEDIAN_RANK,
    JOB_OUTLIERS,
    JOB_MEDIAN_BREAKDOWN_NS,
    JOB_COLLECTIVES,
    JOB_RANK_WAITS,
    JOB_STRAGGLER,
    JOB_CYCLE_TABLE,
    JOB_ONLY_EXITS,
    RECOMMENDATIONS,
    JOB_UNITS,
    JOB_PER_RANK,
    JOB_SKIPPED,
    JOB_NOTES,
)
