"""A vectorizable ``exp`` for non-positive float64 arguments (and the ``log1p`` that finishes
a log-sum-exp, :func:`log1p_from`), written for numba loops.

numba's ``math.exp`` calls libm one element at a time (PyPI llvmlite has no SVML), so the
log-sum-exp kernels use this polynomial instead, inlined into their loops:

* Cody-Waite reduction ``x = n ln2 + r``, ``|r| <= ln2 / 2``, with ``n`` rounded by adding a
  shifter constant (no float-to-int conversion, which AVX2 cannot vectorize);
* ``exp(r) = 1 + (r + r**2 q(r))`` with ``q`` a Chebyshev fit of ``(exp(r) - 1 - r) / r**2``
  (degree 10 for float64 results, degree 6 where about 38 bits are enough);
* ``2**n`` built from exponent bits; :func:`exp_nonpos` uses two factors, so results down into
  the subnormal range (``x >= -745.2``) are rounded once; :func:`exp_nonpos_normal`, for
  normal results only, one;
* :func:`exp_nonpos_table`, normal results too: sixteenths of ln 2, ``x = (16n + j) ln2/16 +
  r``, ``2**(j/16)`` read from a table of 16 (head, tail) pairs, a degree-5 polynomial on
  ``|r| <= ln2/32`` (fewer operations, two gathers).

:func:`exp_nonpos` expects ``-746 <= x <= 0``, :func:`exp_nonpos_short` ``-700 <= x <= 600``
(despite its name: the log-sum-exp kernels also shift by a guessed maximum; callers clamp),
and no NaN; :func:`exp_open` takes any gap from a guessed shift and bounds it itself.
Measured against mpmath on 180,000 points of [-745, 0]: :func:`exp_nonpos` is
within 0.64 ulp of exp for normal results (0.73 subnormal ulp below 2**-1022);
:func:`exp_nonpos_table` within 0.55 ulp on 180,000 points of [-708, 0];
:func:`exp_nonpos_short` is within 2**-37.77 relative error on 44,000 points of [-700, 600]
(its one-constant reduction adds at most 2**-44). They are compiled with
``contract`` only (FMA), never ``reassoc``, and numba calls them rather than inlining their IR,
so the shifter trick keeps its flags inside ``fastmath={"reassoc"}`` loops.

>>> import math
>>> abs(exp_nonpos(-1.5) - math.exp(-1.5)) <= math.ulp(math.exp(-1.5))
True
>>> exp_nonpos(0.0)
1.0
"""

from __future__ import annotations

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from ._cache_file import install as _install_cache_stamps

_install_cache_stamps()  # before the first kernel is defined: the modules import this one first

__all__ = [
    "as_float32",
    "as_float64",
    "as_int32",
    "as_int64",
    "divide",
    "exp_nonpos",
    "exp_nonpos_normal",
    "exp_nonpos_short",
    "exp_nonpos_table",
    "exp_open",
    "exp_split",
    "float32_to_half",
    "half_to_float32",
    "half_to_float64",
    "log1p_from",
]


@intrinsic
def as_float64(typingctx, bits):  # type: ignore[no-untyped-def]
    """Reinterpret int64 bits as float64 (inside numba only)."""
    if bits != types.int64:
        return None

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        return builder.bitcast(args[0], ir.DoubleType())

    return types.float64(types.int64), codegen


@intrinsic
def as_int64(typingctx, value):  # type: ignore[no-untyped-def]
    """Reinterpret float64 bits as int64 (inside numba only)."""
    if value != types.float64:
        return None

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        return builder.bitcast(args[0], ir.IntType(64))

    return types.int64(types.float64), codegen


@intrinsic
def as_float32(typingctx, bits):  # type: ignore[no-untyped-def]
    """Reinterpret int32 bits as float32 (inside numba only)."""
    if bits != types.int32:
        return None

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        return builder.bitcast(args[0], ir.FloatType())

    return types.float32(types.int32), codegen


@intrinsic
def as_int32(typingctx, value):  # type: ignore[no-untyped-def]
    """Reinterpret float32 bits as int32 (inside numba only)."""
    if value != types.float32:
        return None

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        return builder.bitcast(args[0], ir.IntType(32))

    return types.int32(types.float32), codegen


@intrinsic
def divide(typingctx, a, b):  # type: ignore[no-untyped-def]
    """a / b for float64, IEEE (no ZeroDivisionError check, which stops a loop vectorizing)."""
    if a != types.float64 or b != types.float64:
        return None

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        return builder.fdiv(args[0], args[1])

    return types.float64(types.float64, types.float64), codegen


@intrinsic
def half_to_float64(typingctx, bits):  # type: ignore[no-untyped-def]
    """float16 bits (uint16) -> float64, exact, inside numba only.

    An LLVM ``fpext half``: with F16C it vectorizes to ``vcvtph2ps`` (subnormals, inf and NaN
    included), faster than decoding the bits by hand.
    """
    if bits != types.uint16:
        return None

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        half = builder.bitcast(args[0], ir.HalfType())
        return builder.fpext(half, ir.DoubleType())

    return types.float64(types.uint16), codegen


@intrinsic
def half_to_float32(typingctx, bits):  # type: ignore[no-untyped-def]
    """float16 bits (uint16) -> float32, exact, inside numba only (``vcvtph2ps``).

    :func:`._common.widen` adds +0.0 before widening on to float64: it keeps LLVM from folding
    the two conversions into AVX512-FP16's ``vcvtph2pd``, four elements per instruction and
    slower in the sums (docs/kernel-design.md, "Vector width"). The add turns -0.0 into +0.0,
    a sign no sum here keeps (they start from +0.0).
    """
    if bits != types.uint16:
        return None

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        return builder.fpext(builder.bitcast(args[0], ir.HalfType()), ir.FloatType())

    return types.float32(types.uint16), codegen


@intrinsic
def float32_to_half(typingctx, value):  # type: ignore[no-untyped-def]
    """float32 -> float16 bits (uint16), rounded to nearest even, inside numba only.

    An LLVM ``fptrunc`` to ``half``: with F16C one ``vcvtps2ph`` (overflow to inf, subnormals
    and NaN as IEEE says). Fed a round-to-odd float32 it gives one correct rounding of a float64.
    """
    if value != types.float32:
        return None

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        half = builder.fptrunc(args[0], ir.HalfType())
        return builder.bitcast(half, ir.IntType(16))

    return types.uint16(types.float32), codegen


_INV_LN2 = 1.4426950408889634
# ln 2 split so that n * _LN2_HI is exact for |n| < 2**21 (fdlibm's constants).
_LN2_HI = 6.93147180369123816490e-01
_LN2_LO = 1.90821492927058770002e-10
_LN2 = 0.6931471805599453
# Adding 1.5 * 2**52 rounds a float64 of magnitude < 2**51 to an integer, kept in the low bits.
_SHIFTER = 6755399441055744.0
_SHIFTER_BITS = 0x4338000000000000
# The same with the exponent bias added: the low bits of ``x + _BIASED_SHIFTER`` are n + 1023,
# so shifted left by 52 they are the bits of 2**n (the shifter's own bits fall off the top).
_BIASED_SHIFTER = _SHIFTER + 1023.0

# Chebyshev fits of q(r) = (exp(r) - 1 - r) / r**2 on |r| <= ln2/2 (mpmath.chebyfit), highest
# degree first: degree 10 (|error| 1.4e-18) and degree 6 (2.7e-11).
_Q10 = (2.0914679595617734e-09, 2.510520668068106e-08, 2.7557273660822466e-07,
        2.7557255425009614e-06, 2.480158732553378e-05, 0.00019841269874801073,
        0.0013888888888883752, 0.008333333333326141, 0.04166666666666667,
        0.1666666666666667, 0.5)
_Q6 = (2.4859578557659402e-05, 0.00019899274293835886, 0.001388885404921242,
       0.008333298483352309, 0.041666666718981754, 0.16666666718998416, 0.5)


@numba.njit(cache=True, fastmath={"contract"}, inline="always")
def _horner(c, x):
    """The polynomial with coefficients ``c`` (highest degree first) at ``x``."""
    p = c[0]
    for i in range(1, len(c)):
        p = p * x + c[i]
    return p


@numba.njit(cache=True)
def _scale(p: float, t: float) -> float:
    """p * 2**n where the shifted float ``t`` holds n; two factors keep subnormals exact."""
    n = as_int64(t) - _SHIFTER_BITS
    half = n >> 1
    return (p * as_float64((half + 1023) << 52)) * as_float64((n - half + 1023) << 52)


@numba.njit(cache=True, fastmath={"contract"}, inline="always")
def _reduced(x: float) -> tuple[float, float]:
    """(p, t): exp(x) = p 2**n within about half an ulp, the shifted float ``t`` holding n."""
    t = x * _INV_LN2 + _SHIFTER
    k = t - _SHIFTER
    hi = x - k * _LN2_HI  # exact
    r = hi - k * _LN2_LO
    lo = (hi - r) - k * _LN2_LO  # what r lost
    q = _horner(_Q10, r)
    head = 1.0 + r
    carry = (1.0 - head) + r  # exactly what head lost
    return head + (carry + (lo + r * r * q)), t


@numba.njit(cache=True, fastmath={"contract"})
def exp_nonpos(x: float) -> float:
    """exp(x) for -746 <= x <= 0, within about half an ulp."""
    p, t = _reduced(x)
    return _scale(p, t)


@numba.njit(cache=True, fastmath={"contract"})
def exp_nonpos_normal(x: float) -> float:
    """:func:`exp_nonpos` for -708 <= x <= 0, whose results are normal: one scale factor
    (the same bits)."""
    p, t = _reduced(x)
    return p * as_float64((as_int64(t) - _SHIFTER_BITS + 1023) << 52)


#: 2**(j/16), j = 0..15, as (head, tail) pairs (mpmath, 200 bits): :func:`exp_nonpos_table`.
_TABLE_HEADS = np.array([
    1.0, 1.0442737824274138, 1.0905077326652577, 1.1387886347566916, 1.189207115002721,
    1.241857812073484, 1.2968395546510096, 1.3542555469368927, 1.4142135623730951,
    1.4768261459394993, 1.5422108254079407, 1.6104903319492543, 1.681792830507429,
    1.7562521603732995, 1.8340080864093424, 1.9152065613971474])
_TABLE_TAILS = np.array([
    0.0, 8.551889705537965e-17, -3.046782079812471e-17, 8.912812676025408e-17,
    3.982015231465646e-17, 4.658027591836937e-17, 2.5382502794888315e-17,
    7.70094837980299e-17, -9.667293313452913e-17, -3.483994556892796e-17,
    7.949834809697621e-17, 2.4707192569797888e-17, 8.199010020581497e-17,
    2.960140695448873e-17, 3.283107224245627e-17, -1.0619946056195963e-16])
_TABLE_INV = 16.0 * _INV_LN2
#: The shifter for sixteenths: the low bits of ``t`` are 16 (n + 1023) + j.
_TABLE_SHIFTER = _SHIFTER + 1023.0 * 16.0
_TABLE_LN2_HI = _LN2_HI / 16.0  # k * this is exact for |k| < 2**21
_TABLE_LN2_LO = _LN2_LO / 16.0
# A Chebyshev fit of q(r) on |r| <= ln2/32 (degree 5, highest first): |error| 1.1e-16 of q,
# 2**-64 of exp(r).
_Q5 = (0.0001984146378747018, 0.0013889063440655327, 0.00833333333299209,
       0.041666666663595475, 0.16666666666666669, 0.5)


@numba.njit(cache=True, fastmath={"contract"})
def exp_nonpos_table(x: float) -> float:
    """exp(x) for -708 <= x <= 0 (normal results), within 0.55 ulp: ``2**n 2**(j/16) exp(r)``,
    ``|r| <= ln2/32``, two table reads (gathers in a vector loop) and a degree-5 polynomial
    in place of :func:`exp_nonpos_normal`'s degree 10 and its compensated ``1 + r``; 0 gives
    exactly 1."""
    t = x * _TABLE_INV + _TABLE_SHIFTER
    k = t - _TABLE_SHIFTER
    r = (x - k * _TABLE_LN2_HI) - k * _TABLE_LN2_LO  # the first product exact, the rest 2**-59
    bits = as_int64(t)
    j = bits & 15
    head = _TABLE_HEADS[j]
    p = r + r * r * _horner(_Q5, r)
    return (head + (head * p + _TABLE_TAILS[j])) * as_float64((bits >> 4) << 52)


@numba.njit(cache=True, fastmath={"contract"}, inline="always")
def exp_split(d: float) -> tuple[float, float]:
    """exp(d) for -746 <= d <= 0 as (rounded, error): :func:`exp_nonpos`'s value and what its
    last add lost (that rounding is what limits it to 0.64 ulp); together within 2**-55
    relative for normal results: the roundings of the degree-10 Horner steps, a few ulps of
    ``q`` times ``r**2``, and of the small part's adds (2**-56.1 the most measured, on 16 M
    arguments in [-14, 0]; the fit itself is within 1.4e-18)."""
    t = d * _INV_LN2 + _SHIFTER
    k = t - _SHIFTER
    hi = d - k * _LN2_HI  # exact
    r = hi - k * _LN2_LO
    lo = (hi - r) - k * _LN2_LO
    q = _horner(_Q10, r)
    head = 1.0 + r
    small = ((1.0 - head) + r) + (lo + r * r * q)  # head + small: exp(r) (carry exact)
    whole = head + small
    back = whole - head
    error = (head - (whole - back)) + (small - back)  # TwoSum: whole + error == head + small
    return _scale(whole, t), _scale(error, t)


@numba.njit(cache=True, fastmath={"contract"})
def exp_nonpos_short(x: float) -> float:
    """exp(x) for -700 <= x <= 600 with relative error below 2**-37 (enough for float32 sums).

    One scale factor: ``2**n`` stays normal, so results are never subnormal (callers clamp
    ``x`` at -700; exp(-700) ~ 1e-304 is far below anything a float32 sum can see). The
    result is ``s + s * p`` with ``s = 2**n``: one FMA instead of an add and a multiply;
    ``s`` is the rounded ``t``'s bits shifted, with no integer add (the shifter holds the bias).
    """
    return _exp_short_from(x, x * _INV_LN2 + _BIASED_SHIFTER)


#: ``t`` of :func:`exp_open` for 2**865 (~e**599.6); larger ``t`` are capped to it.
_T_CAP = _BIASED_SHIFTER + 865.0


@numba.njit(cache=True, fastmath={"contract"})
def exp_open(x: float) -> float:
    """exp(x) of any gap from a guessed shift, the bits of :func:`exp_nonpos_short` where
    -700 <= x <= 599: below, exp(-700); above, at least 2**865 (+inf for +inf); NaN kept.

    The upper bound caps the rounded ``t`` (then ``r >= 0`` and every coefficient is positive,
    so the result is at least the scale), not ``x``: two bounds on ``x`` become a five-op
    select in some vector loops, one on each of ``x`` and ``t`` one max and one min.
    """
    x = -700.0 if x < -700.0 else x
    t = x * _INV_LN2 + _BIASED_SHIFTER
    return _exp_short_from(x, _T_CAP if t > _T_CAP else t)


@numba.njit(cache=True, fastmath={"contract"}, inline="always")
def _exp_short_from(x: float, t: float) -> float:
    """:func:`exp_nonpos_short`'s result from ``x`` and its rounded ``t``: the reduction by
    ``k ln2``, the degree-6 polynomial and the one scale factor."""
    k = t - _BIASED_SHIFTER
    r = x - k * _LN2  # off by |k| * 2**-54 at most (fused or not): 2**-44 relative in the result
    q = _horner(_Q6, r)
    scale = as_float64(as_int64(t) << 52)
    return scale + scale * (r + r * r * q)


# 2 atanh(z) = log((1 + z) / (1 - z)) = z (2 + w (2/3 + w (2/5 + ...))), w = z**2, highest first;
# |z| <= 3 - 2 sqrt(2) = 0.1716: the first term left out is below 2**-62 relative.
_ATANH = tuple(2.0 / (2 * i + 1) for i in range(11, -1, -1))
_SQRT_HALF_BITS = 0x3FE6A09E667F3BCD  # sqrt(1/2)


@numba.njit(cache=True, fastmath={"contract"}, inline="always")
def log1p_from(s: float) -> float:
    """log(1 + s) for -0.29 <= s < 2**1000, within about 2 ulp, relative to it (tiny ``s``
    too); libm's log1p does not vectorize, this does.

    ``1 + s = 2**k f`` with ``f`` in [sqrt(1/2), sqrt(2)) read from the bits, the rounding of
    ``1 + s`` carried apart (TwoSum), ``log f = 2 atanh((f - 1) / (f + 1))``; for ``k = 0``,
    ``f - 1`` is ``s`` itself.
    """
    big = 1.0 + s
    back = big - s
    low = (1.0 - back) + (s - (big - back))  # big + low == 1 + s
    k = (as_int64(big) - _SQRT_HALF_BITS) >> 52
    f = as_float64(as_int64(big) - (k << 52))
    u = s if k == 0 else f - 1.0  # exact (Sterbenz)
    z = divide(u, 2.0 + u)
    w = z * z
    p = _horner(_ATANH, w)
    kf = as_float64(k + _SHIFTER_BITS) - _SHIFTER  # float(k) without a conversion (AVX2)
    tail = 0.0 if k == 0 else divide(low, big)
    return kf * _LN2_HI + (kf * _LN2_LO + (z * p + tail))
