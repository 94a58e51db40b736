"""The numpy-style front door: ``reduce_sum``, ``reduce_l2``, ``reduce_log_sum_exp``.

Expected values are exact: data are small dyadic numbers, so sums and sums of squares are exact
in float64 and their correct rounding is unique; LSE values come from ``mpmath``.
"""

from __future__ import annotations

import math
from fractions import Fraction

import mpmath
import numpy as np
import pytest

from onnx_reduce import reduce_l2, reduce_log_sum_exp, reduce_sum
from onnx_reduce.spec import bfloat16

FUNCTIONS = [reduce_sum, reduce_l2, reduce_log_sum_exp]
FLOATS = [np.float16, bfloat16, np.float32, np.float64]
INTEGERS = [np.int32, np.int64, np.uint32, np.uint64]


def _ids(f) -> str:
    return getattr(f, "__name__", str(f))


def dyadic(rng: np.random.Generator, shape, dtype) -> np.ndarray:
    """Values k/4 with |k| <= 64: exact in every float type, their sums exact in float64."""
    values = rng.integers(-64, 65, size=shape) / 4
    if np.dtype(dtype).kind in "iu":
        values = np.abs(np.round(values * 4)) if np.dtype(dtype).kind == "u" else np.round(values)
    return values.astype(dtype)


def exact_sum(x: np.ndarray, axis, keepdims: bool) -> np.ndarray:
    return np.sum(x.astype(np.float64), axis=axis, keepdims=keepdims)


# --- return type and dtype -------------------------------------------------------------------


@pytest.mark.parametrize("func", FUNCTIONS, ids=_ids)
@pytest.mark.parametrize("dtype", FLOATS + INTEGERS, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("keepdims", [True, False])
def test_returns_an_ndarray_of_the_input_dtype(func, dtype, keepdims) -> None:
    opset = 18 if func is reduce_log_sum_exp and np.dtype(dtype).kind in "iu" else None
    x = np.arange(6).reshape(2, 3).astype(dtype)
    for axes in (None, [0], [1], [0, 1]):
        out = func(x, axes, keepdims=keepdims, opset=opset)
        assert type(out) is np.ndarray
        assert out.dtype == np.dtype(dtype)
        expected = np.sum(np.zeros((2, 3)), axis=None if axes is None else tuple(axes),
                          keepdims=keepdims).shape
        assert out.shape == expected


@pytest.mark.parametrize("func", FUNCTIONS, ids=_ids)
@pytest.mark.parametrize("data", [np.float32(2.5), np.array(2.5, np.float32), 2.5])
def test_rank_zero_gives_a_zero_d_array_not_a_scalar(func, data) -> None:
    out = func(data)
    assert type(out) is np.ndarray
    assert out.shape == ()
    assert out.dtype == np.asarray(data).dtype
    assert float(out) == 2.5  # one value: sum, |x| and log(exp(x)) are all x
    out = func(data, keepdims=False)
    assert type(out) is np.ndarray
    assert out.shape == ()


@pytest.mark.parametrize("func", FUNCTIONS, ids=_ids)
def test_reducing_everything_without_keepdims_is_a_zero_d_array(func) -> None:
    out = func(np.ones((3, 4), np.float32), keepdims=False)
    assert type(out) is np.ndarray
    assert out.shape == ()


def test_exact_values() -> None:
    x = np.array([[3.0, 4.0], [5.0, 12.0]], np.float32)
    np.testing.assert_array_equal(reduce_sum(x, [1]), np.array([[7.0], [17.0]], np.float32))
    np.testing.assert_array_equal(reduce_l2(x, [1], keepdims=False), np.array([5, 13], np.float32))
    lse = reduce_log_sum_exp(np.array([0.0, math.log(3.0)]), keepdims=False)
    assert float(lse) == pytest.approx(math.log(4.0), rel=2**-52)
    assert reduce_sum(np.array([2**31 - 1, 1], np.int32)).tolist() == [-(2**31)]
    assert reduce_l2(np.array([1, 1], np.int64)).tolist() == [1]  # floor(sqrt(2))


# --- axes ------------------------------------------------------------------------------------

AXES_FORMS = [
    [0, 2], (0, 2), (2, 0), [-1, 0], np.array([0, 2]), np.array([0, 2], np.int8),
    np.array([2, 0], np.int16), np.array([0, 2], np.int32), np.array([0, 2], np.uint8),
    np.array([0, 2], np.uint64), np.array([-3, -1], np.int64), [np.int64(0), np.int32(2)],
    range(0, 3, 2),
]


@pytest.mark.parametrize("func", FUNCTIONS, ids=_ids)
@pytest.mark.parametrize("axes", AXES_FORMS, ids=repr)
def test_axes_forms(func, axes) -> None:
    x = np.arange(24, dtype=np.float64).reshape(2, 3, 4)
    expected = func(x, [0, 2])
    assert expected.shape == (1, 3, 1)
    np.testing.assert_array_equal(func(x, axes), expected)
    if func is reduce_sum:
        np.testing.assert_array_equal(expected, exact_sum(x, (0, 2), True))


@pytest.mark.parametrize("func", FUNCTIONS, ids=_ids)
@pytest.mark.parametrize("axes", [1, np.int64(1), "1", 1.0], ids=repr)
def test_axes_must_be_a_sequence_or_an_array(func, axes) -> None:
    x = np.ones((2, 3), np.float32)
    label = {reduce_sum: "ReduceSum-13", reduce_l2: "ReduceL2-18",
             reduce_log_sum_exp: "ReduceLogSumExp-28"}[func]
    with pytest.raises(TypeError, match=f"{label}: axes must be a sequence of integers") as info:
        func(x, axes)
    assert repr(axes) in str(info.value)


@pytest.mark.parametrize("func", FUNCTIONS, ids=_ids)
@pytest.mark.parametrize("opset", [None, 11, 13, 18])
def test_none_and_empty_axes_mean_the_same(func, opset) -> None:
    x = np.arange(1, 7, dtype=np.float32).reshape(2, 3)
    for keepdims in (True, False):
        everything = func(x, None, keepdims, opset=opset)
        np.testing.assert_array_equal(func(x, [], keepdims, opset=opset), everything)
        np.testing.assert_array_equal(func(x, (), keepdims, opset=opset), everything)
        np.testing.assert_array_equal(func(x, np.array([], np.int64), keepdims, opset=opset),
                                      everything)
        np.testing.assert_array_equal(func(x, [0, 1], keepdims, opset=opset), everything)
        assert everything.shape == ((1, 1) if keepdims else ())


@pytest.mark.parametrize("axes", [None, [], np.array([], np.int32)], ids=repr)
def test_noop_with_empty_axes(axes) -> None:
    x = np.array([[-1.5, 2.0], [0.0, -3.0]], np.float32)
    for keepdims in (True, False):
        out = reduce_sum(x, axes, keepdims, noop_with_empty_axes=True)
        np.testing.assert_array_equal(out, x)
        assert not np.shares_memory(out, x)
        np.testing.assert_array_equal(reduce_l2(x, axes, keepdims, True), np.abs(x))
        np.testing.assert_array_equal(reduce_log_sum_exp(x, axes, keepdims, True), x)
    # noop_with_empty_axes only matters when the axes are empty.
    np.testing.assert_array_equal(reduce_sum(x, [0], noop_with_empty_axes=True),
                                  np.array([[-1.5, -1.0]], np.float32))


@pytest.mark.parametrize(
    ("noop", "opset", "message"),
    [
        (np.array([1, 0]), None, r"^ReduceSum-13: attribute 'noop_with_empty_axes' must be 0 or 1, "
         r"got array\(\[1, 0\]\)$"),
        (np.array([1, 0]), 11, r"^ReduceSum-11: attribute 'noop_with_empty_axes' is not defined"),
        (0.0, None, r"^ReduceSum-13: attribute 'noop_with_empty_axes' must be 0 or 1, got 0\.0$"),
    ],
)
def test_a_noop_flag_that_is_not_a_flag_gets_the_version_s_message(noop, opset, message) -> None:
    with pytest.raises(ValueError, match=message):
        reduce_sum(np.ones(3), noop_with_empty_axes=noop, opset=opset)


@pytest.mark.parametrize("false", [False, 0, np.bool_(False), np.int64(0)], ids=repr)
def test_a_false_noop_flag_is_taken_by_versions_without_it(false) -> None:
    np.testing.assert_array_equal(reduce_sum(np.ones(3), noop_with_empty_axes=false, opset=11),
                                  [3.0])


def test_noop_l2_of_unsigned_and_signed_integers() -> None:
    u = np.array([0, 7, 2**32 - 1], np.uint32)
    np.testing.assert_array_equal(reduce_l2(u, noop_with_empty_axes=True), u)
    i = np.array([-5, 3], np.int64)
    np.testing.assert_array_equal(reduce_l2(i, noop_with_empty_axes=True), [5, 3])


@pytest.mark.parametrize("func", FUNCTIONS, ids=_ids)
def test_keepdims(func) -> None:
    x = np.ones((2, 3, 4), np.float64)
    assert func(x, [1]).shape == (2, 1, 4)
    assert func(x, [1], keepdims=False).shape == (2, 4)
    assert func(x, [1], keepdims=np.bool_(False)).shape == (2, 4)
    assert func(x, [-1, 0], keepdims=0).shape == (3,)


# --- opset= ----------------------------------------------------------------------------------


@pytest.mark.parametrize("func", FUNCTIONS, ids=_ids)
@pytest.mark.parametrize("opset", [1, 5, 11, 12, 13, 17, 18, 21, 28])
def test_every_opset_gives_the_same_float_result(func, opset) -> None:
    rng = np.random.default_rng(opset)
    x = dyadic(rng, (3, 4, 5), np.float64)
    for axes in ([1], [0, 2], None):
        np.testing.assert_array_max_ulp(func(x, axes, opset=opset), func(x, axes), maxulp=0)


def test_opset_selects_older_semantics() -> None:
    # Integer LSE exists up to version 18 and truncates toward zero, like CastLike.
    x = np.array([[1, 2], [-3, -3]], np.int32)
    out = reduce_log_sum_exp(x, [1], keepdims=False, opset=18)
    expected = [math.trunc(float(mpmath.log(sum(mpmath.exp(v) for v in row)))) for row in
                x.tolist()]
    assert expected == [2, -2]
    np.testing.assert_array_equal(out, np.array(expected, np.int32))
    assert out.dtype == np.int32
    for opset in (1, 11, 13, 17):
        np.testing.assert_array_equal(reduce_log_sum_exp(x, [1], False, opset=opset), expected)
    with pytest.raises(TypeError, match="ReduceLogSumExp-28"):
        reduce_log_sum_exp(x, [1], opset=28)
    # bfloat16 arrives with version 13.
    b = np.array([1.0, 2.0], bfloat16)
    assert reduce_sum(b, opset=13).dtype == bfloat16
    with pytest.raises(TypeError, match="ReduceSum-11: data type 'bfloat16'"):
        reduce_sum(b, opset=12)
    # noop_with_empty_axes arrives with axes-as-input (ReduceSum 13, the others 18).
    with pytest.raises(ValueError, match="ReduceL2-13: attribute 'noop_with_empty_axes'"):
        reduce_l2(b, noop_with_empty_axes=True, opset=17)
    np.testing.assert_array_equal(reduce_l2(b, noop_with_empty_axes=True, opset=18), b)


# --- array-likes -----------------------------------------------------------------------------


def test_lists_and_scalars() -> None:
    out = reduce_sum([[1, 2], [3, 4]], [0])
    assert type(out) is np.ndarray
    assert out.dtype == np.asarray([1]).dtype
    assert out.tolist() == [[4, 6]]
    out = reduce_l2([3.0, 4.0], keepdims=False)
    assert out.dtype == np.float64
    assert float(out) == 5.0
    out = reduce_log_sum_exp((0.0, 0.0), keepdims=False)
    assert float(out) == pytest.approx(math.log(2.0), rel=2**-52)


# --- the input is never modified; every memory layout gives the same result ------------------


@pytest.mark.parametrize("func", FUNCTIONS, ids=_ids)
@pytest.mark.parametrize("dtype", [*FLOATS, np.int32, np.int64], ids=lambda d: np.dtype(d).name)
def test_input_is_never_modified(func, dtype) -> None:
    opset = 18 if func is reduce_log_sum_exp and np.dtype(dtype).kind in "iu" else None
    x = dyadic(np.random.default_rng(1), (3, 4, 5), dtype)
    copy = x.copy()
    readonly = x.copy()
    readonly.setflags(write=False)
    for axes in (None, [1], [0, 2], []):
        for noop in (False, True):
            out = func(x, axes, noop_with_empty_axes=noop, opset=opset)
            out_ro = func(readonly, axes, noop_with_empty_axes=noop, opset=opset)
            np.testing.assert_array_equal(out_ro, out)
            assert not np.shares_memory(out, x)
            assert out_ro.flags.writeable
    np.testing.assert_array_equal(x, copy)
    np.testing.assert_array_equal(readonly, copy)
    assert x.tobytes() == copy.tobytes()


def _layouts(x: np.ndarray, tmp_path) -> dict[str, np.ndarray]:
    """Views with the values of ``x`` (shape (3, 4, 5)) in different memory layouts."""
    big = np.zeros((6, 4, 10), x.dtype)
    big[::2, :, 1::2] = x
    reversed_base = np.ascontiguousarray(x[::-1, :, ::-1])
    transposed_base = np.ascontiguousarray(x.transpose(2, 0, 1))
    path = tmp_path / f"data-{x.dtype.name}.bin"
    writer = np.memmap(path, dtype=x.dtype, mode="w+", shape=x.shape)
    writer[...] = x
    writer.flush()
    del writer
    views = {
        "strided": big[::2, :, 1::2],
        "negative": reversed_base[::-1, :, ::-1],
        "fortran": np.asfortranarray(x),
        "transposed": transposed_base.transpose(1, 2, 0),
        "memmap": np.memmap(path, dtype=x.dtype, mode="r", shape=x.shape),
    }
    for view in views.values():
        np.testing.assert_array_equal(view, x)
    return views


@pytest.mark.parametrize("func", FUNCTIONS, ids=_ids)
@pytest.mark.parametrize("dtype", [*FLOATS, np.int32, np.int64, np.uint32, np.uint64],
                         ids=lambda d: np.dtype(d).name)
def test_every_layout_gives_the_result_of_a_contiguous_copy(func, dtype, tmp_path) -> None:
    opset = 18 if func is reduce_log_sum_exp and np.dtype(dtype).kind in "iu" else None
    x = dyadic(np.random.default_rng(7), (3, 4, 5), dtype)
    views = _layouts(x, tmp_path)
    # Sums and sums of squares of these values are exact: every layout must give the same
    # bits. LSE is not exact; 2 ulp allows one rounding each way between two paths.
    maxulp = 2 if func is reduce_log_sum_exp and np.dtype(dtype).kind == "f" else 0
    for axes in (None, [0], [1], [2], [0, 1], [1, 2], [0, 2], [2, 0, 1]):
        for keepdims in (True, False):
            expected = func(np.ascontiguousarray(x), axes, keepdims, opset=opset)
            for name, view in views.items():
                out = func(view, axes, keepdims, opset=opset)
                assert type(out) is np.ndarray, name
                assert out.dtype == expected.dtype, name
                assert out.shape == expected.shape, name
                if maxulp and dtype is not bfloat16:
                    np.testing.assert_array_max_ulp(out, expected, maxulp=maxulp)
                elif maxulp:
                    np.testing.assert_allclose(out.astype(np.float32),
                                               expected.astype(np.float32), rtol=2 * 2**-8)
                else:
                    np.testing.assert_array_equal(out, expected, err_msg=name)
    if func is reduce_sum and dtype in (np.float32, np.float64):
        for view in views.values():
            np.testing.assert_array_equal(func(view, [0, 2], False), exact_sum(x, (0, 2), False))


@pytest.mark.parametrize("func", FUNCTIONS, ids=_ids)
def test_broadcast_views_with_zero_strides(func) -> None:
    row = np.array([0.25, -1.5, 3.0, 2.0], np.float32)
    view = np.broadcast_to(row, (5, 4))
    assert view.strides == (0, 4)
    for axes in (None, [0], [1]):
        np.testing.assert_array_max_ulp(func(view, axes), func(np.ascontiguousarray(view), axes),
                                        maxulp=2 if func is reduce_log_sum_exp else 0)
    np.testing.assert_array_equal(reduce_sum(view, [0], keepdims=False), row * 5)


def test_l2_of_exact_data_against_integer_square_roots() -> None:
    x = np.array([[3, 4, 12], [1, 2, 2], [0, 0, 0]], np.int64)
    for view in (x, np.asfortranarray(x), x[::-1][::-1]):
        out = reduce_l2(view, [1], keepdims=False)
        assert out.tolist() == [math.isqrt(sum(v * v for v in row)) for row in x.tolist()]
    f = x.astype(np.float32)
    out = reduce_l2(f.T, [0], keepdims=False)  # columns of f.T are rows of x
    expected = [float(Fraction(sum(v * v for v in row)) ** 0.5) for row in x.tolist()]
    np.testing.assert_array_equal(out, np.array(expected, np.float32))


def test_memoized_calls_still_reject_look_alike_arguments():
    """Valid calls are memoized by their arguments; 1.0 == 1 and hash(1.0) == hash(1), so a float
    axis or keepdims must not be served by the cached plan of the int one."""
    x = np.ones((2, 3), np.float32)
    assert reduce_sum(x, axes=[1], keepdims=1).shape == (2, 1)
    with pytest.raises(TypeError, match=r"ReduceSum-13: axes must be integers, got 1\.0"):
        reduce_sum(x, axes=[1.0], keepdims=1)
    with pytest.raises(ValueError, match=r"ReduceSum-13: attribute 'keepdims' must be 0 or 1"):
        reduce_sum(x, axes=[1], keepdims=1.0)
    with pytest.raises(ValueError, match=r"ReduceSum-13: axis 2 is out of range"):
        reduce_sum(x, axes=[2])  # errors are never cached: raised every time
    with pytest.raises(ValueError, match=r"ReduceSum-13: axis 2 is out of range"):
        reduce_sum(x, axes=[2])
    assert reduce_sum(x, axes=(np.int64(1),), keepdims=True).shape == (2, 1)
