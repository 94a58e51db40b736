"""Recompute the ReduceLogSum outputs a first computation cannot vouch for (Ziv's strategy, as
:mod:`.exact_lse` does for ReduceLogSumExp), and the exact integer log.

The first computation sums in a wide accumulator of unit roundoff ``v`` and takes the log. Its
sum ``S~`` is within ``E = gamma(n) * A`` of the exact ``S`` (``A`` the sum of magnitudes: the
classic summation bound), so ``log S~`` is within ``E / (S~ - E)`` of ``log S``, plus the log's
own rounding (``2 v |r|``). Where the sum cancels (``S << A``) or is close to 1 (``|log S|``
tiny), that can exceed the contract (1 ulp, float64 2): those outputs are *suspect*
(:func:`log_sum_suspects`, a few array operations) and are recomputed: first from compiled
triple-double sums and logs (:func:`.fast.extended.td_log_sum_rows`, narrower dtypes after
double-double's, :func:`.fast.extended.dd_log_sum_rows`; without numba a numpy
double-double sum, which decides narrow dtypes only), kept where the bound decides the
rounding, the rest from the exact sum (an expansion of ``math.fsum`` partial sums) with mpmath
at 128 bits: ``log1p(S - 1)`` near 1, ``log S`` elsewhere, rounded to the dtype (within
1/2 ulp + 2**-120).
Derivation: docs/accuracy.md.

>>> x = np.array([[2.0**100, 1.0, -2.0**100]], np.float32)
>>> sums = np.array([[0.0, 2.0**101]])  # a float64 sum loses the 1: log 0 = -inf
>>> r = np.array([-np.inf], np.float32)
>>> bool(log_sum_suspects(sums, r, x.dtype, 3)[0])
True
>>> refine_log_sum(x, 1, r, np.array([True]))
>>> float(r[0])  # log 1
0.0
"""

from __future__ import annotations

import bisect
import math
from fractions import Fraction
from functools import lru_cache

import mpmath
import numpy as np

from ..spec.dtypes import accumulator
from .exact_lse import (
    SAFETY,
    _ulp_below,
    dd_sum_rows,
    decide,
    decide_in_stages,
    flagged_rows,
    tolerance_ulps,
)
from .rounding import round_to

__all__ = [
    "exact_log_sum", "first_stage", "floor_log", "log_sum_suspects", "refine_log_sum", "sum_bound",
]

#: Working precision (bits) of the exact recomputation's log.
BITS = 128


@lru_cache(maxsize=512)
def sum_bound(dtype: np.dtype, n: int) -> tuple[float, float]:
    """(gamma, v): the reference path's sum of ``n`` elements of ``dtype`` is within
    ``gamma * sum|x|`` of the exact sum; ``v`` is its accumulator's unit roundoff.

    numpy's pairwise sums of contiguous rows: at most ``log2(n) + 24`` roundings per term, plus
    one per block partial (``n / 2**18``) and the conversion of the magnitudes; safety 2. One
    element is exact."""
    v = float(np.finfo(accumulator(dtype)).eps) / 2
    if n <= 1:
        return 0.0, v
    return SAFETY * v * (math.log2(n) + 26 + n / 2**18), v


def log_sum_suspects(
    sums: np.ndarray,
    rounded: np.ndarray,
    dtype: np.dtype,
    n: int,
    bound: tuple[float, float] | None = None,
) -> np.ndarray:
    """Flat mask of the outputs whose log could be off by more than the contract.

    ``sums[..., 0]`` is the computed sum, ``sums[..., 1]`` the sum of magnitudes, ``rounded``
    the log rounded to ``dtype``; ``bound`` is the first computation's ``(gamma, v)`` (default:
    the reference path's, :func:`sum_bound`; a fast kernel passes its own). Suspect: finite sums
    with a nonzero bound ``E`` whose sign is uncertain (``|S~| <= E``), or positive with
    ``E / (S~ - E) + 2 v |r|`` over the room the contract leaves after the final rounding."""
    gamma, v = sum_bound(np.dtype(dtype), n) if bound is None else bound
    total = sums[..., 0].reshape(-1)  # in the accumulator's dtype: float64 sums may exceed
    r = rounded.reshape(-1).astype(np.float64)  # the float64 range in x86's long double
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        error = gamma * sums[..., 1].reshape(-1)
        finite = np.isfinite(total) & np.isfinite(error) & (error > 0)
        log_error = error / (total - error) + 2 * v * np.abs(r)
        room = (tolerance_ulps(dtype) - 0.5) * _ulp_below(np.where(np.isfinite(r), r, 1.0), dtype)
        uncertain_sign = np.abs(total) <= error
        return finite & (uncertain_sign | ((total > error) & (log_error > room)))


def refine_log_sum(view: np.ndarray, nkept: int, result: np.ndarray, mask: np.ndarray) -> None:
    """Recompute the outputs ``mask`` flags (flat, C order of the kept axes) in place in
    ``result`` from their slices of ``view`` (kept axes first, reduced ones last)."""
    flat = result.reshape(-1)
    for batch, rows in flagged_rows(view, nkept, mask):
        values, decided = first_stage(rows, result.dtype)
        for i in np.flatnonzero(~decided):
            values[i] = exact_log_sum(rows[i], result.dtype)
        flat[batch] = values


def first_stage(rows: np.ndarray, dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """(values, decided): the log of each row's sum rounded to ``dtype``, and where that is
    within the contract: from compiled triple-double sums and logs (every dtype; narrower
    dtypes first in double-double, which decides their sums near 1 at about half the cost), or
    where numba is missing from :func:`_double_double_log_sum` (narrow dtypes only)."""
    try:
        from .fast.extended import dd_log_sum_rows, td_log_sum_rows
    except ImportError:
        return _double_double_log_sum(rows, dtype)
    if dtype == np.float64:  # its sums near 1 need more than double-double
        return decide(*td_log_sum_rows(rows), dtype)
    return decide_in_stages(rows, dtype, ((dd_log_sum_rows, 0.0), (td_log_sum_rows, 0.0)))


#: Unit roundoff of float64.
_U = 2.0**-53


def _double_double_log_sum(rows: np.ndarray, dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """(values, decided): the log of each row's sum from a pairwise double-double sum, rounded
    to ``dtype``; decided where ``[r - E, r + E]`` rounds to one value (narrow dtypes only: a
    float64 result needs more than float64's log1p, so float64 rows are never decided here).

    The accurate double-double addition errs by at most 3 u**2 of its result, so the sum is
    within ``2**-100 (log2 n + 2) sum|x|`` of the exact one; ``head - 1`` is exact near 1
    (Sterbenz), ``log1p`` and ``log`` err by 1 ulp (doubled for safety)."""
    head, tail = dd_sum_rows(rows, np.zeros_like(rows))
    sum_error = 2.0**-100 * (math.log2(rows.shape[1]) + 2) * np.abs(rows).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        d = (head - 1.0) + tail
        near = np.abs(head - 1.0) < 0.5
        r = np.where(near, np.log1p(d), np.log(head) + tail / head)
        error = (sum_error + _U * np.abs(d)) / (head - sum_error) + 4 * _U * np.abs(r)
        values = round_to(r, dtype)
        low, high = round_to(r - error, dtype), round_to(r + error, dtype)
        decided = (head > 2 * sum_error) & np.isfinite(r) & (low == high)
    return values, decided & (np.dtype(dtype) != np.float64)


def exact_log_sum(row: np.ndarray, dtype: np.dtype) -> float:
    """log of the exact sum of a row of finite float64s, rounded to ``dtype`` (0: -inf,
    negative: NaN)."""
    total = _exact_sum(row)
    if total <= 0:
        return -math.inf if total == 0 else math.nan
    with mpmath.workprec(BITS):
        near_one = abs(total - 1) < Fraction(1, 2)
        value = mpmath.log1p(_mpf(total - 1)) if near_one else mpmath.log(_mpf(total))
        return float(round_to(np.array([float(value)]), dtype)[0])


def _exact_sum(row: np.ndarray) -> Fraction:
    """The exact sum of finite float64s: ``math.fsum`` (correctly rounded) again and again on
    the values and the negated partial sums so far, until the rest is exactly 0; Fractions
    where a partial sum overflows."""
    values = row.tolist()
    parts: list[float] = []
    try:
        while len(parts) < 64:  # each part is 2**-52 of the previous rest or less: ~40 at most
            part = math.fsum(values)
            if part == 0.0:
                return sum(map(Fraction, parts), Fraction(0))
            parts.append(part)
            values.append(-part)
    except OverflowError:
        pass
    return sum(map(Fraction, row.tolist()), Fraction(0))


def _mpf(value: Fraction) -> mpmath.mpf:
    return mpmath.mpf(value.numerator) / value.denominator


# ----------------------------------------------------------------------------- integers


def floor_log(dtype: np.dtype, total: int) -> int:
    """``floor(log total)`` for an exact integer sum ``total >= 1`` (integer ReduceLogSum);
    ``ValueError`` for ``total <= 0``, whose log (-inf, NaN) ``dtype`` cannot represent.

    >>> floor_log(np.dtype(np.int32), 7), floor_log(np.dtype(np.int64), 2**63)
    (1, 43)
    """
    if total <= 0:
        what = "-inf" if total == 0 else "NaN"
        raise ValueError(
            f"ReduceLogSum: an output's sum is {total}, whose log ({what}) {dtype} cannot "
            "represent"
        )
    index = bisect.bisect_right(_exp_ceilings(), total) - 1
    if index == len(_exp_ceilings()) - 1:  # pragma: no cover - sums stay below 2**97
        raise AssertionError(f"ReduceLogSum: sum {total} beyond the table")
    return index


@lru_cache(maxsize=1)
def _exp_ceilings() -> list[int]:
    """``ceil(e**k)`` for k = 0..80: ``total >= e**k`` exactly when ``total >= ceil(e**k)``
    (``e**k`` is irrational for k >= 1), so ``floor(log total)`` is a bisection, exact."""
    with mpmath.workprec(256):
        return [1] + [int(mpmath.ceil(mpmath.exp(k))) for k in range(1, 81)]
