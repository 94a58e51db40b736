"""Partial states of each reduction: reduce pieces of an array separately, merge, round once.

For chunked and distributed evaluation (:mod:`onnx_reduce.interop.dask_ops`): the result of
``finish(op, merge(op, concatenated partials, axes), dtype)`` equals the one-pass result of
:mod:`.reference` within the contract, whatever the pieces (one element, empty, +-inf/NaN in
some only). Three functions, one state definition per op of the registry (:data:`STATES`):

* ``partial(op, data, axes)`` -> the state of one piece, a structured numpy array of the
  piece's shape with ``axes`` kept at length 1 (so pieces' states concatenate like arrays);
* ``merge(op, states, axes)`` -> the states of pieces concatenated along ``axes``, reduced
  along them to length 1 (associative: any grouping gives the result within the contract);
* ``finish(op, state, dtype)`` -> the output values of ``dtype``, rounded once.

The states (``acc``: float64 for float16/bfloat16/float32, :data:`~.dtypes.EXTENDED` for float64,
as the reference path accumulates):

* Sum: floats ``sum`` in ``acc``; integers ``sum`` in the input dtype, wrapping.
* L2: floats ``(exp, ssq)``, the sum of squares ``ssq * 4**exp`` with ``exp`` a power-of-two
  scale (float64: from the piece's largest magnitude, so squares neither overflow nor
  underflow, and rescaling by ``4**k`` is exact; the narrower floats' squares fit float64,
  ``exp = 0``); integers six uint64 limb sums of the exact sum of squares
  (:func:`.reference.limb_sums`, exact for up to 2**32 elements per output).
* LogSumExp: floats ``(peak, tail, ties)``: the maximum, the sum of exp(x - peak) over the
  elements below it and the number equal to it, so the result is
  ``peak + log1p(tail + ties - 1)`` as in the reference; integers ``(peak, total, count)``
  with ``total`` from the exact integer gaps.
* SumSquare: L2's state finished without the root (float16/bfloat16/float32); float64
  ``(exp, head, tail)``, L2's scale with the squares exact and summed in double-double, as
  the reference path; integers Sum's state of the squares, wrapping.
* LogSum: floats ``(sum, magnitude)``, Sum's state and the sum of magnitudes that bounds its
  error, finished with the log; integers the exact sum as 32-bit half sums
  (:func:`.reference.half_sums`), finished with ``floor(log S)`` (``ValueError`` for
  ``S <= 0``).

Float ReduceLogSumExp outputs that nearly cancel the maximum, integer ones whose ``f`` lies
within rounding of an integer, and ReduceLogSum outputs near 1 or of a cancelling sum, are not
vouched for by any fixed precision: :func:`suspects` flags them from the merged state (given
the merge :class:`Tree`) and :func:`refine` recomputes them exactly from their input slices
(:mod:`.exact_lse`, :mod:`.exact_integer_lse`, :mod:`.exact_log_sum`).

>>> x = np.array([[800.0, 1.0, 800.0, 2.0]])
>>> pieces = [partial("ReduceLogSumExp", piece, (1,)) for piece in (x[:, :2], x[:, 2:])]
>>> state = merge("ReduceLogSumExp", np.concatenate(pieces, axis=1), (1,))
>>> finish("ReduceLogSumExp", state, x.dtype)
array([[800.69314718]])
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..spec.dtypes import accumulator, is_float
from . import blocks, exact_lse
from .blocks import blockwise
from .dispatch import state_rows
from .exact_integer_lse import near_integer
from .exact_log_sum import log_sum_suspects, refine_log_sum, sum_bound
from .exact_lse import (
    SAFETY,
    dd_sums,
    fast_bound,
    reference_bound,
    refine_log_sum_exp,
    threshold,
    two_prod,
)
from .reference import (
    floor_logs,
    half_sums,
    integer_log_sum_exp_result,
    limb_roots,
    limb_sums,
    refine_integer_log_sum_exp,
)
from .rounding import round_to

Axes = tuple[int, ...]

#: Default number of states one merge takes (the chunked path's ``split_every``).
SPLIT_EVERY = 16
#: The scale exponent of an L2 state holding only zeros: below any real scale, so merging
#: it rescales its zero sum and leaves the others exact.
ZERO_SCALE = -(1 << 20)


@dataclass(frozen=True)
class Tree:
    """How a float output was merged: ``n`` elements reduced, each term through at most
    ``merges`` merges of at most ``group`` states (what its error bound depends on)."""

    n: int
    merges: int
    group: int


@dataclass(frozen=True)
class StateOps:
    """One op's state: its structured dtype for an input dtype, the state of each row of a
    block (reduced axis last), the merge and the finish; for ops whose finished float outputs
    a fixed precision cannot always vouch for, ``suspects(state, values, dtype, tree)`` (flat
    mask of the outputs to recompute) and ``refine(rows, nkept, values, mask)`` (recompute
    them in place from their input slices)."""

    state_dtype: Callable[[np.dtype], np.dtype]
    rows: Callable[[np.ndarray, np.ndarray], None]
    merge: Callable[[np.ndarray, Axes], np.ndarray]
    finish: Callable[[np.ndarray, np.dtype], np.ndarray]
    suspects: Callable[[np.ndarray, np.ndarray, np.dtype, Tree], np.ndarray] | None = None
    refine: Callable[[np.ndarray, int, np.ndarray, np.ndarray], None] | None = None
    #: Integer outputs may need it too (integer ReduceLogSumExp near an integer f).
    refines_integers: bool = False


def partial(op: str, data: np.ndarray, axes: Axes) -> np.ndarray:
    """The state of ``data`` reduced over ``axes`` (normalized, non-negative), kept at length 1.

    ``data`` must be in the machine's byte order. Walked in blocks of
    :data:`.blocks.BLOCK_ELEMENTS` (the temporaries stay in cache), merged in C order; or,
    where the compiled kernels of :mod:`.fast.state_rows` serve (float inputs), in place in
    the large blocks of :func:`.blocks.flat_blocks` when the piece has a contiguous axis."""
    ops = STATES[op]
    axes = tuple(axes)
    view = np.moveaxis(data, axes, range(data.ndim - len(axes), data.ndim))
    nkept = data.ndim - len(axes)
    out = np.empty(view.shape[:nkept], ops.state_dtype(data.dtype))
    compiled = state_rows(op, data.dtype)

    def block_state(block: np.ndarray, _: tuple) -> np.ndarray:
        state = np.empty(block.shape[:-1], out.dtype)
        if compiled is None:
            ops.rows(block, state)
        else:
            compiled(block, state, ops.rows)
        return state

    def merged(pieces: list[np.ndarray]) -> np.ndarray:
        return ops.merge(np.stack(pieces), (0,))[0]

    flat_blocks = None if compiled is None else blocks.flat_blocks(view, nkept)
    if 0 in view.shape[nkept:]:  # an empty piece: the states of no elements
        ops.rows(np.empty((*out.shape, 0), data.dtype), out)
    elif flat_blocks is not None:  # compiled, in place, in large blocks
        flat = out.reshape(-1)
        for where, block in flat_blocks:
            compiled(block, flat[where], ops.rows)
    else:
        blockwise(view, nkept, block_state, merged, out)
    return out.reshape(_kept_shape(data, axes))


def merge(op: str, states: np.ndarray, axes: Axes) -> np.ndarray:
    """``states`` (partials concatenated along ``axes``) merged into one per output."""
    return STATES[op].merge(states, tuple(axes))


def finish(op: str, state: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """The outputs of ``dtype`` from merged ``state``: one rounding."""
    return STATES[op].finish(state, np.dtype(dtype))


@functools.lru_cache(maxsize=256)
def state_dtype(op: str, dtype: np.dtype) -> np.dtype:
    """The structured dtype of ``op``'s states for inputs of ``dtype`` (cached: building a
    structured dtype costs ~2 us, a sizeable part of a small array's call)."""
    return STATES[op].state_dtype(np.dtype(dtype))


def refines(op: str, dtype: np.dtype) -> bool:
    """Whether finished outputs of ``op`` for inputs of ``dtype`` may need recomputation
    (:func:`suspects`, :func:`refine`): ReduceLogSumExp and float ReduceLogSum."""
    ops = STATES[op]
    return ops.suspects is not None and (is_float(np.dtype(dtype)) or ops.refines_integers)


def suspects(op: str, state: np.ndarray, values: np.ndarray, dtype: np.dtype,
             tree: Tree) -> np.ndarray:
    """Flat mask of the outputs ``values`` (finished from the merged ``state``) that may be
    off by more than the contract, so must be recomputed from their input slices."""
    if not refines(op, dtype):
        return np.zeros(values.size, bool)
    return STATES[op].suspects(state, values, np.dtype(dtype), tree)


def refine(op: str, rows: np.ndarray, values: np.ndarray) -> None:
    """Recompute ``values`` (flagged outputs, one per row) in place, exactly, from ``rows``
    (2-D: each output's input slice)."""
    STATES[op].refine(rows, 1, values, np.ones(values.size, bool))


def log_sum_exp_limit(dtype: np.dtype, n: int, merges: int, group: int) -> float:
    """The magnitude at and under which a finished float ReduceLogSumExp output of ``dtype``
    (``n`` elements reduced, each term through at most ``merges`` merges of at most ``group``
    states) may be off by more than the contract, so must be recomputed from its data.

    The bound of the one-pass reference (float64: or of the compiled rows, whose terms are
    the fast kernels' :func:`.exact_lse.fast_bound`, if larger) plus, per merge, the rescaling
    exp (4 ulp), its product and the shift's rounding (2 ulp) and the sum of ``group``
    states, times 2."""
    absolute, relative = reference_bound(np.dtype(dtype), n)
    if np.dtype(dtype) == np.float64:
        absolute = max(absolute, fast_bound(np.dtype(dtype), n)[0])
    if n > 1:
        wide = float(np.finfo(accumulator(dtype)).eps) / 2
        absolute += 2.0 * merges * (6 + group) * wide
    return threshold(np.dtype(dtype), (absolute, relative))


def log_sum_bound(dtype: np.dtype, tree: Tree) -> tuple[float, float]:
    """(gamma, v): a merged float ReduceLogSum sum is within ``gamma * sum|x|`` of the exact
    sum; the reference path's bound plus ``log2 n`` roundings (the halving passes over strided
    pieces) and ``group`` per merge, with the same safety factor."""
    gamma, v = sum_bound(np.dtype(dtype), tree.n)
    if tree.n > 1:
        gamma += SAFETY * v * (math.log2(tree.n) + tree.merges * tree.group)
    return gamma, v


def chunks_tree(n: int, nblocks: int, chunk: int, group: int) -> Tree:
    """The merge tree of outputs reducing ``n`` elements in ``nblocks`` pieces of at most
    ``chunk`` elements each, merged in groups of ``group`` (each piece merges its blocks of
    :data:`.blocks.BLOCK_ELEMENTS` too)."""
    widest = max(group, math.ceil(chunk / blocks.BLOCK_ELEMENTS))
    return Tree(n, merges_along(nblocks, group), widest)


def merges_along(nblocks: int, group: int) -> int:
    """How many merges a term goes through when ``nblocks`` pieces are merged in groups of
    ``group`` (the depth of the tree, plus the merge of the blocks inside a piece)."""
    return max(1, math.ceil(math.log(max(nblocks, 1), max(group, 2)) - 1e-9)) + 1


# ----------------------------------------------------------------------------- helpers


def _kept_shape(data: np.ndarray, axes: Axes) -> tuple[int, ...]:
    return tuple(1 if i in axes else n for i, n in enumerate(data.shape))


def _new(like: np.ndarray, axes: Axes) -> np.ndarray:
    return np.empty(_kept_shape(like, axes), like.dtype)


def _wide(block: np.ndarray, acc: np.dtype) -> np.ndarray:
    """A copy of ``block`` in ``acc``, in the block's own memory order (a copy into another
    order reads a column block at a few hundred MB/s)."""
    return block.astype(acc, order="K")


def _row_sums(terms: np.ndarray) -> np.ndarray:
    """Pairwise sums along the last axis (at most 2 log2(n) roundings per term): numpy's own
    on a contiguous axis; halving passes over contiguous halves on a strided one (where
    numpy adds term by term, n roundings)."""
    if terms.shape[-1] <= 8 or terms.strides[-1] == terms.itemsize:
        return np.add.reduce(terms, axis=-1)
    while terms.shape[-1] > 1:
        half = terms.shape[-1] // 2
        summed = terms[..., :half] + terms[..., half:2 * half]
        if terms.shape[-1] % 2:
            summed[..., 0] += terms[..., -1]
        terms = summed
    return terms[..., 0]


# ----------------------------------------------------------------------------- ReduceSum


def _sum_dtype(dtype: np.dtype) -> np.dtype:
    return np.dtype([("sum", accumulator(dtype) if is_float(dtype) else dtype)])


def _sum_rows(block: np.ndarray, state: np.ndarray) -> None:
    acc = state.dtype["sum"]
    if not is_float(block.dtype):
        state["sum"] = np.add.reduce(block, axis=-1, dtype=acc)
        return
    with np.errstate(invalid="ignore", over="ignore"):  # inf + -inf is NaN, as IEEE says
        state["sum"] = _row_sums(_wide(block, acc))


def _sum_merge(states: np.ndarray, axes: Axes) -> np.ndarray:
    merged = _new(states, axes)
    with np.errstate(invalid="ignore", over="ignore"):
        merged["sum"] = np.add.reduce(states["sum"], axis=axes, keepdims=True,
                                      dtype=states.dtype["sum"])
    return merged


def _sum_finish(state: np.ndarray, dtype: np.dtype) -> np.ndarray:
    values = state["sum"]
    return round_to(values, dtype) if is_float(dtype) else values.astype(dtype)


# ----------------------------------------------------------------------------- ReduceL2


def _l2_dtype(dtype: np.dtype) -> np.dtype:
    if not is_float(dtype):
        return np.dtype([("limbs", np.uint64, (6,))])
    return np.dtype([("exp", np.int32), ("ssq", accumulator(dtype))])


def _l2_rows(block: np.ndarray, state: np.ndarray) -> None:
    if not is_float(block.dtype):
        state["limbs"] = limb_sums(block)
        return
    wide = _wide(block, state.dtype["ssq"])
    if wide.dtype == np.float64:  # float16/bfloat16/float32: squares fit float64, no scaling
        state["exp"] = 0
        state["ssq"] = _row_sums(np.square(wide, out=wide))
        return
    scale = _scales(wide)
    scaled = np.ldexp(wide, -scale[..., None], out=wide)
    state["exp"] = scale
    state["ssq"] = _row_sums(np.square(scaled, out=scaled))


def _scales(wide: np.ndarray) -> np.ndarray:
    """Per row (last axis), the binary exponent of the largest magnitude: 0 where it is not
    finite, :data:`ZERO_SCALE` where it is 0 (scaled by 2**-exp, squares are at most 1)."""
    magnitude = np.abs(wide).max(axis=-1, initial=0.0)
    finite = np.isfinite(magnitude)
    scale = np.frexp(np.where(finite, magnitude, 1.0))[1]
    return np.where(magnitude == 0, ZERO_SCALE, np.where(finite, scale, 0))


def _l2_merge(states: np.ndarray, axes: Axes) -> np.ndarray:
    merged = _new(states, axes)
    if "limbs" in states.dtype.names:
        merged["limbs"] = np.add.reduce(states["limbs"], axis=axes, keepdims=True)
        return merged
    exp = states["exp"].max(axis=axes, keepdims=True)
    with np.errstate(under="ignore"):  # a piece 2**-1000 below the largest adds nothing
        rescaled = np.ldexp(states["ssq"], 2 * (states["exp"] - exp))
    merged["exp"] = exp
    with np.errstate(invalid="ignore"):
        merged["ssq"] = np.add.reduce(rescaled, axis=axes, keepdims=True)
    return merged


def _l2_finish(state: np.ndarray, dtype: np.dtype) -> np.ndarray:
    if not is_float(dtype):
        return limb_roots(state["limbs"], dtype)
    with np.errstate(under="ignore"):
        return round_to(np.ldexp(np.sqrt(state["ssq"]), state["exp"]), dtype)


# ----------------------------------------------------------------------------- ReduceLogSumExp


def _lse_dtype(dtype: np.dtype) -> np.dtype:
    if not is_float(dtype):
        return np.dtype([("peak", dtype), ("total", np.float64), ("count", np.int64)])
    acc = accumulator(dtype)
    return np.dtype([("peak", acc), ("tail", acc), ("ties", acc)])


def _lse_rows(block: np.ndarray, state: np.ndarray) -> None:
    if not is_float(block.dtype):
        _integer_lse_rows(block, state)
        return
    wide = _wide(block, state.dtype["peak"])
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        peak = wide.max(axis=-1, initial=-np.inf)
        shift = np.where(np.isfinite(peak), peak, 0)
        centred = np.subtract(wide, shift[..., None], out=wide)
        below = centred < 0
        terms = np.exp(np.minimum(centred, 0, out=centred), out=centred)
        state["tail"] = _row_sums(np.multiply(terms, below, out=terms))  # the peak's: 0
        state["ties"] = np.add.reduce(~below, axis=-1)  # elements equal to a finite peak
    state["peak"] = peak


def _integer_lse_rows(block: np.ndarray, state: np.ndarray) -> None:
    peak = block.max(axis=-1, initial=np.iinfo(block.dtype).min)
    gaps = peak[..., None].astype(np.uint64) - block.astype(np.uint64)  # exact, modulo 2**64
    state["peak"] = peak
    state["total"] = np.add.reduce(np.exp(-gaps.astype(np.float64)), axis=-1)
    state["count"] = block.shape[-1]


def _lse_merge(states: np.ndarray, axes: Axes) -> np.ndarray:
    merged = _new(states, axes)
    peak = states["peak"].max(axis=axes, keepdims=True)
    merged["peak"] = peak
    if "count" in states.dtype.names:
        gaps = peak.astype(np.uint64) - states["peak"].astype(np.uint64)  # exact, mod 2**64
        weighted = states["total"] * np.exp(-gaps.astype(np.float64))
        merged["total"] = np.add.reduce(weighted, axis=axes, keepdims=True)
        merged["count"] = np.add.reduce(states["count"], axis=axes, keepdims=True)
        return merged
    with np.errstate(invalid="ignore", over="ignore"):  # non-finite peaks: not used
        top = states["peak"] == peak
        weight = np.exp(np.where(top, 0, states["peak"] - np.where(np.isfinite(peak), peak, 0)))
        below = (states["tail"] + states["ties"]) * weight
        merged["tail"] = np.add.reduce(np.where(top, states["tail"], below), axis=axes,
                                       keepdims=True)
        merged["ties"] = np.add.reduce(np.where(top, states["ties"], 0), axis=axes,
                                       keepdims=True)
    return merged


def _lse_finish(state: np.ndarray, dtype: np.dtype) -> np.ndarray:
    peak = state["peak"]
    if not is_float(dtype):
        return integer_log_sum_exp_result(peak, state["total"], state["count"])
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        total = np.log1p(state["tail"] + (state["ties"] - 1))
        result = np.where(np.isfinite(peak), peak + total, peak)
    return round_to(result, dtype)


# ----------------------------------------------------------------------------- ReduceSumSquare
# Integers: Sum's state of the wrapped squares. float16/bfloat16/float32: L2's state (exact
# float64 squares, exp 0) finished without the root. float64: L2's power-of-two scale with the
# scaled squares exact (Dekker) and summed in double-double, as the reference path.


def _sum_square_dtype(dtype: np.dtype) -> np.dtype:
    if not is_float(dtype):
        return _sum_dtype(dtype)
    if dtype == np.float64:
        return np.dtype([("exp", np.int32), ("head", np.float64), ("tail", np.float64)])
    return _l2_dtype(dtype)


def _sum_square_rows(block: np.ndarray, state: np.ndarray) -> None:
    if "sum" in state.dtype.names:
        state["sum"] = np.add.reduce(np.square(block), axis=-1, dtype=block.dtype)  # wraps
    elif "ssq" in state.dtype.names:
        _l2_rows(block, state)
    else:
        _dd_square_rows(block, state)


def _dd_square_rows(block: np.ndarray, state: np.ndarray) -> None:
    """float64 rows: scaled by 2**-exp (squares at most 1), squared exactly, summed in
    double-double; a row holding inf or NaN keeps its plain sum (inf or NaN) in ``head``."""
    wide = _wide(block, np.dtype(np.float64))
    scale = _scales(wide)
    state["exp"] = scale
    if wide.shape[-1] == 0:
        state["head"] = state["tail"] = 0.0
        return
    with np.errstate(invalid="ignore", over="ignore", under="ignore"):
        scaled = np.ldexp(wide, -scale[..., None], out=wide)
        high, low = two_prod(scaled, scaled)
        _dd_store(state, high, low)


def _dd_store(state: np.ndarray, high: np.ndarray, low: np.ndarray) -> None:
    """``state``'s (head, tail): the double-double sums of (high, low) along the last axis,
    or the plain sum of ``high`` where it is not finite (``high`` is a scaled square or a
    rescaled head: a finite sum stays finite)."""
    head, tail, plain = dd_sums(high, low)
    bad = ~np.isfinite(plain)
    state["head"] = np.where(bad, plain, head)
    state["tail"] = np.where(bad, 0.0, tail)


def _sum_square_merge(states: np.ndarray, axes: Axes) -> np.ndarray:
    if "sum" in states.dtype.names:
        with np.errstate(over="ignore"):
            return _sum_merge(states, axes)
    if "ssq" in states.dtype.names:
        return _l2_merge(states, axes)
    merged = _new(states, axes)
    exp = states["exp"].max(axis=axes, keepdims=True)
    merged["exp"] = exp
    last = range(states.ndim - len(axes), states.ndim)
    with np.errstate(invalid="ignore", under="ignore"):  # 2**-1000 below the largest: lost
        parts = [np.moveaxis(np.ldexp(states[name], 2 * (states["exp"] - exp)), axes, last)
                 for name in ("head", "tail")]
        count = math.prod(states.shape[a] for a in axes)  # not -1: there may be no outputs
        high, low = (part.reshape((*merged.shape, count)) for part in parts)
        _dd_store(merged, high, low)
    return merged


def _sum_square_finish(state: np.ndarray, dtype: np.dtype) -> np.ndarray:
    if "sum" in state.dtype.names:
        return _sum_finish(state, dtype)
    if "ssq" in state.dtype.names:
        return round_to(state["ssq"], dtype)  # exp is 0: the narrow floats are not scaled
    head = state["head"]
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        total = np.ldexp(head + state["tail"], 2 * state["exp"].astype(np.int64))
    return np.where(np.isfinite(head), total, head)


# ----------------------------------------------------------------------------- ReduceLogSum
# Sum's state plus the sum of magnitudes (which bounds its error), finished with the log;
# integers: the exact sum as 32-bit half sums, finished with the exact floor(log S).


def _log_sum_dtype(dtype: np.dtype) -> np.dtype:
    if not is_float(dtype):
        return np.dtype([("halves", np.uint64, (2,))])
    acc = accumulator(dtype)
    return np.dtype([("sum", acc), ("magnitude", acc)])


def _log_sum_rows(block: np.ndarray, state: np.ndarray) -> None:
    if not is_float(block.dtype):
        state["halves"] = half_sums(block)
        return
    wide = _wide(block, state.dtype["sum"])  # one copy for both sums (a second costs 20x)
    with np.errstate(invalid="ignore", over="ignore"):  # inf + -inf is NaN, as IEEE says
        state["sum"] = _row_sums(wide)
        state["magnitude"] = _row_sums(np.abs(wide, out=wide))


def _log_sum_merge(states: np.ndarray, axes: Axes) -> np.ndarray:
    merged = _new(states, axes)
    with np.errstate(invalid="ignore", over="ignore"):
        for name in states.dtype.names:
            merged[name] = np.add.reduce(states[name], axis=axes, keepdims=True,
                                         dtype=states.dtype[name].base)
    return merged


def _log_sum_finish(state: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Floats: log of the merged sum, rounded once; integers: ``floor(log S)``, ``ValueError``
    for ``S <= 0`` (:func:`.reference.floor_logs`)."""
    if not is_float(dtype):
        return floor_logs(state["halves"], dtype)
    sums = state["sum"]
    with np.errstate(invalid="ignore", divide="ignore"):  # a negative sum: NaN, positive as
        return round_to(np.log(np.where(sums < 0, np.nan, sums)), dtype)  # the in-memory one


def _log_sum_suspects(state: np.ndarray, values: np.ndarray, dtype: np.dtype,
                      tree: Tree) -> np.ndarray:
    sums = np.stack([state["sum"], state["magnitude"]], axis=-1)
    return log_sum_suspects(sums, values, dtype, tree.n, log_sum_bound(dtype, tree))


def _lse_suspects(state: np.ndarray, values: np.ndarray, dtype: np.dtype,
                  tree: Tree) -> np.ndarray:
    if not is_float(dtype):  # f within rounding of an integer (merges add a rounding each)
        return near_integer(state["total"], state["count"] + tree.merges * tree.group).ravel()
    limit = log_sum_exp_limit(dtype, tree.n, tree.merges, tree.group)
    return exact_lse.suspects(values, dtype, limit)


def _lse_refine(rows: np.ndarray, nkept: int, values: np.ndarray, mask: np.ndarray) -> None:
    """:func:`.exact_lse.refine_log_sum_exp`, integers
    :func:`.reference.refine_integer_log_sum_exp`."""
    refine = refine_log_sum_exp if is_float(rows.dtype) else refine_integer_log_sum_exp
    refine(rows, nkept, values, mask)


STATES: dict[str, StateOps] = {
    "ReduceSum": StateOps(_sum_dtype, _sum_rows, _sum_merge, _sum_finish),
    "ReduceL2": StateOps(_l2_dtype, _l2_rows, _l2_merge, _l2_finish),
    "ReduceLogSumExp": StateOps(_lse_dtype, _lse_rows, _lse_merge, _lse_finish,
                                _lse_suspects, _lse_refine, refines_integers=True),
    "ReduceSumSquare": StateOps(_sum_square_dtype, _sum_square_rows, _sum_square_merge,
                                _sum_square_finish),
    "ReduceLogSum": StateOps(_log_sum_dtype, _log_sum_rows, _log_sum_merge, _log_sum_finish,
                             _log_sum_suspects, refine_log_sum),
}
