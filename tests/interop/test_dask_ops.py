"""dask arrays through the functions: lazy dask arrays out, the numpy path's values and errors."""

import ml_dtypes
import numpy as np
import pytest

import onnx_reduce
import oracle
from onnx_reduce.interop import dask_ops
from onnx_reduce.kernels.dispatch import kernel_path
from onnx_reduce.spec.ops import REGISTRY

da = pytest.importorskip("dask.array")
dask = pytest.importorskip("dask")

NAMES = [record.name for record in REGISTRY]
OPS = [getattr(onnx_reduce, record.function) for record in REGISTRY]
NARROW = [np.float32, np.float16, ml_dtypes.bfloat16]
INTEGERS = [np.int32, np.int64, np.uint32, np.uint64]


def _numpy_path(reduce, x, **kwargs):
    with kernel_path("reference"):
        return reduce(x, **kwargs)


@pytest.mark.parametrize(("op", "reduce"), list(zip(NAMES, OPS, strict=True)))
@pytest.mark.parametrize("dtype", [*NARROW, np.float64, *INTEGERS])
@pytest.mark.parametrize("axes", [None, [1], [0, 2], [-1], [2, 0, 1]])
@pytest.mark.parametrize("keepdims", [True, False])
def test_lazy_result_equals_the_numpy_path(op, reduce, dtype, axes, keepdims):
    data = oracle.in_domain(op, np.random.default_rng(3).standard_normal((7, 9, 5)) * 4)
    data = data.astype(dtype)
    lazy = da.from_array(data, chunks=(2, 4, 3))
    kwargs = {"axes": axes, "keepdims": keepdims, "opset": 18}
    want = _numpy_path(reduce, data, **kwargs)
    result = reduce(lazy, **kwargs)
    assert isinstance(result, da.Array)
    assert (result.shape, result.dtype) == (want.shape, want.dtype)
    got = result.compute()
    assert isinstance(got, np.ndarray)
    assert (got.shape, got.dtype) == (want.shape, want.dtype)
    if np.dtype(dtype) == np.float64:  # both within 0.5 ulp of the exact sum: at most 1 apart
        np.testing.assert_array_max_ulp(got, want, maxulp=1)
    else:
        np.testing.assert_array_equal(got, want)


def test_nothing_is_computed_before_compute():
    computed = []

    def load(block):
        if block.size:  # dask calls it on empty arrays to learn the output type
            computed.append(block.shape)
        return block

    lazy = da.ones((6, 8), chunks=(3, 4)).map_blocks(load, dtype=np.float64)
    results = [reduce(lazy, axes=[1]) for reduce in OPS]
    assert computed == []
    np.testing.assert_array_equal(results[0].compute(), np.full((6, 1), 8.0))
    assert computed


@pytest.mark.parametrize(
    ("reduce", "kwargs", "error"),
    [
        (onnx_reduce.reduce_sum, {"axes": [2]}, ValueError),
        (onnx_reduce.reduce_l2, {"axes": [0, 0]}, ValueError),
        (onnx_reduce.reduce_log_sum_exp, {"opset": 99}, ValueError),
        (onnx_reduce.reduce_sum, {"axes": [1.5]}, TypeError),
    ],
)
def test_bad_arguments_raise_at_call_time_with_the_numpy_message(reduce, kwargs, error):
    data = np.ones((4, 6), np.float32)
    with pytest.raises(error) as numpy_error:
        reduce(data, **kwargs)
    with pytest.raises(error) as dask_error:
        reduce(da.from_array(data, chunks=2), **kwargs)
    assert str(dask_error.value) == str(numpy_error.value)


@pytest.mark.parametrize("reduce", OPS)
def test_a_refused_dtype_raises_the_numpy_message(reduce):
    data = np.ones((4,), np.int8 if reduce is not onnx_reduce.reduce_log_sum_exp else np.int32)
    with pytest.raises(TypeError) as numpy_error:
        reduce(data)
    with pytest.raises(TypeError) as dask_error:
        reduce(da.from_array(data, chunks=2))
    assert str(dask_error.value) == str(numpy_error.value)


@pytest.mark.parametrize("reduce", OPS)
@pytest.mark.parametrize("keepdims", [True, False])
def test_noop_with_empty_axes_is_the_elementwise_numpy_result(reduce, keepdims):
    data = np.array([[-1.5, 2.0, -np.inf], [np.nan, 0.0, 3.0]], np.float32)
    lazy = da.from_array(data, chunks=(1, 2))
    kwargs = {"axes": [], "keepdims": keepdims, "noop_with_empty_axes": True}
    result = reduce(lazy, **kwargs)
    assert isinstance(result, da.Array)
    np.testing.assert_array_equal(result.compute(), reduce(data, **kwargs))


@pytest.mark.parametrize("reduce", OPS)
@pytest.mark.parametrize("keepdims", [True, False])
def test_an_empty_reduction_gives_the_numpy_values(reduce, keepdims):
    data = np.empty((3, 0), np.float32)
    result = reduce(da.from_array(data), axes=[1], keepdims=keepdims)
    np.testing.assert_array_equal(result.compute(), reduce(data, axes=[1], keepdims=keepdims))


@pytest.mark.parametrize("reduce", [onnx_reduce.reduce_log_sum_exp, onnx_reduce.reduce_log_sum])
def test_an_empty_integer_log_reduction_raises_at_call_time(reduce):
    data = np.empty((3, 0), np.int32)
    with pytest.raises(ValueError, match="empty set") as numpy_error:
        reduce(data, axes=[1], opset=18)
    with pytest.raises(ValueError, match="empty set") as dask_error:
        reduce(da.from_array(data), axes=[1], opset=18)
    assert str(dask_error.value) == str(numpy_error.value)


@pytest.mark.parametrize("chunks", [(1, 2), (1, 4)])
def test_integer_log_sum_of_a_sum_at_most_zero_raises_at_compute_time(chunks):
    """The sums exist only once the chunks are read: the call succeeds, compute raises the
    numpy path's ValueError (states or whole-slice chunks alike)."""
    data = np.array([[5, 6, 7, 8], [3, -1, -1, -1]], np.int64)
    lazy = onnx_reduce.reduce_log_sum(da.from_array(data, chunks=chunks), axes=[1], opset=18)
    with pytest.raises(ValueError, match=r"ReduceLogSum: an output's sum is 0, whose log \(-inf"):
        lazy.compute()
    with pytest.raises(ValueError, match="sum is 0"):
        onnx_reduce.reduce_log_sum(data, axes=[1], opset=18)


def test_big_endian_chunks_give_native_results():
    data = np.arange(12, dtype=">f4").reshape(3, 4)
    result = onnx_reduce.reduce_sum(da.from_array(data, chunks=2), axes=[1])
    assert result.dtype == np.dtype(np.float32)
    np.testing.assert_array_equal(result.compute(), [[6.0], [22.0], [38.0]])


@pytest.mark.parametrize("split_every", [2, 3, 16])
def test_split_every_changes_the_tree_not_the_result(split_every):
    data = np.random.default_rng(5).standard_normal((4, 50)).astype(np.float32)
    lazy = da.from_array(data, chunks=(2, 3))
    for op, reduce in zip(NAMES, OPS, strict=True):
        result = dask_ops.reduce(op, lazy, [1], True, False, None, split_every=split_every)
        np.testing.assert_array_equal(result.compute(), _numpy_path(reduce, data, axes=[1]))


def test_specials_in_some_chunks_follow_the_math():
    inf, nan = np.inf, np.nan
    data = np.array([[1.0, -inf, 3.0, inf, 2.0, 5.0], [nan, 1, 2, 3, 4, 5], [-inf] * 6,
                     [1e300, 1e300, 1e-300, 0, 0, 0], [inf, -inf, 0, 0, 0, 1]])
    lazy = da.from_array(data, chunks=((1, 4), (1, 0, 2, 3)))
    with np.errstate(all="ignore"):
        for reduce in OPS:
            np.testing.assert_array_equal(reduce(lazy, axes=[1]).compute(),
                                          _numpy_path(reduce, data, axes=[1]))


@pytest.mark.parametrize(("op", "reduce"), list(zip(NAMES, OPS, strict=True)))
@pytest.mark.parametrize("dtype", [np.float32, np.float64, ml_dtypes.bfloat16])
@pytest.mark.parametrize("keepdims", [True, False])
def test_chunks_holding_whole_slices_take_the_in_memory_path(op, reduce, dtype, keepdims,
                                                             monkeypatch):
    """One chunk along the reduced axes: no states, each chunk reduced as in memory (the
    compiled kernels' bits: float64 rows within the contract of each other)."""
    from onnx_reduce.interop import dask_ops

    monkeypatch.setattr(dask_ops, "_chunk", None)  # no reduction over chunks' states
    data = oracle.in_domain(op, np.random.default_rng(11).standard_normal((12, 3, 300)) * 5)
    data = data.astype(dtype)
    lazy = da.from_array(data, chunks=(5, 2, 300))
    result = reduce(lazy, axes=[2], keepdims=keepdims)
    want = reduce(data, axes=[2], keepdims=keepdims)
    assert (result.shape, result.dtype) == (want.shape, want.dtype)
    got = result.compute()
    if np.dtype(dtype) == np.float64:
        np.testing.assert_array_max_ulp(got, want, maxulp=2)
    else:
        np.testing.assert_array_equal(got, want)


def test_unknown_chunk_sizes_are_refused_with_the_way_out():
    lazy = da.from_array(np.arange(10.0), chunks=3)
    with pytest.raises(ValueError, match=r"ReduceSum-13: .*compute_chunk_sizes\(\)"):
        onnx_reduce.reduce_sum(lazy[lazy > 2])


@pytest.mark.parametrize("chunks", [1, (1, -1)])
@pytest.mark.parametrize("reduce", OPS)
def test_masked_chunks_are_refused_at_the_call_as_numpy_refuses_masked_arrays(reduce, chunks):
    """Chunks that are masked arrays are refused when the reduction is built, whatever the
    chunking: the kernels and the partial states read the data, so a masked element would be
    reduced as if it were not masked."""
    data = np.array([[1.0, 2.0, 100.0]])
    with pytest.raises(TypeError) as numpy_error:
        reduce(np.ma.masked_greater(data, 50), axes=[1])
    with pytest.raises(TypeError) as dask_error:
        reduce(da.ma.masked_greater(da.from_array(data, chunks=chunks), 50), axes=[1])
    assert str(dask_error.value) == str(numpy_error.value)


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.float32, np.float64])
def test_log_sum_of_a_negative_sum_is_the_numpy_path_s_nan(dtype):
    """The log of a negative sum is NaN with the in-memory path's bits (positive), also where
    chunks split the reduced axis (x86's log of a negative number sets the sign bit)."""
    data = np.array([[-1.0, -2.0, 0.5, 0.25], [1.0, 2.0, 3.0, 4.0]]).astype(dtype)
    want = onnx_reduce.reduce_log_sum(data, axes=[1])
    got = onnx_reduce.reduce_log_sum(da.from_array(data, chunks=(1, 2)), axes=[1]).compute()
    assert got.tobytes() == want.tobytes()
