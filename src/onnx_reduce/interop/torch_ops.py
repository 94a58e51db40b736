"""torch front door: the op registry's reductions as ``torch.library`` custom ops (CPU) with
fake implementations (shapes, for ``torch.compile`` and ``torch.export``) and autograd.

A plain CPU tensor that needs no gradient skips the op dispatcher: its zero-copy numpy view goes
straight to the numpy path (the dispatcher would cost more than the kernel on small tensors).
Tensors that require grad, tensor subclasses (fake and functional tensors while tracing) and
calls under ``torch.compile`` go through the custom ops.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import torch
from torch._C import _functorch

from ..functions import plan_for, reduce_array, version_label
from ..kernels.gradients import data_gradient, kept_shape
from ..spec import REGISTRY, op_record
from .arrays import device_error

_NAMES = {record.name: record.function for record in REGISTRY}
_SCHEMA = ("(Tensor data, int[]? axes, bool keepdims, bool noop_with_empty_axes, int? opset) "
           "-> Tensor")
_GRAD_SCHEMA = ("(Tensor grad, Tensor data, Tensor result, int[]? axes, bool keepdims, "
                "bool noop_with_empty_axes, int? opset) -> Tensor")
_BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
#: Tensor types read directly in eager mode; other subclasses (fake, functional) take the op.
_PLAIN_TENSORS = (torch.Tensor, torch.nn.Parameter)


def reduce(op: str, data: torch.Tensor, axes, keepdims, noop, opset) -> torch.Tensor:
    """``op`` of a torch tensor, as a tensor of its dtype on its device (the CPU)."""
    _check_tensor(op, opset, data)
    compiling = torch.compiler.is_compiling()
    plain = type(data) in _PLAIN_TENSORS
    if plain and not compiling:
        if _functorch.is_functorch_wrapped_tensor(data):
            raise TypeError(f"{version_label(op, opset)}: torch.func transforms (vmap, grad, "
                            "...) are not supported; use torch.autograd (loss.backward(), "
                            "torch.autograd.grad) and reduce batches in one call with axes")
        if not (data.requires_grad and torch.is_grad_enabled()):
            return from_numpy(reduce_array(op, as_numpy(data), axes, keepdims, noop, opset))
    if not compiling:  # while compiling, the fake implementation checks
        plan_for(op, numpy_dtype(data.dtype), tuple(data.shape), axes, keepdims, noop, opset)
    axes = None if axes is None else [int(axis) for axis in axes]
    if compiling or not plain:
        return OPS[op](data, axes, bool(keepdims), bool(noop), opset)
    return _EagerReduction.apply(data, op, axes, bool(keepdims), bool(noop), opset)


class _EagerReduction(torch.autograd.Function):
    """Autograd for plain tensors outside compilation: the custom op's forward and backward
    without the dispatcher, which costs ~45 µs a call here."""

    @staticmethod
    def forward(ctx, data, op, axes, keepdims, noop, opset):
        # ctx in forward, not setup_context: torch binds a setup_context Function's arguments
        # with inspect.signature on every call (~30 µs)
        result = _fresh(op, data, axes, keepdims, noop, opset)
        ctx.save_for_backward(data, result)
        ctx.call = (op, axes, keepdims, noop, opset)
        return result

    @staticmethod
    def backward(ctx, grad):
        data, result = ctx.saved_tensors
        op, *options = ctx.call
        if not torch.is_grad_enabled():  # the usual backward (create_graph=False)
            return gradient_tensor(op, grad, data, result, *options), None, None, None, None, None
        return _graph_gradient(op, grad, data, result, options), None, None, None, None, None


def _graph_gradient(op, grad, data, result, options) -> torch.Tensor:
    """The gradient under ``create_graph=True``, as a tensor that can be differentiated again
    only where that is right: ReduceSum's (the upstream gradient broadcast, by torch's ops: its
    derivative by the data is 0); the others' is computed outside autograd, so differentiating
    it raises (its dependence on the data would be lost: a silently wrong second derivative)."""
    if op_record(op).gradient == "broadcast":
        _, plan = plan_for(op, numpy_dtype(data.dtype), tuple(data.shape), *options)
        return grad.reshape(kept_shape(plan)).expand(data.shape).to(data.dtype)
    with torch.no_grad():
        gradient = gradient_tensor(op, grad, data, result, *options)
    return _FirstOrderOnly.apply(gradient, data, grad, version_label(op, options[-1]))


class _FirstOrderOnly(torch.autograd.Function):
    """A gradient whose graph reaches the data and the upstream gradient, with a backward that
    refuses to differentiate it (as the custom ops' gradient op does)."""

    @staticmethod
    def forward(ctx, gradient, data, grad, label):
        ctx.label = label
        return gradient.view_as(gradient)

    @staticmethod
    def backward(ctx, _):
        raise TypeError(second_derivative_error(ctx.label))


def second_derivative_error(label: str) -> str:
    """The message for differentiating an onnx-reduce gradient again."""
    return (f"{label}: second derivatives are not supported (the gradient is computed outside "
            "autograd); use its first-order gradient only")


def _check_tensor(op: str, opset: int | None, data: torch.Tensor) -> None:
    """``TypeError`` naming the version for tensors the kernels cannot read in place."""
    if data.device.type != "cpu":
        raise device_error(op, opset, data.device, "move it to the CPU with data.cpu()")
    if data.is_nested:
        raise TypeError(f"{version_label(op, opset)}: nested torch tensors are not supported; "
                        "pass data.to_padded_tensor(padding) or reduce each component")
    if data.layout != torch.strided:
        raise TypeError(f"{version_label(op, opset)}: torch tensors of layout {data.layout} are "
                        "not supported; pass data.to_dense()")
    if data.dtype not in _NUMPY_DTYPES:
        raise TypeError(f"{version_label(op, opset)}: data type {data.dtype} is not allowed "
                        "(no numpy counterpart); convert the tensor, e.g. data.float()")


def as_numpy(tensor: torch.Tensor) -> np.ndarray:
    """A CPU tensor as a numpy array over the same memory, any strides; bfloat16 viewed as
    ``ml_dtypes.bfloat16`` (same bits: numpy and DLPack have no bfloat16 of their own). A lazily
    negated or conjugated view (``is_neg()``, ``is_conj()``) is resolved first, a copy: its
    memory holds the other sign."""
    if tensor.is_neg():
        tensor = tensor.resolve_neg()
    if tensor.is_conj():  # complex, which validation refuses: with its message, not numpy's
        tensor = tensor.resolve_conj()
    if tensor.dtype == torch.bfloat16:
        return tensor.view(torch.int16).numpy().view(_BFLOAT16)
    return tensor.numpy()


def from_numpy(array: np.ndarray) -> torch.Tensor:
    """A numpy result as a tensor over the same memory (bfloat16 by a view)."""
    if array.dtype == _BFLOAT16:
        return torch.from_numpy(array.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(array)


def numpy_dtype(dtype: torch.dtype) -> np.dtype:
    """The numpy dtype of a torch dtype (bfloat16: ``ml_dtypes.bfloat16``)."""
    numpy = _NUMPY_DTYPES.get(dtype)
    if numpy is None:
        raise TypeError(f"onnx-reduce: torch dtype {dtype} has no numpy counterpart")
    return numpy


_NUMPY_DTYPES = {
    torch.bfloat16: _BFLOAT16, torch.float16: np.dtype(np.float16),
    torch.float32: np.dtype(np.float32), torch.float64: np.dtype(np.float64),
    torch.int8: np.dtype(np.int8), torch.int16: np.dtype(np.int16),
    torch.int32: np.dtype(np.int32), torch.int64: np.dtype(np.int64),
    torch.uint8: np.dtype(np.uint8), torch.uint16: np.dtype(np.uint16),
    torch.uint32: np.dtype(np.uint32), torch.uint64: np.dtype(np.uint64),
    torch.bool: np.dtype(np.bool_), torch.complex64: np.dtype(np.complex64),
    torch.complex128: np.dtype(np.complex128),
}


def _define(op: str) -> Any:
    """The custom op of ``op`` with its fake and autograd registrations."""
    name = _NAMES[op]

    def forward(data, axes, keepdims, noop, opset):
        return _fresh(op, data, axes, keepdims, noop, opset)

    custom = torch.library.custom_op(f"onnx_reduce::{name}", forward, mutates_args=(),
                                     device_types="cpu", schema=_SCHEMA)
    gradient = _define_gradient(op, name)

    @custom.register_fake
    def _(data, axes, keepdims, noop, opset):
        return data.new_empty(_output_shape(op, data, axes, keepdims, noop, opset))

    def setup_context(ctx, inputs, output):
        data, *options = inputs
        ctx.save_for_backward(data, output)
        ctx.options = options

    def backward(ctx, grad):
        data, result = ctx.saved_tensors
        return gradient(grad, data, result, *ctx.options), None, None, None, None

    custom.register_autograd(backward, setup_context=setup_context)
    return custom


def _output_shape(op, data, axes, keepdims, noop, opset) -> list:
    """The result's shape from the data's, whose dims may be symbolic (``torch.compile`` with
    dynamic shapes, ``torch.export``): the call is validated on a stand-in shape of the same
    rank (int() of a symbolic dim would fix it to its example value) and the kept dims are the
    data's own. The real call validates the real dims."""
    rank = data.dim()
    _, plan = plan_for(op, numpy_dtype(data.dtype), (2,) * rank, axes, keepdims, noop, opset)
    if plan.noop:
        return list(data.shape)
    return [1 if axis in plan.axes else data.shape[axis] for axis in range(rank)
            if plan.keepdims or axis not in plan.axes]


def _fresh(op, data, axes, keepdims, noop, opset) -> torch.Tensor:
    """The op's result in memory of its own (a custom op's output may not alias its input)."""
    array = as_numpy(data)
    result = reduce_array(op, array, axes, keepdims, noop, opset)
    if np.may_share_memory(result, array):
        result = result.copy()
    return from_numpy(result)


def _define_gradient(op: str, name: str) -> Any:
    """The custom op computing ``op``'s data gradient (:mod:`onnx_reduce.kernels.gradients`)."""

    def gradient(grad, data, result, axes, keepdims, noop, opset):
        return gradient_tensor(op, grad, data, result, axes, keepdims, noop, opset)

    custom = torch.library.custom_op(f"onnx_reduce::{name}_backward", gradient, mutates_args=(),
                                     device_types="cpu", schema=_GRAD_SCHEMA)

    @custom.register_fake
    def _(grad, data, result, axes, keepdims, noop, opset):
        return torch.empty_like(data)

    def setup_context(ctx, inputs, output):
        ctx.label = version_label(op, inputs[-1])

    def backward(ctx, _):
        raise TypeError(second_derivative_error(ctx.label))

    custom.register_autograd(backward, setup_context=setup_context)
    return custom


def gradient_tensor(op, grad, data, result, axes, keepdims, noop, opset) -> torch.Tensor:
    """``op``'s data gradient (:mod:`onnx_reduce.kernels.gradients`) as a tensor."""
    _, plan = plan_for(op, numpy_dtype(data.dtype), tuple(data.shape), axes, keepdims, noop, opset)
    return from_numpy(data_gradient(op, plan, as_numpy(grad.contiguous()), as_numpy(data),
                                    as_numpy(result)))


#: The custom op of each ONNX op name: ``OPS["ReduceSum"]`` is
#: ``torch.ops.onnx_reduce.reduce_sum``.
OPS = {op: _define(op) for op in _NAMES}
