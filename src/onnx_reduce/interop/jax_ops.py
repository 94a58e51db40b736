"""jax front door: eager CPU arrays are read without a copy and reduced by the numpy path;
traced arrays (inside ``jax.jit``, ``jax.grad``, ``jax.vmap``) reach the same path through
``jax.pure_callback``, under a ``jax.custom_vjp`` whose backward pass calls
:mod:`onnx_reduce.kernels.gradients`. Under ``vmap`` the callback receives the batch as leading
axes (``vmap_method="broadcast_all"``) and reduces it in one call, the axes shifted past them."""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import numpy as np

from ..functions import plan_for, reduce_array
from ..kernels.gradients import data_gradient
from .arrays import device_error


class Call(NamedTuple):
    """One reduction's options (hashable: a static argument of the traced function)."""

    op: str
    axes: tuple[int, ...] | None
    keepdims: bool
    noop: bool
    opset: int | None

    def plan(self, dtype: Any, shape: tuple[int, ...]):
        return plan_for(self.op, np.dtype(dtype), shape, self.axes, self.keepdims, self.noop,
                        self.opset)[1]

    def batched(self, dtype: Any, shape: tuple[int, ...], batch_rank: int) -> Call | None:
        """This call for data with ``batch_rank`` leading batch axes before ``shape``: the
        reduced axes shifted past them; None where no single call can say it (a rank-0 input
        reduced over all its no axes, at versions without ``noop_with_empty_axes``)."""
        plan = self.plan(dtype, shape)
        if plan.noop or batch_rank == 0:
            return self
        if not plan.axes:
            return None
        return self._replace(axes=tuple(axis + batch_rank for axis in plan.axes))

    def run(self, data: np.ndarray) -> np.ndarray:
        return reduce_array(self.op, data, self.axes, self.keepdims, self.noop, self.opset)


def reduce(op: str, data: jax.Array, axes, keepdims, noop, opset) -> jax.Array:
    """``op`` of a jax array, as a jax array of its dtype on its device (the CPU)."""
    plan_for(op, np.dtype(data.dtype), tuple(data.shape), axes, keepdims, noop, opset)
    call = Call(op, None if axes is None else tuple(int(a) for a in axes), bool(keepdims),
                bool(noop), opset)
    if isinstance(data, jax.core.Tracer):
        return _traced(call, data)
    device = _cpu_device(call, data)
    return jax.device_put(call.run(np.asarray(data)), device)


def _cpu_device(call: Call, data: jax.Array) -> Any:
    devices = data.devices()
    device = next(iter(devices))
    if len(devices) != 1 or device.platform != "cpu":
        raise device_error(call.op, call.opset, device,
                           "move it with jax.device_put(data, jax.devices('cpu')[0])")
    return device


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _traced(call: Call, data: jax.Array) -> jax.Array:
    return _forward(call, data)


def _forward(call: Call, data: jax.Array) -> jax.Array:
    shape = call.plan(data.dtype, tuple(data.shape)).output_shape
    callback = functools.partial(_run, call, tuple(data.shape))
    return jax.pure_callback(callback, jax.ShapeDtypeStruct(shape, data.dtype), data,
                             vmap_method="broadcast_all")


def _run(call: Call, shape: tuple[int, ...], data: np.ndarray) -> np.ndarray:
    """The callback: ``data`` is an array of ``shape``, or a batch of them under vmap."""
    data = np.asarray(data)
    batch_rank = data.ndim - len(shape)
    batched = call.batched(data.dtype, shape, batch_rank)
    if batched is None:
        return np.stack([_run(call, shape, item) for item in data])
    return batched.run(data)


def _traced_forward(call: Call, data: jax.Array) -> tuple[jax.Array, tuple]:
    result = _forward(call, data)
    return result, (data, result)


def _traced_backward(call: Call, saved: tuple, grad: jax.Array) -> tuple[jax.Array]:
    data, result = saved
    callback = functools.partial(_gradient, call, tuple(data.shape))
    gradient = jax.pure_callback(callback, jax.ShapeDtypeStruct(data.shape, data.dtype),
                                 grad, data, result, vmap_method="broadcast_all")
    return (gradient,)


def _gradient(call: Call, shape: tuple[int, ...], grad, data, result) -> np.ndarray:
    """The backward callback; under vmap all three arrays carry the same batch axes."""
    data = np.asarray(data)
    batch_rank = data.ndim - len(shape)
    batched = call.batched(data.dtype, shape, batch_rank)
    if batched is None:
        items = zip(grad, data, result, strict=True)
        return np.stack([_gradient(call, shape, *item) for item in items])
    plan = batched.plan(data.dtype, data.shape)
    return data_gradient(call.op, plan, np.asarray(grad), data, np.asarray(result))


_traced.defvjp(_traced_forward, _traced_backward)
