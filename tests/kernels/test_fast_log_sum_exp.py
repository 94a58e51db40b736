"""The compiled ReduceLogSumExp kernel: ulp-checked against mpmath in every layout and dtype.

Every call runs under ``kernel_path("fast")``, so a silent fallback to the reference is a failure.
"""

from __future__ import annotations

import math
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import mpmath
import numpy as np
import pytest

import onnx_reduce
from onnx_reduce.kernels.dispatch import kernel_path
from onnx_reduce.plan import make_plan
from onnx_reduce.spec import Request, resolve
from onnx_reduce.spec.dtypes import bfloat16

lse_module = pytest.importorskip("onnx_reduce.kernels.fast.log_sum_exp")
exp_module = pytest.importorskip("onnx_reduce.kernels.fast._exp")

DTYPES = [np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.float16), bfloat16]
#: Allowed error in ulps of the exactly rounded result (the numerics contract).
TOLERANCE = {np.dtype(np.float64): 2.0}
_PREC = 160


def fast_lse(x: np.ndarray, axes=None, keepdims: bool = True) -> np.ndarray:
    with kernel_path("fast"):
        return onnx_reduce.reduce_log_sum_exp(x, axes=axes, keepdims=keepdims)


def exact_lse(values: np.ndarray) -> mpmath.mpf:
    """log(sum(exp(values))) of a 1-D float array in extended precision (inf/NaN as ONNX)."""
    wide = values.astype(np.float64)
    if np.isnan(wide).any():
        return mpmath.nan
    if np.isposinf(wide).any():
        return mpmath.inf
    finite = wide[np.isfinite(wide)]
    if finite.size == 0:
        return -mpmath.inf
    with mpmath.workprec(_PREC):
        m = mpmath.mpf(float(finite.max()))
        tail = mpmath.fsum(mpmath.exp(mpmath.mpf(float(v)) - m) for v in finite if v < m)
        ties = int((finite == finite.max()).sum())
        return m + mpmath.log1p(tail + (ties - 1))


def ulp_error(got: float, exact: mpmath.mpf, dtype: np.dtype) -> float:
    """|got - exact| in ulps of ``dtype`` at the exactly rounded value (0 for matching specials)."""
    if mpmath.isnan(exact):
        return 0.0 if np.isnan(got) else np.inf
    if mpmath.isinf(exact):
        return 0.0 if got == float(exact) else np.inf
    with np.errstate(over="ignore"):
        rounded = np.array(float(exact)).astype(dtype)  # via float64: a hair off at most
    if np.isinf(rounded):
        return 0.0 if got == float(rounded) else np.inf
    spacing = float(np.spacing(np.abs(rounded)).astype(np.float64))
    if not np.isfinite(got):
        return np.inf
    with mpmath.workprec(_PREC):
        return float(abs(mpmath.mpf(float(got)) - exact) / spacing)


def assert_close(x: np.ndarray, axes, got: np.ndarray) -> None:
    """Check every output of reducing ``axes`` of ``x`` against mpmath."""
    dtype = x.dtype
    axes = tuple(range(x.ndim)) if axes is None else tuple(a % x.ndim for a in axes)
    kept = [a for a in range(x.ndim) if a not in axes]
    moved = np.moveaxis(x, axes, range(x.ndim - len(axes), x.ndim))
    groups = moved.reshape(*moved.shape[: len(kept)], -1)
    got = got.reshape(groups.shape[:-1])
    assert got.dtype == dtype
    tol = TOLERANCE.get(dtype, 1.0)
    worst = 0.0
    for index in np.ndindex(*groups.shape[:-1]):
        err = ulp_error(float(got[index]), exact_lse(groups[index]), dtype)
        assert err <= tol, (index, float(got[index]), groups[index][:8], err)
        worst = max(worst, err)


def sample(shape, dtype, seed=0, scale=4.0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape) * scale).astype(np.float32).astype(dtype)


# ----------------------------------------------------------------------------- layouts

LAYOUTS = [
    ((6, 50), (1,)),  # inner
    ((50, 6), (0,)),  # outer
    ((5, 9), None),  # all
    ((3, 40, 5), (1,)),  # middle
    ((4, 6, 7), (0, 2)),  # two non-adjacent axes
    ((3, 4, 5, 6), (1, 3)),
    ((2, 3, 4), (-1, 0)),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(("shape", "axes"), LAYOUTS)
def test_layouts_match_mpmath(dtype, shape, axes):
    x = sample(shape, dtype)
    assert_close(x, axes, fast_lse(x, axes))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_views_are_read_in_place(dtype):
    x = sample((30, 40), dtype, seed=1)
    views = {
        "transposed": (x.T, (0,)),
        "transposed-inner": (x.T, (1,)),
        "negative": (x[::-1, ::-2], (1,)),
        "negative-outer": (x[::-1, ::-1], (0,)),
        "strided": (x[::3, 1::3], (0,)),
        "strided-inner": (x[1::2, ::3], (1,)),
    }
    for name, (view, axes) in views.items():
        got = fast_lse(view, axes)
        assert got.shape == tuple(1 if i in axes else n for i, n in enumerate(view.shape)), name
        assert_close(view, axes, got)


def test_read_only_and_memmap(tmp_path):
    x = sample((20, 33), np.float32, seed=2)
    x.flags.writeable = False
    assert_close(x, (1,), fast_lse(x, [1]))
    path = tmp_path / "x.bin"
    sample((20, 33), np.float16, seed=3).tofile(path)
    mm = np.memmap(path, dtype=np.float16, mode="r", shape=(20, 33))
    assert_close(mm, (0,), fast_lse(mm, [0]))
    assert_close(mm.T, (0,), fast_lse(mm.T, [0]))


def test_keepdims_false_and_input_untouched():
    x = sample((4, 5, 6), np.float64, seed=4)
    before = x.copy()
    got = fast_lse(x, [1], keepdims=False)
    assert got.shape == (4, 6)
    assert np.array_equal(x, before)


def test_size_one_axes_and_empty_outputs():
    x = sample((7, 1), np.float32, seed=5)
    np.testing.assert_array_equal(fast_lse(x, [1]), x)  # one element: exactly itself
    assert fast_lse(np.zeros((0, 3), np.float32), [1]).shape == (0, 1)


# ----------------------------------------------------------------------------- sizes

# Shapes crossing the row block (64 / 1024), the column block (256 / 512 / 1024 outputs), the
# parallel threshold and the split of few outputs into pieces. "tiny" lowers the thresholds
# (parallel from 64 elements, pieces of 16) so that small, mpmath-checkable inputs take the
# parallel and split paths too.
SIZES = [
    (np.float64, (5, 64 * 3 + 17), (1,)),
    (np.float32, (3, 1024 * 2 + 37), (1,)),
    (np.float32, (7, 1100), (0,)),
    (np.float64, (9, 600), (0,)),
    (np.float16, (2, 2100), (0,)),
    (bfloat16, (3, 5, 1030), (1,)),
    (bfloat16, (3, 301), (1,)),
    (np.float32, (2, 1500), (1,)),
    (np.float64, (1500, 2), (0,)),
    (np.float16, (1501,), None),
    (np.float32, (4, 300, 30), (1,)),
    (np.float64, (6, 20, 7), (0, 2)),
]


@pytest.fixture(params=["default", "tiny"])
def thresholds(request, monkeypatch):
    if request.param == "tiny":
        monkeypatch.setattr(lse_module, "PARALLEL_MIN", 64)
        monkeypatch.setattr(lse_module, "MIN_PIECE", 16)
    lse_module._JOBS.clear()
    yield request.param
    lse_module._JOBS.clear()


@pytest.mark.parametrize(("dtype", "shape", "axes"), SIZES, ids=str)
def test_block_and_thread_boundaries(dtype, shape, axes, thresholds):
    x = sample(shape, np.dtype(dtype), seed=6, scale=3.0)
    assert_close(x, axes, fast_lse(x, axes))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_short_runs_read_in_groups(dtype, thresholds):
    # Reductions over non-adjacent axes read many short runs; evenly spaced ones are added in
    # one loop nest (up to a block), across the wrap of an outer reduced dim, from pieces that
    # start mid-run ("tiny"), strided, with ties, and where the narrow floats' guess declines.
    for seed, (shape, axes) in enumerate([((9, 3, 5, 7), (0, 1, 3)), ((40, 2, 30), (0, 2)),
                                          ((5, 70, 3, 3), (1, 3))]):
        x = sample(shape, dtype, seed=30 + seed, scale=2.0)
        assert_close(x, axes, fast_lse(x, axes))
        x.reshape(-1)[::5] = x.max()  # ties with the maximum
        x.reshape(-1)[-1] = x.max() + 300.0  # far above every guess
        assert_close(x, axes, fast_lse(x, axes))
        view = x[..., ::-2]
        assert_close(view, axes, fast_lse(view, axes))


def test_large_inputs_take_the_parallel_paths():
    # Default thresholds: parallel rows/columns and split reductions on real sizes, checked on a
    # few outputs (mpmath is slow) and against the same kernel on one thread.
    x = sample((2, 66_000), np.float32, seed=12)  # two pieces of 2**15 or more per output
    assert_close(x[:1], (1,), fast_lse(x, [1])[:1])
    y = sample((600, 130), np.float64, seed=13)
    assert_close(y[:, :3], (0,), fast_lse(y, [0])[:, :3])


@pytest.mark.parametrize(
    ("shape", "axes", "small", "general"),
    [
        ((8, 128), (1,), "_small_rows", "_rows_serial"),
        ((8, 8, 16), (0, 2), "_small_rows", "_rows_serial"),
        ((128, 8), (0,), "_small_columns", "_rows_serial"),  # narrow columns: strided rows
        ((128, 40), (0,), "_small_columns", "_columns_serial"),
        ((16, 512), (0,), "_columns_serial", "_columns_serial"),  # wide columns
        ((2, 70_000), (1,), None, "_rows_split"),  # few outputs: pieces
        ((70_000, 4), (0,), None, "_rows_split"),
        ((70_000, 40), (0,), None, "_columns_split"),
        ((20_000, 16), (0,), None, "_rows_parallel"),  # 128 bytes wide, read from cache
        ((40_000, 16), (0,), None, "_columns_parallel"),  # 128 bytes wide, from memory
        ((600, 130), (0,), None, "_columns_parallel"),
        ((130, 600), (1,), None, "_rows_parallel"),
    ],
)
def test_one_choice_of_kernel_for_both_paths(shape, axes, small, general):
    """choose_job by layout and size: the one-call kernels for small C-contiguous rows and
    narrow columns (the bound path), the general kernels otherwise, threaded from
    PARALLEL_MIN elements on."""
    x = np.empty(shape, np.float64)
    plan = make_plan(Request(resolve("ReduceLogSumExp", 18), axes, True, False), shape)
    canon = lse_module.canonical(x, axes)
    job = lse_module.choose_job(canon, x.dtype, plan)
    assert job.kernel is getattr(lse_module, general)
    assert job.threaded == (x.size >= lse_module.PARALLEL_MIN)
    bound = lse_module.choose_job(canon, x.dtype, plan, small=True)
    assert bound.kernel is getattr(lse_module, small or general)
    assert (lse_module.bind_log_sum_exp(x.dtype, plan) is None) == (small is None)


@pytest.mark.parametrize("dtype", [np.dtype(np.float32), np.dtype(np.float16)], ids=str)
def test_split_columns_read_once_with_guessed_shifts_and_fall_back(dtype, monkeypatch):
    """Narrow floats' split columns: every piece reduced in one read against a shift guessed
    from its first rows, the pieces merged; where a guess does not serve (a larger element
    further on, NaN, inf, a result under GUARD) the exact two sweeps give every output."""
    monkeypatch.setattr(lse_module, "MIN_PIECE", 1 << 12)
    monkeypatch.setattr(lse_module, "_JOBS", type(lse_module._JOBS)(256))
    x = sample((10_000, 80), dtype, seed=21, scale=3.0)  # wider than the narrow columns
    plan = make_plan(Request(resolve("ReduceLogSumExp", 18), (0,), True, False), x.shape)
    job = lse_module.choose_job(lse_module.canonical(x, (0,)), x.dtype, plan)
    assert job.kernel is lse_module._columns_split
    assert job.args[-1] >= 2  # pieces
    offset, geo, width, pieces = job.args
    dims = lse_module._column_dims(geo)

    def guessed(data):  # the guessed read alone: (least |result|, NaN if one not served; outputs)
        base = data.reshape(-1).view(np.uint16) if dtype == np.float16 else data.reshape(-1)
        base.setflags(write=False)  # as the kernels read it (no writeable variant compiles)
        bits = base.view(np.int32) if dtype == np.float32 else base
        out = np.empty(data.shape[1], base.dtype)
        least = lse_module._split_guesses(base, bits, offset, *dims, width, pieces, out)
        return least, out.view(dtype)

    least, out = guessed(x)
    assert least == pytest.approx(np.abs(out.astype(np.float64)).min(), rel=2.0**-10)
    assert_close(x[:, :3], (0,), out[:3])
    np.testing.assert_array_equal(out, fast_lse(x, [0])[0])
    y = x.copy()
    y[9_500, 6] = 1e4 if dtype == np.float32 else 6e4  # far above its piece's guess
    y[5_000, 7] = np.nan
    y[7_000, 8] = np.inf
    y[:, 9] -= (np.log(np.exp(y[:, 9].astype(np.float64)).sum())).astype(dtype)  # LSE ~ 0
    assert np.isnan(guessed(y)[0])
    got = fast_lse(y, [0])[0]
    assert got[6] == y[9_500, 6]
    assert np.isnan(got[7])
    assert got[8] == np.inf
    assert_close(y[:, [0, 9]], (0,), got[[0, 9]])


def test_views_take_their_layout_s_job_once(monkeypatch):
    """A view's job depends on its shape, strides, dtype and axes only: chosen once, reused
    for other data of that layout, and another layout gets its own."""
    monkeypatch.setattr(lse_module, "_JOBS", type(lse_module._JOBS)(256))
    a, b = sample((40, 30), np.float32, seed=3), sample((40, 30), np.float32, seed=4)
    for x in (a[:, ::-1], b[:, ::-1], a[:, ::2]):
        assert_close(x, (1,), fast_lse(x, [1]))
    keys = [key for key in lse_module._JOBS._entries if len(key) == 4]
    assert sorted(key[1] for key in keys) == [(120, -4), (120, 8)]


def test_results_do_not_depend_on_threads(monkeypatch):
    import numba

    monkeypatch.setattr(lse_module, "PARALLEL_MIN", 64)
    monkeypatch.setattr(lse_module, "MIN_PIECE", 16)
    lse_module._JOBS.clear()
    x = sample((3, 1003), np.float64, seed=7)
    y = sample((1003, 3), np.float32, seed=8)
    from onnx_reduce.kernels.fast import _common

    _common.choose_threading_layer()  # the layer users get (numba's thread calls start one)
    before = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        one = fast_lse(x, [1]), fast_lse(y, [0]), fast_lse(x)
    finally:
        numba.set_num_threads(before)
    both = fast_lse(x, [1]), fast_lse(y, [0]), fast_lse(x)
    lse_module._JOBS.clear()
    for a, b in zip(one, both, strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(
    ("shape", "dtype", "slabs"),
    [
        ((4096, 8, 16), np.float32, True),  # narrow columns, short reductions
        ((1024, 8, 64), np.float64, True),  # float64 up to SMALL_COLUMNS_MAX_WIDTH
        ((1024, 8, 64), np.float32, False),  # 256 bytes: the column kernel reads once
        ((32, 4096, 16), np.float32, False),  # 4096 > 16**2: long columns
        ((128, 128, 8), np.float64, False),  # 128 > 8**2 (measured 0.85-0.91x as slabs)
        ((1024, 8, 256), np.float64, False),  # wider than SMALL_COLUMNS_MAX_WIDTH
        ((8, 8, 16), np.float32, False),  # under PARALLEL_MIN: the one-thread kernels
    ],
)
def test_slab_job_takes_large_narrow_middle_columns(shape, dtype, slabs):
    contiguous, view = _kernels_chosen(shape, dtype, (1,))
    assert (contiguous is lse_module._slab_columns) == slabs
    assert view is not lse_module._slab_columns


def _kernels_chosen(shape, dtype, axes):
    """The kernels choose_job takes for a C-contiguous input of ``shape`` and for a strided
    view of that layout."""
    plan = make_plan(Request(resolve("ReduceLogSumExp", 18), axes, True, False), shape)
    canon = lse_module.canonical(np.empty(shape, dtype), axes)
    contiguous = lse_module.choose_job(canon, np.dtype(dtype), plan, contiguous=True)
    return contiguous.kernel, lse_module.choose_job(canon, np.dtype(dtype), plan).kernel


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_slab_pieces_match_mpmath_and_the_one_thread_kernel(dtype, monkeypatch):
    """Slabs shared out across threads in pieces (here of 4 KiB: many pieces, uneven ones)
    give each output the one-thread kernel's bits on any thread count; special values stay
    in their slab; the front door's results are within the contract of mpmath's."""
    import numba

    monkeypatch.setattr(lse_module, "SLAB_PIECE_BYTES", 4096)
    lse_module._JOBS.clear()
    x = sample((4099, 8, 4), dtype, seed=31)
    with np.errstate(over="ignore"):
        x[5, 3, 1] = np.nan
        x[4000, :, 2] = -np.inf
        x[77, 2, 0] = np.inf
        x[2050, :, 3] = np.array(3e38, np.float64).astype(np.float32).astype(dtype)
    plan = make_plan(Request(resolve("ReduceLogSumExp", 18), (1,), True, False), x.shape)
    job = lse_module.choose_job(lse_module.canonical(x, (1,)), x.dtype, plan, contiguous=True)
    assert job.kernel is lse_module._slab_columns
    assert job.args[0].shape[0] > 2  # pieces
    storage = np.uint16 if x.dtype.itemsize == 2 else x.dtype
    base = x.view(storage).reshape(-1)
    base.flags.writeable = False  # as the front doors pass it: no writeable variant compiled
    geo = lse_module.memory_order_geometry(x.shape, (1,))
    one = np.empty(x.size // 8, storage)
    lse_module._small_columns(base, geo, one)  # the whole input on one thread
    before = numba.get_num_threads()
    try:
        for threads in (1, before):
            numba.set_num_threads(threads)
            pieces = np.empty_like(one)
            job.kernel(base, base, *job.args, pieces)
            np.testing.assert_array_equal(pieces, one)
    finally:
        numba.set_num_threads(before)
    got = fast_lse(x, (1,))  # the kernel's results, those under the bound's limit refined
    lse_module._JOBS.clear()
    picks = [5, 77, 2050, 4000, 4098]  # the specials' slabs and the last, uneven piece
    assert_close(x[picks], (1,), got[picks])


# ----------------------------------------------------------------------------- special values

SPECIALS = [
    [-np.inf, -np.inf, -np.inf],
    [0.0, -np.inf],
    [np.inf, 1.0, -np.inf],
    [1.0, np.inf, np.inf],
    [np.nan, 1.0],
    [1.0, np.inf, np.nan],
    [np.nan, -np.inf],
    [-np.inf, np.nan, np.inf],
    [0.0, -40.0],
    [0.0, -20.0, -20.0],
    [-1e30, -1e30],
    [1e30, -1e30, 0.0],
    [3e38, 3e38],
    [-3e38, 3e38],
    [1e-30, -1e-30],
    [0.0, -0.0],
    [-0.0, -0.0],
    [60000.0, 60000.0],
    [-60000.0, 60000.0, 0.0],
]


@pytest.fixture
def column_kernel(monkeypatch):
    """Narrow columns on the column kernel (they take the row kernels otherwise)."""
    monkeypatch.setattr(lse_module, "NARROW_COLUMNS_BYTES", 0)
    monkeypatch.setattr(lse_module, "NARROW_COLUMNS_CACHED", 0)
    lse_module._JOBS.clear()
    yield
    lse_module._JOBS.clear()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("layout", ["row", "column", "narrow column"])
def test_special_values(dtype, layout, request):
    with np.errstate(over="ignore"):
        rows = [np.array(v, np.float64).astype(np.float32).astype(dtype) for v in SPECIALS]
    width = max(len(r) for r in rows)
    pad = np.array(-np.inf, dtype)
    x = np.stack([np.concatenate([r, np.full(width - len(r), pad)]) for r in rows])
    if layout != "row":
        if layout == "column":
            request.getfixturevalue("column_kernel")
        x = np.ascontiguousarray(x.T)
        axes = (0,)
    else:
        axes = (1,)
    assert_close(x, axes, fast_lse(x, axes))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("threaded", [True, False])
def test_short_rows_finished_together(dtype, threaded, monkeypatch):
    """Row kernels on float64 and short narrow rows (at most SHORT_ROW_BYTES) take each
    output's maximum, then its terms, and finish a run of outputs in one loop
    (``_rows_two_pass``): NaN, +inf and all -inf rows among finite ones, at the edges of the
    runs the threads take (threaded: CHUNKS_PER_THREAD runs per thread; else on one thread),
    in the input and in a reversed view, land on their own outputs."""
    if threaded:
        monkeypatch.setattr(lse_module, "PARALLEL_MIN", 64)
    lse_module._JOBS.clear()
    assert 37 * np.dtype(dtype).itemsize <= lse_module.SHORT_ROW_BYTES
    x = sample((203, 37), np.dtype(dtype), seed=41, scale=4.0)
    x[0, 5] = np.nan
    x[1, 3] = np.inf
    x[2] = -np.inf
    x[-1, 0] = np.inf
    x[-2] = -np.inf
    x[100, :] = 700.0
    chunks = lse_module.CHUNKS_PER_THREAD * 2
    for edge in (x.shape[0] * k // chunks for k in range(1, chunks)):
        x[edge, edge % 37] = (np.nan, np.inf, -np.inf)[edge % 3]
    for view, adjacent in ((x, True), (x[::-1], True), (x[:, 1:], False)):
        plan = make_plan(Request(resolve("ReduceLogSumExp", 18), (1,), True, False), view.shape)
        job = lse_module.choose_job(lse_module.canonical(view, (1,)), view.dtype, plan)
        general = lse_module._rows_parallel if threaded else lse_module._rows_serial
        assert job.kernel is (lse_module._short_rows if threaded and adjacent else general)
        assert_close(view, (1,), fast_lse(view, (1,)))
    lse_module._JOBS.clear()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_adjacent_short_rows_give_the_row_kernels_bits(dtype, monkeypatch):
    """Adjacent short rows (``_short_rows``, no walk; rows of up to TINY_ROW elements its
    variants across the outputs, ``_TINY_ROWS``) give the general row kernel's bits: rows of 2
    to 9, 16 and SHORT_ROW_BYTES, specials among them, merged trailing axes."""
    widest = lse_module.SHORT_ROW_BYTES // np.dtype(dtype).itemsize
    tiny = [((80_000 // n + n, n), (1,)) for n in range(2, lse_module.TINY_ROW + 2)]
    for shape, axes in (*tiny, ((5_000, 16), (1,)), ((600, widest), (1,)),
                        ((5_000, 4, 4), (1, 2)), ((9_000, 2, 4), (1, 2))):
        x = sample(shape, np.dtype(dtype), seed=43, scale=4.0)
        x.reshape(-1)[::997] = np.nan
        x.reshape(-1)[5::1009] = np.inf
        x[7] = -np.inf
        lse_module._JOBS.clear()
        plan = make_plan(Request(resolve("ReduceLogSumExp", 18), axes, True, False), x.shape)
        job = lse_module.choose_job(lse_module.canonical(x, axes), x.dtype, plan)
        n = int(np.prod(x.shape[1:]))
        assert job.kernel is lse_module._TINY_ROWS.get(n, lse_module._short_rows), shape
        got = fast_lse(x, axes)
        monkeypatch.setattr(lse_module, "_adjacent_rows", lambda canon: 0)
        lse_module._JOBS.clear()
        want = fast_lse(x, axes)
        monkeypatch.undo()
        np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))
    lse_module._JOBS.clear()


@pytest.mark.parametrize("dtype", [np.dtype(np.float32), np.dtype(np.float16), bfloat16], ids=str)
def test_adjacent_long_rows_give_the_row_kernels_bits(dtype, monkeypatch):
    """Adjacent narrow rows longer than SHORT_ROW_BYTES (``_long_rows``, no walk) give the
    general row kernel's bits and every output within the bound of the exact result: rows one
    element over SHORT_ROW_BYTES, a block long and one over, several blocks and a tail; NaN,
    +inf, all -inf, one element above the guessed shift by more than MARGIN, near-zero results
    (under GUARD: read again exactly) and ties, at the edges of the threads' runs; reversed
    views and merged trailing axes."""
    monkeypatch.setattr(lse_module, "PARALLEL_MIN", 64)
    shortest = lse_module.SHORT_ROW_BYTES // np.dtype(dtype).itemsize + 1
    block = lse_module.LONG_BLOCK
    chunks = lse_module.CHUNKS_PER_THREAD * 2
    for shape, axes in (((67, shortest), (1,)), ((40, block), (1,)), ((40, block + 1), (1,)),
                        ((33, 3 * block + 77), (1,)), ((3, 20, 2, 700), (2, 3))):
        x = sample(shape, np.dtype(dtype), seed=47, scale=4.0)
        rows = x.reshape(-1, int(np.prod([x.shape[a] for a in axes])))
        n = rows.shape[1]
        rows[0, 5] = np.nan
        rows[1, n - 1] = np.inf
        rows[2] = -np.inf
        rows[3, n - 2] = rows[3, :lse_module.PROBE].max() + 2 * lse_module.MARGIN
        rows[4] = 0.0  # every element a tie
        rows[5, :] = -30.0
        rows[5, 0] = np.log(np.float32(1e-3)) - 30.0  # LSE of about -30 + log(n)
        rows[6, :] = -np.log(np.float32(n))  # LSE near 0: under GUARD
        for edge in (rows.shape[0] * k // chunks for k in range(1, chunks)):
            rows[edge, edge % n] = (np.nan, np.inf, -np.inf)[edge % 3]
        for view in (x, x[::-1]):
            lse_module._JOBS.clear()
            plan = make_plan(Request(resolve("ReduceLogSumExp", 18), axes, True, False),
                             view.shape)
            job = lse_module.choose_job(lse_module.canonical(view, axes), view.dtype, plan)
            assert job.kernel is lse_module._long_rows, (shape, view.strides)
            got = fast_lse(view, axes)
            assert_close(view, axes, got)
            with monkeypatch.context() as general:
                general.setattr(lse_module, "_adjacent_rows", lambda canon: 0)
                lse_module._JOBS.clear()
                want = fast_lse(view, axes)
            np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))
    lse_module._JOBS.clear()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_tiny_rows_match_mpmath_in_any_view(dtype, monkeypatch):
    """Rows of 2 to TINY_ROW elements (``_TINY_ROWS``), of C-contiguous inputs, their reversed
    views and with two kept dims, NaN, +inf, all -inf rows and ties among them, at the edges
    of the threads' runs: every output within the bound of the exact result."""
    monkeypatch.setattr(lse_module, "PARALLEL_MIN", 64)
    lse_module._JOBS.clear()
    for n in range(2, lse_module.TINY_ROW + 1):
        x = sample((3, 101, n), np.dtype(dtype), seed=n, scale=30.0)
        x[0, 0, 0] = np.nan
        x[1, 50, n - 1] = np.inf
        x[2, 100] = -np.inf
        x[0, 7] = x[0, 7, 0]  # a row of ties
        for view, axes in ((x, (2,)), (x[::-1, ::-1], (2,)), (x.reshape(-1, n), (1,))):
            plan = make_plan(Request(resolve("ReduceLogSumExp", 18), axes, True, False),
                             view.shape)
            job = lse_module.choose_job(lse_module.canonical(view, axes), view.dtype, plan)
            assert job.kernel is lse_module._TINY_ROWS[n], (n, view.strides)
            assert_close(view, axes, fast_lse(view, axes))
    lse_module._JOBS.clear()


def test_long_rows_read_once_in_chunks():
    # Narrow floats read rows longer than CHUNK once, rescaling when a chunk raises the maximum.
    n = 3 * lse_module.CHUNK + 123
    rising = np.sort(sample((2, n), np.float32, seed=14), axis=1)
    assert_close(rising, (1,), fast_lse(rising, [1]))
    late = sample((4, n), np.float16, seed=15, scale=2.0)
    late[0, : lse_module.CHUNK + 5] = -np.inf  # the first chunk is all -inf
    late[1, 2 * lse_module.CHUNK + 7] = np.inf  # +inf in the third chunk
    late[2, n - 1] = np.nan  # NaN in the last chunk, after finite values
    late[3, 5] = np.inf
    late[3, n - 2] = -np.nan
    assert_close(late, (1,), fast_lse(late, [1]))
    falling = np.ascontiguousarray(rising[:, ::-1]).astype(bfloat16)
    assert_close(falling, (1,), fast_lse(falling, [1]))


def test_float64_extremes():
    cases = {
        (800.0, 800.0): None,
        (1e308, 1.7e308, -1.7e308): None,
        (0.0, -740.0): None,  # a subnormal tail
        (0.0, -745.0, -745.0): None,
        (-5e-324, -1e-300): None,
        (0.0, -1e-10): None,
    }
    for values in cases:
        x = np.array(values)
        assert_close(x, None, fast_lse(x))
    assert float(fast_lse(np.array([800.0, 800.0]))[0]) == pytest.approx(800.6931471805599, 1e-15)
    assert float(fast_lse(np.array([0.0, -40.0]))[0]) == pytest.approx(4.248354255291589e-18,
                                                                       rel=1e-15)


def test_mixed_magnitudes_float32():
    rng = np.random.default_rng(9)
    x = (rng.standard_normal((12, 300)) * 10.0 ** rng.integers(-30, 30, (12, 300)))
    x = x.astype(np.float32)
    assert_close(x, (1,), fast_lse(x, [1]))
    assert_close(x.T, (0,), fast_lse(x.T, [0]))


def test_float64_well_conditioned_long_rows():
    x = np.random.default_rng(10).random((3, 5000))
    assert_close(x, (1,), fast_lse(x, [1]))
    assert_close(np.ascontiguousarray(x.T), (0,), fast_lse(np.ascontiguousarray(x.T), [0]))


def test_float64_blocks_of_terms_near_one():
    """float64 rows around the block length (one element less or more, two and three blocks)
    whose terms are all just under 1, so that each block adds up to about its length: within
    the bound. The block stays within the 2**13 terms whose parts on the 2**-40 grid add up
    exactly in any order."""
    block = lse_module.BLOCK
    assert block <= 1 << 13
    rng = np.random.default_rng(14)
    for n in (block - 1, block, block + 1, 2 * block + 3, 3 * block):
        x = 5.0 - rng.random((2, n)) * 2.0**-30
        x[:, 0] = 5.0
        assert_close(x, (1,), fast_lse(x, [1]))


@pytest.mark.parametrize(
    ("rows", "cols", "kernel"),
    [
        (lse_module.BLOCK - 1, 140, "_columns_parallel"),
        (lse_module.BLOCK + 1, 140, "_columns_parallel"),
        (3 * lse_module.BLOCK + 5, 140, "_columns_parallel"),
        (17 * lse_module.BLOCK, 40, "_columns_split"),  # pieces of more than a block each
    ],
)
def test_float64_column_blocks_of_terms_near_one(rows, cols, kernel):
    """The column kernels add float64 terms' grid parts a block of rows at a time, then fold
    each block in: columns around and past the block length, whole or in pieces, of terms
    1 - 3 * 2**-40, within the bound. Once a block's sum outgrew the 2**-40 grid (past 2**15,
    four rows at a time) every add would round the same way: without blocks, 15 ulps."""
    x = np.full((rows, cols), 5.0 - 3 * 2.0**-40)
    x[0] = 5.0
    plan = make_plan(Request(resolve("ReduceLogSumExp", 18), (0,), True, False), x.shape)
    job = lse_module.choose_job(lse_module.canonical(x, (0,)), x.dtype, plan)
    assert job.kernel is getattr(lse_module, kernel)
    got = fast_lse(x, [0])[0]
    some = [0, cols // 2 + 1, cols - 1]  # other lanes and items: the same arithmetic
    assert_close(x[:, some], (0,), got[some])


# ----------------------------------------------------------------------------- guessed shift

NARROW = [np.dtype(np.float32), np.dtype(np.float16), bfloat16]


def guess_rows(dtype) -> np.ndarray:
    """Rows for the guessed-shift path (shift = maximum of the first PROBE elements)."""
    probe, n = lse_module.PROBE, 3000
    x = sample((12, n), np.float32, seed=21, scale=2.0)
    x[0, n - 3] = x[0, :probe].max() + 5.0  # the maximum after the probe: still served
    x[1, 2500] = x[1, :probe].max() + 200.0  # far above the guess: exact path
    x[2, 1700] = np.nan  # NaN after the probe
    x[3, 2999] = np.inf  # +inf after the probe
    x[4, :probe] = -np.inf  # an infinite guess
    x[5] = np.float32(-np.log(n)) + x[5] * 1e-3  # a result near 0: under GUARD, exact path
    x[6] = -np.inf  # two ties, one after the probe: result ~ 1.8e-8 (ln 2 - 0.6931472)
    x[6, [0, 2000]] = np.float32(-0.6931472)
    x[7, :] = -30.0  # ties far below, then one larger element after the probe
    x[7, 2222] = -20.0
    x[8] = x[8] * 1e-4  # tiny spread: ties almost everywhere
    x[9] = np.float32(np.log(2.0) / 3000) + x[9] * 1e-9  # result near log(3000) + ...
    x[10] = np.sort(x[10]) * 30.0  # rising over +-200: the guess is far below the maximum
    x[11] = -x[11] - 60.0  # all values far below 0: result ~ -52
    return x.astype(dtype)


@pytest.mark.parametrize("dtype", NARROW, ids=str)
def test_guessed_shift_rows(dtype):
    x = guess_rows(dtype)
    assert_close(x, (1,), fast_lse(x, [1]))
    assert_close(x[:, ::-3], (1,), fast_lse(x[:, ::-3], [1]))  # strided


@pytest.mark.parametrize("dtype", NARROW, ids=str)
def test_guessed_shift_split_pieces(dtype, monkeypatch):
    # Few long outputs: pieces with their own guesses, rescaled and added; a failed guess or a
    # small result sends every output to the exact path.
    monkeypatch.setattr(lse_module, "MIN_PIECE", 256)
    monkeypatch.setattr(lse_module, "PARALLEL_MIN", 64)
    lse_module._JOBS.clear()
    try:
        x = guess_rows(dtype)
        for rows in ([0, 8, 9, 11], [0, 5], [1, 2], [6, 7]):
            assert_close(x[rows], (1,), fast_lse(x[rows], [1]))
        y = x[[0, 11]].reshape(2, 30, 100)
        assert_close(y, (1, 2), fast_lse(y, [1, 2]))
        kernels = {job[0] for job in lse_module._JOBS.values() if job}
        assert kernels == {lse_module._rows_online_split}
    finally:
        lse_module._JOBS.clear()


def test_guess_serves_or_declines():
    x = guess_rows(np.dtype(np.float32))
    flat = x.reshape(-1)  # the kernels read flat read-only views (a writeable one would
    flat.setflags(write=False)  # compile a variant of its own, which test_fast_common forbids)
    bits = flat.view(np.int32)
    empty = np.empty(0, np.int64)
    n = x.shape[1]

    def guess(row: int) -> float:
        return lse_module._row_guess(flat, bits, row * n, empty, empty, n, 1, n, 1024)

    for row in (0, 8, 9, 11):
        assert ulp_error(guess(row), exact_lse(x[row]), np.dtype(np.float32)) <= 0.51
    for row in (1, 2, 3, 4, 5, 6, 10):  # margin, NaN, +inf, -inf guess, small results
        assert np.isnan(guess(row)), row


@pytest.mark.parametrize("dtype", NARROW, ids=str)
def test_guessed_shift_columns(dtype, column_kernel):
    # The rows above as columns: the guess (maximum of the first PROBE_ROWS rows) serves some
    # outputs of a work item and declines others, which the exact passes then compute.
    x = np.ascontiguousarray(guess_rows(dtype).T)
    assert_close(x, (0,), fast_lse(x, [0]))
    assert_close(x[::-3], (0,), fast_lse(x[::-3], [0]))  # strided rows
    assert_close(x[:, ::2], (0,), fast_lse(x[:, ::2], [0]))  # strided outputs
    cube = x[:2990].reshape(2, 1495, 12)
    assert_close(cube, (1,), fast_lse(cube, [1]))  # middle axis
    lse_module._JOBS.clear()
    try:
        twice = np.tile(x, (1, 2))  # 72000 elements: parallel
        assert_close(twice, (0,), fast_lse(twice, [0]))
        kernels = {job[0] for job in lse_module._JOBS.values() if job}
        assert kernels == {lse_module._columns_parallel}
    finally:
        lse_module._JOBS.clear()


def test_column_guess_serves_or_declines():
    # Decided per output, by the rule of the rows' guess.
    x = np.ascontiguousarray(guess_rows(np.dtype(np.float32)).T)
    n, w = x.shape
    flat = x.reshape(-1)
    flat.setflags(write=False)  # as the kernels read it (no writeable variant compiles)
    bits = flat.view(np.int32)
    keys = np.full(w, lse_module._KEY_FLOOR, np.int64)
    mags = np.zeros(w, np.int64)
    peaks = np.empty(w)
    his = np.zeros(w)
    rows = np.array([n], np.int64)
    lse_module._column_guess_pass(flat, bits, 0, w, 1, rows, np.array([w], np.int64), 0, n,
                                  keys, mags, peaks, his)
    results = [lse_module._guessed(flat, peaks[j], his[j]) for j in range(w)]
    for j in (0, 8, 9, 11):
        assert ulp_error(results[j], exact_lse(x[:, j]), np.dtype(np.float32)) <= 0.51
    for j in (1, 2, 3, 4, 5, 6, 10):  # margin, NaN, +inf, -inf guess, small results
        assert np.isnan(results[j]), j


@pytest.mark.parametrize("dtype", [*NARROW, np.dtype(np.float64)], ids=str)
def test_column_results_do_not_depend_on_the_item_width(dtype, monkeypatch):
    # Items of COLUMN_BYTES or 16 bytes of outputs, parallel or not: the same bits, declined outputs
    # included (a declined output does not send its neighbours to the exact passes).
    x = np.ascontiguousarray(np.tile(guess_rows(dtype).T, (1, 40)))
    wide = fast_lse(x, [0]).astype(np.float64)  # NaN == NaN for assert_array_equal
    monkeypatch.setattr(lse_module, "COLUMN_BYTES", 16)
    monkeypatch.setattr(lse_module, "COLUMN_MIN_BYTES", 16)
    for parallel_min in (1 << 30, 64):
        monkeypatch.setattr(lse_module, "PARALLEL_MIN", parallel_min)
        lse_module._JOBS.clear()
        try:
            np.testing.assert_array_equal(fast_lse(x, [0]).astype(np.float64), wide)
        finally:
            lse_module._JOBS.clear()


def _outputs_apart(shape, axes, dtype):
    """Data whose outputs are far apart in magnitude (output ``t`` near ``t + 0.5`` and its
    neighbours' more than 1% away), with a NaN, a +inf and an all -inf output, and an element
    above ``m + MARGIN`` late in output 0, where a guessed shift does not serve."""
    kept = [d for d in range(len(shape)) if d not in axes]
    moved = np.moveaxis(np.empty(shape), axes, range(len(kept), len(shape)))
    outputs = int(np.prod(moved.shape[:len(kept)]))
    reduced = int(np.prod(moved.shape[len(kept):]))
    rows = np.random.default_rng(31).standard_normal((outputs, reduced)) * 0.25 - 8.0
    levels = np.arange(outputs) % 50 + 0.5
    rows += (levels - np.log(np.exp(rows).sum(axis=1)))[:, None]  # LSE of row t = levels[t]
    rows[0, -1] = 300.0
    rows[1, reduced // 2] = np.nan
    rows[2, 0] = np.inf
    rows[3] = -np.inf
    flat = rows.reshape(moved.shape)
    return np.ascontiguousarray(np.moveaxis(flat, range(len(kept), len(shape)), axes)).astype(
        dtype)


@pytest.mark.parametrize(
    ("shape", "dtype", "slab_rows"),
    [
        ((256, 256, 256), np.float32, True),  # 64 MiB, rows of 1 KiB 256 KiB apart
        ((16, 4096, 128), np.float16, True),  # every limit: 16 MiB, 16 slabs, 256 B, 4096
        ((256, 256, 256), np.float64, False),  # float64: exact maxima first
        ((128, 128, 128), np.float32, False),  # 8 MiB: the walk per output is faster in cache
        ((64, 4096, 32), np.float32, False),  # rows of 128 bytes
        ((16, 8192, 64), np.float32, False),  # too many outputs
        ((8, 256, 4096), np.float32, False),  # fewer slabs than pieces
    ],
)
def test_slab_rows_job_takes_large_split_reductions(shape, dtype, slab_rows):
    contiguous, view = _kernels_chosen(shape, dtype, (0, 2))
    assert (contiguous is lse_module._slab_rows) == slab_rows
    assert view is not lse_module._slab_rows


@pytest.mark.parametrize("dtype", NARROW, ids=str)
def test_slab_rows_match_mpmath_on_any_thread_count(dtype, monkeypatch):
    """A split reduction read slab by slab (limits lowered: a small input qualifies): every
    output within the contract of mpmath's, the outputs a guess does not serve (a NaN, +inf,
    all -inf, an element above every guess late in output 0) read again, the least finite
    |result| returned, the same bits on one thread."""
    import numba

    monkeypatch.setattr(lse_module, "SLAB_ROWS_INPUT_BYTES", 0)
    lse_module._JOBS.clear()
    shape = (19, 14, 260)  # uneven pieces of the slabs; more than PARALLEL_MIN elements
    x = _outputs_apart(shape, (0, 2), dtype)
    plan = make_plan(Request(resolve("ReduceLogSumExp", 18), (0, 2), True, False), shape)
    job = lse_module.choose_job(lse_module.canonical(x, (0, 2)), x.dtype, plan,
                                contiguous=True)
    assert job.kernel is lse_module._slab_rows
    base = lse_module.storage_view(x).reshape(-1)
    base.setflags(write=False)  # as the front doors pass it: no writeable variant compiled
    bits = base.view(lse_module._BITS.get(x.dtype, base.dtype))
    before = numba.get_num_threads()
    results = []
    try:
        for threads in (1, before):
            numba.set_num_threads(threads)
            out = np.empty(job.outputs, lse_module.storage_dtype(x.dtype))
            least = job.kernel(base, bits, *job.args, out)
            results.append(out)
    finally:
        numba.set_num_threads(before)
    np.testing.assert_array_equal(results[0], results[1])
    got = results[1].view(x.dtype).astype(np.float64)
    assert np.isnan(got[1])
    assert got[2] == np.inf == -got[3]
    assert least == pytest.approx(np.abs(got[~np.isnan(got)]).min(), rel=2.0**-8)
    assert_close(x, (0, 2), fast_lse(x, (0, 2)))
    lse_module._JOBS.clear()


@pytest.mark.parametrize(
    ("shape", "axes", "dtype", "small", "kernel"),
    [
        ((8, 128), (1,), np.float32, True, "_small_rows"),
        ((128, 40), (0,), np.float16, True, "_small_columns"),
        ((8, 128), (1,), np.float64, False, "_rows_serial"),
        ((16, 512), (0,), np.float32, False, "_columns_serial"),
        ((130, 600), (1,), np.float32, False, "_long_rows"),
        ((130, 600), (1,), bfloat16, False, "_long_rows"),
        ((130, 600), (1,), np.float64, False, "_rows_parallel"),
        ((20_000, 16), (1,), np.float32, False, "_short_rows"),
        ((600, 130), (0,), bfloat16, False, "_columns_parallel"),
        ((600, 130), (0,), np.float64, False, "_columns_parallel"),
        ((5, 70_000), (1,), np.float64, False, "_rows_split"),
        ((5, 70_000), (1,), np.float32, False, "_rows_online_split"),
        ((70_000, 40), (0,), np.float64, False, "_columns_split"),
        ((70_000, 40), (0,), np.float16, False, "_columns_split"),
        ((4096, 8, 16), (1,), np.float64, False, "_slab_columns"),
    ],
)
def test_every_kernel_returns_its_least_finite_result(shape, axes, dtype, small, kernel):
    """Every kernel returns the least |result| before rounding, NaN left out: whether any
    output needs the exact recomputation is decided from it (``_vouched``, the bound calls),
    also after a guessed shift failed and the exact passes ran."""
    dtype = np.dtype(dtype)
    x = _outputs_apart(shape, axes, dtype)
    plan = make_plan(Request(resolve("ReduceLogSumExp", 18), axes, True, False), shape)
    canon = lse_module.canonical(x, axes)
    job = lse_module.choose_job(canon, dtype, plan, small=small, contiguous=True)
    assert job.kernel is getattr(lse_module, kernel)
    base = lse_module.storage_view(x).reshape(-1)
    base.setflags(write=False)  # as the front doors pass it: no writeable variant compiled
    out = np.empty(job.outputs, lse_module.storage_dtype(dtype))
    if small:
        least = job.kernel(base, *job.args, out)
    else:
        least = job.kernel(base, base.view(lse_module._BITS.get(dtype, base.dtype)), *job.args,
                           out)
    results = np.abs(out.view(dtype).astype(np.float64))
    expected = results[~np.isnan(results)].min()
    assert np.isnan(results[1])
    assert results[2] == np.inf == results[3]
    assert least == pytest.approx(expected, rel=2.0**-8)  # the rounding to the dtype apart
    assert np.array(least).astype(dtype) == expected or dtype == bfloat16


@pytest.mark.parametrize("dtype", [*NARROW, np.dtype(np.float64)], ids=str)
def test_a_large_reduction_refines_its_one_result_near_zero(dtype):
    # One output of 4096 near zero (the logs of 0.75 and 0.25 rounded to the dtype; float32:
    # ~1e-8, where the fast kernel alone is ~250 ulps off, float64 far more): the cheap check
    # finds it among results near 4 and the exact pass recomputes it.
    x = np.random.default_rng(7).standard_normal((4096, 64)).astype(dtype)
    x[1234] = -np.inf
    x[1234, :2] = np.log([0.75, 0.25])
    got = fast_lse(x, (1,))
    picks = [0, 1234, 4095]
    assert_close(x[picks], (1,), got[picks])


def test_column_items_leave_no_thread_idle():
    # 512x512 float32 over axis 0 was one item of 512 outputs on one thread.
    import numba

    tasks = numba.config.NUMBA_NUM_THREADS
    width = lse_module._column_width((512,), 4, True)
    assert -(-512 // width) >= min(tasks, 512 * 4 // lse_module.COLUMN_MIN_BYTES)
    assert width * 4 >= lse_module.COLUMN_MIN_BYTES
    assert lse_module._column_width((512,), 4, False) == lse_module.COLUMN_BYTES // 4
    assert lse_module._column_width((64, 64), 4, True) == lse_module.COLUMN_BYTES // 4


# ----------------------------------------------------------------------------- scope


def test_unserved_cases_return_none():
    ver = resolve("ReduceLogSumExp", 18)
    x = np.arange(6, dtype=np.int32).reshape(2, 3)
    plan = make_plan(Request(ver, (1,), True, False), x.shape)
    assert lse_module.reduce_log_sum_exp(x, plan) is None
    empty = np.zeros((2, 0), np.float32)
    plan = make_plan(Request(ver, (1,), True, False), empty.shape)
    assert lse_module.reduce_log_sum_exp(empty, plan) is None
    unaligned = np.frombuffer(bytearray(4 * 15 + 1), np.float32, count=15, offset=1)
    plan = make_plan(Request(ver, (0,), True, False), unaligned.shape)
    assert lse_module.reduce_log_sum_exp(unaligned, plan) is None
    broadcast = np.broadcast_to(np.float32(1), (3, 5))
    plan = make_plan(Request(ver, (1,), True, False), broadcast.shape)
    assert lse_module.reduce_log_sum_exp(broadcast, plan) is None


def test_no_whole_input_copies():
    import tracemalloc

    x = sample((2048, 2048), np.float32, seed=16)  # 16 MiB
    views = [(x, (0,)), (x[::-1, ::-1], (0,)), (x[::-1, ::2], (1,)), (x.T, (1,)), (x, None)]
    for view, axes in views:
        fast_lse(view, axes)  # compiled and cached before measuring
        tracemalloc.start()
        try:
            got = fast_lse(view, axes)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak <= 0.05 * x.nbytes + 2 * got.nbytes, (axes, peak)


def test_import_does_not_load_numba():
    code = "import sys, onnx_reduce; assert 'numba' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_concurrent_calls_from_threads():
    arrays = [sample((300, 700), np.float32, seed=s) for s in range(4)]
    arrays += [sample((700, 300), np.float64, seed=s) for s in range(4)]
    axes = [(1,)] * 4 + [(0,)] * 4
    expected = [fast_lse(a, ax) for a, ax in zip(arrays, axes, strict=True)]

    def work(i: int) -> bool:
        got = fast_lse(arrays[i % 8], axes[i % 8])
        return np.array_equal(got, expected[i % 8])

    with ThreadPoolExecutor(max_workers=6) as pool:
        assert all(pool.map(work, range(48)))


# ----------------------------------------------------------------------------- exp


def test_exp_against_mpmath():
    rng = np.random.default_rng(11)
    points = np.concatenate([
        -rng.random(3000) * 745.0, -rng.random(2000) * 2.0, -rng.random(500) * 1e-8,
        rng.random(1000) * 600.0, rng.random(500) * 2.0,  # exp_nonpos_short: up to 600
        [0.0, -5e-324, -0.3465735902799726, -0.34657359027997264, -708.39, -709.0, -740.0,
         -745.0, -745.13, -700.0, 600.0],  # exp_nonpos_short's ends: its scale is 2**-1010, 2**866
    ])
    worst = 0.0
    worst_short = 0.0
    with mpmath.workprec(_PREC):
        for x in points:
            exact = mpmath.exp(mpmath.mpf(float(x)))
            if x >= -700.0:
                short = exp_module.exp_nonpos_short(float(x))
                worst_short = max(worst_short, float(abs(mpmath.mpf(short) - exact) / exact))
            if x > 0.0:  # exp_nonpos_short only
                continue
            got = exp_module.exp_nonpos(float(x))
            if exact >= mpmath.mpf(2) ** -1022:
                worst = max(worst, float(abs(mpmath.mpf(got) - exact) / np.spacing(float(exact))))
            else:  # subnormal result: within one subnormal ulp
                assert abs(mpmath.mpf(got) - exact) <= mpmath.mpf(2) ** -1074, x
    assert worst <= 0.7  # measured 0.64 on 180,000 points: close to correctly rounded
    assert worst_short <= 2.0**-37.5  # measured 2**-37.77 on 44,000 points of [-700, 600]
    assert exp_module.exp_nonpos(0.0) == 1.0
    assert exp_module.exp_nonpos(-746.0) == 0.0


def test_table_exp_against_mpmath():
    """exp_nonpos_table (float64 terms where gathers are quick): half an ulp and a little on
    [-708, 0], its normal range, ends and table boundaries (r = +-ln2/32) included."""
    rng = np.random.default_rng(13)
    points = np.concatenate([
        -rng.random(4000) * 708.0, -rng.random(2000) * 2.0, -rng.random(500) * 1e-8,
        -(np.arange(1, 400) + 0.5) * (math.log(2) / 16),  # the reduction's rounding ties
        [0.0, -0.0, -5e-324, -708.0, -707.99, -math.log(2) / 32, -math.log(2) / 16],
    ])
    worst = 0.0
    with mpmath.workprec(_PREC):
        for x in points:
            exact = mpmath.exp(mpmath.mpf(float(x)))
            got = exp_module.exp_nonpos_table(float(x))
            worst = max(worst, float(abs(mpmath.mpf(got) - exact) / np.spacing(float(exact))))
    assert worst <= 0.6  # measured 0.547 on 180,000 points
    assert exp_module.exp_nonpos_table(0.0) == 1.0  # a tie's term is exactly 1


def test_exp_of_a_guessed_gap_is_the_short_exp_and_bounded_outside_its_range():
    """exp_open: the bits of exp_nonpos_short on [-700, 599]; exp(-700)'s below; at least
    2**865 above (any such term puts a guessed sum over its cap, e**100), +inf for +inf."""
    rng = np.random.default_rng(12)
    inside = np.concatenate([rng.uniform(-700.0, 599.0, 20000), [-700.0, 0.0, 599.0, 599.5]])
    for x in inside:
        assert exp_module.exp_open(float(x)) == exp_module.exp_nonpos_short(float(x)), x
    below = np.concatenate([rng.uniform(-1e38, -700.0, 200), [-np.inf, -700.0000001, -745.2]])
    for x in below:
        assert exp_module.exp_open(float(x)) == exp_module.exp_nonpos_short(-700.0), x
    huge = np.concatenate([rng.uniform(599.7, 1e4, 500), 10.0 ** rng.uniform(3, 38.5, 500),
                           [599.6, 600.0, 709.8, 710.0, 1e308, np.finfo(np.float64).max]])
    for x in huge:
        assert exp_module.exp_open(float(x)) >= 2.0**865, x
    assert exp_module.exp_open(np.inf) == np.inf
    assert np.isnan(exp_module.exp_open(np.nan))


def test_exp_with_one_scale_factor_gives_the_same_bits_for_normal_results():
    """exp_nonpos_normal (float64 LogSumExp's terms) is exp_nonpos on [-708, 0]."""
    rng = np.random.default_rng(12)
    points = np.concatenate([-rng.random(20000) * 708.0, -rng.random(2000) * 1e-6,
                             [0.0, -5e-324, -708.0, -707.9999999, -708.0 + 2**-40, -700.5]])
    got = np.array([exp_module.exp_nonpos_normal(float(x)) for x in points])
    want = np.array([exp_module.exp_nonpos(float(x)) for x in points])
    assert np.array_equal(got, want)
    assert got.min() >= 2.0**-1022  # normal


def test_log1p_against_mpmath():
    # The vectorizable log1p of the finishing step: relative error on tiny arguments, across
    # the sqrt(2) boundaries of its reduction, and up to huge sums of terms.
    rng = np.random.default_rng(12)
    points = np.concatenate([
        rng.uniform(-0.29, 0.5, 3000), 10.0 ** rng.uniform(-300, 300, 3000),
        rng.uniform(0.3, 3.0, 2000), 2.0 ** -rng.integers(1, 1000, 500).astype(np.float64),
        np.nextafter(np.sqrt(2.0) * 2.0 ** np.arange(-1, 40), np.inf) - 1.0,
        [0.0, 5e-324, 1e-300, 0.41421356237309503, 0.4142135623730951, 1.0, 2.0**53, 1e300],
    ])
    worst = 0.0
    with mpmath.workprec(_PREC):
        for s in points:
            exact = mpmath.log1p(mpmath.mpf(float(s)))
            got = exp_module.log1p_from(float(s))
            if exact == 0:
                assert got == 0.0
                continue
            worst = max(worst, float(abs(mpmath.mpf(got) - exact) / np.spacing(abs(float(exact)))))
    assert worst <= 2.5  # measured 2.43 on 62,000 points (z = s / (2 + s) carries 1.5 ulp)
    assert exp_module.log1p_from(-0.0) == 0.0


@pytest.mark.parametrize("rows", [8192, 8193, 12000])
def test_small_float64_columns_on_either_side_of_the_exact_grid_sums(rows) -> None:
    """A small float64 array's columns add their terms' grid parts plainly up to GRID_TERMS
    terms an output (where they sum exactly) and with compensation beyond: within 2 ulps either
    side of the bound, rows that cancel to a result near 0 included."""
    from onnx_reduce.kernels.fast.log_sum_exp import GRID_TERMS, PARALLEL_MIN

    assert GRID_TERMS == 8192
    assert rows * 3 < PARALLEL_MIN  # the small, serial kernel
    rng = np.random.default_rng(rows)
    x = rng.standard_normal((rows, 3)) * 3.0
    x[:, 2] = -np.log(rows) + rng.standard_normal(rows) * 1e-3  # a result within ~1e-3 of 0
    assert_close(x, (0,), fast_lse(x, axes=[0]))
