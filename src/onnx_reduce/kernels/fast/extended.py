"""Triple-double log-sum-exp of float64 rows, compiled: the stage of :mod:`..exact_lse`'s
recomputation of suspect ReduceLogSumExp outputs between double-double and mpmath.

Three float64 parts carry about 150 bits, enough to decide the rounding of results within
2**-34 of 0 that double-double's 106 bits cannot, such as the LSE of log-softmax rows
(~1e-16): ``x - m`` exact, exp by a reduction to ``|r| <= ln2/64`` (ln2/32 in four parts, a
table of 2**(j/32)) and a degree-18 series whose inner levels run in float64 and
double-double, a pairwise sum, log by log1p and a third-order correction. Each step is one
loop over a block of rows' elements, so that it vectorizes: about 50 ns per element on one
core (mpmath: ~25 us; the numpy double-double stage: ~0.9 us).

:func:`td_lse_rows` takes C-contiguous float64 rows with a finite maximum (no NaN, no +inf)
and returns ``(head, tail, bound)``: the LSE of each row is ``head + tail`` within ``bound``,
``2**-140 (2 + log2 n + |m| + |L|) + n 2**-1000 + 2**-104 |head|`` (the last term covers
``tail``, the rounded sum of the two low parts). Measured against mpmath: exp within
2**-157.5 relative, results near 0 within 2**-160 (2 + log2 n + |m| + |L|)
(docs/accuracy.md). Error-free transformations need IEEE arithmetic: nothing here is
compiled with fast-math flags, and products' errors come from a true fused multiply-add
(``llvm.fma``).

>>> import numpy as np
>>> a = -8.75651076269652e-27  # the float64 nearest log1p(-exp(-60))
>>> head, tail, bound = td_lse_rows(np.array([[-60.0, a]]))
>>> bool(0.0 < abs(head[0]) < 1e-40)  # log(exp(-60) + exp(a)): a's rounding error, ~2**-139
True
"""

from __future__ import annotations

import math
from fractions import Fraction

import mpmath
import numpy as np
from llvmlite import ir
from numba import njit, prange, types
from numba.core import cgutils
from numba.extending import intrinsic

from ._common import num_threads, parallel_section, threads_now, two_sum
from ._exp import as_float64

__all__ = ["TD_BOUND", "td_log_sum_rows", "td_lse_rows"]

#: The triple-double stage's error bound per unit of ``2 + log2 n + |m| + |L|``.
TD_BOUND = 2.0**-140
_LIVE = -745.0  # exp of a gap at or under this is below the smallest subnormal: a zero term


@intrinsic
def fma(typingctx, a, b, c):  # type: ignore[no-untyped-def]
    """a * b + c rounded once (LLVM's ``fma``: the instruction, or libm's exact fallback)."""
    if not all(t == types.float64 for t in (a, b, c)):
        return None

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        double = ir.DoubleType()
        fnty = ir.FunctionType(double, [double, double, double])
        return builder.call(cgutils.get_or_insert_function(builder.module, fnty, "llvm.fma.f64"),
                            args)

    return types.float64(types.float64, types.float64, types.float64), codegen


@njit(cache=True, inline="always")
def two_prod(a, b):
    """(p, e): p = fl(a * b), p + e = a * b exactly."""
    p = a * b
    return p, fma(a, b, -p)


@njit(cache=True, inline="always")
def _pow2(k):
    """The two float64 factors whose product is 2**k, each normal, for -2044 <= k <= 2046."""
    half = k >> 1
    return as_float64((half + 1023) << 52), as_float64((k - half + 1023) << 52)


def _split3(value) -> tuple[float, float, float]:
    """A rational or mpmath value as three float64 parts, each the rounding of what is left."""
    parts = []
    for _ in range(3):
        parts.append(float(value))
        value -= type(value)(parts[-1]) if isinstance(value, Fraction) else parts[-1]
    return parts[0], parts[1], parts[2]


#: exp(x) = 2**q 2**(j/32) exp(r): x = k ln2/32 + r, |r| <= ln2/64, k = 32 q + j. ln2/32 is
#: _STEP_HI (36 bits: k _STEP_HI is exact for |k| < 2**17) plus three parts.
_TABLE_BITS = 5
with mpmath.workprec(400):
    _STEP = mpmath.log(2) / 2**_TABLE_BITS
    _STEP_HI = math.ldexp(int(mpmath.floor(mpmath.ldexp(_STEP, 41))), -41)
    _STEP_LO = _split3(_STEP - _STEP_HI)
    _INV_STEP = float(1 / _STEP)
    #: 2**(j/32) in three parts: row p holds part p.
    _POW2 = np.array([_split3(mpmath.power(2, mpmath.mpf(j) / 2**_TABLE_BITS))
                      for j in range(2**_TABLE_BITS)]).T.copy()
#: exp(r) - 1 = r (1 + r/2 (1 + r/3 (...))) to degree 18 (r**19/19! < 2**-180); level i of the
#: nesting costs its precision times ~|r|**i / i!: levels 13-18 in float64, 8-12 in
#: double-double, 1-7 in triple-double keep every level's error below 2**-160.
_DEGREE = 18
_DD_LEVEL = 12
_TD_LEVEL = 7
_FACT = np.array([_split3(Fraction(1, math.factorial(i))) for i in range(_DEGREE + 1)]).T.copy()


@njit(cache=True, inline="always")
def _fast_two_sum(a, b):
    s = a + b
    return s, b - (s - a)


@njit(cache=True, inline="always")
def _dd_add(ah, al, bh, bl):
    """a + b in double-double (relative error about 2**-104)."""
    s, e = two_sum(ah, bh)
    t, f = two_sum(al, bl)
    s, e = _fast_two_sum(s, e + t)
    return _fast_two_sum(s, e + f)


@njit(cache=True, inline="always")
def _dd_mul(ah, al, bh, bl):
    """a * b in double-double (relative error about 2**-104)."""
    p, e = two_prod(ah, bh)
    return _fast_two_sum(p, e + (ah * bl + al * bh))


@njit(cache=True, inline="always")
def _renorm(a, b, c):
    """(a, b, c) with the same exact sum, each part within half an ulp of the one before."""
    b, c = two_sum(b, c)
    a, b = two_sum(a, b)
    b, c = two_sum(b, c)
    return a, b, c


@njit(cache=True, inline="always")
def _td_add(a0, a1, a2, b0, b1, b2):
    """a + b, absolute error about 2**-157 max(|a|, |b|)."""
    s0, e0 = two_sum(a0, b0)
    s1, e1 = two_sum(a1, b1)
    s1, e2 = two_sum(s1, e0)
    return _renorm(s0, s1, (a2 + b2) + (e1 + e2))


@njit(cache=True, inline="always")
def _td_mul(a0, a1, a2, b0, b1, b2):
    """a * b, relative error about 2**-157 (the parts' products below 2**-159 dropped)."""
    p0, q0 = two_prod(a0, b0)
    p1, q1 = two_prod(a0, b1)
    p2, q2 = two_prod(a1, b0)
    low = ((a0 * b2 + a2 * b0) + a1 * b1) + (q1 + q2)
    s1, e1 = two_sum(q0, p1)
    s1, e2 = two_sum(s1, p2)
    return _renorm(p0, s1, low + (e1 + e2))


@njit(cache=True)
def _td_reduce(t, k, r, n):
    """r <- t[0] + t[1] - k ln2/32 as three parts, k = rint(32 t[0] / ln 2) (first n)."""
    for j in range(n):
        k[j] = np.rint(t[0, j] * _INV_STEP)
        a0, a1, a2 = _renorm(t[0, j] - k[j] * _STEP_HI, t[1, j], 0.0)  # exact difference
        b0, b1 = two_prod(k[j], _STEP_LO[0])
        a0, a1, a2 = _td_add(a0, a1, a2, -b0, -b1, 0.0)
        b0, b1 = two_prod(k[j], _STEP_LO[1])
        r[0, j], r[1, j], r[2, j] = _td_add(a0, a1, a2, -b0, -b1, -k[j] * _STEP_LO[2])


@njit(cache=True)
def _td_expm1_reduced(t, r, n):
    """t <- exp(r) - 1 as three parts (first n), |r| <= ln2/64: the nesting's inner levels in
    float64, then double-double, then triple-double (constants above)."""
    for j in range(n):
        t[0, j], t[1, j], t[2, j] = _FACT[0, _DEGREE], 0.0, 0.0
    for i in range(_DEGREE - 1, _DD_LEVEL, -1):
        c = _FACT[0, i]
        for j in range(n):
            t[0, j] = t[0, j] * r[0, j] + c
    for i in range(_DD_LEVEL, _TD_LEVEL, -1):
        c0, c1 = _FACT[0, i], _FACT[1, i]
        for j in range(n):
            a0, a1 = _dd_mul(t[0, j], t[1, j], r[0, j], r[1, j])
            t[0, j], t[1, j] = _dd_add(a0, a1, c0, c1)
    for i in range(_TD_LEVEL, 0, -1):
        c0, c1, c2 = _FACT[0, i], _FACT[1, i], _FACT[2, i]
        for j in range(n):
            a0, a1, a2 = _td_mul(t[0, j], t[1, j], t[2, j], r[0, j], r[1, j], r[2, j])
            t[0, j], t[1, j], t[2, j] = _td_add(a0, a1, a2, c0, c1, c2)
    for j in range(n):
        t[0, j], t[1, j], t[2, j] = _td_mul(t[0, j], t[1, j], t[2, j],
                                            r[0, j], r[1, j], r[2, j])


@njit(cache=True)
def _td_exp_all(t, keep, k, r, n):
    """t <- keep * exp(t[0] + t[1]) as three parts for the first ``n`` elements,
    -746 <= t[0] <= 0, relative error below 2**-150 (parts under 2**-1022 lose their low bits:
    absolute error of a few 2**-1074); each step one loop over the elements (so that it
    vectorizes); k and r are scratch."""
    _td_reduce(t, k, r, n)
    _td_expm1_reduced(t, r, n)
    mask = 2**_TABLE_BITS - 1
    for j in range(n):
        a0, a1, a2 = _td_add(t[0, j], t[1, j], t[2, j], 1.0, 0.0, 0.0)
        i = np.int64(k[j])
        row = i & mask
        a0, a1, a2 = _td_mul(a0, a1, a2, _POW2[0, row], _POW2[1, row], _POW2[2, row])
        f, g = _pow2(i >> _TABLE_BITS)
        t[0, j], t[1, j], t[2, j] = (((a0 * f) * g) * keep[j], ((a1 * f) * g) * keep[j],
                                     ((a2 * f) * g) * keep[j])


@njit(cache=True, inline="always")
def _log_start(s0, s1):
    """log(s0 + s1) within an ulp or two (log1p near 1, where s0 - 1 is exact)."""
    return np.log1p((s0 - 1.0) + s1) if s0 > 0.5 else np.log(s0)


@njit(cache=True)
def _td_log_all(s, e, keep, k, r, n):
    """s <- log(s) for the first ``n`` columns, 2**-1000 < s < 2**1000: a float64 start, then
    log(1 + c) = c - c**2/2 + c**3/3 with 1 + c = s exp(-start), |c| <= 2**-41 (start is
    within two ulps of |log s| < 700); e, keep, k and r are scratch."""
    for i in range(n):
        e[0, i], e[1, i], keep[i] = -_log_start(s[0, i], s[1, i]), 0.0, 1.0
    _td_exp_all(e, keep, k, r, n)
    for i in range(n):
        start = _log_start(s[0, i], s[1, i])
        p0, p1, p2 = _td_mul(s[0, i], s[1, i], s[2, i], e[0, i], e[1, i], e[2, i])
        c0, c1, c2 = _renorm(p0 - 1.0, p1, p2)  # p0 - 1 is exact (Sterbenz)
        q0, q1 = two_prod(c0, c0)
        q1 += 2.0 * c0 * c1
        a0, a1, a2 = _td_add(start, 0.0, 0.0, c0, c1, c2)
        a0, a1, a2 = _td_add(a0, a1, a2, -0.5 * q0, -0.5 * q1, 0.0)
        s[0, i], s[1, i], s[2, i] = _td_add(a0, a1, a2, c0 * c0 * c0 / 3.0, 0.0, 0.0)


@njit(cache=True)
def _td_sum(t, lo, n):
    """The pairwise triple-double sum of ``t[:, lo:lo + n]``, overwriting it."""
    while n > 1:
        half = (n + 1) // 2
        for i in range(half):
            a, b = lo + i, lo + 2 * i
            if 2 * i + 1 < n:
                t[0, a], t[1, a], t[2, a] = _td_add(t[0, b], t[1, b], t[2, b],
                                                    t[0, b + 1], t[1, b + 1], t[2, b + 1])
            else:
                t[0, a], t[1, a], t[2, a] = t[0, b], t[1, b], t[2, b]
        n = half
    return t[0, lo], t[1, lo], t[2, lo]


@njit(cache=True)
def _gaps(rows, peaks, t, keep):
    """Each row's maximum into ``peaks``; t[0] + t[1] = x - its row's maximum exactly, in
    row order; gaps at or under :data:`_LIVE` become 0 with keep 0."""
    count, n = rows.shape
    for i in range(count):
        peak = -np.inf
        for j in range(n):
            peak = max(peak, rows[i, j])
        peaks[i] = peak
        for j in range(n):
            dh, dl = two_sum(rows[i, j], -peak)
            live = dh > _LIVE
            t[0, i * n + j], t[1, i * n + j], keep[i * n + j] = (
                (dh, dl, 1.0) if live else (0.0, 0.0, 0.0))


#: Elements per block of rows (a row longer than this is a block on its own).
BLOCK = 1 << 14
#: What :func:`_blocks` computes of each row.
LSE, LOG_SUM = 0, 1


def td_lse_rows(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(head, tail, bound) of each row's LSE in triple-double (module docstring)."""
    return _rows(rows, LSE)


def td_log_sum_rows(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(head, tail, bound) of the log of each row's sum (finite rows): the log is
    ``head + tail`` within ``bound``, ``E / (S - E) + 2**-140 (1 + |r|) + 2**-104 |r|`` with
    ``E = 2**-140 (2 + log2 n) sum|x|`` the triple-double sum's bound; ``bound`` is inf where
    that cannot be used: ``S <= E``, or S outside (2**-1000, 2**1000)."""
    return _rows(rows, LOG_SUM)


def _rows(rows: np.ndarray, kind: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``kind`` of each row, a block of rows at a time (short rows vectorize across rows);
    two blocks or more are shared out across numba's threads."""
    count, n = rows.shape
    out = np.empty((3, count))
    per = max(1, BLOCK // n)
    if count >= 2 * per and num_threads() > 1:
        with parallel_section():
            _threaded_blocks(rows, per, kind, out)
    else:
        _blocks(rows, per, kind, 0, count, out)
    return out[0], out[1], out[2]


@njit(cache=True, parallel=True)
def _threaded_blocks(rows, per, kind, out):
    """:func:`_blocks` on runs of whole blocks, one run per thread."""
    blocks = (rows.shape[0] + per - 1) // per
    runs = min(blocks, threads_now())
    for c in prange(runs):
        i = np.int64(c)  # prange indices may be unsigned
        first = blocks * i // runs * per
        _blocks(rows, per, kind, first, min(rows.shape[0], blocks * (i + 1) // runs * per), out)


@njit(cache=True)
def _blocks(rows, per, kind, first, stop, out):
    """out[:, i] = (head, tail, bound) of ``kind`` for rows first to stop, ``per`` rows at a
    time."""
    n = rows.shape[1]
    scratch = (np.empty((3, per * n)), np.empty((3, per * n)), np.empty(per * n),
               np.empty(per * n), np.empty(per), np.empty((3, per)), np.empty((3, per)))
    for start in range(first, stop, per):
        block, results = rows[start:min(stop, start + per)], out[:, start:min(stop, start + per)]
        if kind == LSE:
            _lse_block(block, scratch, results)
        else:
            _log_sum_block(block, scratch, results)


@njit(cache=True)
def _lse_block(rows, scratch, out):
    """out[:, i] = (head, tail, bound) of row i's LSE."""
    t, r, keep, k, peaks, sums, e = scratch
    m, n = rows.shape
    _gaps(rows, peaks, t, keep)
    _td_exp_all(t, keep, k, r, m * n)
    for i in range(m):
        sums[0, i], sums[1, i], sums[2, i] = _td_sum(t, i * n, n)
    _td_log_all(sums, e, keep, k, r, m)
    for i in range(m):
        r0, r1, r2 = _td_add(peaks[i], 0.0, 0.0, sums[0, i], sums[1, i], sums[2, i])
        units = 2.0 + math.log2(n) + abs(peaks[i]) + abs(sums[0, i])
        out[0, i], out[1, i] = r0, r1 + r2
        out[2, i] = TD_BOUND * units + n * 2.0**-1000 + 2.0**-104 * abs(r0)


@njit(cache=True)
def _log_sum_block(rows, scratch, out):
    """out[:, i] = (head, tail, bound) of the log of row i's sum (:func:`td_log_sum_rows`);
    a row whose sum is 1 to triple-double precision is checked exactly (its log, 0, is the one
    result no bound can decide)."""
    t, r, keep, k, errors, sums, e = scratch
    m, n = rows.shape
    for i in range(m):
        magnitude = 0.0
        for j in range(n):
            t[0, i * n + j], t[1, i * n + j], t[2, i * n + j] = rows[i, j], 0.0, 0.0
            magnitude += abs(rows[i, j])
        s0, s1, s2 = _td_sum(t, i * n, n)
        error = TD_BOUND * (2.0 + math.log2(n)) * magnitude * (1.0 + n * 2.0**-52)
        usable = 2.0**-1000 < s0 < 2.0**1000 and s0 - error > 0.0
        sums[0, i], sums[1, i], sums[2, i] = (s0, s1, s2) if usable else (1.0, 0.0, 0.0)
        errors[i] = error / (s0 - error) * (1.0 + 2.0**-50) if usable else np.inf
        if (s0, s1, s2) == (1.0, 0.0, 0.0) and _sums_to_one(rows[i]):
            errors[i] = -1.0  # exact: log 1 = 0
    _td_log_all(sums, e, keep, k, r, m)
    for i in range(m):
        r0 = sums[0, i]
        out[0, i], out[1, i] = r0, sums[1, i] + sums[2, i]
        out[2, i] = errors[i] + TD_BOUND * (1.0 + abs(r0)) + 2.0**-104 * abs(r0)
        if errors[i] < 0.0:
            out[:, i] = 0.0


#: Partials of :func:`_sums_to_one`: each holds 53 bits of a different binade, 2098 in all.
_MOST_PARTIALS = 48


@njit(cache=True)
def _sums_to_one(row):
    """Whether the finite float64s of ``row`` sum to exactly 1 (``math.fsum``'s exact
    partials, Shewchuk: the sum of non-overlapping partials is 0 only if each is); False also
    where it cannot tell (an overflow)."""
    partials = np.zeros(_MOST_PARTIALS)
    count = 0
    for j in range(row.size + 1):
        x = row[j] if j < row.size else -1.0
        kept = 0
        for p in range(count):
            y = partials[p]
            if abs(x) < abs(y):
                x, y = y, x
            high = x + y
            low = y - (high - x)
            if low != 0.0:
                partials[kept] = low
                kept += 1
            x = high
        if kept == _MOST_PARTIALS or abs(x) == np.inf:
            return False  # not proven (the exact path decides)
        partials[kept] = x
        count = kept + 1
    return not np.any(partials[:count])
