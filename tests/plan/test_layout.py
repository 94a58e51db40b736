"""The canonical layout: unit dims dropped, adjacent compatible dims merged, no data moved."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from numpy.lib.stride_tricks import as_strided

from onnx_reduce.plan import Layout, canonical_layout, collapse


def reduce_through_layout(data: np.ndarray, layout: Layout) -> np.ndarray:
    """Sum ``data`` using only the layout (sizes and byte strides from the first element)."""
    view = as_strided(data, shape=layout.sizes, strides=layout.strides, writeable=False)
    reduced = tuple(i for i, r in enumerate(layout.reduced) if r)
    return np.sum(view, axis=reduced).ravel()


def check_layout(data: np.ndarray, axes: tuple[int, ...]) -> Layout:
    layout = collapse(data, axes)
    assert len(layout.sizes) == len(layout.strides) == len(layout.reduced)
    assert 1 not in layout.sizes
    for i in range(len(layout.sizes) - 1):
        mergeable = (layout.reduced[i] == layout.reduced[i + 1]
                     and layout.strides[i] == layout.strides[i + 1] * layout.sizes[i + 1])
        assert not mergeable, layout
    assert math.prod(layout.sizes) == data.size
    reduced_size = math.prod(s for s, r in zip(layout.sizes, layout.reduced, strict=True) if r)
    assert reduced_size == math.prod(data.shape[a] for a in axes)
    expected = np.sum(data, axis=axes).ravel()
    np.testing.assert_array_equal(reduce_through_layout(data, layout), expected)
    return layout


C = np.arange(4 * 5 * 6 * 7, dtype=np.int64).reshape(4, 5, 6, 7)


@pytest.mark.parametrize(
    ("axes", "sizes", "strides", "reduced", "kind"),
    [
        ((), (840,), (8,), (False,), "none"),
        ((0, 1, 2, 3), (840,), (8,), (True,), "all"),
        ((2, 3), (20, 42), (336, 8), (False, True), "inner"),
        ((3,), (120, 7), (56, 8), (False, True), "inner"),
        ((0, 1), (20, 42), (336, 8), (True, False), "outer"),
        ((1, 2), (4, 30, 7), (1680, 56, 8), (False, True, False), "middle"),
        ((0, 2), (4, 5, 6, 7), (1680, 336, 56, 8), (True, False, True, False), "general"),
        ((1, 3), (4, 5, 6, 7), (1680, 336, 56, 8), (False, True, False, True), "general"),
    ],
)
def test_contiguous(axes, sizes, strides, reduced, kind) -> None:
    layout = check_layout(C, axes)
    assert layout == Layout(sizes, strides, reduced)
    assert layout.kind == kind


def test_unit_dims_are_dropped_and_their_neighbours_merge() -> None:
    x = np.arange(5 * 6, dtype=np.int64).reshape(5, 1, 6, 1)
    assert check_layout(x, (0, 2)) == Layout((30,), (8,), (True,))
    assert check_layout(x, (0, 1, 2, 3)).kind == "all"
    # A reduced unit dim between two kept dims changes nothing: the kept dims merge.
    assert check_layout(x, (1,)) == Layout((30,), (8,), (False,))
    assert check_layout(x, (1,)).kind == "none"
    assert check_layout(x, (1, 2)) == Layout((5, 6), (48, 8), (False, True))


def test_only_unit_dims() -> None:
    x = np.ones((1, 1, 1))
    layout = check_layout(x, (0, 2))
    assert layout == Layout((), (), ())
    assert layout.kind == "none"


def test_rank_zero() -> None:
    layout = check_layout(np.array(3.0), ())
    assert layout == Layout((), (), ())
    assert layout.kind == "none"


def test_negative_strides() -> None:
    x = np.arange(20, dtype=np.int64).reshape(4, 5)
    assert check_layout(x[::-1, ::-1], (0, 1)) == Layout((20,), (-8,), (True,))
    assert check_layout(x[::-1], (1,)) == Layout((4, 5), (-40, 8), (False, True))
    # Mixed signs: the two dims do not merge, although both are reduced.
    mixed = check_layout(x[:, ::-1], (0, 1))
    assert mixed == Layout((4, 5), (40, -8), (True, True))
    assert mixed.kind == "general"
    assert check_layout(x[::-1], (0,)).kind == "outer"


def test_transposed_views() -> None:
    x = np.arange(4 * 5 * 6, dtype=np.int64).reshape(4, 5, 6)
    t = x.transpose(2, 0, 1)  # shape (6, 4, 5), strides (8, 240, 48)
    assert check_layout(t, (0,)) == Layout((6, 20), (8, 48), (True, False))
    assert check_layout(t, (1, 2)) == Layout((6, 20), (8, 48), (False, True))
    # Fortran order is not merged across dims: collapse merges in C order only.
    f = np.asfortranarray(x)
    assert check_layout(f, (0, 1)) == Layout((4, 5, 6), (8, 32, 160), (True, True, False))
    assert check_layout(f, (0, 1)).kind == "general"
    assert check_layout(x.T, (0, 1, 2)).kind == "general"


def test_strided_slices() -> None:
    x = np.arange(6 * 8, dtype=np.int64).reshape(6, 8)
    assert check_layout(x[:, ::2], (1,)) == Layout((6, 4), (64, 16), (False, True))
    assert check_layout(x[::2, :], (0, 1)) == Layout((3, 8), (128, 8), (True, True))
    assert check_layout(x[:, :4], (0, 1)) == Layout((6, 4), (64, 8), (True, True))


def test_broadcast_zero_strides() -> None:
    x = np.broadcast_to(np.arange(5, dtype=np.int64), (4, 5))
    assert check_layout(x, (0,)) == Layout((4, 5), (0, 8), (True, False))
    assert check_layout(x, (1,)).kind == "inner"


def test_empty_dims_are_kept() -> None:
    x = np.zeros((3, 0, 2))
    layout = collapse(x, (1,))
    assert 0 in layout.sizes
    assert math.prod(layout.sizes) == 0


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64])
def test_random_views(dtype) -> None:
    rng = np.random.default_rng(20261121)
    for _ in range(300):
        rank = int(rng.integers(0, 5))
        shape = tuple(int(s) for s in rng.integers(1, 4, size=rank))
        base = rng.integers(-50, 50, size=tuple(2 * s for s in shape)).astype(dtype)
        index = tuple(slice(None, None, int(rng.choice([-2, -1, 1, 2]))) for _ in shape)
        view = base[index][tuple(slice(0, s) for s in shape)]
        view = view.transpose(rng.permutation(rank)) if rank else view
        if rng.random() < 0.3:
            view = np.ascontiguousarray(view)
        nred = int(rng.integers(0, rank + 1))
        axes = tuple(sorted(int(a) for a in rng.choice(rank, size=nred, replace=False)))
        check_layout(view, axes)


def test_kinds_cover_every_pattern() -> None:
    kinds = {}
    for pattern in itertools.product((False, True), repeat=3):
        for n in range(1, 4):
            kinds[pattern[:n]] = Layout((2,) * n, (8,) * n, pattern[:n]).kind
    assert kinds[(False,)] == "none"
    assert kinds[(False, False)] == "none"
    assert kinds[(True,)] == "all"
    assert kinds[(False, True)] == "inner"
    assert kinds[(True, False)] == "outer"
    assert kinds[(False, True, False)] == "middle"
    assert kinds[(True, False, True)] == "general"
    assert kinds[(True, True)] == "general"
    assert Layout((), (), ()).kind == "none"


# ------------------------------------------------------------------------------------------
# canonical_layout: what the compiled kernels walk


def reduce_through_canonical(data: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    """Sum ``data`` over ``axes`` reading only ``canonical_layout``'s flat base and dims, then
    put the sums back in the input's kept order with ``restore``."""
    canon = canonical_layout(data, axes)
    assert canon is not None
    assert all(s >= 0 for s in canon.kept_strides + canon.red_strides)
    assert list(canon.kept_strides) == sorted(canon.kept_strides, reverse=True)
    assert list(canon.red_strides) == sorted(canon.red_strides, reverse=True)
    assert not canon.base.flags.writeable
    assert np.shares_memory(canon.base, data)  # a view: nothing copied
    sums = []
    for k in itertools.product(*(range(n) for n in canon.kept_sizes)):
        start = canon.offset + sum(i * s for i, s in zip(k, canon.kept_strides, strict=True))
        total = 0
        for r in itertools.product(*(range(n) for n in canon.red_sizes)):
            total += int(canon.base[start + sum(i * s for i, s in
                                                zip(r, canon.red_strides, strict=True))])
        sums.append(total)
    kept_shape = tuple(n for i, n in enumerate(data.shape) if i not in axes)
    return canon.restore(np.array(sums, np.int64), kept_shape)


VIEWS = {
    "C": lambda a: a,
    "transposed": lambda a: a.transpose(2, 0, 1),
    "reversed": lambda a: a[::-1, :, ::-1],
    "strided": lambda a: a[:, ::2, 1:],
    "mixed": lambda a: a[::-1, :, ::2].transpose(1, 2, 0),
    "unit dims": lambda a: a[:, :1, :],
}


@pytest.mark.parametrize("view", list(VIEWS), ids=list(VIEWS))
@pytest.mark.parametrize("axes", [(0,), (1,), (2,), (0, 2), (0, 1), (1, 2), (0, 1, 2)], ids=str)
def test_canonical_layout_reads_every_element_once(view: str, axes: tuple[int, ...]) -> None:
    data = VIEWS[view](np.arange(4 * 6 * 5, dtype=np.int64).reshape(4, 6, 5) * 7 - 300)
    got = reduce_through_canonical(data, axes)
    np.testing.assert_array_equal(got, np.sum(data, axis=axes))


def test_canonical_layout_merges_and_orders() -> None:
    # shape (5, 3, 4), element strides (1, -20, 5): the reduced dim flipped, kept dims reordered
    c = canonical_layout(np.zeros((3, 4, 5), np.float32)[::-1].transpose(2, 0, 1), (1,))
    assert (c.kept_sizes, c.kept_strides) == ((4, 5), (5, 1))
    assert (c.red_sizes, c.red_strides) == ((3,), (20,))
    assert (c.kept_perm, c.flipped, c.inner_reduced) == ((1, 0), (), False)
    c = canonical_layout(np.zeros((3, 4, 5), np.float32), (1, 2))
    assert (c.kept_sizes, c.kept_strides, c.red_sizes, c.red_strides) == ((3,), (20,), (20,), (1,))
    assert c.inner_reduced
    nothing = canonical_layout(np.zeros((3, 4), np.float32), ())
    assert (nothing.red_sizes, nothing.red_strides) == ((1,), (0,))


def test_canonical_layout_refuses_what_it_cannot_describe() -> None:
    assert canonical_layout(np.zeros((0, 3), np.float32), (0,)) is None
    raw = np.zeros(4 * 3 + 1, np.uint8)
    odd = as_strided(raw[1:], shape=(3, 2), strides=(5, 1)).view(np.uint8)
    assert canonical_layout(odd.view(np.int8), (0,)) is not None  # 1-byte items: fine
    wide = as_strided(np.zeros(16, np.float32), shape=(3,), strides=(6,))
    assert canonical_layout(wide, (0,)) is None  # stride not a multiple of the item size


def test_same_layout_other_data_gets_its_own_base() -> None:
    """The layout is worked out once per (shape, strides, axes, item size); each call's base
    views its own array (flipped, strided and contiguous alike)."""
    a = np.arange(60, dtype=np.float32).reshape(3, 4, 5)
    b = -a
    for view_of in (lambda x: x, lambda x: x[::-1, :, ::2], lambda x: x.transpose(2, 0, 1)):
        first, second = canonical_layout(view_of(a), (1,)), canonical_layout(view_of(b), (1,))
        assert np.shares_memory(first.base, a)
        assert np.shares_memory(second.base, b)
        np.testing.assert_array_equal(second.base, -first.base)
        assert first.kept_sizes == second.kept_sizes
        assert first.red_strides == second.red_strides
