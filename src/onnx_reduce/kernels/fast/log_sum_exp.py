"""Compiled ReduceLogSumExp (numba) for float32, float64, float16 and bfloat16, any layout.

Every output is ``m + log1p(sum_{x<m} exp(x - m) + count(x == m) - 1)`` with ``m`` the maximum,
like the reference path, computed in float64 and rounded once to the input dtype:

* the maximum is an integer maximum of order-preserving keys of the float bits (it vectorizes,
  unlike a float maximum that must keep NaN), plus the largest magnitude bits, which tell
  whether a NaN is present; a NaN, +inf or all--inf output needs no exponentials;
* ``exp(x - m)`` is a polynomial of :mod:`._exp` (float64 inputs get a half-ulp one,
  :data:`TABLE_TERMS`, narrower inputs the 2**-37 one), added in blocks with reassociation
  (vectorized), the block sums folded with Neumaier's compensated summation; a tiny result
  (``[0, -40]`` -> 4.25e-18) keeps its digits: narrower floats count the ties with ``m``
  apart, float64 adds their exact 1s among its terms' grid parts and finishes with a TwoSum.

Layouts come from :func:`._common.canonical` (no copy, any strides, never a whole-array copy).
Rows (the innermost dim is reduced: inner, all, non-adjacent axes): float64, and narrower floats
reducing at most ``SHORT_ROW_BYTES`` per output, find each output's maximum, then add its terms,
and finish a run of outputs together (adjacent short rows of a C-contiguous input without any
walk: :func:`_short_rows`; rows of 2 to ``TINY_ROW`` in one loop across the outputs,
:func:`_tiny_row_sums`). Longer narrow rows (adjacent ones without a walk too:
:func:`_long_rows`) are read once: first with a guessed
shift (the maximum of its first ``PROBE`` elements, :func:`_guess_range`: one vectorized loop of
``exp(x - m)`` with no compare or tie count), kept when no element exceeds it by more than
``MARGIN`` and the result is at least ``GUARD`` in magnitude (then the error is far below half a
float32 ulp); otherwise in chunks of ``CHUNK`` elements (the maximum of a chunk, then its terms
from cache, rescaling the sums when the maximum grows), with exact maxima and tie counts.
Short runs (reduced axes that are not adjacent) go in groups, one loop nest per block of
elements; large C-contiguous narrow-float inputs with such runs (a split reduction) are read
slab by slab instead, every output's row of a slab in turn, each piece of slabs with its own
guessed shifts (:func:`_slab_rows`). Few outputs are cut in pieces that threads share,
combined in a fixed order, so results do not depend on the thread count.

Columns (the innermost dim is kept: outer, middle): a work item owns ``COLUMN_BYTES`` of
adjacent outputs (fewer when that leaves a thread idle) and walks the reduced rows four at a
time, the next four prefetched where slices are short. Narrow floats first read once, each
output's shift guessed from its first ``PROBE_ROWS`` rows and kept under the rows' rule, decided
per output; float64, and the outputs the guess did not serve, take a maximum pass, then a terms
pass (float64: BLOCK rows at a time, each block's sums folded in as the rows' are).

Inputs under ``PARALLEL_MIN`` elements run on the calling thread (a parallel launch costs
more than they take); parallel launches hold ``_common.parallel_section()``.

>>> from onnx_reduce.spec import Request, resolve
>>> from onnx_reduce.plan import make_plan
>>> x = np.array([[800.0, 800.0], [0.0, -40.0]])
>>> plan = make_plan(Request(resolve("ReduceLogSumExp", 18), (1,), False, False), x.shape)
>>> reduce_log_sum_exp(x, plan)
array([8.00693147e+02, 4.24835426e-18])
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
from numba import config, from_dtype, njit, prange, types
from numba.extending import overload

from ...plan import ReductionPlan
from ...plan.cache import BoundedCache
from ...spec.dtypes import bfloat16
from ..exact_lse import fast_bound, refine_log_sum_exp, suspects, threshold
from ..reference import kept_first
from ._common import (
    CHUNKS_PER_THREAD,
    CPU_NAME,
    REASSOC,
    Canonical,
    canonical,
    chunk_counters,
    entry_for,
    exact_add,
    flat_offset,
    frozen,
    is_float64,
    kept_dims,
    memory_order_geometry,
    merged_dims,
    neumaier,
    next_chunk,
    next_outer,
    parallel_section,
    prefetch,
    reduced_dims,
    storage_dtype,
    storage_view,
    store,
    threads_now,
    two_sum,
    wide_vectors,
    widen,
)
from ._exp import (
    as_float32,
    divide,
    exp_nonpos,
    exp_nonpos_normal,
    exp_nonpos_short,
    exp_nonpos_table,
    exp_open,
    exp_split,
    half_to_float64,
    log1p_from,
)
from .traversal import add, column_walk, row_walks, specialise, zero

if TYPE_CHECKING:
    from ..dispatch import Bound

__all__ = ["bind_log_sum_exp", "reduce_log_sum_exp"]

#: Elements per reassociated block before a compensated add (float64; narrower: LONG_BLOCK);
#: the float64 column kernel's rows per block.
#: float64 blocks add the terms' parts on the 2**-40 grid (:func:`_term_parts`), exact for up
#: to 2**13 terms below 1 in any order; longer blocks cost fewer folds.
BLOCK = 4096
LONG_BLOCK = 1024
#: Narrow floats: elements per chunk of a row read once (max, then terms from cache).
CHUNK = 8192
#: Kept innermost runs of at most this many bytes go to the row kernels, each output walking
#: its strided elements (no setup per row slice); twice as wide for inputs of at most
#: NARROW_COLUMNS_CACHED bytes, read from cache (docs/kernel-design.md, "Narrow columns").
NARROW_COLUMNS_BYTES = 64
NARROW_COLUMNS_CACHED = 4 << 20
#: Bytes of one row slice of a column work item: wide enough to amortize the per-row setup
#: and for slices the hardware prefetcher follows (docs/kernel-design.md, "Column prefetch
#: and item width").
COLUMN_BYTES = 8192
COLUMN_MIN_BYTES = 128
#: Below this many input elements the kernels run on the calling thread only.
PARALLEL_MIN = 1 << 16
#: Narrow floats' outputs of at most this many input bytes are read twice, as float64's: the
#: maximum, then the terms from cache (longer ones once, with a guessed shift).
SHORT_ROW_BYTES = 1024
#: ... those of 2 to this many elements, adjacent, in one loop across the outputs
#: (:func:`_tiny_row_sums`).
TINY_ROW = 8
#: :func:`_short_rows`' tiny row length, bound in each of its variants (``_TINY_ROWS``); 0: any.
ROW_LENGTH = 0
#: Small arrays with a kept innermost run at most this wide take :func:`_small_columns`; wider
#: runs the general column kernel (its four-rows-at-a-time loops win there).
SMALL_COLUMNS_MAX_WIDTH = 128
#: Large C-contiguous inputs whose slabs (a leading kept dim) hold such narrow columns share
#: the slabs out across threads in pieces of at most this many bytes, each piece by
#: :func:`_small_columns` (both of its passes read the piece from L2): :func:`_slab_job`.
SLAB_PIECE_BYTES = 256 << 10
#: C-contiguous narrow-float inputs of at least SLAB_ROWS_INPUT_BYTES whose memory-order dims
#: are (reduced, kept, reduced), a split reduction, are read slab by slab (:func:`_slab_rows`)
#: in SLAB_ROWS_PIECES ranges of their leading dim (it has at least that many slabs), when
#: each output's rows of a slab hold at least SLAB_ROW_MIN_BYTES and there are at most
#: SLAB_ROWS_MAX_OUTPUTS outputs (each piece's sums of them stay in cache): rows far apart,
#: read output by output, leave the memory idle between them; in cache, the walk per output
#: is faster (docs/kernel-design.md, "Split reductions slab by slab").
SLAB_ROWS_INPUT_BYTES = 16 << 20
SLAB_ROWS_PIECES = 16
SLAB_ROW_MIN_BYTES = 256
SLAB_ROWS_MAX_OUTPUTS = 4096
#: Least elements in one piece of a split reduction; at most this many pieces per output set.
MIN_PIECE = 1 << 15
TARGET_TASKS = 16
#: Narrow-float rows first try a guessed shift: the maximum of the first PROBE elements...
PROBE = 64
#: ...kept while no block of terms adds up to more than e**MARGIN (then every element is below
#: m + MARGIN, none was clamped at m + 600, and sums of terms cannot overflow)...
MARGIN = 100.0
_BLOCK_CAP = math.exp(MARGIN)
#: ...for results of magnitude at least GUARD (else the exact maximum is found first).
GUARD = 2.0**-8
#: Narrow-float columns guess each output's shift from its first PROBE_ROWS reduced rows.
PROBE_ROWS = 4
#: Kernels return their least |result| before rounding: above the exact-recomputation limit
#: times this, every rounded result is above the limit (bfloat16 rounds by at most 2**-8).
ROUNDING_MARGIN = 1 + 2.0**-7

_SERVED = {np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.float16), bfloat16}
_BITS = {np.dtype(np.float32): np.dtype(np.int32), np.dtype(np.float64): np.dtype(np.int64)}
_VIEWS = {from_dtype(dtype): bits.type for dtype, bits in _BITS.items()}  # _BITS in numba
#: Prepared jobs, by (shape, dtype, axes) for C-contiguous inputs and (shape, strides, dtype,
#: axes) for others (False: not served).
_JOBS: BoundedCache[tuple, Job | bool] = BoundedCache(256)


def reduce_log_sum_exp(data: np.ndarray, plan: ReductionPlan) -> np.ndarray | None:
    """ReduceLogSumExp of ``data`` as ``plan`` says; None for dtypes served elsewhere."""
    dtype = data.dtype
    if dtype not in _SERVED or plan.reduced_size == 0:
        return None
    if data.size == 0:
        return np.empty(plan.output_shape, dtype)
    if not data.flags.aligned:  # numba cannot read it (and it must not poison the cache)
        return None
    if data.flags.c_contiguous:  # the common case: geometry cached, canonical order = input's
        key = (data.shape, dtype, plan.axes)
        job = _JOBS.get(key)
        if job is None:
            canon = canonical(data, plan.axes)
            job = _JOBS.put(key, (canon is not None
                                  and choose_job(canon, dtype, plan, contiguous=True)) or False)
        if not job:
            return None
        base = storage_view(data).reshape(-1)
        base.setflags(write=False)  # the variant views and bound calls run (one per kernel)
        restore = None
    else:  # the job depends on the layout only: cached by shape and strides too
        canon = canonical(data, plan.axes)
        if canon is None:
            return None
        key = (data.shape, data.strides, dtype, plan.axes)
        job = _JOBS.get(key)
        if job is None:
            job = _JOBS.put(key, choose_job(canon, dtype, plan) or False)
        if not job:
            return None
        base = canon.base
        restore = canon.restore
    out = np.empty(job.outputs, storage_dtype(dtype))
    bits = base.view(_BITS.get(dtype, base.dtype))
    if job.threaded:
        with parallel_section():
            least = job.kernel(base, bits, *job.args, out)
    else:
        least = job.kernel(base, bits, *job.args, out)
    result = out.view(dtype)
    if restore is not None:
        result = restore(result, plan.kept_shape)
    return _vouched(data, plan, result.reshape(plan.output_shape), least)


def _vouched(data: np.ndarray, plan: ReductionPlan, result: np.ndarray,
             least: float) -> np.ndarray:
    """``result`` with the outputs its error bound cannot vouch for recomputed exactly
    (:mod:`..exact_lse`): those under the dtype's threshold for this reduced size. ``least``,
    the least |result| before rounding that every kernel returns, tells whether there are any
    (ROUNDING_MARGIN covers the rounding); a pass over the outputs right after a parallel
    kernel would read the other core's writes (docs/kernel-design.md, "Finishing")."""
    limit = threshold(data.dtype, fast_bound(data.dtype, plan.reduced_size))
    if least > limit * ROUNDING_MARGIN:
        return result
    mask = suspects(result, data.dtype, limit)
    if not mask.any():
        return result
    result = result.copy()  # C order, writeable, any rank
    view, nkept = kept_first(data, plan)
    refine_log_sum_exp(view, nkept, result, mask)
    return result


def bind_log_sum_exp(dtype: np.dtype, plan: ReductionPlan) -> Bound | None:
    """ReduceLogSumExp bound to ``dtype`` and ``plan`` for small C-contiguous, aligned, writeable
    arrays (:func:`onnx_reduce.kernels.dispatch.bind`); None when this lane does not serve the
    case. Rows and narrow columns take :func:`_small_rows` / :func:`_small_columns` (two passes
    in memory order, no per-row or per-item setup; the same arithmetic as the general kernels,
    not always the same last bit); wide columns the serial column kernel (:func:`choose_job`
    picks for both paths)."""
    size = math.prod(plan.shape)
    if dtype not in _SERVED or size >= PARALLEL_MIN or size == 0:
        return None
    storage = storage_dtype(dtype)
    bits = _BITS.get(dtype, storage)
    shape = plan.output_shape
    # Results at or under the limit may need exact recomputation: the general path does it.
    limit = threshold(dtype, fast_bound(dtype, plan.reduced_size)) * ROUNDING_MARGIN
    canon = canonical(np.empty(plan.shape, dtype), plan.axes)
    job = None if canon is None else choose_job(canon, dtype, plan, small=True)
    if job is None:
        return None
    args = job.args
    small = job.kernel in _VIEW_BITS  # the kernel views the bits itself (no numpy view a call)
    typed = (frozen(storage),) if small else (frozen(storage), frozen(bits))
    kernel = entry_for(job.kernel, *typed, *args, np.empty(0, storage))

    # ravel(), not reshape(-1): a view either way for C-contiguous arrays; the entry takes the
    # array itself where its storage or bits are typed (entry_for: the same item size)
    def run(data: np.ndarray) -> np.ndarray:
        out = np.empty(shape, dtype)
        base = data.ravel()
        if (kernel(base, *args, out.ravel()) if small
                else kernel(base, base, *args, out.ravel())) <= limit:
            return None
        return out
    return run


class Job(NamedTuple):
    """A kernel chosen by :func:`choose_job`, called as ``kernel(base, bits, *args, out)``."""

    kernel: Any
    args: tuple
    outputs: int
    threaded: bool  # a parallel kernel: launched under parallel_section()


def choose_job(canon: Canonical, dtype: np.dtype, plan: ReductionPlan, small: bool = False,
               contiguous: bool = False) -> Job | None:
    """The kernel for the canonical layout ``canon`` of a ``dtype`` input as ``plan`` says;
    None if not served. ``small``: a C-contiguous input under PARALLEL_MIN elements, whose
    rows and narrow columns take the one-call kernels (:func:`_small_rows`,
    :func:`_small_columns`, walking :func:`._common.memory_order_geometry`); ``contiguous``:
    a C-contiguous input (large ones may go in slabs: :func:`_slab_job`)."""
    kept = canon.kept_sizes
    outputs = math.prod(kept)
    parallel = math.prod(plan.shape) >= PARALLEL_MIN
    if small and not parallel:
        geo = memory_order_geometry(plan.shape, plan.axes)
        sizes, reduced, _ = merged_dims(geo)
        if reduced[-1]:  # the innermost (merged) dim is reduced: whole rows, in memory order
            return Job(_small_rows, (geo,), outputs, False)
        if sizes[-1] <= SMALL_COLUMNS_MAX_WIDTH:  # a narrow kept innermost run
            return Job(_small_columns, (geo,), outputs, False)
    if contiguous and parallel:
        slabs = _slab_job(kept, dtype, plan) or _slab_rows_job(dtype, plan)
        if slabs is not None:
            return slabs
    n = _adjacent_rows(canon)
    if parallel and n and n * dtype.itemsize <= SHORT_ROW_BYTES:
        return Job(_TINY_ROWS.get(n, _short_rows), (canon.offset, n), outputs, True)
    red, red_st = canon.red_sizes, canon.red_strides
    step = red_st[-1] if red[-1] > 1 else 1
    if canon.inner_reduced or (step and _narrow_columns(kept, dtype.itemsize, plan)):
        if step == 0:  # a broadcast (stride-0) innermost run: not served
            return None
        block = BLOCK if dtype == np.float64 else LONG_BLOCK
        pieces = _pieces(outputs, plan.reduced_size) if parallel else 1
        args = (canon.offset, canon.geometry, block)
        if pieces > 1:
            split = _rows_split if dtype == np.float64 else _rows_online_split
            return Job(split, (*args, pieces), outputs, True)
        if parallel and n and dtype != np.float64:
            return Job(_long_rows, (canon.offset, n, block), outputs, True)
        return Job(_rows_parallel if parallel else _rows_serial, args, outputs, parallel)
    cstep = canon.kept_strides[-1] if kept[-1] > 1 else 1
    if cstep == 0:  # broadcast (stride-0) outputs: not served
        return None
    width = _column_width(kept, dtype.itemsize, parallel)
    items = math.prod(kept[:-1]) * -(-kept[-1] // width)
    pieces = _pieces(items, plan.reduced_size) if parallel else 1
    args = (canon.offset, canon.geometry, width)
    if pieces > 1:
        return Job(_columns_split, (*args, pieces), outputs, True)
    return Job(_columns_parallel if parallel else _columns_serial, args, outputs, parallel)


def _slab_job(kept: tuple[int, ...], dtype: np.dtype, plan: ReductionPlan) -> Job | None:
    """:func:`_slab_columns` for a large C-contiguous input whose memory-order dims are
    (kept, ..., kept) with a kept innermost run of at most SMALL_COLUMNS_MAX_WIDTH and a
    reduced size of at most its square (longer columns pay for their row slices), for
    float64 and for narrow floats' columns the row kernels would take (their column kernel
    reads once, with guessed shifts). None otherwise.

    >>> from onnx_reduce.plan import make_plan
    >>> from onnx_reduce.spec import Request, resolve
    >>> plan = make_plan(Request(resolve("ReduceLogSumExp", 18), (1,), True, False),
    ...                  (4096, 8, 16))
    >>> _slab_job((4096, 16), np.dtype(np.float32), plan).kernel.__name__
    '_slab_columns'
    """
    geo = memory_order_geometry(plan.shape, plan.axes)
    sizes, reduced, _ = merged_dims(geo)
    width = int(sizes[-1])
    if reduced[0] or reduced[-1] or sizes[0] < 2 or width > SMALL_COLUMNS_MAX_WIDTH:
        return None
    if plan.reduced_size > width * width:
        return None
    if dtype != np.float64 and not _narrow_columns(kept, dtype.itemsize, plan):
        return None
    nbytes = math.prod(plan.shape) * dtype.itemsize
    return Job(_slab_columns, (_slab_pieces(geo, nbytes),), math.prod(kept), True)


def _slab_rows_job(dtype: np.dtype, plan: ReductionPlan) -> Job | None:
    """:func:`_slab_rows` for a C-contiguous narrow-float input whose memory-order dims are
    (reduced, kept, reduced), within the SLAB_ROW(S)_* limits; None otherwise.

    >>> from onnx_reduce.plan import make_plan
    >>> from onnx_reduce.spec import Request, resolve
    >>> plan = make_plan(Request(resolve("ReduceLogSumExp", 18), (0, 2), True, False),
    ...                  (256, 256, 256))
    >>> _slab_rows_job(np.dtype(np.float32), plan).args
    (256, 256, 16)
    """
    if dtype == np.float64:
        return None
    sizes, reduced, _ = merged_dims(memory_order_geometry(plan.shape, plan.axes))
    if reduced.tolist() != [1, 0, 1]:
        return None
    slabs, outputs, n = (int(size) for size in sizes)
    if (slabs * outputs * n * dtype.itemsize < SLAB_ROWS_INPUT_BYTES
            or slabs < SLAB_ROWS_PIECES or outputs > SLAB_ROWS_MAX_OUTPUTS
            or n * dtype.itemsize < SLAB_ROW_MIN_BYTES):
        return None
    return Job(_slab_rows, (slabs, n, SLAB_ROWS_PIECES), outputs, True)


def _adjacent_rows(canon: Canonical) -> int:
    """``n`` when output ``t`` reduces the contiguous elements ``offset + t n`` to
    ``offset + (t + 1) n`` (one merged reduced dim of stride 1, kept dims packed above it),
    else 0."""
    if len(canon.red_sizes) != 1 or canon.red_strides[0] != 1 or canon.red_sizes[0] < 2:
        return 0
    expected = canon.red_sizes[0]
    for size, stride in zip(reversed(canon.kept_sizes), reversed(canon.kept_strides),
                            strict=True):
        if size > 1 and stride != expected:
            return 0
        expected *= size
    return canon.red_sizes[0]


def _narrow_columns(kept: tuple[int, ...], itemsize: int, plan: ReductionPlan) -> bool:
    """Whether the kept innermost run is so narrow that the row kernels, each output walking its
    strided elements, beat the column kernel, whose every row slice has its setup: at most
    NARROW_COLUMNS_BYTES (twice that for inputs of up to NARROW_COLUMNS_CACHED bytes, read
    from cache however often)."""
    limit = NARROW_COLUMNS_BYTES
    if math.prod(plan.shape) * itemsize <= NARROW_COLUMNS_CACHED:
        limit *= 2
    return kept[-1] * itemsize <= limit


def _column_width(kept: tuple[int, ...], itemsize: int, parallel: bool) -> int:
    """Outputs per column work item: COLUMN_BYTES of them, or fewer (down to COLUMN_MIN_BYTES)
    until every thread of a parallel launch has an item (a 512x512 outer reduction: one).
    Narrower items cost more per element: each row slice has its setup."""
    width = max(1, COLUMN_BYTES // itemsize)
    least = max(1, COLUMN_MIN_BYTES // itemsize)
    outer = math.prod(kept[:-1])
    tasks = config.NUMBA_NUM_THREADS
    while parallel and width > least and outer * -(-kept[-1] // width) < tasks:
        width //= 2
    return width


@njit(cache=True, inline="always")
def _row_dims(geo):
    """The row kernels' view of a geometry whose innermost dim is reduced: kept (sizes,
    strides), the outer reduced (sizes, strides), and the rows' length and element step."""
    ks, kst = kept_dims(geo)
    rsz, rst = reduced_dims(geo)
    last = rsz.size - 1
    n = rsz[last]
    return ks, kst, rsz[:last], rst[:last], n, rst[last] if n > 1 else 1


@njit(cache=True, inline="always")
def _column_dims(geo):
    """The column kernels' view of a geometry whose innermost dim is kept: the outer kept
    (sizes, strides), the innermost's size and element step, and the reduced (sizes,
    strides)."""
    ksz, kst = kept_dims(geo)
    rs, rst = reduced_dims(geo)
    last = ksz.size - 1
    cols = ksz[last]
    return ksz[:last], kst[:last], cols, kst[last] if cols > 1 else 1, rs, rst


def _pieces(items: int, reduced: int) -> int:
    """How many pieces each output's reduction is cut into (1 when there is work enough)."""
    if items >= TARGET_TASKS:
        return 1
    return max(1, min(-(-TARGET_TASKS // items), reduced // MIN_PIECE))


# ----------------------------------------------------------------------------- per dtype


def _key(bits, i):  # pragma: no cover - njit only
    """Order-preserving int64 key of element ``i`` of the bit view (float order, -0 < +0)."""
    raise NotImplementedError


def _magnitude(bits, i):  # pragma: no cover - njit only
    """The magnitude bits of element ``i`` (greater than ``_nan_floor`` for a NaN)."""
    raise NotImplementedError


def _from_key(bits, key, magnitude):  # pragma: no cover - njit only
    """The float64 value of a key; NaN when ``magnitude`` says a NaN was seen."""
    raise NotImplementedError


def _bits_view(base):  # pragma: no cover - njit only
    """``base``'s memory as the integers whose order is the values' (float32: int32, float64:
    int64; float16/bfloat16 are read as their bits already)."""
    raise NotImplementedError


@overload(_bits_view, inline="always")
def _bits_view_impl(base):
    if base.dtype in _VIEWS:
        view = _VIEWS[base.dtype]
        return lambda base: base.view(view)
    return lambda base: base


def _wide(v):  # pragma: no cover - njit only
    """One storage element -> float64 (float16 through the hardware conversion)."""
    raise NotImplementedError


@overload(_wide, inline="always")
def _wide_impl(v):
    if v == types.uint16:
        return lambda v: half_to_float64(v)
    return lambda v: widen(v)


def _term(base, d):  # pragma: no cover - njit only
    """exp(d) for d <= 0 (no NaN), as accurate as ``base``'s dtype needs."""
    raise NotImplementedError


_WIDTHS = {types.int32: (31, 0x7F800000), types.int64: (63, 0x7FF0000000000000),
           types.uint16: (15, 0x7C00), types.int16: (15, 0x7F80)}


@overload(_key, inline="always")
def _key_impl(bits, i):
    dt = bits.dtype
    if dt not in _WIDTHS:
        return None
    shift, _ = _WIDTHS[dt]
    low = (1 << shift) - 1
    if dt == types.uint16:  # float16: sign-extend first
        def impl(bits, i):
            v = (np.int64(bits[i]) ^ 0x8000) - 0x8000
            return v ^ ((v >> 15) & 0x7FFF)
        return impl

    def impl(bits, i):
        v = np.int64(bits[i])
        return v ^ ((v >> shift) & low)
    return impl


@overload(_magnitude, inline="always")
def _magnitude_impl(bits, i):
    dt = bits.dtype
    if dt not in _WIDTHS:
        return None
    low = (1 << _WIDTHS[dt][0]) - 1
    return lambda bits, i: np.int64(bits[i]) & low


@overload(_from_key)
def _from_key_impl(bits, key, magnitude):
    dt = bits.dtype
    if dt not in _WIDTHS:
        return None
    shift, nan_floor = _WIDTHS[dt]
    low = (1 << shift) - 1
    if dt == types.int64:
        def impl(bits, key, magnitude):
            if magnitude > nan_floor:
                return np.nan
            return np.int64(key ^ ((key >> 63) & low)).view(np.float64)
    elif dt == types.int32:
        def impl(bits, key, magnitude):
            if magnitude > nan_floor:
                return np.nan
            return np.float64(as_float32(np.int32(key ^ ((key >> 63) & low))))
    elif dt == types.uint16:
        def impl(bits, key, magnitude):
            if magnitude > nan_floor:
                return np.nan
            return widen(np.uint16((key ^ ((key >> 63) & low)) & 0xFFFF))
    else:
        def impl(bits, key, magnitude):
            if magnitude > nan_floor:
                return np.nan
            return widen(np.int16(key ^ ((key >> 63) & low)))
    return impl


@njit(cache=True)
def _term_long(d):
    """float64 inputs' ``exp(d)``, ``d <= 0``, by the half-ulp polynomial; ``d`` under -746
    (where it is 0) and NaN clamped to -746 (a NaN's term is never used)."""
    return exp_nonpos(d if d > -746.0 else -746.0)  # NaN -> -746 (its term is not used)


@njit(cache=True)
def _term_short(d):
    """Narrower inputs' ``exp(d)``, ``d <= 0``, by the 2**-37 polynomial; ``d`` clamped at -700
    (far below what a float32 sum can see)."""
    return exp_nonpos_short(d if d > -700.0 else -700.0)


@overload(_term)
def _term_impl(base, d):
    # -inf and huge gaps are clamped (to 0 and to a term no narrow-float sum can see).
    if base.dtype == types.float64:
        return lambda base, d: _term_long(d)
    return lambda base, d: _term_short(d)


# ----------------------------------------------------------------------------- shared pieces

_KEY_FLOOR = -(1 << 63)


@njit(cache=True)
def _offset(flat, sizes, strides):
    """Element offset of C-order index ``flat`` over all of ``sizes``."""
    return flat_offset(flat, sizes, strides, sizes.size)


@njit(cache=True, inline="always")
def _finish(base, m, hi, lo, ties):
    """``m + log1p(hi + lo + ties - 1)``; ``m`` itself when NaN or infinite. float64 inputs
    take a Newton step on the log (:func:`_log_step`): the log alone may be 2.5 ulp off.
    Branch-free (every lane computed, then selected): loops over outputs vectorize. Inlined
    into numba IR: call it only from functions without fast-math (its TwoSums would go)."""
    extra = ties - 1.0
    s = hi + extra
    back = s - hi
    err = (hi - (s - back)) + (extra - back) + lo
    log_sum = log1p_from(s) + divide(err, 1.0 + s)
    r = _log_step(m, log_sum, s, err) if is_float64(base) else m + log_sum
    return r if abs(m) < np.inf else m


@njit(cache=True, fastmath={"contract"}, inline="always")
def _log_step(m, start, s, err):
    """``m + log(1 + s + err)`` from a float64 ``start`` near the log: one Newton step,
    ``start + (S exp(-start) - 1)``, on the two-part exp (error below 2**-56 absolute), and the
    sum with ``m`` rounded once."""
    eh, el = exp_split(-start)
    one, low = two_sum(1.0, s)
    p, pe = _two_prod(one, eh)
    correction = (p - 1.0) + (pe + (one * el + (low + err) * eh))  # p - 1: exact (Sterbenz)
    head, tail = two_sum(m, start)
    return head + (tail + correction)


@njit(cache=True, inline="always")
def _two_prod(a, b):
    """``a * b`` and its rounding error (Dekker's product by splitting: no FMA needed)."""
    p = a * b
    c = 134217729.0 * a
    ah = c - (c - a)
    al = a - ah
    c = 134217729.0 * b
    bh = c - (c - b)
    bl = b - bh
    return p, ((ah * bh - p) + ah * bl + al * bh) + al * bl


#: Adding and subtracting _SIGMA rounds a term in [0, 2] to a multiple of 2**-40: those parts
#: of up to GRID_TERMS terms (each at most 1) add up exactly in any order.
_SIGMA = 1.5 * 2.0**12
GRID_TERMS = 1 << 13


#: float64 terms by :func:`._exp.exp_nonpos_table` (two gathers, a degree-5 polynomial) rather
#: than :func:`._exp.exp_nonpos_normal` (degree 10, no table): fewer operations on the two
#: vector ports of Intel's AVX-512 cores, whose gathers are quick; AMD's Zen cores keep the
#: polynomial (docs/kernel-design.md, "ReduceLogSumExp"). Chosen by the CPU name numba
#: compiles for, like ``_common.ORDERED_ADDS``.
TABLE_TERMS = not CPU_NAME.startswith("znver")


@njit(cache=True, fastmath={"contract"}, inline="always")
def _term_parts(x, m):
    """float64 ``exp(x - m)`` for ``x <= m`` as (multiple of 2**-40, rest): ``x - m`` carried
    exactly (TwoDiff), ``exp(d + dl)`` as ``exp(d) + exp(d) dl`` with a half-ulp exp
    (:data:`TABLE_TERMS`; within 1.28 u relative either way: one exp per term keeps float64
    as fast as the plain sum). A tie (``x == m``) gives exactly (1, 0); gaps under -708,
    -inf and NaN give (0, 0)."""
    d = x - m
    z = d - x
    dl = (x - (d - z)) + (-m - z)
    live = d > -708.0  # smaller terms (< 2**-1021) are invisible beside the maximum's 1
    gap = d if live else -708.0
    h = exp_nonpos_table(gap) if TABLE_TERMS else exp_nonpos_normal(gap)
    small = h * dl
    big = (h + _SIGMA) - _SIGMA
    return (big, (h - big) + small) if live else (0.0, 0.0)


# ----------------------------------------------------------------------------- rows


@njit(cache=True, inline="always")
def _keys_part(seg, m):
    """The largest order-preserving key and magnitude bits in ``seg`` (integer maxima: they
    vectorize; the magnitude tells whether a NaN is there); ``m`` unused."""
    wide_vectors()
    key = _KEY_FLOOR
    mag = 0
    for i in range(seg.size):  # indices from range(n): no negative-index wraparound
        key = max(key, _key(seg, i))
        mag = max(mag, _magnitude(seg, i))
    return key, mag


@njit(cache=True, inline="always")
def _no_keys():
    return _KEY_FLOOR, 0


@njit(cache=True, inline="always")
def _max_keys(p, q):
    return max(p[0], q[0]), max(p[1], q[1])


@njit(cache=True, inline="always")
def _read_bits(base, bits):
    return bits


@njit(cache=True, fastmath=REASSOC, inline="always")
def _add_terms(seg, m):
    """(sum of terms, float64 rest, ties) of ``seg`` against the shift ``m``. float64: every
    ``exp(x - m)`` split by :func:`_term_parts` (the ties' exact 1s among the grid parts, no
    count: :func:`_finish`'s TwoSum keeps a tiny result's digits), ties 0. Narrower: the terms
    of ``x < m`` and the count of ``x == m`` (the ties add exactly 1 each, apart)."""
    wide_vectors()
    tail = 0.0
    rest = 0.0
    ties = 0.0
    if is_float64(seg):
        for i in range(seg.size):
            big, small = _term_parts(seg[i], m)
            tail += big
            rest += small
    else:
        for i in range(seg.size):
            x = _wide(seg[i])
            e = _term(seg, x - m)
            tail += e if x < m else 0.0
            ties += 1.0 if x == m else 0.0
    return tail, rest, ties


@njit(cache=True, inline="always")
def _no_terms():
    return 0.0, 0.0, 0.0


@njit(cache=True, inline="always")
def _join_terms(p, q):
    return p[0] + q[0], p[1] + q[1], p[2] + q[2]


@njit(cache=True, inline="always")
def _fold_terms(state, part):
    """A block's (sum of terms, rest, ties) into the compensated (hi, lo, ties); also merges
    the states of two ranges, in order."""
    hi, lo = neumaier(state[0], state[1], part[0])
    return hi, lo + part[1], state[2] + part[2]


@njit(cache=True)
def _term_open(d):
    """exp(d) for a gap from a guessed shift (:func:`._exp.exp_open`: -inf gives ~0, above
    599 at least e**599, which no sum under the cap holds; NaN kept)."""
    return exp_open(d)


@njit(cache=True, fastmath=REASSOC, inline="always")
def _guess_sum(seg, m):
    """The sum of ``exp(x - m)`` over ``seg`` for a guessed shift ``m``: no compare, no tie
    count (:func:`_term_open` clamps what the guess did not bound; the caller checks the
    result)."""
    wide_vectors()
    total = 0.0
    for i in range(seg.size):
        total += _term_open(_wide(seg[i]) - m)
    return total


@njit(cache=True, inline="always")
def _no_total():
    return 0.0, 0.0


@njit(cache=True, inline="always")
def _fold_sum(state, part):
    return neumaier(state[0], state[1], part)


@njit(cache=True, inline="always")
def _over_cap(part):
    """NaN, or an element above ``m + MARGIN``: the guessed shift does not serve."""
    return not part <= _BLOCK_CAP


# The three walks of one output's reduced elements: its maximum (integer keys of the bits),
# its terms and ties against the maximum, and its terms against a guessed shift (the next
# block prefetched: the hardware prefetcher alone halves the speed of long split pieces).
_MAXIMA = row_walks("maxima", part=_keys_part, empty=_no_keys, join=_max_keys,
                    start=_no_keys, fold=_max_keys, read=_read_bits)
_TERMS_WALK = row_walks("terms", part=_add_terms, empty=_no_terms, join=_join_terms,
                        start=_no_terms, fold=_fold_terms, flags={"fastmath": REASSOC})
_GUESSES = row_walks("guesses", part=_guess_sum, empty=zero, join=add, start=_no_total,
                     fold=_fold_sum, failed=_over_cap, prefetch_ahead=True,
                     flags={"fastmath": REASSOC})
_max_contiguous = _MAXIMA.contiguous
_max_walk = _MAXIMA.walk
_terms_contiguous = _TERMS_WALK.contiguous
_terms_walk = _TERMS_WALK.walk
_guess_walk = _GUESSES.walk
_guess_contiguous = _GUESSES.contiguous
_guess_ahead = _GUESSES.contiguous_ahead


@njit(cache=True, inline="always")
def _guess_range(base, bits, off, rs, rst, n, step, a, b, block):
    """Narrow floats, one read of reduced elements ``a..b``: shift by the maximum ``m`` of the
    first PROBE of them (an element, so ``S``, the sum of ``exp(x - m)``, is at least 1) instead
    of the exact maximum. Returns (m, S as hi + lo); m is NaN when the guess does not serve: an
    infinite guess, a NaN, or an element above ``m + MARGIN`` (a block sum over the cap).
    Inlined, with the probe's walk, into the row kernel: calls per row cost as much as a short
    row's probe.
    """
    probe = min(b, a + PROBE)
    key, mag = _max_walk(bits, bits, off, rs, rst, n, step, a, probe, 0.0, probe - a)[0]
    m = _from_key(bits, key, mag)
    if not abs(m) < np.inf:
        return np.nan, 0.0, 0.0
    total, served = _guess_walk(base, bits, off, rs, rst, n, step, a, b, m, block)
    if not served:
        return np.nan, 0.0, 0.0
    return m, total[0], total[1]


@njit(cache=True)
def _guess_piece(base, bits, off, rs, rst, n, step, a, b, block):
    """:func:`_guess_range` called, not inlined, from the split kernel's parallel loop (its
    compile time; a piece is at least 2**15 elements)."""
    return _guess_range(base, bits, off, rs, rst, n, step, a, b, block)


@njit(cache=True, inline="always")
def _row_guess(base, bits, off, rs, rst, n, step, total, block):
    """The result from :func:`_guess_range` over a whole output, or NaN when not served.

    Terms carry the polynomial's relative error (2**-37.8), so ``S`` is within 2**-36.9 and the
    result within 2**-36.8 in absolute terms: below half a float32 ulp when ``|result| >= 2**-12``;
    smaller results (GUARD = 2**-8) take the exact-maximum path, with its tie count.
    """
    m, hi, lo = _guess_range(base, bits, off, rs, rst, n, step, 0, total, block)
    if math.isnan(m):
        return np.nan
    r = _finish(base, m, hi, lo, 0.0)  # the sum includes the ties: at least 1
    return r if abs(r) >= GUARD else np.nan


@njit(cache=True)
def _row_max(bits, off, rs, rst, n, step, a, b):
    """(key, magnitude) maxima over reduced elements ``a..b`` (C order) of one output."""
    return _max_walk(bits, bits, off, rs, rst, n, step, a, b, 0.0, b - a)[0]


@njit(cache=True)
def _row_sums(base, off, rs, rst, n, step, a, b, m, block):
    """Compensated tail (hi, lo) and tie count over reduced elements ``a..b`` of one output."""
    return _terms_walk(base, base, off, rs, rst, n, step, a, b, m, block)[0]


@njit(cache=True, inline="always")
def _per_output(n, rs):
    """The elements of one output's reduction: ``n`` per reduced row (rows: the row's length;
    columns: 1) times the reduced rows ``rs``."""
    total = n
    for d in range(rs.size):
        total *= rs[d]
    return total


@njit(cache=True, inline="always")
def _split_task(task, pieces, offset, ks, kst, total):
    """Task ``task`` of a split row kernel: its output ``t``, the output's offset and the
    task's range ``a..b`` of that output's ``total`` reduced elements (piece ``task % pieces``
    of ``pieces`` near-equal ranges)."""
    t = task // pieces
    p = task - t * pieces
    return t, offset + _offset(t, ks, kst), total * p // pieces, total * (p + 1) // pieces


@njit(cache=True)
def _row_narrow(base, bits, offset, ks, kst, rs, rst, n, step, block, t):
    """ReduceLogSumExp of output ``t`` of the row kernels, float16, bfloat16 and float32: by
    the guessed shift (:func:`_row_guess`), else read once in chunks (:func:`_row_online`)."""
    off = offset + _offset(t, ks, kst)
    total = _per_output(n, rs)
    r = _row_guess(base, bits, off, rs, rst, n, step, total, block)
    if not math.isnan(r):
        return r
    return _row_exact(base, bits, off, rs, rst, n, step, total, block)


@njit(cache=True)
def _row_exact(base, bits, off, rs, rst, n, step, total, block):
    """The output at ``off`` read once with exact maxima and ties (:func:`_row_online`): where
    a guessed shift did not serve."""
    m, mag, hi, lo, ties = _row_online(base, bits, off, rs, rst, n, step, 0, total, block)
    if _is_nan(bits, mag):
        return np.nan
    return _finish(base, m, hi, lo, ties)


@njit(cache=True)
def _is_nan(bits, mag):
    """Whether the largest magnitude bits ``mag`` are a NaN's."""
    return math.isnan(_from_key(bits, 0, mag))


@njit(cache=True)
def _row_online(base, bits, off, rs, rst, n, step, a, b, block):
    """Narrow floats: one read from memory. Each chunk of CHUNK elements finds its maximum,
    rescales the sums so far when it grew (a float64 rounding per rescale, invisible in a
    float32 result), then adds its terms while it is in cache.

    Returns (maximum, largest magnitude bits, tail hi, tail lo, ties); NaN shows in the bits.
    """
    m = -np.inf
    top = 0
    hi = 0.0
    lo = 0.0
    ties = 0.0
    pos = a
    while pos < b:
        end = min(b, pos + CHUNK)
        key, mag = _row_max(bits, off, rs, rst, n, step, pos, end)
        top = max(top, mag)
        c = _from_key(bits, key, 0)  # NaN for a NaN key: then top tells, and c is not used
        if c > m:
            if m > -np.inf:
                hi = (hi + lo + ties) * math.exp(m - c)
                lo = 0.0
                ties = 0.0
            m = c
        if abs(m) < np.inf:
            part = _row_sums(base, off, rs, rst, n, step, pos, end, m, block)
            hi, lo, ties = _fold_terms((hi, lo, ties), part)
        pos = end
    return m, top, hi, lo, ties


@njit(cache=True)
def _prefetch_row(bits, offset, ks, kst, rs, n, step, t, outputs):
    """Prefetch the first CHUNK elements of contiguous row ``t``: its memory arrives while the
    current row's exponentials (computed from cache) keep the core busy."""
    if t >= outputs or rs.size != 0 or step != 1:
        return
    start = offset + _offset(t, ks, kst)
    line = max(1, 64 // bits.itemsize)
    for i in range(0, min(n, CHUNK), line):
        prefetch(bits, start + i)


@njit(cache=True, parallel=True)
def _rows_parallel(base, bits, offset, geo, block, out):
    """The row kernel, runs of adjacent outputs shared out across threads (CHUNKS_PER_THREAD
    runs per thread, each thread its own first: :func:`._common.next_chunk`), each by
    :func:`_rows_between` (float64 finishes a run's outputs together)."""
    threads = threads_now()
    chunks = min(out.size, CHUNKS_PER_THREAD * threads)
    least = np.inf
    counters = chunk_counters(threads)
    for thread in prange(threads):
        i, turn = next_chunk(counters, thread, 0, threads, chunks)
        while i < chunks:
            least = min(least, _rows_between(base, bits, offset, geo, block, out,
                                             out.size * i // chunks, out.size * (i + 1) // chunks))
            i, turn = next_chunk(counters, thread, turn, threads, chunks)
    return least


@njit(cache=True, parallel=True)
def _short_rows(base, bits, offset, n, out):
    """Adjacent C-contiguous rows of ``n`` elements from ``offset``, at most SHORT_ROW_BYTES
    each: runs of outputs shared out as by :func:`_rows_parallel`, each output's exact maximum,
    then its terms (the row still in cache), read in place with no walk, each run finished
    together (:func:`_finish_all`). The arithmetic and the bits of :func:`_rows_two_pass`,
    without its per-output setup (offsets, geometry, prefetch): 2-3x on rows of 3-16. Compiled
    again for each row length ``n`` from 2 to TINY_ROW with ROW_LENGTH = ``n`` (``_TINY_ROWS``):
    the rows then in one loop across the outputs (:func:`_tiny_row_sums`)."""
    threads = threads_now()
    chunks = min(out.size, CHUNKS_PER_THREAD * threads)
    least = np.inf
    counters = chunk_counters(threads)
    for thread in prange(threads):
        i, turn = next_chunk(counters, thread, 0, threads, chunks)
        while i < chunks:
            a, b = out.size * i // chunks, out.size * (i + 1) // chunks
            sums = np.empty((5, b - a))  # peaks, his, los, ties, results: one allocation
            if ROW_LENGTH:  # a constant of the compiled variant
                _tiny_row_sums(base, bits, offset + a * ROW_LENGTH, ROW_LENGTH, sums[0],
                               sums[1], sums[2], sums[3])
            else:
                _short_row_sums(base, bits, offset, n, a, sums)
            _finish_all(base, sums[0], sums[1], sums[2], sums[3], sums[4])
            least = min(least, _store_all(out, a, sums[4]))
            i, turn = next_chunk(counters, thread, turn, threads, chunks)
    return least


@njit(cache=True, parallel=True)
def _long_rows(base, bits, offset, n, block, out):
    """Adjacent C-contiguous narrow-float rows of ``n`` elements from ``offset``, longer than
    SHORT_ROW_BYTES: runs of outputs shared out as by :func:`_rows_parallel`, each row read
    once with a guessed shift as :func:`_row_guess` reads it (:func:`_long_row_sums`) but in
    place, with no walk, each run finished together (:func:`_finish_all`); the outputs the
    guess does not serve read again (:func:`_row_exact`). The bits of :func:`_rows_parallel`,
    without its per-output setup (offsets, geometry, a finish per output)."""
    threads = threads_now()
    chunks = min(out.size, CHUNKS_PER_THREAD * threads)
    least = np.inf
    counters = chunk_counters(threads)
    for thread in prange(threads):
        i, turn = next_chunk(counters, thread, 0, threads, chunks)
        while i < chunks:
            a, b = out.size * i // chunks, out.size * (i + 1) // chunks
            sums = np.zeros((5, b - a))  # peaks, his, los, ties (none: 0), results
            _long_row_sums(base, bits, offset, n, block, a, sums)
            _finish_all(base, sums[0], sums[1], sums[2], sums[3], sums[4])
            none = np.zeros(0, np.int64)
            for j in range(b - a):
                if not (abs(sums[4, j]) >= GUARD and abs(sums[0, j]) < np.inf):
                    sums[4, j] = _row_exact(base, bits, offset + (a + j) * n, none, none, n, 1,
                                            n, block)
            least = min(least, _store_all(out, a, sums[4]))
            i, turn = next_chunk(counters, thread, turn, threads, chunks)
    return least


@njit(cache=True, inline="always")
def _long_row_sums(base, bits, offset, n, block, a, sums):
    """``sums[:3]`` = the guessed shifts and sums (hi, lo) of :func:`_long_rows`' outputs from
    ``a`` on, as :func:`_guess_range` gives them (the shift NaN where the guess does not serve:
    an infinite probe maximum, a NaN, a block over the cap); each next block of the row
    prefetched."""
    for j in range(sums.shape[1]):
        start = offset + (a + j) * n
        key, mag = _max_contiguous(bits, start, PROBE, 0.0)
        m = _from_key(bits, key, mag)
        state = _no_total()
        served = abs(m) < np.inf
        done = 0
        far = start
        while served and done < n:
            c = min(block, n - done)
            part, far = _guess_ahead(base, bits, start + done, c, m, far, start + n)
            served = not _over_cap(part)
            state = _fold_sum(state, part)
            done += c
        sums[0, j] = m if served else np.nan
        sums[1, j], sums[2, j] = state


@njit(cache=True, inline="always")
def _short_row_sums(base, bits, offset, n, a, sums):
    """``sums[:4]`` = the maxima, terms and ties of :func:`_short_rows`' outputs from ``a`` on,
    one row at a time."""
    for j in range(sums.shape[1]):
        start = offset + (a + j) * n
        key, mag = _max_contiguous(bits, start, n, 0.0)
        m = _from_key(bits, key, mag)
        hi, lo, ties = _no_terms()  # NaN or infinite m: finished as m itself
        if abs(m) < np.inf:
            hi, lo, ties = _fold_terms(_no_terms(), _terms_contiguous(base, start, n, m))
        sums[0, j], sums[1, j], sums[2, j], sums[3, j] = m, hi, lo, ties


@njit(cache=True, inline="always")
def _tiny_row_sums(base, bits, start, n, peaks, his, los, ties):
    """Outputs ``j`` of :func:`_short_rows` each reducing the ``n`` (a constant: at most
    TINY_ROW) elements from ``start + j n``: ``peaks`` their maxima, ``his``/``los``/``ties``
    their terms and ties as :func:`_add_terms` gives them, folded as :func:`_fold_terms` folds
    them into nothing; in one loop that vectorizes across the outputs (a loop per row of 2-8
    elements runs scalar, 3-5x slower). Branch-free: NaN or infinite maxima get terms that
    :func:`_finish` does not use."""
    wide_vectors()
    first = np.uint64(start)  # unsigned indices: no negative-index tests, the loads vectorize
    length = np.uint64(n)
    for j in range(np.uint64(peaks.size)):
        at = first + j * length
        key = _KEY_FLOOR
        mag = 0
        for i in range(length):
            key = max(key, _key(bits, at + i))
            mag = max(mag, _magnitude(bits, at + i))
        m = _from_key(bits, key, mag)
        tail = 0.0
        rest = 0.0
        tie = 0.0
        for i in range(length):
            if is_float64(base):
                big, small = _term_parts(base[at + i], m)
                tail += big
                rest += small
            else:
                x = _wide(base[at + i])
                e = _term(base, x - m)
                tail += e if x < m else 0.0
                tie += 1.0 if x == m else 0.0
        peaks[j] = m
        his[j] = tail
        los[j] = rest
        ties[j] = tie


@njit(cache=True)
def _rows_serial(base, bits, offset, geo, block, out):
    """The row kernel on the calling thread."""
    return _rows_between(base, bits, offset, geo, block, out, 0, out.size)


def _rows_between(base, bits, offset, geo, block, out, a, b):  # pragma: no cover
    """njit-only: outputs ``a..b`` of the row kernel, float64 by :func:`_rows_two_pass`,
    narrower floats by :func:`_narrow_rows`; returns their least finite |result|."""
    raise NotImplementedError


@overload(_rows_between)
def _rows_between_impl(base, bits, offset, geo, block, out, a, b):
    if base.dtype == types.float64:
        return lambda base, bits, offset, geo, block, out, a, b: _rows_two_pass(
            base, bits, offset, geo, block, out, a, b)
    return _narrow_rows


def _narrow_rows(base, bits, offset, geo, block, out, a, b):  # pragma: no cover
    """:func:`_rows_between` of float16, bfloat16 and float32: outputs of at most
    SHORT_ROW_BYTES as float64's (:func:`_rows_two_pass`, each next row prefetched), longer
    ones each read once (their walk prefetches its next block itself; a prefetch of the next
    row's first chunk too cost 2-12%)."""
    ks, kst, rs, rst, n, step = _row_dims(geo)
    if _per_output(n, rs) * base.itemsize <= SHORT_ROW_BYTES:
        return _rows_two_pass(base, bits, offset, geo, block, out, a, b)
    least = np.inf
    for t in range(a, b):
        r = _row_narrow(base, bits, offset, ks, kst, rs, rst, n, step, block, t)
        least = min(least, abs(r)) if r == r else least
        store(out, t, r)
    return least


@njit(cache=True)
def _rows_two_pass(base, bits, offset, geo, block, out, a, b):
    """Outputs ``a..b`` of the row kernel, float64 and short narrow rows: each output's exact
    maximum, then its terms (its rows still in cache); the finishes of all in one loop that
    vectorizes (:func:`_finish_all`: one at a time, each output's log and Newton step cost as
    much as a short row's terms)."""
    ks, kst, rs, rst, n, step = _row_dims(geo)
    total = _per_output(n, rs)
    sums = np.empty((5, b - a))  # peaks, his, los, ties, results: one allocation
    for t in range(a, b):
        _prefetch_row(bits, offset, ks, kst, rs, n, step, t + 1, out.size)
        off = offset + _offset(t, ks, kst)
        key, mag = _row_max(bits, off, rs, rst, n, step, 0, total)
        m = _from_key(bits, key, mag)
        hi, lo, ties = _no_terms()  # NaN or infinite m: finished as m itself
        if abs(m) < np.inf:
            hi, lo, ties = _row_sums(base, off, rs, rst, n, step, 0, total, m, block)
        j = t - a
        sums[0, j] = m
        sums[1, j] = hi
        sums[2, j] = lo
        sums[3, j] = ties
    _finish_all(base, sums[0], sums[1], sums[2], sums[3], sums[4])
    return _store_all(out, a, sums[4])


@njit(cache=True, parallel=True)
def _rows_split(base, bits, offset, geo, block, pieces, out):
    """Rows with each output's reduction cut in ``pieces`` ranges (few outputs, long rows)."""
    ks, kst, rs, rst, n, step = _row_dims(geo)
    outputs = out.size
    total = _per_output(n, rs)
    tasks = outputs * pieces
    keys = np.empty(tasks, np.int64)
    mags = np.empty(tasks, np.int64)
    threads = threads_now()
    counters = chunk_counters(threads)
    for thread in prange(threads):
        task, turn = next_chunk(counters, thread, 0, threads, tasks)
        while task < tasks:
            _, off, a, b = _split_task(task, pieces, offset, ks, kst, total)
            key, mag = _row_max(bits, off, rs, rst, n, step, a, b)
            keys[task] = key
            mags[task] = mag
            task, turn = next_chunk(counters, thread, turn, threads, tasks)
    peaks = np.empty(outputs)
    for t in range(outputs):
        peaks[t] = _from_key(bits, keys[t * pieces:(t + 1) * pieces].max(),
                             mags[t * pieces:(t + 1) * pieces].max())
    his = np.zeros(tasks)
    los = np.zeros(tasks)
    ties = np.zeros(tasks)
    counters = chunk_counters(threads)
    for thread in prange(threads):
        task, turn = next_chunk(counters, thread, 0, threads, tasks)
        while task < tasks:
            t, off, a, b = _split_task(task, pieces, offset, ks, kst, total)
            m = peaks[t]
            if abs(m) < np.inf:
                hi, lo, k = _row_sums(base, off, rs, rst, n, step, a, b, m, block)
                his[task] = hi
                los[task] = lo
                ties[task] = k
            task, turn = next_chunk(counters, thread, turn, threads, tasks)
    res = np.empty(outputs)
    for t in range(outputs):
        state = _no_terms()
        for task in range(t * pieces, (t + 1) * pieces):
            state = _fold_terms(state, (his[task], los[task], ties[task]))
        hi, lo, k = state
        res[t] = _finish(base, peaks[t], hi, lo, k)
    return _store_all(out, 0, res)


@njit(cache=True)
def _merge_guesses(base, guesses, sums, pieces, out):
    """Each output's ``pieces`` guessed partial sums rescaled to the largest shift, added in
    order and finished into ``out``; the least |result|, or NaN (and ``out`` incomplete) when
    a guess failed or a result is under GUARD."""
    least = np.inf
    for t in range(out.size):
        r = _merged_guess(base, guesses, sums, t * pieces, pieces)
        if math.isnan(r):
            return np.nan
        least = min(least, abs(r))
        store(out, t, r)
    return least


@njit(cache=True, inline="always")
def _merged_guess(base, guesses, sums, first, pieces):
    """One output's result from its ``pieces`` guessed partial sums from ``first`` on, rescaled
    to the largest shift and added in order; NaN when a guess failed (NaN) or the result is
    under GUARD."""
    m = -np.inf
    for task in range(first, first + pieces):
        g = guesses[task]  # finite, or NaN for a failed guess
        if math.isnan(g):
            return np.nan
        if g > m:
            m = g
    hi = 0.0
    lo = 0.0
    for task in range(first, first + pieces):
        hi, lo = neumaier(hi, lo, sums[task] * math.exp(guesses[task] - m))
    r = _finish(base, m, hi, lo, 0.0)
    return r if abs(r) >= GUARD else np.nan


@njit(cache=True)
def _merge_online(base, bits, peaks, tops, his, los, ties, pieces, out):
    """Each output's ``pieces`` exact partial states (:func:`_row_online`) merged in order and
    finished into ``out``: NaN anywhere gives NaN, the pieces at the largest maximum add their
    sums and ties unscaled, the others rescaled. Returns the least finite |result|."""
    res = np.empty(out.size)
    for t in range(out.size):
        first = t * pieces
        m = peaks[first:first + pieces].max()
        if _is_nan(bits, tops[first:first + pieces].max()):
            res[t] = np.nan
            continue
        hi = 0.0
        lo = 0.0
        k = 0.0
        if abs(m) < np.inf:
            for task in range(first, first + pieces):
                if peaks[task] == m:
                    hi, lo, k = _fold_terms((hi, lo, k), (his[task], los[task], ties[task]))
                elif peaks[task] > -np.inf:
                    scaled = (his[task] + los[task] + ties[task]) * math.exp(peaks[task] - m)
                    hi, lo = neumaier(hi, lo, scaled)
        res[t] = _finish(base, m, hi, lo, k)
    return _store_all(out, 0, res)


@njit(cache=True, parallel=True)
def _rows_online_split(base, bits, offset, geo, block, pieces, out):
    """Narrow floats, few outputs: every piece reduces its range in one read with a guessed
    shift (:func:`_guess_range`), the pieces rescaled to the largest and added in order; when
    a guess fails or a result is under GUARD, all pieces again with exact maxima
    (:func:`_row_online`)."""
    ks, kst, rs, rst, n, step = _row_dims(geo)
    outputs = out.size
    total = _per_output(n, rs)
    tasks = outputs * pieces
    guesses = np.empty(tasks)
    sums = np.empty(tasks)
    threads = threads_now()
    counters = chunk_counters(threads)
    for thread in prange(threads):
        task, turn = next_chunk(counters, thread, 0, threads, tasks)
        while task < tasks:
            _, off, a, b = _split_task(task, pieces, offset, ks, kst, total)
            m, hi, lo = _guess_piece(base, bits, off, rs, rst, n, step, a, b, block)
            guesses[task] = m
            sums[task] = hi + lo
            task, turn = next_chunk(counters, thread, turn, threads, tasks)
    least = _merge_guesses(base, guesses, sums, pieces, out)
    if not math.isnan(least):
        return least
    peaks = np.empty(tasks)
    tops = np.empty(tasks, np.int64)
    his = np.empty(tasks)
    los = np.empty(tasks)
    ties = np.empty(tasks)
    counters = chunk_counters(threads)
    for thread in prange(threads):
        task, turn = next_chunk(counters, thread, 0, threads, tasks)
        while task < tasks:
            _, off, a, b = _split_task(task, pieces, offset, ks, kst, total)
            m, top, hi, lo, k = _row_online(base, bits, off, rs, rst, n, step, a, b, block)
            peaks[task] = m
            tops[task] = top
            his[task] = hi
            los[task] = lo
            ties[task] = k
            task, turn = next_chunk(counters, thread, turn, threads, tasks)
    return _merge_online(base, bits, peaks, tops, his, los, ties, pieces, out)


@njit(cache=True, parallel=True)
def _slab_rows(base, bits, slabs, n, pieces, out):
    """Narrow floats, a C-contiguous (slabs, outputs, n) input reduced over its first and last
    dims: ``pieces`` ranges of slabs, shared out across threads, each read once in memory
    order (:func:`_slab_piece`); each output's pieces rescaled to the largest shift and added
    in order (:func:`_merged_guess`); outputs a guess did not serve read again with exact
    maxima (:func:`_row_exact`). The pieces depend on the shape alone: so do the results."""
    outputs = out.size
    guesses = np.empty(outputs * pieces)  # output t's piece p at t * pieces + p
    sums = np.empty(outputs * pieces)
    threads = threads_now()
    counters = chunk_counters(threads)
    for thread in prange(threads):
        p, turn = next_chunk(counters, thread, 0, threads, pieces)
        while p < pieces:
            _slab_piece(base, bits, slabs * p // pieces, slabs * (p + 1) // pieces, n, p, pieces,
                        guesses, sums)
            p, turn = next_chunk(counters, thread, turn, threads, pieces)
    least = np.inf
    redo = np.zeros(outputs, np.bool_)
    for t in range(outputs):
        r = _merged_guess(base, guesses, sums, t * pieces, pieces)
        if math.isnan(r):
            redo[t] = True
        else:
            least = min(least, abs(r))
            store(out, t, r)
    if not redo.any():
        return least
    rs = np.array([slabs], np.int64)
    rst = np.array([outputs * n], np.int64)
    counters = chunk_counters(threads)
    for thread in prange(threads):
        t, turn = next_chunk(counters, thread, 0, threads, outputs)
        while t < outputs:
            if redo[t]:
                r = _row_exact(base, bits, t * n, rs, rst, n, 1, slabs * n, LONG_BLOCK)
                store(out, t, r)
                least = min(least, abs(r) if r == r else np.inf)
            t, turn = next_chunk(counters, thread, turn, threads, outputs)
    return least


@njit(cache=True)
def _slab_piece(base, bits, first, last, n, p, pieces, guesses, sums):
    """Slabs ``first..last`` of :func:`_slab_rows`, in memory order: each output's shift
    guessed from the first PROBE elements of its row in slab ``first``, then every row's
    terms added to its output's compensated sum (LONG_BLOCK elements at a time, the lines
    ahead prefetched: the hardware prefetcher alone leaves one thread well short of the
    memory); written to the outputs' piece ``p``, the guess NaN where it does not serve
    (:func:`_guess_range`'s rule)."""
    outputs = guesses.size // pieces
    pitch = outputs * n  # elements per slab
    his = np.zeros(outputs)
    los = np.zeros(outputs)
    for t in range(outputs):
        key, mag = _max_contiguous(bits, first * pitch + t * n, min(n, PROBE), 0.0)
        m = _from_key(bits, key, mag)
        guesses[t * pieces + p] = m if abs(m) < np.inf else np.nan
    far = 0  # how far the prefetches reached: rows are read in memory order
    for s in range(first, last):
        for t in range(outputs):
            m = guesses[t * pieces + p]
            if math.isnan(m):
                continue
            start = s * pitch + t * n
            state = (his[t], los[t])
            far = max(far, start)
            for a in range(0, n, LONG_BLOCK):
                c = min(LONG_BLOCK, n - a)
                # the lines ahead, of this row or the next ones
                part, far = _guess_ahead(base, bits, start + a, c, m, far, bits.size)
                if _over_cap(part):
                    guesses[t * pieces + p] = np.nan
                    break
                state = _fold_sum(state, part)
            his[t], los[t] = state
    for t in range(outputs):
        sums[t * pieces + p] = his[t] + los[t]


# ----------------------------------------------------------------------------- columns


@njit(cache=True)
def _keys_slice(seg, keys, mags):
    """Raise adjacent outputs' key and magnitude maxima by one row slice."""
    wide_vectors()
    for j in range(seg.size):
        keys[j] = max(keys[j], _key(seg, j))
        mags[j] = max(mags[j], _magnitude(seg, j))


@njit(cache=True)
def _keys4(s0, s1, s2, s3, keys, mags):
    """Raise each output's key and magnitude maxima by its elements of four row slices."""
    wide_vectors()
    for j in range(keys.size):
        k = max(max(_key(s0, j), _key(s1, j)), max(_key(s2, j), _key(s3, j)))
        keys[j] = max(keys[j], k)
        g = max(max(_magnitude(s0, j), _magnitude(s1, j)),
                max(_magnitude(s2, j), _magnitude(s3, j)))
        mags[j] = max(mags[j], g)


@njit(cache=True)
def _terms_slice(seg, peaks, his, los, ties):
    """Add one row slice's terms into the per-output accumulators (float64: the terms' parts
    on the 2**-40 grid into ``his``, exact for BLOCK rows, ties' 1s included, the rest into
    ``los``; narrower: as :func:`_add_terms`)."""
    wide_vectors()
    if is_float64(seg):
        for j in range(seg.size):
            v, rest = _term_parts(seg[j], peaks[j])
            his[j] += v
            los[j] += rest
    else:
        for j in range(seg.size):
            x = _wide(seg[j])
            m = peaks[j]
            his[j] += _term(seg, x - m) if x < m else 0.0
            ties[j] += 1.0 if x == m else 0.0


@njit(cache=True)
def _terms4(s0, s1, s2, s3, peaks, his, los, ties):
    """Four rows' terms into the accumulators (float64: as :func:`_terms_slice`)."""
    wide_vectors()
    if is_float64(s0):
        for j in range(peaks.size):
            m = peaks[j]
            v0, r0 = _term_parts(s0[j], m)
            v1, r1 = _term_parts(s1[j], m)
            v2, r2 = _term_parts(s2[j], m)
            v3, r3 = _term_parts(s3[j], m)
            his[j] += (v0 + v1) + (v2 + v3)  # exact: all on the 2**-40 grid
            los[j] += (r0 + r1) + (r2 + r3)
    else:
        for j in range(peaks.size):
            m = peaks[j]
            x0 = _wide(s0[j])
            x1 = _wide(s1[j])
            x2 = _wide(s2[j])
            x3 = _wide(s3[j])
            t01 = (_term(s0, x0 - m) if x0 < m else 0.0) + (_term(s0, x1 - m) if x1 < m else 0.0)
            t23 = (_term(s0, x2 - m) if x2 < m else 0.0) + (_term(s0, x3 - m) if x3 < m else 0.0)
            his[j] += t01 + t23
            ties[j] += (((1.0 if x0 == m else 0.0) + (1.0 if x1 == m else 0.0))
                        + ((1.0 if x2 == m else 0.0) + (1.0 if x3 == m else 0.0)))


@njit(cache=True)
def _guess_slice(seg, peaks, his):
    """``his[j] += exp(x_j - peaks[j])`` over a row slice against guessed shifts: no compare,
    no tie count (:func:`_term_open`)."""
    wide_vectors()
    for j in range(seg.size):
        his[j] += _term_open(_wide(seg[j]) - peaks[j])


@njit(cache=True)
def _guess4(s0, s1, s2, s3, peaks, his):
    """Four rows' terms shifted by the guessed ``peaks``: no compare, no tie count."""
    wide_vectors()
    for j in range(peaks.size):
        m = peaks[j]
        his[j] += ((_term_open(_wide(s0[j]) - m) + _term_open(_wide(s1[j]) - m))
                   + (_term_open(_wide(s2[j]) - m) + _term_open(_wide(s3[j]) - m)))


# The three walks of a block of adjacent outputs over their reduced rows: the maxima, the
# terms and ties against them, the terms against guessed shifts. Only the last, the one read
# of narrow floats, adds short slices one at a time: the exact passes run mostly in cache,
# where four-row groups are faster (docs/kernel-design.md, "Column prefetch").
_column_maxima = column_walk("maxima", _keys_slice, _keys4, read=_read_bits,
                             one_slice=False)
_column_terms = column_walk("terms", _terms_slice, _terms4, one_slice=False)
_column_guesses = column_walk("guesses", _guess_slice, _guess4)


@njit(cache=True)
def _column_sums(base, bits, off, width, step, rs, rst, a, b, peaks, his, los, ties):
    """The terms and ties of reduced rows ``a..b`` of a column block against ``peaks`` into
    ``his``/``los``/``ties``. float64: BLOCK rows at a time, the terms' grid parts added exactly
    and each block's sums folded in by Neumaier (one add per term, not a compensated one)."""
    if not is_float64(base):
        _column_terms(base, bits, off, width, step, rs, rst, a, b, (peaks, his, los, ties))
        return
    grid = np.empty(width)
    rest = np.empty(width)
    for r in range(a, b, BLOCK):
        grid[:] = 0.0
        rest[:] = 0.0
        _column_terms(base, bits, off, width, step, rs, rst, r, min(b, r + BLOCK),
                      (peaks, grid, rest, ties))
        for j in range(width):
            his[j], err = exact_add(his[j], grid[j], True)  # terms are >= 0
            los[j] = (los[j] + err) + rest[j]


@njit(cache=True)
def _column_item(base, bits, offset, ks, kst, cols, cstep, rs, rst, width, item, out):
    """The outputs of one column block; narrow floats try a guessed shift first (one read),
    then redo the outputs it did not serve exactly. Returns the least finite |result|."""
    blocks = (cols + width - 1) // width
    k = item // blocks
    j0 = (item - k * blocks) * width
    w = min(width, cols - j0)
    off = offset + _offset(k, ks, kst) + j0 * cstep
    o = k * cols + j0
    total = _per_output(1, rs)
    keys = np.full(w, _KEY_FLOOR, np.int64)
    mags = np.zeros(w, np.int64)
    peaks = np.empty(w)
    his = np.zeros(w)
    los = np.zeros(w)
    ties = np.zeros(w)
    res = np.empty(w)
    narrow = not is_float64(base)
    if narrow:
        if _column_guess_served(base, bits, off, w, cstep, rs, rst, total, keys, mags, peaks,
                                his, res):
            return _store_all(out, o, res)
        guessed = res.copy()
        keys[:] = _KEY_FLOOR
        mags[:] = 0
        his[:] = 0.0
    _column_maxima(base, bits, off, w, cstep, rs, rst, 0, total, (keys, mags))
    finite = False
    for j in range(w):
        peaks[j] = _from_key(bits, keys[j], mags[j])
        finite = finite or abs(peaks[j]) < np.inf
    if finite:
        _column_sums(base, bits, off, w, cstep, rs, rst, 0, total, peaks, his, los, ties)
    _finish_all(base, peaks, his, los, ties, res)
    if narrow:
        for j in range(w):
            res[j] = guessed[j] if guessed[j] == guessed[j] else res[j]
    return _store_all(out, o, res)


def _column_guess_served(base, bits, off, w, cstep, rs, rst, total, keys, mags, peaks, his,
                         res):  # pragma: no cover - njit only
    """njit-only, narrow floats: ``res`` = each output's result from one read with guessed
    shifts (:func:`_column_guess_pass`, :func:`_guessed`; NaN where the guess did not serve);
    whether it served them all. float64 never guesses: False, and none of it compiled."""
    raise NotImplementedError


@overload(_column_guess_served)
def _column_guess_served_impl(base, bits, off, w, cstep, rs, rst, total, keys, mags, peaks,
                              his, res):
    if base.dtype == types.float64:
        return (lambda base, bits, off, w, cstep, rs, rst, total, keys, mags, peaks, his, res:
                False)

    def impl(base, bits, off, w, cstep, rs, rst, total, keys, mags, peaks, his, res):
        _column_guess_pass(base, bits, off, w, cstep, rs, rst, 0, total, keys, mags, peaks,
                           his)
        for j in range(w):
            res[j] = _guessed(base, peaks[j], his[j])
        return not np.isnan(res).any()
    return impl


@njit(cache=True, inline="always")
def _guessed(base, m, s):
    """The result from a guessed shift ``m`` and its sum of terms ``s`` (ties included), or
    NaN where the guess does not serve, as in :func:`_guess_range` and :func:`_row_guess`: an
    infinite guess, a NaN, an element above ``m + MARGIN``, a result under GUARD. Branch-free,
    like :func:`_finish`."""
    r = _finish(base, m, s, 0.0, 0.0)
    serves = (abs(m) < np.inf) & (s <= _BLOCK_CAP) & (abs(r) >= GUARD)
    return r if serves else np.nan


@njit(cache=True)
def _finish_all(base, peaks, his, los, ties, res):
    """``res[j]`` = output ``j``'s :func:`_finish`: a loop that vectorizes, log and all
    (``res`` apart from the inputs: with ``res`` = ``his`` the overlap check runs it scalar)."""
    wide_vectors()
    for j in range(res.size):
        res[j] = _finish(base, peaks[j], his[j], los[j], ties[j])


@njit(cache=True)
def _store_all(out, o, res):
    """``res`` into ``out`` from ``o``, each rounded once; the least finite |result|."""
    least = np.inf
    for j in range(res.size):
        r = res[j]
        least = min(least, abs(r)) if r == r else least
        store(out, o + j, r)
    return least


@njit(cache=True)
def _column_guess_pass(base, bits, off, width, step, rs, rst, a, b, keys, mags, peaks, his):
    """Narrow floats, one read of reduced rows ``a..b`` of a column block: ``his`` = the sums
    of ``exp(x - peaks)``, ``peaks`` the maxima of their first PROBE_ROWS rows (elements: every
    sum >= 1)."""
    _column_maxima(base, bits, off, width, step, rs, rst, a, min(b, a + PROBE_ROWS),
                   (keys, mags))
    for j in range(width):
        peaks[j] = _from_key(bits, keys[j], mags[j])
    _column_guesses(base, bits, off, width, step, rs, rst, a, b, (peaks, his))


@njit(cache=True, parallel=True)
def _columns_parallel(base, bits, offset, geo, width, out):
    """The column kernel, work items of ``width`` adjacent outputs shared out across threads."""
    ks, kst, cols, cstep, rs, rst = _column_dims(geo)
    blocks = (cols + width - 1) // width
    least = np.inf
    threads = threads_now()
    count = out.size // cols * blocks
    counters = chunk_counters(threads)
    for thread in prange(threads):
        item, turn = next_chunk(counters, thread, 0, threads, count)
        while item < count:
            least = min(least, _column_item(base, bits, offset, ks, kst, cols, cstep, rs, rst,
                                            width, item, out))
            item, turn = next_chunk(counters, thread, turn, threads, count)
    return least


@njit(cache=True)
def _columns_serial(base, bits, offset, geo, width, out):
    """The column kernel on the calling thread; returns the smallest result (the bound path
    compares it with the limit under which results are recomputed exactly)."""
    ks, kst, cols, cstep, rs, rst = _column_dims(geo)
    blocks = (cols + width - 1) // width
    least = np.inf
    for item in range(out.size // cols * blocks):
        r = _column_item(base, bits, offset, ks, kst, cols, cstep, rs, rst, width, item, out)
        least = min(least, r)
    return least


@njit(cache=True, parallel=True)
def _columns_split(base, bits, offset, geo, width, pieces, out):
    """Columns with the reduced rows cut in ``pieces`` ranges (few, narrow outputs). Narrow
    floats try one read with guessed shifts first (:func:`_split_guess_served`); otherwise, and
    for float64, two sweeps: the exact maxima, then the sums shifted by them."""
    ks, kst, cols, cstep, rs, rst = _column_dims(geo)
    outputs = out.size
    total = _per_output(1, rs)
    blocks = (cols + width - 1) // width
    tasks = outputs // cols * blocks * pieces
    least = _split_guess_served(base, bits, offset, ks, kst, cols, cstep, rs, rst, width,
                                pieces, out)
    if not math.isnan(least):
        return least
    keys = np.full((pieces, outputs), _KEY_FLOOR, np.int64)
    mags = np.zeros((pieces, outputs), np.int64)
    peaks = np.empty(outputs)
    his = np.zeros((pieces, outputs))
    los = np.zeros((pieces, outputs))
    ties = np.zeros((pieces, outputs))
    threads = threads_now()
    for sweep in range(2):  # first the maxima, then the sums shifted by them
        first = sweep == 0
        counters = chunk_counters(threads)
        for thread in prange(threads):
            i, turn = next_chunk(counters, thread, 0, threads, tasks)
            while i < tasks:
                p, o, w, off, a, b = _column_task(i, pieces, blocks, width, cols, cstep,
                                                  offset, ks, kst, total)
                if first:
                    _column_maxima(base, bits, off, w, cstep, rs, rst, a, b,
                                   (keys[p, o:o + w], mags[p, o:o + w]))
                else:
                    _column_sums(base, bits, off, w, cstep, rs, rst, a, b, peaks[o:o + w],
                                 his[p, o:o + w], los[p, o:o + w], ties[p, o:o + w])
                i, turn = next_chunk(counters, thread, turn, threads, tasks)
        if first:
            for t in range(outputs):
                peaks[t] = _from_key(bits, keys[:, t].max(), mags[:, t].max())
    res = np.empty(outputs)
    for t in range(outputs):
        state = _no_terms()
        for p in range(pieces):
            state = _fold_terms(state, (his[p, t], los[p, t], ties[p, t]))
        hi, lo, k = state
        res[t] = _finish(base, peaks[t], hi, lo, k)
    return _store_all(out, 0, res)


@njit(cache=True, inline="always")
def _column_task(task, pieces, blocks, width, cols, cstep, offset, ks, kst, total):
    """Split column task ``task``: its piece, first output, width, offset and row range."""
    item = task // pieces
    p = task - item * pieces
    k = item // blocks
    j0 = (item - k * blocks) * width
    off = offset + _offset(k, ks, kst) + j0 * cstep
    a = total * p // pieces
    return p, k * cols + j0, min(width, cols - j0), off, a, total * (p + 1) // pieces


def _split_guess_served(base, bits, offset, ks, kst, cols, cstep, rs, rst, width, pieces,
                        out):  # pragma: no cover - njit only
    """njit-only, narrow floats: ``out`` from one read of every piece with guessed shifts (the
    maxima of its first PROBE_ROWS rows), the pieces rescaled to the largest and added in
    order (:func:`_merge_guesses`); the least |result|, or NaN when that did not serve every
    output. float64: NaN."""
    raise NotImplementedError


@overload(_split_guess_served)
def _split_guess_served_impl(base, bits, offset, ks, kst, cols, cstep, rs, rst, width,
                             pieces, out):
    if base.dtype == types.float64:
        return (lambda base, bits, offset, ks, kst, cols, cstep, rs, rst, width, pieces, out:
                np.nan)

    def impl(base, bits, offset, ks, kst, cols, cstep, rs, rst, width, pieces, out):
        return _split_guesses(base, bits, offset, ks, kst, cols, cstep, rs, rst, width, pieces,
                              out)
    return impl


@njit(cache=True, parallel=True)
def _split_guesses(base, bits, offset, ks, kst, cols, cstep, rs, rst, width, pieces, out):
    """:func:`_split_guess_served` of the narrow floats."""
    total = _per_output(1, rs)
    blocks = (cols + width - 1) // width
    guesses = np.empty(out.size * pieces)
    sums = np.empty(out.size * pieces)
    threads = threads_now()
    count = out.size // cols * blocks * pieces
    counters = chunk_counters(threads)
    for thread in prange(threads):
        i, turn = next_chunk(counters, thread, 0, threads, count)
        while i < count:
            p, o, w, off, a, b = _column_task(i, pieces, blocks, width, cols, cstep, offset, ks,
                                              kst, total)
            keys = np.full(w, _KEY_FLOOR, np.int64)
            mags = np.zeros(w, np.int64)
            peaks = np.empty(w)
            his = np.zeros(w)
            _column_guess_pass(base, bits, off, w, cstep, rs, rst, a, b, keys, mags, peaks, his)
            for j in range(w):
                served = abs(peaks[j]) < np.inf and not _over_cap(his[j])
                guesses[(o + j) * pieces + p] = peaks[j] if served else np.nan
                sums[(o + j) * pieces + p] = his[j]
            i, turn = next_chunk(counters, thread, turn, threads, count)
    return _merge_guesses(base, guesses, sums, pieces, out)


# ----------------------------------------------------------------------------- small arrays


@njit(cache=True)
def _small_rows(base, geo, out):
    """A small C-contiguous array whose innermost dim is reduced, any other reduced axes
    (:func:`._common.memory_order_geometry`), one thread, in memory order: every output's
    maximum (integer keys), then its terms and ties, row by row. No per-row setup beyond an
    odometer step: short rows (8x128, 8x8x16) cost little more than their data.
    """
    wide_vectors()
    sizes, _, ost = merged_dims(geo)
    m = sizes.size
    n_in = sizes[m - 1]
    n_out = out.size
    keys = np.full(n_out, _KEY_FLOOR)
    mags = np.zeros(n_out, np.int64)
    sums = np.zeros((5, n_out))  # peaks, his, los, ties, results: one allocation
    peaks = sums[0]
    his = sums[1]
    los = sums[2]
    ties = sums[3]
    idx = np.zeros(m, np.int64)
    bits = _bits_view(base)
    block = BLOCK if is_float64(base) else LONG_BLOCK
    for first in (True, False):
        idx[:] = 0
        o = 0
        for t in range(base.size // n_in):
            if t:
                o = next_outer(idx, sizes, ost, m - 2, o)
            start = t * n_in
            if first:
                keys[o], mags[o] = _max_keys((keys[o], mags[o]),
                                             _max_contiguous(bits, start, n_in, 0.0))
                continue
            for b in range(0, n_in, block):
                part = _terms_contiguous(base, start + b, min(block, n_in - b), peaks[o])
                his[o], los[o], ties[o] = _fold_terms((his[o], los[o], ties[o]), part)
        if first:
            for o in range(n_out):
                peaks[o] = _from_key(bits, keys[o], mags[o])
    _finish_all(base, peaks, his, los, ties, sums[4])
    return _store_all(out, 0, sums[4])


@njit(cache=True)
def _small_columns(base, geo, out):
    """A small C-contiguous array whose innermost dim is kept (outer, middle layouts), or one
    piece of a large one's slabs (:func:`_slab_columns`), any reduced axes, one thread, in
    memory order: each row slice updates its adjacent outputs' maxima (pass 1), then their
    terms and ties (pass 2). Indices are unsigned (no negative-index wraparound code in the
    loops) and nothing is sliced per row: faster on narrow slices than the general column
    kernel, whose work items have setup. float64 adds the terms' grid parts plainly where each
    output has at most GRID_TERMS (exact; compensated beyond). Its setup and final loop repeat
    :func:`_small_rows`' on purpose (docs/kernel-design.md, "Deliberate separation and
    repetition").
    """
    wide_vectors()
    sizes, _, ost = merged_dims(geo)
    m = sizes.size
    n_in = sizes[m - 1]
    n_out = out.size
    keys = np.full(n_out, _KEY_FLOOR)
    mags = np.zeros(n_out, np.int64)
    sums = np.zeros((5, n_out))
    peaks = sums[0]
    his = sums[1]
    los = sums[2]
    ties = sums[3]
    idx = np.zeros(m, np.int64)
    bits = _bits_view(base)
    comp = is_float64(base)
    exact_grid = base.size // n_out <= GRID_TERMS  # terms per output
    for first in (True, False):
        idx[:] = 0
        o = 0
        for t in range(base.size // n_in):
            if t:
                o = next_outer(idx, sizes, ost, m - 2, o)
            ou = np.uint64(o)
            su = np.uint64(t * n_in)
            if first:
                for j in range(n_in):
                    q = ou + np.uint64(j)
                    r = su + np.uint64(j)
                    keys[q] = max(keys[q], _key(bits, r))
                    mags[q] = max(mags[q], _magnitude(bits, r))
            elif comp and exact_grid:  # the grid parts add up exactly: no error to keep
                for j in range(n_in):
                    q = ou + np.uint64(j)
                    v, rest = _term_parts(base[su + np.uint64(j)], peaks[q])
                    his[q] += v
                    los[q] += rest
            elif comp:
                for j in range(n_in):
                    q = ou + np.uint64(j)
                    v, rest = _term_parts(base[su + np.uint64(j)], peaks[q])
                    his[q], err = exact_add(his[q], v, True)
                    los[q] += err + rest
            else:
                for j in range(n_in):
                    q = ou + np.uint64(j)
                    x = _wide(base[su + np.uint64(j)])
                    p = peaks[q]
                    v = _term(base, min(x - p, 0.0))
                    his[q] += v if x < p else 0.0
                    ties[q] += 1.0 if x == p else 0.0
        if first:
            for o in range(n_out):
                peaks[o] = _from_key(bits, keys[o], mags[o])
    _finish_all(base, peaks, his, los, ties, sums[4])
    return _store_all(out, 0, sums[4])


def _slab_pieces(geo: np.ndarray, nbytes: int) -> np.ndarray:
    """The geometries of a memory-order ``geo``'s leading (kept) dim cut in near-equal pieces
    of at most SLAB_PIECE_BYTES (at least two), one per row, with each piece's first slab
    in the last column (:func:`_slab_columns`)."""
    slabs = int(geo[1])
    pieces = min(slabs, max(2, -(-nbytes // SLAB_PIECE_BYTES)))
    rows = np.empty((pieces, geo.size + 1), np.int64)
    for p in range(pieces):
        first, last = slabs * p // pieces, slabs * (p + 1) // pieces
        rows[p, :-1] = geo
        rows[p, 1] = last - first
        rows[p, -1] = first
    rows.flags.writeable = False
    return rows


@njit(cache=True, parallel=True)
def _slab_columns(base, bits, pieces, out):
    """:func:`_small_columns` of each piece of a C-contiguous input's leading kept dim
    (:func:`_slab_pieces`), the pieces shared out across threads: each output's arithmetic is
    the one-thread kernel's, so the results do not depend on the thread count."""
    inner = base.size // _slabs(pieces)  # elements per slab
    least = np.inf
    threads = threads_now()
    items = pieces.shape[0]
    counters = chunk_counters(threads)
    for thread in prange(threads):
        i, turn = next_chunk(counters, thread, 0, threads, items)
        while i < items:
            geo = pieces[i, :-1]
            sizes, _, ost = merged_dims(geo)
            first = pieces[i, -1]
            count = sizes[0]
            least = min(least, _small_columns(base[first * inner:(first + count) * inner], geo,
                                              out[first * ost[0]:(first + count) * ost[0]]))
            i, turn = next_chunk(counters, thread, turn, threads, items)
    return least


@njit(cache=True, inline="always")
def _slabs(pieces):
    """The leading dim's size: the pieces' slabs added up."""
    total = 0
    for i in range(pieces.shape[0]):
        total += pieces[i, 1]
    return total


#: The kernels that view their input's bits themselves (bound calls pass no bits).
_VIEW_BITS = (_small_rows, _small_columns)


# _short_rows for each tiny row length, compiled on first use (specialise copies the module's
# names as they are here, at its end)
_TINY_ROWS = {n: specialise(_short_rows.py_func, f"of_{n}", {"parallel": True}, ROW_LENGTH=n)
              for n in range(2, TINY_ROW + 1)}
