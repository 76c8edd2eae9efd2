"""What an event's name tells us: one place for every name-based classification.

Analyses and advisor rules agree on what counts as a DataLoader step, a collective, a
communication kernel, a Tensor Core kernel or a slow convolution only if they ask the same
function. The patterns follow the conventions of the PyTorch profiler, NCCL and cuDNN naming;
each is a Polars expression so that classification stays columnar.
"""

from __future__ import annotations

from collections.abc import Callable

import polars as pl


def by_name(test: Callable[[pl.Expr], pl.Expr]) -> pl.Expr:
    """True where ``test`` holds for the event's name, evaluated once per distinct name.

    Why: a trace holds 10^5-10^6 events but only hundreds of distinct names, and a regex over
    every row cost 4-13 ms a use (nccl trace), several uses a report. Testing the distinct
    names and matching back by ``is_in`` costs ~1 ms. A null name gives null, as ``test`` would.
    """
    # maintain_order: ``distinct`` is evaluated twice (the values and the mask), and a plain
    # unique() of a String column comes out in a different hash order each time
    distinct = pl.col("name").unique(maintain_order=True)
    return pl.col("name").is_in(distinct.filter(test(distinct.cast(pl.String))).implode())


def name_matches(pattern: str) -> pl.Expr:
    """``by_name`` for a regular expression (searched anywhere in the name, as ``str.contains``)."""
    return by_name(lambda n: n.str.contains(pattern))


# The TensorBoard plugin's DataLoader rule: the iterator's ``__next__`` annotation.
DATALOADER = by_name(
    lambda n: (
        (n.str.starts_with("enumerate(DataLoader)#") & n.str.ends_with(".__next__"))
        | n.str.starts_with("enumerate(DataPipe)#")
    )
)
OPTIMIZER = by_name(lambda n: n.str.starts_with("Optimizer."))
# a node of the backward pass, as autograd's engine names it
BACKWARD_NODE = by_name(lambda n: n.str.starts_with("autograd::engine::evaluate_function: "))
PROFILER_STEP = by_name(lambda n: n.str.starts_with("ProfilerStep#"))
# the spans ``torchscope run`` adds around the steps (setup, after the last step): not ops
TORCHSCOPE_SPAN = by_name(lambda n: n.str.starts_with("torchscope#"))

# Host-side collective calls: c10d's ``nccl:all_reduce``-style ops and record_param_comms.
HOST_COLLECTIVE = (pl.col("kind") == "collective") | name_matches(r"^(nccl|gloo|rccl|mpi|ucc):")
# The dispatcher's side of a collective (``c10d::allreduce_``, ``_c10d_functional::wait_tensor``)
# and libraries' all-to-all steps (torchrec's ``All2All_Pooled_Req``/``...Wait``): their time is
# a collective's launch and wait, not work a rank does more of
DISPATCHED_COLLECTIVE = name_matches(r"^_?c10d(_functional)?::|(?i:all_?(2|to)_?all)")

# Device-side kernel families (HTA's definitions, which its temporal breakdown uses).
COMM_KERNEL = name_matches(r"^(nccl|rccl|ncclDev|ncclKernel)|^nccl.*Kernel")
MEMORY_KERNEL = name_matches(r"^(Memcpy|Memset|dma)")
_NOT_COMPUTE = name_matches(r"^nccl.*Kernel|^.*Memcpy|^Memset|^.*Sync")


def kernel_type() -> pl.Expr:
    """COMMUNICATION / MEMORY / COMPUTATION / OTHER for device events (HTA's kernel types)."""
    return (
        pl.when(name_matches(r"^nccl.*Kernel|^(rccl|ncclDev)"))
        .then(pl.lit("COMMUNICATION"))
        .when(MEMORY_KERNEL)
        .then(pl.lit("MEMORY"))
        .when(~_NOT_COMPUTE)
        .then(pl.lit("COMPUTATION"))
        .otherwise(pl.lit("OTHER"))
    )


# Kernel names that mean the math ran on Tensor Cores (MMA instruction shapes and the
# cuDNN/CUTLASS families built on them) or AMD's matrix cores (MFMA; Tensile's ``_MI16x16x1``).
# A family name (xmma, cutlass_80, sm80_, sm90_) is not enough: the same families build plain
# FP32 kernels on the CUDA cores, and name them so (``cutlass_80_simt_sgemm_256x128_8x4_nt``,
# ``sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_..._ffma_...``: both seen on an H200 running fp32
# matmuls with TF32 off, where calling them Tensor Core kernels hid the AMP and TF32 advice).
_TENSOR_CORE_MARK = (
    r"(?i)(hmma|imma|wgmma|gmma|tensorop|xmma|h884|s884|h1688|s1688|c1688|i8816|16816|_tf32|tf32f32|"
    r"dgrad_1x1_stride_2x2|first_layer_wgrad_kernel|conv2d_c1_k1|cutlass_80|sm80_|sm90_|nvjet_|mfma|"
    r"_MI\d+x\d+x\d+)"
)
# (cuDNN's ``xmma__5x_cudnn::init_device_workspace_kernel`` only zeroes a workspace)
_CUDA_CORE_MARK = r"(?i)(simt|_ffma_|_dfma_|_hfma2?_|init_device_workspace)"


def _on_tensor_cores(n: pl.Expr) -> pl.Expr:
    return n.str.contains(_TENSOR_CORE_MARK) & ~n.str.contains(_CUDA_CORE_MARK)


TENSOR_CORE_KERNEL = by_name(_on_tensor_cores)
# A matrix product computed in FP32 on the CUDA cores (no TF32, no Tensor Cores).
FP32_GEMM_KERNEL = by_name(
    lambda n: n.str.contains(r"(?i)(sgemm|gemm.*f32|_f32_|fp32)")
    & ~_on_tensor_cores(n)
    & ~n.str.contains(r"(?i)(tf32|bf16|f16|half|splitKreduce)")
)

# Ops whose work can run on Tensor Cores under AMP (convolutions and matrix products).
TENSOR_CORE_ELIGIBLE_OP = name_matches(
    r"^(aten::(_?convolution|conv[123]d|conv_tbc|conv_transpose[123]d|cudnn_convolution\w*|prelu|addmm_?|"
    r"addmv|addr|matmul|mm|mv|linear|addbmm|baddbmm|bmm|chain_matmul|linalg_multi_dot|"
    r"_scaled_dot_product\w*|scaled_dot_product_attention|lstm_cell|gru_cell)|"
    r"(CudnnConvolution|Bmm|Mm|Addmm|Addmv|Mv|Addbmm)\w*Backward\d*)$"
)

# Convolutions that fell back to the reference implementation instead of cuDNN / oneDNN.
SLOW_CONV = name_matches(
    r"^aten::(thnn_conv\w*|slow_conv\w*|_slow_conv\w*|slow_conv_dilated\w*|slow_conv_transpose\w*)$"
)
FAST_CONV = name_matches(r"^aten::(mkldnn_convolution|cudnn_convolution\w*|miopen_convolution\w*)$")

# cuDNN converting a tensor between NCHW and NHWC around a convolution that runs NHWC inside
# (``cudnn::engines_precompiled::nchwToNhwcKernel``, older ``nchwToNhwcKernel``).
LAYOUT_TRANSPOSE_KERNEL = name_matches(r"(?i)(nchw_?to_?nhwc|nhwc_?to_?nchw|nchw2nhwc|nhwc2nchw)")

# Copies between host and device memory, by direction, and from or to pageable host memory
# (CUPTI's names: "Memcpy HtoD (Pageable -> Device)", "Memcpy DtoH (Device -> Pinned)").
HOST_TO_DEVICE_COPY = name_matches(r"(?i)(htod|h2d)")
PAGEABLE_COPY = name_matches(r"(?i)pageable")

# Host/device synchronisation points.
SYNC_OP = name_matches(
    r"^(aten::_local_scalar_dense|cudaDeviceSynchronize|"
    r"cudaStreamSynchronize|cudaEventSynchronize|hipDeviceSynchronize|hipStreamSynchronize|"
    r"cudaMemcpy|hipMemcpy)$"
)
