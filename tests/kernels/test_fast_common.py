"""Shared pieces of the compiled kernels: the single rounding to float16, the threading layer,
one compiled variant per kernel for writeable and read-only inputs."""

from __future__ import annotations

import importlib.metadata
import inspect
import math
import os
import platform
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("numba")
from numba import njit, prange, types
from numba.core.registry import CPUDispatcher

import onnx_reduce
from onnx_reduce.kernels.fast import _common, log_sum_exp, state_rows, sum_l2
from onnx_reduce.spec.dtypes import bfloat16


@njit
def _round_all(values, fast, by_hand):
    for i in range(values.size):
        fast[i] = _common._f64_to_f16_bits(values[i])
        by_hand[i] = _common._f64_to_f16_bits_by_hand(values[i])


def _hard_cases() -> np.ndarray:
    """Every float16 value, every midpoint between neighbours, and a hair either side of each
    midpoint (where a double rounding would go wrong), plus values past the range and NaN."""
    every = np.arange(1 << 16, dtype=np.uint16).view(np.float16)
    finite = np.sort(every[np.isfinite(every)].astype(np.float64))
    mids = (finite[:-1] + finite[1:]) / 2
    hair = np.abs(mids) * 2.0**-40 + 2.0**-80
    extra = [65519.99, 65520.0, 65520.0001, 1e300, -1e300, 2.0**-25, 2.0**-26, 1e-300,
             np.inf, -np.inf, np.nan]
    return np.concatenate([finite, mids, mids - hair, mids + hair, extra])


def test_float16_rounding_is_correct_and_matches_the_bitwise_version() -> None:
    values = _hard_cases()
    fast = np.empty(values.size, np.uint16)
    by_hand = np.empty(values.size, np.uint16)
    _round_all(values, fast, by_hand)
    with np.errstate(over="ignore"):  # numpy rounds float64 -> float16 once, to nearest even
        want = values.astype(np.float16)
    nan = np.isnan(values)
    np.testing.assert_array_equal(fast[~nan], want[~nan].view(np.uint16))
    np.testing.assert_array_equal(by_hand[~nan], want[~nan].view(np.uint16))
    assert np.isnan(fast.view(np.float16)[nan]).all()


def _tbb_wheel_installed() -> bool:
    try:
        importlib.metadata.distribution("tbb")
    except importlib.metadata.PackageNotFoundError:
        return False
    return sys.platform.startswith("linux") and platform.machine() == "x86_64"


@pytest.mark.skipif(not _tbb_wheel_installed(), reason="the tbb wheel is a Linux x86-64 dependency")
def test_parallel_kernels_run_on_tbb() -> None:
    """pip's libtbb is made loadable (it is not on the loader's path), so numba's fork-safe
    choice is TBB, not the workqueue layer (~0.35 ms per launch here); in a fresh process,
    with nobody choosing a layer."""
    assert _common._load_pip_tbb()
    code = (
        "import numpy as np, numba, onnx_reduce\n"
        "x = np.ones((4096, 512), np.float32)\n"  # above PARALLEL_MIN: a parallel launch
        "assert float(onnx_reduce.reduce_sum(x).ravel()[0]) == x.size\n"
        "print(numba.threading_layer())\n"
    )
    env = {k: v for k, v in os.environ.items()
           if k not in ("NUMBA_THREADING_LAYER", "LD_LIBRARY_PATH", "LD_PRELOAD")}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, check=True)
    assert done.stdout.split()[-1] == "tbb"


def test_importing_the_kernels_leaves_numba_s_threading_layer_alone() -> None:
    """Importing every kernel module (and running a small, serial reduction) chooses no
    threading layer and loads no TBB; the first parallel launch does, as users get it."""
    code = (
        "import os, numpy as np, numba, onnx_reduce\n"
        "from numba.core import config\n"
        "from numba.np.ufunc import parallel\n"
        "from onnx_reduce.kernels.fast import derived, log_sum_exp, state_rows, sum_l2\n"
        "assert float(onnx_reduce.reduce_sum(np.ones((4, 4), np.float32)).ravel()[0]) == 16\n"
        "tbb = any('libtbb' in line for line in open('/proc/self/maps'))\n"
        "print(config.THREADING_LAYER, parallel._is_initialized, tbb)\n"
        "x = np.ones((4096, 512), np.float32)\n"  # above PARALLEL_MIN: a parallel launch
        "assert float(onnx_reduce.reduce_sum(x).ravel()[0]) == x.size\n"
        "print(config.THREADING_LAYER, parallel._is_initialized)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_THREADING_LAYER"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, check=True)
    before, after = done.stdout.splitlines()[-2:]
    assert before == "default False False"
    assert after == "forksafe True"


@njit(nogil=True)
def _total(base, out):
    out[0] = base.sum()


def test_entry_for_runs_the_read_only_variant_on_writeable_arrays() -> None:
    x = np.arange(10, dtype=np.float32)
    out = np.empty(1, np.float32)
    entry = _common.entry_for(_total, _common.frozen(np.float32), out)
    entry(x, out)
    assert out[0] == 45
    assert [sig[0].mutable for sig in _total.signatures] == [False]  # nothing compiled for x
    with pytest.raises(TypeError):
        entry(np.arange(10.0), out)  # another item size: refused, not misread


@njit(nogil=True)
def _copy_bits(base, out):
    out[:] = base


@pytest.mark.parametrize(("storage", "given"), [(np.uint16, np.float16), (np.int16, bfloat16),
                                                 (np.uint32, np.int32), (np.uint64, np.int64)])
def test_entry_for_takes_arrays_of_its_item_size_as_they_are(storage, given) -> None:
    """The bound float16/bfloat16/signed-integer paths hand their arrays to entries typed with
    the storage dtype (integers as unsigned), without numpy views: an array of another dtype
    and the same item size goes in, its bits come out unchanged, and another item size is
    refused (this fails loudly if numba starts checking the dtype)."""
    width = np.dtype(storage).itemsize
    x = np.array([0x3E00, 0xC000, 0x7C00, 0x0001], f"u{width}").view(given)
    out = np.zeros(4, given)
    entry = _common.entry_for(_copy_bits, _common.frozen(storage), np.empty(0, storage))
    entry(x, out)
    assert out.tobytes() == x.tobytes()
    with pytest.raises(TypeError):
        entry(np.zeros(4, "u1" if width == 8 else f"u{2 * width}"), out)


def _kernels_taking_the_input() -> list:
    return [value for module in (sum_l2, log_sum_exp, state_rows)
            for value in vars(module).values()
            if isinstance(value, CPUDispatcher)
            and next(iter(inspect.signature(value.py_func).parameters), None) == "base"]


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64, np.int64])
def test_every_path_hands_the_kernels_a_read_only_input(dtype) -> None:
    """numba types a read-only array apart from a writeable one: bound calls, general calls,
    views and threaded calls all take the read-only variant, so no kernel compiles twice."""
    x = (np.arange(1100 * 1000) % 7).astype(dtype).reshape(1100, 1000)
    frozen = x[:4].copy()
    frozen.flags.writeable = False
    functions = [onnx_reduce.reduce_sum, onnx_reduce.reduce_l2]
    if np.dtype(dtype).kind == "f":  # LogSum and SumSquare: the state rows' float64 sums too
        functions += [onnx_reduce.reduce_log_sum_exp, onnx_reduce.reduce_log_sum,
                      onnx_reduce.reduce_sum_square]
    arrays = [x[:4], x[:4, ::-1], frozen, x[:16, :3]]
    if dtype == np.float32:
        arrays.append(x)  # threaded (one dtype: the threaded kernels compile slowly)
    for function in functions:
        for axes in ([1], [0], None):
            for data in arrays:
                function(data, axes=axes)
                function(data, axes=axes)  # the second call is a bound one
    signatures = [(kernel.__name__, sig[0]) for kernel in _kernels_taking_the_input()
                  for sig in kernel.signatures]
    assert signatures
    assert [(name, t) for name, t in signatures if t.mutable] == []


def test_rounded_and_float64_outputs_share_the_row_and_column_kernels() -> None:
    """ReduceSum (outputs rounded to float32) and ReduceSumSquare/ReduceLogSum (float64
    outputs of the same sums, :mod:`.derived`) run one compiled variant of each row and
    column kernel, serial and threaded: the float64 results go to the ``wide`` output."""
    x = (np.arange(1100 * 1000) % 7 + 1).astype(np.float32).reshape(1100, 1000)
    functions = [onnx_reduce.reduce_sum, onnx_reduce.reduce_sum_square, onnx_reduce.reduce_log_sum]
    for function in functions:
        for data in (x[:4, ::-1], x):  # a view (one thread), and a threaded array
            for axes in ([1], [0]):
                function(data, axes=axes)
    kernels = [sum_l2._rows_serial, sum_l2._cols_serial, sum_l2._float32_rows_parallel,
               sum_l2._cols_parallel]
    for kernel in kernels:
        float32 = [sig for sig in kernel.signatures if sig[0].dtype == types.float32]
        assert len(float32) == 1, (kernel.__name__, float32)
    # and the values: sums of small integer squares, exact in float64 and in float32
    exact = (x[:4, ::-1].astype(np.float64) ** 2).sum(axis=1)
    got = onnx_reduce.reduce_sum_square(x[:4, ::-1], axes=[1], keepdims=False)
    assert np.array_equal(got, exact.astype(np.float32))


@njit(cache=False)
def _both_sums(a, b, nonneg):  # pragma: no cover - compiled
    s, e = _common.two_sum(a, b)
    t, f = _common.ordered_two_sum(a, b, nonneg)
    u, g = _common.exact_add(a, b, nonneg)
    return s, e, t, f, u, g


def test_ordered_two_sum_and_exact_add_give_two_sum_s_exact_error() -> None:
    """Fast2Sum on the operands ordered by magnitude, and this CPU's exact_add: the exact
    error of every finite sum, across 600 binades (subnormals, opposite signs, ties of
    magnitude included)."""
    rng = np.random.default_rng(5)
    a = rng.standard_normal(20_000) * np.exp2(rng.integers(-1070, 1000, 20_000).astype(float))
    b = rng.standard_normal(20_000) * np.exp2(rng.integers(-1070, 1000, 20_000).astype(float))
    b[:500] = -a[:500] * 0.75
    b[500:1000] = a[500:1000]
    near = a * (1 + rng.standard_normal(20_000) * 2.0**-40)
    for x, y in ((a, b), (b, a), (a, near), (np.abs(a), np.abs(b))):
        nonneg = bool((x >= 0).all() and (y >= 0).all())
        for v, w in zip(x.tolist(), y.tolist(), strict=True):
            s, e, t, f, u, g = _both_sums(v, w, nonneg)
            if math.isfinite(s):
                assert (s, e) == (t, f) == (u, g), (v, w)


@njit
def _marked_sum(x):
    _common.wide_vectors()
    total = 0.0
    for i in range(x.size):
        total += x[i]
    return total


@njit
def _unmarked_sum(x):
    total = 0.0
    for i in range(x.size):
        total += x[i]
    return total


def test_wide_vectors_marks_the_function_it_is_compiled_into() -> None:
    """``wide_vectors()`` gives the calling function LLVM's 512-bit preference, and only it:
    the attribute is in the compiled IR, where the unmarked twin has none."""
    x = np.arange(100.0)
    assert _marked_sum(x) == _unmarked_sum(x) == 4950.0
    marked = next(iter(_marked_sum.inspect_llvm().values()))
    unmarked = next(iter(_unmarked_sum.inspect_llvm().values()))
    assert '"prefer-vector-width"="512"' in marked
    assert "prefer-vector-width" not in unmarked


@njit(fastmath=_common.REASSOC)
def _terms_of(x, m):
    return log_sum_exp._add_terms(x, m)


def test_an_inlined_part_marks_its_caller() -> None:
    """ReduceLogSumExp's terms part, inlined into a function of its own, brings the mark with
    it: every walk built on it gets 512-bit vectors."""
    x = np.array([0.0, -1.0, -2.0])
    big, rest, ties = _terms_of(x, 0.0)
    assert ties == 0.0  # float64: the tie's exact 1 is among the grid parts
    assert abs(big + rest - (1.0 + math.exp(-1.0) + math.exp(-2.0))) < 1e-15
    assert '"prefer-vector-width"="512"' in _terms_of.inspect_llvm(_terms_of.signatures[0])
    big, rest, ties = _terms_of(x.astype(np.float32), 0.0)
    assert ties == 1.0  # narrower floats count the ties apart
    assert abs(big + rest - (math.exp(-1.0) + math.exp(-2.0))) < 1e-7


@njit
def _sum_marked_for_some(x):
    _common.wide_vectors_for(x)
    total = 0.0
    for i in range(x.size):
        total += x[i]
    return total


def test_wide_vectors_for_marks_float64_and_the_2_byte_floats_only() -> None:
    """The sums' mark: float64 and float16/bfloat16 storage compile with the 512-bit
    preference, float32 and the integers without."""
    cases = ((np.float64, True), (np.float32, False), (np.uint16, True), (np.int16, True),
             (np.int32, False), (np.uint64, False))
    for dtype, marked in cases:
        x = np.arange(64, dtype=dtype)
        assert _sum_marked_for_some(x) == 2016.0
        ir = _sum_marked_for_some.inspect_llvm(_sum_marked_for_some.signatures[-1])
        assert ('"prefer-vector-width"="512"' in ir) == marked, dtype


@njit
def _pairs_of(bits, lo, hi):
    for i in range(bits.size - 1):
        lo[i], hi[i] = _common.widen_bf16_pair(_common.pair_bits(bits, i))


def test_bfloat16_pairs_widen_each_element_exactly() -> None:
    """Every element pair, from even and odd positions, gives the two bfloat16 in order:
    normal, subnormal, zero of either sign, inf and NaN."""
    from onnx_reduce.spec.dtypes import bfloat16

    rng = np.random.default_rng(7)
    bits = rng.integers(-(1 << 15), 1 << 15, size=4099, dtype=np.int16)
    bits[:8] = np.array([0, -32768, 0x7F80, -128, 0x7FC0, 1, 0x3F80, -16512], np.int16)
    lo = np.empty(bits.size - 1)
    hi = np.empty(bits.size - 1)
    _pairs_of(bits, lo, hi)
    with np.errstate(invalid="ignore"):  # (ml_dtypes warns on NaN)
        want = bits.view(bfloat16).astype(np.float64)
    np.testing.assert_array_equal(lo, want[:-1])
    np.testing.assert_array_equal(hi, want[1:])
    assert np.signbit(lo[1])  # the cases above are there: -0.0, inf, NaN, a subnormal
    assert np.isinf(lo[2])
    assert np.isnan(lo[4])
    assert 0 < lo[5] < 1e-38


@njit
def _widened(bits, out):
    for i in range(bits.size):
        out[i] = _common.widen(bits[i])


def test_float16_widening_is_exact_for_every_value() -> None:
    """All 65,536 float16 bit patterns widen to their float64 values (NaN to NaN); -0.0 to
    +0.0, the one sign the float32 step (``half_to_float32`` plus +0.0) gives up."""
    bits = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    out = np.empty(bits.size)
    _widened(bits, out)
    want = bits.view(np.float16).astype(np.float64)
    np.testing.assert_array_equal(out, np.where(want == 0, 0.0, want))
    assert not np.signbit(out[0x8000])


@njit
def _write_at(base, i, v):
    base[i] = v


_write_float64_at = _common.only_for(types.float64, _write_at)


@njit
def _maybe_write(base, i, v):
    _write_float64_at(base, i, v)


def test_only_for_compiles_and_runs_its_kernel_for_its_dtype_alone() -> None:
    """A branch behind ``only_for`` does nothing for other dtypes, and never compiles for them:
    the kernel's dispatcher gains a float32 signature only if a float32 caller compiled it."""
    y = np.zeros(3, np.float32)
    _maybe_write(y, 1, 2.0)
    assert y.tolist() == [0.0, 0.0, 0.0]
    assert _write_at.signatures == []
    x = np.zeros(3)
    _maybe_write(x, 1, 2.0)
    assert x.tolist() == [0.0, 2.0, 0.0]
    assert [sig[0].dtype for sig in _write_at.signatures] == [types.float64]


@njit(nogil=True)
def _turns(threads, chunks, order):
    """The chunks each of ``threads`` iterations is given when they ask in ``order`` (an
    iteration's index per request; one that is told nothing is left stops asking)."""
    counters = _common.chunk_counters(threads)
    turns = np.zeros(threads, np.int64)
    done = np.zeros(threads, np.bool_)
    taken = np.full((threads, chunks + 1), -1, np.int64)
    counts = np.zeros(threads, np.int64)
    for t in order:
        if done[t]:
            continue
        c, turns[t] = _common.next_chunk(counters, t, turns[t], threads, chunks)
        if c == chunks:
            done[t] = True
        else:
            taken[t, counts[t]] = c
            counts[t] += 1
    return taken, counts


def _chunks_of(taken: np.ndarray, counts: np.ndarray, t: int) -> list[int]:
    return taken[t, :counts[t]].tolist()


def test_next_chunk_gives_each_thread_its_share_then_the_rest() -> None:
    """Taking turns, each iteration does its own share in order; an iteration that asks only
    after the other is done gets nothing (the first did its share and then the other's)."""
    taken, counts = _turns(2, 7, np.array([0, 1] * 8, np.int64))
    assert _chunks_of(taken, counts, 0) == [0, 1, 2, 6]  # its share, then what is left
    assert _chunks_of(taken, counts, 1) == [3, 4, 5]
    taken, counts = _turns(2, 7, np.array([0] * 9 + [1] * 9, np.int64))
    assert _chunks_of(taken, counts, 0) == [0, 1, 2, 3, 4, 5, 6]
    assert _chunks_of(taken, counts, 1) == []
    # the second share half done when the first thread finishes its own: they share the rest
    taken, counts = _turns(2, 8, np.array([1, 1, 0, 0, 0, 0, 0, 1, 0, 1, 0, 1], np.int64))
    assert _chunks_of(taken, counts, 0) == [0, 1, 2, 3, 6]
    assert _chunks_of(taken, counts, 1) == [4, 5, 7]


@pytest.mark.parametrize(("threads", "chunks"), [(1, 5), (2, 0), (2, 1), (3, 2), (3, 10), (4, 33)])
def test_next_chunk_hands_out_every_chunk_once(threads, chunks) -> None:
    rng = np.random.default_rng(threads * 100 + chunks)
    order = rng.integers(0, threads, 20 * (chunks + threads)).astype(np.int64)
    taken, counts = _turns(threads, chunks, order)
    every = sorted(c for t in range(threads) for c in _chunks_of(taken, counts, t))
    assert every == list(range(chunks))


@njit(parallel=True)
def _claimed(threads, chunks):
    counters = _common.chunk_counters(threads)
    hits = np.zeros(chunks, np.int64)
    for thread in prange(threads):
        c, turn = _common.next_chunk(counters, thread, 0, threads, chunks)
        while c < chunks:
            hits[c] += 1
            c, turn = _common.next_chunk(counters, thread, turn, threads, chunks)
    return hits


def test_next_chunk_in_a_parallel_loop_runs_every_chunk_once() -> None:
    with _common.parallel_section():
        threads = _common.num_threads()
        for chunks in (0, 1, threads, 16 * threads, 1001):
            assert _claimed(threads, chunks).tolist() == [1] * chunks
