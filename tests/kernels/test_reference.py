"""kernels.reference called directly (no dispatch), against the exact oracle.

Most cases shrink ``blocks.BLOCK_ELEMENTS`` so every reduction is cut into many blocks: the
partials of a block (sums, maxima, tail sums and tie counts, integer limb sums) must combine into
the same result as one pass.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import oracle
from onnx_reduce.kernels import blocks, reference
from onnx_reduce.plan import make_plan
from onnx_reduce.spec import Request, latest, resolve

KERNELS = {"ReduceSum": reference.reduce_sum, "ReduceL2": reference.reduce_l2,
           "ReduceLogSumExp": reference.reduce_log_sum_exp}
FLOATS = [np.dtype(np.float16), oracle.bfloat16, np.dtype(np.float32), np.dtype(np.float64)]
#: (shape, axes): inner, outer, all, middle, two non-adjacent, a reduced axis of length 1
LAYOUTS = [((6, 50), (1,)), ((50, 6), (0,)), ((7, 9, 4), None), ((3, 40, 5), (1,)),
           ((9, 3, 11), (0, 2)), ((5, 1, 8), (1,))]


def plan_for(op: str, shape, axes, keepdims=True, noop=False, version=None):
    ver = resolve(op, version) if version else latest(op)
    return make_plan(Request(ver, axes, keepdims, noop), shape)


def run(op: str, data: np.ndarray, axes, **kwargs) -> np.ndarray:
    return KERNELS[op](data, plan_for(op, data.shape, axes, **kwargs))


def assert_within(result: np.ndarray, op: str, data: np.ndarray, axes, bound=None) -> None:
    exact = oracle.exact(op, data, axes, keepdims=result.ndim == data.ndim)
    assert result.dtype == data.dtype
    assert result.shape == exact.shape
    if data.dtype.kind in "iu":
        assert result.tolist() == oracle.round_array(exact, data.dtype).tolist()
        return
    if bound is None:
        bound = 2.0 if data.dtype == np.float64 else 1.0
    assert oracle.max_ulp_error(result, exact, data.dtype) <= bound


@pytest.fixture(params=[1, 7, 64, 1 << 18], ids=lambda b: f"block{b}")
def block(request, monkeypatch) -> int:
    monkeypatch.setattr(blocks, "BLOCK_ELEMENTS", request.param)
    return request.param


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize(("shape", "axes"), LAYOUTS)
@pytest.mark.parametrize("op", list(KERNELS))
def test_blocked_floats_match_oracle(op, shape, axes, dtype, block) -> None:
    rng = np.random.default_rng(abs(hash((op, shape))) % 2**32)
    x = rng.standard_normal(shape) * 4
    if op == "ReduceSum":
        x = np.abs(x)  # well-conditioned: the flat bound applies
    x = x.astype(dtype)
    assert_within(run(op, x, axes), op, x, axes)
    view = np.flip(np.ascontiguousarray(np.flip(x)))  # negative strides
    assert_within(run(op, view, axes), op, x, axes)


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint32, np.uint64])
@pytest.mark.parametrize(("shape", "axes"), LAYOUTS)
def test_blocked_integer_sum_and_l2_are_exact(shape, axes, dtype, block) -> None:
    info = np.iinfo(dtype)
    rng = np.random.default_rng(5)
    x = rng.integers(int(info.min), int(info.max), size=shape, dtype=dtype, endpoint=True)
    for op in ("ReduceSum", "ReduceL2"):
        assert_within(run(op, x, axes), op, x, axes)


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint32, np.uint64])
def test_blocked_integer_log_sum_exp_truncates(dtype, block) -> None:
    x = (np.arange(120).reshape(8, 15) % 11).astype(dtype)
    if np.dtype(dtype).kind == "i":
        x = x - np.array(6, dtype)
    for axes in ((1,), (0,), None):
        result = run("ReduceLogSumExp", x, axes, version=18)
        assert_within(result, "ReduceLogSumExp", x, axes)


def test_log_sum_exp_peak_and_specials_in_different_blocks(block) -> None:
    x = np.full((3, 40), -np.inf)
    x[0, 35] = 2.0          # the only finite value, in the last block
    x[1, :] = -5.0
    x[1, 39] = np.inf       # +inf late
    x[2, 0] = np.nan        # NaN early, +inf late
    x[2, 39] = np.inf
    got = run("ReduceLogSumExp", x, (1,), keepdims=False)
    assert got[0] == 2.0
    assert got[1] == np.inf
    assert np.isnan(got[2])


def test_log_sum_exp_ties_across_blocks(block) -> None:
    x = np.full(100, 3.0)
    got = run("ReduceLogSumExp", x, None, keepdims=False)
    assert oracle.ulp_error(got, oracle.exact("ReduceLogSumExp", x, keepdims=False)[()],
                            np.float64) <= 1.0  # 3 + log(100)


@pytest.mark.parametrize(("values", "scale"), [([3.0, 4.0], 1e-200), ([3.0, 4.0], 1e200),
                                               ([1.0] * 50, 1e300), ([1.0] * 50, 5e-324)])
def test_float64_l2_scaling_across_blocks(values, scale, block) -> None:
    x = np.array(values) * scale
    got = run("ReduceL2", x, None, keepdims=False)
    assert_within(got, "ReduceL2", x, None)


def test_integer_l2_limbs_carry_across_blocks(block) -> None:
    x = np.full(300, -(2**63), np.int64)
    x[::3] = 2**63 - 1
    got = run("ReduceL2", x, None, keepdims=False)
    want = math.isqrt(sum(int(v) ** 2 for v in x.tolist())) % 2**64
    assert int(got) == (want - 2**64 if want >= 2**63 else want)


def test_float32_sum_across_blocks_rounds_once(block) -> None:
    # 1 + 200 * 2**-30: a float32 accumulator loses every small term; float64 keeps them
    x = np.full(201, 2.0**-30, np.float32)
    x[0] = 1.0
    got = run("ReduceSum", x, None, keepdims=False)
    assert float(got) == float(np.float32(1 + 200 * 2.0**-30))
    assert float(got) != 1.0


@pytest.mark.parametrize("op", list(KERNELS))
def test_noop_and_empty(op) -> None:
    x = np.array([[-1.5, 2.0]], np.float32)
    noop = run(op, x, None, noop=True)
    want = np.abs(x) if op == "ReduceL2" else x
    assert noop.tolist() == want.tolist()
    assert not np.shares_memory(noop, x)
    empty = np.zeros((0, 4), np.float32)
    got = run(op, empty, (0,))
    fill = -np.inf if op == "ReduceLogSumExp" else 0.0
    assert got.tolist() == [[fill] * 4]
    u = np.array([3, 4], np.uint32)
    if op == "ReduceL2":
        assert run(op, u, None, noop=True).tolist() == [3, 4]


def test_integer_log_sum_exp_at_the_ends_of_int32() -> None:
    # 2**31 - 1 + log 2 and -2**31 + 1 + log(1 + e**-1): truncation stays in range
    for values in ([2**31 - 1, 2**31 - 1], [-(2**31), -(2**31) + 1], [-(2**31)]):
        x = np.array(values, np.int32)
        got = run("ReduceLogSumExp", x, None, version=18, keepdims=False)
        assert int(got) == int(oracle.expected("ReduceLogSumExp", x, keepdims=False))
    assert int(run("ReduceLogSumExp", np.array([-(2**31), -(2**31) + 1], np.int32), None,
                   version=18, keepdims=False)) == -(2**31) + 2


def test_reference_does_not_warn_on_specials() -> None:
    # pytest turns RuntimeWarnings from onnx_reduce into errors (pyproject filterwarnings)
    for dtype in FLOATS:
        x = np.array([[np.nan, 1.0], [np.inf, -np.inf], [-np.inf, -np.inf]]).astype(dtype)
        for op in KERNELS:
            run(op, x, (1,))


@pytest.mark.parametrize(("dtype", "top", "want"), [(np.int32, 2**31 - 1, -(2**31)),
                                                    (np.uint32, 2**32 - 1, 0)])
def test_integer_sum_over_all_axes_wraps_across_blocks(dtype, top, want) -> None:
    # Regression: the partials of a 0-d output were combined in numpy's widened dtype, and
    # the unwrapped int64 total did not fit back into the int32 output (OverflowError).
    x = np.zeros(blocks.BLOCK_ELEMENTS + 1, dtype)
    x[0], x[-1] = top, 1
    assert int(run("ReduceSum", x, None, keepdims=False)) == want


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceL2"])
@pytest.mark.parametrize("n", [20011, 4099])
def test_float64_columns_of_equal_values_within_contract(op, n) -> None:
    """Reduced rows that are strided in memory (outer axis) are summed pairwise like contiguous
    ones: term by term, 20011 equal float64 values came out 2.3 ulp off."""
    data = np.empty((n, 3))
    data[:] = [0.1, 1 / 3, 0.7]
    result = run(op, data, [0])
    worst = oracle.max_ulp_error(result, oracle.exact(op, data, [0]), np.float64)
    assert worst <= 1.0, worst


@pytest.mark.parametrize("keepdims", [True, False])
@pytest.mark.parametrize("shape", [(2,), (1, 2)])
def test_log_sum_refined_over_every_axis(shape, keepdims) -> None:
    """A float64 sum just above 1 over every axis (no kept dims): its exact recomputation is
    the result, not written into a copy of a scalar (found by the property tests)."""
    data = np.array([1.0, 3e-30]).reshape(shape)
    result = reference.reduce_log_sum(data, plan_for("ReduceLogSum", shape, None, keepdims))
    exact = oracle.exact("ReduceLogSum", data, None, keepdims)
    assert result.shape == exact.shape
    assert float(result.reshape(-1)[0]) == float(exact.reshape(-1)[0]) == 3e-30  # log1p(3e-30)
