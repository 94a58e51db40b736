"""Compensated float64 sums in vector lanes: the accumulator of the float64 row kernels.

A sum is kept in Kahan accumulators, each a sum ``s`` and a compensation ``c`` (its value
``s + c``), in ``4 * LANES`` lanes on the stack, which stay in registers. Four runs of elements
go side by side (:func:`_four_runs`: element ``i`` of a group of LANES of run ``r`` into lane
``r * LANES + i``), so that eight independent chains of dependent adds are in flight; the
lanes are joined by TwoSum, in vector operations, into one double-double per run
(:func:`_fold_four`). The entry points:

* :func:`four_rows`: four contiguous rows, one sum each;
* :func:`four_outputs` / :func:`one_output`: every reduced row of four outputs (of one) into
  the same lanes, joined once at the end;
* :func:`run_sum`: one run of any stride, a quarter in each of the four runs;
* :func:`tiny_sums`: :func:`four_rows`'s sums of rows of up to TINY elements, without the
  64 lanes.

Beside them, :func:`eight_wide_rows`: plain float64 sums of short float32 rows, eight at a
time, with the same vector tree.

Why: a plain vector sum rounds in every lane and again in the tree that joins the lanes, and
on regular data (constant rows) those roundings add up instead of averaging out (up to 6.6 ulp
of the sum). Kahan's bound holds in every lane (within ``2u`` of the sum of its magnitudes, u
= 2**-53) and the lanes join exactly: a sum of one sign is within about one ulp, one that
cancels within ``~2u sum(|x|)``. Four adds per element where a plain sum
has one; two of them are fused multiply-adds by an opaque -1 (:func:`_minus_one`), which run on
the FMA pipes beside the two plain adds. ``docs/kernel-design.md`` has the design and its
measurements.

A sum that is not finite (inf, NaN, or an overflow) is computed again as the IEEE sum of the
same elements: inf, -inf and NaN follow IEEE addition, as a plain sum does.

Every function here is compiled without fast-math, which would cancel the compensation; the
callers may use it (their flags do not reach these functions' instructions).
"""

from __future__ import annotations

import math

import numpy as np
from llvmlite import ir
from numba import carray, njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from ._common import flat_offset, prefetch, two_sum, wide_vectors_for
from .traversal import specialise

#: Kahan accumulators per run: two vectors of float64 (four runs: eight chains in flight).
LANES = 16
_FOUR = 4 * LANES  # the lanes of four runs
#: Rows of at most this many elements skip the 64 lanes (:func:`tiny_sums`) ...
TINY = 128
#: ... those of at most this many side by side in vectors, longer ones eight at a time.
SHORT = 4
_DOUBLE = ir.DoubleType()
# unsigned constants for the unsigned indices (uint64 with an int64 gives a float in numba)
_UL = np.uint64(LANES)
_L1 = np.uint64(LANES)  # where runs 1-3 of _four_runs start
_L2 = np.uint64(2 * LANES)
_L3 = np.uint64(3 * LANES)
_HALF = np.uint64(LANES // 2)
_ZERO = np.uint64(0)
#: Elements (4 KiB) ahead of each run whose cache lines are prefetched.
_AHEAD = np.uint64(512)
#: Arrays of this many elements (8 MiB) or more are read from memory and prefetched; smaller
#: ones are in cache, where the prefetches only cost instructions.
_FAR = 1 << 20
#: How far ahead of the short rows being added :func:`prefetch_rows` reads (whole groups of
#: eight rows).
GROUP_AHEAD_BYTES = 8192
#: Whether :func:`_eights_loop` prefetches; each compiled variant binds its own (specialise).
PREFETCH_ROWS = False
_ONE = np.uint64(1)
_TWO = np.uint64(2)
_THREE = np.uint64(3)


@intrinsic
def _stack(typingctx, count):  # type: ignore[no-untyped-def]
    """A pointer to ``count`` (a literal) zeroed float64 on the stack: lanes that stay in
    registers, where a heap array would be loaded and stored at every step (the compiler
    cannot tell it from the input)."""
    if not isinstance(count, types.IntegerLiteral):
        return None
    n = count.literal_value

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        array = ir.ArrayType(_DOUBLE, n)
        slot = cgutils.alloca_once(builder, array)
        builder.store(ir.Constant(array, [0.0] * n), slot)
        return builder.bitcast(slot, _DOUBLE.as_pointer())

    return types.CPointer(types.float64)(count), codegen


@intrinsic
def _minus_one(typingctx):  # type: ignore[no-untyped-def]
    """-1.0, loaded from a global the optimizer cannot prove constant: ``fma(b, m1, a)`` then
    stays a fused multiply-add (``a - b`` on the FMA pipes) instead of folding to a subtract."""

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        name = "onnx_reduce_minus_one"
        slot = builder.module.globals.get(name)
        if slot is None:
            slot = ir.GlobalVariable(builder.module, _DOUBLE, name)
            slot.initializer = ir.Constant(_DOUBLE, -1.0)
            slot.linkage = "linkonce_odr"
        return builder.load(slot)

    return types.float64(), codegen


@intrinsic
def fma(typingctx, a, b, c):  # type: ignore[no-untyped-def]
    """``a * b + c`` rounded once (also :mod:`.triple_double`'s exact products)."""
    sig = types.float64(types.float64, types.float64, types.float64)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        fn = builder.module.declare_intrinsic("llvm.fma", [_DOUBLE],
                                              ir.FunctionType(_DOUBLE, [_DOUBLE] * 3))
        return builder.call(fn, args)

    return sig, codegen


_V8 = ir.VectorType(_DOUBLE, 8)
_V16F = ir.VectorType(ir.FloatType(), 16)
_I64 = ir.IntType(64)
_L8 = ir.VectorType(_I64, 8)
_M8 = ir.VectorType(ir.IntType(32), 8)


def _shuffle(builder, a, b, mask):  # type: ignore[no-untyped-def]
    return builder.shuffle_vector(a, b, ir.Constant(_M8, mask))


# lanes of two vectors joined in the folds: k and k + 4 of each, then k and k + 2
_HALVES = ([0, 1, 2, 3, 8, 9, 10, 11], [4, 5, 6, 7, 12, 13, 14, 15])
_QUARTERS = ([0, 1, 4, 5, 8, 9, 12, 13], [2, 3, 6, 7, 10, 11, 14, 15])


def _vtwo_sum(builder, a, b):  # type: ignore[no-untyped-def]
    """:func:`two_sum` lane by lane."""
    s = builder.fadd(a, b)
    bp = builder.fsub(s, a)
    return s, builder.fadd(builder.fsub(a, builder.fsub(s, bp)), builder.fsub(b, bp))


def _vjoin(builder, x, y):  # type: ignore[no-untyped-def]
    """Vector lanes ``x = (s, c)`` gain lanes ``y``: TwoSum of the sums (no fast-math flags)."""
    s, err = _vtwo_sum(builder, x[0], y[0])
    return s, builder.fadd(builder.fadd(x[1], y[1]), err)


def _vmerge(builder, x, y, first, second):  # type: ignore[no-untyped-def]
    """:func:`_vjoin` of the lanes ``first`` of ``x, y`` (as one vector) with their lanes
    ``second``."""
    a = (_shuffle(builder, x[0], y[0], first), _shuffle(builder, x[1], y[1], first))
    b = (_shuffle(builder, x[0], y[0], second), _shuffle(builder, x[1], y[1], second))
    return _vjoin(builder, a, b)


@intrinsic
def _fold_four(typingctx, sums, comps):  # type: ignore[no-untyped-def]
    """The four runs' lanes of :func:`_four_runs` (pointers to the stack lanes) joined into
    one double-double each, ``(hi0, lo0, ..., hi3, lo3)``, in vector operations: the two
    vectors of each run, then halves, quarters and pairs of lanes of two runs at a time, side
    by side (joined lane by lane, numba's code cost nearly as much as summing rows of 512).
    """
    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        def load(ptr, i):
            at = builder.gep(ptr, [ir.Constant(_I64, 8 * i)])
            return builder.load(builder.bitcast(at, _V8.as_pointer()), align=8)

        runs = [_vjoin(builder, (load(args[0], 2 * r), load(args[1], 2 * r)),
                       (load(args[0], 2 * r + 1), load(args[1], 2 * r + 1)))
                for r in range(4)]
        ab = _vmerge(builder, runs[0], runs[1], *_HALVES)  # runs 0, 1: four lanes each
        cd = _vmerge(builder, runs[2], runs[3], *_HALVES)
        x = _vmerge(builder, ab, cd, *_QUARTERS)
        y = _vmerge(builder, x, x, [0, 2, 4, 6, 0, 2, 4, 6], [1, 3, 5, 7, 1, 3, 5, 7])
        hi, lo = _vtwo_sum(builder, *y)  # normalized
        out = cgutils.get_null_value(context.get_value_type(signature.return_type))
        for r in range(4):
            out = builder.insert_value(out, builder.extract_element(hi, ir.Constant(_I64, r)),
                                       2 * r)
            out = builder.insert_value(out, builder.extract_element(lo, ir.Constant(_I64, r)),
                                       2 * r + 1)
        return out

    return types.UniTuple(types.float64, 8)(sums, comps), codegen


def _masked_load(builder, ptr, mask, vector=_V8):  # type: ignore[no-untyped-def]
    """A ``vector`` (float64 or float32 lanes) from ``ptr`` where ``mask`` is set, zeros
    elsewhere (no fault)."""
    i32 = ir.IntType(32)
    size = 8 if vector.element == _DOUBLE else 4
    name = f"llvm.masked.load.v{vector.count}f{8 * size}.p0"
    fn = cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(vector, [ptr.type, i32, mask.type, vector]), name)
    zeros = ir.Constant(vector, [0.0] * vector.count)
    return builder.call(fn, [ptr, ir.Constant(i32, size), mask, zeros])


def _single_lanes(builder, v, square):  # type: ignore[no-untyped-def]
    """Lanes ``(s, c)`` that each gained one element of ``v`` (:func:`_add` into zeros):
    ``0 + y`` and the compensation ``y - (0 + y)`` (``-t + y`` rounds the same)."""
    zero = ir.Constant(_V8, [0.0] * 8)
    y = builder.select(square, builder.fmul(v, v), builder.fadd(zero, v))
    t = builder.fadd(zero, y)
    return t, builder.fsub(y, t)


def _vadd(builder, lanes, v, square, inside):  # type: ignore[no-untyped-def]
    """:func:`_add` of ``v`` lane by lane, where ``inside`` (the other lanes as they were)."""
    s, c = lanes
    fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_V8, [_V8] * 3),
                                        "llvm.fma.v8f64")
    y = builder.select(square, builder.call(fn, [v, v, c]), builder.fadd(c, v))
    t = builder.fadd(s, y)
    return (builder.select(inside, t, s),
            builder.select(inside, builder.fadd(builder.fsub(s, t), y), c))


def _row_lanes(builder, ptr, limit, square, vectors):  # type: ignore[no-untyped-def]
    """The LANES lanes of the row of ``n`` (``limit``: splat) elements from ``ptr`` after
    :func:`_one_run`'s adds (element ``k`` into lane ``k % LANES``), as ``vectors`` vectors of
    eight elements, those past ``n`` masked; lanes ``k`` and ``k + 8`` joined."""
    def chunk(j):  # elements 8j .. 8j + 7: the first vectors // 2 are whole
        at = builder.gep(ptr, [ir.Constant(_I64, 8 * j)])
        inside = builder.icmp_signed("<", ir.Constant(_L8, list(range(8 * j, 8 * j + 8))), limit)
        if j < vectors // 2:
            return builder.load(builder.bitcast(at, _V8.as_pointer()), align=8), inside
        return _masked_load(builder, at, inside), inside

    halves = [_single_lanes(builder, chunk(j)[0], square) for j in range(min(vectors, 2))]
    for j in range(2, vectors):
        v, inside = chunk(j)
        halves[j % 2] = _vadd(builder, halves[j % 2], v, square, inside)
    return halves[0] if vectors == 1 else _vjoin(builder, *halves)


def _fold_eight(builder, rows, merge):  # type: ignore[no-untyped-def]
    """Eight rows' lanes, one vector each, joined by ``merge`` (:func:`_vmerge`'s form) as
    :func:`_fold_four` joins a run's: lanes ``k`` and ``k + 4``, ``k + 2``, ``k + 1``, two
    rows side by side in each vector, into one vector of the eight rows' sums in order."""
    pairs = [merge(builder, rows[r], rows[r + 1], *_HALVES) for r in range(0, 8, 2)]
    fours = [merge(builder, pairs[r], pairs[r + 1], *_QUARTERS) for r in (0, 2)]
    return merge(builder, fours[0], fours[1], list(range(0, 16, 2)), list(range(1, 16, 2)))


def _row_at(context, builder, signature, args):  # type: ignore[no-untyped-def]
    """(pointer to ``base[a + r * stride]`` for row r, splat ``n``) of an eight-rows call."""
    data = context.make_array(signature.args[0])(context, builder, args[0]).data
    limit = builder.insert_element(ir.Constant(_L8, None), args[3], ir.Constant(_I64, 0))
    limit = builder.shuffle_vector(limit, limit, ir.Constant(_M8, [0] * 8))  # splat

    def row(r):  # type: ignore[no-untyped-def]
        return builder.gep(data, [builder.add(args[1], builder.mul(args[2], ir.Constant(_I64, r)))])
    return row, limit


def _store_eight(context, builder, arytype, out, at, v):  # type: ignore[no-untyped-def]
    """``out[at:at + 8] = v`` (``out`` a float64 array argument of the call, of ``arytype``)."""
    dst = context.make_array(arytype)(context, builder, out).data
    builder.store(v, builder.bitcast(builder.gep(dst, [at]), _V8.as_pointer()), align=8)


@intrinsic
def _eight_rows(typingctx, base, a, stride, n, square, vectors, hi, lo, g):  # type: ignore[no-untyped-def]
    """``hi[g:g + 8], lo[g:g + 8]``: :func:`four_rows`'s lanes of eight rows of ``n <= 8 *
    vectors`` elements (``vectors``: a literal 1, 2, 4, 8 or 16), row ``r`` from ``base[a + r *
    stride]``, joined as :func:`_fold_four` joins a run's lanes and normalized twice as
    :func:`four_rows` returns them (rows whose sum is not finite aside): each row's lanes in
    two vectors (:func:`_row_lanes`), joined into one, then lanes ``k`` and ``k + 4``, ``k +
    2``, ``k + 1`` with two rows side by side in each vector (a join with an empty lane
    changes no finite lane). The 64 lanes would cost a fold per row."""
    if not isinstance(vectors, types.IntegerLiteral):
        return None
    count = vectors.literal_value

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        row, limit = _row_at(context, builder, signature, args)
        rows = [_row_lanes(builder, row(r), limit, args[4], count) for r in range(8)]
        s, c = _fold_eight(builder, rows, _vmerge)
        for _ in range(2):  # normalized twice: the fold's TwoSum, then four_rows' own
            s, c = _vtwo_sum(builder, s, c)
        _store_eight(context, builder, signature.args[6], args[6], args[8], s)
        _store_eight(context, builder, signature.args[7], args[7], args[8], c)
        return context.get_dummy_value()

    sig = types.void(base, types.int64, types.int64, types.int64, types.boolean, vectors, hi,
                     lo, types.int64)
    return sig, codegen


def _wide_row(builder, ptr, limit, vectors):  # type: ignore[no-untyped-def]
    """The float64 sum of a float32 row of ``n`` (``limit``: splat) elements from ``ptr`` in
    eight lanes: ``vectors`` vectors of 16 elements, those past ``n`` masked to zeros,
    widened and added pairwise."""
    wide = ir.VectorType(_I64, 16)
    limit16 = builder.shuffle_vector(limit, limit,
                                     ir.Constant(ir.VectorType(ir.IntType(32), 16), [0] * 16))
    parts = []
    for j in range(vectors):
        inside = builder.icmp_signed("<", ir.Constant(wide, list(range(16 * j, 16 * j + 16))),
                                     limit16)
        at = builder.gep(ptr, [ir.Constant(_I64, 16 * j)])
        v = builder.fpext(_masked_load(builder, at, inside, _V16F), ir.VectorType(_DOUBLE, 16))
        parts += [builder.shuffle_vector(v, v, ir.Constant(_M8, half))
                  for half in (list(range(8)), list(range(8, 16)))]
    while len(parts) > 1:  # pairwise: a chain of dependent adds would bound the row
        parts = [builder.fadd(parts[i], parts[i + 1]) for i in range(0, len(parts), 2)]
    return parts[0]


def _plain_merge(builder, x, y, first, second):  # type: ignore[no-untyped-def]
    """:func:`_vmerge` of plain sums: lanes ``first`` of ``x, y`` plus their lanes ``second``."""
    return builder.fadd(_shuffle(builder, x, y, first), _shuffle(builder, x, y, second))


@intrinsic
def eight_wide_rows(typingctx, base, a, stride, n, vectors, sums):  # type: ignore[no-untyped-def]
    """``sums[:8]``: the float64 sums of eight float32 rows of ``n <= 16 * vectors`` elements
    (``vectors``: a literal), row ``r`` from ``base[a + r * stride]``: each row's vectors
    widened and added into eight lanes (:func:`_wide_row`), then joined with two rows side by
    side in each vector (:func:`_fold_eight`). Other dtypes: no code (a caller's branch the
    dtype rules out)."""
    if not isinstance(vectors, types.IntegerLiteral):
        return None
    count = vectors.literal_value
    compiled = base.dtype == types.float32

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        if compiled:
            row, limit = _row_at(context, builder, signature, args)
            rows = [_wide_row(builder, row(r), limit, count) for r in range(8)]
            _store_eight(context, builder, signature.args[5], args[5], ir.Constant(_I64, 0),
                         _fold_eight(builder, rows, _plain_merge))
        return context.get_dummy_value()

    return types.void(base, types.int64, types.int64, types.int64, vectors, sums), codegen


@njit(cache=True, nogil=True, inline="always")
def _add(s, c, k, v, square, one, m1):
    """Lane ``k`` gains ``v`` (``v * v`` when ``square``, rounded once with the compensation)."""
    y = fma(v, v, c[k]) if square else fma(c[k], one, v)
    t = s[k] + y
    c[k] = fma(t, m1, s[k]) + y
    s[k] = t


@njit(cache=True, nogil=True, inline="always")
def _four_runs(base, a0, a1, a2, a3, n, step, square, s, c):
    """Four runs of ``n`` elements ``step`` apart, from ``base[a0]`` ... ``base[a3]``, into
    LANES lanes each (run ``r`` from lane ``r * LANES``), in one loop."""
    m1 = _minus_one()
    one = -m1
    u0, u1, u2, u3 = np.uint64(a0), np.uint64(a1), np.uint64(a2), np.uint64(a3)
    un = np.uint64(n)
    us = np.uint64(step)
    i = _ZERO
    ahead = step == 1 and base.size >= _FAR  # (step: a compile-time test)
    while i + _UL <= un:
        if ahead:  # the group's two cache lines AHEAD on, in each run (past the end: no fault)
            for q in (_AHEAD, _AHEAD + _HALF):
                prefetch(base, u0 + i + q)
                prefetch(base, u1 + i + q)
                prefetch(base, u2 + i + q)
                prefetch(base, u3 + i + q)
        for k in range(_UL):
            j = (i + k) * us
            _add(s, c, k, base[u0 + j], square, one, m1)
            _add(s, c, _L1 + k, base[u1 + j], square, one, m1)
            _add(s, c, _L2 + k, base[u2 + j], square, one, m1)
            _add(s, c, _L3 + k, base[u3 + j], square, one, m1)
        i += _UL
    if i == un:  # no tail: skip its code (masked stores, which later loads wait for)
        return
    for k in range(_UL - _ONE):
        if i + k < un:
            j = (i + k) * us
            _add(s, c, k, base[u0 + j], square, one, m1)
            _add(s, c, _L1 + k, base[u1 + j], square, one, m1)
            _add(s, c, _L2 + k, base[u2 + j], square, one, m1)
            _add(s, c, _L3 + k, base[u3 + j], square, one, m1)


@njit(cache=True, nogil=True, inline="always")
def _one_run(base, a, n, step, square, s, c):
    """A run of ``n`` elements ``step`` apart from ``base[a]`` into all four runs' lanes: a
    quarter each (four streams through memory: ``docs/kernel-design.md``), the last 0-3 into
    lanes of their own."""
    q = n // 4
    _four_runs(base, a, a + q * step, a + 2 * q * step, a + 3 * q * step, q, step, square,
               s, c)
    m1 = _minus_one()
    one = -m1
    rest = n - 4 * q
    for k in range(np.uint64(3)):  # constant lanes (a computed one would put them in memory)
        if k < rest:
            _add(s, c, k, base[a + (4 * q + k) * step], square, one, m1)


@njit(cache=True, nogil=True)
def _plain(base, a, n, step, square):
    """The IEEE sum (of squares) of ``n`` elements ``step`` apart from ``base[a]``."""
    wide_vectors_for(base)
    acc = 0.0
    for i in range(n):
        v = base[a + i * step]
        acc += v * v if square else v
    return acc


@njit(cache=True, nogil=True, inline="always")
def _finite_or_plain(base, a, n, step, square, s, c):
    """``(s, c)`` as a normalized double-double, or the IEEE sum of the run when ``s`` is not
    finite."""
    if math.isfinite(s):
        return two_sum(s, c)
    return _plain(base, a, n, step, square), 0.0


@njit(cache=True, nogil=True, inline="always")
def _lane(base, a, k, n, square, one, m1):
    """Lane ``k`` ``(s, c)`` of a row of ``n`` elements from ``base[a]`` after :func:`_add`
    of its element ``k`` alone (``(0, 0)`` past the row)."""
    if k >= n:
        return 0.0, 0.0
    v = base[a + k]
    y = fma(v, v, 0.0) if square else fma(0.0, one, v)
    t = 0.0 + y
    return t, fma(t, m1, 0.0) + y


@njit(cache=True, nogil=True, inline="always")
def _join(s1, c1, s2, c2):
    """:func:`_vjoin` of two lanes."""
    s, err = two_sum(s1, s2)
    return s, (c1 + c2) + err


@njit(cache=True, nogil=True, inline="always")
def _tiny_tree(base, b, n, square, one, m1):
    """The lanes of a row of ``n <= SHORT`` elements from ``base[b]`` (``b`` unsigned) joined
    as :func:`_fold_four` joins them, into one ``(s, c)``: element ``k`` in lane ``k`` (as
    :func:`_add` puts it there), lanes 0 and 2, 1 and 3, then 0 and 1 joined where both hold
    elements. A join with an empty lane changes no finite lane, and a lane that is not finite
    leaves the row not finite either way: the fold's result, without its 64 lanes."""
    s0, c0 = _lane(base, b, _ZERO, n, square, one, m1)
    s1, c1 = _lane(base, b, _ONE, n, square, one, m1)
    if n > 2:
        s2, c2 = _lane(base, b, _TWO, n, square, one, m1)
        s0, c0 = _join(s0, c0, s2, c2)
    if n > 3:
        s3, c3 = _lane(base, b, _THREE, n, square, one, m1)
        s1, c1 = _join(s1, c1, s3, c3)
    if n > 1:
        s0, c0 = _join(s0, c0, s1, c1)
    return s0, c0


@njit(cache=True, nogil=True, inline="always")
def _tiny_rows_loop(base, a, stride, n, square, count, hi, lo):
    """:func:`_tiny_tree` of each row, normalized twice as :func:`four_rows` returns it (its
    fold, then :func:`_finite_or_plain`), before the test of finiteness: one loop over the
    rows, with unsigned indices (no wraparound tests) and no branch, which vectorizes."""
    m1 = _minus_one()
    one = -m1
    ua = np.uint64(a)
    us = np.uint64(stride)
    for i in range(np.uint64(count)):
        s, c = _tiny_tree(base, ua + i * us, n, square, one, m1)
        h, e = two_sum(s, c)
        hi[i], lo[i] = two_sum(h, e)


def _eights_loop(base, a, stride, n, square, count, hi, lo, ahead):  # pragma: no cover
    """:func:`_eights`' loops, compiled twice (``_eights_streamed``, ``_eights_cached``): with
    the prefetches of the rows ``ahead`` when PREFETCH_ROWS, without them (in cache, where even
    their test cost 5-25%)."""
    wide_vectors_for(base)
    full = count - count % 8
    if n <= 8:  # (a literal count of vectors each)
        for g in range(0, full, 8):
            if PREFETCH_ROWS:
                prefetch_rows(base, a + (g + ahead) * stride, stride, n, ahead)
            _eight_rows(base, a + g * stride, stride, n, square, 1, hi, lo, g)
    elif n <= 16:
        for g in range(0, full, 8):
            if PREFETCH_ROWS:
                prefetch_rows(base, a + (g + ahead) * stride, stride, n, ahead)
            _eight_rows(base, a + g * stride, stride, n, square, 2, hi, lo, g)
    elif n <= 32:
        for g in range(0, full, 8):
            if PREFETCH_ROWS:
                prefetch_rows(base, a + (g + ahead) * stride, stride, n, ahead)
            _eight_rows(base, a + g * stride, stride, n, square, 4, hi, lo, g)
    elif n <= 64:
        for g in range(0, full, 8):
            if PREFETCH_ROWS:
                prefetch_rows(base, a + (g + ahead) * stride, stride, n, ahead)
            _eight_rows(base, a + g * stride, stride, n, square, 8, hi, lo, g)
    else:
        for g in range(0, full, 8):
            if PREFETCH_ROWS:
                prefetch_rows(base, a + (g + ahead) * stride, stride, n, ahead)
            _eight_rows(base, a + g * stride, stride, n, square, 16, hi, lo, g)
    for g in range(full, count):
        r = a + g * stride
        hi[g], lo[g] = four_rows(base, r, r, r, r, n, square)[:2]


@njit(cache=True, nogil=True)
def _eights(base, a, stride, n, square, count, hi, lo):
    """:func:`tiny_sums`'s lanes of rows of ``SHORT < n <= TINY`` elements: eight rows at a
    time (:func:`_eight_rows`), the last ``count % 8`` by :func:`four_rows`; an array read from
    memory has its rows GROUP_AHEAD_BYTES on prefetched meanwhile (:func:`prefetch_rows`)."""
    ahead = rows_ahead(base, stride)
    if ahead:
        _eights_streamed(base, a, stride, n, square, count, hi, lo, ahead)
    else:
        _eights_cached(base, a, stride, n, square, count, hi, lo, ahead)


@njit(cache=True, nogil=True, inline="always")
def rows_ahead(base, stride):
    """How many rows ``stride`` elements apart ahead of the eight being added
    :func:`prefetch_rows` takes, whole groups of eight about GROUP_AHEAD_BYTES on; 0 for an
    array of under ``_FAR`` float64's bytes, which is in cache (prefetches only cost there)."""
    if base.size * base.itemsize < 8 * _FAR:
        return 0
    return 8 * max(1, GROUP_AHEAD_BYTES // (8 * stride * base.itemsize))


@njit(cache=True, nogil=True, inline="always")
def prefetch_rows(base, at, stride, n, ahead):
    """The cache lines of eight rows of ``n`` elements ``stride`` apart from ``base[at]``, when
    ``ahead`` (:func:`rows_ahead`): each group of eight short rows is a new stretch of memory
    (eight float64 rows of 64: a 4 KiB page), whose start the hardware prefetcher does not see
    coming."""
    if ahead == 0:
        return
    line = 64 // base.itemsize
    if stride == n:  # one contiguous stretch
        for i in range(at, at + 8 * n, line):
            prefetch(base, i)
        return
    for r in range(8):
        for i in range(at + r * stride, at + r * stride + n, line):
            prefetch(base, i)


@njit(cache=True, nogil=True)
def tiny_sums(base, a, stride, n, square, count, hi, lo):
    """``hi[i], lo[i]``: :func:`four_rows`'s double-double (the same bits) of each of
    ``count`` contiguous rows of ``n <= TINY`` elements ``stride`` apart from ``base[a]``
    without its 64 lanes, zeroed and folded per row: rows of ``n <= SHORT`` side by side in
    vectors (:func:`_tiny_rows_loop`; one row at a time is bound by the latency of its chain
    of dependent adds), adjacent rows of 2, 3 or 4 with their length a constant (the loads
    vectorize too); longer ones eight at a time (:func:`_eights`). A row whose sum is not
    finite then takes its IEEE sum, as :func:`_finite_or_plain` gives it (a finite head stays
    finite in the last TwoSum)."""
    wide_vectors_for(base)
    if n > SHORT:
        _eights(base, a, stride, n, square, count, hi, lo)
    elif stride == 2 and n == 2:
        _tiny_rows_loop(base, a, 2, 2, square, count, hi, lo)
    elif stride == 3 and n == 3:
        _tiny_rows_loop(base, a, 3, 3, square, count, hi, lo)
    elif stride == 4 and n == 4:
        _tiny_rows_loop(base, a, 4, 4, square, count, hi, lo)
    else:
        _tiny_rows_loop(base, a, stride, n, square, count, hi, lo)
    for i in range(count):
        if not math.isfinite(hi[i]):
            hi[i], lo[i] = _plain(base, a + i * stride, n, 1, square), 0.0


@njit(cache=True, nogil=True)
def four_rows(base, a0, a1, a2, a3, n, square):
    """The sums (of squares) of the four contiguous rows of ``n`` elements from ``base[a0]``,
    ..., ``base[a3]``, each a double-double ``(hi, lo)`` (the IEEE sum when not finite): the
    four rows in one loop, their lanes joined side by side."""
    wide_vectors_for(base)
    ps = _stack(_FOUR)
    pc = _stack(_FOUR)
    _four_runs(base, a0, a1, a2, a3, n, 1, square, carray(ps, _FOUR), carray(pc, _FOUR))
    h0, l0, h1, l1, h2, l2, h3, l3 = _fold_four(ps, pc)
    h0, l0 = _finite_or_plain(base, a0, n, 1, square, h0, l0)
    h1, l1 = _finite_or_plain(base, a1, n, 1, square, h1, l1)
    h2, l2 = _finite_or_plain(base, a2, n, 1, square, h2, l2)
    h3, l3 = _finite_or_plain(base, a3, n, 1, square, h3, l3)
    return h0, l0, h1, l1, h2, l2, h3, l3


@njit(cache=True, nogil=True)
def run_sum(base, a, n, step, square):
    """The sum (of squares) of the ``n`` elements ``step`` apart from ``base[a]``, as a
    double-double ``(hi, lo)`` (the IEEE sum when not finite)."""
    wide_vectors_for(base)
    ps = _stack(_FOUR)
    pc = _stack(_FOUR)
    s = carray(ps, _FOUR)
    c = carray(pc, _FOUR)
    if step == 1:  # a compile-time 1 here: the contiguous loads vectorize
        _one_run(base, a, n, 1, square, s, c)
    else:
        _one_run(base, a, n, step, square, s, c)
    hi, lo = _joined(ps, pc)
    return _finite_or_plain(base, a, n, step, square, hi, lo)


@njit(cache=True, nogil=True, inline="always")
def _joined(ps, pc):
    """The four runs' lanes (pointers to them) joined into one normalized double-double."""
    h0, l0, h1, l1, h2, l2, h3, l3 = _fold_four(ps, pc)
    hi, lo = two_sum(h0, h1)
    lo += l0 + l1
    hi, e = two_sum(hi, h2)
    lo += e + l2
    hi, e = two_sum(hi, h3)
    lo += e + l3
    return two_sum(hi, lo)


@njit(cache=True, nogil=True)
def _row_shape(rsz):
    """(elements per reduced row, reduced rows) of reduced dims ``rsz``."""
    rows = 1
    for d in range(rsz.size - 1):
        rows *= rsz[d]
    return rsz[rsz.size - 1], rows


@njit(cache=True, nogil=True)
def _plain_output(base, o, rsz, rst, rows, square):
    """The IEEE sum (of squares) of the ``rows`` contiguous reduced rows of the output at
    element offset ``o``."""
    wide_vectors_for(base)
    acc = 0.0
    n = rsz[rsz.size - 1]
    for t in range(rows):
        acc += _plain(base, o + flat_offset(t, rsz, rst, rsz.size - 1), n, 1, square)
    return acc


@njit(cache=True, nogil=True)
def four_outputs(base, o0, o1, o2, o3, rsz, rst, square):
    """The sums (of squares) of four outputs at element offsets ``o0`` ... ``o3``, each
    ``(hi, lo)`` (the IEEE sum when not finite), whose reduced dims are ``rsz`` with element
    strides ``rst`` (the last contiguous): row ``t`` of the four side by side, for every
    ``t``, into the same lanes, joined once at the end."""
    wide_vectors_for(base)
    ps = _stack(_FOUR)
    pc = _stack(_FOUR)
    s = carray(ps, _FOUR)
    c = carray(pc, _FOUR)
    n, rows = _row_shape(rsz)
    for t in range(rows):
        row = flat_offset(t, rsz, rst, rsz.size - 1)
        _four_runs(base, o0 + row, o1 + row, o2 + row, o3 + row, n, 1, square, s, c)
    h0, l0, h1, l1, h2, l2, h3, l3 = _fold_four(ps, pc)
    if not math.isfinite(h0):
        h0, l0 = _plain_output(base, o0, rsz, rst, rows, square), 0.0
    if not math.isfinite(h1):
        h1, l1 = _plain_output(base, o1, rsz, rst, rows, square), 0.0
    if not math.isfinite(h2):
        h2, l2 = _plain_output(base, o2, rsz, rst, rows, square), 0.0
    if not math.isfinite(h3):
        h3, l3 = _plain_output(base, o3, rsz, rst, rows, square), 0.0
    return h0, l0, h1, l1, h2, l2, h3, l3


@njit(cache=True, nogil=True)
def one_output(base, o, rsz, rst, square):
    """:func:`four_outputs` for one output: its rows four at a time side by side, the last
    0-3 each spread over the four (:func:`_one_run`), joined once at the end."""
    wide_vectors_for(base)
    ps = _stack(_FOUR)
    pc = _stack(_FOUR)
    s = carray(ps, _FOUR)
    c = carray(pc, _FOUR)
    n, rows = _row_shape(rsz)
    last = rsz.size - 1
    full = rows // 4 * 4
    for t in range(0, full, 4):
        a = o + flat_offset(t, rsz, rst, last)
        _four_runs(base, a, o + flat_offset(t + 1, rsz, rst, last),
                   o + flat_offset(t + 2, rsz, rst, last), o + flat_offset(t + 3, rsz, rst, last),
                   n, 1, square, s, c)
    for t in range(full, rows):
        _one_run(base, o + flat_offset(t, rsz, rst, last), n, 1, square, s, c)
    hi, lo = _joined(ps, pc)
    if math.isfinite(hi):
        return hi, lo
    return _plain_output(base, o, rsz, rst, rows, square), 0.0


# _eights' two loops, compiled once the functions they call are defined (specialise copies the
# module's names as they are then)
_eights_streamed = specialise(_eights_loop, "streamed", {"nogil": True}, PREFETCH_ROWS=True)
_eights_cached = specialise(_eights_loop, "cached", {"nogil": True}, PREFETCH_ROWS=False)
