"""Integer ReduceLogSumExp whose f = log(sum exp(x - M)) lies within float64's rounding of an
integer: truncated as the exact value says, on every path, against mpmath."""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest

import onnx_reduce
from onnx_reduce.kernels.exact_integer_lse import decided_totals, near_integer

#: The two inputs found by a search (gaps chosen greedily so that the sum lands beside e**k).
FOUND = [
    np.array([100, 99, 99, 99, 99, 98, 97, 97, 95, 94, 94, 91, 89, 89, 87, 84, 81, 79, 75, 73,
              72, 72, 69, 68, 68, 67, 65, 64, 63, 63, 62, 60, 59, 58, 56], np.int64),
    np.array([-5 - g for g in (0, 1, 1, 1, 1, 2, 3, 3, 5, 6, 6, 9, 11, 11, 13, 16, 19, 21, 25,
                               27, 28, 28, 31, 32, 32, 33, 35, 36, 37, 37, 38, 40, 41, 42, 42,
                               43, 44, 44)], np.int32),
]


def exact(row: np.ndarray) -> int:
    """The LSE of an integer row truncated toward zero (the spec's cast), in 400 bits."""
    with mpmath.workprec(400):
        value = mpmath.log(mpmath.fsum(mpmath.exp(int(v)) for v in row))
        return int(mpmath.floor(value) if value >= 0 else mpmath.ceil(value))


def beside(k: int, above: bool, peak: int, terms: int = 40) -> np.ndarray:
    """Integers whose f is just below (or above) ``k``: gaps chosen greedily, each the smallest
    whose term still fits under e**k, then (``above``) one more that passes it."""
    gaps = [0]
    with mpmath.workprec(400):
        left = mpmath.exp(k) - 1
        while len(gaps) < terms and left > 0:
            gap = int(mpmath.ceil(-mpmath.log(left)))
            gaps.append(gap)
            left -= mpmath.exp(-gap)
        if above:
            gaps.append(int(mpmath.floor(-mpmath.log(left))))
    return np.array([peak - g for g in gaps], np.int64)


@pytest.mark.parametrize("row", FOUND, ids=["int64-above-zero", "int32-below-zero"])
def test_the_found_inputs_truncate_as_the_exact_value(row):
    want = exact(row)
    opset = 18 if row.dtype == np.int64 else 13
    assert onnx_reduce.reduce_log_sum_exp(row, keepdims=False, opset=opset) == want
    assert want in (100, -3)  # float64 alone gave 101 and -4


@pytest.mark.parametrize("k", [1, 2, 3])
@pytest.mark.parametrize("above", [False, True])
@pytest.mark.parametrize("peak", [7, -1, -2, -3, -40])
def test_sums_beside_e_to_the_k_on_either_side(k, above, peak):
    row = beside(k, above, peak)
    assert onnx_reduce.reduce_log_sum_exp(row, keepdims=False, opset=18) == exact(row)


def test_layouts_and_many_outputs_take_the_same_decision():
    rows = np.stack([beside(1, False, 100, 30), beside(2, True, -5, 29), beside(3, False, 0, 30)])
    want = [exact(row) for row in rows]
    got = onnx_reduce.reduce_log_sum_exp(rows, axes=[1], keepdims=False, opset=18)
    assert got.tolist() == want
    columns = np.ascontiguousarray(rows.T)
    assert onnx_reduce.reduce_log_sum_exp(columns, axes=[0], keepdims=False, opset=18).tolist(
        ) == want
    reversed_rows = rows[::-1, ::-1]
    assert onnx_reduce.reduce_log_sum_exp(reversed_rows, axes=[1], keepdims=False,
                                          opset=18).tolist() == want[::-1]


def test_near_integer_flags_what_float64_cannot_decide():
    assert near_integer(np.array([math.e, math.exp(2.0), 2.0, 1.0]), 3).tolist() == [
        True, True, False, False]  # f = 0 (one element at the maximum) is never flagged


def test_decided_totals_fall_on_the_exact_side():
    rows = np.array([beside(1, False, 0, 30), beside(1, True, 0, 29)])
    assert np.log(decided_totals(rows, np.zeros(2, np.int64))).tolist() == [0.75, 1.25]


@pytest.mark.parametrize("chunks", [1, 4, 7])
def test_dask_chunks_merge_their_states_and_decide_the_same(chunks):
    """Chunked dask reductions finish from merged states (maximum, float64 total, count): the
    outputs near an integer are flagged from the state and decided from their own slices."""
    da = pytest.importorskip("dask.array")
    rows = np.stack([FOUND[0], FOUND[0] - 7])
    want = [exact(row) for row in rows]
    lazy = onnx_reduce.reduce_log_sum_exp(da.from_array(rows, chunks=(1, chunks)), axes=[1],
                                          keepdims=False, opset=18)
    assert lazy.compute().tolist() == want
