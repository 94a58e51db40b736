"""The reference path: plain numpy, blocked, extended-precision accumulation. The oracle.

Each function takes the input and a :class:`~onnx_reduce.plan.ReductionPlan` and returns the
output array. The contract they implement (see the README, "Numerics"):

* float16/bfloat16/float32 accumulate in float64, float64 in extended precision where the
  platform has it; the result is rounded once;
* ReduceLogSumExp is shifted by the maximum and uses ``log1p``, so no finite input overflows or
  underflows; ReduceL2 of float64 is scaled by a power of two for the same reason;
* integer ReduceSum and ReduceSumSquare wrap modulo 2**bits; integer ReduceL2 is the exact
  floor(sqrt(sum x**2)), integer ReduceLogSum the exact floor(log(sum x));
* ReduceLogSum outputs whose a-priori bound could break the contract (sums near 1 or
  cancelling) are recomputed exactly, as ReduceLogSumExp's are.

>>> from onnx_reduce.spec import Request, resolve
>>> from onnx_reduce.plan import make_plan
>>> x = np.array([800.0, 800.0])
>>> plan = make_plan(Request(resolve("ReduceLogSumExp", 18), None, True, False), x.shape)
>>> float(reduce_log_sum_exp(x, plan)[0])
800.6931471805599
"""

from __future__ import annotations

import math

import numpy as np

from ..plan import ReductionPlan
from ..spec.dtypes import accumulator, is_float
from .blocks import blockwise
from .exact_integer_lse import decided_totals, near_integer
from .exact_log_sum import floor_log, log_sum_suspects, refine_log_sum
from .exact_lse import (
    dd_sum_rows,
    dd_sums,
    flagged_rows,
    reference_bound,
    refine_log_sum_exp,
    suspects,
    threshold,
    two_prod,
)
from .rounding import round_to


def reduce_sum(data: np.ndarray, plan: ReductionPlan) -> np.ndarray:
    """ReduceSum: wraps for integers, one rounding for floats."""
    if plan.noop:
        return data.copy()
    if plan.reduced_size == 0:
        return np.zeros(plan.output_shape, data.dtype)
    view, nkept = kept_first(data, plan)
    if not is_float(data.dtype):
        out = np.empty(plan.kept_shape, data.dtype)
        blockwise(view, nkept, lambda b, _: np.add.reduce(b, axis=-1, dtype=data.dtype),
                  _sum_partials, out)
        return out.reshape(plan.output_shape)
    acc = accumulator(data.dtype)
    out = np.empty(plan.kept_shape, acc)
    with np.errstate(invalid="ignore"):  # inf + -inf is NaN, as IEEE says
        blockwise(view, nkept, lambda b, _: np.add.reduce(_rows_in_order(b, acc), axis=-1),
                  _sum_partials, out)
    return round_to(out, data.dtype).reshape(plan.output_shape)


def reduce_l2(data: np.ndarray, plan: ReductionPlan) -> np.ndarray:
    """ReduceL2: sqrt of the sum of squares, free of intermediate overflow and underflow."""
    if plan.noop:
        return data.copy() if data.dtype.kind == "u" else np.abs(data)
    if plan.reduced_size == 0:
        return np.zeros(plan.output_shape, data.dtype)
    view, nkept = kept_first(data, plan)
    if not is_float(data.dtype):
        return _integer_l2(view, nkept, plan).reshape(plan.output_shape)
    acc = accumulator(data.dtype)
    # Power-of-two scale per output, from the largest magnitude: exact, and keeps the squares
    # of float64 inputs in range (narrower floats cannot overflow float64 squares).
    scale_exp = np.zeros(plan.kept_shape, np.int64)
    if data.dtype == np.float64:
        scale_exp = _scale_exponents(view, nkept, plan)

    def sum_of_squares(block: np.ndarray, kept_index: tuple) -> np.ndarray:
        wide = _rows_in_order(block, acc)
        if data.dtype == np.float64:
            wide = np.ldexp(wide, -scale_exp[kept_index][..., None])
        return np.add.reduce(np.square(wide, out=wide), axis=-1)

    ssq = np.empty(plan.kept_shape, acc)
    blockwise(view, nkept, sum_of_squares, _sum_partials, ssq)
    result = np.ldexp(np.sqrt(ssq), scale_exp)
    return round_to(result, data.dtype).reshape(plan.output_shape)


def reduce_sum_square(data: np.ndarray, plan: ReductionPlan) -> np.ndarray:
    """ReduceSumSquare: integers wrap in their dtype; float16/bfloat16/float32 square and sum
    in float64 (the squares are exact) and round once; float64 squares exactly (TwoProd) and
    sums in double-double (:func:`_float64_sum_square`). No-op: the elementwise square."""
    if plan.reduced_size == 0 and not plan.noop:
        return np.zeros(plan.output_shape, data.dtype)
    view, nkept = _slices(data, plan)
    if not is_float(data.dtype):
        out = np.empty(plan.kept_shape, data.dtype)
        with np.errstate(over="ignore"):
            blockwise(view, nkept,
                      lambda b, _: np.add.reduce(np.square(b), axis=-1, dtype=data.dtype),
                      _sum_partials, out)
        return out.reshape(plan.output_shape)
    if data.dtype == np.float64:
        return _float64_sum_square(view, nkept, plan).reshape(plan.output_shape)
    wide = np.empty(plan.kept_shape, np.float64)
    blockwise(view, nkept, lambda b, _: np.add.reduce(
        np.square(_rows_in_order(b, np.dtype(np.float64))), axis=-1), _sum_partials, wide)
    return round_to(wide, data.dtype).reshape(plan.output_shape)


def _float64_sum_square(view: np.ndarray, nkept: int, plan: ReductionPlan) -> np.ndarray:
    """Sum of squares of float64 slices within 1 ulp (in the normal range): each slice scaled
    by a power of two from its largest magnitude (no overflow or underflow of the squares),
    squares exact as double-doubles, summed pairwise in double-double, rounded once and scaled
    back. Slices holding inf or NaN take the plain sum (inf or NaN)."""
    scale_exp = _scale_exponents(view, nkept, plan)

    def sums(block: np.ndarray, kept_index: tuple) -> np.ndarray:
        scaled = np.ldexp(block, -scale_exp[kept_index][..., None])
        return np.stack(dd_sums(*two_prod(scaled, scaled)), axis=-1)

    parts = np.empty((*plan.kept_shape, 3), np.float64)
    with np.errstate(invalid="ignore", over="ignore", under="ignore"):
        blockwise(view, nkept, sums, _dd_partials, parts)
        total = np.ldexp(parts[..., 0] + parts[..., 1], 2 * scale_exp)
    return np.where(np.isfinite(parts[..., 2]), total, parts[..., 2])


def _dd_partials(partials: list[np.ndarray]) -> np.ndarray:
    """Merge (head, tail, plain) partial sums: double-double for (head, tail), plain for plain."""
    stacked = np.stack(partials, axis=-2)  # (..., blocks, 3)
    rows = (-1, stacked.shape[-2])
    head, tail = dd_sum_rows(stacked[..., 0].reshape(rows), stacked[..., 1].reshape(rows))
    shape = stacked.shape[:-2]
    plain = np.add.reduce(stacked[..., 2], axis=-1)
    return np.stack([head.reshape(shape), tail.reshape(shape), plain], axis=-1)


def reduce_log_sum(data: np.ndarray, plan: ReductionPlan) -> np.ndarray:
    """ReduceLogSum: ``log(sum x)`` from a sum in the wide accumulator; outputs whose error
    bound could exceed the contract (a sum near 1, or cancelling) are recomputed from the exact
    sum (:mod:`.exact_log_sum`). log of 0 is -inf, of a negative sum NaN; empty gives -inf.
    Integers: :func:`_integer_log_sum`. No-op: the elementwise log."""
    if plan.reduced_size == 0 and not plan.noop:
        if not is_float(data.dtype):
            raise ValueError(
                f"ReduceLogSum: the reduction over an empty set is -inf, which "
                f"{data.dtype} cannot represent (input shape {list(data.shape)})"
            )
        return np.full(plan.output_shape, -np.inf, data.dtype)
    view, nkept = _slices(data, plan)
    if not is_float(data.dtype):
        return _integer_log_sum(view, nkept, plan).reshape(plan.output_shape)
    acc = accumulator(data.dtype)

    def sum_and_magnitude(block: np.ndarray, _: tuple) -> np.ndarray:
        wide = _rows_in_order(block, acc)
        return np.stack([np.add.reduce(wide, axis=-1), np.add.reduce(np.abs(wide), axis=-1)],
                        axis=-1)

    sums = np.empty((*plan.kept_shape, 2), acc)
    with np.errstate(invalid="ignore", divide="ignore"):
        blockwise(view, nkept, sum_and_magnitude, _sum_partials, sums)
        result = np.log(sums[..., 0])
    rounded = round_to(result, data.dtype)
    mask = log_sum_suspects(sums, rounded, data.dtype, plan.reduced_size)
    refine_log_sum(view, nkept, rounded, mask)
    return rounded.reshape(plan.output_shape)


def _integer_log_sum(view: np.ndarray, nkept: int, plan: ReductionPlan) -> np.ndarray:
    """Integer ReduceLogSum: ``floor(log S)`` of the exact sum ``S`` (no wrap-around; the
    spec's Log takes no integers, so the rule follows integer ReduceLogSumExp: the exact value
    truncated toward zero). ``S <= 0`` (log -inf or NaN) raises ``ValueError``."""
    sums = np.empty((*plan.kept_shape, 2), np.uint64)
    blockwise(view, nkept, lambda block, _: half_sums(block), _sum_partials, sums)
    return floor_logs(sums, view.dtype)


def half_sums(block: np.ndarray) -> np.ndarray:
    """The exact sum of each row of the integer ``block`` (reduced axis last) as the uint64
    sums of its elements' high and low 32-bit halves (a trailing axis of 2), which add
    without overflow for up to 2**32 elements (the high sums modulo 2**64, signed)."""
    wide = block.astype(np.int64 if block.dtype.kind == "i" else np.uint64)
    high = (wide >> 32).astype(np.int64).view(np.uint64)  # signed sums modulo 2**64
    low = (wide & 0xFFFFFFFF).astype(np.uint64)
    return np.stack([np.add.reduce(high, axis=-1), np.add.reduce(low, axis=-1)], axis=-1)


def floor_logs(sums: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``floor(log S)`` of each :func:`half_sums` total ``S`` (assembled exactly in Python
    integers) as ``dtype``; ``ValueError`` for ``S <= 0``."""
    out = np.empty(math.prod(sums.shape[:-1]), dtype)
    for i, (high, low) in enumerate(sums.reshape(-1, 2).tolist()):
        if high >= 1 << 63:
            high -= 1 << 64
        out[i] = floor_log(dtype, (high << 32) + low)
    return out.reshape(sums.shape[:-1])


def _slices(data: np.ndarray, plan: ReductionPlan) -> tuple[np.ndarray, int]:
    """:func:`kept_first`, or for a no-op each element a slice of its own (the elementwise
    part of the operator is its reduction of one element)."""
    if plan.noop:
        return data[..., None], data.ndim
    return kept_first(data, plan)


def _scale_exponents(view: np.ndarray, nkept: int, plan: ReductionPlan) -> np.ndarray:
    """Per output, the binary exponent of the largest magnitude (0 where it is 0 or not
    finite): scaling by 2**-e keeps every square of a float64 slice at most 1."""
    amax = np.empty(plan.kept_shape, np.float64)
    blockwise(view, nkept, lambda b, _: np.maximum.reduce(np.abs(b), axis=-1),
              _max_partials, amax)
    finite_nonzero = np.isfinite(amax) & (amax > 0)
    return np.where(finite_nonzero, np.frexp(np.where(finite_nonzero, amax, 1.0))[1], 0)


def reduce_log_sum_exp(data: np.ndarray, plan: ReductionPlan) -> np.ndarray:
    """ReduceLogSumExp: ``m + log1p(sum_{x<m} exp(x - m) + (count(x == m) - 1))``, m the max;
    outputs whose error bound could exceed the contract are recomputed exactly
    (:mod:`.exact_lse`). Integers: :func:`_integer_log_sum_exp`.
    """
    integer = not is_float(data.dtype)
    if plan.noop:  # log(exp(x)) is x, but -0 + log(1) is +0, as the function body gives it
        return data.copy() if integer else data + np.zeros((), data.dtype)
    if plan.reduced_size == 0:
        if integer:
            raise ValueError(
                f"ReduceLogSumExp: the reduction over an empty set is -inf, which "
                f"{data.dtype} cannot represent (input shape {list(data.shape)})"
            )
        return np.full(plan.output_shape, -np.inf, data.dtype)
    view, nkept = kept_first(data, plan)
    if integer:
        return _integer_log_sum_exp(view, nkept, plan).reshape(plan.output_shape)
    acc = accumulator(data.dtype)
    peak = np.empty(plan.kept_shape, acc)
    with np.errstate(invalid="ignore"):  # ml_dtypes' maximum warns on NaN; NaN is an input here
        blockwise(view, nkept, lambda b, _: np.maximum.reduce(b, axis=-1).astype(acc),
                  _max_partials, peak)
    finite = np.isfinite(peak)
    shift = np.where(finite, peak, 0)

    def tail_and_ties(block: np.ndarray, kept_index: tuple) -> np.ndarray:
        centred = block.astype(acc) - shift[kept_index][..., None]
        below = centred < 0
        terms = np.exp(np.minimum(centred, 0), out=centred)
        tail = np.add.reduce(np.where(below, terms, 0), axis=-1)
        ties = np.add.reduce(~below, axis=-1)  # elements equal to the peak (where it is finite)
        return np.stack([tail, ties.astype(acc)], axis=-1)

    sums = np.empty((*plan.kept_shape, 2), acc)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        blockwise(view, nkept, tail_and_ties, _sum_partials, sums)
        result = np.where(finite, peak + np.log1p(sums[..., 0] + (sums[..., 1] - 1)), peak)
    rounded = round_to(result, data.dtype)
    limit = threshold(data.dtype, reference_bound(data.dtype, plan.reduced_size))
    refine_log_sum_exp(view, nkept, rounded, suspects(rounded, data.dtype, limit))
    return rounded.reshape(plan.output_shape)


def _integer_log_sum_exp(view: np.ndarray, nkept: int, plan: ReductionPlan) -> np.ndarray:
    """Integer LSE: ``M + f`` truncated toward zero (the spec's CastLike), saturated at the
    dtype's maximum, with ``M`` the exact integer maximum and ``f = log(sum exp(x - M))`` in
    float64 from the exact gaps ``M - x`` (modulo 2**64, so int64 gaps do not overflow).

    ``f >= 0``, and ``f > 0`` exactly when there are two elements or more, so the result is
    ``M + floor(f)`` when ``M + f >= 0``, else ``M + max(ceil(f), 1)``: never below max(x),
    monotone in every element. The float64 ``f`` only matters near an integer ``f >= 1``, which
    no input reaches exactly (e**k is not a sum of powers of e**-1); there the side is decided
    in extended precision (:mod:`.exact_integer_lse`).
    """
    dtype = view.dtype
    peak = np.empty(plan.kept_shape, dtype)
    blockwise(view, nkept, lambda b, _: np.maximum.reduce(b, axis=-1), _max_partials, peak)
    top = peak.astype(np.uint64)

    def terms(block: np.ndarray, kept_index: tuple) -> np.ndarray:
        gaps = top[kept_index][..., None] - block.astype(np.uint64)  # exact, modulo 2**64
        return np.add.reduce(np.exp(-gaps.astype(np.float64)), axis=-1)

    total = np.empty(plan.kept_shape, np.float64)
    blockwise(view, nkept, terms, _sum_partials, total)
    result = integer_log_sum_exp_result(peak, total, plan.reduced_size)
    near = near_integer(total, plan.reduced_size)
    if near.any():  # f within float64's rounding of an integer: decided in extended precision
        refine_integer_log_sum_exp(view, nkept, result, near)
    return result


def refine_integer_log_sum_exp(view: np.ndarray, nkept: int, result: np.ndarray,
                               mask: np.ndarray) -> None:
    """Recompute in place the integer LSE outputs ``mask`` flags (flat, C order of the kept
    axes) from their slices (``view``: kept axes first), each ``f`` decided in extended
    precision (:func:`.exact_integer_lse.decided_totals`)."""
    flat = result.reshape(-1)
    for batch, rows in flagged_rows(view, nkept, mask, view.dtype):
        peaks = rows.max(axis=-1)
        flat[batch] = integer_log_sum_exp_result(peaks, decided_totals(rows, peaks),
                                                 rows.shape[1])


def integer_log_sum_exp_result(peak: np.ndarray, total: np.ndarray, count) -> np.ndarray:
    """Integer LSE from the exact maximum ``peak`` (the input dtype), ``total`` = sum of
    exp(x - peak) (float64, >= 1) and the number of elements ``count`` (see
    :func:`_integer_log_sum_exp`)."""
    dtype = peak.dtype
    top = peak.astype(np.uint64)
    f = np.log(total)  # total >= 1: the maximum's own term
    below_zero = (peak < 0) & (f < -peak.astype(np.float64))
    lift = np.maximum(np.ceil(f), np.where(np.asarray(count) > 1, 1.0, 0.0))
    step = np.where(below_zero, lift, np.floor(f)).astype(np.uint64)
    room = np.uint64(np.iinfo(dtype).max) - top  # exact, modulo 2**64
    summed = (top + step).astype(dtype)  # wraps back into the signed range: exact
    return np.where(step > room, np.iinfo(dtype).max, summed).astype(dtype)


def kept_first(data: np.ndarray, plan: ReductionPlan) -> tuple[np.ndarray, int]:
    """A view of ``data`` with the kept axes first and the reduced axes last (no copy)."""
    nred = len(plan.axes)
    return np.moveaxis(data, plan.axes, range(data.ndim - nred, data.ndim)), data.ndim - nred


def _rows_in_order(block: np.ndarray, acc: np.dtype) -> np.ndarray:
    """``block`` as ``acc``, each reduced row contiguous: numpy sums a contiguous axis
    pairwise (error ~log2(n) roundings), a strided one term by term (~n roundings)."""
    return block.astype(acc, order="C")


def _sum_partials(partials: list[np.ndarray]) -> np.ndarray:
    # Keep the partials' dtype: numpy would widen int32/uint32 to 64 bits, and a widened
    # (unwrapped) scalar does not fit back into a 0-d int32 output.
    stacked = np.stack(partials)
    return np.add.reduce(stacked, axis=0, dtype=stacked.dtype)


def _max_partials(partials: list[np.ndarray]) -> np.ndarray:
    return np.maximum.reduce(np.stack(partials), axis=0)


_LIMB = np.uint64(32)
_LOW = np.uint64(0xFFFFFFFF)


def _integer_l2(view: np.ndarray, nkept: int, plan: ReductionPlan) -> np.ndarray:
    """Exact floor(sqrt(sum x**2)) for 32- and 64-bit integers, wrapped to the dtype."""
    sums = np.empty((*plan.kept_shape, 6), np.uint64)
    blockwise(view, nkept, lambda block, _: limb_sums(block), _sum_partials, sums)
    return limb_roots(sums, view.dtype)


def limb_sums(block: np.ndarray) -> np.ndarray:
    """The exact sum of squares of each row of ``block`` (reduced axis last) as six uint64
    limb sums (a trailing axis of 6), which add without overflow for up to 2**32 elements.

    |x| = a * 2**32 + b, so x**2 = a*a * 2**64 + 2*a*b * 2**32 + b*b; each product is split in
    32-bit halves.
    """
    magnitude = _magnitude(block)
    high, low = magnitude >> _LIMB, magnitude & _LOW
    parts = []
    for product in (high * high, high * low, low * low):
        parts += [np.add.reduce(product >> _LIMB, axis=-1),
                  np.add.reduce(product & _LOW, axis=-1)]
    return np.stack(parts, axis=-1)


def limb_roots(sums: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """floor(sqrt(total)) of each :func:`limb_sums` total (trailing axis of 6), wrapped to
    ``dtype``: one exact Python integer per output."""
    bits = dtype.itemsize * 8
    flat = sums.reshape(-1, 6)
    roots = np.empty(len(flat), np.uint64)
    for i, (hh_hi, hh_lo, hl_hi, hl_lo, ll_hi, ll_lo) in enumerate(flat.tolist()):
        total = (((hh_hi << 32) + hh_lo) << 64) + (((hl_hi << 32) + hl_lo) << 33) \
            + (ll_hi << 32) + ll_lo
        roots[i] = math.isqrt(total) % (1 << bits) % (1 << 64)
    return roots.astype(dtype).reshape(sums.shape[:-1])


def _magnitude(block: np.ndarray) -> np.ndarray:
    """|x| as uint64, exact also for the most negative int64."""
    if block.dtype.kind == "u":
        return block.astype(np.uint64)
    as_unsigned = block.astype(np.int64).view(np.uint64)
    return np.where(block < 0, ~as_unsigned + np.uint64(1), as_unsigned)
