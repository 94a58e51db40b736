"""Compile the fast kernels ahead of their first use, into numba's on-disk cache.

A kernel compiles on its first call with a new signature (dtype, layout), up to a minute each;
later processes load it from the cache in milliseconds. :func:`warm_up` makes those first calls
now, for every dtype an operator allows and every kernel the size and layout choose (small
arrays bound and per call, views, threaded rows and columns, few outputs cut in pieces): for an
image or an environment built once and run many times (``onnx-reduce warm``).

>>> warm_up(["ReduceL2"], dtypes=["float"], sizes=["small"])
10
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor

import numpy as np

from ..spec import REGISTRY, latest, op_record
from ..spec.dtypes import dtype_named

#: (shape, axes) that take each kernel: small rows, columns, non-adjacent axes, wide columns
#: (one thread); large rows, columns, three-stream rows, few outputs in pieces, many short
#: rows, slabs of narrow columns, split reductions slab by slab (all threads; 8M elements:
#: 16 MiB of float16).
LAYOUTS = {
    "small": [((8, 128), (1,)), ((128, 8), (0,)), ((8, 8, 16), (0, 2)), ((16, 512), (0,)),
              ((4, 64), None)],
    "large": [((1024, 1024), (1,)), ((1024, 1024), (0,)), ((16, 256, 256), (0, 2)),
              ((4, 1 << 18), (1,)), ((1 << 18, 4), (0,)), ((2, 70_000), (1,)),
              ((1 << 15, 4), (1,)), ((1 << 13, 16), (1,)), ((1024, 8, 16), (1,)),
              ((16, 64, 8192), (0, 2))],
}


def warm_up(ops: Iterable[str] | None = None, dtypes: Iterable[str] | None = None,
            sizes: Iterable[str] = ("small", "large"), jobs: int = 1) -> int:
    """Run ``ops`` (ONNX names; default: every operator) on every dtype their newest
    version allows (or those of ``dtypes``, ONNX names) in the layouts of ``sizes``, C-contiguous
    and as a reversed view, keeping and dropping the reduced axes; returns the number of calls.
    Values are not checked (the tests do).

    ``jobs`` > 1 compiles in that many processes first, each taking whole groups of calls that
    share no kernel (:func:`_group`): numba compiles on one core, holding the GIL. In a script,
    call it under ``if __name__ == "__main__":`` then (the processes import the main module)."""
    groups: dict[tuple[str, int, str], list[tuple[str, str]]] = {}
    for given in ops or [record.name for record in REGISTRY]:
        name = op_record(given).name
        allowed = latest(name).dtypes
        for type_name in sorted(allowed if dtypes is None else allowed & set(dtypes)):
            groups.setdefault(_group(name, type_name), []).append((name, type_name))
    layouts = [layout for size in sizes for layout in LAYOUTS[size]]
    work = [(calls, layouts) for calls in _costliest_first(groups)]
    if jobs > 1 and len(work) > 1:
        spawn = multiprocessing.get_context("spawn")  # a fork could copy a running thread pool
        with ProcessPoolExecutor(min(jobs, len(work)), mp_context=spawn) as pool:
            list(pool.map(_warm_calls, *zip(*work, strict=True)))
    # here, the processes' kernels load from the cache (their saves were locked against each
    # other: kernels.fast._cache_file), so that this process can use them
    return sum(_warm_calls(*job) for job in work)


def _group(op: str, type_name: str) -> tuple[str, int, str]:
    """Calls with another key compile none of the same kernels: each kernel module family
    (ReduceSumSquare and ReduceLogSum run the ReduceSum/ReduceL2 kernels) compiles per
    storage type (signed and unsigned integers of one width share the wrapping sums)."""
    family = "log_sum_exp" if op == "ReduceLogSumExp" else "sums"
    dtype = dtype_named(type_name)
    return family, dtype.itemsize, "integer" if dtype.kind in "iu" else type_name


def _costliest_first(groups: dict) -> list[list[tuple[str, str]]]:
    """The groups' calls, floats' sums first and integers last (the sums' float kernels take
    longest to compile): the processes then finish close together."""
    order = sorted(groups, key=lambda key: (key[2] == "integer", key[0] != "sums"))
    return [groups[key] for key in order]


def _warm_calls(calls: list[tuple[str, str]], layouts: list) -> int:
    """Make ``calls`` ((op, ONNX type) pairs) in every one of ``layouts`` ((shape, axes)
    pairs); the number made."""
    import onnx_reduce

    made = 0
    if any(name in ("ReduceLogSumExp", "ReduceLogSum") and dtype_named(type_name).kind == "f"
           for name, type_name in calls):
        _warm_exact_stage()  # one stage for every dtype: float64 rows
    for name, type_name in calls:
        reduce = getattr(onnx_reduce, op_record(name).function)
        for shape, axes in layouts:
            x = _sample(shape, dtype_named(type_name))
            for data in (x, x[..., ::-1]):
                with np.errstate(all="ignore"):
                    reduce(data, axes=axes, keepdims=data is x)
                made += 1
    return made


def _warm_exact_stage() -> None:
    """The compiled first stage of the exact recomputations (results near 0), if numba is
    there."""
    try:
        from .fast.extended import warm
    except ImportError:
        return
    warm()


def _sample(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """Positive values (LogSum's domain) that no dtype overflows."""
    return np.random.default_rng(0).uniform(1, 2, shape).astype(dtype)
