"""xarray DataArrays through the functions: a DataArray out, dask-backed ones lazy, dims by name."""

import numpy as np
import pytest

import onnx_reduce

xr = pytest.importorskip("xarray")
da = pytest.importorskip("dask.array")

OPS = [onnx_reduce.reduce_sum, onnx_reduce.reduce_l2, onnx_reduce.reduce_log_sum_exp]


def _array(chunked: bool):
    values = np.random.default_rng(9).standard_normal((4, 5, 3)).astype(np.float32)
    array = xr.DataArray(values, dims=("time", "lat", "lon"), name="t2m",
                         coords={"time": np.arange(4), "lat": np.linspace(-60, 60, 5),
                                 "lon": [0.0, 120.0, 240.0]}, attrs={"units": "K"})
    return array.chunk({"time": 3, "lat": 2}) if chunked else array


@pytest.mark.parametrize("reduce", OPS)
@pytest.mark.parametrize("chunked", [False, True])
@pytest.mark.parametrize("keepdims", [True, False])
def test_a_data_array_comes_back_with_the_kept_dims_and_coords(reduce, chunked, keepdims):
    array = _array(chunked)
    result = reduce(array, axes=[0, 2], keepdims=keepdims)
    assert isinstance(result, xr.DataArray)
    assert isinstance(result.data, da.Array) is chunked
    assert result.dims == (("time", "lat", "lon") if keepdims else ("lat",))
    assert list(result.coords) == ["lat"]
    np.testing.assert_array_equal(result.coords["lat"], array.coords["lat"])
    assert result.name == "t2m"
    want = reduce(array.values, axes=[0, 2], keepdims=keepdims)
    np.testing.assert_array_equal(result.values, want)


@pytest.mark.parametrize("reduce", OPS)
def test_axes_by_dimension_name(reduce):
    array = _array(chunked=True)
    by_name = reduce(array, axes=["lon", "time"], keepdims=False)
    by_number = reduce(array, axes=[2, 0], keepdims=False)
    np.testing.assert_array_equal(by_name.values, by_number.values)
    assert by_name.dims == ("lat",)
    np.testing.assert_array_equal(reduce(array, axes="lat").values,
                                  reduce(array.values, axes=[1]))


def test_an_unknown_dimension_name_is_an_error():
    with pytest.raises(ValueError, match="depth"):
        onnx_reduce.reduce_sum(_array(chunked=False), axes=["depth"])


def test_noop_keeps_every_dim_and_coord():
    array = _array(chunked=False)
    result = onnx_reduce.reduce_l2(array, axes=[], noop_with_empty_axes=True)
    assert result.dims == array.dims
    np.testing.assert_array_equal(result.values, np.abs(array.values))
    np.testing.assert_array_equal(result.coords["lon"], array.coords["lon"])


def test_validation_messages_are_the_numpy_ones():
    array = _array(chunked=True)
    with pytest.raises(ValueError, match="out of range") as numpy_error:
        onnx_reduce.reduce_sum(array.values, axes=[3])
    with pytest.raises(ValueError, match="out of range") as xarray_error:
        onnx_reduce.reduce_sum(array, axes=[3])
    assert str(xarray_error.value) == str(numpy_error.value)
