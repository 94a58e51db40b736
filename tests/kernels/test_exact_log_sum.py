"""ReduceLogSum's exact recomputation: the suspect test, the exact sum, the integer log; and the
reference path's results on the hard families (sums near 1, cancelling sums) against mpmath."""

from __future__ import annotations

import math
import sys
from fractions import Fraction

import mpmath
import numpy as np
import pytest

import oracle
from onnx_reduce import reduce_log_sum
from onnx_reduce.kernels import exact_log_sum
from onnx_reduce.kernels.dispatch import kernel_path
from onnx_reduce.kernels.exact_log_sum import _exact_sum, floor_log
from onnx_reduce.kernels.exact_log_sum import exact_log_sum as exact_row

FLOATS = [np.dtype(np.float16), oracle.bfloat16, np.dtype(np.float32), np.dtype(np.float64)]


def _ulps(result: np.ndarray, data: np.ndarray, axes) -> float:
    return oracle.max_ulp_error(result, oracle.exact("ReduceLogSum", data, axes), data.dtype)


def _near_one_rows(dtype: np.dtype, rows: int, n: int, seed: int) -> np.ndarray:
    """Positive rows normalised to sum close to 1 (in float64, then rounded to ``dtype``)."""
    x = np.random.default_rng(seed).random((rows, n))
    return (x / x.sum(axis=1, keepdims=True)).astype(dtype)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("n", [2, 7, 300, 5000])
def test_sums_near_one_within_the_contract(dtype, n) -> None:
    data = _near_one_rows(dtype, 40, n, seed=n)
    with kernel_path("reference"):
        result = reduce_log_sum(data, axes=[1])
    assert _ulps(result, data, [1]) <= 0.5 + 2.0**-20  # recomputed: correctly rounded


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_cancelling_sums_within_the_contract(dtype) -> None:
    """The last element nearly cancels the others: the wide sum keeps few correct bits."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((50, 64)).astype(dtype)
    rest = -x[:, :-1].astype(np.float64).sum(axis=1) + rng.random(50) * 2.0**-8
    x[:, -1] = rest.astype(dtype)
    with kernel_path("reference"):
        result = reduce_log_sum(x, axes=[1])
    assert _ulps(result, x, [1]) <= (2.0 if dtype == np.float64 else 1.0)


def test_a_float64_sum_lost_to_rounding_is_recovered() -> None:
    """1e16 + 1 - 1e16 is 0 in float64 (log -inf); the exact sum is 1 (log 0)."""
    x = np.array([[1e16, 1.0, -1e16], [0.5, 0.5, 2.0**-80]])
    with kernel_path("reference"):
        got = reduce_log_sum(x, axes=[1], keepdims=False)
    assert got[0] == 0.0
    assert got[1] == float(mpmath.log1p(mpmath.mpf(2) ** -80))


@pytest.mark.parametrize(("values", "want"), [
    ([1.0, -1.0], -math.inf), ([1.0, -2.0], math.nan), ([], -math.inf), ([math.inf, 1.0], math.inf),
    ([math.inf, -math.inf], math.nan), ([-math.inf, 1.0], math.nan), ([math.nan, 1.0], math.nan),
    ([0.0, 0.0], -math.inf), ([1.0], 0.0), ([0.25, 0.75], 0.0),
])
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_special_sums(values, want, dtype) -> None:
    data = np.array(values, np.float64).astype(dtype)
    with kernel_path("reference"):
        got = float(reduce_log_sum(data, keepdims=False))
    if math.isnan(want):
        assert math.isnan(got)
    else:
        assert got == want


def test_suspects_flag_uncertain_signs_and_sums_near_one_only() -> None:
    dtype = np.dtype(np.float32)
    gamma, _ = exact_log_sum.sum_bound(dtype, 100)
    sums = np.array([[1.0, 100.0], [0.0, 1.0], [-1.0, 1.0], [-1e-20, 1.0], [50.0, 60.0],
                     [np.inf, np.inf], [0.0, 0.0]])
    with np.errstate(divide="ignore", invalid="ignore"):
        rounded = np.log(sums[:, 0]).astype(dtype)
    mask = exact_log_sum.log_sum_suspects(sums, rounded, dtype, 100)
    # near 1 | a zero sum of nonzero terms | sure negative | uncertain sign | far | inf | all 0
    assert mask.tolist() == [True, True, False, True, False, False, False]
    assert gamma > 0
    assert exact_log_sum.sum_bound(dtype, 1)[0] == 0.0  # one element is exact


def test_exact_sum_is_exact() -> None:
    rng = np.random.default_rng(2)
    row = rng.standard_normal(1000) * 2.0 ** rng.integers(-60, 60, 1000)
    assert _exact_sum(row) == sum(map(Fraction, row.tolist()), Fraction(0))
    huge = np.array([1.7e308, 1.7e308, -1.7e308])  # fsum's partial sums overflow
    assert _exact_sum(huge) == Fraction(1.7e308)
    assert exact_row(np.array([1e308, 1e308]), np.dtype(np.float64)) == float(
        mpmath.log(mpmath.mpf(1e308) * 2))


@pytest.mark.parametrize("total", [1, 2, 3, 7, 8, 20, 21, 2**31, 2**63, 2**64 * 3, 2**96])
def test_floor_log_is_exact(total) -> None:
    with mpmath.workprec(400):
        want = int(mpmath.floor(mpmath.log(total)))
    assert floor_log(np.dtype(np.int64), total) == want


@pytest.mark.parametrize("k", range(1, 60))
def test_floor_log_at_the_powers_of_e(k) -> None:
    """Just below and at ceil(e**k): the integer log steps there, nowhere else."""
    with mpmath.workprec(400):
        top = int(mpmath.ceil(mpmath.exp(k)))
    assert floor_log(np.dtype(np.uint64), top) == k
    assert floor_log(np.dtype(np.uint64), top - 1) == k - 1


@pytest.mark.parametrize("total", [0, -1, -(2**70)])
def test_floor_log_of_a_sum_at_most_0_is_a_value_error(total) -> None:
    what = "-inf" if total == 0 else "NaN"
    with pytest.raises(ValueError, match=rf"ReduceLogSum: .* sum is {total}, whose log \({what}\)"):
        floor_log(np.dtype(np.int32), total)


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint32, np.uint64])
def test_integer_log_sum_does_not_wrap(dtype) -> None:
    info = np.iinfo(dtype)
    data = np.full((3, 1000), info.max, dtype)  # the sum wraps in the dtype, not here
    want = math.floor(math.log(1000 * int(info.max)))
    got = reduce_log_sum(data, axes=[1], keepdims=False, opset=18)
    assert got.tolist() == [want] * 3
    assert got.dtype == dtype


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_the_double_double_stage_decides_narrow_rows_correctly_rounded(dtype) -> None:
    """Narrow rows near 1 are decided without mpmath, each value the correctly rounded log;
    float64 rows always go on to mpmath."""
    data = _near_one_rows(dtype, 30, 200, seed=9)
    values, decided = exact_log_sum._double_double_log_sum(data.astype(np.float64), dtype)
    if dtype == np.float64:
        assert not decided.any()
        return
    assert decided.all()
    want = oracle.round_array(oracle.exact("ReduceLogSum", data, [1], keepdims=False), dtype)
    np.testing.assert_array_equal(values, want)


def test_the_double_double_stage_leaves_undecidable_sums_to_mpmath() -> None:
    """A sum below the double-double bound (2**-1000 beside 1) is not decided there."""
    rows = np.array([[1.0, 2.0**-1000, -1.0], [0.5, 0.5, 2.0**-60]])
    _, decided = exact_log_sum._double_double_log_sum(rows, np.dtype(np.float32))
    assert decided.tolist() == [False, True]


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("path", ["reference", "fast"])
def test_rows_near_one_are_decided_without_the_exact_path(dtype, path, monkeypatch) -> None:
    """Rows normalised to sum to 1 (some to exactly 1 in their dtype): the compiled
    triple-double stage decides every one, correctly rounded."""
    pytest.importorskip("onnx_reduce.kernels.fast.extended")
    calls = []
    monkeypatch.setattr(exact_log_sum, "exact_log_sum",
                        lambda row, dtype: calls.append(1) or exact_row(row, dtype))
    data = _near_one_rows(dtype, 300, 12, seed=11)
    with kernel_path(path):
        result = reduce_log_sum(data, axes=[1])
    assert not calls
    assert _ulps(result, data, [1]) <= 0.5 + 2.0**-20
    assert (result == 0).any()  # rows whose sum is exactly 1 (checked exactly, not bounded)


@pytest.mark.parametrize("dtype", [np.dtype(np.float32), np.dtype(np.float64)], ids=str)
def test_float32_rows_near_one_stop_at_double_double(dtype, monkeypatch) -> None:
    """The compiled double-double stage decides every float32 row near 1 (the rows summing to
    exactly 1 proven exactly); float64 rows skip it for triple-double. (float16's and
    bfloat16's rows near 1 are not even suspect.)"""
    extended = pytest.importorskip("onnx_reduce.kernels.fast.extended")
    calls: dict[str, list] = {"dd_log_sum_rows": [], "td_log_sum_rows": []}
    for name, record in calls.items():
        original = getattr(extended, name)
        monkeypatch.setattr(extended, name, lambda rows, record=record, original=original:
                            record.append(len(rows)) or original(rows))
    data = _near_one_rows(dtype, 300, 12, seed=12)
    with kernel_path("fast"):
        result = reduce_log_sum(data, axes=[1])
    assert _ulps(result, data, [1]) <= 0.5 + 2.0**-20
    narrow = dtype != np.float64
    assert (sum(calls["dd_log_sum_rows"]) > 0) == narrow
    assert (sum(calls["td_log_sum_rows"]) > 0) == (not narrow)


def test_the_first_stage_is_double_double_without_numba(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "onnx_reduce.kernels.fast.extended", None)
    rows = _near_one_rows(np.dtype(np.float64), 5, 12, seed=1).astype(np.float64)
    _, decided = exact_log_sum.first_stage(rows, np.dtype(np.float64))
    assert not decided.any()  # numpy's double-double never decides float64
