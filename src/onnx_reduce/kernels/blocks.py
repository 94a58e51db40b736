"""Walk a reduction in bounded blocks, so no kernel ever copies a whole large input."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator

import numpy as np

#: Elements per block: a float64 copy of one block is 2 MiB.
BLOCK_ELEMENTS = 1 << 18


def c_order_blocks(shape: tuple[int, ...], budget: int) -> Iterator[tuple]:
    """Index tuples cutting an array of ``shape`` into C-order blocks of at most ``budget`` items.

    Leading axes are taken one index at a time (an int, which drops the axis), one axis is cut
    into chunks (a slice) and the trailing axes are whole.

    >>> list(c_order_blocks((2, 3), 4))
    [(slice(0, 1, None),), (slice(1, 2, None),)]
    >>> list(c_order_blocks((2, 2, 3), 3))
    [(0, slice(0, 1, None)), (0, slice(1, 2, None)), (1, slice(0, 1, None)), (1, slice(1, 2, None))]
    >>> list(c_order_blocks((5,), 2))
    [(slice(0, 2, None),), (slice(2, 4, None),), (slice(4, 5, None),)]
    """
    split = len(shape)
    inner = 1
    while split > 0 and inner * shape[split - 1] <= budget:
        split -= 1
        inner *= shape[split]
    if split == 0:
        yield ()
        return
    step = max(1, budget // inner)
    axis_len = shape[split - 1]
    for outer in np.ndindex(*shape[: split - 1]):
        for start in range(0, axis_len, step):
            yield (*outer, slice(start, min(start + step, axis_len)))


def blockwise(
    view: np.ndarray,
    nkept: int,
    partial: Callable[[np.ndarray, tuple], np.ndarray],
    combine: Callable[[list[np.ndarray]], np.ndarray],
    out: np.ndarray,
    budget: int | None = None,
) -> np.ndarray:
    """Reduce the trailing axes of ``view`` (its first ``nkept`` axes are kept) block by block.

    ``partial(block, kept_index)`` reduces one block, whose kept axes come first and whose reduced
    axes are flattened last, to an array of the kept block's shape (it may add trailing axes of
    its own); ``combine`` merges the partials of one kept block. Results land in
    ``out[kept_index]``. ``budget`` defaults to the module's :data:`BLOCK_ELEMENTS`, read at call
    time (so tests can make blocks small).
    """
    if budget is None:
        budget = BLOCK_ELEMENTS
    kept_shape = view.shape[:nkept]
    if math.prod(kept_shape) == 0:  # no output: no block to read (the reduced axes may be huge)
        return out
    reduced_shape = view.shape[nkept:]
    reduced_budget = min(math.prod(reduced_shape), budget)
    kept_budget = max(1, budget // max(reduced_budget, 1))
    for kept_index in c_order_blocks(kept_shape, kept_budget):
        kept_block = view[kept_index]
        nk = kept_block.ndim - len(reduced_shape)
        partials = []
        for reduced_index in c_order_blocks(reduced_shape, reduced_budget):
            block = kept_block[(slice(None),) * nk + reduced_index]
            flat = block.reshape((*kept_block.shape[:nk], math.prod(block.shape[nk:])))
            partials.append(partial(flat, kept_index))
        out[kept_index] = partials[0] if len(partials) == 1 else combine(partials)
    return out


def flat_blocks(view: np.ndarray, nkept: int, width: int = 4096,
                budget: int = 1 << 22) -> Iterator[tuple[slice, np.ndarray]] | None:
    """The 2-D (kept, reduced) blocks of ``view`` (its first ``nkept`` axes kept) when it
    flattens to 2-D without a copy with one contiguous axis, each with the slice of the flat
    kept outputs it gives; None for other layouts. For kernels that keep no temporaries:
    contiguous reduced axis (rows), about ``budget`` elements a block (whole rows, one at
    least); contiguous kept axis (an outer-axis reduction), ``width`` outputs a block (their
    accumulators stay in cache; each reduced index reads one contiguous run).

    >>> x = np.zeros((6, 4))
    >>> [(s, b.shape) for s, b in flat_blocks(np.moveaxis(x, 0, 1), 1, width=3)]
    [(slice(0, 3, None), (3, 6)), (slice(3, 4, None), (1, 6))]
    >>> [(s, b.shape) for s, b in flat_blocks(x, 1, budget=8)]
    [(slice(0, 2, None), (2, 4)), (slice(2, 4, None), (2, 4)), (slice(4, 6, None), (2, 4))]
    """
    kept = math.prod(view.shape[:nkept])
    reduced = math.prod(view.shape[nkept:])
    flat = _flat_view(view, nkept)
    if kept == 0 or flat is None:
        return None
    if reduced == 1 or flat.strides[1] == flat.itemsize:
        step = max(1, budget // max(reduced, 1))
    elif kept == 1 or flat.strides[0] == flat.itemsize:
        step = width
    else:
        return None
    return ((slice(start, min(start + step, kept)), flat[start:start + step])
            for start in range(0, kept, step))


def _flat_view(a: np.ndarray, nkept: int) -> np.ndarray | None:
    """``a`` viewed as 2-D (its first ``nkept`` axes merged, then the rest), or None where that
    needs a copy (``reshape`` would copy the whole piece only to have it thrown away; so does
    setting ``shape``, which numpy tries by reshaping)."""
    strides = (_merged_stride(a.shape[:nkept], a.strides[:nkept]),
               _merged_stride(a.shape[nkept:], a.strides[nkept:]))
    if None in strides:
        return None
    shape = (math.prod(a.shape[:nkept]), math.prod(a.shape[nkept:]))
    return np.lib.stride_tricks.as_strided(a, shape, strides)


def _merged_stride(sizes: tuple[int, ...], strides: tuple[int, ...]) -> int | None:
    """The stride of axes ``sizes`` merged into one, or None where their strides do not nest."""
    axes = [(n, stride) for n, stride in zip(sizes, strides, strict=True) if n != 1]
    for (_, outer), (n, inner) in itertools.pairwise(axes):
        if outer != n * inner:
            return None
    return axes[-1][1] if axes else 0
