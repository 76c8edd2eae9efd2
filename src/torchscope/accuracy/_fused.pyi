"""Types of the optional C extension ``torchscope.accuracy._fused`` (built from ``_fused.c``)."""

from typing import Any

def metrics(
    target: Any, target_kind: int, reference: Any, reference_kind: int, n: int, rtol: float, atol: float
) -> tuple[float, float, float, float, float, float, float, float, int, int, int] | None:
    """Sums and extremes of comparing two C-contiguous buffers of ``n`` elements (kinds: 0
    float64, 1 float32, 2 bfloat16 as 16-bit ints): t.t, t.r, r.r, d.d, max |d|, sum |d|, max
    relative error, max |d| / bound, counts within 1e-3 and 5e-3 relative, count over the
    bound ``atol + rtol * max(|r|, rms(r))``. None when a value is not finite."""
