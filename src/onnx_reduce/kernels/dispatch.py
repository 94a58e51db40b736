"""Pick the kernel for one planned reduction: a compiled fast path when one serves the case,
else the numpy reference path.

Both are named in the op registry (:mod:`onnx_reduce.spec.ops`). Fast kernels live in
:mod:`onnx_reduce.kernels.fast`, one module per family. Each exposes
``reduce_<op>(data, plan) -> np.ndarray | None`` and returns None for a case it does not serve
(dtype, layout, size), which then falls back to the reference. They are imported on first use, so
``import onnx_reduce`` does not load numba.

A call on a small array costs more in Python than in the kernel: finding the layout, packing the
geometry and choosing the kernel take microseconds, summing 1024 elements a fraction of one. On a
large array the same steps cost tens of microseconds each when the caches are cold, as they are
after streaming the previous large input: several percent of a 64 MiB reduction. So each fast
module also exposes ``bind_<op>(dtype, plan) -> Bound | None``: that work done once per (dtype,
shape, axes), returning a function of the array that only allocates the output and calls the
compiled kernel (for C-contiguous, aligned, writeable arrays: ReduceSum/ReduceL2 at every size,
ReduceLogSumExp below its threaded sizes; it returns None when the general path must redo a
result). :func:`bind` wraps it with the checks and the fallback.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import numpy as np

from ..plan import ReductionPlan
from ..spec import op_record
from ..spec.dtypes import is_float
from . import reference
from .fast import first_import

Kernel = Callable[[np.ndarray, ReductionPlan], "np.ndarray | None"]
#: A kernel bound to one dtype and plan (see the module docstring).
Bound = Callable[[np.ndarray], "np.ndarray | None"]
Binder = Callable[[np.dtype, ReductionPlan], "Bound | None"]

#: Compiled rows of a partial state: ``rows(block, state, numpy_rows)``.
StateRows = Callable[[np.ndarray, np.ndarray, Callable], None]

_loaded: dict[str, tuple[Kernel, Binder] | None] = {}
_rows_for: Any = None  # not loaded yet; False where the compiled rows cannot load

PATHS = ("auto", "reference", "fast")
_path: ContextVar[str] = ContextVar("onnx_reduce_kernel_path", default="auto")


@contextmanager
def kernel_path(path: str) -> Iterator[None]:
    """Within the block, use only ``"reference"`` kernels, require ``"fast"`` ones, or ``"auto"``.

    ``"fast"`` raises ``RuntimeError`` where no fast kernel serves a case (for tests).
    The setting is per thread / per async task.

    >>> from onnx_reduce import reduce_sum
    >>> with kernel_path("reference"):
    ...     reduce_sum(np.ones(3, np.float32))
    array([3.], dtype=float32)
    """
    if path not in PATHS:
        raise ValueError(f"kernel path must be one of {PATHS}, got {path!r}")
    token = _path.set(path)
    try:
        yield
    finally:
        _path.reset(token)


def run_kernel(op: str, data: np.ndarray, plan: ReductionPlan) -> np.ndarray:
    """Compute ``op`` of ``data`` as ``plan`` says."""
    if _elementwise(plan, data.dtype):
        return reference_kernel(op)(data.reshape(plan.output_shape), plan.elementwise)
    path = _path.get()
    if path != "reference" and not plan.noop:
        fast = _fast_kernel(op)
        result = None if fast is None else fast(data, plan)
        if result is not None:
            return result
        if path == "fast":
            raise RuntimeError(
                f"{op}: no fast kernel serves dtype {data.dtype}, shape {data.shape}, "
                f"axes {plan.axes}"
            )
    return reference_kernel(op)(data, plan)


def _elementwise(plan: ReductionPlan, dtype: np.dtype) -> bool:
    """Whether ``plan`` reduces one element per output of a float ``dtype``: its elementwise
    part (the reference path's no-op) on whole arrays serves, where the kernels would take a
    reduction's steps for each output (~50x numpy's time on a size-1 axis). Integers keep the
    reduction's own rules."""
    return plan.elementwise is not None and is_float(dtype)


def reference_kernel(op: str) -> Kernel:
    """The reference path's kernel of ``op`` (named in the op registry)."""
    return getattr(reference, op_record(op).function)


def bind(op: str, dtype: np.dtype, plan: ReductionPlan) -> Callable[[np.ndarray], np.ndarray]:
    """:func:`run_kernel` for arrays of ``dtype`` and shape ``plan.shape`` only, with the kernel
    choice made once: C-contiguous, aligned, writeable arrays (the common case) go straight to
    a compiled kernel bound to this case when one is (the per-call cost of the general path
    would exceed the work on small arrays, and is several percent of it on large ones read
    from memory); the rest take :func:`run_kernel`. Same results within
    the contract (ReduceSum/ReduceL2: the same bits; ReduceLogSumExp rows: the same arithmetic).

    >>> from onnx_reduce.spec import Request, resolve
    >>> from onnx_reduce.plan import make_plan
    >>> plan = make_plan(Request(resolve("ReduceL2", 18), None, False, False), (2,))
    >>> bind("ReduceL2", np.dtype(np.float64), plan)(np.array([3.0, 4.0]))
    array(5.)
    """
    fast = bind_fast(op, dtype, plan)
    if fast is None:
        return lambda data: np.asarray(run_kernel(op, data, plan))

    def run(data: np.ndarray) -> np.ndarray:
        # carray: C-contiguous, aligned and writeable, one flag read instead of three
        if data.flags.carray and _path.get() != "reference":
            result = fast(data)
            if result is not None:
                return result
        return np.asarray(run_kernel(op, data, plan))
    return run


def bind_fast(op: str, dtype: np.dtype, plan: ReductionPlan) -> Bound | None:
    """The fast module's bound kernel for ``op``, ``dtype`` and ``plan`` (see the module
    docstring); None where none serves (no-ops, empty or non-native arrays, no numba)."""
    if plan.noop or not dtype.isnative or 0 in plan.shape:
        return None
    if _elementwise(plan, dtype):
        return None  # run_kernel's elementwise part
    fast = _fast(op)
    return None if fast is None else fast[1](dtype, plan)


def has_fast(op: str) -> bool:
    """Whether ``op`` has fast kernels here (their module and functions import); without them
    every call takes the reference path, and ``kernel_path("fast")`` raises."""
    return _fast(op) is not None


def state_rows(op: str, dtype: np.dtype) -> StateRows | None:
    """The compiled rows of ``op``'s partial states for blocks of ``dtype``
    (:mod:`.fast.state_rows`); None on the ``"reference"`` path, without numba, or where the
    numpy rows of :mod:`.states` serve."""
    global _rows_for
    if _path.get() == "reference":
        return None
    if _rows_for is None:
        with first_import:  # no fork while importing (see onnx_reduce.kernels.fast)
            _rows_for = _import_rows_for()
    return _rows_for(op, dtype) if _rows_for else None


def _import_rows_for() -> Callable | bool:
    try:
        from .fast.state_rows import rows_for
    except ImportError:
        return False
    return rows_for


def _fast_kernel(op: str) -> Kernel | None:
    fast = _fast(op)
    return None if fast is None else fast[0]


def _fast(op: str) -> tuple[Kernel, Binder] | None:
    if op not in _loaded:
        with first_import:  # no fork while importing (see onnx_reduce.kernels.fast)
            _loaded[op] = _import_fast(op)
    return _loaded[op]


def _import_fast(op: str) -> tuple[Kernel, Binder] | None:
    """The registry's fast (kernel, binder) of ``op``; None when its module or either function
    does not exist (no numba, or an op without fast kernels yet): the reference path serves."""
    names = op_record(op).fast
    if names is None:
        return None
    module_name, kernel, binder = names
    try:
        module = importlib.import_module(f"{__package__}.fast.{module_name}")
        return getattr(module, kernel), getattr(module, binder)
    except (ImportError, AttributeError):
        return None
