"""Front door: numpy-style functions with the semantics of each operator's newest version.

>>> import numpy as np
>>> x = np.array([[1.0, 2.0], [3.0, 4.0]], dtype=np.float32)
>>> reduce_sum(x, axes=[1])
array([[3.],
       [7.]], dtype=float32)
>>> reduce_l2(np.array([3e30, 4e30], dtype=np.float32), keepdims=False)
array(5.e+30, dtype=float32)
>>> reduce_log_sum_exp(np.array([800.0, 800.0]), keepdims=False)
array(800.69314718)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike

from .pipeline import execute
from .spec import as_axes, latest, resolve

Axes = Sequence[int] | np.ndarray | None


def reduce_sum(
    data: ArrayLike,
    axes: Axes = None,
    keepdims: bool = True,
    noop_with_empty_axes: bool = False,
    *,
    opset: int | None = None,
) -> np.ndarray:
    """Sum of ``data`` over ``axes`` (all axes when None or empty), as ONNX ReduceSum.

    Integers wrap modulo 2**bits; float16/bfloat16/float32 accumulate in float64 and round once.
    ``opset`` selects an older version's semantics (default: the newest, 13).

    >>> reduce_sum(np.array([[1, 2], [3, 4]], dtype=np.int32), axes=[0], keepdims=False)
    array([4, 6], dtype=int32)
    """
    return _reduce("ReduceSum", data, axes, keepdims, noop_with_empty_axes, opset)


def reduce_l2(
    data: ArrayLike,
    axes: Axes = None,
    keepdims: bool = True,
    noop_with_empty_axes: bool = False,
    *,
    opset: int | None = None,
) -> np.ndarray:
    """sqrt(sum(x**2)) over ``axes``, as ONNX ReduceL2, free of intermediate overflow.

    Integers give the exact floor(sqrt(sum x**2)). Default version: 18.

    >>> reduce_l2(np.array([3, 4], dtype=np.int64))
    array([5])
    """
    return _reduce("ReduceL2", data, axes, keepdims, noop_with_empty_axes, opset)


def reduce_log_sum_exp(
    data: ArrayLike,
    axes: Axes = None,
    keepdims: bool = True,
    noop_with_empty_axes: bool = False,
    *,
    opset: int | None = None,
) -> np.ndarray:
    """log(sum(exp(x))) over ``axes``, as ONNX ReduceLogSumExp, for any finite input.

    The default version (28) takes floating types only; ``opset=18`` also takes integers.

    >>> reduce_log_sum_exp(np.array([0.0, -np.inf]), keepdims=False)
    array(0.)
    """
    return _reduce("ReduceLogSumExp", data, axes, keepdims, noop_with_empty_axes, opset)


def _reduce(
    op: str, data: ArrayLike, axes: Axes, keepdims: bool, noop: bool, opset: int | None
) -> np.ndarray:
    ver = latest(op) if opset is None else resolve(op, opset)
    attributes: dict = {"keepdims": keepdims}
    if noop or ver.axes_is_input:
        attributes["noop_with_empty_axes"] = noop
    axes_input = None
    if axes is not None:
        axes = as_axes(ver, axes)
        if ver.axes_is_input:
            axes_input = np.array(axes, dtype=np.int64)
        else:
            attributes["axes"] = list(axes)
    return execute(ver, np.asarray(data), attributes, axes_input)
