"""Gradients of the reductions with respect to their data, in numpy: what the torch and
jax front doors call for backward passes (they hold no numerics themselves).

Given the upstream gradient ``grad`` (shaped as the result) the data gradient is
``grad * weight`` broadcast over the reduced axes, with the weight (the op registry names it)

- ReduceSum: 1;
- ReduceL2: x / ‖x‖, 0 where the norm is 0 (the subgradient torch and jax choose);
- ReduceLogSumExp: the softmax exp(x − y), with y the result: exponents are <= 0, so no overflow;
- ReduceSumSquare: 2x;
- ReduceLogSum: 1 / sum(x), the sum recomputed from the float64 data by the reference path (its
  wide accumulator keeps cancelling sums; exp(-y) would carry y's rounding); 1/0 is inf, as the
  derivative of log says.

Where the usual formula gives NaN we take the limit instead, so the weights of a slice still sum
to what they sum to elsewhere (1 for ReduceLogSumExp): a slice of all −inf (y = −inf) gets weight
0, as torch#31829 and jax#6811 settle on; a ReduceLogSumExp slice holding +inf (y = +inf) splits
the weight evenly among its +inf elements (the softmax's limit as they grow together), others 0;
a ReduceL2 slice holding ±inf gives its infinite elements sign(x)/√k (k of them), others 0. A
slice holding NaN has NaN weights (its result is NaN). float16, bfloat16 and float32 weights are
computed in float64 (for ReduceLogSumExp and ReduceL2 from a float64 result) and rounded once. A
float64 ReduceL2 norm in the subnormal range is recomputed from the data scaled by a power of two:
its own rounding would be up to 2**-1074 / y relative, in every weight of the slice.
"""

from __future__ import annotations

import numpy as np

from ..plan import ReductionPlan
from ..spec import op_record
from . import reference
from .dispatch import run_kernel


def data_gradient(
    op: str, plan: ReductionPlan, grad: np.ndarray, data: np.ndarray, result: np.ndarray
) -> np.ndarray:
    """The gradient of ``op`` (planned as ``plan``) with respect to ``data``, in data's dtype.

    >>> from onnx_reduce.plan import make_plan
    >>> from onnx_reduce.spec import Request, resolve
    >>> plan = make_plan(Request(resolve("ReduceLogSumExp", 18), (0,), False, False), (2,))
    >>> x = np.array([0.0, np.log(3.0)])
    >>> data_gradient("ReduceLogSumExp", plan, np.array(1.0), x, np.array(np.log(4.0)))
    array([0.25, 0.75])
    """
    kept = kept_shape(plan)
    wide = np.dtype(np.float64)
    upstream = np.asarray(grad).reshape(kept).astype(wide, copy=False)
    weight_of = _WEIGHTS[op_record(op).gradient]
    if weight_of is None:  # the weight is 1
        weighted = np.broadcast_to(upstream, plan.shape)
    else:
        x = np.asarray(data).astype(wide, copy=False)
        weight = weight_of(plan, x, _wide_result(op, plan, data, result).reshape(kept))
        with np.errstate(over="ignore"):  # a weight times a large upstream gradient: inf
            weighted = upstream * weight  # a numpy scalar for 0-d data: made an array below
    with np.errstate(over="ignore"):  # beyond the dtype's range: inf, its rounding
        return np.asarray(weighted).astype(data.dtype)


def kept_shape(plan: ReductionPlan) -> tuple[int, ...]:
    """The result's shape with every reduced axis kept (as 1): it broadcasts against the data."""
    return tuple(1 if axis in plan.axes else dim for axis, dim in enumerate(plan.shape))


def _wide_result(op: str, plan: ReductionPlan, data: np.ndarray, result: np.ndarray) -> np.ndarray:
    """The result in float64: narrow-float ReduceLogSumExp and ReduceL2 results are recomputed in
    float64 (the rounded one would shift every exponent by |y| ulps, or every weight by one)."""
    if op in ("ReduceLogSumExp", "ReduceL2") and data.dtype != np.float64:
        return np.asarray(run_kernel(op, data.astype(np.float64), plan))
    return np.asarray(result).astype(np.float64, copy=False)


def _l2_weight(plan: ReductionPlan, x: np.ndarray, norm: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        weight = np.where(norm == 0, 0.0, x / norm)
        subnormal = (norm > 0) & (norm < _SMALLEST_NORMAL)
        if subnormal.any():
            weight = np.where(subnormal, _scaled_l2_weight(plan, x), weight)
        if np.isposinf(norm).any():
            infinite = np.isinf(x)
            count = infinite.sum(axis=plan.axes, keepdims=True)
            shared = np.where(infinite, np.sign(x) / np.sqrt(count), 0.0)
            weight = np.where(np.isposinf(norm), shared, weight)
    return weight


_SMALLEST_NORMAL = np.finfo(np.float64).tiny
_SUBNORMAL_SCALE = 2.0**600  # a subnormal-norm slice becomes normal and none of it overflows


def _scaled_l2_weight(plan: ReductionPlan, x: np.ndarray) -> np.ndarray:
    """x / ‖x‖ from x scaled by 2**600, for slices whose norm is subnormal (exact scaling: their
    elements are all below 2**-1022); other slices may overflow here and are not used."""
    with np.errstate(over="ignore", invalid="ignore"):
        scaled = x * _SUBNORMAL_SCALE
        norm = np.asarray(run_kernel("ReduceL2", scaled, plan)).reshape(kept_shape(plan))
        return scaled / norm


def _softmax_weight(plan: ReductionPlan, x: np.ndarray, lse: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        weight = np.exp(x - lse)
        if np.isposinf(lse).any():
            infinite = np.isposinf(x)
            count = infinite.sum(axis=plan.axes, keepdims=True)
            weight = np.where(np.isposinf(lse), np.where(infinite, 1.0 / count, 0.0), weight)
    return np.where(np.isneginf(lse), 0.0, weight)


def _twice_x_weight(plan: ReductionPlan, x: np.ndarray, _: np.ndarray) -> np.ndarray:
    return 2.0 * x


def _reciprocal_sum_weight(plan: ReductionPlan, x: np.ndarray, _: np.ndarray) -> np.ndarray:
    total = reference.reduce_sum(x, plan).reshape(kept_shape(plan))
    with np.errstate(divide="ignore", over="ignore"):  # 1/0 and 1/subnormal: inf
        return np.broadcast_to(1.0 / total, plan.shape)


#: The registry's gradient names -> weight functions (None: the weight is 1).
_WEIGHTS = {"broadcast": None, "l2": _l2_weight, "softmax": _softmax_weight,
            "twice_x": _twice_x_weight, "reciprocal_sum": _reciprocal_sum_weight}
