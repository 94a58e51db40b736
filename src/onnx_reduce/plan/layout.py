"""Collapse a reduction into a canonical layout: drop unit dims, merge adjacent compatible dims.

No data moves: the layout describes the input's own memory (sizes and strides), grouped into
runs of kept and reduced dimensions, so a kernel can pick a loop order for the few shapes that
remain (reduce everything, the inner run, the outer run, a middle run, or a general mix).

* :func:`collapse` — the merge rule (byte strides, as they are);
* :func:`canonical_layout` — what the compiled kernels walk: negative strides flipped, element
  strides, kept and reduced dims each ordered outermost first, over a flat view of the memory;
* :func:`memory_order_geometry` — a small C-contiguous reduction walked in memory order, packed
  for the kernels' one-call paths.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .cache import BoundedCache


@dataclass(frozen=True)
class Layout:
    """Dims of the input after collapsing, outermost first.

    >>> x = np.zeros((4, 5, 6, 7), dtype=np.float32)
    >>> collapse(x, (2, 3))
    Layout(sizes=(20, 42), strides=(168, 4), reduced=(False, True))
    >>> collapse(x, (2, 3)).kind
    'inner'
    >>> collapse(x, (0, 1)).kind
    'outer'
    """

    sizes: tuple[int, ...]
    strides: tuple[int, ...]
    """Byte strides, possibly negative."""
    reduced: tuple[bool, ...]

    @property
    def kind(self) -> str:
        """``"none"`` (nothing to reduce), ``"all"``, ``"inner"``, ``"outer"``, ``"middle"``
        (kept, reduced, kept) or ``"general"``."""
        pattern = self.reduced
        if True not in pattern:
            return "none"
        return {
            (True,): "all",
            (False, True): "inner",
            (True, False): "outer",
            (False, True, False): "middle",
        }.get(pattern, "general")


def collapse(data: np.ndarray, axes: tuple[int, ...]) -> Layout:
    """The canonical layout of reducing ``axes`` (non-negative) of ``data``."""
    sizes: list[int] = []
    strides: list[int] = []
    reduced: list[bool] = []
    for axis, (size, stride) in enumerate(zip(data.shape, data.strides, strict=True)):
        if size == 1:
            continue
        is_reduced = axis in axes
        if reduced and reduced[-1] == is_reduced and strides[-1] == stride * size:
            sizes[-1] *= size
            strides[-1] = stride
            continue
        sizes.append(size)
        strides.append(stride)
        reduced.append(is_reduced)
    return Layout(tuple(sizes), tuple(strides), tuple(reduced))


@dataclass(slots=True)
class Canonical:
    """A reduction as the compiled kernels see it (element units, strides >= 0, outermost first).

    ``base`` is a 1-D read-only view spanning the input's memory; element ``[k, r]`` (kept
    multi-index ``k`` over ``kept_sizes``, reduced ``r`` over ``red_sizes``) is at
    ``base[offset + k . kept_strides + r . red_strides]``. There is always at least one reduced
    dim (a size-1 one with stride 0 when nothing is reduced). Treat as read-only.
    """

    base: np.ndarray
    offset: int
    kept_sizes: tuple[int, ...]
    kept_strides: tuple[int, ...]
    red_sizes: tuple[int, ...]
    red_strides: tuple[int, ...]
    inner_reduced: bool
    """True when the innermost (smallest-stride) dim is a reduced one."""
    kept_perm: tuple[int, ...]
    """Position of each canonical kept dim among the collapsed kept dims (input order)."""
    collapsed_kept: tuple[int, ...]
    """Sizes of the collapsed kept dims, input order."""
    flipped: tuple[int, ...]
    """Positions (in the kept shape) of kept axes whose negative strides were flipped."""

    def restore(self, flat: np.ndarray, kept_shape: tuple[int, ...]) -> np.ndarray:
        """``flat`` (one value per output, canonical kept order) in the input's kept order."""
        perm = self.kept_perm
        if not self.flipped and all(p == i for i, p in enumerate(perm)):
            return flat.reshape(kept_shape)
        out = flat.reshape(tuple(self.collapsed_kept[p] for p in perm))
        out = out.transpose(np.argsort(perm)).reshape(kept_shape)
        if self.flipped:
            out = out[tuple(slice(None, None, -1) if i in self.flipped else slice(None)
                            for i in range(len(kept_shape)))]
        return out


def canonical_layout(data: np.ndarray, axes: tuple[int, ...]) -> Canonical | None:
    """The canonical form of reducing ``axes`` (sorted, non-negative) of ``data``; no copy.

    Negative strides are flipped (the view walks those axes backwards), dims merge as in
    :func:`collapse`, then dims are ordered by decreasing stride. None for an empty array or
    strides that are not a multiple of the item size.

    >>> c = canonical_layout(np.zeros((3, 4), np.float32).T, (1,))
    >>> c.kept_sizes, c.kept_strides, c.red_sizes, c.red_strides, c.inner_reduced
    ((4,), (1,), (3,), (4,), False)
    """
    if data.size == 0:
        return None
    view = data if type(data) is np.ndarray else np.asarray(data)
    flip_axes = [i for i, (n, s) in enumerate(zip(view.shape, view.strides, strict=True))
                 if n > 1 and s < 0]
    flipped_kept: list[int] = []
    if flip_axes:
        kept_axes = [i for i in range(view.ndim) if i not in axes]
        flipped_kept = [kept_axes.index(i) for i in flip_axes if i not in axes]
        view = view[tuple(slice(None, None, -1) if i in flip_axes else slice(None)
                          for i in range(view.ndim))]
    layout = collapse(view, axes)
    item = view.dtype.itemsize
    if any(s % item for s in layout.strides):
        return None
    sizes = list(layout.sizes)
    strides = [s // item for s in layout.strides]
    reduced = list(layout.reduced)
    if view.flags.c_contiguous or view.flags.f_contiguous:
        base = view.ravel(order="K")
        base.setflags(write=False)
    else:
        span = 1 + sum((n - 1) * s for n, s in zip(sizes, strides, strict=True))
        base = np.lib.stride_tricks.as_strided(view, shape=(span,), strides=(item,),
                                               writeable=False)
    collapsed_kept = tuple(n for n, r in zip(sizes, reduced, strict=True) if not r)
    if not any(reduced):
        sizes.append(1)
        strides.append(0)
        reduced.append(True)
    order = sorted(range(len(sizes)), key=lambda i: -strides[i])  # stable: outermost first
    kept = [i for i in order if not reduced[i]]
    red = [i for i in order if reduced[i]]
    kept_positions = [i for i in range(len(sizes)) if not reduced[i]]
    return Canonical(
        base=base,
        offset=0,
        kept_sizes=tuple(sizes[i] for i in kept),
        kept_strides=tuple(strides[i] for i in kept),
        red_sizes=tuple(sizes[i] for i in red),
        red_strides=tuple(strides[i] for i in red),
        inner_reduced=reduced[order[-1]],
        kept_perm=tuple(kept_positions.index(i) for i in kept),
        collapsed_kept=collapsed_kept,
        flipped=tuple(flipped_kept),
    )


_MEMORY_ORDER: BoundedCache[tuple, np.ndarray] = BoundedCache(256)


def memory_order_geometry(shape: tuple[int, ...], axes: tuple[int, ...]) -> np.ndarray:
    """The dims of a C-contiguous ``shape`` in C order, size-1 dims dropped and adjacent kept or
    reduced dims merged, packed (read-only, cached) as ``m, sizes[m], reduced[m], ost[m]``:
    ``reduced`` flags (0/1) and output strides (0 for reduced dims) of the merged dims.

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
