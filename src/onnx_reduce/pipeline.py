"""The one pipeline every front door calls: spec (validate) -> plan -> kernel."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from .kernels.dispatch import bind, run_kernel
from .plan import ReductionPlan, make_plan
from .spec import OpVersion, as_dtype, check_array, check_shape, native_dtype, validate


def execute(
    ver: OpVersion,
    data: np.ndarray,
    attributes: Mapping[str, Any],
    axes_input: np.ndarray | None = None,
) -> np.ndarray:
    """Run one node of operator version ``ver`` on ``data``.

    ``attributes`` are the node's attributes as given (defaults are the version's);
    ``axes_input`` is the optional second input of the versions that take axes as an input.

    >>> from onnx_reduce.spec import resolve
    >>> execute(resolve("ReduceSum", 11), np.arange(6.0).reshape(2, 3), {"axes": [1]})
    array([[ 3.],
           [12.]])
    """
    data = check_array(ver, data)
    return execute_plan(ver, data, plan_call(ver, data.dtype, data.shape, attributes, axes_input))


def execute_plan(ver: OpVersion, data: np.ndarray, plan: ReductionPlan) -> np.ndarray:
    """Run a planned call (from :func:`plan_call`) on ``data``: the kernel stage.

    Data in the other byte order is converted to the machine's once, a copy (the kernels read
    native numbers); results are always in the machine's byte order."""
    return np.asarray(run_kernel(ver.op, native(data), plan))


def native(data: np.ndarray) -> np.ndarray:
    """``data`` itself when in the machine's byte order, else a copy that is.

    >>> native(np.arange(3, dtype=">i4")).dtype == np.dtype(np.int32)
    True
    """
    dtype = data.dtype
    return data if dtype.isnative else data.astype(native_dtype(dtype))


def prepare(
    ver: OpVersion,
    dtype: np.dtype,
    shape: tuple[int, ...],
    attributes: Mapping[str, Any],
    axes_input: np.ndarray | None = None,
) -> Callable[[np.ndarray], np.ndarray]:
    """Validate and plan a call once for many arrays of ``dtype`` and ``shape``: the returned
    function runs only the kernel stage (where one serves, a kernel bound to this case).
    For a ``dtype`` in the other byte order it converts each array first, as
    :func:`execute_plan` does.

    >>> from onnx_reduce.spec import resolve
    >>> run = prepare(resolve("ReduceSum", 13), np.dtype(np.float32), (2, 3), {"keepdims": 0})
    >>> run(np.ones((2, 3), np.float32))
    array(6., dtype=float32)
    """
    dtype = as_dtype(ver, dtype)
    shape = check_shape(ver, shape)
    machine = native_dtype(dtype)
    run = bind(ver.op, machine, plan_call(ver, machine, shape, attributes, axes_input))
    if machine is dtype:
        return run
    return lambda data: run(native(data))


def plan_call(
    ver: OpVersion,
    dtype: np.dtype,
    shape: tuple[int, ...],
    attributes: Mapping[str, Any],
    axes_input: np.ndarray | None = None,
) -> ReductionPlan:
    """Validate one call and plan it.

    Valid calls are memoized: repeated calls with the same dtype, shape, attributes and axes skip
    straight to the kernel. Invalid ones are not cached, so they raise every time."""
    key = _call_key(attributes, axes_input)
    if key is None:
        return make_plan(validate(ver, dtype, attributes, axes_input), shape)
    return _planned(ver, dtype, shape, *key)


@functools.lru_cache(maxsize=4096)
def _planned(
    ver: OpVersion, dtype: np.dtype, shape: tuple[int, ...], attributes: tuple, axes: tuple | None
) -> ReductionPlan:
    restored = {name: list(value) if isinstance(value, tuple) else value
                for name, value in attributes}
    axes_input = None if axes is None else np.array(axes, dtype=np.int64)
    return make_plan(validate(ver, dtype, restored, axes_input), shape)


def _call_key(
    attributes: Mapping[str, Any], axes_input: np.ndarray | None
) -> tuple[tuple, tuple | None] | None:
    """A hashable form of a call's attributes and axes, or None where the plain path must judge
    (unusual types, an axes input that is not a 1-D int64 array)."""
    if type(attributes) is not dict:
        return None
    items = []
    for name, value in attributes.items():
        if isinstance(value, (list, tuple)):
            if not all(type(v) is int for v in value):
                return None
            value = tuple(value)
        elif type(value) not in (int, bool):
            return None
        items.append((name, value))
    if axes_input is None:
        return tuple(items), None
    if not (isinstance(axes_input, np.ndarray) and axes_input.dtype == np.int64
            and axes_input.ndim == 1):
        return None
    return tuple(items), tuple(axes_input.tolist())

