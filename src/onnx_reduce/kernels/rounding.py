"""Round an accumulator array once to the output dtype."""

from __future__ import annotations

import numpy as np

from ..spec.dtypes import bfloat16


def round_to(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Round ``values`` (float64 or wider) to ``dtype`` with a single rounding.

    numpy rounds float64 to float16/float32 correctly; ml_dtypes goes float64 -> float32 ->
    bfloat16, which can round twice. For bfloat16 the first step is made round-to-odd, which
    makes the pair equal to one correct rounding. Always an array, 0-d included (a ufunc's
    result over every axis is a numpy scalar): callers refine the rounded values in place.

    >>> float(round_to(np.array([1 + 2**-8 + 2**-30]), bfloat16)[0])
    1.0078125
    """
    dtype = np.dtype(dtype)
    values = np.asarray(values)
    if dtype != bfloat16:
        with np.errstate(over="ignore"):  # a true result beyond the dtype's range is inf
            return values.astype(dtype)
    wide = values.astype(np.float64)
    with np.errstate(over="ignore"):
        narrow = wide.astype(np.float32)
    back = narrow.astype(np.float64)
    bits = narrow.view(np.uint32)
    with np.errstate(invalid="ignore"):
        inexact = (back != wide) & np.isfinite(wide) & (bits & 1 == 0)
        step = np.where(np.abs(back) < np.abs(wide), 1, -1).astype(np.int64)
    bits = np.asarray(bits.astype(np.int64) + np.where(inexact, step, 0)).astype(np.uint32)
    return bits.view(np.float32).astype(bfloat16)
