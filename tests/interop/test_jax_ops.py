"""jax arrays in, jax arrays out, eagerly and under jax.jit, jax.grad and jax.vmap, with the
numpy path's bits and the gradients of onnx_reduce.kernels.gradients."""

import math

import numpy as np
import pytest

import onnx_reduce
import oracle
from onnx_reduce.spec import REGISTRY

jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)
jnp = pytest.importorskip("jax.numpy")
from jax.test_util import check_grads  # noqa: E402

OPS = {record.name: getattr(onnx_reduce, record.function) for record in REGISTRY}
DATA = np.random.default_rng(3).standard_normal((4, 6))


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float64, jnp.bfloat16, jnp.float16])
def test_eager_arrays_give_jax_arrays_of_their_dtype_with_the_numpy_bits(op, dtype):
    data = jnp.asarray(DATA, dtype=dtype)
    got = OPS[op](data, axes=[1], keepdims=False)
    assert isinstance(got, jax.Array)
    assert got.dtype == dtype
    assert got.devices() == data.devices()
    assert np.asarray(got).tobytes() == OPS[op](np.asarray(data), axes=[1],
                                                keepdims=False).tobytes()


@pytest.mark.parametrize("op", OPS)
def test_jit_and_vmap_give_the_eager_values(op):
    data = jnp.asarray(oracle.in_domain(op, DATA))
    eager = OPS[op](data, axes=[0])
    assert np.array_equal(jax.jit(lambda x: OPS[op](x, axes=[0]))(data), eager)
    rows = jax.vmap(lambda row: OPS[op](row, keepdims=False))(data)
    assert np.array_equal(rows, OPS[op](data, axes=[1], keepdims=False))


@pytest.mark.parametrize("op", OPS)
def test_check_grads(op):
    data = jnp.asarray(oracle.in_domain(op, DATA))
    check_grads(lambda x: OPS[op](x, axes=[1]), (data,), order=1, modes=("rev",))


def test_gradient_matches_the_softmax_and_is_finite_where_jax_gives_nan():
    lse = jax.grad(lambda x: onnx_reduce.reduce_log_sum_exp(x, axes=[1]).sum())
    data = jnp.asarray([[-math.inf, -math.inf], [math.inf, 1.0]])
    assert np.array_equal(lse(data), [[0.0, 0.0], [1.0, 0.0]])
    np.testing.assert_allclose(lse(jnp.asarray(DATA)), jax.nn.softmax(DATA, axis=1), rtol=1e-15)


def test_gradient_under_vmap_and_jit():
    norm = jax.jit(jax.vmap(jax.grad(lambda row: onnx_reduce.reduce_l2(row, keepdims=False))))
    np.testing.assert_allclose(norm(jnp.asarray(DATA)),
                               DATA / np.sqrt((DATA**2).sum(axis=1, keepdims=True)), rtol=1e-15)


def test_bad_arguments_get_the_numpy_path_message_also_when_traced():
    with pytest.raises(ValueError, match=r"^ReduceSum-13: axis 2 is out of range"):
        jax.jit(lambda x: onnx_reduce.reduce_sum(x, axes=[2]))(jnp.asarray(DATA))


@pytest.mark.parametrize("opset", [None, 11])
def test_nested_vmap_of_rank_0_and_of_matrices(opset):
    """Batch axes lead the callback's data: the reduced axes must skip them, also for a rank-0
    element reduced over all (none) of its axes at a version without noop_with_empty_axes."""
    data = jnp.asarray(DATA)
    scalars = jax.vmap(jax.vmap(lambda x: onnx_reduce.reduce_l2(x, opset=opset)))(data)
    assert np.array_equal(scalars, np.abs(DATA))
    columns = jax.vmap(lambda m: onnx_reduce.reduce_log_sum_exp(m, axes=[0], opset=opset))(
        jnp.stack([data, 2 * data]))
    want = [onnx_reduce.reduce_log_sum_exp(m, axes=[0]) for m in (DATA, 2 * DATA)]
    assert np.array_equal(columns, np.stack(want))


def test_gradient_under_nested_vmap():
    grads = jax.vmap(jax.vmap(jax.grad(lambda x: onnx_reduce.reduce_log_sum_exp(
        x, keepdims=False))))(jnp.asarray(DATA).reshape(2, 2, 6))
    np.testing.assert_allclose(grads.reshape(4, 6), jax.nn.softmax(DATA, axis=1), rtol=1e-15)


def test_gradient_of_rank_0_elements_under_vmap_at_a_version_without_noop():
    grads = jax.vmap(jax.grad(lambda x: onnx_reduce.reduce_l2(x, opset=11)))(jnp.asarray(DATA[0]))
    assert np.array_equal(grads, np.sign(DATA[0]))
