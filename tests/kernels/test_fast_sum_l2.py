"""The compiled ReduceSum/ReduceL2 kernels against exact results, in every layout.

Every call runs under ``kernel_path("fast")``, so a silent fallback to the reference fails.
Expected values: ``math.fsum`` of the float64 values (exact, then one rounding) for sums and for
squares of float32/float16/bfloat16 (exact in float64); float64 squares are split exactly
(Veltkamp) before the ``fsum``, and their square root is taken with mpmath; integer sums are
Python integers reduced modulo 2**bits.
"""

from __future__ import annotations

import math
import multiprocessing
import subprocess
import sys
import threading

import ml_dtypes
import mpmath
import numpy as np
import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import onnx_reduce
import oracle
from onnx_reduce.kernels.dispatch import kernel_path
from onnx_reduce.kernels.rounding import round_to
from onnx_reduce.plan import make_plan
from onnx_reduce.spec import Request, resolve

numba = pytest.importorskip("numba")
from onnx_reduce.kernels.fast import _common, _lanes, sum_l2  # noqa: E402

BF16 = np.dtype(ml_dtypes.bfloat16)
FLOATS = [np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.float16), BF16]
INTS = [np.dtype(t) for t in (np.int32, np.int64, np.uint32, np.uint64)]
#: ulps allowed from the exactly rounded result
TOLERANCE = {np.dtype(np.float64): 2}
#: float64 sums of mixed signs may also be off by this much times sum(|x|) (the contract's
#: 2 ulps hold for well-conditioned data; float64 has no wider type to hide cancellation in)
CONDITION_SLACK = 2.0**-52


DEFAULT_PARALLEL_MIN = sum_l2.PARALLEL_MIN


@pytest.fixture(autouse=True)
def _low_parallel_threshold(monkeypatch):
    """Run the threaded kernels (and their pieces) on the modest inputs below: the threshold
    is a tuning knob, the code paths are the same."""
    monkeypatch.setattr(sum_l2, "PARALLEL_MIN", 1 << 16)


def test_default_threshold_keeps_mid_sizes_serial(monkeypatch) -> None:
    """Inputs of a few hundred thousand elements (1 MiB of float32, 2 MiB of float64) run on
    one thread: a parallel launch costs more than it saves there."""
    assert DEFAULT_PARALLEL_MIN >= 1 << 18
    monkeypatch.setattr(sum_l2, "PARALLEL_MIN", DEFAULT_PARALLEL_MIN)

    def no_parallel():
        raise AssertionError("a mid-size input launched a parallel region")

    monkeypatch.setattr(sum_l2, "parallel_section", no_parallel)
    for dtype in (np.dtype(np.float32), np.dtype(np.float64)):
        x = make((64, 64, 64), dtype, 14)
        for axes in ([1], [0, 2], [2], [0], None):
            for op in ("sum", "l2"):
                reduced = None if axes is None else tuple(axes)
                assert_close(run(op, x, axes), expected(x, reduced, op))
                view = x[:, ::-1]  # the canonical path, serial (its own bound per output)
                assert_close(run(op, view, axes), expected(view, reduced, op))


# ----------------------------------------------------------------------------- oracle


def _split_square(x: float) -> list[float]:
    """x*x as float64 terms whose exact sum is x*x (Veltkamp split, |x| < 1e150)."""
    c = 134217729.0 * x
    hi = c - (c - x)
    lo = x - hi
    return [hi * hi, 2.0 * hi * lo, lo * lo]


def _exact_row(values: np.ndarray, op: str, dtype: np.dtype):
    """The exactly rounded float64 result (or the exact integer) for one output."""
    if dtype.kind in "iu":
        wide_ints = values.astype(np.int64 if dtype.kind == "i" else np.uint64)
        high = (wide_ints >> 32).astype(np.int64)  # each part sums exactly in int64
        low = (wide_ints & 0xFFFFFFFF).astype(np.int64)
        return (int(high.sum()) << 32) + int(low.sum())
    wide = values.astype(np.float64)
    if op == "sum":
        if np.isnan(wide).any() or (np.isposinf(wide).any() and np.isneginf(wide).any()):
            return math.nan
        if np.isinf(wide).any():
            return math.inf if np.isposinf(wide).any() else -math.inf
        try:
            return math.fsum(wide.tolist())
        except OverflowError:  # a partial sum overflowed: scaled (exactly, for |x| >= 2**-958)
            return math.fsum((wide * 2.0**-64).tolist()) * 2.0**64  # inf if the sum overflows
    if np.any(np.isnan(wide)):
        return math.nan
    if np.any(np.isinf(wide)):
        return math.inf
    if dtype != np.float64:
        return math.sqrt(math.fsum((wide * wide).tolist()))
    with mpmath.workprec(200):
        if np.max(np.abs(wide), initial=0.0) < 1e150 and np.min(
                np.abs(wide[wide != 0]), initial=1.0) > 1e-140:
            terms = [t for v in wide.tolist() for t in _split_square(v)]
            high = math.fsum(terms)
            low = math.fsum([*terms, -high])
            total = mpmath.mpf(high) + mpmath.mpf(low)
        else:
            total = mpmath.fsum(mpmath.mpf(v) ** 2 for v in wide.tolist())
        return float(mpmath.sqrt(total))


def expected(x: np.ndarray, axes: tuple[int, ...] | None, op: str, keepdims: bool = True):
    """The exact result of reducing ``x`` over ``axes`` (None: all), rounded to ``x.dtype``.

    For float64 sums the result carries ``.slack``: CONDITION_SLACK * sum(|x|) per output.
    """
    axes = tuple(range(x.ndim)) if axes is None else tuple(sorted(a % x.ndim for a in axes))
    kept = [i for i in range(x.ndim) if i not in axes]
    moved = np.moveaxis(x, axes, range(len(kept), x.ndim))
    kept_shape = moved.shape[: len(kept)]
    rows = moved.reshape(math.prod(kept_shape), -1)
    values = [_exact_row(row, op, x.dtype) for row in rows]
    if x.dtype.kind in "iu":
        bits = 8 * x.dtype.itemsize
        wrapped = [v % (1 << bits) for v in values]
        out = np.array(wrapped, np.uint64).astype(x.dtype.str.replace("i", "u")).view(x.dtype)
    else:
        with np.errstate(over="ignore"):
            out = round_to(np.array(values, np.float64), x.dtype)
    shape = tuple(1 if i in axes else n for i, n in enumerate(x.shape)) if keepdims else \
        tuple(x.shape[i] for i in kept)
    out = Expected(out.reshape(shape))
    if x.dtype == np.float64 and op == "sum":
        with np.errstate(invalid="ignore", over="ignore"):
            out.slack = np.abs(CONDITION_SLACK * rows).sum(axis=1).reshape(shape)
    return out


class Expected(np.ndarray):
    """An expected result, with the error its condition allows (float64 sums)."""

    slack = 0.0

    def __new__(cls, values: np.ndarray) -> Expected:
        return np.asarray(values).view(cls)


def _ordered(a: np.ndarray) -> np.ndarray:
    """Float bits as integers ordered like the values (for ulp distances)."""
    bits = a.view({2: np.int16, 4: np.int32, 8: np.int64}[a.dtype.itemsize]).astype(object)
    top = 1 << (8 * a.dtype.itemsize - 1)
    return np.array([b if b >= 0 else -(b + top) for b in bits.ravel()], dtype=object)


def assert_close(got: np.ndarray, want: np.ndarray) -> None:
    slack = np.broadcast_to(getattr(want, "slack", 0.0), want.shape)
    want = np.asarray(want)
    assert got.dtype == want.dtype
    assert got.shape == want.shape
    if want.dtype.kind in "iu":
        np.testing.assert_array_equal(got, want)
        return
    g64, w64 = got.astype(np.float64), want.astype(np.float64)
    np.testing.assert_array_equal(np.isnan(g64), np.isnan(w64))
    finite = np.isfinite(w64)
    np.testing.assert_array_equal(g64[~finite & ~np.isnan(w64)], w64[~finite & ~np.isnan(w64)])
    g, w = np.ascontiguousarray(got)[finite], np.ascontiguousarray(want)[finite]
    if want.dtype == np.float64:
        allowed = 2 * np.spacing(np.abs(w)) + slack[finite]
        assert np.all(np.abs(g - w) <= allowed), np.max(np.abs(g - w) - allowed)
    if want.dtype == np.float64 and np.any(slack):
        return
    if g.size:
        worst = max(abs(int(d)) for d in (_ordered(g) - _ordered(w)))
        assert worst <= TOLERANCE.get(want.dtype, 1), f"{worst} ulp off"


# ----------------------------------------------------------------------------- inputs


def make(shape: tuple[int, ...], dtype: np.dtype, seed: int = 0, scale: float = 1.0):
    rng = np.random.default_rng(seed)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)
    return (rng.standard_normal(shape) * scale).astype(dtype)


def run(op: str, x: np.ndarray, axes, keepdims: bool = True) -> np.ndarray:
    f = onnx_reduce.reduce_sum if op == "sum" else onnx_reduce.reduce_l2
    with kernel_path("fast"):
        return f(x, axes=axes, keepdims=keepdims)


def _views(dtype: np.dtype):
    """(name, array, axes): every layout family, small (serial) and large (threads, pieces)."""
    a = make((37, 1031), dtype, 1)
    b = make((13, 257, 19), dtype, 2)
    c = make((11, 17, 13, 7), dtype, 3)
    yield "inner", a, [1]
    yield "outer", a, [0]
    yield "all", a, None
    yield "middle", b, [1]
    yield "nonadjacent", c, [0, 2]
    yield "nonadjacent-2", c, [1, 3]
    yield "transposed-inner", a.T, [1]
    yield "transposed-outer", a.T, [0]
    yield "reversed", a[::-1, ::-2], [1]
    yield "reversed-outer", a[::-1, ::-2], [0]
    yield "reversed-middle", b[:, ::-1, ::-1], [1]
    yield "strided", a[::2, 1:-1:3], [1]
    yield "strided-outer", a[::2, 1:-1:3], [0]
    yield "3d-transposed", b.transpose(2, 0, 1), [0, 2]
    yield "size-1-axis", a[:, None, :], [1]
    yield "negative-axis", b, [-1, 0]
    yield "rank-1", a[3], [0]
    yield "big-inner", make((300, 400), dtype, 4), [1]
    yield "big-inner-pieces", make((2, 40000), dtype, 5), [1]
    yield "big-all-pieces", make((300_000,), dtype, 6), None
    yield "big-outer-pieces", make((2000, 40), dtype, 7), [0]
    yield "big-outer-wide", make((20, 9000), dtype, 8), [0]
    yield "big-middle", make((40, 50, 40), dtype, 9), [1]
    yield "big-nonadjacent-pieces", make((30, 2, 1500), dtype, 10), [0, 2]
    yield "big-transposed", make((400, 300), dtype, 11).T, [0]


CASES = [("sum", d) for d in FLOATS + INTS] + [("l2", d) for d in FLOATS]


@pytest.mark.parametrize(("op", "dtype"), CASES, ids=[f"{o}-{d.name}" for o, d in CASES])
def test_every_layout_matches_the_exact_result(op: str, dtype: np.dtype) -> None:
    for name, x, axes in _views(dtype):
        before = x.copy()
        got = run(op, x, axes)
        assert_close(got, expected(x, None if axes is None else tuple(axes), op))
        np.testing.assert_array_equal(x, before, err_msg=name)  # input untouched
        assert got.flags.c_contiguous, name


@pytest.mark.parametrize("op", ["sum", "l2"])
def test_small_inputs_take_the_serial_path_in_every_layout(op: str, monkeypatch) -> None:
    """Below PARALLEL_MIN elements nothing launches a parallel region, whatever the axes
    (C-contiguous inputs with any reduced axes take the one-call path ``_small_nd``)."""

    def no_parallel():
        raise AssertionError("a small input launched a parallel region")

    monkeypatch.setattr(sum_l2, "parallel_section", no_parallel)
    n = sum_l2.PARALLEL_MIN
    shapes_axes = [
        ((8, 8, 16), [1]), ((8, 8, 16), [0, 2]), ((8, 128), [1]), ((8, 128), None),
        ((8, 8, 16), [0, 1]), ((8, 8, 16), [1, 2]), ((3, 1, 5, 2, 7), [1, 3]),
        ((2, 3, 4, 5, 6), [0, 2, 4]), ((2, 3, 4, 5, 6), [1, 3]), ((4, 1, 6), [1]),
        ((5, 3, 1), [2]), ((7, 3), []),
        ((16, n // 256 - 1, 16), [1]),  # one row below the threshold
        ((16, n // 256 - 1, 16), [0, 2]),
        ((n - 1, 1, 1), [0, 2]),  # long reduced rows (several BLOCKs) through _small_nd
        ((2, n // 2 - 1, 1), [0]),
    ]
    for dtype in FLOATS if op == "l2" else FLOATS + INTS:
        for shape, axes in shapes_axes:
            x = make(shape, dtype, 12)
            assert x.size < n
            got = run(op, x, axes)
            want = expected(x, tuple(axes) if axes else tuple(range(x.ndim)), op)  # [] = all
            assert_close(got, want)


@pytest.mark.parametrize(("op", "dtype"), CASES, ids=[f"{o}-{d.name}" for o, d in CASES])
def test_small_column_blocks(op: str, dtype: np.dtype) -> None:
    """The one-call path's blocks of reduced rows added into adjacent outputs (``_add_block``):
    four rows per update (two neighbouring rows from each half), then 0-3 rows left over
    (float64: row by row, compensated), rows that do and do not fill whole vectors, outer and
    middle axes."""
    for n_rows in range(1, 11):
        for width in (1, 5, 8, 37):
            x = make((3, n_rows, width), dtype, 70 + n_rows)
            assert_close(run(op, x, [1]), expected(x, (1,), op))
            y = x[1]
            assert_close(run(op, y, [0]), expected(y, (0,), op))


def test_small_float64_column_blocks_compensate_every_element() -> None:
    """float64 blocks of reduced rows on the one-call path go into the compensated sum one
    element at a time: 1e16 + 1 - 1e16 + 1 is exactly 2 (a plain float64 pre-sum of the four
    rows, as the other dtypes take, gives 0). Keeps benchmarks/ulp_report.py's float64
    outer/middle cells at 0.5 ulp."""
    for width, periods in [(1, 1), (5, 1), (8, 1), (2, 64), (3, 40), (5, 24), (8, 16)]:
        column = np.tile([1e16, 1.0, -1e16, 1.0], periods)  # 2 * periods exactly
        x = np.repeat(column[:, None], width, axis=1)  # from 16 rows of lanes: added in lanes
        assert x.size < sum_l2.PARALLEL_MIN
        two = np.full((1, width), 2.0 * periods)
        np.testing.assert_array_equal(run("sum", x, [0]), two)
        cube = np.stack([x, 2 * x])  # middle axis
        np.testing.assert_array_equal(run("sum", cube, [1]), np.stack([two, 2 * two]))


@pytest.mark.parametrize("op", ["sum", "l2"])
def test_threshold_boundary_agrees(op: str) -> None:
    """Just below and at PARALLEL_MIN the serial and threaded paths give exact-enough results."""
    n = sum_l2.PARALLEL_MIN
    for dtype in (np.dtype(np.float32), np.dtype(np.float64)):
        for rows in (n // 256 - 1, n // 256):
            x = make((16, rows, 16), dtype, 13)
            for axes in ([1], [0, 2], [2], [0]):
                assert_close(run(op, x, axes), expected(x, tuple(axes), op))


STREAM_DTYPES = [np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.float16)]


@pytest.mark.parametrize("op", ["sum", "l2"])
@pytest.mark.parametrize("dtype", STREAM_DTYPES, ids=[d.name for d in STREAM_DTYPES])
def test_streaming_row_kernels(op: str, dtype: np.dtype) -> None:
    """The row kernel's streamed rows (``_streamed_sum``): whole STREAM_BLOCK_BYTES blocks with
    and without a shorter rest, rows shorter than a block, rows at the end of the array (no
    prefetch past it), one long run cut in pieces, threaded and serial (strided views)."""
    block = sum_l2.STREAM_BLOCK_BYTES // dtype.itemsize
    cases = [
        (make((129, 2 * block + 3), dtype, 40), [1]),  # threads: two blocks and a rest
        (make((1031, block - 1), dtype, 41), [1]),  # shorter than a block
        (make((257, block), dtype, 52), [1]),  # one whole block each
        (make((9, 40 * block + 1), dtype, 42), [1]),  # long rows, threads
        (make((8, 2 * block + 1), dtype, 43)[::2], [1]),  # serial
        (make((6, 3 * block), dtype, 50)[::2], [1]),  # serial: whole blocks only
        (make((9, 5), dtype, 44)[::2], [1]),  # serial: a few elements per row
        (make((5 * 16384 + 7,), dtype, 45), None),  # pieces of one long run
        (make((3, 2 * block + 3), dtype, 46)[::2], None),  # serial: two long runs
        (make((3, block - 1), dtype, 47)[::2], None),
    ]
    for x, axes in cases:
        want = expected(x, None if axes is None else tuple(axes), op)
        assert_close(run(op, x, axes), want)


@pytest.mark.parametrize("op", ["sum", "l2"])
def test_float32_rows_three_outputs_at_a_time(op: str) -> None:
    """float32 rows of STREAM_BLOCK_BYTES and more, one per output (``_rows_in_thirds``, in
    ``_float32_rows_parallel``):
    work items of whole GROUP_ROWS groups and a shorter last one, with 0-2 outputs left for
    one at a time; rows of whole WIDE_BLOCK_BYTES blocks and with a rest; rows that are not
    adjacent (a column slice: the stride is not the row length); the last rows of the array
    (the prefetches clamped to its end)."""
    dtype = np.dtype(np.float32)
    shortest = sum_l2.STREAM_BLOCK_BYTES // dtype.itemsize
    block = sum_l2.WIDE_BLOCK_BYTES // dtype.itemsize
    items = sum_l2.CHUNKS_PER_THREAD * _common.num_threads()
    per_item = 2 * sum_l2.GROUP_ROWS + 4  # two whole groups, then three rows and one left
    cases = [
        (make((items * per_item, shortest), dtype, 80), [1]),
        (make((items * per_item + 1, shortest + block // 2 + 1), dtype, 81), [1]),
        (make((items * per_item + 2, 3 * shortest - 1), dtype, 82), [1]),
        (make((items * per_item + 5, shortest + 40), dtype, 83)[:, :shortest + 7], [1]),
    ]
    for x, axes in cases:
        assert x.size >= sum_l2.PARALLEL_MIN
        if x.flags.c_contiguous:
            assert sum_l2._three_streams(sum_l2.c_packed(x.shape, (1,))[0], dtype)
        assert_close(run(op, x, axes), expected(x, tuple(axes), op))


@pytest.mark.parametrize("op", ["sum", "l2"])
def test_float32_long_runs_of_pieces_in_thirds(op: str) -> None:
    """Pieces of a reduction split across threads whose float32 runs are at least
    THIRDS_MIN_BYTES long are read in thirds side by side (``_run_in_thirds``): one output
    (all axes, from 16 MiB) and a few long rows, their lengths chosen so that the pieces' runs
    leave 1 and 2 elements over after the thirds."""
    dtype = np.dtype(np.float32)
    threads = _common.num_threads()
    longest = sum_l2.THIRDS_ONE_OUTPUT_BYTES // dtype.itemsize

    def schedule(shape, reduced):
        geo, _ = sum_l2.c_packed(shape, reduced)
        assert sum_l2._three_streams(geo, dtype)
        return sum_l2._rows_schedule(geo, dtype.itemsize, threads, sum_l2.MOST_PIECES)[1]

    for rows, seed in ((None, 90), (3, 91)):
        shape = (longest,) if rows is None else (rows, longest // 4)
        reduced = tuple(range(len(shape))) if rows is None else (1,)
        pieces = schedule(shape, reduced)
        k = (shape[-1] // pieces + 2) // 3 * 3 + 1  # runs of k and k + 1: 1 and 2 left over
        shape = (*shape[:-1], pieces * k + pieces // 2)
        assert schedule(shape, reduced) == pieces > 1
        n = shape[-1]
        runs = [n * (p + 1) // pieces - n * p // pieces for p in range(pieces)]
        assert min(runs) * dtype.itemsize >= sum_l2.THIRDS_MIN_BYTES
        assert {r % 3 for r in runs} == {1, 2}
        x = make(shape, dtype, seed)
        axes = None if rows is None else [1]
        assert_close(run(op, x, axes), expected(x, None if rows is None else reduced, op))


@pytest.mark.parametrize("op", ["sum", "l2"])
@pytest.mark.parametrize("dtype", STREAM_DTYPES, ids=[d.name for d in STREAM_DTYPES])
def test_short_rows_of_adjacent_outputs(op: str, dtype: np.dtype) -> None:
    """Non-adjacent reduced axes with rows of at most STREAM_BLOCK_BYTES: outputs k, k + m/3
    and k + 2m/3 side by side (1, 2 or 0 outputs left over; threaded float32 in a kernel of
    its own, ``_streamed_sums3``, else ``_row_sums3``), rows of whole blocks, with a rest and
    shorter than a block, threaded and serial. The reductions are long enough for one work
    item to take all m outputs (their rows are neighbours), cut in pieces for the threads."""
    longest = sum_l2.STREAM_BLOCK_BYTES // dtype.itemsize
    threads = _common.num_threads()
    for m, row in ((7, longest), (8, longest - 3), (9, 37)):
        n = -(-2 * threads * sum_l2.MIN_PIECE_ELEMENTS // row) + 1
        x = make((n, m, row), dtype, 60 + m)
        geo, _ = sum_l2.c_packed(x.shape, (0, 2))
        assert sum_l2._rows_schedule(geo, dtype.itemsize, threads, 64)[0] == m
        assert_close(run(op, x, [0, 2]), expected(x, (0, 2), op))
        y = x[::-2]  # serial, canonical path
        assert_close(run(op, y, [0, 2]), expected(y, (0, 2), op))


@pytest.mark.parametrize("op", ["sum", "l2"])
def test_float64_rows_in_quarter_blocks(op: str) -> None:
    """float64 rows, one per output, threaded: work items of a multiple of four rows (at most
    64, four items per thread at least, down to four rows), whose quarters the compensated
    lanes read side by side; rows left over from the quarters (1-3) go one at a time."""
    dtype = np.dtype(np.float64)
    threads = _common.num_threads()
    for rows, cols in ((256 * threads, 130), (48 * threads + 3, 1500), (7, 12000)):
        x = make((rows, cols), dtype, rows)
        assert x.size >= sum_l2.PARALLEL_MIN
        geo, _ = sum_l2.c_packed(x.shape, (1,))
        block = sum_l2._rows_schedule(geo, dtype.itemsize, threads, 64, True)[0]
        assert block % 4 == 0
        assert 4 <= block <= 64
        assert block == 4 or -(-rows // block) >= 4 * threads
        assert block == 64 or rows < 256 * threads
        assert_close(run(op, x, [1]), expected(x, (1,), op))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mprotect through libc")
def test_float64_prefetches_past_the_array_end_fault_nothing() -> None:
    """Rows of arrays read from memory (``_lanes._FAR`` elements and more) are prefetched 4 KiB
    ahead without clamping to the array: the last rows' prefetches reach past its end, here
    into a page that cannot be read. A prefetch is a hint and faults nothing."""
    import ctypes
    import mmap

    nbytes = _lanes._FAR * 8
    assert nbytes % mmap.PAGESIZE == 0
    buf = mmap.mmap(-1, nbytes + mmap.PAGESIZE)
    start = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    libc = ctypes.CDLL(None, use_errno=True)
    guard = ctypes.c_void_p(start + nbytes)
    assert libc.mprotect(guard, mmap.PAGESIZE, 0) == 0, ctypes.get_errno()  # PROT_NONE
    x = np.frombuffer(buf, np.float64, count=_lanes._FAR).reshape(512, -1)
    x[...] = make(x.shape, np.dtype(np.float64), 7)
    for op in ("sum", "l2"):
        for axes in ((1,), (0, 1)):
            assert_close(run(op, x, list(axes)), expected(x, axes, op))


@pytest.mark.parametrize(
    ("shape", "axes", "dtype", "kernel"),
    [
        ((256, 256, 256), (0, 2), np.float32, "_float32_rows_parallel"),  # rows of 1 KiB
        ((64, 64, 64, 64), (1, 3), np.float32, "_float32_rows_parallel"),
        ((256, 256, 255), (0, 2), np.float32, "_float32_rows_parallel"),  # with a rest
        ((256, 256, 256), (0, 2), np.float16, "_rows_parallel"),
        ((256, 256, 256), (0, 2), np.float64, "_rows_parallel"),
        ((64, 256, 257), (0, 2), np.float32, "_rows_parallel"),  # rows of 1028 B
        ((4096, 256), (1,), np.float32, "_float32_rows_parallel"),  # one 1 KiB row each
        ((4096, 255), (1,), np.float32, "_rows_parallel"),  # rows under 1 KiB
        ((4096, 256), (1,), np.float64, "_rows_parallel"),
        ((4096, 4096), (0, 1), np.float32, "_float32_rows_parallel"),  # one output, 64 MiB
        ((2048, 1024), (0, 1), np.float32, "_rows_parallel"),  # one output, 8 MiB
        ((4096, 4096), (0, 1), np.float64, "_rows_parallel"),
        ((256, 256, 256), (0, 1), np.float32, "_cols_parallel"),
    ],
)
def test_float32_three_stream_rows_take_their_own_kernel(shape, axes, dtype, kernel) -> None:
    """float32 outputs that each sum several contiguous rows of at most STREAM_BLOCK_BYTES
    (non-adjacent axes), or one of STREAM_BLOCK_BYTES and more (inner axis), and one output of
    a run long enough to be read in thirds take ``_float32_rows_parallel``; everything else the
    row or column kernel as before (whose compiled code must not hold the three-stream loops)."""
    dtype = np.dtype(dtype)
    geo, inner = sum_l2.c_packed(shape, axes)
    size = math.prod(shape)
    n_out = size // math.prod(shape[a] for a in axes)
    job = sum_l2.choose_job(dtype, False, size, n_out, geo, inner)
    assert job.kernel is getattr(sum_l2, kernel)
    assert job.threaded


@pytest.mark.parametrize("square", [False, True])
def test_one_choice_of_kernel_for_every_path(square: bool, monkeypatch) -> None:
    """choose_job by size and layout: one thread under PARALLEL_MIN (the one-call kernels for
    C-contiguous inputs, the row or column kernel for views), all threads from there on; the
    per-call and the bound paths run what it chose."""
    f32 = np.dtype(np.float32)
    small = sum_l2._small_l2 if square else sum_l2._small_sum
    cases = [((64, 64), (1,), "_rows_serial"), ((64, 64), (0,), "_cols_serial")]
    for shape, axes, serial in cases:
        geo, inner = sum_l2.c_packed(shape, axes)
        mem = sum_l2.memory_order_geometry(shape, axes)
        size, n_out = 64 * 64, 64
        job = sum_l2.choose_job(f32, square, size, n_out, geo, inner, mem)
        assert job.kernel is small
        assert job.args[0] is mem
        assert job.geo is geo
        assert not job.threaded
        assert sum_l2.choose_job(f32, square, size, n_out, geo, inner).kernel is getattr(
            sum_l2, serial)
        big = sum_l2.PARALLEL_MIN
        assert sum_l2.choose_job(f32, square, big, big // 64, geo, inner, mem).threaded
    chosen = []
    original = sum_l2.choose_job
    monkeypatch.setattr(sum_l2, "choose_job", lambda *a: chosen.append(original(*a)) or chosen[-1])
    x = make((64, 64), f32, 3)
    plan = make_plan(Request(resolve("ReduceL2" if square else "ReduceSum", 18), (1,), False,
                             False), x.shape)
    per_call = (sum_l2.reduce_l2 if square else sum_l2.reduce_sum)(x, plan)
    bound = (sum_l2.bind_l2 if square else sum_l2.bind_sum)(x.dtype, plan)(x)
    view = (sum_l2.reduce_l2 if square else sum_l2.reduce_sum)(x[:, ::-1], plan)
    assert [job.kernel for job in chosen] == [small, small, sum_l2._rows_serial]
    np.testing.assert_array_equal(per_call, bound)
    op = "l2" if square else "sum"
    assert_close(per_call, expected(x, (1,), op, keepdims=False))
    assert_close(view, expected(x[:, ::-1], (1,), op, keepdims=False))


@pytest.mark.parametrize("op", ["sum", "l2"])
@pytest.mark.parametrize("dtype", STREAM_DTYPES, ids=[d.name for d in STREAM_DTYPES])
def test_long_run_blocks_of_adjacent_rows(op: str, dtype: np.dtype) -> None:
    """Non-adjacent reduced axes whose rows sit next to the neighbouring outputs' rows, with
    reductions long enough to cut in pieces: one work item takes all (here 7, 8, 9) outputs,
    k with k + m/3 and k + 2m/3 (1, 2, 0 left over), and the threads share the pieces."""
    for m in (7, 8, 9):
        x = make((130, m, 520), dtype, 48 + m)
        canon = _common.canonical(x, (0, 2))
        assert sum_l2._row_block(canon.geometry, m, 130 * 520, dtype.itemsize, 2) == m  # not 1
        assert_close(run(op, x, [0, 2]), expected(x, (0, 2), op))
    y = make((130, 7, 520), dtype, 49)[:, :, :519]  # rows not adjacent: the 64 KiB rule
    canon = _common.canonical(y, (0, 2))
    assert sum_l2._row_block(canon.geometry, 7, 130 * 519, dtype.itemsize, 2) == 1
    assert_close(run(op, y, [0, 2]), expected(y, (0, 2), op))


@pytest.mark.parametrize(("op", "dtype"), CASES, ids=[f"{o}-{d.name}" for o, d in CASES])
def test_narrow_columns_in_lanes(op: str, dtype: np.dtype) -> None:
    """Narrow slices whose rows follow each other are added ``k`` rows at a time as one row of
    LANE_BYTES lanes (k of at least 4), the lanes folded at the end: widths from 2 to just past
    the narrow ones, row counts just short of the rows of lanes each path needs (the column
    kernel four, the one-call path sixteen), exactly those, and with 0 to k - 1 rows left over;
    on the one-call path, the column kernel on one thread (reversed views: rows still follow
    each other; column slices: they do not) and threaded, axis 0 and middle axes."""
    lane = sum_l2.LANE_BYTES // dtype.itemsize
    seed = 300
    for width in (2, 3, 5, lane // 4, lane // 4 + 1):
        k = max(1, lane // width)
        for n_rows in (4 * k - 1, 4 * k, 5 * k - 1, 16 * k - 1, 16 * k, 17 * k - 1):
            seed += 1
            x = make((n_rows, width + 2), dtype, seed)
            cube = make((3, n_rows, width), dtype, seed + 1000)
            cases = [(x[:, :width].copy(), [0]), (x[::-1, :width], [0]), (x[:, 1:-1], [0]),
                     (cube, [1]), (cube[:, ::-1], [1])]
            for y, axes in cases:
                assert_close(run(op, y, axes), expected(y, tuple(axes), op))
    for width in (2, 4, lane // 4):  # threaded: more than the (patched) PARALLEL_MIN
        x = make((sum_l2.PARALLEL_MIN // width + 5, width), dtype, seed + width)
        assert_close(run(op, x, [0]), expected(x, (0,), op))
        y = make((2, sum_l2.PARALLEL_MIN // width // 2 + 7, width), dtype, seed - width)
        assert_close(run(op, y, [1]), expected(y, (1,), op))


@pytest.mark.parametrize("op", ["sum", "l2"])
@pytest.mark.parametrize("dtype", STREAM_DTYPES, ids=[d.name for d in STREAM_DTYPES])
def test_streaming_column_kernel(op: str, dtype: np.dtype) -> None:
    """The column kernel's rows: narrow slices (at most NARROW_BYTES) and wide ones (WIDE_BYTES
    or more) four at a time, two from each half of a range (0 to 3 rows left over), those in
    between three at a time, one from each third (0 to 2 left over); slices wider than COLUMNS
    (and COLUMNS_COMPENSATED, float64's), ranges cut in pieces, and middle axes, narrow and
    wide."""
    narrow = sum_l2.NARROW_BYTES // dtype.itemsize
    wide = sum_l2.WIDE_BYTES // dtype.itemsize

    def tall(width: int, extra: int, seed: int) -> np.ndarray:
        return make((-(-sum_l2.PARALLEL_MIN // width) + extra, width), dtype, seed)

    cases = [
        (tall(narrow, 0, 50), [0]),  # the widest four-row slice
        (tall(narrow - 3, 1, 51), [0]),
        (tall(narrow - 3, 3, 59), [0]),
        (tall(narrow + 1, 0, 52), [0]),  # the narrowest three-row slice
        (tall(narrow + 1, 1, 57), [0]),
        (tall(narrow + 1, 2, 60), [0]),
        (make((3 * 1024 + 2, 333), dtype, 61), [0]),
        (tall(wide - 1, 2, 62), [0]),  # the widest three-row slice
        (tall(wide, 3, 63), [0]),  # the narrowest wide four-row slice
        (make((17, sum_l2.COLUMNS + 5), dtype, 53), [0]),
        (make((33, sum_l2.COLUMNS_COMPENSATED + 3), dtype, 58), [0]),  # float64's narrower blocks
        (make((1999, 300), dtype, 54), [0]),  # pieces of odd lengths
        (make((40, 61, 300), dtype, 55), [1]),
        (make((80, 62, narrow // 2), dtype, 56), [1]),
    ]
    for x, axes in cases:
        assert x.size >= sum_l2.PARALLEL_MIN
        assert_close(run(op, x, axes), expected(x, tuple(axes), op))


@pytest.mark.parametrize(("op", "dtype"), CASES, ids=[f"{o}-{d.name}" for o, d in CASES])
def test_wide_column_slices_block_by_block(op: str, dtype: np.dtype) -> None:
    """Wide slices (``_add_wide_rows`` for float32, ``_add_rows`` for the rest): added
    WIDE_BLOCK_BYTES of each row at a time, then the part block left: widths a whole number of
    blocks, one element short and over; rows left over for the caller (float32: one GROUP_ROWS
    group, then a shorter one, 0-2 left; the rest two from each half, 0-3 left); reduced rows
    that do not merge into one dim (the offsets spelled out), and the last rows of the array
    (the prefetches clamped to its end)."""
    block = sum_l2.WIDE_BLOCK_BYTES // dtype.itemsize
    wide = -(-sum_l2.WIDE_BYTES // dtype.itemsize // block) * block  # a whole number of blocks
    rows = -(-sum_l2.PARALLEL_MIN // wide)
    cases = [(make((rows + extra, width), dtype, 70 + extra), [0])
             for extra, width in enumerate((wide, wide + 1, wide - 1 + block, wide + block // 2))]
    cases.append((make((rows // 4 + 1, 5, wide + 3), dtype, 75)[:, :4], [0, 1]))  # 2 reduced dims
    cases.append((make((3, rows // 2 + 2, wide + 7), dtype, 76), [1]))  # middle axis, wide
    for x, axes in cases:
        assert x.size >= sum_l2.PARALLEL_MIN
        assert_close(run(op, x, axes), expected(x, tuple(axes), op))


@pytest.mark.parametrize("specials", [False, True])
def test_float64_sums_whose_partial_sums_overflow(specials: bool) -> None:
    """Elements of +-1.7e308 in every layout: partial sums overflow where the true sum may not
    ([M, M, -M] is M), so such outputs are redone, scaled; the result is then within the sums'
    n u sum|x| (not inf, not NaN), inf with the sign of a true sum that overflows, and NaN or
    +-inf as an infinite or NaN element says."""
    rng = np.random.default_rng(77)
    for _, x, axes in _views(np.dtype(np.float64)):
        x[...] = np.where(x > 0, 1.7e308, -1.7e308)
        if specials:
            flat = x.reshape(-1) if x.flags.c_contiguous else None
            if flat is None:
                continue
            for value in (np.inf, -np.inf, np.nan):
                flat[rng.integers(0, flat.size, max(1, flat.size // 500))] = value
        with np.errstate(over="ignore", invalid="ignore"):
            want = expected(x, tuple(axes) if axes is not None else None, "sum")
        got = run("sum", x, axes)
        assert_close(got, want)


@pytest.mark.parametrize(("values", "want"), [([3e-200, 4e-200], 5e-200),
                                              ([3e200, 4e200], 5e200)])
def test_small_float64_l2_split_axes_is_rescaled(values: list[float], want: float) -> None:
    x = np.zeros((2, 3, 2))
    x[1, 2, 0], x[0, 2, 1] = values
    got = run("l2", x, [0, 2], keepdims=False)
    assert_close(got, expected(x, (0, 2), "l2", keepdims=False))  # within 2 ulp
    assert math.isclose(got[2], want, rel_tol=1e-15)
    assert got[0] == got[1] == 0.0


@pytest.mark.parametrize("op", ["sum", "l2"])
def test_keepdims_false_and_rank_0(op: str) -> None:
    x = make((5, 6, 7), np.dtype(np.float32))
    assert_close(run(op, x, [2, 0], keepdims=False), expected(x, (0, 2), op, keepdims=False))
    scalar = np.array(-2.5, np.float64)
    got = run(op, scalar, None)
    assert got.shape == ()
    assert float(got) == (-2.5 if op == "sum" else 2.5)


@pytest.mark.parametrize("op", ["sum", "l2"])
def test_empty_inputs(op: str) -> None:
    x = np.zeros((0, 4), np.float32)
    np.testing.assert_array_equal(run(op, x, [0]), np.zeros((1, 4), np.float32))
    empty_out = run(op, x, [1])
    assert empty_out.shape == (0, 1)
    assert empty_out.dtype == np.float32


def test_read_only_and_memmap(tmp_path) -> None:
    x = make((70, 1100), np.dtype(np.float32), 12)
    frozen = x.copy()
    frozen.flags.writeable = False
    mapped = np.memmap(tmp_path / "x.bin", dtype=np.float32, mode="w+", shape=x.shape)
    mapped[:] = x
    mapped.flush()
    readonly_map = np.memmap(tmp_path / "x.bin", dtype=np.float32, mode="r", shape=x.shape)
    for arr in (frozen, mapped, readonly_map, readonly_map[::-1, 3:], readonly_map.T):
        for axes in ([1], [0], None):
            for op in ("sum", "l2"):
                want = expected(np.asarray(arr), axes and tuple(axes), op)
                assert_close(run(op, arr, axes), want)


def test_broadcast_input_with_zero_strides() -> None:
    x = np.broadcast_to(np.arange(7, dtype=np.float64), (500, 7))
    assert_close(run("sum", x, [0]), expected(np.ascontiguousarray(x), (0,), "sum"))
    assert_close(run("l2", x, [1]), expected(np.ascontiguousarray(x), (1,), "l2"))


# ----------------------------------------------------------------------------- special values


@pytest.mark.parametrize("dtype", FLOATS, ids=[d.name for d in FLOATS])
@pytest.mark.parametrize("shape", [(6, 50), (6, 40000), (40000, 6)])
def test_inf_and_nan(dtype: np.dtype, shape: tuple[int, int]) -> None:
    x = make(shape, dtype, 13)
    long_axis = int(shape[1] < shape[0])
    pos = [1, shape[long_axis] // 2, shape[long_axis] - 1]

    def put(row: int, col: int, value: float) -> None:
        index = (row, col) if long_axis == 1 else (col, row)
        x[index] = value

    put(0, pos[0], np.inf)  # +inf
    put(1, pos[1], np.inf)  # +inf and -inf: NaN
    put(1, pos[2], -np.inf)
    put(2, pos[1], np.nan)  # NaN
    put(3, pos[2], -np.inf)  # -inf
    put(4, pos[0], np.nan)  # NaN and inf: NaN
    put(4, pos[2], np.inf)
    axes = (long_axis,)
    for op in ("sum", "l2"):
        got = run(op, x, list(axes)).astype(np.float64).ravel()
        want = {"sum": [np.inf, np.nan, np.nan, -np.inf, np.nan],
                "l2": [np.inf, np.inf, np.nan, np.inf, np.nan]}[op]
        np.testing.assert_array_equal(got[:5], want)
        assert np.isfinite(got[5])


@pytest.mark.parametrize(
    ("values", "want"),
    [
        ([1e200, 1e200], math.sqrt(2) * 1e200),
        ([3e-200, 4e-200], 5e-200),
        ([3e200, -4e200], 5e200),
        ([5e-324] * 4, 1e-323),
        ([1e308] * 4, math.inf),
        ([1e300, 1e-300], 1e300),
        ([0.0, -0.0], 0.0),
        ([2e-160, 1e-170, 3e-160], float(mpmath.sqrt(mpmath.mpf(2e-160) ** 2
                                                        + mpmath.mpf(1e-170) ** 2
                                                        + mpmath.mpf(3e-160) ** 2))),
    ],
)
def test_float64_l2_never_overflows_or_underflows(values: list[float], want: float) -> None:
    x = np.array(values, np.float64)
    assert float(run("l2", x, None)[0]) == pytest.approx(want, rel=3e-16, abs=0)
    # the same inside rows and columns, next to ordinary outputs, serial and threaded
    for n in (3, 30000):
        rows = np.ones((n, x.size))
        rows[1] = x
        got = run("l2", rows, [1]).ravel()
        assert got[1] == pytest.approx(want, rel=3e-16, abs=0)
        assert got[0] == pytest.approx(math.sqrt(x.size), rel=3e-16)
        cols = np.ascontiguousarray(rows.T)
        assert run("l2", cols, [0]).ravel()[1] == pytest.approx(want, rel=3e-16, abs=0)
    spread = np.full(70_000, values[0])  # threads, pieces, combine
    spread[-1] = values[-1]
    with mpmath.workprec(200):
        exact = mpmath.sqrt((spread.size - 1) * mpmath.mpf(values[0]) ** 2
                            + mpmath.mpf(values[-1]) ** 2)
    want_spread = np.array([float(exact)])
    assert_close(run("l2", spread, None), Expected(want_spread))


@pytest.mark.parametrize(
    ("dtype", "values", "want"),
    [
        (np.dtype(np.float32), [3e30, 4e30], 5e30),
        (np.dtype(np.float16), [300.0, 400.0], 500.0),
        (BF16, [3e38, 3e38], math.inf),
        (BF16, [3e-39, 4e-39], 5e-39),
        (np.dtype(np.float16), [6e-8, 6e-8], 2.0**-24),  # sqrt(2) * 2**-24, to subnormal
    ],
)
def test_narrow_l2_range(dtype: np.dtype, values: list[float], want: float) -> None:
    x = np.array(values).astype(dtype)
    got = run("l2", x, None)
    assert_close(got, expected(x, None, "l2"))
    assert float(got[0]) == pytest.approx(want, rel=2**-7)


def test_one_rounding_for_bfloat16_and_float16() -> None:
    # 1 + half an ulp + a little: rounding via float32 first would tie and go down to 1
    bf = np.array([1.0, 2.0**-8, 2.0**-30], BF16)
    assert float(run("sum", bf, None)[0]) == 1.0 + 2.0**-7
    half = np.array([1.0, 2.0**-11, 2.0**-24], np.float16)
    assert float(run("sum", half, None)[0]) == 1.0 + 2.0**-10
    # columns and threads take the same rounding
    wide = np.zeros((3, 30000), BF16)
    wide[:, 0] = [1.0, 2.0**-8, 2.0**-30]
    assert float(run("sum", wide, [0])[0, 0]) == 1.0 + 2.0**-7


@pytest.mark.parametrize("square", [False, True])
def test_bfloat16_rows_read_in_pairs_lose_no_element(square) -> None:
    """bfloat16 rows are read two elements at a time: rows of odd and even lengths, from odd
    and even element offsets (a C-contiguous array, its views without the first or last
    column, all axes), on one thread and in threaded pieces. Whole numbers 1-8 and float64
    outputs (:func:`sum_l2.reduce_wide`): every sum is exact, so a lost or doubled element
    shows (a bfloat16 output would round it away)."""
    rng = np.random.default_rng(21)
    op = "ReduceL2" if square else "ReduceSum"
    for n in (1, 2, 3, 8, 9, 255, 512, 513, 1025, 2049):
        for rows in (5, (1 << 17) // n + 1):  # one thread; above the (lowered) parallel size
            x = rng.integers(1, 9, size=(rows, n + 1)).astype(BF16)
            for data, axes in ((x, (1,)), (x[:, 1:], (1,)), (x[:, :n], (1,)), (x, None)):
                plan = make_plan(Request(resolve(op, 18), axes, False, False), data.shape)
                with kernel_path("fast"):
                    got = sum_l2.reduce_wide(data, plan, square)
                terms = data.astype(np.float64) ** (2 if square else 1)
                want = terms.sum(axis=axes)  # whole numbers under 2**53: exact
                np.testing.assert_array_equal(got, np.sqrt(want) if square else want)


def test_float64_long_reductions_stay_within_two_ulps() -> None:
    rng = np.random.default_rng(14)
    for x, axes in [
        (rng.random(1 << 20), None),
        (rng.random((8, 1 << 17)), [1]),
        (rng.random((1 << 14, 16)) + 1e3, [0]),
        (rng.random((300, 3, 7)), [0]),
    ]:
        for op in ("sum", "l2"):
            want = expected(x, axes and tuple(axes), op)
            want.slack = 0.0  # positive data: no cancellation, the plain 2-ulp bound
            assert_close(run(op, x, axes), want)


def test_integer_sums_wrap() -> None:
    for dtype in INTS:
        info = np.iinfo(dtype)
        x = np.full((3, 70000), info.max, dtype)
        x[1] = info.min
        got = run("sum", x, [1])
        assert_close(got, expected(x, (1,), "sum"))
        assert_close(run("sum", x, [0]), expected(x, (0,), "sum"))


def test_integer_l2_is_left_to_the_reference() -> None:
    x = np.array([3, 4], np.int64)
    plan = make_plan(Request(resolve("ReduceL2", 18), None, True, False), x.shape)
    assert sum_l2.reduce_l2(x, plan) is None
    assert onnx_reduce.reduce_l2(x).tolist() == [5]


def test_integer_column_kernels_refuse_squares() -> None:
    """They compile no square forms (integer ReduceL2 is the reference's): asked for squares
    anyway, they raise instead of returning sums."""
    base = np.arange(12, dtype=np.uint32)
    base.setflags(write=False)  # the variant every path runs
    geo, inner = sum_l2.c_packed((3, 4), (0,))
    assert not inner
    with pytest.raises(ValueError, match="integer squares"):
        sum_l2._cols_serial(base, geo, True, np.empty(4, np.uint32), np.empty(0, np.uint64))
    wide = np.empty(4, np.uint64)
    sum_l2._cols_serial(base, geo, False, np.empty(0, np.uint32), wide)
    assert wide.tolist() == [12, 15, 18, 21]


def test_unserved_inputs_return_none() -> None:
    plan = make_plan(Request(resolve("ReduceSum", 13), None, True, False), (4,))
    assert sum_l2.reduce_sum(np.arange(4, dtype=">f4"), plan) is None  # byte-swapped
    assert sum_l2.reduce_sum(np.arange(4, dtype=np.int8), plan) is None


# ----------------------------------------------------------------------------- shared helpers


def test_widen_and_store_cover_every_16_bit_pattern() -> None:
    @numba.njit
    def widen_all(a):
        out = np.empty(a.size)
        for i in range(a.size):
            out[i] = _common.widen(a[i])
        return out

    @numba.njit
    def store_all(values, out):
        for i in range(values.size):
            _common.store(out, i, values[i])

    bits = np.arange(1 << 16, dtype=np.uint16)
    for dtype in (np.dtype(np.float16), BF16):
        x = bits.view(dtype)
        decoded = widen_all(_common.storage_view(x))
        with np.errstate(invalid="ignore"):
            np.testing.assert_array_equal(decoded, x.astype(np.float64))
        ordered = np.sort(decoded[np.isfinite(decoded)])
        midpoints = (ordered[:-1] + ordered[1:]) / 2
        probes = np.concatenate([decoded, midpoints, np.nextafter(midpoints, np.inf),
                                 np.nextafter(midpoints, -np.inf), [1e300, -1e300, 1e-300]])
        out = np.empty(probes.size, _common.storage_dtype(dtype))
        store_all(probes, out)
        with np.errstate(over="ignore"):
            np.testing.assert_array_equal(out.view(dtype).astype(np.float64),
                                          round_to(probes, dtype).astype(np.float64))


def test_canonical_layouts() -> None:
    x = np.zeros((4, 5, 6), np.float32)
    c = _common.canonical(x[::-1, :, ::2].transpose(2, 0, 1), (1,))
    assert c.inner_reduced is False
    assert c.red_sizes == (4,)
    assert c.red_strides == (30,)
    assert sorted(c.kept_sizes) == [3, 5]
    assert min(c.kept_strides) >= 0
    assert c.base.flags.writeable is False
    assert _common.canonical(np.zeros(3, ">f8"), (0,)) is None


# ----------------------------------------------------------------------------- threads, processes


def test_concurrent_calls_from_many_threads() -> None:
    arrays = [make((600, 700), np.dtype(np.float32), 20 + i) for i in range(4)]
    jobs = [(op, x, axes) for x in arrays for op in ("sum", "l2") for axes in ([0], [1])]
    wanted = [expected(x, tuple(axes), op) for op, x, axes in jobs]
    small = make((8, 128), np.dtype(np.float64), 30)
    small_want = expected(small, (1,), "sum")
    errors: list[BaseException] = []

    def worker(k: int) -> None:
        try:
            for i in range(len(jobs)):
                j = (i + k) % len(jobs)
                op, x, axes = jobs[j]
                assert_close(run(op, x, axes), wanted[j])
                assert_close(run("sum", small, [1]), small_want)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_one_thread_gives_the_same_answers() -> None:
    x = make((300_000,), np.dtype(np.float64), 31)
    y = make((2000, 40), np.dtype(np.float32), 32)
    _common.choose_threading_layer()  # the layer users get (numba's thread calls start one)
    before = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        assert_close(run("sum", x, None), expected(x, None, "sum"))
        assert_close(run("l2", y, [0]), expected(y, (0,), "l2"))
    finally:
        numba.set_num_threads(before)


def _child(queue) -> None:
    x = np.ones((500, 400), np.float32)
    with kernel_path("fast"):
        queue.put(float(onnx_reduce.reduce_sum(x).ravel()[0]))


def test_forked_child_can_still_reduce() -> None:
    run("sum", np.ones((500, 400), np.float32), None)  # threads running in the parent
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_child, args=(queue,))
    child.start()
    child.join(60)
    assert child.exitcode == 0, f"child exit {child.exitcode} on {numba.threading_layer()}"
    assert queue.get(timeout=5) == 200000.0


def test_import_does_not_load_numba() -> None:
    code = "import sys, onnx_reduce; assert 'numba' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


# ----------------------------------------------------------------------------- float64 bound

#: Lengths around the float64 lanes' groups (16 per run, 64 per four interleaved runs).
LANE_LENGTHS = (1, 3, 15, 16, 17, 63, 64, 65, 127, 255, 256, 257, 511, 512, 513, 1025, 4097)
#: ulps of the exact result allowed for float64 terms of one sign (README: at most 2; the
#: compensated lanes measure 0.5 for ReduceSum and 1.11 for ReduceL2)
ONE_SIGN_ULPS = {"sum": 1.0, "l2": 1.5}


def _one_sign_layouts(rows: np.ndarray):
    """(name, array, axes) holding ``rows`` (m x n) as: the inner axis (one call), the inner
    axis of a bigger array (threads), split axes (several rows per output), a strided inner
    axis, one row over all axes, and columns."""
    yield "inner", rows, [1]
    tall = np.tile(rows, (-(-(1 << 16) // rows.size), 1))  # past PARALLEL_MIN (lowered)
    yield "inner, threads", tall, [1]
    yield "split", np.stack([rows, rows[::-1], rows]), [0, 2]
    yield "split, threads", np.stack([tall, tall[::-1]]), [0, 2]
    yield "strided", np.repeat(rows, 2, axis=1)[:, ::2], [1]
    yield "all", rows[0], None
    yield "columns", np.ascontiguousarray(rows.T), [0]


def _worst_ulps(op: str, x: np.ndarray, axes) -> float:
    name = "ReduceSum" if op == "sum" else "ReduceL2"
    return oracle.max_ulp_error(run(op, x, axes), oracle.exact(name, x, axes), np.float64)


@pytest.mark.parametrize("op", ["sum", "l2"])
def test_float64_constant_rows_within_one_ulp(op: str) -> None:
    """Constant float64 rows of every length around the lanes' groups, in every layout: within
    ONE_SIGN_ULPS of the exact result. (A plain vector sum per block, whose roundings repeat
    identically on every block of a constant row, was up to 6.6 ulp off, L2 3.6.)"""
    rng = np.random.default_rng(16)
    for n in LANE_LENGTHS:
        rows = np.full((4, n), 0.1) * rng.uniform(0.5, 2.0, (4, 1))
        for name, x, axes in _one_sign_layouts(rows):
            worst = _worst_ulps(op, x, axes)
            assert worst <= ONE_SIGN_ULPS[op], f"n={n} {name}: {worst:.2f} ulp"


@pytest.mark.parametrize("op", ["sum", "l2"])
@settings(deadline=None, max_examples=40)
@given(data=st.data())
def test_float64_one_sign_rows_within_one_ulp(op: str, data) -> None:
    """Property: float64 rows of one sign (constant, or drawn values, any length up to several
    groups) in a drawn layout are within ONE_SIGN_ULPS of the exact result."""
    n = data.draw(st.integers(1, 1100), label="n")
    m = data.draw(st.integers(1, 6), label="rows")
    if data.draw(st.booleans(), label="constant"):
        values = data.draw(st.lists(st.floats(1e-3, 1e3), min_size=m, max_size=m))
        rows = np.repeat(np.array(values)[:, None], n, axis=1)
    else:
        rows = data.draw(hnp.arrays(np.float64, (m, n), elements=st.floats(0.0, 1e6)))
    if data.draw(st.booleans(), label="negative"):
        rows = -rows
    layouts = list(_one_sign_layouts(rows))
    name, x, axes = layouts[data.draw(st.integers(0, len(layouts) - 1), label="layout")]
    note(name)
    assert _worst_ulps(op, x, axes) <= ONE_SIGN_ULPS[op]


def test_float64_cancellation_is_compensated() -> None:
    """The lanes carry their rounding errors: a float64 sum that cancels is within a few ulps
    of its tiny exact result where a plain sum loses it (1e16 + 1 - 1e16 + ... is 2 * k)."""
    for n in (64, 1000, 4096):
        row = np.tile([1e16, 1.0, -1e16, 1.0], n // 4)
        for name, x, axes in _one_sign_layouts(row[None, :].repeat(3, axis=0)):
            if name == "columns":
                continue
            got = run("sum", x, axes)
            assert np.all(got == np.asarray(oracle.exact("ReduceSum", x, axes), float)), name


@pytest.mark.parametrize("op", ["sum", "l2"])
def test_float64_specials_through_the_lanes(op: str) -> None:
    """inf, -inf and NaN anywhere in a float64 row, and a sum that overflows, come out as
    IEEE addition gives them, in every layout (the lanes' own sum would turn inf into NaN);
    an L2 whose squares overflow but whose root does not stays finite."""
    base = np.ones((4, 300))
    base[0, 7] = np.inf
    base[1, 150] = np.nan
    base[2, [3, 290]] = [np.inf, -np.inf]
    base[3] = 1e307  # sum 3e309 overflows; L2 1.73e308 does not
    name = "ReduceSum" if op == "sum" else "ReduceL2"
    for layout, x, axes in _one_sign_layouts(base):
        np.testing.assert_array_equal(run(op, x, axes), oracle.expected(name, x, axes),
                                      err_msg=layout)


def test_float32_short_rows_eight_at_a_time() -> None:
    """float32 ReduceSum rows of at most WIDE_TINY elements, one per output, eight at a time
    (:func:`_lanes.eight_wide_rows`) and the last few one by one: the exact sum rounded
    once, for every length, row counts around multiples of eight, rows apart (the row kernel
    on one thread) and adjacent on threads, with inf, NaN, zeros and sums past float32."""
    rng = np.random.default_rng(32)
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45], np.float32)
    for n in range(1, sum_l2.WIDE_TINY + 2):
        for count in (1, 7, 8, 19, 64):
            wide = make((count, n + 3), np.dtype(np.float32), n + count)
            if count == 19:
                hit = rng.random(wide.shape) < 0.2
                wide[hit] = rng.choice(specials, hit.sum())
            if count == 7:
                wide[:4] = 3e38  # sums past float32's largest
            rows = wide[:, 1:n + 1]  # rows apart: the row kernel, not the small kernels
            with np.errstate(invalid="ignore"):  # (inf - inf in the expected values)
                want = expected(rows, (1,), "sum")
            assert_close(run("sum", rows, [1]), want)
    for n in (3, 16, sum_l2.WIDE_TINY):
        rows = make((sum_l2.PARALLEL_MIN // n + 13, n), np.dtype(np.float32), n)
        want = np.array([math.fsum(r) for r in rows.astype(np.float64)]).astype(np.float32)
        assert_close(run("sum", rows, [1]).ravel(), want)
        positive = np.abs(make((301, n + 2), rows.dtype, n))[:, 1:n + 1]  # rows apart
        # ReduceLogSum: the float64 sums into its own output
        with kernel_path("fast"):
            got = onnx_reduce.reduce_log_sum(positive, axes=[1])
        np.testing.assert_array_equal(got, oracle.expected("ReduceLogSum", positive, (1,)))


def _assert_four_rows_bits(x: np.ndarray, a: int, stride: int, n: int, count: int) -> None:
    """:func:`_lanes.tiny_sums` of ``count`` rows of ``n`` from ``x[a]``, ``stride`` apart, gives
    :func:`_lanes.four_rows`' double-doubles bit for bit, sums and sums of squares."""
    for square in (False, True):
        hi, lo = np.empty(count), np.empty(count)
        _lanes.tiny_sums(x, a, stride, n, square, count, hi, lo)
        want = [_lanes.four_rows(x, a + i * stride, a, a, a, n, square)[:2] for i in range(count)]
        got = np.stack([hi, lo], axis=1)
        assert got.tobytes() == np.array(want).reshape(-1, 2).tobytes(), (n, stride, a, square)


def test_short_rows_read_from_memory_give_the_same_results() -> None:
    """Arrays large enough to be read from memory have their short rows prefetched ahead
    (:func:`_lanes.rows_ahead`, :func:`_lanes.prefetch_rows`; a loop of its own, the cached
    one unchanged): the same bits as :func:`_lanes.four_rows` for float64 rows, adjacent and
    apart, up to the array's last row (prefetches past its end), and float32 sums eight rows
    at a time (:func:`_lanes.eight_wide_rows`) rounded once from the exact sum."""
    big = np.random.default_rng(80).standard_normal(1 << 20)  # 8 MiB: read from memory
    big.flags.writeable = False
    assert _lanes.rows_ahead(big, 64) > 0
    assert _lanes.rows_ahead(big[:1000], 64) == 0
    for n, stride in ((5, 5), (16, 16), (64, 64), (64, 70), (_lanes.TINY, _lanes.TINY)):
        count = 8 * 40 + 3
        for a in (0, big.size - count * stride):  # the first rows, the last ones
            _assert_four_rows_bits(big, a, stride, n, count)
    wide = make((1 << 21,), np.dtype(np.float32), 81)  # 8 MiB of float32
    for n in (3, 8, sum_l2.WIDE_TINY):
        m = wide.size // n
        rows = wide[:m * n].reshape(m, n)
        got = run("sum", rows, [1]).ravel()
        sample = np.r_[0:40, m // 2:m // 2 + 40, m - 40:m]
        assert_close(got[sample], expected(rows[sample], (1,), "sum").ravel())


def _tiny_rows_cases():
    """Rows of 1 to TINY float64 elements, some rows apart, some adjacent: random magnitudes,
    rows that cancel, constant rows of mixed signs, and rows with inf, NaN, zeros of both
    signs, subnormals and squares that overflow."""
    rng = np.random.default_rng(70)
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 5e-324, -5e-324, 1e308, -1e308,
                         1e-300, 2e154, -3e200])
    for trial in range(12 * _lanes.TINY):  # each length 12 times: 3 strides x 4 kinds
        n = 1 + trial // 4 % _lanes.TINY
        stride = n + trial // (4 * _lanes.TINY)
        count = int(rng.integers(0, 40))
        x = rng.standard_normal(count * stride + 3) * 10.0 ** rng.integers(-300, 300)
        kind = trial % 4
        if kind == 1:
            x -= x.mean()
        elif kind == 2:
            x = x[0] * rng.choice([1.0, -1.0], x.size)
        elif kind == 3:
            hit = rng.random(x.size) < rng.choice([0.01, 0.3])
            x[hit] = rng.choice(specials, hit.sum())
        x.flags.writeable = False  # as the kernels get it: no writeable variant compiles
        yield x, n, stride, count, int(rng.integers(0, 3))


def test_tiny_rows_give_the_lanes_bits() -> None:
    """Rows of at most TINY float64 elements skip the 64 lanes (:func:`_lanes.tiny_sums`:
    side by side, or eight at a time) and give :func:`_lanes.four_rows`'s double-doubles bit
    for bit, sums and sums of squares, NaN bits included; the row kernel takes them, on its
    own and, rows of at most SHORT or many rows, ahead of the small kernels (and the last ``n
    % 4`` outputs of a block by ``run_sum``)."""
    for x, n, stride, count, a in _tiny_rows_cases():
        _assert_four_rows_bits(x, a, stride, n, count)
    lead = sum_l2.SMALL_TINY_OUTPUTS
    for m, n in ((3, 3), (4001, 3), (4 * sum_l2.PARALLEL_MIN + 3, 3), (lead - 1, 16),
                 (lead, 16), (lead, _lanes.TINY), (lead, _lanes.TINY + 1), (9001, 33)):
        rows = np.random.default_rng(m).standard_normal((m, n))
        geo, inner = sum_l2.c_packed(rows.shape, (1,))
        job = sum_l2.choose_job(rows.dtype, False, rows.size, m, geo, inner,
                                sum_l2.memory_order_geometry(rows.shape, (1,)))
        tiny = n <= _lanes.SHORT or (n <= _lanes.TINY and m >= lead)
        assert (job.kernel in (sum_l2._rows_serial, sum_l2._rows_parallel)) == tiny, (m, n)
        for op in ("sum", "l2"):
            assert_close(run(op, rows, [1]), expected(rows, (1,), op))
