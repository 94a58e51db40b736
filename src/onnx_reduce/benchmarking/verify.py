"""Check another runner's output against onnx-reduce's (flagged in the table, never fatal).

The tolerance is loose on purpose: it separates "a few ulp / a different summation order" from
a wrong answer (a narrow accumulator that lost digits, an overflow, a wrong shape). Errors are
measured against the largest output magnitude, as outputs with cancellation have large
relative error in any float accumulation order.

>>> import numpy as np
>>> ref = np.array([[1.0], [2.0]], np.float32)
>>> ok, err = compare(ref * (1 + 2**-20), ref)
>>> ok, err == 2**-20  # the error at 2.0 is 2**-19, over the largest output 2.0
(True, True)
>>> compare(ref + 0.5, ref)[0], compare(ref[:1], ref)[0]
(False, False)
"""

from __future__ import annotations

import numpy as np

#: Allowed error relative to max |onnx-reduce output|, per input dtype.
TOLERANCE: dict[str, float] = {
    "float64": 1e-9,
    "float32": 1e-4,
    "float16": 4e-3,
    "bfloat16": 3e-2,
}


def compare(out: np.ndarray, ref: np.ndarray, dtype: str | None = None) -> tuple[bool, float]:
    """(agrees, max error relative to max |ref|); NaN where ``ref`` is NaN counts as equal."""
    out = np.asarray(out)
    ref = np.asarray(ref)
    if out.shape != ref.shape:
        return False, float("inf")
    a = out.astype(np.float64)
    b = ref.astype(np.float64)
    nan_a, nan_b = np.isnan(a), np.isnan(b)
    if np.any(nan_a != nan_b):
        return False, float("inf")
    inf_b = np.isinf(b)
    if np.any(a[inf_b] != b[inf_b]) or np.any(np.isinf(a) & ~inf_b):
        return False, float("inf")
    finite = ~(nan_b | inf_b)
    if not np.any(finite):
        return True, 0.0
    scale = float(np.max(np.abs(b[finite])))
    err = float(np.max(np.abs(a[finite] - b[finite])))
    rel = err / scale if scale > 0 else err
    tol = TOLERANCE.get(dtype or ref.dtype.name, 1e-4)
    return rel <= tol, rel
