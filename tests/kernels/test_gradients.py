"""The data gradients of onnx_reduce.kernels.gradients against exact values (mpmath) and the
documented conventions where the plain formulas give NaN."""

import math

import mpmath
import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from onnx_reduce.kernels.gradients import data_gradient
from onnx_reduce.plan import make_plan
from onnx_reduce.spec import Request, resolve

mpmath.mp.prec = 200


def _plan(op, shape, axes, keepdims=True, noop=False):
    return make_plan(Request(resolve(op, 18), tuple(axes), keepdims, noop), shape)


def _grad(op, x, axes, result, grad=None, keepdims=True):
    plan = _plan(op, x.shape, axes, keepdims)
    grad = np.ones(plan.output_shape, x.dtype) if grad is None else grad
    return data_gradient(op, plan, grad, x, np.asarray(result, x.dtype))


def _exact_softmax(row):
    total = mpmath.fsum(mpmath.exp(mpmath.mpf(float(v))) for v in row)
    return [float(mpmath.exp(mpmath.mpf(float(v))) / total) for v in row]


def _exact_lse(row):
    return float(mpmath.log(mpmath.fsum(mpmath.exp(mpmath.mpf(float(v))) for v in row)))


floats = st.floats(-700, 700, allow_nan=False)


@settings(max_examples=60, deadline=None)
@given(st.lists(floats, min_size=1, max_size=12))
def test_log_sum_exp_gradient_is_the_exact_softmax(values):
    x = np.array(values)
    lse = _exact_lse(values)
    got = _grad("ReduceLogSumExp", x, (0,), [lse])
    want = np.array(_exact_softmax(values))
    # exp(x - L) with L the float64 result: L's rounding and the subtraction's shift the exponent
    # by up to (|L| + |x - L|) u, exp's own error adds a few u; relative, for every element
    allowed = 2.0**-52 * (abs(lse) + np.abs(x - lse)) + 2.0**-50
    assert np.all(np.abs(got - want) <= allowed * want + 1e-300), (got, want)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(-1e150, 1e150, allow_nan=False), min_size=1, max_size=12))
@example([2.2250738585e-313, 2.2250738585e-313])  # a subnormal norm: its rounding is 5e-12
@example([5e-324, -1.5e-323, 2e-310])
def test_l2_gradient_is_x_over_the_exact_norm(values):
    x = np.array(values)
    norm = mpmath.sqrt(mpmath.fsum(mpmath.mpf(v) ** 2 for v in values))
    got = _grad("ReduceL2", x, (0,), [float(norm)])
    want = [0.0 if norm == 0 else float(mpmath.mpf(v) / norm) for v in values]
    np.testing.assert_allclose(got, want, rtol=4e-16, atol=0)


def test_float32_l2_gradient_uses_a_float64_norm():
    """A float32 norm is off by up to half an ulp: weights from it would be off by one here."""
    x = np.array([0.8216181397438049, 0.3304370641708374, -1.3031572103500366], dtype=np.float32)
    norm = mpmath.sqrt(mpmath.fsum(mpmath.mpf(float(v)) ** 2 for v in x))
    got = _grad("ReduceL2", x, (0,), [np.float32(norm)])
    want = np.array([float(mpmath.mpf(float(v)) / norm) for v in x], dtype=np.float32)
    assert np.array_equal(got, want)


def test_float32_log_sum_exp_gradient_uses_a_float64_result():
    """A float32 result of 1e4 is off by up to half an ulp (5e-4): the weights must not be."""
    x = np.array([10000.0, 10000.5, 9999.25], dtype=np.float32)
    got = _grad("ReduceLogSumExp", x, (0,), [_exact_lse(x)])
    want = np.array(_exact_softmax(x), dtype=np.float32)
    assert np.array_equal(got, want)


def test_sum_gradient_broadcasts_the_upstream_gradient_over_reduced_axes():
    x = np.zeros((2, 3, 4), np.float32)
    grad = np.arange(8, dtype=np.float32).reshape(2, 4)
    got = _grad("ReduceSum", x, (1,), np.zeros((2, 4)), grad, keepdims=False)
    assert np.array_equal(got, np.repeat(grad[:, None, :], 3, axis=1))


@pytest.mark.parametrize(
    ("op", "values", "want"),
    [
        ("ReduceLogSumExp", [-math.inf, -math.inf], [0.0, 0.0]),  # torch#31829, jax#6811
        ("ReduceLogSumExp", [math.inf, 1.0, math.inf], [0.5, 0.0, 0.5]),
        ("ReduceLogSumExp", [-math.inf, 0.0], [0.0, 1.0]),
        ("ReduceL2", [0.0, 0.0], [0.0, 0.0]),
        ("ReduceL2", [math.inf, 2.0, -math.inf, math.inf, -math.inf], [0.5, 0.0, -0.5, 0.5, -0.5]),
    ],
)
def test_limits_where_the_formula_gives_nan(op, values, want):
    x = np.array(values)
    result = {"ReduceLogSumExp": _exact_lse, "ReduceL2": lambda v: math.hypot(*v)}[op](values)
    assert np.array_equal(_grad(op, x, (0,), [result]), np.array(want))


@pytest.mark.parametrize("op", ["ReduceLogSumExp", "ReduceL2"])
def test_a_slice_holding_nan_has_nan_weights_and_others_are_untouched(op):
    x = np.array([[np.nan, 1.0], [0.0, 0.0]])
    result = [[np.nan], [math.log(2.0) if op == "ReduceLogSumExp" else 0.0]]
    got = _grad(op, x, (1,), result)
    assert np.isnan(got[0]).all()
    assert np.array_equal(got[1], [0.5, 0.5] if op == "ReduceLogSumExp" else [0.0, 0.0])


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_sum_square_gradient_is_twice_x_times_the_upstream(dtype):
    x = np.array([[1.5, -2.0, 0.25], [3.0, 0.0, -0.5]], dtype)
    grad = np.array([[2.0], [-1.0]], dtype)
    got = _grad("ReduceSumSquare", x, [1], np.zeros((2, 1), dtype), grad)
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, (2 * x.astype(np.float64) * grad).astype(dtype))


def test_log_sum_gradient_is_the_reciprocal_of_the_exact_sum():
    x = np.array([[1e16, 1.0, -1e16 + 2.0], [0.25, 0.5, 0.25]])  # a plain float64 sum: 2, not 3
    got = _grad("ReduceLogSum", x, [1], np.zeros((2, 1)))
    assert got[1].tolist() == [1.0, 1.0, 1.0]
    with mpmath.workprec(200):
        total = mpmath.fsum(mpmath.mpf(v) for v in x[0])
    assert got[0].tolist() == [float(1 / total)] * 3


def test_log_sum_gradient_of_a_zero_sum_is_infinite_and_narrow_floats_use_float64_sums():
    x = np.array([[1.0, -1.0], [0.1, 0.2]], np.float32)
    got = _grad("ReduceLogSum", x, [1], np.zeros((2, 1), np.float32))
    assert np.isposinf(got[0]).all()
    want = np.float32(1 / (np.float64(np.float32(0.1)) + np.float64(np.float32(0.2))))
    assert got[1].tolist() == [want, want]


@pytest.mark.parametrize(
    ("op", "x", "grad", "want"),
    [
        # 1 / 5e-324 overflows float64: the derivative of log at a subnormal sum is inf
        ("ReduceLogSum", np.array([[5e-324, 0.0]]), None, [[np.inf, np.inf]]),
        # 2 * 3e38 is beyond float32: inf, the rounding of the true gradient
        ("ReduceSumSquare", np.array([[3e38, 1.0]], np.float32), None, [[np.inf, 2.0]]),
        # a large upstream gradient times a weight of 2e300: beyond float64
        ("ReduceSumSquare", np.array([[1e300, 1.0]]), np.array([[1e10]]), [[np.inf, 2e10]]),
    ],
)
def test_gradients_beyond_the_range_are_inf_without_a_warning(op, x, grad, want):
    """Overflow of a gradient is its correct rounding, not an event to warn about (RuntimeWarnings
    from onnx_reduce are errors in this suite)."""
    got = _grad(op, x, [1], np.zeros((1, 1), x.dtype), grad=grad)
    assert got.dtype == x.dtype
    assert got.tolist() == want
