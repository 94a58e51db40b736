"""Compiled ReduceSum and ReduceL2 (numba), for every layout, without copying the input.

Any reduction is first put in canonical form (:func:`._common.canonical`): kept and reduced dims
with non-negative element strides, outermost first. Two kernels then cover every layout:

* rows (the innermost dim is reduced: inner, all, non-adjacent axes): each output sums whole
  rows, contiguous rows vectorized; when each output has several rows, neighbouring outputs
  take the same row index together (their rows are usually neighbours in memory); when there
  are few outputs, each output's reduced range is cut in pieces that threads share, and the
  pieces are combined in a fixed order;
* columns (the innermost dim is kept: outer, middle): a block of up to ``COLUMNS`` adjacent
  outputs adds the matching slice of every reduced row into accumulators that stay in cache.

Small C-contiguous inputs (below ``PARALLEL_MIN`` elements), whatever the axes, take a one-call
path (:func:`_small_nd`) that skips the canonical form; large ones run on all threads.

float16/bfloat16/float32 accumulate in float64 and round once (float16/bfloat16 via a
round-to-odd float32). float64 sums 512-element blocks (vectorized) and folds the block sums
with Neumaier's compensated summation; the column kernel adds rows four at a time (pairwise)
and folds each such sum in with Knuth's TwoSum. The
error is then about one ulp plus a small multiple of 2**-53 * sum(|x|), however long the
reduction. ReduceL2 of float64 squares unscaled; the outputs whose sum of squares overflowed or
may have lost bits to underflow are redone, scaled by a power of two. NaN anywhere gives NaN,
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

import numpy as np
from numba import njit, prange, types
from numba.extending import overload

from ...plan import ReductionPlan
from ._common import (
    REASSOC,
    canonical,
    num_threads,
    parallel_section,
    prefetch,
    storage_dtype,
    store,
    widen,
)

#: Elements per block of a compensated (float64) row sum (the block is summed in vector lanes).
BLOCK = 512
#: Adjacent outputs one column-kernel work item accumulates.
COLUMNS = 4096
#: Below this many input elements the kernels run on the calling thread only, and C-contiguous
#: inputs take the one-call path :func:`_small_nd` whatever the axes. A parallel launch costs
#: ~20 us on a quiet machine (one thread sums 2**18 float32 elements in cache in ~20-30 us) and
#: several ms when the other core is busy; one thread stays within ~2x of two up to here.
PARALLEL_MIN = 1 << 20
#: Parallel loops are cut in this many chunks per thread, handed out dynamically.
CHUNKS_PER_THREAD = 16
#: Least elements (rows: of one row range; columns: rows) in one piece of a split reduction.
MIN_PIECE_ELEMENTS = 1 << 14
MIN_PIECE_ROWS = 64
#: Bytes of rows one row-kernel step reads across neighbouring outputs (when each output has
#: several rows, as with non-adjacent reduced axes).
ROW_BLOCK_BYTES = 1 << 16

#: Rows ahead of the current four that the column kernel prefetches.
AHEAD_ROWS = 8
#: ...when the slices the column kernel adds are at most this many elements (wider ones stream
#: well without: prefetching slowed the outer layout, 4096 wide, by ~20%).
PREFETCH_WIDTH = 1024

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
_GEOMETRIES: dict[tuple, np.ndarray] = {}
_TINY_L2 = 2.0**-450  # a float64 L2 below this may have lost its low squares to underflow
#: Row sums: reassociation, and fused multiply-adds for squares (a float16/bfloat16/float32
#: square is exact in float64, so fusing changes nothing there; for float64 it rounds less).
_ROWS_MATH = REASSOC | {"contract"}


def reduce_sum(data: np.ndarray, plan: ReductionPlan) -> np.ndarray | None:
    """ReduceSum of ``data`` as ``plan`` says; None for a case not served here."""
    return _reduce(data, plan, False)


def reduce_l2(data: np.ndarray, plan: ReductionPlan) -> np.ndarray | None:
    """ReduceL2 of ``data`` as ``plan`` says; None for integers (the reference is exact)."""
    if data.dtype.kind in "iu":
        return None
    return _reduce(data, plan, True)


# ----------------------------------------------------------------------------- driver


def _reduce(data: np.ndarray, plan: ReductionPlan, square: bool) -> np.ndarray | None:
    dtype = data.dtype
    acc = _ACCUMULATOR.get(dtype)
    if acc is None:
        return None
    n_red = plan.reduced_size
    if n_red == 0:
        return np.zeros(plan.output_shape, dtype)
    size = data.size
    if size == 0:
        return np.empty(plan.output_shape, dtype)
    axes = plan.axes
    if type(data) is np.ndarray and data.flags.c_contiguous and dtype.isnative:
        storage = _STORAGE[dtype]
        base = data.view(storage).reshape(-1)
        base.flags.writeable = False  # one compiled variant for writable and read-only inputs
        n_out = size // n_red
        if size < PARALLEL_MIN:  # any axes: one call, in memory order, no canonical form
            out = np.empty(n_out, storage)
            _small_nd(base, _geometry_nd(data.shape, axes), square, dtype == _F64, out)
            if not (square and dtype == _F64 and _unsafe_l2(out)):  # else: redone below
                return out.view(dtype).reshape(plan.output_shape)
        elif not axes or axes[0] == data.ndim - len(axes) or axes[-1] == len(axes) - 1:
            # a trailing (rows) or leading (columns) run of axes
            inner = not axes or axes[0] == data.ndim - len(axes)
            out = np.empty(n_out, storage)
            _run(base, _geometry_2d(inner, n_out, n_red), inner, n_out, (n_out,), n_red,
                 size, square, dtype, acc, out)
            return out.view(dtype).reshape(plan.output_shape)
    canon = canonical(data, axes)
    if canon is None:
        return None
    kept = canon.kept_sizes
    n_out = math.prod(kept)
    geo = _geometry(kept, canon.kept_strides, canon.red_sizes, canon.red_strides)
    out = np.empty(n_out, _STORAGE[dtype])
    base = canon.base[canon.offset:].view(_STORAGE[dtype])
    _run(base, geo, canon.inner_reduced, n_out, kept, n_red, size, square, dtype, acc, out)
    result = canon.restore(out.view(dtype), plan.kept_shape)
    return np.ascontiguousarray(result).reshape(plan.output_shape)


def _geometry(ksz: tuple, kst: tuple, rsz: tuple, rst: tuple) -> np.ndarray:
    """The dims packed for the kernels: nk, nr, kept sizes, kept strides, red sizes, strides."""
    key = (ksz, kst, rsz, rst)
    geo = _GEOMETRIES.get(key)
    if geo is None:
        if len(_GEOMETRIES) > 256:
            _GEOMETRIES.clear()
        geo = np.array((len(ksz), len(rsz), *ksz, *kst, *rsz, *rst), np.int64)
        geo.flags.writeable = False
        _GEOMETRIES[key] = geo
    return geo


def _geometry_nd(shape: tuple, axes: tuple) -> np.ndarray:
    """C-order dims of a C-contiguous ``shape`` with adjacent kept/reduced dims merged, packed
    for :func:`_small_nd`: m, sizes, reduced flags, output strides (0 for reduced dims)."""
    key = (shape, axes)
    geo = _GEOMETRIES.get(key)
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
        if len(_GEOMETRIES) > 256:
            _GEOMETRIES.clear()
        geo = np.array((len(sizes), *sizes, *red, *ost), np.int64)
        geo.flags.writeable = False
        _GEOMETRIES[key] = geo
    return geo


def _geometry_2d(inner: bool, n_out: int, n_red: int) -> np.ndarray:
    """The packed dims of an (n_out, n_red) row-major array (rows) or (n_red, n_out) (columns)."""
    if inner:
        return _geometry((n_out,), (n_red,), (n_red,), (1,))
    return _geometry((n_out,), (1,), (n_red,), (n_out,))


def _run(base, geo, inner, n_out, kept, n_red, size, square, dtype, acc, out) -> None:
    """Run the row (``inner``) or column kernel, on all threads for large inputs."""
    comp = dtype == _F64
    threads = num_threads() if size >= PARALLEL_MIN else 1
    # partial sums (pieces per output) stay under 1/64 of the input
    most = size * dtype.itemsize // (64 * n_out * (16 if comp else 8))
    if inner:
        nk, nr = int(geo[0]), int(geo[1])
        row = int(geo[1 + 2 * nk + nr])  # length of the innermost reduced dim
        block = 1
        if row < n_red:  # several rows per output: take neighbouring outputs' rows together
            block = max(1, min(ROW_BLOCK_BYTES // (row * dtype.itemsize), 64,
                               n_out // (4 * threads)))
        n_base = -(-n_out // block)
        pieces = _pieces(n_base, threads, min(most, n_red // MIN_PIECE_ELEMENTS))
        work, parallel = _rows_work, _rows_parallel
        args = (base, geo, block, pieces, square, comp, out)
    else:
        n_base = (n_out // kept[-1]) * -(-kept[-1] // COLUMNS)
        pieces = _pieces(n_base, threads, min(most, n_red // MIN_PIECE_ROWS))
        work, parallel = _cols_work, _cols_parallel
        args = (base, geo, pieces, square, comp, out)
    if pieces > 1:
        hi = np.empty(n_out * pieces, acc)
        lo = np.empty(n_out * pieces, acc) if comp else hi
    else:
        hi = lo = _EMPTY[acc]
    n_items = n_base * pieces
    if threads > 1:
        with parallel_section():
            parallel(*args, hi, lo, min(n_items, CHUNKS_PER_THREAD * threads))
    else:
        work(*args, hi, lo, 0, n_items)
    if pieces > 1:
        _combine(hi, lo, pieces, square, comp, out)
    if square and comp and _unsafe_l2(out):
        _redo_l2(base, geo, out)


@njit(cache=True, nogil=True)
def _unsafe_l2(out):
    """Whether some float64 L2 output overflowed or may have lost bits to underflow."""
    for i in range(out.size):
        v = out[i]
        if v == np.inf or v < _TINY_L2:
            return True
    return False


def _redo_l2(base: np.ndarray, geo: np.ndarray, out: np.ndarray) -> None:
    """Recompute, scaled, the float64 L2 outputs whose plain sum of squares was unsafe."""
    with np.errstate(invalid="ignore"):
        suspect = np.flatnonzero((out == np.inf) | (out < _TINY_L2))
    if suspect.size:
        _l2_scaled(base, geo, suspect, out)


def _pieces(items: int, threads: int, most: int) -> int:
    """How many pieces to cut each output's reduction into, so that threads share the work."""
    if threads <= 1 or items >= 4 * threads:
        return 1
    return max(1, min(64, -(-8 * threads // items), most))


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


@njit(cache=True, nogil=True)
def _fold(s, c, x):
    """Neumaier: ``s + c`` gains ``x`` exactly (no fastmath here: it would cancel ``c``)."""
    t = s + x
    if abs(s) >= abs(x):
        c += (s - t) + x
    else:
        c += (x - t) + s
    return t, c


@njit(cache=True, nogil=True, fastmath=_ROWS_MATH)
def _segment(base, a, n, step, square):
    """Sum (of squares) of ``base[a + i*step]``, ``0 <= i < n`` (n >= 1), widened."""
    if step == 1:
        seg = base[a:a + n]
        v = widen(seg[0])
        if square:
            acc = v * v
            for i in range(1, n):
                v = widen(seg[i])
                acc += v * v
        else:
            acc = v
            for i in range(1, n):
                acc += widen(seg[i])
        return acc
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


@njit(cache=True, nogil=True)
def _offset(index, sizes, strides, last):
    """Element offset of flat C-order ``index`` over ``sizes[:last]``."""
    off = 0
    for d in range(last - 1, -1, -1):
        n = sizes[d]
        q = index // n
        off += (index - q * n) * strides[d]
        index = q
    return off


@njit(cache=True, nogil=True, fastmath=_ROWS_MATH)
def _rows_range(base, offs, m, rsz, rst, lo, hi, square, comp, s, c):
    """Add flat reduced indices ``[lo, hi)`` of the ``m`` outputs at element offsets
    ``offs[:m]`` into ``s[:m]`` (and ``c``). Row by row, all ``m`` outputs take the same row:
    neighbouring outputs' rows are often neighbours in memory."""
    nr = rsz.size
    n_in = rsz[nr - 1]
    s_in = rst[nr - 1]
    t = lo // n_in
    j = lo - t * n_in
    pos = lo
    while pos < hi:
        row = _offset(t, rsz, rst, nr - 1) + j * s_in
        n = min(n_in - j, hi - pos)
        for k in range(m):
            a = offs[k] + row
            if comp and s_in == 1:
                sk = s[k]
                ck = c[k]
                for b in range(0, n, BLOCK):
                    seg = base[a + b:a + min(b + BLOCK, n)]
                    part = 0.0
                    if square:
                        for i in range(seg.size):
                            v = widen(seg[i])
                            part += v * v
                    else:
                        for i in range(seg.size):
                            part += widen(seg[i])
                    sk, ck = _fold(sk, ck, part)
                s[k] = sk
                c[k] = ck
            elif comp:
                sk = s[k]
                ck = c[k]
                for b in range(0, n, BLOCK):
                    sk, ck = _fold(sk, ck, _segment(base, a + b * s_in, min(BLOCK, n - b), s_in,
                                                    square))
                s[k] = sk
                c[k] = ck
            elif s_in == 1:  # inline: a call per short row costs as much as the row
                seg = base[a:a + n]
                acc = s[k]
                if square:
                    for i in range(n):
                        v = widen(seg[i])
                        acc += v * v
                else:
                    for i in range(n):
                        acc += widen(seg[i])
                s[k] = acc
            else:
                s[k] += _segment(base, a, n, s_in, square)
        pos += n
        t += 1
        j = 0


@njit(cache=True, nogil=True)
def _unpack(geo):
    """Kept sizes, kept strides, reduced sizes, reduced strides (views of ``geo``)."""
    nk = geo[0]
    nr = geo[1]
    return (geo[2:2 + nk], geo[2 + nk:2 + 2 * nk], geo[2 + 2 * nk:2 + 2 * nk + nr],
            geo[2 + 2 * nk + nr:2 + 2 * nk + 2 * nr])


@njit(cache=True, nogil=True, fastmath=_ROWS_MATH)
def _rows_work(base, geo, block, pieces, square, comp, out, hi, lo, w0, w1):
    """Work items ``[w0, w1)`` of the row kernel: item ``w`` is piece ``w % pieces`` of the
    ``block`` outputs from ``(w // pieces) * block`` on (canonical kept order)."""
    ksz, kst, rsz, rst = _unpack(geo)
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
        for o in range(w0, w1):
            a = o * kst[0] if nk == 1 else _offset(o, ksz, kst, nk)
            seg = base[a:a + n]
            acc = zero
            if square:
                for i in range(n):
                    v = widen(seg[i])
                    acc += v * v
            else:
                for i in range(n):
                    acc += widen(seg[i])
            _finish(out, o, acc, zero, square)
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
                    square, comp, s, c)
        for k in range(m):
            if pieces == 1:
                _finish(out, o0 + k, s[k], c[k], square)
            else:
                hi[(o0 + k) * pieces + p] = s[k]
                if comp:
                    lo[(o0 + k) * pieces + p] = c[k]


@njit(cache=True, nogil=True, parallel=True)
def _rows_parallel(base, geo, block, pieces, square, comp, out, hi, lo, chunks):
    n_out = 1
    for d in range(geo[0]):
        n_out *= geo[2 + d]
    n_items = pieces * ((n_out + block - 1) // block)
    for ch in prange(chunks):
        _rows_work(base, geo, block, pieces, square, comp, out, hi, lo,
                   n_items * ch // chunks, n_items * (ch + 1) // chunks)


@njit(cache=True, nogil=True)
def _add_rows(base, off, r0, r1, rsz, rst, step, width, s, c, square, comp, ahead):
    """Add the slices ``[off + row offset, + width * step)`` of reduced rows ``[r0, r1)`` into
    the column accumulators; Neumaier-folded when ``comp`` (no fastmath here: it would
    cancel ``c``; the loops over ``j`` vectorize without it). Rows ``ahead`` on are
    prefetched (0: none, for data already in cache)."""
    nr = rsz.size
    if step == 1:
        # four rows at a time: a quarter of the accumulator traffic and of the per-row cost
        # (float64: the four are added pairwise, then folded in with TwoSum)
        while r0 + 4 <= r1:
            a0 = off + (r0 * rst[0] if nr == 1 else _offset(r0, rsz, rst, nr))
            a1 = off + ((r0 + 1) * rst[0] if nr == 1 else _offset(r0 + 1, rsz, rst, nr))
            a2 = off + ((r0 + 2) * rst[0] if nr == 1 else _offset(r0 + 2, rsz, rst, nr))
            a3 = off + ((r0 + 3) * rst[0] if nr == 1 else _offset(r0 + 3, rsz, rst, nr))
            x0 = base[a0:a0 + width]
            x1 = base[a1:a1 + width]
            x2 = base[a2:a2 + width]
            x3 = base[a3:a3 + width]
            # short row slices (e.g. a middle axis): the hardware prefetcher alone falls behind
            if ahead and width <= PREFETCH_WIDTH and r0 + ahead + 4 <= r1:
                line = 64 // base.itemsize
                for r in range(r0 + ahead, r0 + ahead + 4):
                    a = off + (r * rst[0] if nr == 1 else _offset(r, rsz, rst, nr))
                    for j in range(0, width, line):
                        prefetch(base, a + j)
            if comp and square:
                for j in range(width):
                    v0 = widen(x0[j])
                    v1 = widen(x1[j])
                    v2 = widen(x2[j])
                    v3 = widen(x3[j])
                    v = (v0 * v0 + v1 * v1) + (v2 * v2 + v3 * v3)
                    sj = s[j]
                    t = sj + v
                    z = t - sj
                    c[j] += (sj - (t - z)) + (v - z)
                    s[j] = t
            elif comp:
                for j in range(width):
                    v = (widen(x0[j]) + widen(x1[j])) + (widen(x2[j]) + widen(x3[j]))
                    sj = s[j]
                    t = sj + v
                    z = t - sj
                    c[j] += (sj - (t - z)) + (v - z)
                    s[j] = t
            elif square:
                for j in range(width):
                    v0 = widen(x0[j])
                    v1 = widen(x1[j])
                    v2 = widen(x2[j])
                    v3 = widen(x3[j])
                    s[j] += (v0 * v0 + v1 * v1) + (v2 * v2 + v3 * v3)
            else:
                for j in range(width):
                    s[j] += (widen(x0[j]) + widen(x1[j])) + (widen(x2[j]) + widen(x3[j]))
            r0 += 4
    for r in range(r0, r1):
        a = off + (r * rst[0] if nr == 1 else _offset(r, rsz, rst, nr))
        if step == 1:
            seg = base[a:a + width]
            if comp:
                if square:
                    for j in range(width):
                        v = widen(seg[j])
                        v = v * v
                        sj = s[j]
                        t = sj + v  # Knuth's TwoSum: branch-free, so it vectorizes
                        z = t - sj
                        c[j] += (sj - (t - z)) + (v - z)
                        s[j] = t
                else:
                    for j in range(width):
                        v = widen(seg[j])
                        sj = s[j]
                        t = sj + v
                        z = t - sj
                        c[j] += (sj - (t - z)) + (v - z)
                        s[j] = t
            elif square:
                for j in range(width):
                    v = widen(seg[j])
                    s[j] += v * v
            else:
                for j in range(width):
                    s[j] += widen(seg[j])
        else:
            for j in range(width):
                v = widen(base[a + j * step])
                if square:
                    v = v * v
                if comp:
                    sj = s[j]
                    t = sj + v
                    c[j] += ((sj - t) + v) if abs(sj) >= abs(v) else ((v - t) + sj)
                    s[j] = t
                else:
                    s[j] += v


@njit(cache=True, nogil=True)
def _cols_work(base, geo, pieces, square, comp, out, hi, lo, w0, w1):
    """Work items ``[w0, w1)`` of the column kernel: item ``w`` is piece ``w % pieces`` of the
    block of up to COLUMNS adjacent outputs ``w // pieces``."""
    ksz, kst, rsz, rst = _unpack(geo)
    nk = ksz.size
    width_all = ksz[nk - 1]
    step = kst[nk - 1]
    blocks = (width_all + COLUMNS - 1) // COLUMNS
    n_red = 1
    for d in range(rsz.size):
        n_red *= rsz[d]
    zero = _zero(widen(base[0]))
    s = np.full(min(COLUMNS, width_all), zero)
    c = np.full(min(COLUMNS, width_all), zero)
    for w in range(w0, w1):
        q = w // pieces
        p = w - q * pieces
        ko = q // blocks
        j0 = (q - ko * blocks) * COLUMNS
        width = min(COLUMNS, width_all - j0)
        off = _offset(ko, ksz, kst, nk - 1) + j0 * step
        s[:width] = zero
        c[:width] = zero
        _add_rows(base, off, n_red * p // pieces, n_red * (p + 1) // pieces, rsz, rst, step,
                  width, s, c, square, comp, AHEAD_ROWS)
        for j in range(width):
            o = ko * width_all + j0 + j
            if pieces == 1:
                _finish(out, o, s[j], c[j], square)
            else:
                hi[o * pieces + p] = s[j]
                if comp:
                    lo[o * pieces + p] = c[j]


@njit(cache=True, nogil=True, parallel=True)
def _cols_parallel(base, geo, pieces, square, comp, out, hi, lo, chunks):
    nk = geo[0]
    n_items = pieces * ((geo[1 + nk] + COLUMNS - 1) // COLUMNS)
    for d in range(nk - 1):
        n_items *= geo[2 + d]
    for ch in prange(chunks):
        _cols_work(base, geo, pieces, square, comp, out, hi, lo,
                   n_items * ch // chunks, n_items * (ch + 1) // chunks)



@njit(cache=True, nogil=True)
def _next_outer(idx, sizes, ost, last, o):  # pragma: no cover - compiled
    """Step the odometer ``idx`` over dims ``0..last`` (``last`` fastest) and return the output
    offset ``o`` moved along with it (``ost``: the dims' output strides; no divisions)."""
    d = last
    while d >= 0:
        idx[d] += 1
        o += ost[d]
        if idx[d] < sizes[d]:
            break
        o -= ost[d] * sizes[d]
        idx[d] = 0
        d -= 1
    return o


@njit(cache=True, nogil=True, fastmath=_ROWS_MATH)
def _small_nd(base, geo, square, comp, out):
    """A small C-contiguous array, any reduced axes (:func:`_geometry_nd`), one thread, in
    memory order: rows of a reduced innermost dim are summed whole; with a kept innermost dim,
    each block of reduced rows is added into the adjacent outputs (as the column kernel does)."""
    m = geo[0]
    sizes = geo[1:1 + m]
    red = geo[1 + m:1 + 2 * m]
    ost = geo[1 + 2 * m:1 + 3 * m]
    n_in = sizes[m - 1]
    zero = _zero(widen(base[0]))
    s = np.full(out.size, zero)
    c = np.full(out.size, zero)
    idx = np.zeros(m, np.int64)  # odometer over the outer dims (no divisions per row)
    if red[m - 1]:
        o = 0
        for t in range(base.size // n_in):
            if t:
                o = _next_outer(idx, sizes, ost, m - 2, o)
            seg = base[t * n_in:(t + 1) * n_in]
            if not comp:
                part = zero
                if square:
                    for i in range(n_in):
                        v = widen(seg[i])
                        part += v * v
                else:
                    for i in range(n_in):
                        part += widen(seg[i])
                s[o] += part
                continue
            so = s[o]
            co = c[o]
            for b in range(0, n_in, BLOCK):
                blk = seg[b:b + BLOCK]
                part = zero
                if square:
                    for i in range(blk.size):
                        v = widen(blk[i])
                        part += v * v
                else:
                    for i in range(blk.size):
                        part += widen(blk[i])
                so, co = _fold(so, co, part)
            s[o] = so
            c[o] = co
    else:
        n_rows = sizes[m - 2] if m >= 2 else 1  # the reduced run just outside (size-1 dims go)
        rsz = np.full(1, n_rows)
        rst = np.full(1, n_in)
        outer = m - 2 if m >= 2 else 0
        group = n_rows * n_in
        o = 0
        for u in range(base.size // group):
            if u:
                o = _next_outer(idx, sizes, ost, outer - 1, o)
            _add_rows(base, u * group, 0, n_rows, rsz, rst, 1, n_in, s[o:o + n_in],
                      c[o:o + n_in], square, comp, 0)
    for o in range(out.size):
        _finish(out, o, s[o], c[o], square)


@njit(cache=True, nogil=True)
def _combine(hi, lo, pieces, square, comp, out):
    """Add each output's pieces, in order (folded when ``comp``), and store the result."""
    for o in range(out.size):
        s = hi[o * pieces]
        c = _zero(s)
        if comp:
            c = lo[o * pieces]
            for p in range(1, pieces):
                s, c = _fold(s, c, hi[o * pieces + p])
                c += lo[o * pieces + p]
        else:
            for p in range(1, pieces):
                s += hi[o * pieces + p]
        _finish(out, o, s, c, square)


@njit(cache=True, nogil=True)
def _l2_scaled(base, geo, which, out):
    """float64 L2 of the outputs ``which``, every element scaled by 2**-e, e the exponent of
    the largest magnitude: no overflow, no underflow that matters."""
    ksz, kst, rsz, rst = _unpack(geo)
    nr = rsz.size
    n_in = rsz[nr - 1]
    s_in = rst[nr - 1]
    rows = 1
    for d in range(nr - 1):
        rows *= rsz[d]
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
                s, c = _fold(s, c, v * v)
        out[o] = math.ldexp(math.sqrt(s + c), e)
