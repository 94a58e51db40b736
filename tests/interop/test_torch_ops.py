"""torch tensors in, tensors of the same dtype and device out, with the numpy path's bits and
gradients (gradcheck, opcheck), no copy of the input, and the device rule."""

import math

import ml_dtypes
import mpmath
import numpy as np
import pytest

import memory_checks
import onnx_reduce
import oracle
from onnx_reduce.benchmarking.memory import reset_peak
from onnx_reduce.kernels import dispatch
from onnx_reduce.spec import REGISTRY

torch = pytest.importorskip("torch")
from onnx_reduce.interop import torch_ops  # noqa: E402

OPS = {record.name: getattr(onnx_reduce, record.function) for record in REGISTRY}


def _numpy(tensor):
    return torch_ops.as_numpy(tensor.detach())


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_a_tensor_in_gives_a_tensor_of_its_dtype_with_the_numpy_bits(op, dtype):
    tensor = torch.randn(6, 7, generator=torch.Generator().manual_seed(0)).to(dtype)
    for layout in (tensor, tensor.t(), tensor[::2, 1::3]):
        got = OPS[op](layout, axes=[0], keepdims=False)
        assert type(got) is torch.Tensor
        assert got.dtype == dtype
        assert got.device == layout.device
        want = OPS[op](_numpy(layout), axes=[0], keepdims=False)
        assert _numpy(got).tobytes() == want.tobytes()


def test_integer_tensors_reduce_exactly_and_have_no_gradient():
    tensor = torch.tensor([[2**31 - 1, 1]], dtype=torch.int32)
    got = onnx_reduce.reduce_l2(tensor, axes=[1], keepdims=False)
    assert got.dtype == torch.int32
    assert int(got) == math.isqrt((2**31 - 1) ** 2 + 1)
    assert not got.requires_grad


def test_strided_and_bfloat16_tensors_are_read_without_a_copy():
    base = torch.randn(8, 6).to(torch.bfloat16)
    view = base.t()[::2]
    array = torch_ops.as_numpy(view)
    assert array.dtype == np.dtype(ml_dtypes.bfloat16)
    assert array.ctypes.data == view.data_ptr()
    assert array.strides == tuple(s * 2 for s in view.stride())


@pytest.mark.parametrize("op", OPS)
def test_a_256_mib_tensor_is_reduced_with_little_extra_memory(op):
    if not dispatch.has_fast(op):  # the reference path copies blocks of 2 MiB
        pytest.skip(f"{op}: no fast kernels, so no zero-copy reduction")
    tensor = torch.ones(64, 1024, 1024)  # 256 MiB of float32
    OPS[op](tensor, axes=[0, 1])  # the first call loads the kernels (numba: ~200 MiB of code)
    if not reset_peak():
        pytest.skip("this system cannot reset the peak resident size")
    results = []
    growth, numpy_peak = memory_checks.least_peaks(
        lambda: results.append(OPS[op](tensor, axes=[0, 1], keepdims=False)))
    assert results[-1].shape == (1024,)
    assert growth < tensor.nbytes // 100, f"peak resident size grew by {growth / 2**20:.1f} MiB"
    assert numpy_peak < tensor.nbytes // 1000, f"numpy allocated {numpy_peak / 2**20:.1f} MiB"


def test_a_tensor_on_another_device_is_refused_naming_it_and_the_way_out():
    message = r"^ReduceLogSumExp-28: data is on device 'meta'.*\.cpu\(\)"
    with pytest.raises(TypeError, match=message):
        onnx_reduce.reduce_log_sum_exp(torch.empty(3, device="meta"))


def test_bad_arguments_get_the_numpy_path_message():
    tensor = torch.ones(2, 3, requires_grad=True)
    with pytest.raises(ValueError, match=r"^ReduceSum-13: axis 2 is out of range"):
        onnx_reduce.reduce_sum(tensor, axes=[2])


@pytest.mark.parametrize("op", OPS)
def test_gradcheck_float64(op):
    data = torch.randn(3, 4, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    data = oracle.in_domain(op, data).requires_grad_(True)
    assert torch.autograd.gradcheck(lambda t: OPS[op](t, axes=[0, 2], keepdims=False), (data,))
    assert torch.autograd.gradcheck(lambda t: OPS[op](t, axes=[-1]), (data,))
    custom_op = torch_ops.OPS[op]  # what torch.compile and torch.export trace
    assert torch.autograd.gradcheck(lambda t: custom_op(t, [0, 2], False, False, None), (data,))


@pytest.mark.parametrize("op", OPS)
def test_a_0d_tensor_has_its_gradient(op):
    """Rank 0 is valid data: the reduction is its elementwise part, and so is the gradient
    (d/dx of x, |x|, x, x**2, log x at 0.75: 1, 1, 1, 1.5, 1/0.75)."""
    data = torch.tensor(0.75, dtype=torch.float64, requires_grad=True)
    OPS[op](data).backward()
    want = {"ReduceSumSquare": 1.5, "ReduceLogSum": 1 / 0.75}.get(op, 1.0)
    assert data.grad.shape == ()
    assert float(data.grad) == want
    assert torch.autograd.gradcheck(lambda t: OPS[op](t), (data,))
    custom_op = torch_ops.OPS[op]
    assert torch.autograd.gradcheck(lambda t: custom_op(t, None, True, False, None), (data,))


@pytest.mark.parametrize("eager", [True, False], ids=["eager", "custom-op"])
@pytest.mark.parametrize("op", [op for op in OPS if op != "ReduceSum"])
def test_differentiating_a_gradient_again_raises_instead_of_dropping_the_data(op, eager):
    """The gradients are computed outside autograd: a second derivative (a gradient penalty, a
    Hessian) would lose their dependence on the data and be silently wrong, so it raises; the
    first-order gradient under create_graph=True is still given."""
    data = oracle.in_domain(op, torch.tensor([0.5, 1.0, 2.0], dtype=torch.float64))
    data.requires_grad_(True)
    reduce = (lambda t: OPS[op](t, keepdims=False)) if eager else (
        lambda t: torch_ops.OPS[op](t, None, False, False, None))
    (first,) = torch.autograd.grad(reduce(data), data, create_graph=True)
    (plain,) = torch.autograd.grad(reduce(data), data)
    assert torch.equal(first.detach(), plain)
    message = rf"^{op}-\d+: second derivatives are not supported"
    with pytest.raises(TypeError, match=message):
        (first ** 2).sum().backward()
    with pytest.raises(TypeError, match=message):
        torch.autograd.functional.hessian(reduce, data)


def test_reduce_sum_is_twice_differentiable():
    """ReduceSum's gradient is the upstream gradient broadcast (a torch op under
    create_graph=True): its Hessian is 0 and gradients of gradients flow through it."""
    data = torch.tensor([[0.5, 1.0], [2.0, 3.0]], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradgradcheck(lambda t: onnx_reduce.reduce_sum(t, axes=[1]), (data,))
    hessian = torch.autograd.functional.hessian(
        lambda t: onnx_reduce.reduce_sum(t, keepdims=False), data)
    assert torch.equal(hessian, torch.zeros(2, 2, 2, 2, dtype=torch.float64))


@pytest.mark.parametrize("op", OPS)
def test_opcheck(op):
    data = oracle.in_domain(op, torch.randn(3, 4, dtype=torch.float64)).requires_grad_(True)
    for args in ((data, [1], False, False, None), (data, None, True, False, 18)):
        results = torch.library.opcheck(torch_ops.OPS[op], args)
        assert set(results.values()) == {"SUCCESS"}


def test_log_sum_exp_gradient_is_finite_where_torch_gives_nan():
    data = torch.tensor([[-math.inf, -math.inf], [math.inf, 1.0], [0.0, math.log(3.0)]],
                        dtype=torch.float64, requires_grad=True)
    onnx_reduce.reduce_log_sum_exp(data, axes=[1]).sum().backward()
    assert torch.equal(data.grad[:2], torch.tensor([[0.0, 0.0], [1.0, 0.0]], dtype=torch.float64))
    torch.testing.assert_close(data.grad[2], torch.tensor([0.25, 0.75], dtype=torch.float64),
                               rtol=4e-16, atol=0)


def test_a_parameter_gets_its_gradient():
    weight = torch.nn.Parameter(torch.tensor([[3.0, 4.0]]))
    onnx_reduce.reduce_l2(weight, axes=[1]).sum().backward()
    assert torch.equal(weight.grad, torch.tensor([[0.6, 0.8]]))


def test_a_tensor_that_requires_grad_is_not_detached():
    data = torch.tensor([3.0, 4.0], requires_grad=True)
    result = onnx_reduce.reduce_l2(data, keepdims=False)
    assert result.requires_grad
    result.backward()
    assert torch.equal(data.grad, torch.tensor([0.6, 0.8]))


def test_torch_export_traces_the_ops_through_their_fake_implementations():
    class Norm(torch.nn.Module):
        def forward(self, x):
            return onnx_reduce.reduce_log_sum_exp(x, axes=[1], keepdims=False)

    data = torch.randn(4, 5)
    exported = torch.export.export(Norm(), (data,))
    assert "onnx_reduce.reduce_log_sum_exp" in str(exported.graph)
    assert torch.equal(exported.module()(data), onnx_reduce.reduce_log_sum_exp(data, axes=[1],
                                                                               keepdims=False))


def test_torch_compile_traces_the_front_door_and_the_gradient_in_one_graph():
    def loss(t):
        return onnx_reduce.reduce_log_sum_exp(t, axes=[1], keepdims=False).sum()

    seeded = torch.Generator().manual_seed(20)
    data = torch.randn(4, 5, dtype=torch.float64, generator=seeded, requires_grad=True)
    torch.compile(loss, fullgraph=True)(data).backward()
    # the exact softmax, within what exp(x - L) carries from L's rounding (tests/kernels/
    # test_gradients.py: (|L| + |x - L|) u relative, exp's own error a few u)
    with mpmath.workprec(200):
        for row, grad in zip(data.detach().numpy(), data.grad.numpy(), strict=True):
            lse = mpmath.log(mpmath.fsum(mpmath.exp(mpmath.mpf(float(v))) for v in row))
            want = np.array([float(mpmath.exp(mpmath.mpf(float(v)) - lse)) for v in row])
            allowed = 2.0**-52 * (abs(float(lse)) + np.abs(row - float(lse))) + 2.0**-50
            assert np.all(np.abs(grad - want) <= allowed * want), (grad, want)


def test_dynamic_shapes_compile_once_and_export_with_symbolic_dims():
    """The fake implementations keep symbolic dims symbolic: one graph for every batch size
    under torch.compile(dynamic=True), and torch.export with dynamic dims."""
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    compiled = torch.compile(lambda t: onnx_reduce.reduce_l2(t, axes=[0, 2], keepdims=False),
                             fullgraph=True, dynamic=True)
    for n in range(2, 14):
        data = torch.rand(n, 3, n + 20)  # no two dims alike (torch would tie them)
        assert torch.equal(compiled(data), onnx_reduce.reduce_l2(data, axes=[0, 2],
                                                                 keepdims=False))
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 1

    class Norm(torch.nn.Module):
        def forward(self, x):
            return onnx_reduce.reduce_log_sum_exp(x, axes=[1])

    batch, width = torch.export.Dim("batch"), torch.export.Dim("width")
    exported = torch.export.export(Norm(), (torch.randn(4, 5),),
                                   dynamic_shapes={"x": {0: batch, 1: width}})
    data = torch.randn(7, 9)
    assert torch.equal(exported.module()(data), onnx_reduce.reduce_log_sum_exp(data, axes=[1]))


def test_bad_axes_get_the_message_also_under_torch_compile():
    compiled = torch.compile(lambda t: onnx_reduce.reduce_sum(t, axes=[2]), fullgraph=True)
    with pytest.raises(Exception, match=r"ReduceSum-13: axis 2 is out of range"):
        compiled(torch.ones(2, 3))


def test_a_tensor_that_requires_grad_under_no_grad_is_reduced_without_a_graph():
    data = torch.tensor([3.0, 4.0], requires_grad=True)
    with torch.no_grad():
        result = onnx_reduce.reduce_l2(data, keepdims=False)
    assert not result.requires_grad
    assert float(result) == 5.0


@pytest.mark.parametrize(
    ("tensor", "message"),
    [
        (lambda: torch.eye(3).to_sparse(),
         r"^ReduceSum-13: torch tensors of layout torch\.sparse_coo"),
        (lambda: torch.ones(3, dtype=torch.float8_e4m3fn),
         r"^ReduceSum-13: data type torch\.float8_e4m3fn is not allowed"),
        (lambda: torch.ones(3, dtype=torch.bool),
         r"^ReduceSum-13: data type 'bool' is not allowed"),
        (lambda: torch.ones(3, dtype=torch.complex64).conj(),
         r"^ReduceSum-13: data type 'complex64' is not allowed"),
        (lambda: torch.nested.nested_tensor([torch.ones(2), torch.ones(3)], layout=torch.jagged),
         r"^ReduceSum-13: nested torch tensors are not supported"),
    ],
)
def test_tensors_the_kernels_cannot_take_get_a_one_line_type_error(tensor, message):
    with pytest.raises(TypeError, match=message):
        onnx_reduce.reduce_sum(tensor())


def test_a_lazily_negated_view_is_reduced_with_its_sign():
    assert float(onnx_reduce.reduce_sum(torch.tensor([1.0, 2.0])._neg_view(), keepdims=False)) == -3


def test_torch_func_transforms_get_a_one_line_type_error():
    message = r"^ReduceL2-18: torch\.func transforms .* are not supported"
    with pytest.raises(TypeError, match=message):
        torch.func.vmap(onnx_reduce.reduce_l2)(torch.ones(2, 3))
    with pytest.raises(TypeError, match=message):
        torch.func.grad(lambda t: onnx_reduce.reduce_l2(t, keepdims=False))(torch.ones(3))
