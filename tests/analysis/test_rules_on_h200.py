"""The advisor on real kernels: training steps recorded on an NVIDIA H200 (``tests/data/cuda_truth``).

``mlp_flawed`` makes the mistakes the rules exist for: fp32 matmuls with TF32 off (cuBLAS then
runs ``cutlass_80_simt_sgemm`` and ``sm80_xmma_gemm_f32f32_f32f32_f32_..._ffma`` on the CUDA
cores), a 16 MB batch copied from pageable host memory every step, ``torch.ones(10).to(cuda)``
every step, and two ``.item()`` per step. ``mlp_fixed`` is the same model done right (bf16
autocast, TF32 on, data on the device, no syncs); it is small for an H200, so it is launch-bound,
and its 10-class head is the only matmul whose dimensions are not multiples of 8.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

import torchscope
from torchscope.analysis import names
from torchscope.analysis.advisor import advise
from torchscope.analysis.overview import overview

DATA = Path(__file__).parents[1] / "data" / "cuda_truth"


def _load(name: str) -> torchscope.Trace:
    trace = torchscope.load(DATA / f"{name}.pt.trace.json.gz")
    assert isinstance(trace, torchscope.Trace)
    return trace


def _evidence(name: str) -> dict[str, dict[str, object]]:
    return {f.rule: f.evidence for f in advise(_load(name), min_share=0)}


@pytest.mark.parametrize(
    ("kernel", "tensor_core"),
    [
        (
            "void cutlass::Kernel2<cutlass_80_simt_sgemm_256x128_8x4_nt_align1>(cutlass_80_simt_sgemm_256x128_8x4_nt_align1::Params)",
            False,
        ),
        (
            "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x8_stage3_warpsize2x2x1_ffma_aligna4_alignc4_execute_kernel__5x_cublas",
            False,
        ),
        (
            "sm90_xmma_fprop_implicit_gemm_f32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize64x128x32_warpgroupsize1x1x1_g1_execute_segment_k_off_kernel__5x_cudnn",
            True,
        ),
        ("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_bias_TNT", True),
        (
            "void cutlass::Kernel2<cutlass_80_tensorop_s16816gemm_bf16_64x64_32x6_nt_align2>(cutlass_80_tensorop_s16816gemm_bf16_64x64_32x6_nt_align2::Params)",
            True,
        ),
        (
            "void cutlass__5x_cudnn::Kernel<cutlass_tensorop_s1688fprop_optimized_tf32_256x64_16x4_nhwc_align4>(cutlass_tensorop_s1688fprop_optimized_tf32_256x64_16x4_nhwc_align4::Params)",
            True,
        ),
    ],
)
def test_cuda_core_kernels_of_tensor_core_families_are_not_tensor_core(
    kernel: str, tensor_core: bool
) -> None:
    frame = pl.DataFrame({"name": [kernel]})
    assert frame.select(names.TENSOR_CORE_KERNEL).item() is tensor_core
    assert frame.select(names.FP32_GEMM_KERNEL).item() is (not tensor_core and "gemm" in kernel)


def test_the_flawed_loop_gets_each_fix_it_needs() -> None:
    ev = _evidence("mlp_flawed")
    # all 40 fp32 GEMMs of two steps (7 forward, 13 backward each), the xmma ffma ones included
    assert ev["tf32_matmul"]["kernels"] == 40
    assert ev["enable_amp"]["compute_capability"] == "9.0"
    assert ev["enable_amp"]["tensor_core_eligible_kernel_share"] == pytest.approx(0.8949, abs=1e-4)
    # three host batches a step (x, y, the class weights), 16 MB + 32 KB + 40 B, from pageable memory
    pageable = ev["pageable_memcpy"]
    assert (pageable["copies"], pageable["to_device"], pageable["bytes"]) == (
        6,
        6,
        2 * (16_384_000 + 32_768 + 40),
    )
    assert pageable["gb_per_s"] == pytest.approx(13.49, abs=0.01)
    # the waits: two .item() a step, each counted once (not again as its cudaStreamSynchronize);
    # the copies' own waits are pageable_memcpy's, and the torch.cuda.synchronize() after the last
    # op closes the profiled region (as it should: not advice)
    assert ev["host_device_sync"]["by_name"] == {"aten::_local_scalar_dense": 4}
    assert ev["cpu_tensor_copied_to_device"]["factories"] == {"aten::ones": 2}
    assert overview(_load("mlp_flawed")).devices[0].tensor_core_ratio == 0.0


def test_a_stray_float64_op_is_named_by_its_device_time() -> None:
    """The flawed loop's one float64 op a step (``aten::std`` of a [4096, 1000] tensor, then its
    copy back to float) is 1.3 % of the steps on the device: named, by the share of its kernels.
    The rule once needed half of all op time in float64 and never fired on it."""
    f = {x.rule: x for x in advise(_load("mlp_flawed"))}["double_precision"]
    assert f.evidence["device"] is True and f.evidence["ops"][0] == "aten::std"
    assert f.share == pytest.approx(0.0133, abs=1e-4)
    assert f.message.startswith("Ops on float64 tensors take 1.3% of the profiled time")
    # enable_amp is measured as tf32_matmul is, over the profiled time, so the cut treats both alike
    every = {x.rule: x for x in advise(_load("mlp_flawed"))}
    assert every["enable_amp"].share == pytest.approx(0.4704, abs=1e-4)
    assert every["tf32_matmul"].share == pytest.approx(0.4649, abs=1e-4)


def test_a_python_float_argument_is_no_float64_work(traces_dir: Path) -> None:
    """``param.mul_(0.9)`` records its 0-dim ``double``: 966 such calls in a ResNet-50 run are
    no float64 op (and every float32 loop would get the advice)."""
    trace = torchscope.load(traces_dir / "tensorboard_samples" / "resnet50_num_workers_0.pt.trace.json.gz")
    types = trace.events.filter(pl.col("input_types").str.contains("double", literal=True))
    assert types.height == 966
    assert "double_precision" not in {x.rule for x in advise(trace, min_share=0)}


def test_with_python_stacks_the_findings_name_the_users_line() -> None:
    ev = _evidence("mlp_flawed_stack")
    assert ev["pageable_memcpy"]["user_frame"] == "record_cuda_truth.py(79): step"
    assert ev["host_device_sync"]["user_frame"] == "record_cuda_truth.py(79): step"
    # torch.ones(10) and .to(cuda) sit under Python frames of their own: still found
    assert ev["cpu_tensor_copied_to_device"]["factories"] == {"aten::ones": 2}


def test_the_fixed_loop_gets_no_false_alarm() -> None:
    trace = _load("mlp_fixed")
    shown = [f.rule for f in advise(trace)]
    assert shown == ["low_device_utilization", "launch_bound"]
    every = {f.rule: f for f in advise(trace, min_share=0)}
    # the 10-class head: real, but 0.5 % of the time, so not shown by default
    assert every["matmul_dims_not_multiple_of_8"].evidence["calls"] == 6
    assert every["matmul_dims_not_multiple_of_8"].share == pytest.approx(0.00503, abs=1e-4)
    assert overview(trace).devices[0].tensor_core_ratio == pytest.approx(0.4884, abs=1e-4)


def test_resnet_convolutions_on_tf32_tensor_cores_need_no_amp_advice() -> None:
    """cuDNN runs fp32 convolutions as TF32 on Tensor Cores by default; only the fc layer's six
    GEMMs run on the CUDA cores (TF32 matmul is off by default), 0.1 % of the run."""
    trace = _load("resnet18")
    every = {f.rule: f for f in advise(trace, min_share=0)}
    assert "enable_amp" not in every
    # but cuDNN converts NCHW to NHWC and back around them: 332 kernels, 19 % of kernel time
    layout = every["channels_last"].evidence
    assert layout["kernels"] == 332 and layout["kernel_time_share"] == pytest.approx(0.1933, abs=1e-4)
    assert layout["ops"] == {"aten::convolution_backward": 222, "aten::cudnn_convolution": 110}
    assert [f.rule for f in advise(trace)] == ["low_device_utilization", "channels_last"]
    assert every["tf32_matmul"].evidence["kernels"] == 6
    assert every["tf32_matmul"].share == pytest.approx(0.0012, abs=1e-4)
    # (cuDNN's init_device_workspace_kernel, 110 us, zeroes a workspace: not Tensor Core work)
    assert overview(trace).devices[0].tensor_core_ratio == pytest.approx(0.3622, abs=1e-4)
