"""The packed geometries the compiled kernels read: int64 arrays, built once per layout (cached,
read-only), read only through the accessors below, in Python and in compiled code alike
(:mod:`onnx_reduce.kernels.fast._common` registers them with numba).

* **canonical** (:func:`packed`): ``nk, nr, kept sizes, kept strides, reduced sizes, reduced
  strides``, element strides, outermost first: a :class:`.layout.Canonical` layout, any strides.
  Accessors :func:`kept_dims` and :func:`reduced_dims`.
* **memory order** (:func:`memory_order_geometry`): ``m, sizes, reduced flags, output strides``
  of the merged dims of a C-contiguous array, in C order: what the one-call paths of small
  arrays walk. Accessor :func:`merged_dims`.

An array packs its dims so that one compiled variant serves every rank (tuples of dims would
compile one per rank).

>>> geo = packed((4, 6), (30, 1), (5,), (6,))
>>> [d.tolist() for d in kept_dims(geo) + reduced_dims(geo)]
[[4, 6], [30, 1], [5], [6]]
"""

from __future__ import annotations

import math

import numpy as np

from .cache import BoundedCache

_PACKED: BoundedCache[tuple, np.ndarray] = BoundedCache(256)
_C_PACKED: BoundedCache[tuple, tuple[np.ndarray, bool]] = BoundedCache(256)
_MEMORY_ORDER: BoundedCache[tuple, np.ndarray] = BoundedCache(256)


def packed(kept_sizes: tuple, kept_strides: tuple, red_sizes: tuple, red_strides: tuple
           ) -> np.ndarray:
    """The canonical geometry of kept and reduced dims (sizes and element strides)."""
    key = (kept_sizes, kept_strides, red_sizes, red_strides)
    geo = _PACKED.get(key)
    if geo is None:
        geo = np.array((len(kept_sizes), len(red_sizes), *kept_sizes, *kept_strides,
                        *red_sizes, *red_strides), np.int64)
        geo.flags.writeable = False
        _PACKED.put(key, geo)
    return geo


def kept_dims(geo: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sizes, strides) of the kept dims of a canonical geometry (views)."""
    nk = geo[0]
    return geo[2:2 + nk], geo[2 + nk:2 + 2 * nk]


def reduced_dims(geo: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sizes, strides) of the reduced dims of a canonical geometry (views)."""
    nk = geo[0]
    start = 2 + 2 * nk
    return geo[start:start + geo[1]], geo[start + geo[1]:start + 2 * geo[1]]


def c_packed(shape: tuple[int, ...], axes: tuple[int, ...]) -> tuple[np.ndarray, bool]:
    """The canonical geometry of reducing ``axes`` of a C-contiguous array of ``shape``, and
    whether its innermost dim is reduced: the merged dims of :func:`memory_order_geometry`,
    which in C order are the canonical form (:func:`.layout.canonical_layout` gives the same
    for such an array, with more work per call).

    >>> geo, inner = c_packed((4, 5, 6), (1,))
    >>> geo.tolist(), inner
    ([2, 1, 4, 6, 30, 1, 5, 6], False)
    """
    key = (shape, axes)
    found = _C_PACKED.get(key)
    if found is None:  # ~6 us of Python otherwise, on every call of the per-call path
        found = _C_PACKED.put(key, _c_packed(shape, axes))
    return found


def _c_packed(shape: tuple[int, ...], axes: tuple[int, ...]) -> tuple[np.ndarray, bool]:
    sizes, reduced, _ = (d.tolist() for d in merged_dims(memory_order_geometry(shape, axes)))
    strides = [math.prod(sizes[d + 1:]) for d in range(len(sizes))]
    kept = [d for d in range(len(sizes)) if not reduced[d]]
    red = [d for d in range(len(sizes)) if reduced[d]]
    ksz, kst = tuple(sizes[d] for d in kept), tuple(strides[d] for d in kept)
    rsz, rst = tuple(sizes[d] for d in red), tuple(strides[d] for d in red)
    if rsz in ((), (1,)):  # only size-1 axes reduced: one size-1 reduced dim (as canonical)
        return packed(ksz, kst, (1,), (0,)), True
    return packed(ksz, kst, rsz, rst), bool(reduced[-1])


def memory_order_geometry(shape: tuple[int, ...], axes: tuple[int, ...]) -> np.ndarray:
    """The dims of a C-contiguous ``shape`` in C order, size-1 dims dropped and adjacent kept or
    reduced dims merged, packed as ``m, sizes[m], reduced[m], ost[m]``: ``reduced`` flags (0/1)
    and output strides (0 for reduced dims) of the merged dims.

    >>> memory_order_geometry((8, 8, 16), (0, 2)).tolist()
    [3, 8, 8, 16, 1, 0, 1, 0, 1, 0]
    """
    key = (shape, axes)
    geo = _MEMORY_ORDER.get(key)
    if geo is None:
        sizes: list[int] = []
        red: list[int] = []
        for d, n in enumerate(shape):
            r = int(d in axes)
            if n == 1:
                continue
            if red and red[-1] == r:
                sizes[-1] *= n
            else:
                sizes.append(n)
                red.append(r)
        if not sizes:
            sizes, red = [1], [1]
        ost = [0] * len(sizes)
        step = 1
        for d in range(len(sizes) - 1, -1, -1):
            if not red[d]:
                ost[d] = step
                step *= sizes[d]
        geo = np.array((len(sizes), *sizes, *red, *ost), np.int64)
        geo.flags.writeable = False
        _MEMORY_ORDER.put(key, geo)
    return geo


def merged_dims(geo: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(sizes, reduced flags, output strides) of a memory-order geometry (views)."""
    m = geo[0]
    return geo[1:1 + m], geo[1 + m:1 + 2 * m], geo[1 + 2 * m:1 + 3 * m]
