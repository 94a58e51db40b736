"""Compiled ReduceSum and ReduceL2 (numba), for every layout, without copying the input.

Any reduction is first put in canonical form (:func:`._common.canonical`; for a C-contiguous
input, :func:`._common.c_packed`): kept and reduced dims with non-negative element strides,
outermost first. Two kernels then cover every layout:

* rows (the innermost dim is reduced: inner, all, non-adjacent axes): each output sums whole
  rows, contiguous rows vectorized a 1 KiB block at a time with a software prefetch of the
  memory 4 KiB ahead (:func:`_streamed_sum`); when each output has several rows, neighbouring
  outputs take the same row index together (their rows are usually neighbours in memory; rows
  of at most 1 KiB three outputs a third of the block apart, side by side); when there are few
  outputs, each output's reduced range is cut in pieces that threads share, and the pieces
  are combined in a fixed order. float32 rows of at most 1 KiB (several per output), of
  1 KiB and more (one per output) and pieces' runs of 256 KiB and more are read three streams
  at a time, a 256 B block of each, in a kernel of their own (:func:`_float32_rows_parallel`);
* columns (the innermost dim is kept: outer, middle): a block of up to ``COLUMNS`` adjacent
  outputs adds the matching slice of every reduced row into accumulators that stay in cache,
  several rows per update, each read in order (one from each third of the range, or two
  neighbouring rows from each half for narrow and wide slices; float32 slices from 256 B up a
  256 B block of each row at a time, each row prefetched 2 KiB ahead, wide ones one row from
  each third of 48-row groups: see :func:`_add_rows`); narrow slices whose rows follow each
  other, several rows at a time as one row of lanes (:func:`_add_narrow_rows`).

Small C-contiguous inputs (below ``PARALLEL_MIN`` elements), whatever the axes, take a one-call
path (:func:`_small_nd`) that skips the canonical form; large ones run on all threads, each run
one compiled call that schedules itself on numba's current thread count (:func:`_rows_parallel`).
:func:`bind_sum`/:func:`bind_l2` work the layout out once per dtype and shape, for both.

float16/bfloat16/float32 accumulate in float64 and round once (float16/bfloat16 via a
round-to-odd float32). float64 rows are summed in Kahan-compensated vector lanes
(:mod:`._lanes`: four outputs' rows side by side, or a run in quarters), each run's
lanes joined by TwoSum into a double-double that is folded into its output by Neumaier; the
column kernel adds three or four rows at a time (pairwise) and folds each such sum in with
Knuth's TwoSum. Terms of one sign are then within about an ulp, and
any sum within a small multiple of 2**-53 * sum(|x|), however long the reduction. ReduceL2
of float64 squares unscaled; the outputs whose sum of squares overflowed or may have lost bits
to underflow are redone, scaled by a power of two. NaN anywhere gives NaN,
else inf anywhere gives inf (L2) or the IEEE sum. Integer sums wrap like numpy; integer ReduceL2
is left to the reference path (exact isqrt). The number of pieces depends on the thread count,
so the last bits of a float result may too (never beyond the bounds above).

>>> from onnx_reduce.spec import Request, resolve
>>> from onnx_reduce.plan import make_plan
>>> x = np.arange(12, dtype=np.float32).reshape(3, 4)
>>> reduce_sum(x, make_plan(Request(resolve("ReduceSum", 13), (0,), False, False), x.shape))
array([12., 15., 18., 21.], dtype=float32)
>>> y = np.array([3e-200, 4e-200])
>>> reduce_l2(y, make_plan(Request(resolve("ReduceL2", 18), None, False, False), y.shape))
array(5.e-200)
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
from llvmlite import ir
from numba import njit, prange, types
from numba.extending import intrinsic, overload

from ...plan import ReductionPlan
from ...spec.dtypes import is_float
from ._common import (
    CHUNKS_PER_THREAD,
    REASSOC,
    c_packed,
    canonical,
    chunk_counters,
    entry_for,
    exact_add,
    frozen,
    is_bfloat16,
    is_float32,
    is_float64,
    kept_dims,
    memory_order_geometry,
    merged_dims,
    neumaier,
    next_chunk,
    next_outer,
    only_for,
    pair_bits,
    parallel_section,
    prefetch,
    reduced_dims,
    storage_dtype,
    store,
    threads_now,
    wide_vectors_for,
    widen,
    widen_bf16_pair,
)
from ._common import flat_offset as _offset  # (shared with ._lanes)
from ._lanes import (
    SHORT,
    TINY,
    eight_wide_rows,
    four_outputs,
    four_rows,
    one_output,
    prefetch_rows,
    rows_ahead,
    run_sum,
    tiny_sums,
)

if TYPE_CHECKING:
    from ..dispatch import Bound

#: Adjacent outputs one column-kernel work item accumulates: 32 KiB of float64 accumulators,
#: which stay in L1 (float64 inputs keep two per output, sum and compensation, so take half as
#: many: docs/kernel-design.md, "Column kernel").
COLUMNS = 4096
COLUMNS_COMPENSATED = COLUMNS // 2
#: Below this many input elements the kernels run on the calling thread only, and C-contiguous
#: inputs take the one-call path :func:`_small_nd` whatever the axes: below it a parallel
#: launch costs about as much as the second thread saves, and far more when the other core is
#: busy (docs/kernel-design.md, "From any array to two loops").
PARALLEL_MIN = 1 << 20
#: float32 ReduceSum rows of at most this many elements, one per output, are summed eight at
#: a time (:func:`_eight_wide_outputs`; longer ones, and ReduceL2's, were slower so).
WIDE_TINY = 32
#: Small arrays of float64 rows of SHORT to TINY elements with at least this many outputs take
#: the row kernel (:func:`_tiny_rows_lead`).
SMALL_TINY_OUTPUTS = 64
#: Least elements (rows: of one row range; columns: rows) in one piece of a split reduction.
MIN_PIECE_ELEMENTS = 1 << 14
MIN_PIECE_ROWS = 64
#: Most pieces one output of a threaded reduction is cut in.
MOST_PIECES = 64
#: Bytes of rows one row-kernel step reads across neighbouring outputs (when each output has
#: several rows, as with non-adjacent reduced axes).
ROW_BLOCK_BYTES = 1 << 16
#: ...and when neighbouring outputs' rows are adjacent in memory (see :func:`_row_block`).
ROW_RUN_BYTES = 1 << 18

#: The row kernel reads contiguous runs a STREAM_BLOCK_BYTES block at a time and, before each
#: block, hints the cache lines PREFETCH_BYTES further on into L2 (:func:`_streamed_sum`).
STREAM_BLOCK_BYTES = 1024
PREFETCH_BYTES = 4096
_LINE_BYTES = 64

#: Column-kernel slices of at most NARROW_BYTES, or of WIDE_BYTES and more, add four rows at a
#: time (two neighbours from each half); those in between three (one from each third; see
#: :func:`_add_rows`).
NARROW_BYTES = 256
#: Narrow slices whose rows follow each other are added several rows at a time as one row of
#: lanes of this many input bytes, then the lanes folded (:func:`_add_narrow_rows`).
LANE_BYTES = NARROW_BYTES
WIDE_BYTES = 4096
#: float32 slices from NARROW_BYTES up are read WIDE_BLOCK_BYTES of each row at a time, and
#: before each block the cache lines WIDE_PREFETCH_BYTES further on in each row are hinted
#: into L2 (wide slices: :func:`_add_wide_rows`; the three-stream ones: :func:`_add_rows`); so
#: are the row kernel's float32 rows read three at a time (:func:`_streamed_sums3`).
WIDE_BLOCK_BYTES = 256
WIDE_PREFETCH_BYTES = 2048
#: Rows :func:`_add_wide_rows` takes at a time, in thirds (three streams 16 rows apart).
GROUP_ROWS = 48
#: float32 runs of at least this many bytes in the pieces of a reduction split across threads
#: (one output, or a few) are read in thirds, side by side (:func:`_run_in_thirds`).
THIRDS_MIN_BYTES = 1 << 18
#: ...and a single output's, from this many input bytes on: smaller inputs are read from cache,
#: where one stream per thread is faster (docs/kernel-design.md, "Row kernel").
THIRDS_ONE_OUTPUT_BYTES = 16 << 20

_F64 = np.dtype(np.float64)
#: The dtypes served, and the dtype each accumulates in.
_ACCUMULATOR = {
    np.dtype(t): _F64 for t in (np.float16, np.float32, np.float64, "bfloat16")
} | {np.dtype(np.int32): np.dtype(np.uint64), np.dtype(np.int64): np.dtype(np.uint64),
     np.dtype(np.uint32): np.dtype(np.uint64), np.dtype(np.uint64): np.dtype(np.uint64)}
#: What the kernels read: float16/bfloat16 as their bits; signed integers as unsigned (a sum
#: modulo 2**bits has the same bits either way), which halves the compiled variants.
_STORAGE = {dtype: storage_dtype(dtype) for dtype in _ACCUMULATOR} | {
    np.dtype(np.int32): np.dtype(np.uint32), np.dtype(np.int64): np.dtype(np.uint64)}
_EMPTY = {acc: np.empty(0, acc) for acc in set(_ACCUMULATOR.values())}
_NONE = {storage: np.empty(0, storage) for storage in set(_STORAGE.values())}  # no rounded out
_SCRATCH: dict[np.dtype, np.ndarray] = {}
_TINY_L2 = 2.0**-450  # a float64 L2 below this may have lost its low squares to underflow
#: Row sums: reassociation, and fused multiply-adds for squares (a float16/bfloat16/float32
#: square is exact in float64, so fusing changes nothing there; for float64 it rounds less).
_ROWS_MATH = REASSOC | {"contract"}
#: Column sums: fused multiply-adds only (reassociation would cancel TwoSum's compensation).
_CONTRACT = {"contract"}


def reduce_sum(data: np.ndarray, plan: ReductionPlan) -> np.ndarray | None:
    """ReduceSum of ``data`` as ``plan`` says; None for a case not served here."""
    return _reduce(data, plan, False)


def reduce_l2(data: np.ndarray, plan: ReductionPlan) -> np.ndarray | None:
    """ReduceL2 of ``data`` as ``plan`` says; None for integers (the reference is exact)."""
    if data.dtype.kind in "iu":
        return None
    return _reduce(data, plan, True)


# ----------------------------------------------------------------------------- bound lane


def bind_sum(dtype: np.dtype, plan: ReductionPlan) -> Bound | None:
    """ReduceSum bound to ``dtype`` and ``plan`` for C-contiguous, aligned, writeable arrays
    (:func:`onnx_reduce.kernels.dispatch.bind`): the layout is worked out once, so a call only
    allocates the output and runs the job :func:`choose_job` picked for it, as
    :func:`reduce_sum` does (the same bits). None when this lane does not serve the case
    (dtypes not served, empty arrays)."""
    return _bind(dtype, plan, False)


def bind_l2(dtype: np.dtype, plan: ReductionPlan) -> Bound | None:
    """ReduceL2 as :func:`bind_sum` binds ReduceSum (not integers: the reference is exact)."""
    return _bind(dtype, plan, True)


def bind_wide(dtype: np.dtype, plan: ReductionPlan, square: bool) -> Bound | None:
    """:func:`bind_sum` (``square``: :func:`bind_l2`) with float64 outputs: a float16,
    bfloat16 or float32 input's float64 accumulator (L2: its root in float64), not rounded to
    the dtype; for ReduceSumSquare and ReduceLogSum (:mod:`.derived`). Floats only."""
    return _bind(dtype, plan, square, wide=True) if is_float(dtype) else None


def _bind(dtype: np.dtype, plan: ReductionPlan, square: bool, wide: bool = False
          ) -> Bound | None:
    size = math.prod(plan.shape)
    if dtype not in _ACCUMULATOR or size == 0 or (square and dtype.kind in "iu"):
        return None
    geo, inner = c_packed(plan.shape, plan.axes)
    small_geo = memory_order_geometry(plan.shape, plan.axes)
    job = choose_job(dtype, square, size, size // plan.reduced_size, geo, inner, small_geo)
    storage = _STORAGE[dtype]
    acc = _ACCUMULATOR[dtype]
    shape = plan.output_shape
    same = storage == dtype
    result = acc if wide else storage  # what the kernels store
    ours = same or wide  # the stored array is the result (no view to the dtype)
    # everything known in advance: with cold caches each Python step is costly
    if not job.small:  # the row or column kernel (threaded, or float64 tiny rows)
        def run(data: np.ndarray) -> np.ndarray:
            base = (data if same else data.view(storage)).ravel()
            base.setflags(write=False)  # the general path's compiled variant (cheaper than .flags)
            out = np.empty(shape, result)
            run_job(job, base, out.ravel(), acc)
            return out if ours else out.view(dtype)
        return run
    kernel = entry_for(job.kernel, frozen(storage), small_geo, np.empty(0, result))

    # ravel(), not reshape(-1): a view either way for C-contiguous arrays, ~70 ns less here
    if same:
        def run_small(data: np.ndarray) -> np.ndarray:
            out = np.empty(shape, result)
            base = data.ravel()
            if kernel(base, small_geo, out.ravel()):
                base.setflags(write=False)  # the variant the general path runs
                _redo(base, geo, out.ravel(), square)
            return out
    else:  # float16, bfloat16, signed integers: no float64 L2 to redo; no views (entry_for)
        given = result if ours else dtype

        def run_small(data: np.ndarray) -> np.ndarray:
            out = np.empty(shape, given)
            kernel(data.ravel(), small_geo, out.ravel())
            return out
    return run_small


# ----------------------------------------------------------------------------- driver


def reduce_wide(data: np.ndarray, plan: ReductionPlan, square: bool) -> np.ndarray | None:
    """:func:`reduce_sum` (``square``: :func:`reduce_l2`) with float64 outputs, as
    :func:`bind_wide`; None for integers and cases not served."""
    return _reduce(data, plan, square, wide=True) if is_float(data.dtype) else None


def _reduce(data: np.ndarray, plan: ReductionPlan, square: bool, wide: bool = False
            ) -> np.ndarray | None:
    dtype = data.dtype
    acc = _ACCUMULATOR.get(dtype)
    if acc is None:
        return None
    result = acc if wide else dtype
    n_red = plan.reduced_size
    if n_red == 0:
        return np.zeros(plan.output_shape, result)
    size = data.size
    if size == 0:
        return np.empty(plan.output_shape, result)
    n_out = size // n_red
    out = np.empty(n_out, acc if wide else _STORAGE[dtype])
    if type(data) is np.ndarray and data.flags.c_contiguous and dtype.isnative:
        base = data.view(_STORAGE[dtype]).ravel()
        base.setflags(write=False)  # one compiled variant for writable and read-only inputs
        geo, inner = c_packed(data.shape, plan.axes)  # the canonical form, from C order
        small_geo = memory_order_geometry(data.shape, plan.axes)
        run_job(choose_job(dtype, square, size, n_out, geo, inner, small_geo), base, out, acc)
        return out.view(result).reshape(plan.output_shape)
    canon = canonical(data, plan.axes)
    if canon is None:
        return None
    base = canon.base[canon.offset:].view(_STORAGE[dtype])
    run_job(choose_job(dtype, square, size, n_out, canon.geometry, canon.inner_reduced), base,
            out, acc)
    restored = canon.restore(out.view(result), plan.kept_shape)
    return np.ascontiguousarray(restored).reshape(plan.output_shape)


class Job(NamedTuple):
    """A kernel chosen by :func:`choose_job`, called as ``kernel(base, *args, out)`` (small
    kernels), ``kernel(base, *args, out, wide)`` (the row and column kernels on one thread) or
    ``kernel(base, *args, out, wide, scratch, most)`` (threaded) by :func:`run_job`; it returns
    whether float64 outputs are left to redo, scaled, on ``geo`` (:func:`_redo`)."""

    kernel: Any
    args: tuple  # (memory-order geometry,) for the small kernels; else (geo, square)
    geo: np.ndarray  # the canonical geometry of the reduction
    threaded: bool  # a parallel kernel: launched under parallel_section(), with scratch
    most: int = 1  # most pieces per output (threaded kernels)
    need: int = 0  # scratch elements (threaded kernels)

    @property
    def square(self) -> bool:
        """ReduceL2's job (else ReduceSum's)."""
        return self.kernel is _small_l2 if self.small else self.args[1]

    @property
    def small(self) -> bool:
        """A small kernel: called as ``kernel(base, geometry, out)``, a variant per output
        dtype (the row and column kernels take ``(geo, square)`` and a ``wide`` output)."""
        return len(self.args) == 1


def choose_job(dtype: np.dtype, square: bool, size: int, n_out: int, geo: np.ndarray,
               inner: bool, small_geo: np.ndarray | None = None) -> Job:
    """The kernel for ``size`` elements of ``dtype`` into ``n_out`` outputs, the canonical
    geometry ``geo`` (``inner``: its innermost dim is reduced); ``small_geo``: a C-contiguous
    input's memory-order geometry. Under PARALLEL_MIN elements one thread: the one-call small
    kernels for C-contiguous inputs, else the row or column kernel. From there on all threads:
    the row kernel (float32 rows read three at a time, :func:`_three_streams`) or the column
    kernel; their partial sums (pieces per output, when the threads share outputs) stay under
    1/64 of the input, the kernel picking the pieces for numba's current thread count.

    >>> geo, inner = c_packed((4096, 4096), (1,))
    >>> choose_job(np.dtype(np.float32), False, 4096 * 4096, 4096, geo, inner).kernel.__name__
    '_float32_rows_parallel'
    """
    if size < PARALLEL_MIN:
        if small_geo is not None and not (dtype == _F64 and _tiny_rows_lead(geo, n_out)):
            return Job(_small_l2 if square else _small_sum, (small_geo,), geo, False)
        return Job(_rows_serial if inner else _cols_serial, (geo, square), geo, False)
    comp = dtype == _F64
    most = min(MOST_PIECES, size * dtype.itemsize // (64 * n_out * (16 if comp else 8)))
    need = n_out * most * (2 if comp else 1) if most > 1 else 0
    if not inner:
        kernel = _cols_parallel
    elif _three_streams(geo, dtype):
        kernel = _float32_rows_parallel
    else:
        kernel = _rows_parallel
    return Job(kernel, (geo, square), geo, True, most, need)


def run_job(job: Job, base: np.ndarray, out: np.ndarray, acc: np.dtype) -> None:
    """Run ``job`` on ``base`` into ``out`` (threaded: under :func:`parallel_section`, which
    also guards the scratch of ``acc`` sums), then redo, scaled, the float64 outputs that were
    unsafe (:func:`_redo`). ``out`` holds the kernels' storage dtype, or ``acc`` (unrounded
    results: the row and column kernels take it as their ``wide`` output, in the same compiled
    variant)."""
    if job.small:
        redo = job.kernel(base, *job.args, out)
    else:
        narrow, wide = (out, _EMPTY[acc]) if out.dtype == base.dtype else (_NONE[base.dtype], out)
        if job.threaded:
            with parallel_section():
                redo = job.kernel(base, *job.args, narrow, wide, _scratch(job.need, acc),
                                  job.most)
        else:
            redo = job.kernel(base, *job.args, narrow, wide)
    if redo:
        _redo(base, job.geo, out, job.square)


def _three_streams(geo: np.ndarray, dtype: np.dtype) -> bool:
    """Whether the row kernel reads three float32 streams at a time
    (:func:`_float32_rows_parallel`): each output sums several contiguous rows of at most
    STREAM_BLOCK_BYTES (non-adjacent axes), or one of STREAM_BLOCK_BYTES and more (inner axis),
    or one output reduces a contiguous run of THIRDS_ONE_OUTPUT_BYTES and more, its pieces read
    in thirds (:func:`_run_in_thirds`; all axes of a C-contiguous input from 16 MiB).

    >>> f32 = np.dtype(np.float32)
    >>> [bool(_three_streams(c_packed(shape, axes)[0], f32))
    ...  for shape, axes in [((256, 256, 256), (0, 2)), ((4096, 4096), (1,)),
    ...                      ((4096, 128), (1,)), ((4096, 4096), (0, 1)), ((1024, 1024), (0, 1))]]
    [True, True, False, True, False]
    """
    if dtype != np.float32:
        return False
    rsz, rst = (d.tolist() for d in reduced_dims(geo))
    if rst[-1] != 1:  # the innermost reduced dim's stride
        return False
    row = rsz[-1]  # its size
    if math.prod(rsz) == row:  # one row per output
        nk = len(kept_dims(geo)[0])
        if nk == 0:  # one output: its pieces' runs read in thirds
            return row * dtype.itemsize >= THIRDS_ONE_OUTPUT_BYTES
        return nk == 1 and row * dtype.itemsize >= STREAM_BLOCK_BYTES
    return row * dtype.itemsize <= STREAM_BLOCK_BYTES


def _scratch(need: int, acc: np.dtype) -> np.ndarray:
    """Room for ``need`` partial sums, kept from call to call (a fresh 512 KiB array is mapped
    and faulted in page by page each time: docs/kernel-design.md, "Splitting one output").
    Only under :func:`parallel_section`'s lock."""
    buffer = _SCRATCH.get(acc)
    if buffer is None or buffer.size < need:
        buffer = _SCRATCH[acc] = np.empty(need, acc)
    return buffer


@njit(cache=True, nogil=True)
def _unsafe_l2(out):
    """Whether some float64 L2 output overflowed or may have lost bits to underflow: every
    output tested, no exit inside the loop, which vectorizes (0.75 against 2.8 us for 4800
    outputs; most of a short-rows L2 when it stopped at the first)."""
    unsafe = False
    for i in range(out.size):
        v = out[i]
        unsafe |= (v == np.inf) | (v < _TINY_L2)
    return unsafe


@njit(cache=True, nogil=True)
def _unsafe_small_l2(out):
    """:func:`_unsafe_l2` for the small kernels, stopping at the first: the vectorized test
    made :func:`_small_l2` of 3000-4800 outputs 7-19% slower (measured, A/B from the cache)."""
    for i in range(out.size):
        v = out[i]
        if v == np.inf or v < _TINY_L2:
            return True
    return False


@njit(cache=True, nogil=True)
def _unsafe_sum(out):
    """Whether some float64 sum is inf or NaN (maybe a partial sum's overflow): every output
    tested, as :func:`_unsafe_l2` (``v - v`` is NaN for both, 0 for finite values); the small
    kernels too (stopping at the first cost 8x128 calls ~5%, 90 ns)."""
    unsafe = False
    for i in range(out.size):
        v = out[i]
        unsafe |= (v - v) != 0.0
    return unsafe


@njit(cache=True, nogil=True, inline="always")
def _unsafe(out, square):
    """Whether float64 outputs are left to redo (:func:`_unsafe_l2`, :func:`_unsafe_sum`)."""
    return _unsafe_l2(out) if square else _unsafe_sum(out)


def _redo(base: np.ndarray, geo: np.ndarray, out: np.ndarray, square: bool) -> None:
    """Recompute, scaled, the float64 outputs whose plain sums were unsafe: L2's sum of squares
    overflowed or may have underflowed; a sum is inf or NaN, maybe by a partial sum's overflow
    where the true sum is finite (``[M, M, -M]``, M near the largest float64)."""
    with np.errstate(invalid="ignore"):
        unsafe = (out == np.inf) | (out < _TINY_L2) if square else ~np.isfinite(out)
    suspect = np.flatnonzero(unsafe)
    if suspect.size:
        (_l2_scaled if square else _sum_scaled)(base, geo, suspect, out)


# ----------------------------------------------------------------------------- schedules


@njit(cache=True, nogil=True)
def _counts(geo):
    """(outputs, elements each output reduces) of the packed dims ``geo``."""
    ksz = kept_dims(geo)[0]
    rsz = reduced_dims(geo)[0]
    n_out = 1
    for d in range(ksz.size):
        n_out *= ksz[d]
    n_red = 1
    for d in range(rsz.size):
        n_red *= rsz[d]
    return n_out, n_red


@njit(cache=True, nogil=True)
def _row_block(geo, n_out, n_red, itemsize, threads, comp=False):
    """How many neighbouring outputs a row-kernel work item takes together.

    One, when each output is one row (float64, ``comp``: a multiple of four up to 64, four
    blocks per thread at least, whose rows the compensated lanes read a quarter of the block
    apart: four streams through memory). Else up to ROW_BLOCK_BYTES of their rows per step (64
    outputs at most, four blocks per thread at least). When each output's rows are next to
    its neighbours' (e.g. axes (0, 2) of a C array) and the reductions are long enough to cut
    in pieces for the threads, up to ROW_RUN_BYTES instead: one long run per step streams
    faster from memory (docs/kernel-design.md, "Row kernel")."""
    ksz, kst = kept_dims(geo)
    rsz, rst = reduced_dims(geo)
    row = rsz[-1]  # length of the innermost reduced dim
    if row >= n_red:
        return max(4, min(64, n_out // (4 * threads)) // 4 * 4) if comp else 1
    block = max(1, min(ROW_BLOCK_BYTES // (row * itemsize), 64, n_out // (4 * threads)))
    # each output's rows next to its neighbours': the innermost kept stride is one row
    adjacent = ksz.size > 0 and rst[-1] == 1 and kst[-1] == row
    if not adjacent or n_red // MIN_PIECE_ELEMENTS < 2 * threads:
        return block
    return max(block, min(ROW_RUN_BYTES // (row * itemsize), n_out))


@njit(cache=True, nogil=True)
def _pieces(items, threads, most):
    """How many pieces to cut each output's reduction into, so that threads share the work."""
    if threads <= 1 or items >= 4 * threads:
        return 1
    return max(1, min(64, (4 * threads + items - 1) // items, most))


@njit(cache=True, nogil=True)
def _rows_schedule(geo, itemsize, threads, most, comp=False):
    """(block, pieces, work items) of the row kernel on ``threads`` threads, at most ``most``
    pieces per output."""
    n_out, n_red = _counts(geo)
    block = _row_block(geo, n_out, n_red, itemsize, threads, comp)
    n_base = (n_out + block - 1) // block
    pieces = _pieces(n_base, threads, min(most, n_red // MIN_PIECE_ELEMENTS))
    return block, pieces, n_base * pieces


@njit(cache=True, nogil=True)
def _cols_schedule(geo, comp, threads, most):
    """(pieces, work items) of the column kernel on ``threads`` threads."""
    n_out, n_red = _counts(geo)
    width = kept_dims(geo)[0][-1]  # the innermost kept dim
    columns = _columns(comp)
    n_base = (n_out // width) * ((width + columns - 1) // columns)
    pieces = _pieces(n_base, threads, min(most, n_red // MIN_PIECE_ROWS))
    return pieces, n_base * pieces


@njit(cache=True, nogil=True)
def _partials(scratch, n_out, pieces, comp):
    """The partial sums (and compensations) of ``pieces`` pieces per output, in ``scratch``."""
    n = n_out * pieces if pieces > 1 else 0
    hi = scratch[:n]
    lo = scratch[n:2 * n] if comp else hi
    return hi, lo


@njit(cache=True, nogil=True)
def _settle(hi, lo, pieces, square, comp, out, wide):
    """After the work items: add up the pieces; whether a float64 L2 output needs redoing."""
    if pieces > 1:
        _combine(hi, lo, pieces, square, comp, out, wide)
    return comp and _unsafe(out, square)


# ----------------------------------------------------------------------------- numba parts


def _zero(x):  # pragma: no cover - njit only
    raise NotImplementedError


@overload(_zero)
def _zero_impl(x):
    if isinstance(x, types.Float):
        return lambda x: 0.0
    if isinstance(x, types.Integer) and x.signed:
        return lambda x: np.int64(0)
    if isinstance(x, types.Integer):
        return lambda x: np.uint64(0)
    return None


def _finish(out, o, s, c, square):  # pragma: no cover - njit only
    raise NotImplementedError


@overload(_finish)
def _finish_impl(out, o, s, c, square):
    if isinstance(s, types.Float):
        def impl(out, o, s, c, square):
            v = s + c if math.isfinite(s) else s
            if square:
                v = math.sqrt(v)
            store(out, o, v)
        return impl

    def impl_int(out, o, s, c, square):
        store(out, o, s)
    return impl_int


@njit(cache=True, nogil=True, inline="always")
def _finish_to(out, wide, o, s, c, square):
    """:func:`_finish` into ``wide`` (the accumulator dtype, unrounded) when it has room, else
    into ``out``: the row and column kernels serve both outputs in one compiled variant
    (float64 outputs compiled a second variant of each, 5-15 s apiece)."""
    if wide.size:
        _finish(wide, o, s, c, square)
    else:
        _finish(out, o, s, c, square)


@njit(cache=True, nogil=True, inline="always")
def _finish_run(out, wide, o, s, c, n, square):
    """:func:`_finish_to` of ``s[:n], c[:n]`` into outputs ``o, o + 1, ...``: the test of
    ``wide`` outside the loops, which then vectorize."""
    if wide.size:
        for j in range(n):
            _finish(wide, o + j, s[j], c[j], square)
    else:
        for j in range(n):
            _finish(out, o + j, s[j], c[j], square)


@njit(cache=True, nogil=True, inline="always")
def _outputs(out, wide):
    """How many outputs the row and column kernels store (into ``out`` or ``wide``)."""
    return max(out.size, wide.size)


@njit(cache=True, nogil=True, inline="always")
def _fold_dd(s, c, k, head, tail):
    """``s[k], c[k]`` gain the double-double ``head + tail`` (Neumaier on the head)."""
    s[k], c[k] = neumaier(s[k], c[k], head)
    c[k] += tail


def _add_run(base, a, n, step, square, s, c, k):  # pragma: no cover - njit only
    raise NotImplementedError


@overload(_add_run, inline="always")
def _add_run_impl(base, a, n, step, square, s, c, k):
    """``s[k], c[k]`` gain the float64 sum (of squares) of ``n`` elements ``step`` apart from
    ``base[a]`` (:func:`._lanes.run_sum`, folded in by Neumaier). Nothing for the other
    dtypes, which never call it: this keeps the lanes out of their compiled variants."""
    if base.dtype != types.float64:
        return lambda base, a, n, step, square, s, c, k: None

    def impl(base, a, n, step, square, s, c, k):
        # a constant flag in each call: a run-time one would stay in the inner loop
        head, tail = (run_sum(base, a, n, step, True) if square
                      else run_sum(base, a, n, step, False))
        _fold_dd(s, c, k, head, tail)
    return impl


def _add_four_runs(base, a0, a1, a2, a3, n, square, s, c, k0, k1, k2, k3):  # pragma: no cover
    raise NotImplementedError


@overload(_add_four_runs, inline="always")
def _add_four_runs_impl(base, a0, a1, a2, a3, n, square, s, c, k0, k1, k2, k3):
    """:func:`_add_run` of four contiguous runs of ``n`` into ``k0`` ... ``k3`` (in that order:
    they may repeat), summed side by side (:func:`._lanes.four_rows`)."""
    if base.dtype != types.float64:
        return lambda base, a0, a1, a2, a3, n, square, s, c, k0, k1, k2, k3: None

    def impl(base, a0, a1, a2, a3, n, square, s, c, k0, k1, k2, k3):
        h0, l0, h1, l1, h2, l2, h3, l3 = (four_rows(base, a0, a1, a2, a3, n, True) if square
                                          else four_rows(base, a0, a1, a2, a3, n, False))
        _fold_dd(s, c, k0, h0, l0)
        _fold_dd(s, c, k1, h1, l1)
        _fold_dd(s, c, k2, h2, l2)
        _fold_dd(s, c, k3, h3, l3)
    return impl


@njit(cache=True, nogil=True, fastmath=_ROWS_MATH, inline="always")
def _streamed_sum(base, a, n, square):
    """:func:`_row_sum` for rows read from memory: a STREAM_BLOCK_BYTES block at a time, and
    before each block a software prefetch of the cache lines PREFETCH_BYTES ahead (which run
    on into the next rows where rows are adjacent), because the hardware prefetcher alone
    keeps too few reads in flight for a loop that widens every element.

    The block loop's length is a compile-time constant (unrolled whole, its vector
    accumulators stay in registers), prefetch addresses are clamped with ``min``, squares are
    not fused into the adds (:func:`_square_unfused`); inlined, unsigned indices, no slices.
    Each of these measured: docs/kernel-design.md, "Row kernel"."""
    wide_vectors_for(base)
    block, line, ahead = _stream_steps(base[0])  # an element: the array would cost atomics
    last = np.uint64(base.size - 1)
    ua = np.uint64(a)
    un = np.uint64(n)
    full = un // block * block
    acc = _zero(widen(base[0]))
    for k in range(un // block):
        b = ua + k * block
        p = b + ahead
        for q in range(block // line):
            prefetch(base, min(p + q * line, last))
        if is_bfloat16(base):
            acc = _add_pairs(base, b, block // 2, square, acc, True)
        elif square:
            for j in range(block):
                acc += _square_unfused(widen(base[b + j]))
        else:
            for j in range(block):
                acc += widen(base[b + j])
    for p in range(ua + full + ahead, ua + un + ahead, line):  # the rest, or a short row
        prefetch(base, min(p, last))
    for j in range(ua + full, ua + un):
        v = widen(base[j])
        acc += v * v if square else v
    return acc


@intrinsic
def _square_unfused(typingctx, v):  # type: ignore[no-untyped-def]
    """``v * v`` that no later add absorbs into a fused multiply-add: ``fma(v, v, +0.0)``, a
    call the fast-math flags of the caller do not reach. For :func:`_streamed_sum`, whose
    unrolled block of squares would otherwise become one chain of dependent multiply-adds;
    its inputs' squares are exact in float64, so the sum is the same."""
    if not isinstance(v, (types.Float, types.Integer)):
        return None

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        x = args[0]
        if isinstance(v, types.Integer):
            return builder.mul(x, x)
        fma = builder.module.declare_intrinsic("llvm.fma", [x.type],
                                               ir.FunctionType(x.type, [x.type] * 3))
        return builder.call(fma, [x, x, ir.Constant(x.type, 0.0)])

    return v(v), codegen


def _stream_steps(element):  # pragma: no cover - replaced by the overload inside njit code
    raise NotImplementedError


@overload(_stream_steps)
def _stream_steps_impl(element):
    """(block, cache line, prefetch distance) of :func:`_streamed_sum` in elements of the type
    of ``element``, as compile-time constants."""
    size = element.bitwidth // 8
    steps = (np.uint64(STREAM_BLOCK_BYTES // size), np.uint64(_LINE_BYTES // size),
             np.uint64(PREFETCH_BYTES // size))
    return lambda element: steps


def _wide_steps(element):  # pragma: no cover - replaced by the overload inside njit code
    raise NotImplementedError


def _is_float32(arr):  # pragma: no cover - replaced by the overload inside njit code
    raise NotImplementedError


@overload(_is_float32, inline="always")
def _is_float32_impl(arr):
    """Whether ``arr`` holds float32 (a compile-time constant): only then do the column
    kernel's wide slices take :func:`_add_wide_rows` and its three-stream slices read 256 B
    blocks, prefetching squares too (float16, bfloat16 and int32 were slower that way)."""
    flag = arr.dtype == types.float32
    return lambda arr: flag


@overload(_wide_steps)
def _wide_steps_impl(element):
    """(block, cache line, prefetch distance) of :func:`_add_wide_rows` in elements of the
    type of ``element``, as compile-time constants (the three-stream float32 slices of
    :func:`_add_rows` take the block and line)."""
    size = element.bitwidth // 8
    steps = (np.uint64(WIDE_BLOCK_BYTES // size), np.uint64(_LINE_BYTES // size),
             np.uint64(WIDE_PREFETCH_BYTES // size))
    return lambda element: steps


@njit(cache=True, nogil=True, fastmath=_ROWS_MATH, inline="always")
def _row_sums3(base, a, b, c, n, square):
    """The sums (of squares) of ``n`` contiguous elements from ``base[a]``, ``base[b]`` and
    ``base[c]``, widened, each from 0, in one loop, each row's lines PREFETCH_BYTES ahead
    hinted first: the row kernel's rows of at most STREAM_BLOCK_BYTES when neighbouring
    outputs take the same row (:func:`_rows_range`), three outputs a third apart (threaded
    float32: :func:`_streamed_sums3`). Three short rows per loop save a set-up and a
    horizontal sum per row (docs/kernel-design.md, "Row kernel")."""
    wide_vectors_for(base)
    ua = np.uint64(a)
    ub = np.uint64(b)
    uc = np.uint64(c)
    _, line, ahead = _stream_steps(base[0])
    last = np.uint64(base.size - 1)
    for p in range(np.uint64(0), np.uint64(n), line):
        prefetch(base, min(ua + ahead + p, last))
        prefetch(base, min(ub + ahead + p, last))
        prefetch(base, min(uc + ahead + p, last))
    sa = _zero(widen(base[0]))
    sb = sa
    sc = sa
    if square:
        for i in range(np.uint64(n)):
            va = widen(base[ua + i])
            vb = widen(base[ub + i])
            vc = widen(base[uc + i])
            sa += va * va
            sb += vb * vb
            sc += vc * vc
    else:
        for i in range(np.uint64(n)):
            sa += widen(base[ua + i])
            sb += widen(base[ub + i])
            sc += widen(base[uc + i])
    return sa, sb, sc


@njit(cache=True, nogil=True, fastmath=_ROWS_MATH, inline="always")
def _streamed_sums3(base, a, b, c, n, square):
    """The float32 sums (of squares) of ``n`` contiguous elements from ``base[a]``,
    ``base[b]`` and ``base[c]``, widened, each from 0, in one loop: a WIDE_BLOCK_BYTES block
    of each at a time, and before each block a software prefetch of each stream's cache lines
    WIDE_PREFETCH_BYTES further on (past a row's end, into the next row: where that stream
    goes next). The block loop as in :func:`_streamed_sum` (compile-time length, squares
    unfused). The rows of :func:`_float32_rows_parallel`; float16 and bfloat16, whose
    widening and not memory sets the pace, stay in :func:`_row_sums3`."""
    wide_vectors_for(base)
    block, line, ahead = _wide_steps(base[0])
    last = np.uint64(base.size - 1)
    ua = np.uint64(a)
    ub = np.uint64(b)
    uc = np.uint64(c)
    un = np.uint64(n)
    full = un // block * block
    sa = _zero(widen(base[0]))
    sb = sa
    sc = sa
    for k in range(un // block):
        o = k * block
        p = o + ahead
        for q in range(block // line):
            prefetch(base, min(ua + p + q * line, last))
            prefetch(base, min(ub + p + q * line, last))
            prefetch(base, min(uc + p + q * line, last))
        if square:
            for j in range(block):
                sa += _square_unfused(widen(base[ua + o + j]))
                sb += _square_unfused(widen(base[ub + o + j]))
                sc += _square_unfused(widen(base[uc + o + j]))
        else:
            for j in range(block):
                sa += widen(base[ua + o + j])
                sb += widen(base[ub + o + j])
                sc += widen(base[uc + o + j])
    for j in range(full, un):
        va = widen(base[ua + j])
        vb = widen(base[ub + j])
        vc = widen(base[uc + j])
        sa += va * va if square else va
        sb += vb * vb if square else vb
        sc += vc * vc if square else vc
    return sa, sb, sc


@njit(cache=True, nogil=True, fastmath=_ROWS_MATH, inline="always")
def _row_sum(base, a, n, square):
    """Sum (of squares) of the ``n`` contiguous elements from ``base[a]``, widened, from 0
    (inlined, unsigned indices, no slice: see :func:`_streamed_sum`). One plain loop: the best
    for rows in cache."""
    wide_vectors_for(base)
    ua = np.uint64(a)
    acc = _zero(widen(base[0]))
    first = np.uint64(0)
    if is_bfloat16(base):
        first = np.uint64(n) // 2 * 2
        acc = _add_pairs(base, ua, first // 2, square, acc, False)
    if square:
        for i in range(first, np.uint64(n)):
            v = widen(base[ua + i])
            acc += v * v
    else:
        for i in range(first, np.uint64(n)):
            acc += widen(base[ua + i])
    return acc


@njit(cache=True, nogil=True, fastmath=_ROWS_MATH, inline="always")
def _add_pairs(base, a, pairs, square, acc, streamed):
    """``acc`` plus the float64 sum (of squares) of the ``2 * pairs`` bfloat16 from
    ``base[a]``, read two at a time (:func:`._common.pair_bits`). ``streamed`` (a literal):
    squares not fused into the adds, as :func:`_streamed_sum` keeps them; in cache, fused.
    Compiled, never run, for the other dtypes (:func:`_as_acc` keeps their ``acc`` type)."""
    ua = np.uint64(a)
    if square and streamed:
        for i in range(np.uint64(pairs)):
            lo, hi = widen_bf16_pair(pair_bits(base, ua + 2 * i))
            acc += _as_acc(acc, _square_unfused(lo) + _square_unfused(hi))
    elif square:
        for i in range(np.uint64(pairs)):
            lo, hi = widen_bf16_pair(pair_bits(base, ua + 2 * i))
            acc += _as_acc(acc, lo * lo + hi * hi)
    else:
        for i in range(np.uint64(pairs)):
            lo, hi = widen_bf16_pair(pair_bits(base, ua + 2 * i))
            acc += _as_acc(acc, lo + hi)
    return acc


def _as_acc(acc, v):  # pragma: no cover - replaced by the overload inside njit code
    raise NotImplementedError


@overload(_as_acc, inline="always")
def _as_acc_impl(acc, v):
    """``v`` where ``acc`` is a float; ``acc``'s own zero for an integer ``acc`` (the integer
    kernels compile :func:`_add_pairs` without running it: float adds would make their
    accumulators float64)."""
    if isinstance(acc, types.Float):
        return lambda acc, v: v
    return lambda acc, v: acc - acc


@njit(cache=True, nogil=True, fastmath=_ROWS_MATH)
def _segment(base, a, n, step, square):
    """Sum (of squares) of ``base[a + i*step]``, ``0 <= i < n`` (n >= 1, step > 1), widened
    (not float64, whose strided rows go through the compensated lanes). Signed indices on
    purpose: this loop does not vectorize either way."""
    wide_vectors_for(base)
    v = widen(base[a])
    if square:
        acc = v * v
        for i in range(1, n):
            v = widen(base[a + i * step])
            acc += v * v
    else:
        acc = v
        for i in range(1, n):
            acc += widen(base[a + i * step])
    return acc


@njit(cache=True, nogil=True, fastmath=_ROWS_MATH)
def _rows_range(base, offs, m, rsz, rst, lo, hi, square, comp, s, c, three):
    """Add flat reduced indices ``[lo, hi)`` of the ``m`` outputs at element offsets
    ``offs[:m]`` into ``s[:m]`` (and ``c``). Row by row, all ``m`` outputs take the same row:
    neighbouring outputs' rows are often neighbours in memory; rows of at most
    STREAM_BLOCK_BYTES three outputs at a time, block by block when ``three`` (a compile-time
    constant: float32 in :func:`_float32_rows_parallel`, :func:`_streamed_sums3`), else each
    row in one loop (:func:`_row_sums3`). float64 (``comp``): each run summed in compensated
    lanes (four outputs' at a time: :mod:`._lanes`) and folded into its output's ``s, c``."""
    wide_vectors_for(base)
    nr = rsz.size
    n_in = rsz[nr - 1]
    s_in = rst[nr - 1]
    t = lo // n_in
    j = lo - t * n_in
    pos = lo
    while pos < hi:
        row = _offset(t, rsz, rst, nr - 1) + j * s_in
        n = min(n_in - j, hi - pos)
        k0 = 0
        if not comp and s_in == 1 and n * base.itemsize <= STREAM_BLOCK_BYTES:
            q = m // 3  # short rows: outputs k, k + m/3, k + 2m/3 side by side
            k0 = 3 * q
            for k in range(q):
                if three:
                    sa, sb, sc = _streamed_sums3(base, offs[k] + row, offs[k + q] + row,
                                                 offs[k + 2 * q] + row, n, square)
                else:
                    sa, sb, sc = _row_sums3(base, offs[k] + row, offs[k + q] + row,
                                            offs[k + 2 * q] + row, n, square)
                s[k] += sa
                s[k + q] += sb
                s[k + 2 * q] += sc
        if comp and s_in == 1:  # float64: outputs k, k + m/4, k + m/2, k + 3m/4 side by side
            q = m // 4  # (four streams on through memory: neighbours' runs stop at each row)
            k0 = 4 * q
            for k in range(q):
                _add_four_runs(base, offs[k] + row, offs[k + q] + row, offs[k + 2 * q] + row,
                               offs[k + 3 * q] + row, n, square, s, c, k, k + q, k + 2 * q,
                               k + 3 * q)
        for k in range(k0, m):
            a = offs[k] + row
            if comp:
                _add_run(base, a, n, s_in, square, s, c, k)
            elif s_in == 1 and three and n * base.itemsize >= THIRDS_MIN_BYTES:
                s[k] += _run_in_thirds(base, a, n, square)
            elif s_in == 1:
                s[k] += _streamed_sum(base, a, n, square)
            else:
                s[k] += _segment(base, a, n, s_in, square)
        pos += n
        t += 1
        j = 0


@njit(cache=True, nogil=True, inline="always")
def _run_in_thirds(base, a, n, square):
    """The float32 sum (of squares) of the ``n`` contiguous elements from ``base[a]``, widened:
    its three thirds side by side (:func:`_streamed_sums3`), then the 0-2 left over."""
    t = n // 3
    sa, sb, sc = _streamed_sums3(base, a, a + t, a + 2 * t, t, square)
    return sa + sb + sc + _streamed_sum(base, a + 3 * t, n - 3 * t, square)


@njit(cache=True, nogil=True)
def _rows_in_thirds(base, stride, n, square, out, w0, w1):
    """Outputs ``[w0, w1)`` of float32 rows of ``n`` contiguous elements (at least
    STREAM_BLOCK_BYTES), output ``o``'s row from ``base[o * stride]``: GROUP_ROWS outputs at a
    time, and in each group output o of each third side by side (:func:`_streamed_sums3`).
    Returns the first output of the 0-2 left for the caller. Three prefetched streams 16 rows
    apart read memory faster than one row at a time (docs/kernel-design.md, "Row kernel")."""
    wide_vectors_for(base)
    zero = _zero(widen(base[0]))
    g = w0
    while g + 3 <= w1:
        t = min(GROUP_ROWS, w1 - g) // 3
        for o in range(g, g + t):
            sa, sb, sc = _streamed_sums3(base, o * stride, (o + t) * stride,
                                         (o + 2 * t) * stride, n, square)
            _finish(out, o, sa, zero, square)
            _finish(out, o + t, sb, zero, square)
            _finish(out, o + 2 * t, sc, zero, square)
        g += 3 * t
    return g


@njit(cache=True, nogil=True, fastmath=_ROWS_MATH)
def _each_row(base, ksz, kst, n, square, out, w0, w1):
    """Outputs ``[w0, w1)`` of one contiguous row of ``n`` elements each (kept dims ``ksz``,
    ``kst``), summed and stored one by one: no per-output calls (short rows are common)."""
    wide_vectors_for(base)
    zero = _zero(widen(base[0]))
    nk = ksz.size
    for o in range(w0, w1):
        a = o * kst[0] if nk == 1 else _offset(o, ksz, kst, nk)
        _finish(out, o, _streamed_sum(base, a, n, square), zero, square)


@njit(cache=True, nogil=True)
def _eight_wide_outputs(base, stride, n, out, w0, w1):
    """float32 sums, outputs ``[w0, w1)``, each one contiguous row of ``n <= WIDE_TINY``
    elements ``stride`` apart: eight rows at a time side by side
    (:func:`._lanes.eight_wide_rows`; one row at a time costs a fold of its lanes per row),
    the rows ahead prefetched (:func:`._lanes.prefetch_rows`), the last ``(w1 - w0) % 8`` one
    by one as :func:`_each_row` does."""
    wide_vectors_for(base)
    sums = np.empty(8)
    full = w0 + (w1 - w0) // 8 * 8
    ahead = rows_ahead(base, stride)
    for g in range(w0, full, 8):
        prefetch_rows(base, (g + ahead) * stride, stride, n, ahead)
        if n <= 16:  # (a literal count of vectors each)
            eight_wide_rows(base, g * stride, stride, n, 1, sums)
        else:
            eight_wide_rows(base, g * stride, stride, n, 2, sums)
        for k in range(8):
            _finish(out, g + k, sums[k], 0.0, False)
    for o in range(full, w1):
        _finish(out, o, _streamed_sum(base, o * stride, n, False), 0.0, False)


_float32_eight_wide_outputs = only_for(types.float32, _eight_wide_outputs)


@njit(cache=True, nogil=True)
def _tiny_rows(geo):
    """Whether ``geo`` is rows of at most TINY adjacent elements along one kept dim, one per
    output: float64 ones the row kernel takes side by side (:func:`_tiny_outputs`), small
    arrays too (the small kernels take each output's lanes on their own: 5-20x slower)."""
    ksz, _ = kept_dims(geo)
    rsz, rst = reduced_dims(geo)
    return ksz.size == 1 and rsz.size == 1 and rst[0] == 1 and rsz[0] <= TINY


@njit(cache=True, nogil=True)
def _tiny_rows_lead(geo, n_out):
    """Whether the row kernel takes float64 :func:`_tiny_rows` of a small array ahead of the
    small kernels: rows of up to SHORT elements, or SMALL_TINY_OUTPUTS of them and more
    (fewer longer rows: 3-7% slower, the row kernel's own costs)."""
    rsz, _ = reduced_dims(geo)
    return _tiny_rows(geo) and (rsz[0] <= SHORT or n_out >= SMALL_TINY_OUTPUTS)


@njit(cache=True, nogil=True)
def _tiny_outputs(base, stride, n, square, out, first, last, n_out):  # pragma: no cover
    """float64 outputs ``[first, last)``, each one contiguous row of ``n <= TINY`` elements,
    ``stride`` apart: what the work items give them (:func:`_rows_range`: blocks of a multiple
    of four outputs, their rows by :func:`._lanes.four_rows`, the last ``n_out % 4`` by
    ``run_sum``, each folded into zeros by Neumaier and finished), the same bits, with the
    rows side by side (:func:`._lanes.tiny_sums`) and the folds branch-free. No fast-math: it
    would undo the compensation."""
    wide_vectors_for(base)
    grouped = min(last, n_out - n_out % 4)
    count = max(0, grouped - first)
    hi = np.empty(count)
    lo = np.empty(count)
    dst = out[first:first + count]  # indexed from range: no wraparound tests, it vectorizes
    if square:  # (the test outside the loops)
        tiny_sums(base, first * stride, stride, n, True, count, hi, lo)
        for i in range(count):
            _finish_folded(dst, i, hi[i], lo[i], True)
    else:
        tiny_sums(base, first * stride, stride, n, False, count, hi, lo)
        for i in range(count):
            _finish_folded(dst, i, hi[i], lo[i], False)
    for o in range(max(first, grouped), last):
        head, tail = (run_sum(base, o * stride, n, 1, True) if square
                      else run_sum(base, o * stride, n, 1, False))
        _finish_folded(out, o, head, tail, square)


_float64_tiny_outputs = only_for(types.float64, _tiny_outputs)


@njit(cache=True, nogil=True, inline="always")
def _finish_folded(out, o, head, tail, square):  # pragma: no cover - compiled
    """:func:`_finish` of ``head + tail`` folded into zeros (:func:`_fold_dd`): Neumaier's
    ``0 + head`` leaves no error where it is finite, and where it is not the sum is ``head``."""
    s = 0.0 + head
    v = s + (0.0 + tail)
    v = v if math.isfinite(s) else s  # a select: the loops over outputs vectorize
    store(out, o, math.sqrt(v) if square else v)


@njit(cache=True, nogil=True, fastmath=_ROWS_MATH)
def _rows_work(base, geo, block, pieces, square, comp, out, wide, hi, lo, w0, w1, three):
    """Work items ``[w0, w1)`` of the row kernel: item ``w`` is piece ``w % pieces`` of the
    ``block`` outputs from ``(w // pieces) * block`` on (canonical kept order)."""
    wide_vectors_for(base)
    ksz, kst = kept_dims(geo)
    rsz, rst = reduced_dims(geo)
    n_out = 1
    for d in range(ksz.size):
        n_out *= ksz[d]
    n_red = 1
    for d in range(rsz.size):
        n_red *= rsz[d]
    zero = _zero(widen(base[0]))
    if block == 1 and pieces == 1 and rsz.size == 1 and rst[0] == 1 and not comp:
        # one contiguous row per output: no per-output calls (short rows are common)
        n = rsz[0]
        nk = ksz.size
        if is_float32(base) and not square and nk == 1 and n <= WIDE_TINY:  # eight at a time
            if wide.size:
                _float32_eight_wide_outputs(base, kst[0], n, wide, w0, w1)
            else:
                _float32_eight_wide_outputs(base, kst[0], n, out, w0, w1)
            return
        # the output chosen here, each a compiled form of its own (a test of ``wide`` per
        # output, or sums kept in a buffer and stored after, were slower)
        if three and nk == 1 and n * base.itemsize >= STREAM_BLOCK_BYTES:
            w0 = (_rows_in_thirds(base, kst[0], n, square, wide, w0, w1) if wide.size
                  else _rows_in_thirds(base, kst[0], n, square, out, w0, w1))
        if wide.size:
            _each_row(base, ksz, kst, n, square, wide, w0, w1)
        else:
            _each_row(base, ksz, kst, n, square, out, w0, w1)
        return
    if comp and pieces == 1 and _tiny_rows(geo):  # float64 rows side by side
        first, last = w0 * block, min(w1 * block, n_out)
        if wide.size:
            _float64_tiny_outputs(base, kst[0], rsz[0], square, wide, first, last, n_out)
        else:
            _float64_tiny_outputs(base, kst[0], rsz[0], square, out, first, last, n_out)
        return
    offs = np.empty(block, np.int64)
    s = np.full(block, zero)
    c = np.full(block, zero)
    for w in range(w0, w1):
        q = w // pieces
        p = w - q * pieces
        o0 = q * block
        m = min(block, n_out - o0)
        for k in range(m):
            offs[k] = _offset(o0 + k, ksz, kst, ksz.size)
            s[k] = zero
            c[k] = zero
        _rows_range(base, offs, m, rsz, rst, n_red * p // pieces, n_red * (p + 1) // pieces,
                    square, comp, s, c, three)
        if pieces == 1:
            _finish_run(out, wide, o0, s, c, m, square)
            continue
        for k in range(m):
            hi[p * n_out + o0 + k] = s[k]
            if comp:
                lo[p * n_out + o0 + k] = c[k]


@njit(cache=True, nogil=True, parallel=True)
def _rows_parallel(base, geo, square, out, wide, scratch, most):
    """The row kernel on numba's current thread count; whether a float64 L2 output needs
    redoing. One compiled call does the scheduling, the work and the combining: each step
    run in Python costs tens of microseconds when the caches are cold (as after streaming 64
    MiB), several percent of a 64 MiB reduction."""
    comp = is_float64(base)
    threads = threads_now()
    block, pieces, n_items = _rows_schedule(geo, base.itemsize, threads, most, comp)
    hi, lo = _partials(scratch, _outputs(out, wide), pieces, comp)
    chunks = min(n_items, CHUNKS_PER_THREAD * threads)
    counters = chunk_counters(threads)
    for thread in prange(threads):
        ch, turn = next_chunk(counters, thread, 0, threads, chunks)
        while ch < chunks:
            _rows_work(base, geo, block, pieces, square, comp, out, wide, hi, lo,
                       n_items * ch // chunks, n_items * (ch + 1) // chunks, False)
            ch, turn = next_chunk(counters, thread, turn, threads, chunks)
    return _settle(hi, lo, pieces, square, comp, out, wide)


@njit(cache=True, nogil=True, parallel=True)
def _float32_rows_parallel(base, geo, square, out, wide, scratch, most):
    """:func:`_rows_parallel` reading three float32 streams at a time, a block of each
    (:func:`_streamed_sums3`; the layouts: :func:`_three_streams`): rows of at most
    STREAM_BLOCK_BYTES, several per output (non-adjacent axes), three outputs' rows side by
    side; whole rows of STREAM_BLOCK_BYTES and more, one per output (inner axis), three at a
    time (:func:`_rows_in_thirds`). A kernel of its own so that :func:`_rows_parallel`'s code
    stays as it is when loaded from numba's cache (docs/kernel-design.md, "The numba cache
    effect")."""
    threads = threads_now()
    block, pieces, n_items = _rows_schedule(geo, base.itemsize, threads, most)
    hi, lo = _partials(scratch, _outputs(out, wide), pieces, False)
    chunks = min(n_items, CHUNKS_PER_THREAD * threads)
    counters = chunk_counters(threads)
    for thread in prange(threads):
        ch, turn = next_chunk(counters, thread, 0, threads, chunks)
        while ch < chunks:
            _rows_work(base, geo, block, pieces, square, False, out, wide, hi, lo,
                       n_items * ch // chunks, n_items * (ch + 1) // chunks, True)
            ch, turn = next_chunk(counters, thread, turn, threads, chunks)
    return _settle(hi, lo, pieces, square, False, out, wide)


@njit(cache=True, nogil=True)
def _rows_serial(base, geo, square, out, wide):
    """The row kernel on the calling thread."""
    comp = is_float64(base)
    one = np.int64(1)  # not a literal: the parallel kernel's compiled work functions serve
    block, _, n_items = _rows_schedule(geo, base.itemsize, one, one, comp)
    none = wide[:0]  # no partial sums: one piece per output
    _rows_work(base, geo, block, one, square, comp, out, wide, none, none, one - 1, n_items,
               False)
    return comp and _unsafe(out, square)


@njit(cache=True, nogil=True, inline="always")
def _term(base, a, square):
    """``base[a]`` widened, squared when ``square``."""
    v = widen(base[a])
    return v * v if square else v


@njit(cache=True, nogil=True, inline="always")
def _two_sum_into(s, c, j, v, square):
    """``s[j] += v``, the rounding error into ``c[j]`` (:func:`._common.exact_add`:
    branch-free, so the loops over ``j`` vectorize; sums of squares are not negative)."""
    s[j], e = exact_add(s[j], v, square)
    c[j] += e


def _add_rows_either(base, off, r0, r1, rsz, rst, step, width, s, c, square):  # pragma: no cover
    """njit-only: :func:`_add_rows` with ``square`` made a compile-time constant (each form's
    loops specialised). Integers never square (their ReduceL2 is the exact reference's), so
    they compile the sums only, and refuse squares (ValueError)."""
    raise NotImplementedError


@overload(_add_rows_either)
def _add_rows_either_impl(base, off, r0, r1, rsz, rst, step, width, s, c, square):
    if isinstance(base.dtype, types.Integer) and base.dtype.bitwidth >= 32:  # not 16-bit floats
        def sums(base, off, r0, r1, rsz, rst, step, width, s, c, square):
            if square:
                raise ValueError("integer squares are the reference path's")
            _add_rows(base, off, r0, r1, rsz, rst, step, width, s, c, False)
        return sums

    def either(base, off, r0, r1, rsz, rst, step, width, s, c, square):
        if square:
            _add_rows(base, off, r0, r1, rsz, rst, step, width, s, c, True)
        else:
            _add_rows(base, off, r0, r1, rsz, rst, step, width, s, c, False)
    return either


@njit(cache=True, nogil=True, fastmath=_CONTRACT)
def _add_rows(base, off, r0, r1, rsz, rst, step, width, s, c, square):
    """Add the slices ``[off + row offset, + width * step)`` of reduced rows ``[r0, r1)`` into
    the column accumulators ``s`` (float64: TwoSum-compensated, the errors into ``c``).

    Contiguous slices add several rows per accumulator update, each row read in order, which
    is what the hardware prefetcher follows best: two neighbouring rows from each half (at most
    NARROW_BYTES, or WIDE_BYTES and more), one row from each third (in between; wide float32:
    :func:`_add_wide_rows`); why each, measured: docs/kernel-design.md, "Column kernel". Call it
    with a constant ``square`` (a run-time flag stays in the inner loops). No fastmath beyond
    contraction: it would cancel ``c``; the loops over ``j`` vectorize without it."""
    wide_vectors_for(base)
    if step == 1 and rsz.size == 1 and rst[0] == width:  # each row follows the last
        r0 = _add_narrow_rows(base, off, r0, r1, width, s, c, square, True)
    if step == 1:
        r0 = _add_contiguous(base, off, r0, r1, rsz, rst, width, s, c, square)
    _add_each_row(base, off, r0, r1, rsz, rst, step, width, s, c, square)


@njit(cache=True, nogil=True, fastmath=_CONTRACT, inline="always")
def _add_contiguous(base, off, r0, r1, rsz, rst, width, s, c, square):
    """:func:`_add_rows`'s grouped forms for contiguous slices; returns the first row left."""
    wide_vectors_for(base)
    nbytes = width * base.itemsize
    if nbytes >= WIDE_BYTES and _is_float32(base):
        return _add_wide_rows(base, off, r0, r1, rsz, rst, width, s, square)
    if nbytes <= NARROW_BYTES or nbytes >= WIDE_BYTES:
        return _add_row_pairs(base, off, r0, r1, rsz, rst, width, s, c, square)
    if _is_float32(base) or not (square or is_float64(base)):
        return _add_streamed_thirds(base, off, r0, r1, rsz, rst, width, s, square)
    return _add_thirds(base, off, r0, r1, rsz, rst, width, s, c, square)


@njit(cache=True, nogil=True, fastmath=_CONTRACT, inline="always")
def _lane_rows(width, itemsize):
    """How many narrow rows of ``width`` elements make one row of lanes (LANE_BYTES of
    input); 1 when fewer than four would (two are no faster)."""
    k = LANE_BYTES // (width * itemsize)
    return k if k >= 4 else 1


@njit(cache=True, nogil=True, fastmath=_CONTRACT)
def _add_narrow_rows(base, off, r0, r1, width, s, c, square, presum):
    """:func:`_add_rows` for narrow slices whose rows follow each other (row ``r`` at
    ``off + r * width``): ``k`` rows at a time as one row of ``k * width`` lanes in
    ``s[:k * width]`` (a short slice alone leaves most of each vector empty), added by
    :func:`_add_block` (``presum`` as there), the lanes then folded into ``s[:width]``. ``s``
    and ``c`` hold LANE_BYTES elements at least. Returns the first row of the 0 to k - 1 left
    over (``r0`` when the slice is not narrow)."""
    wide_vectors_for(base)
    k = _lane_rows(width, base.itemsize)
    g = (r1 - r0) // k
    if k < 2 or g < 4:
        return r0
    lanes = k * width
    s[width:lanes] = 0
    c[width:lanes] = 0
    comp = is_float64(base)
    _add_block(base, off + r0 * width, g, lanes, square, comp, s, c, 0, presum)
    _fold_lanes(s, c, width, lanes, width, comp, s, c, 0)
    return r0 + g * k


@njit(cache=True, nogil=True, inline="always")
def _fold_lanes(t, tc, first, lanes, width, comp, s, c, o):
    """Add lanes ``t[first:lanes]``, ``width`` at a time, into ``s[o:o + width]`` (``comp``:
    TwoSum, the errors and the lanes' compensations ``tc`` into ``c``)."""
    for i in range(first, lanes, width):
        for j in range(width):
            if comp:
                _two_sum_into(s, c, o + j, t[i + j], False)
                c[o + j] += tc[i + j]
            else:
                s[o + j] += t[i + j]


@njit(cache=True, nogil=True, fastmath=_CONTRACT)
def _add_each_row(base, off, r0, r1, rsz, rst, step, width, s, c, square):
    """:func:`_add_rows` one row per accumulator update: strided slices, and the rows the
    grouped forms leave over."""
    wide_vectors_for(base)
    comp = is_float64(base)
    nr = rsz.size
    rs = rst[0]
    us = np.uint64(step)
    for r in range(r0, r1):
        a = np.uint64(off + (r * rs if nr == 1 else _offset(r, rsz, rst, nr)))
        if comp:
            for j in range(np.uint64(width)):
                _two_sum_into(s, c, j, _term(base, a + j * us, square), square)
        else:
            for j in range(np.uint64(width)):
                s[j] += _term(base, a + j * us, square)


@njit(cache=True, nogil=True, fastmath=_CONTRACT)
def _add_row_pairs(base, off, r0, r1, rsz, rst, width, s, c, square):
    """:func:`_add_rows` for contiguous slices, rows ``r, r + 1`` of each half of the range per
    update. Returns the first row of the 0-3 left over.

    Row offsets are scalars spelled out at each use, here and in the other forms: an array
    in the loop costs two atomics, and so does a helper taking ``rsz``/``rst``
    (docs/kernel-design.md, "Deliberate separation and repetition")."""
    wide_vectors_for(base)
    comp = is_float64(base)
    nr = rsz.size
    rs = rst[0]
    uw = np.uint64(width)
    h = (r1 - r0) // 4 * 2
    for r in range(r0, r0 + h, 2):
        a0 = np.uint64(off + (r * rs if nr == 1 else _offset(r, rsz, rst, nr)))
        a1 = np.uint64(off + ((r + 1) * rs if nr == 1 else _offset(r + 1, rsz, rst, nr)))
        a2 = np.uint64(off + ((r + h) * rs if nr == 1 else _offset(r + h, rsz, rst, nr)))
        a3 = np.uint64(off + ((r + h + 1) * rs if nr == 1
                              else _offset(r + h + 1, rsz, rst, nr)))
        if comp:
            for j in range(uw):
                v = ((_term(base, a0 + j, square) + _term(base, a1 + j, square))
                     + (_term(base, a2 + j, square) + _term(base, a3 + j, square)))
                _two_sum_into(s, c, j, v, square)
        else:
            for j in range(uw):
                s[j] += ((_term(base, a0 + j, square) + _term(base, a1 + j, square))
                         + (_term(base, a2 + j, square) + _term(base, a3 + j, square)))
    return r0 + 2 * h


@njit(cache=True, nogil=True, fastmath=_CONTRACT)
def _add_thirds(base, off, r0, r1, rsz, rst, width, s, c, square):
    """:func:`_add_rows` for contiguous slices, row ``r`` of each third of the range per update,
    in a plain loop (float64, and float16/bfloat16 squares: prefetching is no faster).
    Returns the first row of the 0-2 left over."""
    wide_vectors_for(base)
    comp = is_float64(base)
    nr = rsz.size
    rs = rst[0]
    uw = np.uint64(width)
    t = (r1 - r0) // 3
    for r in range(r0, r0 + t):
        a0 = np.uint64(off + (r * rs if nr == 1 else _offset(r, rsz, rst, nr)))
        a1 = np.uint64(off + ((r + t) * rs if nr == 1 else _offset(r + t, rsz, rst, nr)))
        a2 = np.uint64(off + ((r + 2 * t) * rs if nr == 1
                              else _offset(r + 2 * t, rsz, rst, nr)))
        if comp:
            for j in range(uw):
                _two_sum_into(s, c, j, (_term(base, a0 + j, square)
                                        + _term(base, a1 + j, square))
                              + _term(base, a2 + j, square), square)
        else:
            for j in range(uw):
                s[j] += ((_term(base, a0 + j, square) + _term(base, a1 + j, square))
                         + _term(base, a2 + j, square))
    return r0 + 3 * t


@njit(cache=True, nogil=True, fastmath=_CONTRACT)
def _add_streamed_thirds(base, off, r0, r1, rsz, rst, width, s, square):
    """:func:`_add_thirds` a block at a time, before each block each stream's row some rows on
    prefetched (float32: WIDE_BLOCK_BYTES blocks, WIDE_PREFETCH_BYTES on; float16, bfloat16
    and integer sums: STREAM_BLOCK_BYTES, a third of PREFETCH_BYTES on); the rows prefetched
    are all in the range. Returns the first row of the 0-2 left over."""
    wide_vectors_for(base)
    nr = rsz.size
    rs = rst[0]
    uw = np.uint64(width)
    t = (r1 - r0) // 3
    if _is_float32(base):
        block, line, _ = _wide_steps(base[0])
        d = max(1, WIDE_PREFETCH_BYTES // (width * base.itemsize))
    else:
        block, line, _ = _stream_steps(base[0])
        d = max(1, PREFETCH_BYTES // (3 * width * base.itemsize))
    for r in range(r0, r0 + t):
        a0 = np.uint64(off + (r * rs if nr == 1 else _offset(r, rsz, rst, nr)))
        a1 = np.uint64(off + ((r + t) * rs if nr == 1 else _offset(r + t, rsz, rst, nr)))
        a2 = np.uint64(off + ((r + 2 * t) * rs if nr == 1
                              else _offset(r + 2 * t, rsz, rst, nr)))
        ahead = r + d < r0 + t
        if ahead:
            p0 = np.uint64(off + ((r + d) * rs if nr == 1 else _offset(r + d, rsz, rst, nr)))
            p1 = np.uint64(off + ((r + t + d) * rs if nr == 1
                                  else _offset(r + t + d, rsz, rst, nr)))
            p2 = np.uint64(off + ((r + 2 * t + d) * rs if nr == 1
                                  else _offset(r + 2 * t + d, rsz, rst, nr)))
        for jb in range(np.uint64(0), uw, block):
            e = min(jb + block, uw)
            if ahead:
                for q in range(jb, e, line):
                    prefetch(base, p0 + q)
                    prefetch(base, p1 + q)
                    prefetch(base, p2 + q)
            for j in range(jb, e):
                s[j] += ((_term(base, a0 + j, square) + _term(base, a1 + j, square))
                         + _term(base, a2 + j, square))
    return r0 + 3 * t


@njit(cache=True, nogil=True, fastmath=_CONTRACT)
def _add_wide_rows(base, off, r0, r1, rsz, rst, width, s, square):
    """:func:`_add_rows` for contiguous float32 slices of WIDE_BYTES or more: ``[r0, r1)`` is
    taken GROUP_ROWS rows at a time, and in each group row r of each third per
    accumulator update, a WIDE_BLOCK_BYTES block of each row at a time; before each block,
    each row's cache lines WIDE_PREFETCH_BYTES further on are prefetched (past a row's end,
    the start of the next row, the next one its stream reads). Returns the first row of the
    0-2 left for the caller to add. The hardware prefetcher alone keeps too few reads in
    flight for this loop (measured: docs/kernel-design.md, "Column kernel")."""
    wide_vectors_for(base)
    nr = rsz.size
    rs = rst[0]
    uw = np.uint64(width)
    block, line, ahead = _wide_steps(base[0])
    last = np.uint64(base.size - 1)
    full = uw // block * block
    g = r0
    while g + 3 <= r1:
        t = min(GROUP_ROWS, r1 - g) // 3
        for r in range(g, g + t):
            a0 = np.uint64(off + (r * rs if nr == 1 else _offset(r, rsz, rst, nr)))
            a1 = np.uint64(off + ((r + t) * rs if nr == 1 else _offset(r + t, rsz, rst, nr)))
            a2 = np.uint64(off + ((r + 2 * t) * rs if nr == 1
                                  else _offset(r + 2 * t, rsz, rst, nr)))
            for jb in range(np.uint64(0), full, block):
                for q in range(jb + ahead, jb + ahead + block, line):
                    prefetch(base, min(a0 + q, last))
                    prefetch(base, min(a1 + q, last))
                    prefetch(base, min(a2 + q, last))
                for j in range(jb, jb + block):
                    s[j] += ((_term(base, a0 + j, square) + _term(base, a1 + j, square))
                             + _term(base, a2 + j, square))
            for j in range(full, uw):  # the last part block
                s[j] += ((_term(base, a0 + j, square) + _term(base, a1 + j, square))
                         + _term(base, a2 + j, square))
        g += 3 * t
    return g


@njit(cache=True, nogil=True)
def _columns(comp):
    """Adjacent outputs per column-kernel work item (COLUMNS, or COLUMNS_COMPENSATED)."""
    return COLUMNS_COMPENSATED if comp else COLUMNS


@njit(cache=True, nogil=True)
def _cols_work(base, geo, pieces, square, comp, out, wide, hi, lo, w0, w1):
    """Work items ``[w0, w1)`` of the column kernel: item ``w`` is piece ``w % pieces`` of the
    block of up to :func:`_columns` adjacent outputs ``w // pieces``."""
    wide_vectors_for(base)
    ksz, kst = kept_dims(geo)
    rsz, rst = reduced_dims(geo)
    nk = ksz.size
    width_all = ksz[nk - 1]
    step = kst[nk - 1]
    columns = _columns(comp)
    blocks = (width_all + columns - 1) // columns
    n_red = 1
    for d in range(rsz.size):
        n_red *= rsz[d]
    zero = _zero(widen(base[0]))
    s = np.full(max(min(columns, width_all), LANE_BYTES), zero)  # room for narrow lanes
    c = np.full(s.size, zero)
    n_out = _outputs(out, wide)
    for w in range(w0, w1):
        q = w // pieces
        p = w - q * pieces
        ko = q // blocks
        j0 = (q - ko * blocks) * columns
        width = min(columns, width_all - j0)
        off = _offset(ko, ksz, kst, nk - 1) + j0 * step
        s[:width] = zero
        if comp:
            c[:width] = zero
        r0 = n_red * p // pieces
        r1 = n_red * (p + 1) // pieces
        _add_rows_either(base, off, r0, r1, rsz, rst, step, width, s, c, square)
        o = ko * width_all + j0
        if pieces == 1:
            _finish_run(out, wide, o, s, c, width, square)
            continue
        for j in range(width):
            hi[p * n_out + o + j] = s[j]
            if comp:
                lo[p * n_out + o + j] = c[j]


@njit(cache=True, nogil=True, parallel=True)
def _cols_parallel(base, geo, square, out, wide, scratch, most):
    """The column kernel on numba's current thread count, as :func:`_rows_parallel`."""
    comp = is_float64(base)
    threads = threads_now()
    pieces, n_items = _cols_schedule(geo, comp, threads, most)
    hi, lo = _partials(scratch, _outputs(out, wide), pieces, comp)
    chunks = min(n_items, CHUNKS_PER_THREAD * threads)
    counters = chunk_counters(threads)
    for thread in prange(threads):
        ch, turn = next_chunk(counters, thread, 0, threads, chunks)
        while ch < chunks:
            _cols_work(base, geo, pieces, square, comp, out, wide, hi, lo,
                       n_items * ch // chunks, n_items * (ch + 1) // chunks)
            ch, turn = next_chunk(counters, thread, turn, threads, chunks)
    return _settle(hi, lo, pieces, square, comp, out, wide)


@njit(cache=True, nogil=True)
def _cols_serial(base, geo, square, out, wide):
    """The column kernel on the calling thread."""
    comp = is_float64(base)
    one = np.int64(1)  # not a literal: the parallel kernel's compiled work functions serve
    _, n_items = _cols_schedule(geo, comp, one, one)
    none = wide[:0]  # no partial sums: one piece per output
    _cols_work(base, geo, one, square, comp, out, wide, none, none, one - 1, n_items)
    return comp and _unsafe(out, square)


@njit(cache=True, nogil=True, fastmath=_ROWS_MATH)
def _small_nd(base, geo, square, comp, out):
    """A small C-contiguous array, any reduced axes (:func:`._common.memory_order_geometry`),
    one thread, in memory order: rows of a reduced innermost dim are summed whole; with a kept
    innermost dim, each block of reduced rows is added into the adjacent outputs (as the
    column kernel does).

    The loop over units (rows, or blocks of rows) steps an odometer over the outer dims (no
    divisions, :func:`._common.next_outer`)."""
    wide_vectors_for(base)
    sizes, red, ost = merged_dims(geo)
    m = sizes.size
    n_in = sizes[m - 1]
    zero = _zero(widen(base[0]))
    rows = red[m - 1] != 0
    if rows and comp:  # float64: four outputs at a time in compensated lanes
        _outputs_in_lanes(base, sizes, red, square, out)
        return
    if rows and m <= 2:  # output o is row o (inner, all axes): no accumulators to allocate
        for o in range(out.size):
            _finish(out, o, _row_sum(base, o * n_in, n_in, square), zero, square)
        return
    n_rows = 1 if rows or m < 2 else sizes[m - 2]  # the reduced run just outside the columns
    k = 1 if rows else _lane_rows(n_in, base.itemsize)
    narrow = n_rows >= 16 * k > 16  # rows of lanes (:func:`_add_narrow_rows`), then the rest
    lanes = LANE_BYTES if narrow else 0  # their room, after the outputs' accumulators
    s = np.full(out.size + lanes, zero)
    c = np.full(out.size + lanes, zero)
    idx = np.zeros(m, np.int64)
    unit = n_in * n_rows
    last = m - 2 if rows else m - 3  # the odometer's fastest dim
    o = 0
    if rows:  # two loops, not a test in one: the test slows the rows' loop
        for u in range(base.size // unit):
            if u:
                o = next_outer(idx, sizes, ost, last, o)
            s[o] += _row_sum(base, u * unit, n_in, square)
    else:
        t = s[out.size:]
        tc = c[out.size:]
        done = 0
        for u in range(base.size // unit):
            if u:
                o = next_outer(idx, sizes, ost, last, o)
            if narrow:
                t[:n_in] = zero
                tc[:n_in] = zero
                done = _add_narrow_rows(base, u * unit, 0, n_rows, n_in, t, tc, square, False)
                _fold_lanes(t, tc, 0, n_in, n_in, comp, s, c, o)
            _add_block(base, u * unit + done * n_in, n_rows - done, n_in, square, comp, s, c, o,
                       False)
    for o in range(out.size):
        _finish(out, o, s[o], c[o], square)


@njit(cache=True, nogil=True, fastmath=_CONTRACT, inline="always")
def _add_block(base, a, n_rows, width, square, comp, s, c, o, presum):
    """Add the ``n_rows`` contiguous rows of ``width`` elements from ``base[a]`` into
    ``s[o:o + width]``. Widened float16/bfloat16/float32 and integers: four rows per
    accumulator update (two neighbouring rows from each half, as :func:`_add_rows`), then the
    rows left: a quarter of the accumulator loads and stores. float64: four rows per update,
    each element added on its own (:func:`._common.exact_add`) and its error into ``c`` in row
    order, the bits of row by row (pre-summed rows lose accuracy), or
    with ``presum`` four rows per TwoSum as the column kernel adds them (:func:`_add_row_pairs`,
    faster on large narrow slices). Inlined: a call taking the arrays would cost atomic
    reference-count updates per block (docs/kernel-design.md, "Small arrays")."""
    wide_vectors_for(base)
    uo = np.uint64(o)  # unsigned indices: no wraparound tests, the loops vectorize
    uw = np.uint64(width)
    h = n_rows // 4 * 2 if presum or not comp else 0
    for r in range(0, h, 2):
        a0 = np.uint64(a + r * width)
        a1 = a0 + uw
        a2 = np.uint64(a + (r + h) * width)
        a3 = a2 + uw
        if comp:
            for j in range(uw):
                v = ((_term(base, a0 + j, square) + _term(base, a1 + j, square))
                     + (_term(base, a2 + j, square) + _term(base, a3 + j, square)))
                _two_sum_into(s, c, uo + j, v, square)
        else:
            for j in range(uw):
                s[uo + j] += ((_term(base, a0 + j, square) + _term(base, a1 + j, square))
                              + (_term(base, a2 + j, square) + _term(base, a3 + j, square)))
    first = 2 * h
    if comp:  # four rows per accumulator update, each element added on its own: the same bits
        for r in range(first, n_rows - 3, 4):
            a0 = np.uint64(a + r * width)
            a1 = a0 + uw
            a2 = a1 + uw
            a3 = a2 + uw
            for j in range(uw):
                t, e0 = exact_add(s[uo + j], _term(base, a0 + j, square), square)
                t, e1 = exact_add(t, _term(base, a1 + j, square), square)
                t, e2 = exact_add(t, _term(base, a2 + j, square), square)
                s[uo + j], e3 = exact_add(t, _term(base, a3 + j, square), square)
                c[uo + j] = (((c[uo + j] + e0) + e1) + e2) + e3
        first = n_rows - (n_rows - first) % 4
    for r in range(first, n_rows):
        row = np.uint64(a + r * width)
        if comp:
            for j in range(uw):
                _two_sum_into(s, c, uo + j, _term(base, row + j, square), square)
        else:
            for j in range(uw):
                s[uo + j] += _term(base, row + j, square)


def _outputs_in_lanes(base, sizes, red, square, out):  # pragma: no cover - njit only
    raise NotImplementedError


@overload(_outputs_in_lanes)
def _outputs_in_lanes_impl(base, sizes, red, square, out):
    """:func:`_small_nd`'s float64 reductions of a reduced innermost dim: four outputs at a
    time, all their rows into the same compensated lanes (:func:`._lanes.four_outputs`; the
    last 0-3 by :func:`._lanes.one_output`), from the merged dims ``sizes`` and their reduced
    flags ``red`` (C order). Nothing for the other dtypes (never called for them)."""
    if base.dtype != types.float64:
        return lambda base, sizes, red, square, out: None

    def impl(base, sizes, red, square, out):
        ksz, kst, rsz, rst = _split_dims(sizes, red)
        nk = ksz.size
        q = out.size // 4 * 4
        for o in range(0, q, 4):
            a = _offset(o, ksz, kst, nk)
            b = _offset(o + 1, ksz, kst, nk)
            d = _offset(o + 2, ksz, kst, nk)
            e = _offset(o + 3, ksz, kst, nk)
            h0, l0, h1, l1, h2, l2, h3, l3 = (
                four_outputs(base, a, b, d, e, rsz, rst, True) if square
                else four_outputs(base, a, b, d, e, rsz, rst, False))
            _finish(out, o, h0, l0, square)
            _finish(out, o + 1, h1, l1, square)
            _finish(out, o + 2, h2, l2, square)
            _finish(out, o + 3, h3, l3, square)
        for o in range(q, out.size):
            a = _offset(o, ksz, kst, nk)
            hi, lo = (one_output(base, a, rsz, rst, True) if square
                      else one_output(base, a, rsz, rst, False))
            _finish(out, o, hi, lo, square)
    return impl


@njit(cache=True, nogil=True)
def _split_dims(sizes, red):
    """The kept and reduced sizes and element strides of C-order merged dims ``sizes`` with
    reduced flags ``red`` (as :func:`._common.c_packed` gives them)."""
    m = sizes.size
    nk = 0
    for d in range(m):
        nk += red[d] == 0
    dims = np.empty((4, m), np.int64)  # one allocation (this runs on every small call)
    ksz, kst = dims[0, :nk], dims[1, :nk]
    rsz, rst = dims[2, :m - nk], dims[3, :m - nk]
    stride = 1
    ik = nk
    ir = m - nk
    for d in range(m - 1, -1, -1):
        if red[d]:
            ir -= 1
            rsz[ir] = sizes[d]
            rst[ir] = stride
        else:
            ik -= 1
            ksz[ik] = sizes[d]
            kst[ik] = stride
        stride *= sizes[d]
    return ksz, kst, rsz, rst


@njit(cache=True, nogil=True)
def _small_sum(base, geo, out):
    """ReduceSum by :func:`_small_nd`, its flags fixed at compile time (as runtime arguments
    they slow small arrays); True when a float64 output is inf or NaN (the caller then redoes
    it, scaled)."""
    wide_vectors_for(base)
    comp = is_float64(base)
    _small_nd(base, geo, False, comp, out)
    return comp and _unsafe_sum(out)


@njit(cache=True, nogil=True)
def _small_l2(base, geo, out):
    """ReduceL2 by :func:`_small_nd`; True when a float64 output overflowed or may have lost
    bits to underflow (the caller then redoes it, scaled)."""
    wide_vectors_for(base)
    comp = is_float64(base)
    _small_nd(base, geo, True, comp, out)
    return comp and _unsafe_small_l2(out)


@njit(cache=True, nogil=True)
def _combine(hi, lo, pieces, square, comp, out, wide):
    """Add each output's pieces, in order (folded when ``comp``), and store the result."""
    n_out = _outputs(out, wide)
    for o in range(n_out):
        s = hi[o]
        c = _zero(s)
        if comp:
            c = lo[o]
            for p in range(1, pieces):
                s, c = neumaier(s, c, hi[p * n_out + o])
                c += lo[p * n_out + o]
        else:
            for p in range(1, pieces):
                s += hi[p * n_out + o]
        _finish_to(out, wide, o, s, c, square)


@njit(cache=True, nogil=True, inline="always")
def _redo_dims(geo):
    """What the redo walks read of ``geo``: kept (sizes, strides), reduced (sizes, strides),
    the innermost reduced dim's size and stride, and the rows (outer reduced elements)."""
    ksz, kst = kept_dims(geo)
    rsz, rst = reduced_dims(geo)
    nr = rsz.size
    rows = 1
    for d in range(nr - 1):
        rows *= rsz[d]
    return ksz, kst, rsz, rst, rsz[nr - 1], rst[nr - 1], rows


@njit(cache=True, nogil=True)
def _l2_scaled(base, geo, which, out):
    """float64 L2 of the outputs ``which``, every element scaled by 2**-e, e the exponent of
    the largest magnitude: no overflow, no underflow that matters."""
    wide_vectors_for(base)
    ksz, kst, rsz, rst, n_in, s_in, rows = _redo_dims(geo)
    nr = rsz.size
    for k in range(which.size):
        o = which[k]
        off = _offset(o, ksz, kst, ksz.size)
        peak = 0.0
        for t in range(rows):
            a = off + _offset(t, rsz, rst, nr - 1)
            for i in range(n_in):
                m = abs(base[a + i * s_in])
                if not m <= peak:  # also takes a NaN
                    peak = m
        if peak == 0.0 or not math.isfinite(peak):
            out[o] = peak
            continue
        e = math.frexp(peak)[1]
        s = 0.0
        c = 0.0
        for t in range(rows):
            a = off + _offset(t, rsz, rst, nr - 1)
            for i in range(n_in):
                v = math.ldexp(base[a + i * s_in], -e)
                s, c = neumaier(s, c, v * v)
        out[o] = math.ldexp(math.sqrt(s + c), e)


#: A float64 sum redone by :func:`_sum_scaled` adds its elements times 2**-SUM_SCALE: partial
#: sums stay under n 2**960, and only elements under 2**-958 lose bits (to subnormals).
SUM_SCALE = 64


@njit(cache=True, nogil=True)
def _sum_scaled(base, geo, which, out):
    """float64 ReduceSum of the outputs ``which``, whose plain sums were inf or NaN: NaN, or
    infinities of both signs, give NaN; infinities of one sign that infinity; else the finite
    elements scaled by 2**-SUM_SCALE, added compensated and scaled back (inf only where the
    true sum overflows). Lost bits of elements under 2**-958: within the sums' n u sum|x|."""
    ksz, kst, rsz, rst, n_in, s_in, rows = _redo_dims(geo)
    nr = rsz.size
    down = 2.0**-SUM_SCALE
    for k in range(which.size):
        o = which[k]
        off = _offset(o, ksz, kst, ksz.size)
        s = 0.0
        c = 0.0
        nan = False
        above = False
        below = False
        for t in range(rows):
            a = off + _offset(t, rsz, rst, nr - 1)
            for i in range(n_in):
                v = base[a + i * s_in]
                if v - v == 0.0:  # finite
                    s, c = neumaier(s, c, v * down)
                else:
                    nan |= v != v
                    above |= v == np.inf
                    below |= v == -np.inf
        if nan or (above and below):
            out[o] = np.nan
        elif above or below:
            out[o] = np.inf if above else -np.inf
        else:
            out[o] = (s + c) * 2.0**SUM_SCALE
