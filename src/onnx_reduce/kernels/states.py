"""Partial states of each reduction: reduce pieces of an array separately, merge, round once.

For chunked and distributed evaluation (:mod:`onnx_reduce.interop.dask_ops`): the result of
``finish(op, merge(op, concatenated partials, axes), dtype)`` equals the one-pass result of
:mod:`.reference` within the contract, whatever the pieces (one element, empty, +-inf/NaN in
some only). Three functions, one state definition per op (:data:`STATES`):

* ``partial(op, data, axes)`` -> the state of one piece, a structured numpy array of the
  piece's shape with ``axes`` kept at length 1 (so pieces' states concatenate like arrays);
* ``merge(op, states, axes)`` -> the states of pieces concatenated along ``axes``, reduced
  along them to length 1 (associative: any grouping gives the result within the contract);
* ``finish(op, state, dtype)`` -> the output values of ``dtype``, rounded once.

The states (``acc``: float64 for float16/bfloat16/float32, :data:`~.dtypes.EXTENDED` for float64,
as the reference path accumulates):

* Sum: floats ``sum`` in ``acc``; integers ``sum`` in the input dtype, wrapping.
* L2: floats ``(exp, ssq)``, the sum of squares ``ssq * 4**exp`` with ``exp`` a power-of-two
  scale (float64: from the piece's largest magnitude, so squares neither overflow nor
  underflow, and rescaling by ``4**k`` is exact; the narrower floats' squares fit float64,
  ``exp = 0``); integers six uint64 limb sums of the exact sum of squares
  (:func:`.reference.limb_sums`, exact for up to 2**32 elements per output).
* LogSumExp: floats ``(peak, tail, ties)``: the maximum, the sum of exp(x - peak) over the
  elements below it and the number equal to it, so the result is
  ``peak + log1p(tail + ties - 1)`` as in the reference; integers ``(peak, total, count)``
  with ``total`` from the exact integer gaps.

ReduceLogSumExp outputs that nearly cancel the maximum are not vouched for by any fixed
precision: :func:`log_sum_exp_limit` gives the magnitude at and under which a finished output
must be recomputed from its input slice (:func:`.exact_lse.refine_log_sum_exp`).

>>> x = np.array([[800.0, 1.0, 800.0, 2.0]])
>>> pieces = [partial("ReduceLogSumExp", piece, (1,)) for piece in (x[:, :2], x[:, 2:])]
>>> state = merge("ReduceLogSumExp", np.concatenate(pieces, axis=1), (1,))
>>> finish("ReduceLogSumExp", state, x.dtype)
array([[800.69314718]])
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..spec.dtypes import accumulator, is_float
from .exact_lse import reference_bound, threshold
from .reference import integer_log_sum_exp_result, limb_roots, limb_sums
from .rounding import round_to

Axes = tuple[int, ...]

#: The scale exponent of an L2 state holding only zeros: below any real scale, so merging
#: it rescales its zero sum and leaves the others exact.
ZERO_SCALE = -(1 << 20)


@dataclass(frozen=True)
class StateOps:
    """One op's state: its structured dtype for an input dtype, and the three steps."""

    state_dtype: Callable[[np.dtype], np.dtype]
    partial: Callable[[np.ndarray, Axes], np.ndarray]
    merge: Callable[[np.ndarray, Axes], np.ndarray]
    finish: Callable[[np.ndarray, np.dtype], np.ndarray]


def partial(op: str, data: np.ndarray, axes: Axes) -> np.ndarray:
    """The state of ``data`` reduced over ``axes`` (normalized, non-negative), kept at length 1.

    ``data`` must be in the machine's byte order."""
    return STATES[op].partial(data, tuple(axes))


def merge(op: str, states: np.ndarray, axes: Axes) -> np.ndarray:
    """``states`` (partials concatenated along ``axes``) merged into one per output."""
    return STATES[op].merge(states, tuple(axes))


def finish(op: str, state: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """The outputs of ``dtype`` from merged ``state``: one rounding."""
    return STATES[op].finish(state, np.dtype(dtype))


def state_dtype(op: str, dtype: np.dtype) -> np.dtype:
    """The structured dtype of ``op``'s states for inputs of ``dtype``."""
    return STATES[op].state_dtype(np.dtype(dtype))


def log_sum_exp_limit(dtype: np.dtype, n: int, merges: int, group: int) -> float:
    """The magnitude at and under which a finished float ReduceLogSumExp output of ``dtype``
    (``n`` elements reduced, each term through at most ``merges`` merges of at most ``group``
    states) may be off by more than the contract, so must be recomputed from its data.

    The bound of the one-pass reference plus, per merge, the rescaling exp (4 ulp), its
    product and the shift's rounding (2 ulp) and the sum of ``group`` states, times 2."""
    absolute, relative = reference_bound(np.dtype(dtype), n)
    if n > 1:
        wide = float(np.finfo(accumulator(dtype)).eps) / 2
        absolute += 2.0 * merges * (6 + group) * wide
    return threshold(np.dtype(dtype), (absolute, relative))


# ----------------------------------------------------------------------------- helpers


def _new(dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    return np.empty(shape, dtype)


def _kept_shape(data: np.ndarray, axes: Axes) -> tuple[int, ...]:
    return tuple(1 if i in axes else n for i, n in enumerate(data.shape))


def _rows(data: np.ndarray, axes: Axes, dtype: np.dtype) -> np.ndarray:
    """``data`` as ``dtype``, reduced axes moved last and flattened into one contiguous row per
    output (numpy sums a contiguous row pairwise), kept axes at their places with length 1
    for the reduced ones: shape ``(*kept_shape, n)``."""
    moved = np.moveaxis(data, axes, range(data.ndim - len(axes), data.ndim))
    kept = moved.shape[: data.ndim - len(axes)]
    rows = moved.astype(dtype, order="C").reshape(*kept, -1)
    return rows.reshape(*_kept_shape(data, axes), rows.shape[-1])


# ----------------------------------------------------------------------------- ReduceSum


def _sum_dtype(dtype: np.dtype) -> np.dtype:
    return np.dtype([("sum", accumulator(dtype) if is_float(dtype) else dtype)])


def _sum_partial(data: np.ndarray, axes: Axes) -> np.ndarray:
    state = _new(_sum_dtype(data.dtype), _kept_shape(data, axes))
    acc = state.dtype["sum"]
    with np.errstate(invalid="ignore", over="ignore"):  # inf + -inf is NaN, as IEEE says
        if acc == np.float64 or not is_float(data.dtype):  # float64 sums of narrow floats
            state["sum"] = np.add.reduce(data, axis=axes, dtype=acc, keepdims=True)
        else:  # float64 input: pairwise in extended precision, as the reference
            state["sum"] = np.add.reduce(_rows(data, axes, acc), axis=-1)
    return state


def _sum_merge(states: np.ndarray, axes: Axes) -> np.ndarray:
    merged = _new(states.dtype, _kept_shape(states, axes))
    with np.errstate(invalid="ignore", over="ignore"):
        merged["sum"] = np.add.reduce(states["sum"], axis=axes, keepdims=True,
                                      dtype=states.dtype["sum"])
    return merged


def _sum_finish(state: np.ndarray, dtype: np.dtype) -> np.ndarray:
    values = state["sum"]
    return round_to(values, dtype) if is_float(dtype) else values.astype(dtype)


# ----------------------------------------------------------------------------- ReduceL2


def _l2_dtype(dtype: np.dtype) -> np.dtype:
    if not is_float(dtype):
        return np.dtype([("limbs", np.uint64, (6,))])
    return np.dtype([("exp", np.int32), ("ssq", accumulator(dtype))])


def _l2_partial(data: np.ndarray, axes: Axes) -> np.ndarray:
    state = _new(_l2_dtype(data.dtype), _kept_shape(data, axes))
    if not is_float(data.dtype):
        state["limbs"] = limb_sums(_rows(data, axes, data.dtype))
        return state
    acc = state.dtype["ssq"]
    if acc == np.float64:  # float16/bfloat16/float32: squares fit float64, no scaling
        wide = data.astype(acc)
        state["exp"] = 0
        state["ssq"] = np.add.reduce(np.square(wide, out=wide), axis=axes, keepdims=True)
        return state
    rows = _rows(data, axes, acc)
    magnitude = np.abs(rows).max(axis=-1, initial=0.0)
    finite = np.isfinite(magnitude)
    scale = np.frexp(np.where(finite, magnitude, 1.0))[1]
    scale = np.where(magnitude == 0, ZERO_SCALE, np.where(finite, scale, 0))
    scaled = np.ldexp(rows, -scale[..., None])
    state["exp"] = scale
    state["ssq"] = np.add.reduce(np.square(scaled, out=scaled), axis=-1)
    return state


def _l2_merge(states: np.ndarray, axes: Axes) -> np.ndarray:
    merged = _new(states.dtype, _kept_shape(states, axes))
    if "limbs" in states.dtype.names:
        merged["limbs"] = np.add.reduce(states["limbs"], axis=axes, keepdims=True)
        return merged
    exp = states["exp"].max(axis=axes, keepdims=True)
    with np.errstate(under="ignore"):  # a piece 2**-1000 below the largest adds nothing
        rescaled = np.ldexp(states["ssq"], 2 * (states["exp"] - exp))
    merged["exp"] = exp
    with np.errstate(invalid="ignore"):
        merged["ssq"] = np.add.reduce(rescaled, axis=axes, keepdims=True)
    return merged


def _l2_finish(state: np.ndarray, dtype: np.dtype) -> np.ndarray:
    if not is_float(dtype):
        return limb_roots(state["limbs"], dtype)
    with np.errstate(under="ignore"):
        return round_to(np.ldexp(np.sqrt(state["ssq"]), state["exp"]), dtype)


# ----------------------------------------------------------------------------- ReduceLogSumExp


def _lse_dtype(dtype: np.dtype) -> np.dtype:
    if not is_float(dtype):
        return np.dtype([("peak", dtype), ("total", np.float64), ("count", np.int64)])
    acc = accumulator(dtype)
    return np.dtype([("peak", acc), ("tail", acc), ("ties", acc)])


def _lse_partial(data: np.ndarray, axes: Axes) -> np.ndarray:
    state = _new(_lse_dtype(data.dtype), _kept_shape(data, axes))
    if not is_float(data.dtype):
        return _integer_lse_partial(data, axes, state)
    rows = _rows(data, axes, state.dtype["peak"])
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        peak = rows.max(axis=-1, initial=-np.inf)
        shift = np.where(np.isfinite(peak), peak, 0)
        centred = np.subtract(rows, shift[..., None], out=rows)
        below = centred < 0
        terms = np.exp(np.minimum(centred, 0, out=centred), out=centred)
        state["tail"] = np.add.reduce(np.where(below, terms, 0), axis=-1)
        state["ties"] = np.add.reduce(~below, axis=-1)  # elements equal to a finite peak
    state["peak"] = peak
    return state


def _integer_lse_partial(data: np.ndarray, axes: Axes, state: np.ndarray) -> np.ndarray:
    rows = _rows(data, axes, data.dtype)
    peak = rows.max(axis=-1, initial=np.iinfo(data.dtype).min)
    gaps = peak[..., None].astype(np.uint64) - rows.astype(np.uint64)  # exact, modulo 2**64
    state["peak"] = peak
    state["total"] = np.add.reduce(np.exp(-gaps.astype(np.float64)), axis=-1)
    state["count"] = rows.shape[-1]
    return state


def _lse_merge(states: np.ndarray, axes: Axes) -> np.ndarray:
    merged = _new(states.dtype, _kept_shape(states, axes))
    peak = states["peak"].max(axis=axes, keepdims=True)
    merged["peak"] = peak
    if "count" in states.dtype.names:
        gaps = peak.astype(np.uint64) - states["peak"].astype(np.uint64)  # exact, mod 2**64
        weighted = states["total"] * np.exp(-gaps.astype(np.float64))
        merged["total"] = np.add.reduce(weighted, axis=axes, keepdims=True)
        merged["count"] = np.add.reduce(states["count"], axis=axes, keepdims=True)
        return merged
    with np.errstate(invalid="ignore", over="ignore"):  # non-finite peaks: not used
        top = states["peak"] == peak
        weight = np.exp(np.where(top, 0, states["peak"] - np.where(np.isfinite(peak), peak, 0)))
        below = (states["tail"] + states["ties"]) * weight
        merged["tail"] = np.add.reduce(np.where(top, states["tail"], below), axis=axes,
                                       keepdims=True)
        merged["ties"] = np.add.reduce(np.where(top, states["ties"], 0), axis=axes,
                                       keepdims=True)
    return merged


def _lse_finish(state: np.ndarray, dtype: np.dtype) -> np.ndarray:
    peak = state["peak"]
    if not is_float(dtype):
        return integer_log_sum_exp_result(peak, state["total"], state["count"])
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        total = np.log1p(state["tail"] + (state["ties"] - 1))
        result = np.where(np.isfinite(peak), peak + total, peak)
    return round_to(result, dtype)


STATES: dict[str, StateOps] = {
    "ReduceSum": StateOps(_sum_dtype, _sum_partial, _sum_merge, _sum_finish),
    "ReduceL2": StateOps(_l2_dtype, _l2_partial, _l2_merge, _l2_finish),
    "ReduceLogSumExp": StateOps(_lse_dtype, _lse_partial, _lse_merge, _lse_finish),
}


def merges_along(nblocks: int, group: int) -> int:
    """How many merges a term goes through when ``nblocks`` pieces are merged in groups of
    ``group`` (the depth of the tree, at least one: the final merge)."""
    return max(1, math.ceil(math.log(max(nblocks, 1), max(group, 2)) - 1e-9) + 1)
