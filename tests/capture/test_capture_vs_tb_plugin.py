"""Differential: ``key_averages`` on a loaded CUDA trace equals the TensorBoard plugin's op view.

torch-tb-profiler's operator view (``op_list_groupby_name``) computes, per op name, calls, host
and device time, self and total, from the same Kineto file. On its own ResNet-50 sample every
op the plugin lists must have the same numbers in our table's rows (the plugin rounds to us).
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from torchscope.compat import key_averages
from torchscope.trace.reader import read_chrome

tb_data = pytest.importorskip("torch_tb_profiler.profiler.data")


def test_op_times_match_the_tensorboard_plugin(traces_dir: Path, tmp_path: Path) -> None:
    path = traces_dir / "tensorboard_samples" / "resnet50_num_workers_0.pt.trace.json.gz"
    logging.disable(logging.WARNING)
    try:
        parsed = tb_data.RunProfileData.parse("worker0", "span", str(path), str(tmp_path))
        run = parsed[0] if isinstance(parsed, tuple) else parsed
        run.process()
    finally:
        logging.disable(logging.NOTSET)
    ours = {r.key: r for r in key_averages(read_chrome(path)) if not r.is_device}
    theirs = run.op_list_groupby_name
    assert len(theirs) > 50
    for op in theirs:
        row = ours[op.name]
        assert row.count == op.calls, op.name
        assert row.cpu_time_total == pytest.approx(op.host_duration, abs=1.0), op.name
        assert row.self_cpu_time_total == pytest.approx(op.self_host_duration, abs=1.0), op.name
        assert row.device_time_total == pytest.approx(op.device_duration, abs=1.0), op.name
        assert row.self_device_time_total == pytest.approx(op.self_device_duration, abs=1.0), op.name
    # and the CUDA columns are printed for this trace loaded from disk
    table = key_averages(read_chrome(path)).table(sort_by="cuda_time_total", row_limit=3)
    assert "Self CUDA" in table and table.rstrip().splitlines()[-1].startswith("Self CUDA time total:")
