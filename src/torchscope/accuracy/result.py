"""The outcome of a comparison, live or from dumps: one ``OpResult`` per op, and the findings.

Both comparison modes produce the same ``AccuracyResult`` so that the findings (the first
divergence, the top ops by error, the per-module summary), the CLI output and the dashboard
view are written once. The *first divergence* is the first op whose output is over tolerance
while every one of its inputs was still within tolerance: the root, not the cascade.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from torchscope.accuracy.metrics import TensorMetrics, severity

# an op's status
OK = "ok"
DIVERGED = "diverged"
RANDOM = "random"  # draws random numbers: outputs not compared
SKIPPED = "skipped"  # could not be compared (reference failed, no tensor output, ...)


# the metrics of an op's worst output, flattened into its row (dashboard, --json), in order
WORST_METRICS = (
    "max_abs_error",
    "max_rel_error",
    "mean_abs_error",
    "rmse",
    "rel_l2_error",
    "cosine",
    "within_1e_3",
    "within_5e_3",
    "nan",
    "inf",
    "ref_nan",
    "ref_inf",
    "mismatched",
    "error_ratio",
    "allclose",
    "rtol",
    "atol",
    "problem",
)


@dataclass
class OpResult:
    """One ATen op (or one aligned pair of ops from two dumps) and how it compared."""

    index: int
    op: str
    overload: str = "default"
    module: str = ""
    direction: str = "forward"
    call_site: str | None = None
    grad_fn: str | None = None
    input_shapes: list[list[int]] = field(default_factory=list)
    dtypes: list[str] = field(default_factory=list)
    outputs: list[TensorMetrics] = field(default_factory=list)
    inputs: list[TensorMetrics] = field(default_factory=list)
    mutated_inputs: list[str] = field(default_factory=list)
    status: str = OK
    note: str | None = None
    ref_index: int | None = None  # the op's index in the reference dump, when aligned
    cascade: bool = False  # over tolerance, but by error it was handed (dump mode): never the root

    @property
    def worst(self) -> TensorMetrics | None:
        if not self.outputs:
            return None
        return max(self.outputs, key=severity)

    @property
    def diverged(self) -> bool:
        return self.status == DIVERGED

    @property
    def inputs_ok(self) -> bool:
        """Whether the op's inputs were within tolerance (always true live: same inputs)."""
        return all(m.allclose for m in self.inputs)

    @property
    def severity(self) -> float:
        w = self.worst
        s = severity(w) if w is not None else 0.0
        return s + (1e25 if self.mutated_inputs else 0.0)

    def as_dict(self) -> dict[str, Any]:
        w = self.worst
        d: dict[str, Any] = {
            "index": self.index,
            "op": self.op,
            "overload": self.overload,
            "module": self.module,
            "call_site": self.call_site,
            "direction": self.direction,
            "grad_fn": self.grad_fn,
            "input_shapes": self.input_shapes,
            "dtypes": self.dtypes,
            "status": self.status,
            "note": self.note,
            "mutated_inputs": self.mutated_inputs,
            "inputs_ok": self.inputs_ok,
            "ref_index": self.ref_index,
            "cascade": self.cascade,
        }
        metrics = w.as_dict() if w is not None else {}
        for key in WORST_METRICS:
            d[key] = metrics.get(key)
        d["outputs"] = [m.as_dict() for m in self.outputs]
        return d


@dataclass
class AccuracyResult:
    """All ops compared, in execution order, with what was compared against what."""

    mode: str  # "live" or "dump"
    target: str
    reference: str
    ops: list[OpResult] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    only_in_target: list[dict[str, Any]] = field(default_factory=list)
    only_in_reference: list[dict[str, Any]] = field(default_factory=list)
    # dump compares: one per aligned module call (op = "nn.<class>"), in completion order
    module_calls: list[OpResult] = field(default_factory=list)

    def __iter__(self) -> Iterator[OpResult]:
        return iter(self.ops)

    def __len__(self) -> int:
        return len(self.ops)

    @property
    def compared(self) -> list[OpResult]:
        return _compared(self.ops)

    @property
    def diverged(self) -> list[OpResult]:
        return [o for o in self.ops if o.diverged]

    @property
    def first_divergence(self) -> OpResult | None:
        """The first op over tolerance whose inputs were all still within tolerance."""
        return _first_root(self.ops)

    @property
    def first_module_divergence(self) -> OpResult | None:
        """The first module call (innermost first) over tolerance with its inputs within it."""
        return _first_root(self.module_calls)

    def top(self, n: int = 10) -> list[OpResult]:
        """The ``n`` compared ops furthest past their tolerance, worst first."""
        return _worst_first(self.compared)[:n]

    def top_module_calls(self, n: int = 10) -> list[OpResult]:
        """The ``n`` compared module calls furthest past their tolerance, worst first."""
        return _worst_first(_compared(self.module_calls))[:n]

    def modules(self) -> list[dict[str, Any]]:
        """One row per module path: ops compared, ops diverged, the worst errors.

        An error no op of the module could measure is unknown (None), never 0: a statistics-mode
        dump holds no element values, so its ops have no max abs error (the per-op table's "–"),
        and a module of them must not read as exact."""
        rows: dict[str, dict[str, Any]] = {}
        for o in self.compared:
            row = rows.setdefault(
                o.module,
                {
                    "module": o.module,
                    "ops": 0,
                    "diverged": 0,
                    "max_abs_error": None,
                    "max_rel_error": None,
                    "min_cosine": None,
                    "worst_op": None,
                    "worst_index": None,
                    "_sev": -1.0,
                },
            )
            row["ops"] += 1
            row["diverged"] += int(o.diverged)
            w = o.worst
            if w is None:
                continue
            row["max_abs_error"] = _known(max, row["max_abs_error"], w.max_abs_error)
            row["max_rel_error"] = _known(max, row["max_rel_error"], w.max_rel_error)
            row["min_cosine"] = _known(min, row["min_cosine"], w.cosine)
            if o.severity > row["_sev"]:
                row["_sev"], row["worst_op"], row["worst_index"] = o.severity, o.op, o.index
        out = []
        for row in rows.values():
            row.pop("_sev")
            out.append(row)
        return out

    def summary(self) -> dict[str, Any]:
        first = self.first_divergence
        first_module = self.first_module_divergence
        return {
            "mode": self.mode,
            "target": self.target,
            "reference": self.reference,
            "ops": len(self.ops),
            "compared": len(self.compared),
            "diverged": len(self.diverged),
            "random": sum(o.status == RANDOM for o in self.ops),
            "skipped": sum(o.status == SKIPPED for o in self.ops),
            "mutated_inputs": sum(bool(o.mutated_inputs) for o in self.ops),
            "forward_ops": sum(o.direction == "forward" for o in self.ops),
            "backward_ops": sum(o.direction == "backward" for o in self.ops),
            "first_divergence": None if first is None else f"#{first.index} {first.op} ({first.direction})",
            "module_calls": len(self.module_calls),
            "module_calls_diverged": sum(m.diverged for m in self.module_calls),
            "first_module_divergence": None
            if first_module is None
            else f"{first_module.module or '(top level)'} {first_module.op} ({first_module.direction})",
            "only_in_target": len(self.only_in_target),
            "only_in_reference": len(self.only_in_reference),
            "warnings": list(self.warnings),
        }


def _first_root(records: list[OpResult]) -> OpResult | None:
    """The first record over tolerance whose inputs were within it: the root, not the cascade."""
    return next((o for o in records if o.diverged and o.inputs_ok and not o.cascade), None)


def _compared(records: list[OpResult]) -> list[OpResult]:
    return [o for o in records if o.status in (OK, DIVERGED)]


def _worst_first(records: list[OpResult]) -> list[OpResult]:
    return sorted(records, key=lambda o: o.severity, reverse=True)


def _known(pick: Callable[[float, float], float], a: float | None, b: float | None) -> float | None:
    """``pick(a, b)`` over the values that are known; None when neither is."""
    if a is None or b is None:
        return b if a is None else a
    return pick(a, b)
