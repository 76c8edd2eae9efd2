"""Per-tensor statistics for a dump: a few hundred bytes that still say how far two tensors differ.

Min, max, mean, mean |x|, L2 norm and NaN/Inf counts are what vendor dump tools record, but two
tensors with equal statistics can still differ everywhere. We add a *sketch*: a CountSketch of
``SKETCH`` buckets, where each element is added, with a pseudo-random sign, into one
pseudo-random bucket (the same on every machine: drawn from numpy's PCG64 seeded by the
tensor's size). The sketch is linear, so the sketch of ``a - b`` is the difference of the
sketches, and ``|S(a) - S(b)| / |S(b)|`` is an unbiased estimate of the squared relative L2
error's square root, good to a few tens of percent, at O(n) cost and without storing tensors.
Integer and boolean tensors get a CRC32 of their bytes instead: they are compared exactly.

``tensor_stats`` is the numpy definition (what a reader on another machine can recompute);
the dump computes the same numbers with torch on the tensor's own device (``dump.torch_stats``).
"""

from __future__ import annotations

import math
import zlib
from functools import lru_cache
from typing import Any

import numpy as np

SKETCH = 16
# tensors longer than this are sketched on an evenly strided sample of this many elements
SKETCH_MAX = 1 << 20


def sketch_stride(n: int) -> int:
    """The stride used to sample a tensor of ``n`` elements for its sketch."""
    return max(1, math.ceil(n / SKETCH_MAX))


@lru_cache(maxsize=32)
def sketch_plan(n: int) -> tuple[np.ndarray, np.ndarray]:
    """For a sample of ``n`` elements: each element's bucket (int64) and sign (±1.0)."""
    rng = np.random.Generator(np.random.PCG64(n))
    bucket = rng.integers(0, SKETCH, size=n, dtype=np.int64)
    sign = rng.integers(0, 2, size=n, dtype=np.int8).astype(np.float64) * 2.0 - 1.0
    return bucket, sign


def tensor_stats(values: np.ndarray, dtype: str) -> dict[str, Any]:
    """The dump row of one tensor (``values`` as float64 for floating dtypes)."""
    flat = np.ascontiguousarray(values).ravel()
    row: dict[str, Any] = {"shape": [int(s) for s in values.shape], "dtype": dtype, "numel": int(flat.size)}
    if dtype.startswith(("int", "uint", "bool")):
        row["checksum"] = int(zlib.crc32(flat.astype(np.int64).tobytes()))
        if flat.size:
            row.update(min=float(flat.min()), max=float(flat.max()), mean=float(flat.mean()))
        return row
    x = flat.astype(np.float64, copy=False)
    finite = np.isfinite(x)
    row["nan"] = int(np.isnan(x).sum())
    row["inf"] = int((~finite).sum()) - row["nan"]
    xf = x if finite.all() else x[finite]
    if xf.size:
        row.update(
            min=float(xf.min()),
            max=float(xf.max()),
            mean=float(xf.mean()),
            abs_mean=float(np.abs(xf).mean()),
            l2=float(np.linalg.norm(xf)),
        )
    sample = np.nan_to_num(x[:: sketch_stride(x.size)], nan=0.0, posinf=0.0, neginf=0.0)
    bucket, sign = sketch_plan(sample.size)
    row["sketch"] = (
        np.bincount(bucket, weights=sample * sign, minlength=SKETCH).tolist() if sample.size else []
    )
    return row
