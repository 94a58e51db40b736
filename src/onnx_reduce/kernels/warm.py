"""Compile the fast kernels ahead of their first use, into numba's on-disk cache.

A kernel compiles on its first call with a new signature (dtype, layout), a second or more each;
later processes load it from the cache in milliseconds. :func:`warm_up` makes those first calls
now, for every dtype an operator allows and every kernel the size and layout choose (small
arrays bound and per call, views, threaded rows and columns, few outputs cut in pieces): for an
image or an environment built once and run many times (``onnx-reduce warm``).

>>> warm_up(["ReduceL2"], dtypes=["float"], sizes=["small"])
10
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from ..spec import REGISTRY, latest, op_record
from ..spec.dtypes import dtype_named

#: (shape, axes) that take each kernel: small rows, columns, non-adjacent axes, wide columns
#: (one thread); large rows, columns, three-stream rows, few outputs in pieces (all threads).
LAYOUTS = {
    "small": [((8, 128), (1,)), ((128, 8), (0,)), ((8, 8, 16), (0, 2)), ((16, 512), (0,)),
              ((4, 64), None)],
    "large": [((1024, 1024), (1,)), ((1024, 1024), (0,)), ((16, 256, 256), (0, 2)),
              ((4, 1 << 18), (1,)), ((1 << 18, 4), (0,)), ((2, 70_000), (1,))],
}


def warm_up(ops: Iterable[str] | None = None, dtypes: Iterable[str] | None = None,
            sizes: Iterable[str] = ("small", "large")) -> int:
    """Run ``ops`` (ONNX names; default: every operator) on every dtype their newest
    version allows (or those of ``dtypes``, ONNX names) in the layouts of ``sizes``, C-contiguous
    and as a reversed view, keeping and dropping the reduced axes; returns the number of calls.
    Values are not checked (the tests do)."""
    import onnx_reduce

    calls = 0
    for name in ops or [record.name for record in REGISTRY]:
        record = op_record(name)
        reduce = getattr(onnx_reduce, record.function)
        allowed = latest(record.name).dtypes
        for type_name in sorted(allowed if dtypes is None else allowed & set(dtypes)):
            for shape, axes in (layout for size in sizes for layout in LAYOUTS[size]):
                x = _sample(shape, dtype_named(type_name))
                for data in (x, x[..., ::-1]):
                    with np.errstate(all="ignore"):
                        reduce(data, axes=axes, keepdims=data is x)
                    calls += 1
    return calls


def _sample(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """Positive values (LogSum's domain) that no dtype overflows."""
    return np.random.default_rng(0).uniform(1, 2, shape).astype(dtype)
