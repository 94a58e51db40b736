"""Compiled ReduceSumSquare and ReduceLogSum, finished from the float64 results of the
ReduceSum and ReduceL2 kernels (:mod:`.sum_l2`): no memory walks of their own.

* ReduceSumSquare of float16/bfloat16/float32: the L2 kernel's float64 root of the float64
  sum of the (exact) squares, squared and rounded once to the dtype. The root and the square
  add at most 3 2**-53 relative to the float64 sum, far below the dtype's half ulp.
* ReduceLogSum of float16/bfloat16/float32: ``log S~`` of the Sum kernel's float64 sum,
  rounded once. ``S~`` is within ``(n - 1) 2**-53 A`` of the exact sum, ``A`` the sum of
  magnitudes, which the L2 kernel bounds: ``A <= sqrt(n) L2`` (Cauchy-Schwarz). The outputs
  that bound cannot vouch for (a sum near 1 or cancelling) are recomputed exactly, as on the
  reference path (:mod:`..exact_log_sum`). inf and NaN give the log of the IEEE sum, as
  there.
* float64, both ops: the compiled partial state of :mod:`..states`, finished (double-double
  sums; SumSquare's squares scaled by a power of two and exact, so it overflows or underflows
  only where the true result does; LogSum's suspects recomputed as above), on two threads from
  THREADED_BYTES on. Rows, columns, middle axes (slabs of columns) and split axes (slabs of
  rows, added up) of a C-contiguous input take one compiled call (per thread, two from
  ONE_CALL_THREADED_BYTES on) that finishes the state without its records (rows and
  columns: the same bits). A float64 sum rounded to float64 cannot vouch for a float64 log
  within 2 ulp, whatever the bound.

Integers: the reference path (exact integer arithmetic).

>>> from onnx_reduce.spec import Request, resolve
>>> from onnx_reduce.plan import make_plan
>>> x = np.array([[3.0, 4.0], [1e-30, 1.0]], np.float32)
>>> reduce_sum_square(x, make_plan(Request(resolve("ReduceSumSquare", 18), (1,), False,
...                                        False), x.shape))
array([25.,  1.], dtype=float32)
"""

from __future__ import annotations

import math
import threading
from typing import TYPE_CHECKING

import numpy as np
from numba import njit

from ...plan import ReductionPlan
from ...plan.cache import BoundedCache
from .. import blocks, states
from ..exact_log_sum import log_sum_suspects, refine_log_sum
from ..exact_lse import SAFETY, U, float_format, tolerance_ulps
from ..reference import kept_first
from ._common import (
    memory_order_geometry,
    merged_dims,
    num_threads,
    storage_dtype,
    store,
    two_sum,
)
from ._exp import as_float64, as_int64, exp_split, log1p_from
from ._lanes import fma
from .state_rows import one_call_log_sums, one_call_sum_squares
from .sum_l2 import bind_wide, reduce_wide

if TYPE_CHECKING:
    from ..dispatch import Bound

_F64 = np.dtype(np.float64)
#: float64 inputs from this size on compute their partial states on two threads (below it the
#: second half's launch costs more than it saves: docs/kernel-design.md, "ReduceSumSquare").
THREADED_BYTES = 1 << 24
#: The same for the one-call rows and columns (:func:`_one_call`), whose second thread pays
#: off sooner (docs/kernel-design.md, "ReduceSumSquare and ReduceLogSum").
ONE_CALL_THREADED_BYTES = 1 << 22
#: float64 ReduceLogSum outputs finished at a time (:func:`_logs_of_sums`), and the fewest
#: for which :func:`_dd_logs` goes first (fewer: its call and the fallback's cost more than it
#: saves: 64 / 128 / 256 / 1024 outputs measured 0.86-0.89 / 0.93-0.98 / 1.02-1.10 /
#: 1.35-1.67x).
LOG_CHUNK = 1 << 14
DD_LOGS_MIN = 256
#: Least kept innermost run (outputs) of a middle-axis layout walked in place, slab by slab,
#: as columns; narrower runs make short column loops (rows of 2 or 3 measured 0.24-0.6x the
#: kept-first copy's rows: docs/kernel-design.md).
SLAB_MIN_WIDTH = 8
#: Split axes (reduced dims around kept ones) under ONE_CALL_THREADED_BYTES are walked in
#: place, slab by slab, when their inner rows have this many terms; shorter ones are faster
#: from the kept-first copy, whose rows are whole (rows of 16-64 measured 0.55-0.8x so).
SPLIT_MIN_ROW = 256
#: The walks of C-contiguous layouts by (shape, axes), and the merge trees by reduced size.
_ROW_WALKS: BoundedCache[tuple, tuple | None] = BoundedCache(256)
_TREES: BoundedCache[int, states.Tree] = BoundedCache(256)


def reduce_sum_square(data: np.ndarray, plan: ReductionPlan) -> np.ndarray | None:
    """ReduceSumSquare of ``data`` as ``plan`` says; None for integers and cases not served."""
    if data.dtype == _F64:
        return _float64_from_state("ReduceSumSquare", data, plan)
    roots = reduce_wide(data, plan, True)
    return None if roots is None else _squared(roots, data.dtype)


def bind_sum_square(dtype: np.dtype, plan: ReductionPlan) -> Bound | None:
    """:func:`reduce_sum_square` bound to ``dtype`` and ``plan`` (see :func:`.sum_l2.bind_sum`)."""
    if dtype == _F64:
        return _bound_state("ReduceSumSquare", plan)
    roots = bind_wide(dtype, plan, True)
    if roots is None:
        return None

    def run(data: np.ndarray) -> np.ndarray | None:
        wide = roots(data)
        return None if wide is None else _squared(wide, dtype)
    return run


def reduce_log_sum(data: np.ndarray, plan: ReductionPlan) -> np.ndarray | None:
    """ReduceLogSum of ``data`` as ``plan`` says; None for integers, empty reductions (-inf,
    or an error for integers: the reference path says which) and cases not served."""
    if plan.reduced_size == 0:
        return None
    if data.dtype == _F64:
        return _float64_from_state("ReduceLogSum", data, plan)
    total = reduce_wide(data, plan, False)
    norm = None if total is None else reduce_wide(data, plan, True)
    return None if norm is None else _logs(data, plan, total, norm)


def bind_log_sum(dtype: np.dtype, plan: ReductionPlan) -> Bound | None:
    """:func:`reduce_log_sum` bound to ``dtype`` and ``plan``."""
    if plan.reduced_size == 0:
        return None
    if dtype == _F64:
        return _bound_state("ReduceLogSum", plan)
    sums, norms = bind_wide(dtype, plan, False), bind_wide(dtype, plan, True)
    if sums is None or norms is None:
        return None

    def run(data: np.ndarray) -> np.ndarray | None:
        total = sums(data)
        norm = None if total is None else norms(data)
        return None if norm is None else _logs(data, plan, total, norm)
    return run


def _bound_state(op: str, plan: ReductionPlan) -> Bound | None:
    """float64 ``op`` by its partial state, for arrays planned by ``plan``."""
    if plan.noop or plan.reduced_size == 0:
        return None
    return lambda data: _float64_from_state(op, data, plan)


def _squared(roots: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """The float64 roots squared, rounded once to ``dtype``."""
    out = np.empty(roots.shape, storage_dtype(dtype))
    _store_squares(roots.reshape(-1), out.reshape(-1))
    return out.view(dtype)


@njit(cache=True, nogil=True)
def _store_squares(roots, out):  # pragma: no cover - compiled
    """``out[i]`` = ``roots[i]**2`` rounded once to ``out``'s storage dtype."""
    for i in range(roots.size):
        v = roots[i]
        store(out, i, v * v)


def _float64_from_state(op: str, data: np.ndarray, plan: ReductionPlan) -> np.ndarray | None:
    """float64 ``op`` from its compiled partial state (:func:`..states.partial`), finished,
    the outputs it cannot vouch for recomputed as a one-chunk dask reduction does."""
    if plan.noop or plan.reduced_size == 0 or not data.dtype.isnative:
        return None
    values = _one_call(op, data, plan)
    if values is None:
        state = _partial_state(op, data, plan.axes)
        values = np.ascontiguousarray(states.finish(op, state, data.dtype))
        if states.refines(op, data.dtype):
            _refine(data, plan, values, states.suspects(op, state, values, data.dtype,
                                                        _one_chunk(plan)))
    return values.reshape(plan.output_shape)


def _one_chunk(plan: ReductionPlan) -> states.Tree:
    """The merge tree of one chunk, as dask counts it (kept by reduced size: a small call's
    Python steps are most of its time)."""
    n = plan.reduced_size
    tree = _TREES.get(n)
    return tree if tree is not None else _TREES.put(n, states.chunks_tree(n, 1, n,
                                                                          states.SPLIT_EVERY))


def _refine(data: np.ndarray, plan: ReductionPlan, values: np.ndarray,
            mask: np.ndarray | None) -> None:
    """The outputs ``mask`` flags recomputed exactly in ``values`` (flat; None: none)."""
    if mask is not None and mask.any():
        view, nkept = kept_first(data, plan)
        refine_log_sum(view, nkept, values, mask)


def _one_call(op: str, data: np.ndarray, plan: ReductionPlan) -> np.ndarray | None:
    """:func:`_float64_from_state`'s values (rows, columns and copies: the same bits; middle
    axes: each slab's as columns; split axes: the slabs' sums added up) without the general
    path's state records and steps in Python, for the inputs :func:`_walk_of` walks
    (C-contiguous), its outputs in two halves on two threads from ONE_CALL_THREADED_BYTES on;
    None for other inputs, and where a slice holds inf or NaN."""
    walk = _walk_of(data, plan)
    if walk is None:
        return None
    tree = _one_chunk(plan)
    if data.nbytes < ONE_CALL_THREADED_BYTES or _outputs(walk) < 2 or num_threads() < 2:
        found = _values(op, walk, tree)
    else:
        first, second = _in_two_threads(_values, [(op, half, tree) for half in _halves(walk)])
        found = None if first is None or second is None else _joined(first, second)
    if found is None:
        return None
    values, mask = found
    _refine(data, plan, values, mask)
    return values


def _joined(first: tuple, second: tuple) -> tuple[np.ndarray, np.ndarray | None]:
    """(values, suspects) of two halves as one; the suspects None when neither has one."""
    values = np.concatenate([first[0], second[0]])
    if first[1] is None and second[1] is None:
        return values, None
    return values, np.concatenate([np.zeros(part[0].size, np.bool_) if part[1] is None
                                   else part[1] for part in (first, second)])


def _values(op: str, walk: tuple, tree: states.Tree
            ) -> tuple[np.ndarray, np.ndarray | None] | None:
    """(values, suspects: None for SumSquare, which has none) of float64 ``op`` over the rows
    ``walk`` (:func:`_walk_of`'s form; :func:`.state_rows.one_call_sum_squares`,
    :func:`.state_rows.one_call_log_sums`)."""
    rows, slabs = walk
    if op == "ReduceSumSquare":
        values = one_call_sum_squares(rows, slabs)
        return None if values is None else (values, None)
    sums = one_call_log_sums(rows, slabs)
    if sums is None:
        return None
    return _logs_of_sums(*sums, states.state_dtype(op, _F64)["sum"], tree)


def _logs_of_sums(head: np.ndarray, tail: np.ndarray, acc: np.dtype, tree: states.Tree
                  ) -> tuple[np.ndarray, np.ndarray | None]:
    """(values, suspects or None) of float64 ReduceLogSum from its double-double sums and sums of
    magnitudes (:func:`.state_rows.one_call_log_sums`): the state's finish (the log of the
    sum rounded into ``acc``, rounded once to float64; :func:`_dd_logs` where it certainly
    gives the same value) and its suspects test, LOG_CHUNK outputs at a time."""
    m = head.size // 2
    values, mask = np.empty(m), None
    unsure = np.empty(min(m, LOG_CHUNK), np.bool_)
    for a in range(0, m, LOG_CHUNK):
        b = min(a + LOG_CHUNK, m)
        total = None
        left = b - a if b - a < DD_LOGS_MIN else _dd_logs(head[a:b], tail[a:b], values[a:b],
                                                            unsure)
        with np.errstate(invalid="ignore", divide="ignore"):
            if 2 * left > b - a:  # most: the finish on the whole chunk, read in order
                total = np.add(head[a:b], tail[a:b], dtype=acc)
                values[a:b] = np.log(total)
            elif left:
                rest = a + np.flatnonzero(unsure[:b - a])
                values[rest] = np.log(np.add(head[rest], tail[rest], dtype=acc))
        part = _log_sum_suspects(head[a:b], tail[a:b], head[m + a:m + b], tail[m + a:m + b],
                                 values[a:b], tree, acc, total)
        if part is not None:
            mask = np.zeros(m, np.bool_) if mask is None else mask
            mask[a:b] = part
    return values, mask


#: Bounds on how far from ``log S`` :func:`_dd_logs`'s double-double estimate is (absolute:
#: the Newton step's error is :func:`._exp.exp_split`'s, under 2**-55 relative; measured
#: 2**-56.1 at most on 16 M sums) and the state's finish is (``np.log`` of ``S`` rounded into
#: ``long double``, 2**-64 relative, by glibc's x87 ``logl``: taken as 4 of its ulps relative
#: to the log, and 2**-63 absolute).
_DD_LOG_ERROR = 2.0**-54
_LD_LOG_ERROR = 2.0**-61
_LD_LOG_FLOOR = 2.0**-63


@njit(cache=True, nogil=True)
def _dd_logs(head, tail, values, unsure):  # pragma: no cover - compiled
    """``values[i]`` = ``log(head[i] + tail[i])`` rounded to float64 where that is certainly
    the state's finish (the log of the sum rounded into ``long double``, rounded to float64):
    a double-double estimate ``y`` (``log1p`` of ``head - 1``, then one Newton step on the
    two-part ``exp``) whose error bounds, with the finish's, keep both on the same side of
    every float64 rounding boundary. ``unsure[i]`` elsewhere: sums outside [e, 2**1000) (NaN
    and inf too: a log under 1 is too near a boundary for the bounds) or ``y`` too near a
    boundary (by _MARGIN); returns how many there are. ~5 ns an output, against ~40 for the
    finish (the sum's rounding into ``long double`` and its log)."""
    left = 0
    for i in range(head.size):
        h, t = head[i], tail[i]
        if not (h >= math.e and h < 2.0**1000):  # a log under 1 is never sure (nor NaN)
            unsure[i] = True
            left += 1
            continue
        y0 = log1p_from(h - 1.0)
        eh, el = exp_split(-y0)
        p = h * eh
        pe = fma(h, eh, -p)
        c = (p - 1.0) + (pe + (h * el + t * eh))  # S exp(-y0) - 1; p - 1 exact (Sterbenz)
        yh, yl = two_sum(y0, c)
        r = yh + yl
        off = abs((yh - r) + yl)
        below = _spacing_below(as_int64(r))[0] - 1  # half the spacing below r, biased
        half = as_float64(max(below, 1) << 52)
        bound = off + _DD_LOG_ERROR + _LD_LOG_ERROR * abs(r) + _LD_LOG_FLOOR
        sure = below >= 1 and bound < half * (1.0 - _MARGIN)
        values[i] = r
        unsure[i] = not sure
        left += not sure
    return left


def _outputs(walk: tuple) -> int:
    """How many outputs the rows ``walk`` (:func:`_walk_of`'s form) have."""
    (_, m, _, _, _), (count, _, kept) = walk
    return m * count if kept else m


def _halves(walk: tuple) -> tuple[tuple, tuple]:
    """The rows ``walk`` (:func:`_walk_of`'s form) as two walks of half its outputs each:
    half the kept slabs, or half of each slab's rows."""
    (base, m, n, rs, cs), (count, stride, kept) = walk
    if count > 1 and kept:
        first = (count + 1) // 2
        return (((base, m, n, rs, cs), (first, stride, kept)),
                ((base[first * stride:], m, n, rs, cs), (count - first, stride, kept)))
    first = (m + 1) // 2
    return (((base, first, n, rs, cs), (count, stride, kept)),
            ((base[first * rs:], m - first, n, rs, cs), (count, stride, kept)))


def _in_two_threads(function, calls) -> list:
    """``function(*args)`` for each of the two ``calls``, the second on a thread of its own
    (the compiled kernels and numpy's loops release the GIL); an exception in either is
    raised here."""
    first, second = calls
    result: list = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            result.append(function(*second))
        except BaseException as exc:  # re-raised on the calling thread
            failure.append(exc)

    worker = threading.Thread(target=run, name="onnx-reduce-state", daemon=True)
    worker.start()
    try:
        head = function(*first)
    finally:
        worker.join()
    if failure:
        raise failure[0]
    return [head, result[0]]


def _log_sum_suspects(head: np.ndarray, tail: np.ndarray, magnitude_head: np.ndarray,
                      magnitude_tail: np.ndarray, values: np.ndarray, tree: states.Tree,
                      acc: np.dtype, total: np.ndarray | None = None) -> np.ndarray | None:
    """:func:`..states.suspects` of float64 ReduceLogSum's ``values`` from its double-double
    sums and sums of magnitudes (None: none): the outputs that :func:`_clear_logs` cannot
    clear by a wide margin get the state path's test itself (on the sums rounded into the
    accumulator ``acc``: ``total``, when the caller has them)."""
    gamma, v = states.log_sum_bound(_F64, tree)
    clear = np.empty(values.size, np.bool_)
    if not _clear_logs(head, magnitude_head, values, gamma, v, tolerance_ulps(_F64) - 0.5,
                       clear):
        return None
    mask = np.zeros(values.size, np.bool_)
    rest = np.flatnonzero(~clear)
    if rest.size:
        magnitude = np.add(magnitude_head[rest], magnitude_tail[rest], dtype=acc)
        sums = np.add(head[rest], tail[rest], dtype=acc) if total is None else total[rest]
        sums = np.stack([sums, magnitude], axis=-1)
        mask[rest] = log_sum_suspects(sums, values[rest], _F64, tree.n, (gamma, v))
    return mask


#: Relative margin by which :func:`_clear_logs` clears a bound: far above the float64
#: rounding of its own test against the accumulator's.
_MARGIN = 2.0**-30
#: The fraction bits of a float64.
_FRACTION = (1 << 52) - 1


@njit(cache=True, nogil=True, inline="always")
def _spacing_below(bits):  # pragma: no cover - compiled
    """(the biased exponent of the spacing of float64s just below ``|r|``, ``r``'s exponent
    field), from ``r``'s int64 ``bits``: at a power of two the spacing below is half the one
    above."""
    field = (bits >> 52) & 0x7FF
    return field - 52 - ((bits & _FRACTION) == 0), field


@njit(cache=True, nogil=True, error_model="numpy")  # x / 0 is inf or NaN, as in numpy
def _clear_logs(total, magnitude, values, gamma, v, room_ulps, clear):  # pragma: no cover
    """``clear`` where :func:`..exact_log_sum.log_sum_suspects` certainly passes an output:
    its sum ``total`` positive and above 4 times a normal bound ``E = gamma * magnitude``,
    and ``E / (S - E) + 2 v |r|`` below ``room_ulps`` of the spacing below ``|r|`` (normal:
    from ``r``'s exponent bits, a vector loop) by the relative margin _MARGIN. The same test
    in float64 instead of the accumulator: the margin covers the difference. Returns how many
    it cannot clear."""
    bits = values.view(np.int64)
    left = 0
    spacing = np.empty(values.size)
    spacing_bits = spacing.view(np.int64)
    for i in range(total.size):
        biased, field = _spacing_below(bits[i])
        spacing_bits[i] = max(biased, 1) << 52
        s, error = total[i], gamma * magnitude[i]
        bound = (error / (s - error) + 2.0 * v * abs(values[i])) * (1.0 + _MARGIN)
        clear[i] = (error >= 2.0**-1000 and s >= 4.0 * error and s < math.inf
                    and biased >= 1 and field < 0x7FF
                    and bound < room_ulps * spacing[i] * (1.0 - _MARGIN))
        left += not clear[i]
    return left


def _walk_of(data: np.ndarray, plan: ReductionPlan) -> tuple | None:
    """``((base, m, n, rs, cs), (count, stride, kept))``: the rows of ``data`` for
    :func:`_one_call` (:mod:`.state_rows`' walk, repeated over ``count`` slabs ``stride``
    elements apart, kept: their outputs slab after slab, or not: added up): its own memory by
    :func:`_row_walk`; or, for another C-contiguous layout under ONE_CALL_THREADED_BYTES whose
    slices fit one block, a copy with the kept axes first, which is what the general path's
    one block gives the rows functions (so the same bits); None otherwise."""
    found = _row_walk(data, plan)
    if found is not None:
        rows, slabs = found
        return (_read_only(data.reshape(-1)), *rows), slabs
    n = plan.reduced_size
    if (type(data) is not np.ndarray or not data.flags.c_contiguous
            or data.nbytes >= ONE_CALL_THREADED_BYTES or n > blocks.BLOCK_ELEMENTS):
        return None
    view, _ = kept_first(data, plan)
    base = _read_only(np.ascontiguousarray(view).reshape(-1))
    return (base, data.size // n, n, n, 1), (1, 0, True)


def _read_only(base: np.ndarray) -> np.ndarray:
    """``base`` marked read-only (a view when ``base`` is one): the kernels then run one
    compiled variant for writeable and read-only inputs."""
    base.setflags(write=False)
    return base


def _row_walk(data: np.ndarray, plan: ReductionPlan) -> tuple[tuple, tuple] | None:
    """``((m, n, rs, cs), (count, stride, kept))`` (:func:`_walk_of`'s form after the base)
    of a C-contiguous ndarray, in place: reduced dims all after the kept ones (rows), all
    before them (columns), between kept dims (a middle axis: kept slabs of columns, at least
    SLAB_MIN_WIDTH wide) or around them (split axes: slabs of rows, added up; under
    ONE_CALL_THREADED_BYTES only rows of SPLIT_MIN_ROW terms); None for other inputs."""
    flags = data.flags
    if type(data) is not np.ndarray or not flags.c_contiguous or not flags.aligned:
        return None
    key = (data.shape, plan.axes)
    found = _ROW_WALKS.get(key, False)
    if found is False:
        found = _ROW_WALKS.put(key, _row_geometry(data.shape, plan.axes, data.nbytes))
    return found


def _row_geometry(shape: tuple[int, ...], axes: tuple[int, ...], nbytes: int
                  ) -> tuple[tuple, tuple] | None:
    """:func:`_row_walk` of a C-contiguous float64 array of ``shape`` (``nbytes``) reduced
    along ``axes``."""
    sizes, reduced, _ = merged_dims(memory_order_geometry(shape, axes))  # runs of dims alike
    n = math.prod(shape[a] for a in axes)
    m = math.prod(shape) // n
    pattern = [bool(r) for r in reduced]
    if pattern in ([True], [False, True]):
        return (m, n, n, 1), (1, 0, True)
    if pattern == [True, False]:
        return (m, n, 1, m), (1, 0, True)
    if pattern == [False, True, False] and sizes[2] >= SLAB_MIN_WIDTH:
        inner = int(sizes[2])
        return (inner, n, 1, inner), (m // inner, n * inner, True)
    row = int(sizes[-1])
    if pattern == [True, False, True] and (row >= SPLIT_MIN_ROW
                                           or nbytes >= ONE_CALL_THREADED_BYTES):
        return (m, row, row, 1), (int(sizes[0]), m * row, False)
    return None


def _partial_state(op: str, data: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    """:func:`..states.partial` of ``data``; from THREADED_BYTES on, its outputs split in two
    halves along the outermost kept axis, the second half's state on a thread of its own (the
    compiled state rows release the GIL). Each output's state is computed as in one piece."""
    kept = [a for a in range(data.ndim) if a not in axes and data.shape[a] > 1]
    if data.nbytes < THREADED_BYTES or not kept or num_threads() < 2:
        return states.partial(op, data, axes)
    axis = kept[0]
    halves = np.array_split(data, 2, axis=axis)
    return np.concatenate(_in_two_threads(states.partial, [(op, half, axes) for half in halves]),
                          axis=axis)


def _logs(data: np.ndarray, plan: ReductionPlan, total: np.ndarray, norm: np.ndarray
          ) -> np.ndarray:
    """The logs of the float64 sums ``total`` rounded to the (narrow) dtype, the suspects
    recomputed; ``norm`` (the L2 of each slice) bounds the sums of magnitudes."""
    n = plan.reduced_size
    precision, emin = float_format(data.dtype)
    room = tolerance_ulps(data.dtype) - 0.5
    out = np.empty(total.shape, storage_dtype(data.dtype))
    suspect = np.empty(total.shape, np.bool_)
    if _narrow_logs(total.reshape(-1), norm.reshape(-1), math.sqrt(n) * (1 + 4 * U),
                    SAFETY * U * max(n - 1, 1), room * 2.0**-precision,
                    room * 2.0**(emin - precision + 1), out.reshape(-1), suspect.reshape(-1)):
        rounded = out.view(data.dtype)
        view, nkept = kept_first(data, plan)
        refine_log_sum(view, nkept, rounded, suspect.reshape(-1))
    return out.view(data.dtype)


@njit(cache=True, nogil=True)
def _narrow_logs(total, norm, spread, gamma, room, floor, out, suspect):  # pragma: no cover
    """``out = log(total)`` rounded once to ``out``'s storage dtype (IEEE: log 0 = -inf, log
    of a negative sum or NaN is NaN, of +inf +inf); ``suspect`` where the error bound of
    ``log S~`` exceeds the contract's room after the final rounding: the test of
    :func:`..exact_log_sum.log_sum_suspects`, compiled into the loop that takes the logs
    (as numpy array operations it dominated small calls), with the spacing below
    ``|r|`` taken as ``room |r|`` or ``floor``, never above it. ``S~`` within
    ``E = gamma * spread * norm`` of the exact sum (``spread * norm >= sum|x|``), so
    ``log S~`` within ``E / (S~ - E)`` plus the float64 log's own ``2 u |r|``; or a sign
    ``E`` leaves open. A sum that is not finite holds inf or NaN: its log is the result.
    Returns whether any output is suspect."""
    any_suspect = False
    for i in range(total.size):
        s = total[i]
        r = math.log(s) if s > 0.0 else (-math.inf if s == 0.0 else math.nan)
        store(out, i, r)
        bound = gamma * (norm[i] * spread)
        flag = False
        if math.isfinite(s) and bound > 0.0:
            if not (abs(s) > bound):  # also a bound that is not a number
                flag = True
            elif s > bound:
                error = bound / (s - bound) + 2.0 * U * abs(r)
                flag = not (error <= max(room * abs(r), floor))
        suspect[i] = flag
        any_suspect |= flag
    return any_suspect
