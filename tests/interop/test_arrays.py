"""Array API arrays that are neither torch nor jax (array_api_strict), the device rule, and
numpy's path left as it is."""

import numpy as np
import pytest

import onnx_reduce
from onnx_reduce.interop.arrays import foreign_reduction, read_cpu
from onnx_reduce.spec import REGISTRY

xp = pytest.importorskip("array_api_strict")

OPS = [getattr(onnx_reduce, record.function) for record in REGISTRY]


@pytest.mark.parametrize("reduce", OPS)
def test_array_api_strict_in_gives_the_same_library_and_bits_out(reduce):
    values = np.random.default_rng(1).standard_normal((3, 5)).astype(np.float32)
    got = reduce(xp.asarray(values), axes=[1], keepdims=False)
    assert type(got) is type(xp.asarray(values))
    assert got.dtype == xp.float32
    want = reduce(values, axes=[1], keepdims=False)
    assert np.array_equal(np.from_dlpack(got), want, equal_nan=True)


def test_the_result_is_on_the_input_device():
    device = xp.Device("device1")  # array_api_strict's second CPU device
    got = onnx_reduce.reduce_sum(xp.asarray(np.arange(4.0), device=device))
    assert got.device == device


def test_a_negative_stride_view_is_read_without_a_copy():
    base = xp.asarray(np.arange(10.0))
    reversed_view = base[::-2]
    assert np.shares_memory(read_cpu("ReduceSum", None, reversed_view), np.from_dlpack(base))
    assert float(onnx_reduce.reduce_sum(reversed_view, keepdims=False)) == 25.0


def test_numpy_arrays_lists_and_scalars_stay_on_the_numpy_path():
    for data in (np.ones(3), [1.0, 2.0], 3.0, np.float32(2.0)):
        assert foreign_reduction(data) is None
    assert type(onnx_reduce.reduce_sum([1.0, 2.0])) is np.ndarray


class _OnAnotherDevice:
    """An Array API object whose memory lives on a device the CPU cannot read (CUDA)."""

    def __array_namespace__(self, api_version=None):
        return xp

    def __dlpack_device__(self):
        return (2, 0)

    @property
    def device(self):
        return "cuda:0"


def test_an_array_on_another_device_is_refused_naming_it():
    with pytest.raises(TypeError, match=r"^ReduceL2-18: data is on device 'cuda:0'.*CPU"):
        onnx_reduce.reduce_l2(_OnAnotherDevice())
