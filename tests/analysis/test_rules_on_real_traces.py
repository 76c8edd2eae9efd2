"""Advisor rules on the real CUDA traces: who fires, with the evidence a user would check."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import polars as pl
import pytest

from torchscope.analysis.advisor import RULES, advise
from torchscope.analysis.advisor.rules import RULE_IDS
from torchscope.trace.model import Trace


def _found(trace: Trace, min_share: float = 0.0) -> dict[str, dict[str, object]]:
    """Every finding's evidence (no floor: the rules' own conditions are what is checked)."""
    return {f.rule: f.evidence for f in advise(trace, min_share=min_share)}


def test_rule_ids_are_stable_and_unique() -> None:
    assert len(set(RULE_IDS)) == len(RULES) == 22
    assert RULE_IDS[:6] == (
        "dataloader_bottleneck",
        "enable_amp",
        "memory_near_capacity",
        "use_ddp",
        "communication_heavy",
        "low_device_utilization",
    )


def test_a100_fp32_gemms_without_tf32(load_trace: Callable[[str], Trace]) -> None:
    ev = _found(load_trace("cuda/alexnet_benchmark.json.gz"))
    assert ev["tf32_matmul"]["kernels"] == 6
    assert ev["tf32_matmul"]["example"] == "ampere_sgemm_32x32_sliced1x4_tn"


def test_findings_under_one_percent_of_the_window_are_not_shown(load_trace: Callable[[str], Trace]) -> None:
    """alexnet_benchmark's 43 s window is 97% CUDA start-up: its six fp32 GEMMs (0.006% of it),
    16 copies from pageable memory (0.13%) and 3 synchronizations (0.0001%) are findings a user
    need not read first, or at all."""
    t = load_trace("cuda/alexnet_benchmark.json.gz")
    every = {f.rule: f for f in advise(t, min_share=0)}
    assert every["tf32_matmul"].share == pytest.approx(6.04e-5, rel=1e-2)
    assert every["host_device_sync"].share == pytest.approx(9.21e-7, rel=1e-2)
    # its 16 cudaStreamSynchronize end 16 copies from pageable memory: the copies' finding,
    # with the copies' fix (pinned memory), not a second count of waits; of its 5 device
    # synchronizations, 2 come after the last op and close the window
    assert every["host_device_sync"].evidence["by_name"] == {"cudaDeviceSynchronize": 3}
    pageable = every["pageable_memcpy"].evidence
    assert (pageable["copies"], pageable["to_device"], pageable["bytes"]) == (16, 16, 244_403_360)
    assert pageable["share"] == pytest.approx(1.278e-3, rel=1e-2)
    assert [f.rule for f in advise(t)] == ["startup_in_window", "low_device_utilization"]


def test_v100_nccl_rank_is_launch_bound_and_communication_heavy(load_trace: Callable[[str], Trace]) -> None:
    ev = _found(load_trace("cuda/nccl_rank1_of_2_profile_memory.json.gz"))
    assert ev["launch_bound"]["launched"] == 17832 and ev["launch_bound"]["short_kernels"] == 9688
    assert ev["communication_heavy"]["share"] == pytest.approx(0.2437, abs=1e-3)
    assert ev["enable_amp"]["compute_capability"] == "7.0"
    # kernel time under mm/bmm/addmm/... ops (a row-by-row regex over the trace gives 0.423379)
    assert ev["enable_amp"]["tensor_core_eligible_kernel_share"] == pytest.approx(0.423379, abs=1e-6)
    assert "tf32_matmul" not in ev  # a V100 has no TF32
    assert "memory_near_capacity" not in ev  # 6.6 GB peak of 32 GB


def test_memory_near_capacity_on_a_smaller_device(load_trace: Callable[[str], Trace]) -> None:
    trace = load_trace("cuda/nccl_rank1_of_2_profile_memory.json.gz")
    props = [dict(p) for p in trace.meta.device_properties]
    props[1]["totalGlobalMem"] = 7_000_000_000  # the same run on a 7 GB card: the 6.6 GB peak is 95%
    small = dataclasses.replace(trace, meta=dataclasses.replace(trace.meta, device_properties=tuple(props)))
    ev = _found(small)["memory_near_capacity"]
    assert ev["device"] == "cuda:1" and ev["peak_bytes"] == 6629508096


def test_factory_tensors_moved_to_the_device(load_trace: Callable[[str], Trace]) -> None:
    ev = _found(load_trace("cuda/diff_control_rank3_of_8.json.gz"))
    assert ev["cpu_tensor_copied_to_device"]["factories"] == {"aten::zeros": 3}
    # .item() 30 times, 24 of them copying from the device; FusedAdam's .item() of its CPU
    # step count (once per step, no copy beneath it) waits for nothing. The stream sync inside
    # each of those 24 is the same wait: 60 stream syncs, 36 of them on their own
    assert ev["host_device_sync"]["by_name"] == {
        "cudaStreamSynchronize": 36,
        "aten::_local_scalar_dense": 24,
    }  # and its one cudaDeviceSynchronize comes after the last op: it closes the window


def test_cuda_start_up_inside_the_window_is_named(load_trace: Callable[[str], Trace]) -> None:
    """``alexnet_benchmark`` profiled the program's first CUDA calls: context creation inside
    ``cudaDeviceGetStreamPriorityRange`` (29.9 s) and ``cudaFree`` dominate its 43 s window. The
    advice says so first, rather than only calling the device idle."""
    findings = advise(load_trace("cuda/alexnet_benchmark.json.gz"))
    assert findings[0].rule == "startup_in_window"
    ev = findings[0].evidence
    assert ev["share"] == pytest.approx(0.97, abs=0.01)
    assert list(ev["seconds_by_call"])[:2] == ["cudaDeviceGetStreamPriorityRange", "cudaFree"]
    assert ev["seconds_by_call"]["cudaDeviceGetStreamPriorityRange"] == pytest.approx(29.93, abs=0.01)
    assert "schedule(wait=1, warmup=1, active=3)" in findings[0].fix


def test_long_calls_with_the_device_busy_are_not_start_up(load_trace: Callable[[str], Trace]) -> None:
    """MTIA's ``runFunction`` submits synchronously: 27 calls of >= 100 ms (5.0 s) that wait for
    the device to run the job. They are waits, not start-up."""
    trace = load_trace("other_devices/mtia_training_large.json.gz")
    long_calls = trace.events.filter((pl.col("kind") == "runtime") & (pl.col("dur_ns") >= 100_000_000))
    assert long_calls.height == 27
    assert "startup_in_window" not in _found(trace)


def test_launch_bound_share_is_a_union_over_time_within_the_idle_time(
    load_trace: Callable[[str], Trace],
) -> None:
    """nccl_rank0_of_2's compute and NCCL streams both wait on the host at the same instants:
    summed per stream that was 110 % of the step time (355 ms + 381 ms of 667 ms). As a union over
    time, minus every instant some kernel runs, it is at most the device's idle share."""
    every = {f.rule: f for f in advise(load_trace("cuda/nccl_rank0_of_2.json.gz"), min_share=0)}
    lb, low = every["launch_bound"], every["low_device_utilization"]
    busy = low.evidence["utilization"]["0"]  # type: ignore[index]
    assert busy == pytest.approx(0.2326, abs=1e-3)
    assert lb.share == pytest.approx(0.5042, abs=1e-3)
    assert lb.share is not None and lb.share <= 1 - busy
    assert "waiting on the host 50% of the step time (it is busy 23%)" in lb.message


def test_a_deep_launch_queue_is_not_launch_bound(load_trace: Callable[[str], Trace]) -> None:
    """resnet50_num_workers_0: kernels wait 9.4 ms (median) between launch and start, so the host
    is ahead of the device; its idle time comes from the DataLoader, whose rules say so."""
    t = load_trace("tensorboard_samples/resnet50_num_workers_0.pt.trace.json.gz")
    rules = {f.rule for f in advise(t, min_share=0)}
    assert "launch_bound" not in rules
    assert "dataloader_bottleneck" in rules
    assert "dataloader_num_workers" not in rules  # the bottleneck's fix says it: one finding
