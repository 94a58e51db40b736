"""Property: torch, jax and array_api_strict arrays of random shapes, layouts and dtypes give
exactly the numpy path's bits, in the input's library and dtype."""

import array_api_compat
import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import onnx_reduce
from onnx_reduce.spec import REGISTRY

torch = pytest.importorskip("torch")
jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)  # float64 stays float64
jnp = pytest.importorskip("jax.numpy")
xp = pytest.importorskip("array_api_strict")
from onnx_reduce.interop import torch_ops  # noqa: E402

OPS = [getattr(onnx_reduce, record.function) for record in REGISTRY]
DTYPES = [np.float32, np.float64, np.float16, ml_dtypes.bfloat16]


@st.composite
def cases(draw):
    """(data, a layout of it as (transpose, step), axes, keepdims, op, dtype)."""
    shape = tuple(draw(st.lists(st.integers(1, 5), min_size=1, max_size=3)))
    dtype = np.dtype(draw(st.sampled_from(DTYPES)))
    seed = draw(st.integers(0, 2**32 - 1))
    data = (np.random.default_rng(seed).standard_normal(shape) * 4).astype(dtype)
    transpose = draw(st.booleans())
    step = draw(st.integers(1, 2))
    rank = len(shape)
    axes = draw(st.none() | st.lists(st.integers(-rank, rank - 1), unique_by=lambda a: a % rank,
                                     max_size=rank))
    return data, transpose, step, axes, draw(st.booleans()), draw(st.sampled_from(OPS))


def _layout(array, transpose, step):
    """A view of ``array`` (any library): transposed and sliced with a step along axis 0."""
    if transpose:
        namespace = array_api_compat.array_namespace(array)
        array = namespace.permute_dims(array, tuple(reversed(range(array.ndim))))
    return array[::step, ...]


def _as_numpy(result):
    if isinstance(result, torch.Tensor):
        return torch_ops.as_numpy(result)
    return np.asarray(result) if isinstance(result, jax.Array) else np.from_dlpack(result)


def _in(library, data):
    if library == "torch":
        return torch_ops.from_numpy(data.copy())
    if library.startswith("jax"):
        return jnp.asarray(data)
    return xp.asarray(data)


def _call(library, reduce, view, axes, keepdims):
    if library == "jax.jit":
        return jax.jit(lambda v: reduce(v, axes=axes, keepdims=keepdims))(view)
    return reduce(view, axes=axes, keepdims=keepdims)


@settings(max_examples=40, deadline=None)
@given(cases(), st.sampled_from(["torch", "jax", "jax.jit", "array_api_strict"]))
def test_every_library_gives_the_numpy_bits(case, library):
    """The numpy path on the same memory is the oracle (float64 sums of one array in two
    layouts may differ in the last bits, within the contract; jax's transpose is a copy)."""
    data, transpose, step, axes, keepdims, reduce = case
    if library == "array_api_strict" and data.dtype.itemsize == 2:
        return  # array_api_strict has no float16/bfloat16
    view = _layout(_in(library, data), transpose, step)
    want = reduce(_as_numpy(view), axes=axes, keepdims=keepdims)
    got = _call(library, reduce, view, axes, keepdims)
    assert type(got) is type(view)
    got = _as_numpy(got)
    assert got.dtype == want.dtype
    assert got.shape == want.shape
    assert got.tobytes() == want.tobytes()
