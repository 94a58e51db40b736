"""Front door: numpy-style functions with the semantics of each operator's newest version.

``data`` is a numpy array, an array of any library of the Array API standard (torch, jax,
``array_api_strict``, ...: the result is then an array of that library, dtype and device; see
:mod:`onnx_reduce.interop`), or anything ``np.asarray`` reads (lists, scalars). numpy arrays may
be in either byte order: an array in the other byte order than the machine's is converted once
(one copy of it), and results are always in the machine's byte order. Masked arrays are refused
(``TypeError``): the kernels read the data, so the mask would be ignored. ``opset`` is an
integer from 1 to the newest opset the installed onnx defines.

>>> import numpy as np
>>> x = np.array([[1.0, 2.0], [3.0, 4.0]], dtype=np.float32)
>>> reduce_sum(x, axes=[1])
array([[3.],
       [7.]], dtype=float32)
>>> reduce_l2(np.array([3e30, 4e30], dtype=np.float32), keepdims=False)
array(5.e+30, dtype=float32)
>>> reduce_log_sum_exp(np.array([800.0, 800.0]), keepdims=False)
array(800.69314718)

Each operator of the op registry (:mod:`onnx_reduce.spec.ops`) has its function here, named by
its record.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from numpy.typing import ArrayLike

from .interop.arrays import foreign_reduction
from .pipeline import execute, plan_call, prepare
from .plan import ReductionPlan
from .plan.cache import BoundedCache
from .spec import OpVersion, as_array, as_axes, as_dtype, check_shape, latest, resolve

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
    return reduce_array("ReduceSum", data, axes, keepdims, noop_with_empty_axes, opset)


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
    return reduce_array("ReduceL2", data, axes, keepdims, noop_with_empty_axes, opset)


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
    return reduce_array("ReduceLogSumExp", data, axes, keepdims, noop_with_empty_axes, opset)


def reduce_sum_square(
    data: ArrayLike,
    axes: Axes = None,
    keepdims: bool = True,
    noop_with_empty_axes: bool = False,
    *,
    opset: int | None = None,
) -> np.ndarray:
    """sum(x**2) over ``axes``, as ONNX ReduceSumSquare.

    Integers wrap modulo 2**bits; float16/bfloat16/float32 square and sum in float64 and round
    once; float64 squares exactly and sums compensated. Default version: 18.

    >>> reduce_sum_square(np.array([[3, 4], [50000, 50000]], dtype=np.int32), axes=[1])
    array([[       25],
           [705032704]], dtype=int32)
    """
    return reduce_array("ReduceSumSquare", data, axes, keepdims, noop_with_empty_axes, opset)


def reduce_log_sum(
    data: ArrayLike,
    axes: Axes = None,
    keepdims: bool = True,
    noop_with_empty_axes: bool = False,
    *,
    opset: int | None = None,
) -> np.ndarray:
    """log(sum(x)) over ``axes``, as ONNX ReduceLogSum, within 1 ulp also where the sum is close
    to 1 or cancels (log 0 is -inf, of a negative sum NaN; the empty set gives -inf).

    The default version (28) takes floating types only; ``opset=18`` also takes integers
    (``floor(log(sum))`` of the exact sum; a sum <= 0 raises ``ValueError``).

    >>> reduce_log_sum(np.array([1e16, 1.0, -1e16]), keepdims=False)  # the float64 sum is 0
    array(0.)
    """
    return reduce_array("ReduceLogSum", data, axes, keepdims, noop_with_empty_axes, opset)


#: Prepared calls (:func:`onnx_reduce.pipeline.prepare`) by (op, dtype, shape, axes, keepdims,
#: noop, opset): a repeated call skips validation, planning and the kernel choice. Only valid
#: calls get here (invalid ones raise while preparing).
_PREPARED: BoundedCache[tuple, Callable[[np.ndarray], np.ndarray]] = BoundedCache(4096)


def reduce_array(
    op: str, data: ArrayLike, axes: Axes, keepdims: bool, noop: bool, opset: int | None
) -> np.ndarray:
    """``op`` of ``data`` as the functions above compute it: other libraries' arrays go to their
    front door (:mod:`onnx_reduce.interop`), numpy arrays straight to the prepared calls."""
    if type(data) is not np.ndarray:
        reduce_foreign = foreign_reduction(data)
        if reduce_foreign is not None:
            return reduce_foreign(op, data, axes, keepdims, noop, opset)
        data = as_array(_version(op, opset), data)
    key = _call_key(op, data, axes, keepdims, noop, opset)
    run = _PREPARED.get(key) if key is not None else None
    if run is None:
        ver, attributes, axes_input = _node_form(op, axes, keepdims, noop, opset, data.ndim)
        if key is None:  # unusual argument types: the plain path judges them
            return execute(ver, data, attributes, axes_input)
        run = _PREPARED.put(key, prepare(ver, data.dtype, data.shape, attributes, axes_input))
    return run(data)


def _call_key(
    op: str, data: np.ndarray, axes: Axes, keepdims: bool, noop: bool, opset: int | None
) -> tuple | None:
    """The call as a cache key when its arguments are plain Python ints/bools (an axis of 1.0
    or keepdims=1.0 must not hit the entry of 1), its axes numpy integers (keyed with their
    types) or a small integer ndarray (an ONNX axes input; keyed with its dtype and shape,
    which validation judges); else None."""
    if type(keepdims) not in _PLAIN or type(noop) not in _PLAIN:
        return None
    if opset is not None and type(opset) is not int:
        return None
    if type(axes) is np.ndarray:
        if axes.dtype.kind not in "iu" or axes.size > _KEYED_AXES:
            return None
        axes = (axes.dtype, axes.shape, *axes.ravel().tolist())
    elif axes is not None:
        if type(axes) is not list and type(axes) is not tuple:
            return None
        axes = tuple(axes)
        for axis in axes:
            if type(axis) is not int:
                axes = _numpy_axes(axes)
                if axes is None:
                    return None
                break
    return op, data.dtype, data.shape, axes, keepdims, noop, opset


def _numpy_axes(axes: tuple) -> tuple | None:
    """``axes`` with its numpy integers (``np.int64(1)``, as numpy code computes them) keyed
    with their types; None if one is neither that nor an int."""
    key = []
    for axis in axes:
        if type(axis) is int:
            key.append(axis)
        elif isinstance(axis, np.integer):
            key.append((type(axis), int(axis)))
        else:
            return None
    return tuple(key)


_PLAIN = (bool, int)
#: Larger axes arrays are not cache keys (no array has more dims than this).
_KEYED_AXES = 64


def plan_for(
    op: str,
    dtype: np.dtype,
    shape: tuple[int, ...],
    axes: Axes,
    keepdims: bool,
    noop: bool,
    opset: int | None,
) -> tuple[OpVersion, ReductionPlan]:
    """Validate a call on an array of ``dtype`` and ``shape`` and plan it, without the data:
    what the other libraries' front doors need to know the output shape before running.

    >>> ver, plan = plan_for("ReduceL2", np.dtype(np.float32), (2, 3), [1], False, False, None)
    >>> ver.label, plan.axes, plan.output_shape
    ('ReduceL2-18', (1,), (2,))
    """
    ver, attributes, axes_input = _node_form(op, axes, keepdims, noop, opset, len(shape))
    return ver, plan_call(ver, as_dtype(ver, dtype), check_shape(ver, shape), attributes,
                          axes_input)


def _version(op: str, opset: int | None) -> OpVersion:
    return latest(op) if opset is None else resolve(op, opset)


def _node_form(
    op: str, axes: Axes, keepdims: bool, noop: bool, opset: int | None, rank: int
) -> tuple[OpVersion, dict, np.ndarray | None]:
    """The call as the version's node would see it: (version, attributes, axes input)."""
    ver = _version(op, opset)
    attributes: dict = {"keepdims": keepdims}
    if ver.axes_is_input or not (isinstance(noop, _FLAGS) and not noop):
        attributes["noop_with_empty_axes"] = noop  # validation judges any other value
    axes_input = None
    if axes is not None:
        axes = as_axes(ver, axes, rank=rank)
        if ver.axes_is_input:
            axes_input = np.array(axes, dtype=np.int64)
        else:
            attributes["axes"] = list(axes)
    return ver, attributes, axes_input


#: Scalars whose false value leaves noop_with_empty_axes unset (versions without it take them).
_FLAGS = (bool, int, np.bool_, np.integer)


def version_label(op: str, opset: int | None) -> str:
    """``op``'s version in force at ``opset`` as messages name it (``"ReduceSum-13"``)."""
    return _version(op, opset).label
