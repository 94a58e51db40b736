"""The pipeline's one bounded cache (onnx_reduce.plan.cache) and the caches built on it."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import onnx_reduce
from onnx_reduce import functions
from onnx_reduce.plan import geometry
from onnx_reduce.plan.cache import BoundedCache


def test_the_oldest_entry_makes_room() -> None:
    cache = BoundedCache(3)
    for key in "abcd":
        cache.put(key, key.upper())
    assert len(cache) == 3
    assert cache.get("a") is None
    assert [cache.get(k) for k in "bcd"] == ["B", "C", "D"]
    cache.put("b", "again")  # a key already there: replaced, nothing evicted
    assert cache.values() == ["again", "C", "D"]


def test_sizes_below_one_are_refused() -> None:
    with pytest.raises(ValueError, match="at least one entry"):
        BoundedCache(0)


def test_threads_putting_at_once_keep_the_bound() -> None:
    cache = BoundedCache(64)

    def fill(offset: int) -> None:
        for i in range(5000):
            cache.put((offset, i), i)
            cache.get((offset, i - 1))

    threads = [threading.Thread(target=fill, args=(k,)) for k in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(cache) == 64


def test_many_shapes_keep_the_prepared_calls_and_layouts_bounded(monkeypatch) -> None:
    """A process meeting more shapes than the caches hold: they stay at their size, and the
    results stay right for old and new shapes alike."""
    monkeypatch.setattr(functions, "_PREPARED", BoundedCache(8))
    monkeypatch.setattr(geometry, "_MEMORY_ORDER", BoundedCache(8))
    monkeypatch.setattr(geometry, "_PACKED", BoundedCache(8))
    monkeypatch.setattr(geometry, "_C_PACKED", BoundedCache(8))
    for n in range(1, 40):
        x = np.arange(n * 3, dtype=np.float32).reshape(3, n)
        np.testing.assert_array_equal(onnx_reduce.reduce_sum(x, axes=[1], keepdims=False),
                                      x.sum(axis=1))
    assert len(functions._PREPARED) == 8
    assert len(geometry._MEMORY_ORDER) <= 8
    assert len(geometry._PACKED) <= 8
    assert len(geometry._C_PACKED) <= 8
    x = np.ones((3, 2), np.float32)
    np.testing.assert_array_equal(onnx_reduce.reduce_sum(x, axes=[1], keepdims=False), [2, 2, 2])


def test_axes_arrays_are_prepared_calls_keyed_by_their_values(monkeypatch) -> None:
    """Integer ndarray axes (an ONNX axes input) hit the prepared calls as lists do, keyed by
    dtype, shape and values: an array changed in place gives its new axes, and arrays that
    validation refuses still raise."""
    monkeypatch.setattr(functions, "_PREPARED", BoundedCache(64))
    x = np.arange(24, dtype=np.float64).reshape(2, 3, 4)
    axes = np.array([1])
    for _ in range(2):
        np.testing.assert_array_equal(onnx_reduce.reduce_sum(x, axes), x.sum(1, keepdims=True))
    assert len(functions._PREPARED) == 1
    axes[0] = 2  # the same array, new values: a new entry
    np.testing.assert_array_equal(onnx_reduce.reduce_sum(x, axes), x.sum(2, keepdims=True))
    np.testing.assert_array_equal(onnx_reduce.reduce_sum(x, np.array([2], np.int32)),
                                  x.sum(2, keepdims=True))
    np.testing.assert_array_equal(onnx_reduce.reduce_sum(x, np.array([0, -1])),
                                  x.sum((0, 2), keepdims=True))
    assert len(functions._PREPARED) == 4
    for bad in (np.array([3]), np.array([1, 1]), np.array([[0, 2]]), np.array([1.0]),
                np.array([True])):
        with pytest.raises((ValueError, TypeError)):
            onnx_reduce.reduce_sum(x, bad)
    assert len(functions._PREPARED) == 4


def test_numpy_integer_axes_are_prepared_calls_keyed_with_their_type(monkeypatch) -> None:
    """Axes lists of numpy integers (as numpy code computes them) hit the prepared calls,
    one entry per (type, value); numpy floats and bools still raise and are never kept."""
    monkeypatch.setattr(functions, "_PREPARED", BoundedCache(64))
    x = np.arange(24, dtype=np.float64).reshape(2, 3, 4)
    for axes in ([np.int64(1)], [np.int64(1)], (np.int32(-1),), [1, np.uint8(0)]):
        want = x.sum(tuple(int(a) for a in axes), keepdims=True)
        np.testing.assert_array_equal(onnx_reduce.reduce_sum(x, axes), want)
    assert len(functions._PREPARED) == 3
    for bad in ([np.float64(1)], [np.bool_(True)], [np.int64(3)], [np.int64(1), 1]):
        with pytest.raises((ValueError, TypeError)):
            onnx_reduce.reduce_sum(x, bad)
    assert len(functions._PREPARED) == 3
