"""How each Kineto dialect's categories map to our normalized kinds.

Kineto renamed its categories over the years (2021 traces say ``Operator``/``Runtime``/
``Kernel``; ROCm writes HIP calls under ``cuda_runtime``; MTIA has ``mtia_runtime`` and
``mtia_ccp_events``). Keeping the whole mapping in one table means a new dialect is one line
here, not a branch in the reader.
"""

from __future__ import annotations

# raw category (lower-cased) -> normalized kind (see trace.schema.KINDS)
CATEGORY_KIND: dict[str, str] = {
    # host operators
    "cpu_op": "cpu_op",
    "operator": "cpu_op",  # 2021
    "user_annotation": "user_annotation",
    "python_function": "python_function",
    "python": "python_function",
    # runtime / driver calls on the host
    "cuda_runtime": "runtime",  # also hip* on ROCm
    "cuda_driver": "runtime",
    "runtime": "runtime",  # 2021
    "hip_runtime": "runtime",
    "xpu_runtime": "runtime",
    "xpu_driver": "runtime",
    "mtia_runtime": "runtime",
    "privateuse1_runtime": "runtime",
    "privateuse1_driver": "runtime",
    "cuda_sync": "sync",
    "overhead": "other",
    # device work
    "kernel": "kernel",
    "gpu_memcpy": "memcpy",
    "memcpy": "memcpy",  # 2021
    "gpu_memset": "memset",
    "memset": "memset",  # 2021
    "gpu_user_annotation": "device_annotation",
    "mtia_ccp_events": "kernel",
    "concurrent_kernel": "kernel",
    # profiler's own spans
    "trace": "span",
    # CUPTI range profiler: one span per profiled kernel (replayed alone), its performance
    # counters in ``args``. Not device time (the replay's timestamps are not the run's), so they
    # stay "other", whose args the reader keeps verbatim; ``PROFILER_RANGE_CATEGORIES`` names them.
    "cuda_profiler_range": "other",
}

# categories of CUPTI range-profiler events (``analysis.kernels.profiler_ranges`` reads them)
PROFILER_RANGE_CATEGORIES: frozenset[str] = frozenset({"cuda_profiler_range"})
# the name Kineto writes for a range whose kernel name CUPTI did not give
PROFILER_RANGE_UNNAMED = "__missing__"

# categories whose events ran on a device track (pid = device index, tid = stream)
DEVICE_CATEGORIES: frozenset[str] = frozenset(
    {"kernel", "gpu_memcpy", "memcpy", "gpu_memset", "memset", "gpu_user_annotation", "mtia_ccp_events"}
)

# host-side collective markers: record_param_comms, nccl:*, gloo:* annotations keep their
# own kind (user_annotation / cpu_op); only record_param_comms is a collective marker.
COLLECTIVE_NAMES: frozenset[str] = frozenset({"record_param_comms"})

FLOW_CATEGORIES: frozenset[str] = frozenset({"ac2g", "fwdbwd", "async_cpu_to_gpu", "async", "ac2d"})

MEMORY_EVENT_NAME = "[memory]"

# top-level key our profiler writes into each scheduled cycle: how it ended, "schedule",
# "stop" (the end of the ``with`` block, mid-cycle: its last step is then the exit, from the
# last ``step()`` to ``stop()``) or "error" (the block raised: its last step is the one the
# error cut), and from ``torchscope run`` "cap" (its memory cap stopped the cycle in a step).
# None of those last steps is one of the run's (docs/jobs.md).
CYCLE_ENDED_BY_KEY = "torchscope_cycle_ended_by"
CYCLE_CUT = ("stop", "error", "cap")  # the values that make the cycle's last step no step of the run
# what cut a cycle's last step, for the notes that say it was left out (the exit is no cut)
CUT_BY = {"error": "the script's error", "cap": "the memory cap"}

# top-level key ``torchscope run`` writes into each of its cycles ("1"): a cycle in the middle
# of a run has neither its setup span nor its tail, and its advice points at the run's sampler
RUN_KEY = "torchscope_run"
# top-level key ``torchscope run`` writes into each cycle when its own threads run beside the
# script (the stack sampler, the memory-cap watcher): {"pid": P, "tids": [...]}. With
# ``with_stack`` torch's Python tracer records every thread that exists when a cycle starts, so
# from the second cycle on their lock waits topped the table and tripled its "Self CPU time
# total"; the reader leaves those threads out of the Trace (the file keeps them as written).
TOOL_THREADS_KEY = "torchscope_tool_threads"
# the frames a tool thread can be in while it waits (``runner.tool_thread``), as Kineto names
# Python frames ("path(line): function"): a thread that made no call during a cycle has only
# those, written with tid 0 (torch never learned its id), where they are left out too
TOOL_FRAME_PATTERN = r"(^|/)torchscope/runner/(tool_thread|bounds|sampler)\.py\(\d+\): "

# the ``traceName`` of a trace our portable collector wrote (``capture.portable_doc``): its op
# times include the collector's own per-op cost, so a diff against a Kineto trace says so
PORTABLE_TRACE_NAME = "torchscope portable collector"
