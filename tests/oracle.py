"""An independent exact / extended-precision oracle for ReduceSum, ReduceL2, ReduceLogSumExp,
ReduceSumSquare and ReduceLogSum.

Nothing here imports onnx_reduce. Exact values are computed with Python integers,
:class:`fractions.Fraction`, :func:`math.isqrt` and mpmath, then rounded *once* to the output
dtype (never through an intermediate float format, so bfloat16 is not double-rounded).

* ``exact(op, data, axes, keepdims, noop)`` -> object array of exact values, one per output
  element: a :class:`~fractions.Fraction` (sums, single-element LSE), :class:`Sqrt` (L2, the
  exact square root of a Fraction), an ``mpmath.mpf`` at :data:`PREC` bits (LSE), a Python int
  (integer dtypes, already wrapped / truncated), or a float ``nan``/``inf``/``-inf``.
  Integer LSE is the exact LSE truncated toward zero (the spec's CastLike truncates) and
  saturated at the dtype's range: :func:`exact_integer_log_sum_exp`. Sums of squares are
  Fractions (integers: wrapped); LogSum is an mpf (``log1p(S - 1)`` near 1, so no cancellation)
  or exact 0 / -inf / NaN; integer LogSum is ``floor(log S)`` of the exact sum (S <= 0 raises).
* ``expected(op, data, ...)`` -> the exactly rounded result as an array of ``data.dtype``.
* ``ulp_error(result, exact_value, dtype)`` -> ``|result - exact| / ulp(exact)`` in units of the
  output dtype's ulp (subnormal spacing below the normal range; 0 when specials agree, inf when
  they do not). A correctly rounded result has ``ulp_error <= 0.5``.

>>> import numpy as np
>>> float(expected("ReduceSum", np.array([0.1, 0.2, 0.3]))[0])  # 0.1 + 0.2 + 0.3 gives ...0001
0.6
>>> float(expected("ReduceLogSumExp", np.array([800.0, 800.0]))[0])
800.6931471805599
>>> int(expected("ReduceL2", np.array([2**62, 2**62], dtype=np.int64))[0]) == 6521908912666391106
True
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction
from typing import Any, NamedTuple

import ml_dtypes
import mpmath
import numpy as np

bfloat16 = np.dtype(ml_dtypes.bfloat16)

#: Working precision (bits) of the mpmath evaluation of log-sum-exp.
PREC = 256

#: dtype -> (precision p incl. the implicit bit, emin, emax)
FORMATS: dict[np.dtype, tuple[int, int, int]] = {
    np.dtype(np.float16): (11, -14, 15),
    bfloat16: (8, -126, 127),
    np.dtype(np.float32): (24, -126, 127),
    np.dtype(np.float64): (53, -1022, 1023),
}

OPS = ("ReduceSum", "ReduceL2", "ReduceLogSumExp", "ReduceSumSquare", "ReduceLogSum")


class Sqrt(NamedTuple):
    """The exact non-negative square root of ``square``."""

    square: Fraction


Exact = Any  # Fraction | Sqrt | mpmath.mpf | int | float (nan / +-inf)


def is_float_dtype(dtype: Any) -> bool:
    return np.dtype(dtype) in FORMATS


# ------------------------------------------------------------------------------------------
# Walking the reduction


def normalize_axes(rank: int, axes: Sequence[int] | None, noop: bool) -> tuple[int, ...] | None:
    """Sorted non-negative axes to reduce; None for a no-op (empty axes + noop flag)."""
    if axes is None or len(axes) == 0:
        return None if noop else tuple(range(rank))
    return tuple(sorted({int(a) % rank if rank else int(a) for a in axes}))


def output_shape(shape: tuple[int, ...], axes: tuple[int, ...], keepdims: bool) -> tuple:
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def rows(data: np.ndarray, axes: tuple[int, ...]) -> list[np.ndarray]:
    """The elements reduced into each output element, outputs in C order."""
    nred = len(axes)
    moved = np.moveaxis(data, axes, range(data.ndim - nred, data.ndim))
    kept = moved.shape[: data.ndim - nred]
    count = math.prod(moved.shape[data.ndim - nred:])
    flat = np.array(moved).reshape((math.prod(kept), count))
    return list(flat)


# ------------------------------------------------------------------------------------------
# Exact values


def _exact_float_sum(values: np.ndarray | Sequence[float], square: bool = False) -> Fraction:
    """Exact sum (or sum of squares) of finite floats, as a Fraction.

    Each float64 is ``m * 2**(e - 53)`` with an integer ``m < 2**53``; the terms are grouped by
    exponent, each group's integers summed exactly (Python ints), and the groups shifted onto a
    common power-of-two denominator.
    """
    x = np.asarray(values, dtype=np.float64).reshape(-1)
    if x.size == 0:
        return Fraction(0)
    mant, expo = np.frexp(x)
    ints = (mant * 2.0**53).astype(np.int64)
    expo = expo.astype(np.int64) - 53
    order = np.argsort(expo, kind="stable")
    ints, expo = ints[order], expo[order]
    starts = np.flatnonzero(np.diff(expo)) + 1
    lowest = int(expo[0]) * (2 if square else 1)
    total = 0
    for group, e in zip(np.split(ints, starts), expo[np.r_[0, starts]].tolist(), strict=True):
        g = group.tolist()
        part = sum(v * v for v in g) if square else sum(g)
        total += part << ((2 * e if square else e) - lowest)
    return Fraction(total) * _pow2(lowest)


def _wrap(value: int, dtype: np.dtype) -> int:
    bits = dtype.itemsize * 8
    value %= 1 << bits
    if dtype.kind == "i" and value >= 1 << (bits - 1):
        value -= 1 << bits
    return value


def exact_sum(values: np.ndarray) -> Exact:
    """Exact sum of one row of floats (IEEE special-value rules)."""
    values = np.asarray(values, dtype=np.float64)
    if np.isnan(values).any():
        return math.nan
    pos, neg = bool((values == math.inf).any()), bool((values == -math.inf).any())
    if pos and neg:
        return math.nan
    if pos or neg:
        return math.inf if pos else -math.inf
    return _exact_float_sum(values)


def exact_l2(values: np.ndarray) -> Exact:
    """Exact sqrt(sum x**2): NaN anywhere -> NaN, else inf anywhere -> inf."""
    squares = exact_sum_square(values)
    return squares if isinstance(squares, float) else Sqrt(squares)


def _cutoff_terms(finite: list, peak: Any) -> list:
    """The terms below the peak that can affect the result at PREC bits."""
    below = [v for v in finite if v < peak]
    if not below:
        return []
    second = max(below)
    # Terms more than 250 (natural log units) below the largest tail term change the tail by
    # less than n * e**-250 relatively: invisible at PREC bits.
    return [v for v in below if v - second > -250]


def exact_log_sum_exp(values: list) -> Exact:
    """log(sum(exp(x))) at PREC bits: empty / all -inf -> -inf, NaN -> NaN, +inf -> +inf.

    Computed as ``m + log1p(sum_{x<m} exp(x - m) + (count(x == m) - 1))``; a row whose only
    contributing element is its maximum gives that maximum exactly (a Fraction / int).
    """
    if any(isinstance(v, float) and math.isnan(v) for v in values):
        return math.nan
    if math.inf in values:
        return math.inf
    finite = [v for v in values if v != -math.inf]
    if not finite:
        return -math.inf
    peak = max(finite)
    ties = sum(1 for v in finite if v == peak)
    tail = _cutoff_terms(finite, peak)
    if ties == 1 and not tail:
        return Fraction(peak)
    with mpmath.workprec(PREC):
        mpeak = mpmath.mpf(peak)
        s = mpmath.fsum(mpmath.exp(mpmath.mpf(v) - mpeak) for v in tail) + (ties - 1)
        return mpeak + mpmath.log1p(s)


def exact_sum_square(values: np.ndarray) -> Exact:
    """Exact sum x**2: NaN anywhere -> NaN, else inf anywhere -> inf."""
    values = np.asarray(values, dtype=np.float64)
    if np.isnan(values).any():
        return math.nan
    if np.isinf(values).any():
        return math.inf
    return _exact_float_sum(values, square=True)


def exact_log_sum(values: np.ndarray) -> Exact:
    """log(sum x) at PREC bits from the exact sum: NaN or -inf (alone or with +inf) -> NaN,
    +inf -> inf, a sum of 0 -> -inf, negative -> NaN, exactly 1 -> 0."""
    total = exact_sum(values)
    if isinstance(total, float):
        return total if total == math.inf else math.nan
    if total <= 0:
        return -math.inf if total == 0 else math.nan
    if total == 1:
        return Fraction(0)
    with mpmath.workprec(PREC):
        if abs(total - 1) < Fraction(1, 2):
            return mpmath.log1p(to_mpf(total - 1, PREC))
        return mpmath.log(to_mpf(total, PREC))


def exact_integer_log_sum(values: list[int]) -> int:
    """floor(log(sum)) of Python ints, the sum exact (no wrap-around).

    >>> exact_integer_log_sum([2, 5]), exact_integer_log_sum([2**62, 2**62])
    (1, 43)
    """
    total = sum(values)
    if total <= 0:
        raise ValueError(f"integer ReduceLogSum of a sum {total} (log -inf or NaN) has no value")
    with mpmath.workprec(PREC):
        return int(mpmath.floor(mpmath.log(total)))


def in_domain(op: str, values: Any) -> Any:
    """``values`` (numpy, torch, jax) moved where ``op`` is real: ReduceLogSum gets positive
    data (the log of a negative sum is NaN, which compares unequal and has no gradient)."""
    return abs(values) + 0.5 if op == "ReduceLogSum" else values


def _row_values(row: np.ndarray) -> list:
    if row.dtype.kind in "iu":
        return [int(v) for v in row.tolist()]
    return row.astype(np.float64).tolist()


def exact(
    op: str,
    data: np.ndarray,
    axes: Sequence[int] | None = None,
    keepdims: bool = True,
    noop: bool = False,
) -> np.ndarray:
    """Object array (the output's shape) of exact values; see the module docstring.

    Integer dtypes give Python ints with the dtype's rules already applied: sums wrap, L2 is
    ``isqrt`` (wrapped), LSE is the exact value truncated toward zero (saturated).
    """
    data = np.asarray(data)
    dtype = data.dtype
    integer = dtype.kind in "iu"
    red = normalize_axes(data.ndim, axes, noop)
    if red is None:  # no-op: only the elementwise part
        flat = _row_values(data.reshape(-1))
        if op == "ReduceL2":
            vals = [_wrap(abs(v), dtype) if integer else Fraction(abs(v)) if math.isfinite(v)
                    else abs(v) for v in flat]
        elif op in _ROW_OPS:  # the elementwise part is the reduction of one element
            vals = [_ROW_OPS[op](np.array([v], dtype), dtype) for v in flat]
        else:
            vals = [v if integer or not math.isfinite(v) else Fraction(v) for v in flat]
        out = np.empty(len(vals), dtype=object)
        out[:] = vals
        return out.reshape(data.shape)
    shape = output_shape(data.shape, red, keepdims)
    results = []
    seen: dict[bytes, Exact] = {}  # tiled test arrays repeat their rows: each computed once
    for row in rows(data, red):
        key = row.tobytes()
        if key in seen:
            results.append(seen[key])
            continue
        seen[key] = _exact_row(op, row, dtype, integer)
        results.append(seen[key])
    out = np.empty(len(results), dtype=object)
    out[:] = results
    return out.reshape(shape)


def _exact_row(op: str, row: np.ndarray, dtype: np.dtype, integer: bool) -> Exact:
    """The exact value of ``op`` over the elements of one output, ``row``."""
    if op in _ROW_OPS:
        return _ROW_OPS[op](row, dtype)
    values = _row_values(row) if integer or op == "ReduceLogSumExp" else row
    if op == "ReduceSum":
        return _wrap(sum(values), dtype) if integer else exact_sum(values)
    if op == "ReduceL2":
        if integer:
            return _wrap(math.isqrt(sum(v * v for v in values)), dtype)
        return exact_l2(values)
    if op == "ReduceLogSumExp":
        if integer:
            return exact_integer_log_sum_exp(values, dtype)
        return exact_log_sum_exp(values)
    raise ValueError(f"unknown op {op!r}")


def _sum_square_row(row: np.ndarray, dtype: np.dtype) -> Exact:
    if dtype.kind in "iu":
        return _wrap(sum(v * v for v in _row_values(row)), dtype)
    return exact_sum_square(row)


def _log_sum_row(row: np.ndarray, dtype: np.dtype) -> Exact:
    if dtype.kind in "iu":
        return exact_integer_log_sum(_row_values(row))
    return exact_log_sum(row)


#: The ops whose exact value is a function of one row (and the dtype).
_ROW_OPS = {"ReduceSumSquare": _sum_square_row, "ReduceLogSum": _log_sum_row}


def exact_integer_log_sum_exp(values: list[int], dtype: np.dtype) -> int:
    """The exact LSE of Python ints truncated toward zero, saturated to the dtype's range.

    >>> exact_integer_log_sum_exp([2**63 - 1, 2**63 - 1], np.dtype(np.int64)) == 2**63 - 1
    True
    >>> exact_integer_log_sum_exp([-5, -1000], np.dtype(np.int64))  # -5 + e**-995 -> -4
    -4
    """
    if not values:
        raise ValueError("integer ReduceLogSumExp of an empty set (-inf) has no value")
    peak = max(values)
    with mpmath.workprec(PREC):  # log1p: a tail of e**-178 must not vanish beside the 1
        tail = mpmath.fsum(mpmath.exp(mpmath.mpf(v - peak)) for v in values if v < peak)
        f = mpmath.log1p(tail + (values.count(peak) - 1))
        value = peak + int(mpmath.floor(f) if f >= -peak else mpmath.ceil(f))
    info = np.iinfo(dtype)
    return min(max(value, int(info.min)), int(info.max))


def expected(
    op: str,
    data: np.ndarray,
    axes: Sequence[int] | None = None,
    keepdims: bool = True,
    noop: bool = False,
) -> np.ndarray:
    """The exactly rounded result of ``op``, as an array of ``data.dtype``."""
    data = np.asarray(data)
    values = exact(op, data, axes, keepdims, noop)
    return round_array(values, data.dtype)


def round_array(values: np.ndarray, dtype: Any) -> np.ndarray:
    """Round every exact value of an object array once to ``dtype``."""
    dtype = np.dtype(dtype)
    flat = [round_exact(v, dtype) for v in values.reshape(-1)]
    if dtype.kind in "iu":
        return np.array(flat, dtype=object).astype(dtype).reshape(values.shape)
    return np.array(flat, dtype=np.float64).astype(dtype).reshape(values.shape)


# ------------------------------------------------------------------------------------------
# Rounding and ulps


def _ilog2_fraction(q: Fraction) -> int:
    """floor(log2(q)) for q > 0."""
    num, den = q.numerator, q.denominator
    e = num.bit_length() - den.bit_length()
    if (num << max(-e, 0)) < (den << max(e, 0)):
        e -= 1
    return e


#: Binary exponents beyond +-_FAR are far outside every float format.
_FAR = 1 << 12


def _pow2(k: int) -> Fraction:
    return Fraction(1 << k) if k >= 0 else Fraction(1, 1 << -k)


def _round_positive(x: Fraction | Sqrt, fmt: tuple[int, int, int]) -> float:
    """Round ``x > 0`` to nearest-even in the format; inf past the overflow threshold."""
    p, emin, emax = fmt
    e = _ilog2_fraction(x.square) >> 1 if isinstance(x, Sqrt) else _ilog2_fraction(x)
    k = max(e, emin) - (p - 1)
    if isinstance(x, Sqrt):
        scaled = x.square / _pow2(2 * k)
        n = math.isqrt(scaled.numerator // scaled.denominator)
        mid = Fraction(2 * n + 1, 2)
        c = (scaled > mid * mid) - (scaled < mid * mid)
    else:
        scaled = x / _pow2(k)
        n = scaled.numerator // scaled.denominator
        mid = Fraction(2 * n + 1, 2)
        c = (scaled > mid) - (scaled < mid)
    if c > 0 or (c == 0 and n % 2 == 1):
        n += 1
    if e >= emin and n == 1 << p:  # carried into the next binade
        n, k = 1 << (p - 1), k + 1
    if k + p - 1 > emax:
        return math.inf
    return math.ldexp(n, k)


def to_fraction(value: Exact) -> Fraction | Sqrt | float:
    """An exact value as a Fraction (or Sqrt); specials stay floats."""
    if isinstance(value, (Fraction, Sqrt)):
        return value
    if isinstance(value, (int, np.integer)):
        return Fraction(int(value))
    if isinstance(value, mpmath.mpf):
        if not mpmath.isfinite(value):
            return float(value)
        sign, man, exp, bc = value._mpf_  # man_exp drops the sign
        if man and not -_FAR < exp + bc < _FAR:
            # Far outside every format (e.g. log1p(exp(-1e13))): a stand-in of the same sign
            # that rounds and measures the same (to 0 / inf, at 2**-_FAR relative).
            return Fraction(-1 if sign else 1) * _pow2(_FAR if exp + bc > 0 else -_FAR)
        return Fraction(-int(man) if sign else int(man)) * _pow2(int(exp))
    value = float(value)
    return value if not math.isfinite(value) else Fraction(value)


def round_exact(value: Exact, dtype: Any) -> float | int:
    """``value`` rounded once (nearest, ties to even) to ``dtype``; ints pass through.

    >>> round_exact(Fraction(1) + Fraction(1, 2**8) + Fraction(1, 2**30), bfloat16)  # not 1.0
    1.0078125
    >>> round_exact(Sqrt(Fraction(2)), np.float16)
    1.4140625
    """
    dtype = np.dtype(dtype)
    if dtype.kind in "iu":
        return int(value)
    x = to_fraction(value)
    if isinstance(x, float):
        return x
    if isinstance(x, Sqrt):
        return 0.0 if x.square == 0 else _round_positive(x, FORMATS[dtype])
    if x == 0:
        return 0.0
    r = _round_positive(abs(x), FORMATS[dtype])
    return r if x > 0 else -r


def to_mpf(value: Exact, prec: int = PREC + 64) -> mpmath.mpf:
    """An exact value as an mpf of ``prec`` bits (Sqrt is evaluated at that precision)."""
    with mpmath.workprec(prec):
        x = to_fraction(value)
        if isinstance(x, float):
            return mpmath.mpf(x)
        if isinstance(x, Sqrt):
            return mpmath.sqrt(mpmath.mpf(x.square.numerator) / x.square.denominator)
        return mpmath.mpf(x.numerator) / x.denominator


def ulp(value: Exact, dtype: Any) -> Fraction:
    """The spacing of ``dtype`` at ``value``: 2**(max(floor(log2|v|), emin) - p + 1)."""
    p, emin, emax = FORMATS[np.dtype(dtype)]
    x = to_fraction(value)
    if isinstance(x, float):
        return _pow2(emax - p + 1)
    if isinstance(x, Sqrt):
        e = _ilog2_fraction(x.square) >> 1 if x.square else emin
    else:
        e = _ilog2_fraction(abs(x)) if x else emin
    return _pow2(min(max(e, emin), emax) - p + 1)


def ulp_error(result: Any, exact_value: Exact, dtype: Any) -> float:
    """``|result - exact| / ulp(exact)`` in ulps of ``dtype`` (0 / inf for special values).

    A result that is infinite where the exactly rounded value is too (overflow) counts as 0.

    >>> ulp_error(np.float32(1.0), Fraction(1) + Fraction(1, 2**24), np.float32)
    0.5
    >>> ulp_error(0.0, math.nan, np.float64)
    inf
    """
    dtype = np.dtype(dtype)
    r = float(result)
    x = to_fraction(exact_value)
    if isinstance(x, float):  # nan / +-inf
        if math.isnan(x):
            return 0.0 if math.isnan(r) else math.inf
        return 0.0 if r == x else math.inf
    if math.isnan(r):
        return math.inf
    if math.isinf(r):
        return 0.0 if round_exact(x, dtype) == r else math.inf
    with mpmath.workprec(PREC + 64):
        diff = abs(mpmath.mpf(r) - to_mpf(x))
        u = ulp(x, dtype)
        return float(diff * u.denominator / u.numerator)


def max_ulp_error(result: np.ndarray, exact_values: np.ndarray, dtype: Any) -> float:
    """The largest :func:`ulp_error` over matching elements (0 for empty arrays); each distinct
    (result, exact) pair is measured once (tiled test arrays repeat them thousands of times)."""
    pairs = set(zip(np.asarray(result).reshape(-1).tolist(), exact_values.reshape(-1).tolist(),
                    strict=True))
    return max((ulp_error(r, x, dtype) for r, x in pairs), default=0.0)
