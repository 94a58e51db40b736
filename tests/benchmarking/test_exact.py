"""The benchmark's ulp errors (onnx_reduce.benchmarking.exact) agree with the test suite's exact
oracle (Fractions, mpmath) on every op, dtype and layout."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import oracle
from onnx_reduce.benchmarking.cases import ALL_OPS, LAYOUTS, Case, input_for, make_input
from onnx_reduce.benchmarking.exact import WIDE_LONGDOUBLE, exact_result, ulp_error

OPS = ALL_OPS
DTYPES = ("float32", "float64", "float16", "bfloat16")


def _oracle_ulps(out: np.ndarray, x: np.ndarray, case: Case) -> float:
    exact = oracle.exact(case.op, x, list(case.axes), True)
    return max(float(oracle.ulp_error(v, e, x.dtype))
               for v, e in zip(out.ravel(), exact.ravel(), strict=True))


def _naive(case: Case, x: np.ndarray) -> np.ndarray:
    """A result of the dtype that is off by a few ulps: float32 arithmetic throughout."""
    wide = x.astype(np.float32)
    if case.op == "ReduceSum":
        out = np.sum(wide, axis=case.axes, keepdims=True)
    elif case.op == "ReduceL2":
        out = np.sqrt(np.sum(wide * wide, axis=case.axes, keepdims=True))
    elif case.op == "ReduceSumSquare":
        out = np.sum(wide * wide, axis=case.axes, keepdims=True)
    elif case.op == "ReduceLogSum":
        out = np.log(np.sum(wide, axis=case.axes, keepdims=True))
    else:
        out = np.log(np.sum(np.exp(wide), axis=case.axes, keepdims=True))
    return out.astype(x.dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", OPS)
def test_ulp_errors_match_the_exact_oracle(op, dtype):
    if op.startswith("ReduceLog") and dtype == "float64" and not WIDE_LONGDOUBLE:
        pytest.skip("np.longdouble is float64 here: float64 logs are not measured")
    for layout in LAYOUTS:
        case = Case(op, layout, dtype, "latency")
        x = input_for(case, seed=11)
        exact = exact_result(case, x)
        rounded = oracle.expected(op, x, list(case.axes), True)
        assert ulp_error(rounded, exact, dtype) <= 0.5  # correctly rounded
        naive = _naive(case, x)
        ours, theirs = ulp_error(naive, exact, dtype), _oracle_ulps(naive, x, case)
        assert ours == pytest.approx(theirs, rel=1e-3, abs=1e-3), layout


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(-1e3, 1e3, width=32), min_size=1, max_size=40),
       st.sampled_from(OPS))
@example([0.0, -8.0], "ReduceLogSumExp")  # a result near zero: log of a sum near 1
@example([-0.6931472, -0.6931472], "ReduceLogSumExp")  # the maximum and the log cancel
def test_float32_rows_with_cancellation_match_the_oracle(values, op):
    if op == "ReduceLogSum":  # its benchmark inputs are magnitudes (a log of a sum > 0)
        values = [abs(v) or 1.0 for v in values]
    x = np.array(values, np.float32).reshape(1, -1)
    case = Case(op, "inner", "float32", "latency")
    exact = exact_result(case, x)
    rounded = oracle.expected(op, x, [1], True)
    assert ulp_error(rounded, exact, "float32") <= 0.5 + 1e-6
    off = np.nextafter(rounded, np.float32(np.inf))  # one ulp up
    if np.all(np.isfinite(off)) and rounded.item() != 0:
        assert ulp_error(off, exact, "float32") == pytest.approx(
            _oracle_ulps(off, x, case), rel=1e-6, abs=1e-6)


def test_wrong_shapes_and_overflows_score_infinity():
    case = Case("ReduceSum", "inner", "float16", "latency")
    x = make_input(case.shape, case.np_dtype)
    exact = exact_result(case, x)
    assert ulp_error(np.zeros((8,), np.float16), exact, "float16") == math.inf
    bad = np.zeros((8, 1), np.float16)
    bad[3, 0] = np.inf
    assert ulp_error(bad, exact, "float16") == math.inf
    assert ulp_error(bad, None, "float16") is None
