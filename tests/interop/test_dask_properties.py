"""Property: for any chunking (chunks of one element, empty chunks, +-inf/NaN in some chunks
only) and any axes, the dask result is within the contract of the exact oracle and equals the
in-memory path (float16/bfloat16/float32/integers identically, float64 within 2 ulp)."""

import math

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import onnx_reduce
import oracle
from onnx_reduce.interop import dask_ops
from onnx_reduce.kernels.dispatch import kernel_path

da = pytest.importorskip("dask.array")

FUNCTIONS = {"ReduceSum": onnx_reduce.reduce_sum, "ReduceL2": onnx_reduce.reduce_l2,
             "ReduceLogSumExp": onnx_reduce.reduce_log_sum_exp}
FLOATS = [np.float16, ml_dtypes.bfloat16, np.float32, np.float64]
INTEGERS = [np.int32, np.int64, np.uint32, np.uint64]
SPECIALS = [np.inf, -np.inf, np.nan]


@st.composite
def partitions(draw, size):
    """Chunk sizes summing to ``size``, zeros allowed."""
    cuts = sorted(draw(st.lists(st.integers(0, size), max_size=4)))
    return tuple(b - a for a, b in zip([0, *cuts], [*cuts, size], strict=True))


@st.composite
def cases(draw):
    shape = tuple(draw(st.lists(st.integers(1, 6), min_size=1, max_size=3)))
    dtype = np.dtype(draw(st.sampled_from(FLOATS + INTEGERS)))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    if dtype.kind == "f" or dtype == ml_dtypes.bfloat16:
        data = (rng.standard_normal(shape) * 4).astype(dtype)
        for _ in range(draw(st.integers(0, 3))):  # specials in some chunks only
            index = tuple(draw(st.integers(0, n - 1)) for n in shape)
            data[index] = draw(st.sampled_from(SPECIALS))
    else:
        info = np.iinfo(dtype)
        data = rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)
    chunks = tuple(draw(partitions(n)) for n in shape)
    rank = len(shape)
    axes = draw(st.none() | st.lists(st.integers(-rank, rank - 1),
                                     unique_by=lambda a: a % rank, max_size=rank))
    op = draw(st.sampled_from(list(FUNCTIONS)))
    return op, data, chunks, axes, draw(st.booleans()), draw(st.sampled_from([2, 3, 16]))


def _float_errors_allowed(op, data, axes, exact):
    """Contract ulps, plus for ReduceSum the accumulator's rounding relative to sum |x| (a
    cancelling sum is as exact as its accumulation, float64 or extended, not its result)."""
    bound = 2.0 if data.dtype == np.float64 else 1.0
    if op != "ReduceSum":
        return bound, None
    magnitude = oracle.exact("ReduceSum", np.abs(data.astype(np.float64)), axes)
    return bound, magnitude


def _check_float(op, got, want, data, axes, keepdims):
    exact = oracle.exact(op, data, axes, keepdims)
    bound, magnitude = _float_errors_allowed(op, data, axes if axes else None, exact)
    flat_got, flat_exact = got.reshape(-1), exact.reshape(-1)
    flat_magnitude = None if magnitude is None else magnitude.reshape(-1)
    for i, (value, truth) in enumerate(zip(flat_got.tolist(), flat_exact, strict=True)):
        error = oracle.ulp_error(value, truth, data.dtype)
        if error > bound and flat_magnitude is not None and math.isfinite(float(truth)):
            slack = float(flat_magnitude[i]) * data.size * 2.0**-60
            assert abs(value - float(truth)) <= slack + 2 * float(oracle.ulp(truth, data.dtype))
        else:
            assert error <= bound
    if data.dtype == np.float64:
        np.testing.assert_array_max_ulp(got, want, maxulp=2)
    else:
        np.testing.assert_array_equal(got.astype(np.float64), want.astype(np.float64))


@settings(max_examples=150, deadline=None)
@given(cases())
def test_any_chunking_matches_the_oracle_and_the_in_memory_path(case):
    op, data, chunks, axes, keepdims, split_every = case
    reduce = FUNCTIONS[op]
    kwargs = {"axes": axes, "keepdims": keepdims, "opset": 18}
    with np.errstate(all="ignore"):
        with kernel_path("reference"):
            want = reduce(data, **kwargs)
        in_memory = reduce(data, **kwargs)
        lazy = dask_ops.reduce(
            op, da.from_array(data, chunks=chunks), axes, keepdims, False, 18, split_every)
        got = lazy.compute(scheduler="sync")
    assert (got.shape, got.dtype) == (want.shape, want.dtype)
    if data.dtype.kind in "iu":
        exact = oracle.round_array(oracle.exact(op, data, axes, keepdims), data.dtype)
        assert got.tolist() == exact.tolist() == in_memory.tolist()
        return
    _check_float(op, got, want, data, axes, keepdims)
    if data.dtype != np.float64:
        np.testing.assert_array_equal(got.astype(np.float64), in_memory.astype(np.float64))


@settings(max_examples=25, deadline=None)
@given(st.sampled_from(FLOATS), st.integers(0, 2**32 - 1), st.integers(1, 9))
def test_log_softmax_rows_are_recomputed_exactly_under_any_chunking(dtype, seed, chunk):
    """Rows whose LSE nearly cancels their maximum (log-softmax rows: the result is ~0): one
    fixed-precision pass is off by up to 1e14 ulp; the recomputation keeps the contract."""
    rng = np.random.default_rng(seed)
    logits = rng.standard_normal((3, 20)) * 3
    peak = logits.max(axis=1, keepdims=True)
    rows = logits - (peak + np.log(np.exp(logits - peak).sum(axis=1, keepdims=True)))
    data = rows.astype(dtype)
    got = onnx_reduce.reduce_log_sum_exp(da.from_array(data, chunks=(2, chunk)), axes=[1])
    exact = oracle.exact("ReduceLogSumExp", data, [1])
    bound = 2.0 if data.dtype == np.float64 else 1.0
    assert oracle.max_ulp_error(got.compute(), exact, data.dtype) <= bound
