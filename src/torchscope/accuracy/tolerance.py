"""Tolerances: per-dtype defaults, overridable per op by name pattern, and op selection.

Two regimes need different defaults. A *live* comparison feeds the reference copies of the very
inputs the target saw, so an op's error is only its own rounding: the defaults are one or two
units in the last place of the target dtype (the values torch.testing uses). A *dump*
comparison runs two whole programs independently, so errors accumulate from op to op: its
defaults are looser and are applied to the relative L2 error, which accumulates smoothly,
rather than to single elements. Users override either per op with ``fnmatch`` patterns on the
op name (``"aten::softmax*"``) or on ``module/op`` (``"ff.*"``).
"""

from __future__ import annotations

import fnmatch
import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

# target dtype -> (rtol, atol) for one op on identical inputs (torch.testing's defaults)
LIVE_DEFAULTS: dict[str, tuple[float, float]] = {
    "float16": (1e-3, 1e-5),
    "bfloat16": (1.6e-2, 1e-5),
    "float32": (1.3e-6, 1e-5),
    "float64": (1e-7, 1e-7),
    "complex64": (1.3e-6, 1e-5),
    "complex128": (1e-7, 1e-7),
    "float8_e4m3fn": (1.25e-1, 1e-3),
    "float8_e5m2": (2.5e-1, 1e-3),
}
# target dtype -> relative L2 error allowed between two independent runs
DUMP_DEFAULTS: dict[str, float] = {
    "float16": 2e-2,
    "bfloat16": 1e-1,
    "float32": 1e-4,
    "float64": 1e-10,
}

# random ops: their outputs are never compared (see docs/accuracy.md, "Random ops")
RANDOM_OP_PATTERNS = (
    "aten::*dropout*",
    "aten::bernoulli*",
    "aten::rand*",
    "aten::normal*",
    "aten::uniform*",
    "aten::exponential*",
    "aten::multinomial*",
    "aten::geometric*",
    "aten::cauchy*",
    "aten::log_normal*",
    "aten::poisson*",
)


# ops whose outputs jump when an input crosses a threshold (a ReLU mask, a max's index, a
# comparison): in a dump compare, inputs that differ within tolerance can flip some outputs
DISCONTINUOUS_OP_PATTERNS = (
    "aten::threshold_backward",
    "aten::hardtanh_backward",
    "aten::leaky_relu_backward",
    "aten::max_pool*",
    "aten::adaptive_max_pool*",
    "aten::*sort*",
    "aten::topk",
    "aten::kthvalue",
    "aten::argmax",
    "aten::argmin",
    "aten::max",
    "aten::min",
    "aten::median",
    "aten::mode",
    "aten::gt",
    "aten::ge",
    "aten::lt",
    "aten::le",
    "aten::eq",
    "aten::ne",
    "aten::sign",
    "aten::round",
    "aten::floor",
    "aten::ceil",
    "aten::trunc",
    "aten::nonzero",
    "aten::where",
)


def _matches(patterns: Iterable[str], *names: str) -> bool:
    return any(fnmatch.fnmatchcase(n, p) for p in patterns for n in names if n)


@dataclass(frozen=True)
class Tolerances:
    """Which ops to compare and how closely.

    ``overrides`` maps a pattern to ``(rtol, atol)`` for live compares and to ``rtol`` (a
    relative L2 error) for dump compares; the first matching pattern wins. ``include`` keeps only
    matching ops (empty: all), ``exclude`` drops matching ops; both match ``aten::name``,
    ``aten::name.overload`` or ``module/aten::name``.
    """

    overrides: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()

    def _names(self, op: str, overload: str, module: str) -> tuple[str, ...]:
        return (op, f"{op}.{overload}", f"{module}/{op}", module)

    def selected(self, op: str, overload: str = "default", module: str = "") -> bool:
        names = self._names(op, overload, module)
        if self.include and not _matches(self.include, *names):
            return False
        return not _matches(self.exclude, *names)

    def live(self, op: str, dtype: str, overload: str = "default", module: str = "") -> tuple[float, float]:
        tol = self._override(op, overload, module)
        return (float(tol[0]), float(tol[1])) if tol is not None else LIVE_DEFAULTS.get(dtype, (0.0, 0.0))

    def overridden(self, op: str, overload: str = "default", module: str = "") -> bool:
        """Whether the user set this op's tolerance (then it is used as given, never widened)."""
        return self._override(op, overload, module) is not None

    def _override(self, op: str, overload: str, module: str) -> tuple[float, float] | None:
        names = self._names(op, overload, module)
        for pattern, tol in self.overrides.items():
            if _matches((pattern,), *names):
                return tol
        return None

    def dump(self, op: str, dtype: str, overload: str = "default", module: str = "") -> float:
        tol = self._override(op, overload, module)
        return float(tol[0]) if tol is not None else DUMP_DEFAULTS.get(dtype, 0.0)


# both are asked for every op a live compare sees, and a model has a few dozen op names: cached
@functools.lru_cache(maxsize=4096)
def is_discontinuous(op: str) -> bool:
    """True for ops whose outputs can jump under a tiny change of their inputs."""
    return _matches(DISCONTINUOUS_OP_PATTERNS, op)


@functools.lru_cache(maxsize=4096)
def is_random(op: str) -> bool:
    """True for ops that draw random numbers (dropout, rand*, normal_, ...)."""
    return _matches(RANDOM_OP_PATTERNS, op)
