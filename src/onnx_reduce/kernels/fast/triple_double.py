"""Triple-double arithmetic for numba: a value is the unevaluated sum of three float64 parts
(about 150 bits), renormalised after each operation; and the elementwise exp, log and
pairwise sum that the exact recomputations build on (:mod:`.extended`), also in double-double.

Operations: :func:`add` (absolute error about 2**-157 of the larger operand), :func:`mul`
(relative, about 2**-157), :func:`renorm`, :func:`two_prod` (a product and its exact error,
by a true FMA). :func:`exp_all` works on a (3, n) array in place, -746 <= x <= 700 (results under
2**-915 lose low parts to the subnormal range): ``x = k ln2/256 + r``,
``|r| <= ln2/512`` (ln2/256 as a 33-bit part, so ``k`` times it is exact, plus three parts), a
table of 2**(j/256), and ``exp(r) - 1`` to degree 13 whose inner levels run in float64 and
double-double; measured within 2**-157.6 relative against mpmath. :func:`log_all`: a float64
start, then ``log(1 + c) = c - c**2/2 + c**3/3``. Their double-double twins (``*_dd``, about
104 bits at a third of the cost) are the cheaper stage the recomputations try first. Each
elementwise step is one loop over the elements, so that it vectorizes. Error-free
transformations need IEEE arithmetic: nothing here is compiled with fast-math flags.

>>> import numpy as np
>>> t = np.zeros((3, 1)); t[0, 0] = -1.0
>>> exp_all(t, np.ones(1), np.empty(1), np.empty((3, 1)), 1)
>>> float(t[0, 0]), float(t[1, 0])  # exp(-1) to ~150 bits, the first two parts
(0.36787944117144233, -1.2428753672788363e-17)
"""

from __future__ import annotations

import math
from fractions import Fraction

import mpmath
import numpy as np
from numba import njit

from ._common import two_sum
from ._exp import as_float64, log1p_from
from ._lanes import fma

__all__ = ["add", "dd_add", "exp_all", "exp_all_dd", "log_all", "log_all_dd", "mul",
           "pairwise_sum", "pairwise_sum_dd", "renorm", "two_prod"]


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


#: exp(x) = 2**q 2**(j/256) exp(r): x = k ln2/256 + r, |r| <= ln2/512, k = 256 q + j. ln2/256
#: is _STEP_HI (33 bits: k _STEP_HI is exact for |k| < 2**20) plus three parts. (A table of 32
#: needed three more triple-double levels: 1.11-1.23x slower stages, measured.)
_TABLE_BITS = 8
with mpmath.workprec(400):
    _STEP = mpmath.log(2) / 2**_TABLE_BITS
    _STEP_HI = math.ldexp(int(mpmath.floor(mpmath.ldexp(_STEP, 41))), -41)
    _STEP_LO = _split3(_STEP - _STEP_HI)
    _INV_STEP = float(1 / _STEP)
    #: 2**(j/256) in three parts: row p holds part p.
    _POW2 = np.array([_split3(mpmath.power(2, mpmath.mpf(j) / 2**_TABLE_BITS))
                      for j in range(2**_TABLE_BITS)]).T.copy()
#: exp(r) - 1 = r (1 + r/2 (1 + r/3 (...))) to degree 13 (r**14/14! < 2**-170); level i of the
#: nesting costs its precision times ~|r|**i / i!: levels 10-13 in float64, 5-9 in
#: double-double, 1-4 in triple-double keep every level's error below 2**-160.
_DEGREE = 13
_DD_LEVEL = 9
_TD_LEVEL = 4
_FACT = np.array([_split3(Fraction(1, math.factorial(i))) for i in range(_DEGREE + 1)]).T.copy()


@njit(cache=True, inline="always")
def _fast_two_sum(a, b):
    s = a + b
    return s, b - (s - a)


@njit(cache=True, inline="always")
def dd_add(ah, al, bh, bl):
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
def renorm(a, b, c):
    """(a, b, c) with the same exact sum, each part within half an ulp of the one before."""
    b, c = two_sum(b, c)
    a, b = two_sum(a, b)
    b, c = two_sum(b, c)
    return a, b, c


@njit(cache=True, inline="always")
def add(a0, a1, a2, b0, b1, b2):
    """a + b, absolute error about 2**-157 max(|a|, |b|)."""
    s0, e0 = two_sum(a0, b0)
    s1, e1 = two_sum(a1, b1)
    s1, e2 = two_sum(s1, e0)
    return renorm(s0, s1, (a2 + b2) + (e1 + e2))


@njit(cache=True, inline="always")
def mul(a0, a1, a2, b0, b1, b2):
    """a * b, relative error about 2**-157 (the parts' products below 2**-159 dropped)."""
    p0, q0 = two_prod(a0, b0)
    p1, q1 = two_prod(a0, b1)
    p2, q2 = two_prod(a1, b0)
    low = ((a0 * b2 + a2 * b0) + a1 * b1) + (q1 + q2)
    s1, e1 = two_sum(q0, p1)
    s1, e2 = two_sum(s1, p2)
    return renorm(p0, s1, low + (e1 + e2))


@njit(cache=True)
def _reduce(t, k, r, n):
    """r <- t[0] + t[1] - k ln2/32 as three parts, k = rint(32 t[0] / ln 2) (first n)."""
    for j in range(n):
        k[j] = np.rint(t[0, j] * _INV_STEP)
        a0, a1, a2 = renorm(t[0, j] - k[j] * _STEP_HI, t[1, j], 0.0)  # exact difference
        b0, b1 = two_prod(k[j], _STEP_LO[0])
        a0, a1, a2 = add(a0, a1, a2, -b0, -b1, 0.0)
        b0, b1 = two_prod(k[j], _STEP_LO[1])
        r[0, j], r[1, j], r[2, j] = add(a0, a1, a2, -b0, -b1, -k[j] * _STEP_LO[2])


@njit(cache=True)
def _expm1_reduced(t, r, n):
    """t <- exp(r) - 1 as three parts (first n), |r| <= ln2/512: the nesting's inner levels in
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
            t[0, j], t[1, j] = dd_add(a0, a1, c0, c1)
    for i in range(_TD_LEVEL, 0, -1):
        c0, c1, c2 = _FACT[0, i], _FACT[1, i], _FACT[2, i]
        for j in range(n):
            a0, a1, a2 = mul(t[0, j], t[1, j], t[2, j], r[0, j], r[1, j], r[2, j])
            t[0, j], t[1, j], t[2, j] = add(a0, a1, a2, c0, c1, c2)
    for j in range(n):
        t[0, j], t[1, j], t[2, j] = mul(t[0, j], t[1, j], t[2, j],
                                            r[0, j], r[1, j], r[2, j])


@njit(cache=True)
def exp_all(t, keep, k, r, n):
    """t <- keep * exp(t[0] + t[1]) as three parts for the first ``n`` elements,
    -746 <= t[0] <= 700, relative error below 2**-150 (parts under 2**-1022 lose their low bits:
    absolute error of a few 2**-1074); each step one loop over the elements (so that it
    vectorizes); k and r are scratch."""
    _reduce(t, k, r, n)
    _expm1_reduced(t, r, n)
    mask = 2**_TABLE_BITS - 1
    for j in range(n):
        a0, a1, a2 = add(t[0, j], t[1, j], t[2, j], 1.0, 0.0, 0.0)
        i = np.int64(k[j])
        row = i & mask
        a0, a1, a2 = mul(a0, a1, a2, _POW2[0, row], _POW2[1, row], _POW2[2, row])
        f, g = _pow2(i >> _TABLE_BITS)
        t[0, j], t[1, j], t[2, j] = (((a0 * f) * g) * keep[j], ((a1 * f) * g) * keep[j],
                                     ((a2 * f) * g) * keep[j])


@njit(cache=True, inline="always")
def _log_start(s0, s1):
    """log(s0 + s1) within an ulp or two (log1p near 1, where s0 - 1 is exact)."""
    return np.log1p((s0 - 1.0) + s1) if s0 > 0.5 else np.log(s0)


@njit(cache=True)
def log_all(s, e, keep, k, r, n):
    """s <- log(s) for the first ``n`` columns, 2**-900 < s < 2**900 (exp(-start) keeps its
    three parts out of the subnormal range): a float64 start, then
    log(1 + c) = c - c**2/2 + c**3/3 with 1 + c = s exp(-start), |c| <= 2**-41 (start is
    within two ulps of |log s| < 700); e, keep, k and r are scratch."""
    for i in range(n):
        e[0, i], e[1, i], keep[i] = -_log_start(s[0, i], s[1, i]), 0.0, 1.0
    exp_all(e, keep, k, r, n)
    for i in range(n):
        start = _log_start(s[0, i], s[1, i])
        p0, p1, p2 = mul(s[0, i], s[1, i], s[2, i], e[0, i], e[1, i], e[2, i])
        c0, c1, c2 = renorm(p0 - 1.0, p1, p2)  # p0 - 1 is exact (Sterbenz)
        q0, q1 = two_prod(c0, c0)
        q1 += 2.0 * c0 * c1
        a0, a1, a2 = add(start, 0.0, 0.0, c0, c1, c2)
        a0, a1, a2 = add(a0, a1, a2, -0.5 * q0, -0.5 * q1, 0.0)
        s[0, i], s[1, i], s[2, i] = add(a0, a1, a2, c0 * c0 * c0 / 3.0, 0.0, 0.0)


@njit(cache=True)
def pairwise_sum(t, lo, n):
    """The pairwise triple-double sum of ``t[:, lo:lo + n]``, overwriting it."""
    while n > 1:
        half = (n + 1) // 2
        for i in range(half):
            a, b = lo + i, lo + 2 * i
            if 2 * i + 1 < n:
                t[0, a], t[1, a], t[2, a] = add(t[0, b], t[1, b], t[2, b],
                                                    t[0, b + 1], t[1, b + 1], t[2, b + 1])
            else:
                t[0, a], t[1, a], t[2, a] = t[0, b], t[1, b], t[2, b]
        n = half
    return t[0, lo], t[1, lo], t[2, lo]


# ----------------------------------------------------------------------------- double-double

#: exp(r) - 1 in double-double, |r| <= ln2/512: degree 9 (r**10/10! < 2**-117); levels 5-9 in
#: float64 (their rounding times |r|**5/5! stays under 2**-107), 1-4 in double-double.
_DD_DEGREE = 9
_DD_FROM = 4


@njit(cache=True, inline="always")
def _horner_step(p0, p1, r0, r1, c0, c1):
    """p * r + c in double-double where |p r| < |c| / 50 (no cancellation: one fast add)."""
    a0, a1 = _dd_mul(p0, p1, r0, r1)
    s = c0 + a0
    return _fast_two_sum(s, (a0 - (s - c0)) + (a1 + c1))


@njit(cache=True, inline="always")
def _exp_dd(d0, d1):
    """exp(d0 + d1) as a double-double (:func:`exp_all_dd`)."""
    k = np.rint(d0 * _INV_STEP)
    a0, a1 = two_sum(d0 - k * _STEP_HI, d1)  # the first difference is exact
    b0, b1 = two_prod(k, _STEP_LO[0])
    r0, r1 = dd_add(a0, a1, -b0, -b1 - k * _STEP_LO[1])
    p = _FACT[0, _DD_DEGREE]
    for i in range(_DD_DEGREE - 1, _DD_FROM, -1):
        p = p * r0 + _FACT[0, i]
    p0, p1 = p, 0.0
    for i in range(_DD_FROM, 0, -1):
        p0, p1 = _horner_step(p0, p1, r0, r1, _FACT[0, i], _FACT[1, i])
    p0, p1 = _dd_mul(p0, p1, r0, r1)  # exp(r) - 1, |.| < 0.011
    s, e = _fast_two_sum(1.0, p0)
    a0, a1 = _fast_two_sum(s, e + p1)
    q = np.int64(k)
    row = q & (2**_TABLE_BITS - 1)
    a0, a1 = _dd_mul(a0, a1, _POW2[0, row], _POW2[1, row])
    f, g = _pow2(q >> _TABLE_BITS)
    return (a0 * f) * g, (a1 * f) * g


@njit(cache=True)
def exp_all_dd(t, keep, n):
    """t[0], t[1] <- keep * exp(t[0] + t[1]) as a double-double for the first ``n`` elements,
    -746 <= t[0] <= 0.3, relative error below 2**-100 (:func:`exp_all`'s reduction and table, the
    series to degree 9; parts under 2**-1022 lose low bits)."""
    for j in range(n):
        h, low = _exp_dd(t[0, j], t[1, j])
        t[0, j], t[1, j] = h * keep[j], low * keep[j]


@njit(cache=True)
def log_all_dd(s, e, keep, n):
    """s[0], s[1] <- log(s[0] + s[1]) as a double-double for the first ``n`` columns,
    0.75 <= s < 2**900 (s[2] is overwritten): a float64 start (:func:`._exp.log1p_from`, within a
    few ulps; it vectorizes), then log(1 + c) = c - c**2/2 with 1 + c = s exp(-start),
    |c| <= 2**-41 (error below 2**-100 (1 + |log s|)); e and keep are scratch."""
    for i in range(n):
        s[2, i] = log1p_from((s[0, i] - 1.0) + s[1, i])
        e[0, i], e[1, i], keep[i] = -s[2, i], 0.0, 1.0
    exp_all_dd(e, keep, n)
    for i in range(n):
        p0, p1 = _dd_mul(s[0, i], s[1, i], e[0, i], e[1, i])
        c = (p0 - 1.0) + p1  # p0 - 1 is exact (Sterbenz)
        a0, a1 = two_sum(s[2, i], c)
        s[0, i], s[1, i] = _fast_two_sum(a0, a1 - 0.5 * c * c)


@njit(cache=True)
def pairwise_sum_dd(t, lo, n):
    """The pairwise double-double sum of ``t[:2, lo:lo + n]``, overwriting it."""
    while n > 1:
        half = (n + 1) // 2
        for i in range(half):
            a, b = lo + i, lo + 2 * i
            if 2 * i + 1 < n:
                t[0, a], t[1, a] = dd_add(t[0, b], t[1, b], t[0, b + 1], t[1, b + 1])
            else:
                t[0, a], t[1, a] = t[0, b], t[1, b]
        n = half
    return t[0, lo], t[1, lo]
