"""jax front door: eager CPU arrays are read without a copy and reduced by the numpy path;
traced arrays (inside ``jax.jit``, ``jax.grad``, ``jax.vmap``) reach the same path through
``jax.pure_callback``, under a ``jax.custom_vjp`` whose backward pass calls
:mod:`onnx_reduce.kernels.gradients`. ``vmap`` runs the callback once per batch element
(``vmap_method="sequential"``)."""

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


def reduce(op: str, data: jax.Array, axes, keepdims, noop, opset) -> jax.Array:
    """``op`` of a jax array, as a jax array of its dtype on its device (the CPU)."""
    plan_for(op, np.dtype(data.dtype), tuple(data.shape), axes, keepdims, noop, opset)
    call = Call(op, None if axes is None else tuple(int(a) for a in axes), bool(keepdims),
                bool(noop), opset)
    if isinstance(data, jax.core.Tracer):
        return _traced(call, data)
    device = _cpu_device(call, data)
    result = reduce_array(op, np.asarray(data), axes, keepdims, noop, opset)
    return jax.device_put(result, device)


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
    return jax.pure_callback(
        functools.partial(_run, call), jax.ShapeDtypeStruct(shape, data.dtype), data,
        vmap_method="sequential",
    )


def _run(call: Call, data: np.ndarray) -> np.ndarray:
    return reduce_array(call.op, np.asarray(data), call.axes, call.keepdims, call.noop,
                        call.opset)


def _traced_forward(call: Call, data: jax.Array) -> tuple[jax.Array, tuple]:
    result = _forward(call, data)
    return result, (data, result)


def _traced_backward(call: Call, saved: tuple, grad: jax.Array) -> tuple[jax.Array]:
    data, result = saved
    gradient = jax.pure_callback(
        functools.partial(_gradient, call), jax.ShapeDtypeStruct(data.shape, data.dtype),
        grad, data, result, vmap_method="sequential",
    )
    return (gradient,)


def _gradient(call: Call, grad: np.ndarray, data: np.ndarray, result: np.ndarray) -> np.ndarray:
    data = np.asarray(data)
    plan = call.plan(data.dtype, data.shape)
    return data_gradient(call.op, plan, np.asarray(grad), data, np.asarray(result))


_traced.defvjp(_traced_forward, _traced_backward)
