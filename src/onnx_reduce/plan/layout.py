"""Collapse a reduction into a canonical layout: drop unit dims, merge adjacent compatible dims.

No data moves: the layout describes the input's own memory (sizes and strides), grouped into
runs of kept and reduced dimensions, so a kernel can pick a loop order for the few shapes that
remain (reduce everything, the inner run, the outer run, a middle run, or a general mix).

* :func:`collapse` — the merge rule (byte strides, as they are);
* :func:`canonical_layout` — what the compiled kernels walk: negative strides flipped, element
  strides, kept and reduced dims each ordered outermost first, over a flat view of the memory
  (packed for them by :mod:`.geometry`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .cache import BoundedCache
from .geometry import packed


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

    @property
    def geometry(self) -> np.ndarray:
        """The dims packed as the kernels read them (:func:`.geometry.packed`, cached)."""
        return packed(self.kept_sizes, self.kept_strides, self.red_sizes, self.red_strides)

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
    key = (view.shape, view.strides, axes, view.dtype.itemsize)
    recipe = _RECIPES.get(key)
    if recipe is None:
        recipe = _RECIPES.put(key, _recipe(view, axes))
    if recipe is False:
        return None
    flips, contiguous, span, fields = recipe
    if flips is not None:
        view = view[flips]
    if contiguous:
        base = view.ravel(order="K")
        base.setflags(write=False)
    else:
        base = np.lib.stride_tricks.as_strided(view, shape=(span,),
                                               strides=(view.dtype.itemsize,), writeable=False)
    return Canonical(base, 0, *fields)


#: What canonical_layout works out from the shape, strides, axes and item size (False: not
#: served), so that a call with the same layout only builds the base view.
_RECIPES: BoundedCache[tuple, tuple | bool] = BoundedCache(256)


def _recipe(view: np.ndarray, axes: tuple[int, ...]) -> tuple | bool:
    """(flip slices or None, whether the flipped view is contiguous, its span in elements, the
    :class:`Canonical` fields after ``base`` and ``offset``); False for strides that are not
    a multiple of the item size."""
    flip_axes = [i for i, (n, s) in enumerate(zip(view.shape, view.strides, strict=True))
                 if n > 1 and s < 0]
    flipped_kept: list[int] = []
    flips = None
    if flip_axes:
        kept_axes = [i for i in range(view.ndim) if i not in axes]
        flipped_kept = [kept_axes.index(i) for i in flip_axes if i not in axes]
        flips = tuple(slice(None, None, -1) if i in flip_axes else slice(None)
                      for i in range(view.ndim))
        view = view[flips]
    layout = collapse(view, axes)
    item = view.dtype.itemsize
    if any(s % item for s in layout.strides):
        return False
    sizes = list(layout.sizes)
    strides = [s // item for s in layout.strides]
    reduced = list(layout.reduced)
    contiguous = view.flags.c_contiguous or view.flags.f_contiguous
    span = 1 + sum((n - 1) * s for n, s in zip(sizes, strides, strict=True))
    collapsed_kept = tuple(n for n, r in zip(sizes, reduced, strict=True) if not r)
    if not any(reduced):
        sizes.append(1)
        strides.append(0)
        reduced.append(True)
    order = sorted(range(len(sizes)), key=lambda i: -strides[i])  # stable: outermost first
    kept = [i for i in order if not reduced[i]]
    red = [i for i in order if reduced[i]]
    kept_positions = [i for i in range(len(sizes)) if not reduced[i]]
    fields = (
        tuple(sizes[i] for i in kept),
        tuple(strides[i] for i in kept),
        tuple(sizes[i] for i in red),
        tuple(strides[i] for i in red),
        reduced[order[-1]],
        tuple(kept_positions.index(i) for i in kept),
        collapsed_kept,
        tuple(flipped_kept),
    )
    return flips, contiguous, span, fields
