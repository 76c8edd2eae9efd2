"""The rule list, in a stable order: the plugin's, torch's pattern matcher's, HTA's, the seeds', ours."""

from __future__ import annotations

from torchscope.analysis.advisor import patterns, plugin, seeds, window
from torchscope.analysis.advisor.base import Rule

RULES: tuple[Rule, ...] = (
    plugin.dataloader_bottleneck,
    plugin.enable_amp,
    plugin.memory_near_capacity,
    plugin.use_ddp,
    plugin.communication_heavy,
    plugin.low_device_utilization,
    patterns.tf32_matmul,
    patterns.optimizer_foreach,
    patterns.zero_grad_set_to_none,
    patterns.conv_bias_before_batchnorm,
    patterns.matmul_dims_not_multiple_of_8,
    patterns.cpu_tensor_copied_to_device,
    patterns.pageable_memcpy,
    patterns.channels_last,
    patterns.dataloader_num_workers,
    patterns.launch_bound,
    seeds.slow_conv_path,
    seeds.host_device_sync,
    seeds.python_outside_ops,
    seeds.double_precision,
    window.startup_in_window,
    window.range_profiled,
)

RULE_IDS: tuple[str, ...] = tuple(r.__name__ for r in RULES)
