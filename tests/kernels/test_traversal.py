"""The traversal layer: walks written once, specialised per accumulator, cached on disk."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

pytest.importorskip("numba")
from hypothesis import given, settings
from hypothesis import strategies as st
from numba import njit

from onnx_reduce.kernels.fast import traversal
from onnx_reduce.plan.layout import canonical_layout


@njit(cache=True, inline="always")
def _sum_part(seg, m):
    total = 0.0
    for i in range(seg.size):
        total += seg[i] - m
    return total


@njit(cache=True, inline="always")
def _negative(part):
    return part < 0.0


_SUMS = traversal.row_walks("test_sums", part=_sum_part, empty=traversal.zero,
                            join=traversal.add, start=traversal.zero, fold=traversal.add)
_SUMS_AHEAD = traversal.row_walks("test_sums_ahead", part=_sum_part, empty=traversal.zero,
                                  join=traversal.add, start=traversal.zero,
                                  fold=traversal.add, prefetch_ahead=True)
_UNTIL_NEGATIVE = traversal.row_walks("test_until_negative", part=_sum_part,
                                      empty=traversal.zero, join=traversal.add,
                                      start=traversal.zero, fold=traversal.add,
                                      failed=_negative)


@njit(cache=True)
def _sum_slice(seg, acc):
    for j in range(seg.size):
        acc[j] += seg[j]


@njit(cache=True)
def _sum_slices4(s0, s1, s2, s3, acc):
    for j in range(acc.size):
        acc[j] += (s0[j] + s1[j]) + (s2[j] + s3[j])


_COLUMN_SUMS = traversal.column_walk("test_sums", _sum_slice, _sum_slices4)
_COLUMN_SUMS_IN_FOURS = traversal.column_walk("test_sums_in_fours", _sum_slice, _sum_slices4,
                                              one_slice=False)


def _ints(values) -> np.ndarray:
    return np.array(values, np.int64)


def _offsets(sizes, strides) -> np.ndarray:
    """Element offsets of every index over ``sizes`` (C order)."""
    axes = [np.arange(n) * s for n, s in zip(sizes, strides, strict=True)]
    grids = np.meshgrid(*axes, indexing="ij")
    return sum(grids, np.zeros((), np.int64)).ravel() if grids else np.zeros(1, np.int64)


@settings(max_examples=80, deadline=None)
@given(shape=st.lists(st.integers(1, 9), min_size=1, max_size=4), data=st.data(),
       block=st.sampled_from([1, 3, 8, 1024]), view=st.sampled_from(["c", "t", "step"]))
def test_row_walk_adds_every_reduced_element_of_each_output_once(shape, data, block,
                                                                  view) -> None:
    """Runs grouped or not, cut in blocks or not, contiguous or strided: the walk's sum over
    an output's reduced elements (of the canonical layout) equals numpy's, whole and as two
    halves."""
    x = np.arange(np.prod(shape) * 2, dtype=np.float64).reshape(*shape[:-1], -1) % 7 + 1.0
    x = {"c": x[..., :shape[-1]], "t": x[..., :shape[-1]].T, "step": x[..., ::2]}[view]
    axes = tuple(sorted(data.draw(st.sets(st.integers(0, x.ndim - 1), min_size=1))))
    canon = canonical_layout(x, axes)
    if not canon.inner_reduced:
        return
    rs, rst = _ints(canon.red_sizes[:-1]), _ints(canon.red_strides[:-1])
    n = canon.red_sizes[-1]
    step = canon.red_strides[-1] if n > 1 else 1  # as the kernels take it
    total = n * int(np.prod(rs))
    base = canon.base
    reduced = _offsets(canon.red_sizes, canon.red_strides)
    for kept in canon.offset + _offsets(canon.kept_sizes, canon.kept_strides):
        expected = base[kept + reduced].sum()
        for walks in (_SUMS, _SUMS_AHEAD):
            whole, done = walks.walk(base, base, kept, rs, rst, n, step, 0, total, 0.0, block)
            half = total // 2
            first, _ = walks.walk(base, base, kept, rs, rst, n, step, 0, half, 0.0, block)
            second, _ = walks.walk(base, base, kept, rs, rst, n, step, half, total, 0.0, block)
            assert done
            assert whole == expected
            assert first + second == expected


@pytest.mark.parametrize(("start", "count", "far", "stop"),
                         [(0, 1, 0, 5000), (3, 700, 0, 5000), (100, 2 * traversal.STEP, 0, 700),
                          (10, 1024, 4000, 5000), (0, 5000, 0, 5000)])
def test_contiguous_ahead_adds_its_elements_and_asks_for_each_line_once(start, count, far,
                                                                       stop) -> None:
    """The part of the elements, its steps joined in order, and how far the prefetches
    reached: AHEAD elements past the last step, never past ``stop`` nor back."""
    x = np.arange(5000, dtype=np.float64) % 13 - 6.0
    part, reached = _SUMS_AHEAD.contiguous_ahead(x, x, start, count, 0.5, far, stop)
    expected = 0.0
    for a in range(start, start + count, traversal.STEP):
        expected += (x[a:min(a + traversal.STEP, start + count)] - 0.5).sum()
    assert part == expected
    assert reached == max(far, min(stop, start + count + traversal.AHEAD))


def test_a_failed_part_ends_the_walk() -> None:
    x = np.ones(64)
    one = np.array([], np.int64)
    state, done = _UNTIL_NEGATIVE.walk(x, x, 0, one, one, 64, 1, 0, 64, 0.5, 8)
    assert (state, done) == (32.0, True)
    state, done = _UNTIL_NEGATIVE.walk(x, x, 0, one, one, 64, 1, 0, 64, 2.0, 8)
    assert not done
    assert state == 0.0


@pytest.mark.parametrize(("shape", "axes"), [((9, 5, 6), (0,)), ((9, 5, 6), (0, 1)),
                                             ((4, 10, 3), (1,)), ((7, 8), (0,)),
                                             ((5, 6, 7), (0, 1)), ((6, 9, 4), (1,)),
                                             ((200, 4), (0,)), ((6, 300), (0,))])
@pytest.mark.parametrize("view", ["c", "step"])
@pytest.mark.parametrize("walk", [_COLUMN_SUMS, _COLUMN_SUMS_IN_FOURS], ids=["one", "fours"])
def test_column_walk_adds_every_reduced_row_into_its_outputs(shape, axes, view, walk) -> None:
    """Short slices one at a time (prefetching slices ahead) or in four-row groups, long ones
    four rows at a time or one, contiguous or strided outputs: each output's sum over any range
    of its reduced rows equals numpy's."""
    x = np.arange(np.prod(shape) * 2, dtype=np.float64).reshape(*shape[:-1], -1) % 11
    x = x[..., :shape[-1]] if view == "c" else x[..., ::2]
    canon = canonical_layout(x, axes)
    assert not canon.inner_reduced
    rs, rst = _ints(canon.red_sizes), _ints(canon.red_strides)
    ks, kst = _ints(canon.kept_sizes[:-1]), _ints(canon.kept_strides[:-1])
    width = canon.kept_sizes[-1]
    step = canon.kept_strides[-1] if width > 1 else 1
    rows = int(np.prod(rs))
    for k in range(x.size // rows // width):
        off = canon.offset + traversal.flat_offset(k, ks, kst, ks.size)
        for a, b in ((0, rows), (1, rows - 1), (0, 1), (rows // 2, rows)):
            acc = np.zeros(width)
            walk(canon.base, canon.base, off, width, step, rs, rst, a, b, (acc,))
            moved = np.moveaxis(x, axes, range(len(axes)))
            part = moved.reshape(rows, -1)[a:b].sum(0).reshape(-1, width)[k]
            np.testing.assert_array_equal(acc, part)


def test_each_accumulator_gets_its_own_name_and_an_edited_part_a_new_one() -> None:
    names = {_SUMS.walk.py_func.__qualname__, _UNTIL_NEGATIVE.walk.py_func.__qualname__}
    assert len(names) == 2
    assert all(name.startswith("_walk_test_") for name in names)

    def part_a(seg, m):
        return 0.0

    def part_b(seg, m):
        return 1.0

    a = traversal.specialise(traversal._contiguous, "same", {}, acc_part=njit(part_a))
    b = traversal.specialise(traversal._contiguous, "same", {}, acc_part=njit(part_b))
    assert a.py_func.__qualname__ != b.py_func.__qualname__
    assert a(np.ones(3), 0, 3, 0.0) == 0.0
    assert b(np.ones(3), 0, 3, 0.0) == 1.0


def test_specialised_walks_load_from_the_disk_cache_in_a_new_process(tmp_path) -> None:
    """Specialised by their parts (not by a dispatcher argument, which misses the cache in
    every new process), the walks are compiled once and loaded after."""
    (tmp_path / "accumulate.py").write_text(textwrap.dedent("""
        import numpy as np
        from numba import njit
        from onnx_reduce.kernels.fast.traversal import add, row_walks, zero

        @njit(cache=True, inline="always")
        def part(seg, m):
            return seg.sum()

        walks = row_walks("cached", part=part, empty=zero, join=add, start=zero, fold=add)
        x = np.ones(100)
        none = np.array([], np.int64)
        assert walks.walk(x, x, 0, none, none, 100, 1, 0, 100, 0.0, 16) == (100.0, True)
        stats = walks.walk.stats
        print(sum(stats.cache_hits.values()), sum(stats.cache_misses.values()))
    """))
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"))
    runs = [subprocess.run([sys.executable, "accumulate.py"], env=env, cwd=tmp_path,
                           capture_output=True, text=True, check=True, timeout=600)
            for _ in range(2)]
    assert runs[0].stdout.split() == ["0", "1"]
    assert runs[1].stdout.split() == ["1", "0"]
