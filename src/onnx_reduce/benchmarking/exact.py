"""Each runner's error in ulps: the exact result of a benchmark cell, fast enough for 64 MiB.

The benchmark's data are finite and standard normal, which lets plain numpy and
:func:`math.fsum` (exactly rounded sums, Shewchuk) give the exact result of every output
element as an unevaluated pair ``hi + lo``, far inside one ulp of any output dtype:

* ReduceSum: ``hi = fsum(row)``, ``lo = fsum(row, -hi)``: the exact sum to 2**-106.
* ReduceL2: squares are exact in float64 for float32 and narrower; float64 squares are split
  into product and error (Dekker), so the sum of squares is exact to 2**-106; its square root
  is taken in double-double (one Newton step on the float64 root).
* ReduceSumSquare: ReduceL2's exact sum of squares, without the root.
* ReduceLogSum: the log of the exact sum ``hi + lo``: ``log(hi) + lo / hi`` in float64 for
  narrow floats, in ``np.longdouble`` for float64 (the benchmark's sums are far from 1).
* ReduceLogSumExp: shifted by the row's maximum, the terms exp(x - m) and the log in float64
  for narrow floats (error ~2**-50 relative: 2**-26 of a float32 ulp), in ``np.longdouble``
  for float64 (x86's 64-bit significand: ~2**-60, a few thousandths of an ulp). Where
  ``np.longdouble`` is no wider than float64 the float64 LogSumExp errors are not measured.

The ulp is that of the exact value in the output dtype (subnormal spacing below the normal
range), so a correctly rounded result scores at most 0.5. tests/benchmarking checks this
against the test suite's exact oracle (Fractions, mpmath).

>>> import numpy as np
>>> from .cases import Case
>>> case = Case("ReduceSum", "inner", "float32", "latency")
>>> x = np.full((8, 128), 0.1, np.float32)
>>> exact = exact_result(case, x)
>>> rounded_once = np.sum(x, axis=1, keepdims=True, dtype=np.float64).astype(np.float32)
>>> ulp_error(rounded_once, exact, "float32") <= 0.5
True
"""

from __future__ import annotations

import math
from typing import Any

import mpmath
import numpy as np

from ..kernels.exact_lse import two_prod
from .cases import Case

#: dtype -> (significand bits with the implicit one, smallest normal exponent)
FORMATS: dict[str, tuple[int, int]] = {
    "float16": (11, -14),
    "bfloat16": (8, -126),
    "float32": (24, -126),
    "float64": (53, -1022),
}
#: True where np.longdouble carries the 64-bit significand the float64 logs need.
WIDE_LONGDOUBLE = np.finfo(np.longdouble).nmant >= 63
_LOGS = ("ReduceLogSumExp", "ReduceLogSum")


class Exact:
    """The exact results of a cell, ``hi + lo`` per output element (keepdims shape)."""

    def __init__(self, hi: np.ndarray, lo: np.ndarray):
        self.hi = hi
        self.lo = lo


def rows(case: Case, x: np.ndarray) -> np.ndarray:
    """``x`` as (kept elements, reduced elements): the reduced axes moved last."""
    axes = case.axes
    moved = np.moveaxis(x, axes, tuple(range(x.ndim - len(axes), x.ndim)))
    reduced = math.prod(x.shape[a] for a in axes)
    return moved.reshape(-1, reduced)


def exact_result(case: Case, x: np.ndarray) -> Exact | None:
    """The exact result of ``case`` on finite ``x``; None where it cannot be had (float64
    LogSumExp without a wide ``np.longdouble``)."""
    table = rows(case, x)
    wide = case.op in _LOGS and case.dtype == "float64"
    if wide and not WIDE_LONGDOUBLE:
        return None
    if case.op == "ReduceSum":
        pairs = [_exact_sum(r.astype(np.float64)) for r in table]
    elif case.op == "ReduceL2":
        pairs = [_sqrt_pair(*_exact_sum(_squares(r))) for r in table]
    elif case.op == "ReduceSumSquare":
        pairs = [_exact_sum(_squares(r)) for r in table]
    elif case.op == "ReduceLogSum":
        pairs = [_log_pair(*_exact_sum(r.astype(np.float64)), wide) for r in table]
    elif case.dtype != "float64":
        pairs = [_lse64(r.astype(np.float64)) for r in table]
    else:
        pairs = [_lse_long(r) for r in table]
    shape = tuple(1 if i in case.axes else d for i, d in enumerate(x.shape))
    kind = np.longdouble if wide else float
    hi = np.array([p[0] for p in pairs], dtype=kind).reshape(shape)
    lo = np.array([p[1] for p in pairs], dtype=np.float64).reshape(shape)
    return Exact(hi, lo)


def ulp_error(out: Any, exact: Exact | None, dtype: str) -> float | None:
    """max |out - exact| / ulp(exact) over the output elements, in ulps of ``dtype`` (inf
    when a result is not finite or of the wrong shape; None without an exact result)."""
    if exact is None:
        return None
    values = np.asarray(out)
    if values.shape != exact.hi.shape:
        return math.inf
    wide = exact.hi.dtype
    values = values.astype(np.float64).astype(wide)
    if not np.all(np.isfinite(values)):
        return math.inf
    diff = np.abs((values - exact.hi) - exact.lo.astype(wide))
    return float(np.max(diff / _ulp(exact, dtype))) if diff.size else 0.0


def _ulp(exact: Exact, dtype: str) -> np.ndarray:
    bits, emin = FORMATS[dtype]
    fraction, exponent = np.frexp(exact.hi)
    # hi a power of two and lo pulling toward zero: the exact value is in the binade below.
    below = (np.abs(fraction) == 0.5) & (exact.lo != 0) & (np.sign(exact.lo) != np.sign(exact.hi))
    top = np.maximum(exponent - 1 - below, emin)
    return np.ldexp(np.ones_like(exact.hi), top - (bits - 1))


def _exact_sum(values: np.ndarray) -> tuple[float, float]:
    items = values.tolist()
    hi = math.fsum(items)
    items.append(-hi)
    return hi, math.fsum(items)


def _squares(row: np.ndarray) -> np.ndarray:
    a = row.astype(np.float64)
    if row.dtype != np.float64:
        return a * a  # at most 2 x 24 significant bits: exact
    return np.concatenate(two_prod(a, a))  # no overflow in the data here


def _sqrt_pair(hi: float, lo: float) -> tuple[float, float]:
    """sqrt(hi + lo) as a pair: the float64 root and one Newton correction."""
    root = math.sqrt(hi)
    if root == 0.0:
        return 0.0, 0.0
    r = np.array([root])
    square_err = float(two_prod(r, r)[1][0])
    residual = ((hi - root * root) - square_err) + lo
    return root, residual / (2.0 * root)


def _log_pair(hi: float, lo: float, wide: bool) -> tuple[Any, float]:
    """log(hi + lo) for a positive exact sum, in float64 or ``np.longdouble``."""
    if wide:
        return np.log(np.longdouble(hi)) + np.longdouble(lo) / np.longdouble(hi), 0.0
    return math.log(hi) + lo / hi, 0.0


def _lse64(row: np.ndarray) -> tuple[float, float]:
    """LSE of a float64 row of narrow inputs as a (hi, lo) pair: the maximum's term is 1, the
    others summed exactly, the result ``m + log1p(rest)`` in ``np.longdouble`` (``log`` of a
    sum near 1 would leave results near zero a float64 rounding of 1 off, e.g. 4e-6 float32
    ulps for [0, -8]); in mpmath where ``m`` and the log cancel (rare: a result far below
    ``m``)."""
    at = int(np.argmax(row))
    m = float(row[at])
    rest = math.fsum(np.exp(np.delete(row, at) - m).tolist())
    total = np.longdouble(m) + np.log1p(np.longdouble(rest))
    if abs(total) < abs(m) * 2.0**-20:
        with mpmath.workprec(256):
            top = mpmath.mpf(m)
            exact = top + mpmath.log(mpmath.fsum(mpmath.exp(mpmath.mpf(v) - top)
                                                 for v in row.tolist()))
            hi = float(exact)
            return hi, float(exact - hi)
    hi = float(total)
    return hi, float(total - np.longdouble(hi))


def _lse_long(row: np.ndarray) -> tuple[np.longdouble, float]:
    wide = row.astype(np.longdouble)
    m = np.max(wide)
    terms = np.exp(wide - m)
    head = terms.astype(np.float64)
    tail = (terms - head).astype(np.float64)
    total_hi, total_lo = _exact_sum(np.concatenate([head, tail]))
    total = np.longdouble(total_hi) + np.longdouble(total_lo)
    return m + np.log(total), 0.0
