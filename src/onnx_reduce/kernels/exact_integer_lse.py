"""Integer ReduceLogSumExp where float64 cannot tell which side of an integer it is on.

An integer LSE is ``M + floor(f)`` or ``M + ceil(f)``
(:func:`.reference.integer_log_sum_exp_result`) with ``M`` the exact maximum and
``f = log(sum exp(x - M))``. ``f`` is never an integer k >= 1 (e**k is not a sum of integer
powers of e), but it can come within float64's rounding of one: ``[100, 99, 99, 99, 99, 98,
...]`` has f = 0.99999999999999999999952..., which float64 rounds to 1. Those outputs
(:func:`near_integer`) get ``f`` in extended precision (mpmath, the precision doubled until
the side is certain), and a float64 total that is unambiguous on that side.

>>> total = np.array([np.e, 2.0])
>>> near_integer(total, 2).tolist()  # log(e) = 1: too close to call; log 2: clear
[True, False]
>>> rows = np.array([[0, -1], [3, 3]], np.int64)  # f = log(1 + e**-1) = 0.31; log 2 = 0.69
>>> np.log(decided_totals(rows, np.array([0, 3], np.int64))).round(2).tolist()  # 0 + 1/4, 1 - 1/4
[0.25, 0.75]
"""

from __future__ import annotations

import math

import mpmath
import numpy as np

#: Precision (bits) of the first extended try, and the most any output may need.
FIRST_BITS = 128
MAX_BITS = 1 << 14


def near_integer(total: np.ndarray, count) -> np.ndarray:
    """Where ``f = log(total)`` (``total`` a float64 sum of ``count`` rounded terms, each of
    them at least 0 and the largest 1) may lie on the other side of an integer k >= 1 than its
    float64 value: within ``(count + 8) 2**-50 max(f, 1)`` of k (the terms' and the sum's
    roundings, and log's, with room to spare)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        f = np.log(total)
        k = np.rint(f)
        tolerance = (np.asarray(count, np.float64) + 8) * 2.0**-50 * np.maximum(f, 1.0)
        return (k >= 1) & (np.abs(f - k) <= tolerance)


def decided_totals(rows: np.ndarray, peaks: np.ndarray) -> np.ndarray:
    """For each integer row and its maximum, a float64 total whose log is a quarter from the
    nearest integer k, on the side of k where the exact ``f`` lies: the float64 rule then
    floors or ceils it as it would the exact ``f``."""
    totals = np.empty(len(rows))
    for i, (row, peak) in enumerate(zip(rows, peaks, strict=True)):
        gaps, counts = np.unique(np.uint64(peak) - row.astype(np.uint64), return_counts=True)
        k, above = _side(gaps, counts)
        totals[i] = math.exp(k + (0.25 if above else -0.25))
    return totals


def _side(gaps: np.ndarray, counts: np.ndarray) -> tuple[int, bool]:
    """(k, whether f > k) for f = log(sum counts e**-gaps) and k its nearest integer, in
    precision doubled until the distance to k exceeds the rounding."""
    bits = FIRST_BITS
    while True:
        with mpmath.workprec(bits + 32):
            keep = gaps <= bits + 64  # the rest add under 2**-bits of a total >= 1
            total = mpmath.fsum(int(c) * mpmath.exp(-int(g))
                                for g, c in zip(gaps[keep], counts[keep], strict=True))
            f = mpmath.log(total)
            k = int(mpmath.nint(f))
            if abs(f - k) > mpmath.ldexp(k + 1, -bits + 16) or bits >= MAX_BITS:
                return k, f > k
        bits *= 2
