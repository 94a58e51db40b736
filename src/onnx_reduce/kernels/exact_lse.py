"""Recompute the ReduceLogSumExp outputs a first computation cannot vouch for (Ziv's strategy).

A first computation (the fast kernels, the reference path) has an a-priori bound on the error
of each output, ``absolute + relative * |r|`` before the final rounding, from the reduced size
``n`` and the dtype alone (derivations: docs/accuracy.md). An output is *suspect* when that
bound could break the contract, 1 ulp (float16, bfloat16, float32) or 2 ulp (float64) of the
exact result: ``bound > (tolerance - 1/2) * ulp_below(r)``. That only happens when ``|r|`` is
small against the shift (the log-sum nearly cancels the maximum), so the test is one compare,
``|r| < threshold(dtype, n)``. Suspect outputs are recomputed here from their input slices:

1. compiled, in double-double (:func:`.fast.extended.dd_lse_rows`, about 104 bits), then
   the outputs it leaves undecided in triple-double (:func:`.fast.extended.td_lse_rows`, about
   150 bits); without numba in double-double (:func:`double_double_lse`, numpy, vectorized
   over the suspect slices): ``x - m`` exact by TwoDiff, ``exp`` by range reduction and a
   Taylor series, a pairwise sum, ``log`` by a Newton step on the ``exp``; each with its
   error bound ``E``;
2. outputs still undecided (the two ends of ``[r - E, r + E]`` round differently and ``E`` is
   over the tolerance) in mpmath at 128, 256, ... bits up to :data:`MAX_BITS` (then the last
   estimate is taken; no such input is known).

Specials (NaN, +-inf), single-element reductions and integers never come here.

>>> x = np.array([-0.6306035, -0.7598651], np.float32)
>>> r = np.array([-6.88e-15], np.float32)  # a first result: m + log1p(...) in float64
>>> limit = threshold(x.dtype, fast_bound(x.dtype, 2))
>>> refine_log_sum_exp(x[None], 1, r, suspects(r, x.dtype, limit))
>>> float(r[0])  # the exact LSE, 9.53666e-14, rounded to float32
9.536664670852305e-14
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction
from functools import lru_cache

import mpmath
import numpy as np

from ..spec.dtypes import EXTENDED, bfloat16
from .rounding import round_to

#: A stage of a recomputation: float64 rows -> (head, tail, bound) of each row's result.
Stage = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray, np.ndarray]]

__all__ = [
    "decide", "decide_in_stages", "double_double_lse", "fast_bound", "first_stage",
    "flagged_rows", "float_format",
    "reference_bound", "refine_log_sum_exp", "suspects", "threshold",
]

U = 2.0**-53
#: mpmath's last precision (bits) before the estimate is taken as it is.
MAX_BITS = 4096
#: Elements gathered per batch of suspect slices (float64 copies: 8 MiB).
BATCH_ELEMENTS = 1 << 20
#: float64 first results under this skip the double-double stage (:func:`stages`).
DD_FLOOR = 2.0**-36
_PRECISION = {np.dtype(np.float16): 11, bfloat16: 8, np.dtype(np.float32): 24,
              np.dtype(np.float64): 53}
_EMIN = {np.dtype(np.float16): -14, bfloat16: -126, np.dtype(np.float32): -126,
         np.dtype(np.float64): -1022}
#: Safety factor on the summed first-order error terms of the bounds.
SAFETY = 2.0
#: glibc documents log1p within 1 ulp (float64); numpy's float64 exp within 4 ulp is assumed.
_LOG1P_ULPS = 1.0
_NUMPY_EXP_ULPS = 4.0
#: :func:`.fast._exp.exp_nonpos`'s error (measured against mpmath, normal results).
_EXP_ULPS = 0.64


def tolerance_ulps(dtype: np.dtype) -> float:
    """The contract: 2 ulp for float64, 1 ulp for the narrower floats."""
    return 2.0 if dtype == np.float64 else 1.0


# ----------------------------------------------------------------------------- a-priori bounds


@lru_cache(maxsize=512)
def fast_bound(dtype: np.dtype, n: int) -> tuple[float, float]:
    """(absolute, relative) error bound of the fast kernels' float64 result before rounding.

    float64: ``x - m`` carried exactly, each term one half-ulp exp (0.64 ulp: 1.28 u
    relative), sums exact or compensated (error ~ n u**2), the log by a Newton step on the
    two-part exp (2**-56), ``m + log`` rounded once. Narrower floats: terms within 2**-37.77
    relative, blocks of 1024 (rows) or whole columns added in float64 (up to n - 1
    roundings), chunk and piece rescalings (3 u each), the shift's rounding (1.4 u per unit of
    log n), the log (:func:`.fast._exp.log1p_from`, 2.5 ulp: 5 u) of up to log(n) + 100 (a
    guessed shift), ``m + log1p`` in float64 (u |r|). Safety factor 2 on the sums of terms.
    """
    if n <= 1:
        return 0.0, 0.0
    log_n = math.log(n)
    if dtype == np.float64:
        return SAFETY * (_EXP_ULPS * 2.0 * U + 2.0**-56 + 4.0 * n * U * U), 0.0
    rescales = n // 8192 + 16 + 2
    terms = 2.0**-37.77 + U * (min(n, 1024) + n // 1024 + 4 + 3 * rescales + 1.4 * (log_n + 1))
    if n > 1024:  # a column's terms add up one by one
        terms += U * n
    return SAFETY * terms + 5 * U * (log_n + 101.0), U


@lru_cache(maxsize=512)
def reference_bound(dtype: np.dtype, n: int) -> tuple[float, float]:
    """(absolute, relative) error bound of the reference path's result before its rounding.

    It accumulates in float64 (narrow floats) or :data:`EXTENDED` (float64) with unit
    roundoff ``v``: numpy's exp within 4 ulp, the shift's rounding (1.4 v per unit of log n),
    numpy's pairwise sums (at most log2(n) + 24 roundings per term, and the blocks' partials),
    log1p within 1 ulp of log(n), and the final ``m + log1p`` (v |r|).
    """
    if n <= 1:
        return 0.0, 0.0
    wide = EXTENDED if dtype == np.float64 else np.dtype(np.float64)
    v = float(np.finfo(wide).eps) / 2
    log_n = math.log(n)
    terms = v * (2 * _NUMPY_EXP_ULPS + 1.4 * (log_n + 1) + math.log2(n) + 24 + n / 2**18)
    return SAFETY * terms + 2 * v * log_n * _LOG1P_ULPS, v


@lru_cache(maxsize=512)
def threshold(dtype: np.dtype, bound: tuple[float, float]) -> float:
    """The power of two at and under which results of ``dtype`` are suspect (-1: none are)."""
    absolute, relative = bound
    if absolute == 0.0:
        return -1.0  # exact: nothing is suspect
    p = _PRECISION[np.dtype(dtype)]
    room = (tolerance_ulps(dtype) - 0.5) * 2.0 ** (1 - p) - 2 * relative  # ulp inside a binade
    return 2.0 ** math.ceil(math.log2(absolute / room))


def suspects(result: np.ndarray, dtype: np.dtype, limit: float) -> np.ndarray:
    """Flat mask of the outputs of ``result`` (``dtype``) at or under ``limit`` in magnitude."""
    with np.errstate(invalid="ignore"):
        return np.abs(result.reshape(-1).astype(np.float64)) <= limit


# ----------------------------------------------------------------------------- refinement


def refine_log_sum_exp(view: np.ndarray, nkept: int, result: np.ndarray, mask: np.ndarray) -> None:
    """Recompute the outputs ``mask`` flags (flat, C order of the kept axes) in place in
    ``result``; ``view`` has the kept axes first, the reduced ones last."""
    flat = result.reshape(-1)
    wide = result.dtype == np.float64  # only float64 first results route (stages())
    for batch, rows in flagged_rows(view, nkept, mask):
        flat[batch] = _refined(rows, result.dtype, flat[batch] if wide else None)


def flagged_rows(view: np.ndarray, nkept: int, mask: np.ndarray, dtype: np.dtype = np.float64):
    """(flat output indices, their input slices as rows of ``dtype``) for the outputs ``mask``
    flags, in batches of about :data:`BATCH_ELEMENTS` elements (gathered from any layout)."""
    flagged = np.flatnonzero(mask)
    kept_shape = view.shape[:nkept]
    n = math.prod(view.shape[nkept:])
    per_batch = max(1, BATCH_ELEMENTS // max(n, 1))
    for start in range(0, flagged.size, per_batch):
        batch = flagged[start:start + per_batch]
        picked = view[np.unravel_index(batch, kept_shape)] if nkept else view[None]
        yield batch, picked.reshape(batch.size, n).astype(dtype)


def _refined(rows: np.ndarray, dtype: np.dtype, first: np.ndarray | None) -> np.ndarray:
    """The LSE of each float64 row (finite result), rounded to ``dtype`` within the contract:
    :func:`stages` (:func:`decide_in_stages`), then mpmath for what they leave."""
    values, decided = decide_in_stages(rows, dtype, stages(), first)
    for i in np.flatnonzero(~decided):
        values[i] = _mpmath_lse(rows[i], dtype)
    return values


def decide_in_stages(rows: np.ndarray, dtype: np.dtype, staged: tuple[tuple[Stage, float], ...],
                     first: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(values, decided): each ``(stage, floor)`` of ``staged`` in turn on the float64 rows
    still undecided, rounded to ``dtype`` by :func:`decide` (undecided values unset).
    ``first``: float64 first results (those under a stage's floor skip it), or None."""
    values = np.empty(rows.shape[0], dtype)
    pending = np.ones(rows.shape[0], bool)
    for stage, floor in staged:
        tried = pending if first is None or floor == 0.0 else pending & (np.abs(first) >= floor)
        if tried.all():  # every row: nothing to gather
            got, decided = decide(*stage(rows), dtype)
            np.copyto(values, got, where=decided)
            pending = ~decided
        elif tried.any():
            index = np.flatnonzero(tried)
            got, decided = decide(*stage(rows[index]), dtype)
            values[index[decided]] = got[decided]
            pending[index[decided]] = False
    return values, ~pending


def stages() -> tuple[tuple[Stage, float], ...]:
    """(stage, floor) cheapest first: compiled double-double (about a third of triple-double's
    cost), then :func:`first_stage`; without numba :func:`first_stage` alone. A float64 first
    result under ``floor`` in magnitude skips the stage: double-double's bound, ~2**-90, leaves
    float64 results within ~2**-39 of 0 undecided."""
    try:
        from .fast.extended import dd_lse_rows
    except ImportError:
        return ((first_stage(), 0.0),)
    return ((dd_lse_rows, DD_FLOOR), (first_stage(), 0.0))


def first_stage():
    """The most precise fast stage: compiled triple-double, or numpy's double-double where
    numba is missing (the triple-double stage decides ~2**44 times closer to 0)."""
    try:
        from .fast.extended import td_lse_rows
    except ImportError:
        return double_double_lse
    return td_lse_rows


def decide(head: np.ndarray, tail: np.ndarray, bound: np.ndarray, dtype: np.dtype):
    """Round ``head + tail`` to ``dtype``; decided where ``[r - bound, r + bound]`` rounds to
    one value, or where ``bound`` is within the contract's room."""
    estimate = head + tail
    widened = bound + U * np.abs(head) * (dtype != np.float64)
    low = round_to(head + (tail - widened), dtype)
    high = round_to(head + (tail + widened), dtype)
    value = round_to(estimate, dtype)
    room = (tolerance_ulps(dtype) - 0.5) * _ulp_below(value, dtype)
    decided = (low == high) | (widened <= room)
    return value, decided


def float_format(dtype: np.dtype) -> tuple[int, int]:
    """(significand bits with the implicit one, smallest normal exponent) of a float ``dtype``."""
    return _PRECISION[np.dtype(dtype)], _EMIN[np.dtype(dtype)]


def _ulp_below(value: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """The spacing of ``dtype`` just below ``|value|`` (at a power of two: the smaller one)."""
    p, emin = float_format(dtype)
    magnitude = np.abs(np.asarray(value, np.float64))
    fraction, exponent = np.frexp(magnitude)
    exponent = np.where(magnitude > 0, exponent - p - (fraction == 0.5), emin - p + 1)
    return np.ldexp(1.0, np.maximum(exponent, emin - p + 1))


# ----------------------------------------------------------------------------- double-double


def _two_sum(a, b):
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def _fast_two_sum(a, b):
    s = a + b
    return s, b - (s - a)


def _split(a):
    c = 134217729.0 * a
    high = c - (c - a)
    return high, a - high


def two_prod(a, b):
    """(p, e) with p = fl(a * b) and p + e = a * b exactly (Dekker; no overflow/underflow)."""
    p = a * b
    ah, al = _split(a)
    bh, bl = _split(b)
    return p, ((ah * bh - p) + ah * bl + al * bh) + al * bl


def _dd_add(ah, al, bh, bl):
    s, e = _two_sum(ah, bh)
    t, f = _two_sum(al, bl)
    s, e = _fast_two_sum(s, e + t)
    return _fast_two_sum(s, e + f)


def _dd_mul(ah, al, bh, bl):
    p, e = two_prod(ah, bh)
    return _fast_two_sum(p, e + (ah * bl + al * bh))


def _dd_const(value: Fraction) -> tuple[float, float]:
    high = float(value)
    return high, float(value - Fraction(high))


#: ln 2 in three parts: 40 bits (k * part exact for |k| < 2**13), then two float64s.
_LN2_1 = math.ldexp(math.floor(math.ldexp(math.log(2), 40)), -40)
with mpmath.workprec(240):
    _LN2_REST = mpmath.log(2) - _LN2_1
    _LN2_2 = float(_LN2_REST)
    _LN2_3 = float(_LN2_REST - _LN2_2)
#: 1/k! as double-doubles, k = 0..TAYLOR.
TAYLOR = 14
_INV_FACT = [_dd_const(Fraction(1, math.factorial(k))) for k in range(TAYLOR + 1)]
_SQUARINGS = 4


def _dd_exp(dh: np.ndarray, dl: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """exp(dh + dl) for -750 <= dh <= 0 as a double-double, relative error below 2**-100
    (results under 2**-1000 lose their low part: invisible beside the sum's 1)."""
    k = np.rint(dh / _LN2_1)
    rh = dh - k * _LN2_1  # exact: k has at most 11 bits, _LN2_1 40
    ph, pl = two_prod(k, np.full_like(k, _LN2_2))
    rh, rl = _dd_add(rh, dl, -ph, -pl - k * _LN2_3)
    scale = 2.0 ** -_SQUARINGS
    rh, rl = rh * scale, rl * scale
    eh, el = _INV_FACT[TAYLOR]
    eh, el = np.full_like(rh, eh), np.full_like(rh, el)
    for j in range(TAYLOR - 1, 0, -1):  # expm1(r) = r (1 + r/2 (1 + r/3 (...)))
        eh, el = _dd_mul(eh, el, rh, rl)
        eh, el = _dd_add(eh, el, *_INV_FACT[j])
    eh, el = _dd_mul(eh, el, rh, rl)
    for _ in range(_SQUARINGS):  # expm1(2r) = expm1(r) * (2 + expm1(r))
        th, tl = _dd_add(eh, el, 2.0, 0.0)
        eh, el = _dd_mul(eh, el, th, tl)
    eh, el = _dd_add(eh, el, 1.0, 0.0)
    with np.errstate(under="ignore"):
        return np.ldexp(eh, k.astype(np.int64)), np.ldexp(el, k.astype(np.int64))


def dd_sum_rows(h: np.ndarray, low: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Pairwise double-double sums of the rows of (h, low) (2-D); error about n * 2**-104
    relative for non-negative terms."""
    while h.shape[1] > 1:
        if h.shape[1] % 2:
            h = np.concatenate([h, np.zeros((h.shape[0], 1))], axis=1)
            low = np.concatenate([low, np.zeros((low.shape[0], 1))], axis=1)
        h, low = _dd_add(h[:, 0::2], low[:, 0::2], h[:, 1::2], low[:, 1::2])
    return h[:, 0], low[:, 0]


def dd_sums(high: np.ndarray, low: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Along the last axis of (high, low) pairs: (head, tail), the double-double sum
    (:func:`dd_sum_rows`) of the pairs whose ``high`` is finite, and ``plain``, the plain sum of
    ``high`` (inf or NaN where an element is; a non-finite term cannot enter a double-double)."""
    finite = np.isfinite(high)
    plain = np.add.reduce(high, axis=-1)
    rows = (-1, high.shape[-1])
    head, tail = dd_sum_rows(np.where(finite, high, 0.0).reshape(rows),
                             np.where(finite, low, 0.0).reshape(rows))
    return head.reshape(plain.shape), tail.reshape(plain.shape), plain


def double_double_lse(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(head, tail, bound): LSE of each row as head + tail within ``bound``."""
    finite = rows > -np.inf
    peak = np.max(np.where(finite, rows, -np.inf), axis=1)
    with np.errstate(invalid="ignore"):
        dh, dl = _two_sum(rows, -peak[:, None])
    live = finite & (dh > -745.0)
    dh = np.where(live, dh, 0.0)
    dl = np.where(live, dl, 0.0)
    th, tl = _dd_exp(dh, dl)
    th, tl = np.where(live, th, 0.0), np.where(live, tl, 0.0)
    sh, sl = dd_sum_rows(th, tl)
    lh, ll = _dd_log(sh, sl)
    head, tail = _dd_add(peak, np.zeros_like(peak), lh, ll)
    n = rows.shape[1]
    bound = 2.0**-90 * (2.0 + math.log2(n) + np.abs(peak) + np.abs(lh)) + n * 2.0**-1000
    return head, tail, bound


def _dd_log(sh: np.ndarray, sl: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """log(sh + sl) for sh + sl >= 1: log1p in float64, then a Newton step on the
    double-double exp (the error squares: below 2**-100 in absolute terms)."""
    start = np.maximum(np.log1p((sh - 1.0) + sl), 0.0)
    eh, el = _dd_exp(-start, np.zeros_like(start))
    ph, pl = _dd_mul(sh, sl, eh, el)
    correction = (ph - 1.0) + pl  # ph is within 2**-50 of 1: exact difference
    return _two_sum(start, correction)


# ----------------------------------------------------------------------------- mpmath


def _mpmath_lse(row: np.ndarray, dtype: np.dtype):
    """One row's LSE at rising precision until its rounding to ``dtype`` is decided."""
    finite = row[row > -np.inf]
    peak = float(finite.max())
    n = finite.size
    bits = 128
    while True:
        keep = finite[finite - peak > -(bits * 0.7 + math.log(n) + 2)]
        with mpmath.workprec(bits + 32):
            m = mpmath.mpf(peak)
            below = [mpmath.exp(mpmath.mpf(float(v)) - m) for v in keep if v < peak]
            ties = int(np.count_nonzero(keep == peak))
            log_sum = mpmath.log1p(mpmath.fsum(below) + (ties - 1))
            r = m + log_sum
            bound = mpmath.ldexp(abs(m) + log_sum + 2, -bits)
            low, high = float(r - bound), float(r + bound)
            value = round_to(np.array([float(r)]), dtype)
        ends = round_to(np.array([low, high]), dtype)
        room = (tolerance_ulps(dtype) - 0.5) * _ulp_below(value, dtype)[0]
        width = float(bound) + U * abs(float(r)) * (dtype != np.float64)
        if ends[0] == ends[1] or width <= room or bits >= MAX_BITS:
            return value[0]
        bits *= 2
