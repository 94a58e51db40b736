"""One test per line of the numerics contract (README "Numerics"), with exact expected values.

Expected values come from the spec text, exact integer arithmetic, or the extended-precision
oracle (tests/oracle.py) - never from onnx_reduce itself. Every test runs on the "reference" and
"auto" kernel paths.
"""

from __future__ import annotations

import math
import tracemalloc
from fractions import Fraction

import mpmath
import numpy as np
import pytest

import onnx_reduce
import oracle
from onnx_reduce import VERSIONS, reduce_l2, reduce_log_sum_exp, reduce_sum
from onnx_reduce.kernels.dispatch import kernel_path
from onnx_reduce.spec import REGISTRY
from test_properties import integer_opset

bf16 = oracle.bfloat16
FUNCTIONS = {record.name: getattr(onnx_reduce, record.function) for record in REGISTRY}
OPS = tuple(FUNCTIONS)
FLOATS = [np.float16, bf16, np.float32, np.float64]


@pytest.fixture(params=["reference", "auto"], autouse=True)
def path(request):
    with kernel_path(request.param):
        yield request.param


def exactly(result: np.ndarray, want: np.ndarray) -> None:
    """Same dtype, shape and values (NaN == NaN, and -0.0 == 0.0)."""
    want = np.asarray(want)
    assert isinstance(result, np.ndarray)
    assert result.dtype == want.dtype, (result.dtype, want.dtype)
    assert result.shape == want.shape, (result.shape, want.shape)
    if want.dtype.kind in "iu":
        assert result.tolist() == want.tolist()
    else:
        np.testing.assert_array_equal(result.astype(np.float64), want.astype(np.float64))


def within_contract(result: np.ndarray, op: str, data: np.ndarray, axes=None,
                    keepdims: bool = True) -> None:
    """Integers exact; floats within 1 ulp (float16/bfloat16/float32) or 2 ulp (float64) of the
    exact value (the data in these tests is well-conditioned)."""
    exact = oracle.exact(op, data, axes, keepdims)
    want = oracle.round_array(exact, data.dtype)
    if data.dtype.kind in "iu":
        exactly(result, want)
        return
    assert result.dtype == data.dtype
    assert result.shape == want.shape
    bound = 2.0 if data.dtype == np.float64 else 1.0
    assert oracle.max_ulp_error(result, exact, data.dtype) <= bound


# ------------------------------------------------------------------------------------------
# Shapes and attributes


@pytest.mark.parametrize(("op", "version"), [(op, v) for op in OPS for v in VERSIONS[op]])
def test_keepdims_defaults_to_1(op: str, version: int) -> None:
    x = np.arange(6.0).reshape(2, 3)
    assert FUNCTIONS[op](x, axes=[1], opset=version).shape == (2, 1)
    assert FUNCTIONS[op](x, opset=version).shape == (1, 1)


@pytest.mark.parametrize("op", OPS)
def test_negative_axes(op: str) -> None:
    x = np.arange(24.0).reshape(2, 3, 4)
    for negative, positive in (([-1], [2]), ([-3, -1], [0, 2]), ([-2, 0], [0, 1])):
        exactly(FUNCTIONS[op](x, axes=negative), FUNCTIONS[op](x, axes=positive))
    exactly(reduce_sum(x, axes=[-1], keepdims=False), oracle.expected("ReduceSum", x, [2], False))


def test_rank0_inputs() -> None:
    exactly(reduce_sum(np.array(2.5)), np.array(2.5))
    exactly(reduce_l2(np.array(-3.0, np.float32)), np.array(3.0, np.float32))
    exactly(reduce_log_sum_exp(np.array(1.5, np.float16)), np.array(1.5, np.float16))
    exactly(reduce_sum(np.array(-7, np.int32), keepdims=False), np.array(-7, np.int32))
    exactly(reduce_l2(np.array(-7, np.int64), axes=[]), np.array(7, np.int64))


def test_empty_axes_with_noop() -> None:
    x = np.array([[-1.5, 2.0], [0.0, -np.inf]])
    result = reduce_sum(x, axes=[], noop_with_empty_axes=True)
    exactly(result, x)
    assert not np.shares_memory(result, x)  # a copy
    exactly(reduce_l2(x, axes=[], noop_with_empty_axes=True), np.abs(x))
    exactly(reduce_log_sum_exp(x, axes=[], noop_with_empty_axes=True), x)
    xi = np.array([-3, 4], np.int32)
    exactly(reduce_l2(xi, noop_with_empty_axes=True), np.array([3, 4], np.int32))
    exactly(reduce_log_sum_exp(xi, noop_with_empty_axes=True, opset=18), xi)


@pytest.mark.parametrize("dtype", [*FLOATS, np.int32, np.int64, np.uint32, np.uint64])
def test_empty_set_results(dtype) -> None:
    x = np.zeros((0, 3), dtype)
    exactly(reduce_sum(x, axes=[0]), np.zeros((1, 3), dtype))
    exactly(reduce_l2(x, axes=[0], keepdims=False), np.zeros(3, dtype))
    exactly(reduce_sum(x), np.zeros((1, 1), dtype))
    if np.dtype(dtype).kind in "iu":
        with pytest.raises(ValueError, match="empty set"):
            reduce_log_sum_exp(x, axes=[0], opset=18)
    else:
        exactly(reduce_log_sum_exp(x, axes=[0]), np.full((1, 3), -np.inf, dtype))
    # kept axis empty, reduced axis not: an empty output, no error
    exactly(reduce_sum(x, axes=[1], keepdims=False), np.zeros(0, dtype))


# ------------------------------------------------------------------------------------------
# ReduceLogSumExp


def test_log_sum_exp_800_does_not_overflow() -> None:
    result = reduce_log_sum_exp(np.array([800.0, 800.0]), keepdims=False)
    with mpmath.workprec(300):
        exact = mpmath.mpf(800) + mpmath.log(2)
    assert float(result) == pytest.approx(800.6931471805599, abs=1e-12)
    assert oracle.ulp_error(result, exact, np.float64) <= 1.0


@pytest.mark.parametrize(("dtype", "top"), [(np.float16, 60000.0), (bf16, 3e38),
                                            (np.float32, 3e38), (np.float64, 1e308)])
def test_log_sum_exp_near_the_top_of_the_range_does_not_overflow(dtype, top) -> None:
    x = np.array([top, top, -top]).astype(dtype)
    result = reduce_log_sum_exp(x, keepdims=False)
    exact = oracle.exact("ReduceLogSumExp", x, keepdims=False)[()]
    assert np.isfinite(result.astype(np.float64))
    assert oracle.ulp_error(result, exact, dtype) <= 1.0


def test_log_sum_exp_tiny_result_keeps_relative_accuracy() -> None:
    result = reduce_log_sum_exp(np.array([0.0, -40.0]), keepdims=False)
    with mpmath.workprec(300):
        exact = mpmath.log1p(mpmath.exp(-40))
    assert oracle.ulp_error(result, exact, np.float64) <= 2.0  # 4.248354255291589e-18


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize(
    ("values", "want"),
    [
        ([-np.inf, -np.inf], -np.inf),
        ([np.inf, 1.0], np.inf),
        ([np.inf, np.inf, -np.inf], np.inf),
        ([np.nan, 1.0], np.nan),
        ([np.inf, np.nan], np.nan),
        ([-np.inf, 0.0], 0.0),
    ],
)
def test_log_sum_exp_special_values(values, want, dtype) -> None:
    exactly(reduce_log_sum_exp(np.array(values, dtype), keepdims=False), np.array(want, dtype))


# ------------------------------------------------------------------------------------------
# ReduceL2


@pytest.mark.parametrize(
    ("values", "dtype", "want"),
    [
        ([3e30, 4e30], np.float32, 5e30),
        ([3e-200, 4e-200], np.float64, 5e-200),
        ([300.0, 400.0], np.float16, 500.0),
        ([1e200] * 4, np.float64, 2e200),
        ([3e-30, 4e-30], np.float32, 5e-30),
        ([2e38, 2e38, 0.0], bf16, None),
        ([2.0**-1074] * 4, np.float64, 2.0**-1073),
    ],
)
def test_l2_no_intermediate_overflow_or_underflow(values, dtype, want) -> None:
    x = np.array(values, np.float64).astype(dtype)
    result = reduce_l2(x, keepdims=False)
    exact = oracle.exact("ReduceL2", x, keepdims=False)[()]
    if want is not None:
        rounded = oracle.round_exact(exact, dtype)
        assert float(np.asarray(want, dtype)) == rounded  # the value named is the exact one
    assert np.isfinite(result.astype(np.float64))
    assert oracle.ulp_error(result, exact, dtype) <= (2.0 if dtype == np.float64 else 1.0)


def test_l2_overflows_only_when_the_result_does() -> None:
    exactly(reduce_l2(np.array([3e38, 3e38], np.float32), keepdims=False),
            np.array(np.inf, np.float32))  # 4.2e38 > float32 max
    exactly(reduce_l2(np.array([1.5e308, 1.5e308]), keepdims=False), np.array(np.inf))


@pytest.mark.parametrize("dtype", FLOATS)
def test_l2_special_values(dtype) -> None:
    cases = [([np.nan, np.inf], np.nan), ([-np.inf, 1.0], np.inf), ([np.inf, -np.inf], np.inf),
             ([1.0, np.nan], np.nan)]
    for values, want in cases:
        exactly(reduce_l2(np.array(values, dtype), keepdims=False), np.array(want, dtype))


# ------------------------------------------------------------------------------------------
# Integers


@pytest.mark.parametrize(
    ("dtype", "values", "want"),
    [
        (np.int32, [2**31 - 1, 1], -(2**31)),
        (np.int32, [-(2**31), -1], 2**31 - 1),
        (np.int64, [2**63 - 1, 1], -(2**63)),
        (np.int64, [-(2**63), -(2**63)], 0),
        (np.uint32, [2**32 - 1, 2], 1),
        (np.uint64, [2**64 - 1, 2**64 - 1, 3], 1),
    ],
)
def test_integer_sum_wraps(dtype, values, want) -> None:
    bits = np.dtype(dtype).itemsize * 8
    total = sum(values) % 2**bits
    if np.dtype(dtype).kind == "i" and total >= 2 ** (bits - 1):
        total -= 2**bits
    assert total == want  # the expectation is modular arithmetic
    exactly(reduce_sum(np.array(values, dtype), keepdims=False), np.array(want, dtype))


def _wrapped_isqrt(values: list[int], dtype) -> int:
    bits = np.dtype(dtype).itemsize * 8
    root = math.isqrt(sum(v * v for v in values)) % 2**bits
    if np.dtype(dtype).kind == "i" and root >= 2 ** (bits - 1):
        root -= 2**bits
    return root


@pytest.mark.parametrize(
    ("dtype", "values"),
    [
        (np.int32, [3, 4]),
        (np.int32, [-(2**31)]),                          # 2**31 wraps to -2**31
        (np.int32, [2**31 - 1] * 5),                     # sum of squares > 2**64
        (np.int64, [-(2**63), -(2**63)]),                # squares overflow int64 and uint64
        (np.int64, [2**62, -(2**62), 3]),
        (np.int64, [10**9 + 7, 10**9 + 9, 1]),
        (np.uint32, [2**32 - 1, 2**32 - 1]),
        (np.uint64, [2**64 - 1, 2**64 - 1, 2**64 - 1]),
        (np.uint64, [2**32, 1]),                         # isqrt(2**64 + 1) = 2**32
    ],
)
def test_integer_l2_is_exact_isqrt(dtype, values) -> None:
    want = _wrapped_isqrt(values, dtype)
    exactly(reduce_l2(np.array(values, dtype), keepdims=False), np.array(want, dtype))


def test_integer_l2_of_most_negative_int64_pair() -> None:
    # sqrt(2 * 2**126) = 2**63.5: floor is 13043817825332782212 (> int64 max), wrapped
    want = math.isqrt(2**127) - 2**64
    assert want == -5402926248376769404
    exactly(reduce_l2(np.array([-(2**63), -(2**63)], np.int64), keepdims=False),
            np.array(want, np.int64))


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint32, np.uint64])
def test_integer_log_sum_exp_truncates_toward_zero(dtype) -> None:
    cases = [([1, 2], 2), ([0, 0, 0], 1), ([7], 7), ([10, 10, 10, 10], 11)]
    if np.dtype(dtype).kind == "i":
        cases += [([-5, -5], -4), ([-1, -1, -1], 0), ([-10, -10, -10], -8), ([-3], -3)]
    for values, want in cases:
        with mpmath.workprec(200):
            exact = mpmath.log(mpmath.fsum(mpmath.exp(v) for v in values))
        assert int(exact) == want  # mpmath's int() truncates toward zero
        exactly(reduce_log_sum_exp(np.array(values, dtype), keepdims=False, opset=18),
                np.array(want, dtype))


def test_integer_log_sum_exp_rejected_at_version_28() -> None:
    with pytest.raises(TypeError, match="ReduceLogSumExp-28"):
        reduce_log_sum_exp(np.array([1, 2], np.int32))


# ------------------------------------------------------------------------------------------
# One rounding


def test_bfloat16_rounds_once() -> None:
    # exact sum 1 + 2**-8 + 2**-30: through float32 it becomes 1 + 2**-8, a bfloat16 tie that
    # rounds to even (1.0); one correct rounding gives 1 + 2**-7.
    x = np.array([1.0, 2.0**-8, 2.0**-30]).astype(bf16)
    twice = float(np.float32(1 + 2.0**-8 + 2.0**-30).astype(bf16))
    assert twice == 1.0
    exactly(reduce_sum(x, keepdims=False), np.array(1 + 2.0**-7, bf16))
    # L2: sqrt((1 + 2**-8)**2 + 2**-28 ...) the same way: compare with the exact oracle
    y = np.array([1.0, 2.0**-4, 2.0**-12]).astype(bf16)
    exactly(reduce_l2(y, keepdims=False), oracle.expected("ReduceL2", y, keepdims=False))


@pytest.mark.parametrize(("dtype", "values", "want"), [
    # 1 + 2**-11 + 2**-24 is just above a float16 tie: it rounds up. A float32 accumulator
    # would first round it to 1 + 2**-11 (2**-24 is half a float32 ulp: tie to even), a tie.
    (np.float16, [1.0, 2.0**-11, 2.0**-24], 1 + 2.0**-10),
    # float32: the same one level down (2**-40 is lost by a float32 accumulator)
    (np.float32, [1.0, 2.0**-24, 2.0**-40], 1 + 2.0**-23),
    # float32 sequential accumulation gives 1.0 twice over (each 2**-24 is a tie to even)
    (np.float32, [1.0, 2.0**-24, 2.0**-24], 1 + 2.0**-23),
])
def test_narrow_floats_round_once(dtype, values, want) -> None:
    x = np.array(values, dtype)
    assert oracle.round_exact(oracle.exact_sum(x.astype(np.float64)), dtype) == want
    exactly(reduce_sum(x, keepdims=False), np.array(want, dtype))


# ------------------------------------------------------------------------------------------
# Inputs


def _views(x: np.ndarray) -> dict[str, np.ndarray]:
    readonly = x.copy()
    readonly.flags.writeable = False
    return {
        "transposed": np.ascontiguousarray(x.T).T,
        "negative-stride": np.flip(np.ascontiguousarray(np.flip(x))),
        "sliced": np.repeat(x, 2, axis=1)[:, ::2],
        "fortran": np.asfortranarray(x),
        "read-only": readonly,
    }


@pytest.mark.parametrize("dtype", [np.float32, np.float64, bf16, np.int64])
@pytest.mark.parametrize("op", OPS)
def test_non_contiguous_and_read_only_inputs(op: str, dtype) -> None:
    x = (np.arange(60).reshape(5, 12) % 7 - 3).astype(dtype)
    opset = integer_opset(op) if np.dtype(dtype).kind == "i" else None
    if opset and op == "ReduceLogSum":
        x += 4  # positive sums: an integer log of a sum <= 0 raises
    for name, view in _views(x).items():
        assert np.array_equal(view.astype(np.float64), x.astype(np.float64)), name
        for axes in ([0], [1], None, [-1, 0]):
            within_contract(FUNCTIONS[op](view, axes=axes, opset=opset), op, x, axes)


@pytest.mark.parametrize("op", OPS)
def test_memory_mapped_input(op: str, tmp_path) -> None:
    x = np.linspace(-3, 3, 120, dtype=np.float32).reshape(10, 12)
    file = tmp_path / "data.bin"
    x.tofile(file)
    mapped = np.memmap(file, dtype=np.float32, mode="r", shape=(10, 12))
    for axes in ([1], [0]):
        within_contract(FUNCTIONS[op](mapped, axes=axes), op, x, axes)
        within_contract(FUNCTIONS[op](mapped[::-1, 1::2], axes=axes), op, x[::-1, 1::2], axes)


@pytest.mark.parametrize("dtype", [*FLOATS, np.int32, np.uint64])
@pytest.mark.parametrize("op", OPS)
def test_input_never_modified(op: str, dtype) -> None:
    rng = np.random.default_rng(3)
    x = (np.abs(rng.standard_normal((7, 9))) * 5).astype(dtype)
    if np.dtype(dtype) in oracle.FORMATS:
        x[0, 0], x[1, 1] = np.nan, -np.inf
    opset = integer_opset(op) if np.dtype(dtype).kind in "iu" else None
    if opset and op == "ReduceLogSum":
        x += 1  # the elementwise (no-op) integer log of 0 raises
    for view in (x, x.T, x[::-1, ::2]):
        before = view.copy()
        for axes, noop in ((None, False), ([0], False), ([], True), ([-1], False)):
            FUNCTIONS[op](view, axes=axes, noop_with_empty_axes=noop, opset=opset)
        assert before.tobytes() == np.ascontiguousarray(view).tobytes()


@pytest.mark.parametrize(
    ("op", "axes", "want"),
    [
        ("ReduceSum", None, Fraction(2**26, 2)),                     # 2**26 halves
        ("ReduceL2", [0], oracle.Sqrt(Fraction(2**13, 4))),         # sqrt(8192 / 4) per column
        ("ReduceLogSumExp", [1], None),                              # 0.5 + log(8192)
    ],
)
def test_large_input_uses_bounded_memory(op: str, axes, want, big_input) -> None:
    FUNCTIONS[op](big_input, axes=axes, keepdims=False)  # untraced: kernels load (~13 MiB)
    tracemalloc.start()
    try:
        result = FUNCTIONS[op](big_input, axes=axes, keepdims=False)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 0.05 * big_input.nbytes, f"peak {peak / 2**20:.1f} MiB"
    if want is None:
        with mpmath.workprec(200):
            want = mpmath.mpf(0.5) + mpmath.log(8192)
    rounded = oracle.round_exact(want, np.float32)
    assert np.all(result == np.float32(rounded))


@pytest.fixture(scope="module")
def big_input() -> np.ndarray:
    """256 MiB of float32 0.5 (8192 x 8192)."""
    return np.full((8192, 8192), 0.5, np.float32)
