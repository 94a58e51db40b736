"""The packed geometries: what the accessors read back describes the array's own reduction, in
Python and in compiled code alike."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from onnx_reduce.plan import canonical_layout, geometry
from onnx_reduce.plan.geometry import c_packed, packed

kept_dims, reduced_dims = geometry.kept_dims, geometry.reduced_dims
merged_dims, memory_order_geometry = geometry.merged_dims, geometry.memory_order_geometry


@st.composite
def shapes_and_axes(draw):
    shape = tuple(draw(st.lists(st.integers(1, 5), min_size=1, max_size=5)))
    axes = tuple(sorted(draw(st.sets(st.integers(0, len(shape) - 1)))))
    return shape, axes


def sum_by_canonical_geometry(x: np.ndarray, geo: np.ndarray) -> np.ndarray:
    """Sum a C-contiguous ``x`` through the canonical geometry alone (flat element offsets)."""
    flat = x.ravel()
    ksz, kst = (d.tolist() for d in kept_dims(geo))
    rsz, rst = (d.tolist() for d in reduced_dims(geo))
    out = []
    for kept in itertools.product(*map(range, ksz)):
        base = sum(i * s for i, s in zip(kept, kst, strict=True))
        out.append(sum(flat[base + sum(i * s for i, s in zip(red, rst, strict=True))]
                       for red in itertools.product(*map(range, rsz))))
    return np.array(out)


@given(shapes_and_axes())
def test_c_packed_describes_the_reduction(case) -> None:
    shape, axes = case
    x = np.arange(math.prod(shape), dtype=np.int64).reshape(shape)
    geo, inner = c_packed(shape, axes)
    assert not geo.flags.writeable
    expected = x.sum(axis=axes).ravel() if axes else x.ravel()
    assert sum_by_canonical_geometry(x, geo).tolist() == expected.tolist()
    rsz, rst = reduced_dims(geo)
    assert inner == (rst[-1] == 1 and rsz[-1] > 1) or rsz.tolist() == [1]


@given(shapes_and_axes())
def test_c_packed_is_the_canonical_layout_of_a_c_array(case) -> None:
    shape, axes = case
    canon = canonical_layout(np.zeros(shape, np.float32), axes)
    geo, inner = c_packed(shape, axes)
    assert geo.tolist() == packed(canon.kept_sizes, canon.kept_strides, canon.red_sizes,
                                  canon.red_strides).tolist()
    assert inner == canon.inner_reduced


@given(shapes_and_axes())
def test_memory_order_geometry_merges_in_c_order(case) -> None:
    shape, axes = case
    sizes, reduced, ost = (d.tolist() for d in merged_dims(memory_order_geometry(shape, axes)))
    assert math.prod(sizes) == math.prod(shape)
    assert all(a != b for a, b in itertools.pairwise(reduced))  # neighbours differ: merged
    kept = [n for n, r in zip(sizes, reduced, strict=True) if not r]
    assert [s for s, r in zip(ost, reduced, strict=True) if not r] == [math.prod(kept[i + 1:])
                                                          for i in range(len(kept))]
    assert all(s == 0 for s, r in zip(ost, reduced, strict=True) if r)


def test_packed_geometries_are_shared_per_layout() -> None:
    assert packed((4,), (6,), (6,), (1,)) is packed((4,), (6,), (6,), (1,))
    assert c_packed((4, 6), (1,)) is c_packed((4, 6), (1,))
    assert memory_order_geometry((8, 8, 16), (0, 2)) is memory_order_geometry((8, 8, 16), (0, 2))


def test_the_accessors_compile_to_the_same_views() -> None:
    """Compiled code reads a geometry through the same functions (inlined slices)."""
    numba = pytest.importorskip("numba")
    from onnx_reduce.kernels.fast import _common  # registers the accessors

    @numba.njit
    def parts(geo, small):
        ksz, kst = _common.kept_dims(geo)
        rsz, rst = _common.reduced_dims(geo)
        sizes, red, ost = _common.merged_dims(small)
        return ksz.sum(), kst.sum(), rsz.sum(), rst.sum(), sizes.sum(), red.sum(), ost.sum()

    geo, _ = c_packed((3, 4, 5, 6), (1, 3))
    small = memory_order_geometry((3, 4, 5, 6), (1, 3))
    by_python = tuple(int(d.sum()) for d in kept_dims(geo) + reduced_dims(geo)
                      + merged_dims(small))
    assert parts(geo, small) == by_python == (8, 126, 10, 31, 18, 2, 6)
