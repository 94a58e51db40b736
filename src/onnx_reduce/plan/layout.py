"""Collapse a reduction into a canonical layout: drop unit dims, merge adjacent compatible dims.

No data moves: the layout describes the input's own memory (sizes and byte strides), grouped
into runs of kept and reduced dimensions, so a kernel can pick a loop order for the few shapes
that remain (reduce everything, the inner run, the outer run, a middle run, or a general mix).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


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
