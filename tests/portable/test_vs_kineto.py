"""The portable collector against Kineto (torch.profiler) on the same workloads, on CPU.

Both documents go through the same reader into a ``Trace``; the checks are what a user would
compare between the two backends: which ops ran and how often, with which input shapes,
inside which ``nn.Module`` and ``record_function`` scope. The dispatch mode sees the ops that
reach the Python dispatch key (below autograd), so the comparison is on those ops: ops nested
*inside* another op (``aten::empty`` inside ``aten::convolution``) and composite ops that
decompose above autograd (``aten::linear``) are Kineto-only, by design (docs/portable.md).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torchscope.capture.portable import PortableCollector  # noqa: E402
from torchscope.models import resnet18, transformer_block  # noqa: E402
from torchscope.models.perceptron import MLP  # noqa: E402
from torchscope.trace.model import Trace  # noqa: E402
from torchscope.trace.reader import read_chrome_document  # noqa: E402

# The ops each workload is judged on: the compute a user looks at first, all seen by both.
KEY_OPS = {
    "mlp": ["aten::addmm", "aten::mm", "aten::relu", "aten::threshold_backward", "aten::t", "aten::add_"],
    "resnet18": [
        "aten::convolution",
        "aten::native_batch_norm",
        "aten::relu_",
        "aten::max_pool2d_with_indices",
        "aten::add",
        "aten::mean",
        "aten::addmm",
    ],
    "transformer_block": [
        "aten::native_layer_norm",
        "aten::addmm",
        "aten::bmm",
        "aten::_softmax",
        "aten::gelu",
        "aten::mm",
        "aten::gelu_backward",
        "aten::native_layer_norm_backward",
        "aten::_softmax_backward_data",
    ],
}
# Ops only portable runs have: with a dispatch mode active, autograd saves an op's outputs
# for backward through an aten::detach call (without a mode it does not dispatch at all).
PORTABLE_ONLY = {"aten::detach"}


def _workload(name: str) -> Callable[[], None]:
    torch.manual_seed(0)
    if name == "mlp":
        model, x = MLP((512, 1024, 1024, 10)), torch.randn(8, 512)

        def step() -> None:
            with torch.autograd.profiler.record_function("train_step"):
                model(x).sum().backward()

    elif name == "resnet18":
        model, x = resnet18().eval(), torch.randn(1, 3, 64, 64)

        def step() -> None:
            with torch.no_grad(), torch.autograd.profiler.record_function("train_step"):
                model(x)

    else:
        model, x = transformer_block(), torch.randn(2, 16, 256)

        def step() -> None:
            with torch.autograd.profiler.record_function("train_step"):
                model(x).sum().backward()

    return step


def _kineto(step: Callable[[], None], tmp: Path) -> Trace:
    with torch.profiler.profile(record_shapes=True, with_stack=True, with_modules=True) as prof:
        step()
    path = tmp / "kineto.json"
    prof.export_chrome_trace(str(path))
    return read_chrome_document(json.loads(path.read_text()), str(path))


def _portable(step: Callable[[], None]) -> tuple[Trace, dict[str, Any]]:
    collector = PortableCollector(record_shapes=True, with_modules=True)
    collector.start()
    step()
    doc = collector.stop()
    return read_chrome_document(doc, "portable"), doc


@pytest.fixture(scope="module", params=list(KEY_OPS))
def pair(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[str, Trace, Trace]:
    step = _workload(request.param)
    step()  # warm both backends' first-call costs out of the comparison
    kineto = _kineto(step, tmp_path_factory.mktemp(request.param))
    portable, _ = _portable(step)
    return request.param, kineto, portable


def _ops(trace: Trace, names: list[str]) -> list[dict[str, Any]]:
    """The named ops in time order, each with its module scope and annotation chain."""
    ev = trace.events
    parent = ev["parent"].to_numpy()
    kind = ev["kind"].cast(str).to_list()
    name = ev["name"].cast(str).to_list()
    out = []
    for row in np.argsort(ev["start_ns"].to_numpy(), kind="stable"):
        if kind[row] != "cpu_op" or name[row] not in names:
            continue
        module, labels, p = None, [], parent[row]
        while p >= 0:
            if module is None and kind[p] == "python_function" and name[p].startswith("nn.Module:"):
                module = name[p]
            if kind[p] == "user_annotation":
                labels.append(name[p])
            p = parent[p]
        dims = ev["input_dims"][int(row)]
        out.append({"name": name[row], "module": module, "labels": labels, "dims": dims})
    return out


def test_same_key_ops_and_counts(pair: tuple[str, Trace, Trace]) -> None:
    model, kineto, portable = pair
    keys = KEY_OPS[model]
    k = Counter(kineto.ops["name"].cast(str).to_list())
    p = Counter(portable.ops["name"].cast(str).to_list())
    assert {n: p[n] for n in keys} == {n: k[n] for n in keys}
    assert all(p[n] > 0 for n in keys)
    # everything the portable collector names is a real op Kineto knows (or autograd's detach)
    assert set(p) - set(k) <= PORTABLE_ONLY


def test_same_input_shapes_in_the_same_order(pair: tuple[str, Trace, Trace]) -> None:
    model, kineto, portable = pair
    for name in KEY_OPS[model]:
        k_dims = [json.loads(o["dims"]) for o in _ops(kineto, [name])]
        p_dims = [json.loads(o["dims"]) for o in _ops(portable, [name])]
        assert p_dims == k_dims, name


def test_same_module_scope_and_labels_for_every_key_op(pair: tuple[str, Trace, Trace]) -> None:
    model, kineto, portable = pair
    k_ops = _ops(kineto, KEY_OPS[model])
    p_ops = _ops(portable, KEY_OPS[model])
    assert [(o["name"], o["module"], o["labels"]) for o in p_ops] == [
        (o["name"], o["module"], o["labels"]) for o in k_ops
    ]
    # forward ops sit inside their module; the label encloses the whole step
    assert any(o["module"] for o in p_ops)
    assert all(o["labels"] == ["train_step"] for o in p_ops)


def test_module_scopes_match_kineto(pair: tuple[str, Trace, Trace]) -> None:
    _, kineto, portable = pair
    k = Counter(n for n in kineto.python_functions["name"].cast(str).to_list() if n.startswith("nn.Module:"))
    p = Counter(portable.python_functions["name"].cast(str).to_list())
    assert p == k
