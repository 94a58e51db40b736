"""Kernels bound to one (op, dtype, plan): the low-overhead lane for small arrays.

A call on a small array costs more in Python than in the kernel: finding the layout, packing
the geometry and choosing the kernel take microseconds, summing 1024 elements a fraction of
one. :func:`bind` does that work once per (op, dtype, shape, axes); the function it returns
takes an array of that dtype and shape (C-contiguous, aligned, writeable: the caller checks)
and only allocates the output and calls a compiled kernel. ReduceSum/ReduceL2 and the wide
column layouts of ReduceLogSumExp use the kernel the general path (:func:`.sum_l2.reduce_sum` etc.)
would pick, so their results are identical bit for bit; ReduceLogSumExp rows and narrow
columns use :func:`.log_sum_exp._small_rows` / ``_small_columns`` (two passes in memory order,
the same arithmetic without the general kernels' per-row and per-item setup).
Large inputs (the parallel kernels' sizes), and anything else not served, get None: their
per-call cost is negligible next to the work, and the general path handles them.

>>> from onnx_reduce.spec import Request, resolve
>>> from onnx_reduce.plan import make_plan
>>> plan = make_plan(Request(resolve("ReduceSum", 13), (1,), True, False), (2, 3))
>>> run = bind("ReduceSum", np.dtype(np.float32), plan)
>>> run(np.arange(6, dtype=np.float32).reshape(2, 3))
array([[ 3.],
       [12.]], dtype=float32)
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from ...plan import ReductionPlan
from . import log_sum_exp, sum_l2
from ._common import canonical, memory_order_geometry, storage_dtype

__all__ = ["bind"]

Bound = Callable[[np.ndarray], "np.ndarray | None"]


def bind(op: str, dtype: np.dtype, plan: ReductionPlan) -> Bound | None:
    """``op`` as ``plan`` says for C-contiguous, aligned, writeable arrays of ``dtype`` and
    ``plan.shape``; None when this lane does not serve the case. The function returns None
    when a result must be redone by the general path (a float64 L2 that overflowed)."""
    size = math.prod(plan.shape)
    if plan.noop or size == 0 or plan.reduced_size == 0 or not dtype.isnative:
        return None
    if op == "ReduceLogSumExp":
        return _bind_log_sum_exp(dtype, plan, size)
    return _bind_sum_l2(dtype, plan, size, op == "ReduceL2")


def _bind_sum_l2(dtype: np.dtype, plan: ReductionPlan, size: int, square: bool) -> Bound | None:
    if (dtype not in sum_l2._ACCUMULATOR or size >= sum_l2.PARALLEL_MIN
            or (square and dtype.kind in "iu")):
        return None
    geo = memory_order_geometry(plan.shape, plan.axes)
    kernel = sum_l2._small_l2 if square else sum_l2._small_sum
    storage = sum_l2._STORAGE[dtype]
    n_out = size // plan.reduced_size
    shape = plan.output_shape
    if storage == dtype:
        def run(data: np.ndarray) -> np.ndarray | None:
            out = np.empty(n_out, dtype)
            return None if kernel(data.reshape(-1), geo, out) else out.reshape(shape)
    else:
        def run(data: np.ndarray) -> np.ndarray | None:
            out = np.empty(n_out, storage)
            kernel(data.view(storage).reshape(-1), geo, out)
            return out.view(dtype).reshape(shape)
    return run


def _bind_log_sum_exp(dtype: np.dtype, plan: ReductionPlan, size: int) -> Bound | None:
    if dtype not in log_sum_exp._SERVED or size >= log_sum_exp.PARALLEL_MIN:
        return None
    storage = storage_dtype(dtype)
    bits = log_sum_exp._BITS.get(dtype, storage)
    n_out = size // plan.reduced_size
    shape = plan.output_shape
    geo = memory_order_geometry(plan.shape, plan.axes)
    if geo[2 * geo[0]]:  # the innermost (merged) dim is reduced: whole rows, in memory order
        kernel, args = log_sum_exp._small_rows, (geo,)
    elif geo[geo[0]] <= log_sum_exp.SMALL_COLUMNS_MAX_WIDTH:  # a narrow kept innermost run
        kernel, args = log_sum_exp._small_columns, (geo,)
    else:  # the column kernel the general path would pick (serial at these sizes)
        canon = canonical(np.empty(plan.shape, dtype), plan.axes)
        job = None if canon is None else log_sum_exp._job(canon, dtype, plan)
        if job is None:
            return None
        kernel, args, _ = job

    if storage == dtype:
        def run(data: np.ndarray) -> np.ndarray:
            out = np.empty(n_out, dtype)
            base = data.reshape(-1)
            kernel(base, base.view(bits), *args, out)
            return out.reshape(shape)
    else:
        def run(data: np.ndarray) -> np.ndarray:
            out = np.empty(n_out, storage)
            base = data.view(storage).reshape(-1)
            kernel(base, base.view(bits), *args, out)
            return out.view(dtype).reshape(shape)
    return run
