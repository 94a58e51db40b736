"""The functions on dask arrays: lazy, chunk by chunk, exact under any chunking.

``reduce_sum(x, ...)`` on a ``dask.array.Array`` returns a ``dask.array.Array``; nothing is
computed until ``.compute()``, and the call is validated at once (the numpy path's messages).
Where every chunk holds whole reduced slices (``x.numblocks`` is 1 along the reduced axes), each
chunk goes through the in-memory path, compiled kernels included, and gives its bits.
Otherwise the graph is a ``dask.array.reduction`` over the partial states of
:mod:`onnx_reduce.kernels.states`: each chunk to its state (``chunk``), states merged in
groups of ``split_every`` (``combine``), merged and rounded once (``aggregate``).
Float ReduceLogSumExp outputs that nearly cancel their maximum, and ReduceLogSum outputs near
1 or of a cancelling sum, are then recomputed from their own input slices (a second, lazy step
that finishes the merged states and reads only those slices; see docs/dask.md). Any
scheduler: threads, processes, ``distributed.Client``.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from ..functions import plan_for, reduce_array, version_label
from ..kernels import states
from ..pipeline import native
from ..spec import native_dtype, refuse_masked

#: Default number of states merged by one task (dask's own default is 4).
SPLIT_EVERY = states.SPLIT_EVERY


def reduce(op: str, data: Any, axes, keepdims, noop, opset, split_every: int | None = None):
    """``op`` of the dask array ``data`` as a lazy dask array (the functions' front door)."""
    import dask.array as da

    refuse_masked(version_label(op, opset), getattr(data, "_meta", None))
    if any(math.isnan(size) for size in data.shape):
        raise ValueError(
            f"{version_label(op, opset)}: data has unknown chunk sizes (shape {data.shape}); "
            f"call data.compute_chunk_sizes() first")
    _, plan = plan_for(op, data.dtype, data.shape, axes, keepdims, noop, opset)
    dtype = native_dtype(data.dtype)
    run = functools.partial(reduce_array, op, axes=axes, keepdims=keepdims, noop=noop,
                            opset=opset)
    if plan.noop:  # elementwise: the numpy path block by block
        return data.map_blocks(_apply, run, dtype=dtype)
    if plan.reduced_size == 0:  # no data to read; the numpy path gives the values or error
        return da.from_array(run(np.empty(data.shape, data.dtype)))
    if all(data.numblocks[axis] == 1 for axis in plan.axes):  # each chunk holds whole slices
        kept = functools.partial(reduce_array, op, axes=axes, keepdims=True, noop=noop,
                                 opset=opset)
        return _per_chunk(data, kept, plan, dtype)
    group = split_every or SPLIT_EVERY
    refined = states.refines(op, dtype)  # the aggregate keeps the state; a step finishes it
    merged = states.state_dtype(op, dtype) if refined else dtype
    result = da.reduction(
        data, functools.partial(_chunk, op), functools.partial(_aggregate, op, dtype, refined),
        combine=functools.partial(_combine, op), axis=plan.axes, keepdims=True, dtype=merged,
        split_every=group, concatenate=True, meta=np.empty((0,) * data.ndim, merged),
    )
    if refined:
        nblocks = math.prod(data.numblocks[axis] for axis in plan.axes)
        chunk = math.prod(max(data.chunks[axis]) for axis in plan.axes)
        tree = states.chunks_tree(plan.reduced_size, nblocks, chunk, group)
        finish = functools.partial(_finish_block, op, dtype, _Source(data, plan.axes), tree)
        result = result.map_blocks(finish, dtype=dtype, meta=np.empty((0,) * data.ndim, dtype))
    if not plan.keepdims:
        result = result.squeeze(axis=plan.axes)
    return result


def _apply(block: np.ndarray, run) -> np.ndarray:
    return run(block)


def _per_chunk(data: Any, kept, plan, dtype: np.dtype) -> Any:
    """Chunks that hold whole reduced slices: each chunk is reduced by the in-memory path
    (its compiled kernels, its bits; ``kept`` keeps the reduced axes at length 1), no states
    to merge. The reduced axes are squeezed lazily after: a ``map_blocks`` that drops them
    hands each task a copy of its chunk (dask's ``concatenate3`` of one block)."""
    chunks = tuple((1,) if axis in plan.axes else sizes
                   for axis, sizes in enumerate(data.chunks))
    result = data.map_blocks(_apply, kept, dtype=dtype, chunks=chunks)
    return result if plan.keepdims else result.squeeze(axis=plan.axes)


def _chunk(op: str, block: np.ndarray, axis: tuple, keepdims: bool, computing_meta=False):
    """One chunk's state (dask's ``chunk``)."""
    if computing_meta:
        return block
    return states.partial(op, native(block), axis)


def _combine(op: str, block: np.ndarray, axis: tuple, keepdims: bool, computing_meta=False):
    """States concatenated along ``axis``, merged (dask's ``combine``)."""
    if computing_meta:
        return block
    return states.merge(op, block, axis)


def _aggregate(op: str, result_dtype: np.dtype, keep_state: bool, block: np.ndarray,
               axis: tuple, keepdims: bool, computing_meta=False):
    """The last merge and the one rounding (dask's ``aggregate``); the merged state itself
    where ``keep_state`` (:func:`_finish_block` finishes it)."""
    if computing_meta:
        like = states.state_dtype(op, result_dtype) if keep_state else result_dtype
        return np.empty((0,) * block.ndim, like)
    merged = states.merge(op, block, axis)
    return merged if keep_state else states.finish(op, merged, result_dtype)


class _Source:
    """The input array, carried into a task without becoming a dependency of it (the
    recomputation reads the few slices it needs itself, so the graph does not keep every
    chunk of the input alive until the first pass ends)."""

    def __init__(self, data: Any, axes: tuple[int, ...]) -> None:
        self.data, self.axes = data, axes

    def __dask_tokenize__(self) -> tuple:
        return self.data.name, self.axes

    def rows(self, starts: tuple[int, ...], flagged: np.ndarray, shape: tuple) -> np.ndarray:
        """The input slices of the outputs ``flagged`` (flat indices in a block of ``shape``
        at ``starts``), as rows of one array."""
        import dask

        pieces = []
        for flat in flagged.tolist():
            index = np.unravel_index(flat, shape)
            pieces.append(self.data[tuple(
                slice(None) if axis in self.axes else int(start + i)
                for axis, (start, i) in enumerate(zip(starts, index, strict=True)))].reshape(-1))
        computed = dask.compute(*pieces, scheduler="sync")
        return np.stack([native(np.asarray(row)) for row in computed])


def _finish_block(op: str, dtype: np.dtype, source: _Source, tree, state: np.ndarray,
                  block_info=None) -> np.ndarray:
    """The outputs of a block of merged states, rounded once; those a fixed precision cannot
    vouch for (:func:`.states.suspects`: ReduceLogSumExp near cancellation, ReduceLogSum near
    1 or cancelling) recomputed exactly from their own input slices, read in this task."""
    values = np.ascontiguousarray(states.finish(op, state, dtype))
    if values.size == 0 or block_info is None:
        return values
    mask = states.suspects(op, state, values, dtype, tree)
    if not mask.any():
        return values
    flagged = np.flatnonzero(mask)
    starts = tuple(start for start, _ in block_info[0]["array-location"])
    picked = values.reshape(-1)[flagged].copy()
    states.refine(op, source.rows(starts, flagged, values.shape), picked)
    values.reshape(-1)[flagged] = picked
    return values
