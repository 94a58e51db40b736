"""Property tests: the three front doors against the exact oracle (tests/oracle.py).

Every property runs on each kernel path: "reference", "auto" and "fast". A "fast" run is skipped
(visibly, with a reason) only while ``kernels/fast/<module>.py`` does not exist; once it exists,
cases the fast kernel declines count as not served (a hypothesis event) and
:func:`test_fast_kernels_serve_common_cases` fails if it serves none of the common ones.

Error bounds, in ulps of the output dtype (measured from the exact value, so a correctly rounded
result is within 0.5):

* integers: exact equality (wrapped sums, isqrt L2; LSE as the spec's function body computes
  it: inputs cast to float64, the exact LSE of those rounded once to float64, truncated);
* float16/bfloat16/float32: 1 ulp, float64: 2 ulp, when the data is well-conditioned: sums
  whose terms share one sign, every L2;
* sums with cancellation: that plus ``n * u * sum|x| / ulp(S)`` (the classical bound of any
  summation order in an accumulator with unit roundoff ``u``: condition number times ``n u``);
* log-sum-exp: that plus ``(2n + 4) * u * |L| / ulp(result)`` with ``L = result - max``: the
  sum inside the log is well-conditioned (positive terms), but adding ``L`` to the maximum cancels
  when they have opposite signs, so the bound scales with ``|L| / |result|``.

``u`` is 2**-24 for float16/bfloat16 (the contract allows a float32 accumulator) and 2**-53 for
float32/float64. float64 sums draw |x| <= 1e300 (no promise is made about intermediate overflow of
float64 sums with cancellation); L2 and LSE take the whole range.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from unittest import mock

import mpmath
import numpy as np
import pytest
from hypothesis import event, given, note, settings
from hypothesis import strategies as st

import onnx_reduce
import oracle
from onnx_reduce.kernels import blocks, dispatch
from onnx_reduce.kernels.dispatch import kernel_path
from onnx_reduce.spec import REGISTRY, latest, op_record

FUNCTIONS: dict[str, Callable[..., np.ndarray]] = {
    record.name: getattr(onnx_reduce, record.function) for record in REGISTRY
}
OPS = tuple(FUNCTIONS)
PATHS = ("reference", "auto", "fast")
LAYOUTS = ("contiguous", "fortran", "transposed", "negative", "sliced")
FLOATS = (np.dtype(np.float16), oracle.bfloat16, np.dtype(np.float32), np.dtype(np.float64))
INTEGERS = tuple(np.dtype(t) for t in (np.int32, np.int64, np.uint32, np.uint64))
#: Unit roundoff of the widest accumulator the contract allows to be narrowest.
ACC_EPS = {np.dtype(np.float16): 2.0**-24, oracle.bfloat16: 2.0**-24,
           np.dtype(np.float32): 2.0**-53, np.dtype(np.float64): 2.0**-53}
BASE_ULPS = {np.dtype(np.float16): 1, oracle.bfloat16: 1,
             np.dtype(np.float32): 1, np.dtype(np.float64): 2}
MAX_SIZE = 96
NOT_SERVED = "no fast kernel serves"


def require_path(op: str, path: str) -> None:
    """Skip the "fast" path of an op no fast kernel serves (its module or functions are not
    there yet): every call of it would take the reference path."""
    if path == "fast" and not dispatch.has_fast(op):
        pytest.skip(f"{op}: no fast kernels ({op_record(op).fast})")


def run(op: str, path: str, data: np.ndarray, **kwargs) -> np.ndarray | None:
    """Call the front door on one kernel path; None when "fast" does not serve the case."""
    with kernel_path(path):
        try:
            return FUNCTIONS[op](data, **kwargs)
        except RuntimeError as exc:
            if path == "fast" and NOT_SERVED in str(exc):
                event("fast kernel did not serve the case")
                return None
            raise


def run_served(op: str, path: str, data: np.ndarray, **kwargs) -> np.ndarray:
    """:func:`run`, on the "auto" path where "fast" does not serve the case (so that the
    errors of the path that serves it show)."""
    result = run(op, path, data, **kwargs)
    return run(op, "auto", data, **kwargs) if result is None else result


# ------------------------------------------------------------------------------------------
# Layouts: the same logical array, stored differently


def with_layout(a: np.ndarray, layout: str) -> np.ndarray:
    """A view whose values equal ``a`` but whose memory layout is ``layout``."""
    if a.ndim == 0 or layout == "contiguous":
        return a
    if layout == "fortran":
        out = np.asfortranarray(a)
    elif layout == "transposed":
        out = np.ascontiguousarray(a.T).T
    elif layout == "negative":
        out = np.flip(np.ascontiguousarray(np.flip(a)))
    elif layout == "sliced":
        big = np.zeros(tuple(2 * d + 1 for d in a.shape), a.dtype)
        index = tuple(slice(1, None, 2) for _ in a.shape)
        big[index] = a
        out = big[index]
    else:
        raise ValueError(layout)
    assert np.array_equal(out, a, equal_nan=oracle.is_float_dtype(a.dtype)), layout
    return out


# ------------------------------------------------------------------------------------------
# Strategies


@dataclass
class Case:
    data: np.ndarray
    axes: list[int] | None
    keepdims: bool
    noop: bool

    def kwargs(self) -> dict:
        return {"axes": self.axes, "keepdims": self.keepdims, "noop_with_empty_axes": self.noop}


def float_elements(op: str, dtype: np.dtype, specials: bool) -> st.SearchStrategy[float]:
    """Values representable in ``dtype``: moderate, huge, tiny/subnormal, and the specials."""
    width = 16 if dtype == np.float16 else 32 if dtype in (np.float32, oracle.bfloat16) else 64
    if op == "ReduceSum" and dtype == np.float64:
        finite = st.floats(-1e300, 1e300, width=64)
    else:
        finite = st.floats(allow_nan=False, allow_infinity=False, width=width)
    moderate = st.floats(-30, 30, width=width)
    choices = [moderate, finite, st.integers(-8, 8).map(float)]
    if specials:
        choices.append(st.sampled_from([math.inf, -math.inf, math.nan]))
    return st.one_of(*choices)


def integer_elements(op: str, dtype: np.dtype) -> st.SearchStrategy[int]:
    info = np.iinfo(dtype)
    if op == "ReduceLogSum":  # mostly positive sums (a sum <= 0 raises), also near the top
        return st.one_of(st.integers(0, int(info.max)), st.integers(max(int(info.min), -3), 50))
    return st.one_of(st.integers(int(info.min), int(info.max)),
                     st.sampled_from([int(info.min), int(info.max), 0, 1]),
                     st.integers(max(int(info.min), -50), 50))


@st.composite
def cases(draw, op: str, dtypes: tuple, specials: bool = True, max_size: int = MAX_SIZE) -> Case:
    dtype = draw(st.sampled_from(dtypes))
    rank = draw(st.integers(0, 4))
    shape = tuple(draw(st.lists(st.integers(0, 6), min_size=rank, max_size=rank)))
    while math.prod(shape) > max_size:
        shape = tuple(max(1, d // 2) for d in shape)
    size = math.prod(shape)
    if dtype.kind == "f" or dtype == oracle.bfloat16:
        values = draw(st.lists(float_elements(op, dtype, specials), min_size=size,
                               max_size=size))
        if draw(st.booleans()):  # a same-signed (well-conditioned) case
            values = [abs(v) for v in values]
        logical = np.array(values, dtype=np.float64).astype(dtype).reshape(shape)
    else:
        values = draw(st.lists(integer_elements(op, dtype), min_size=size, max_size=size))
        logical = np.array(values, dtype=object).astype(dtype).reshape(shape)
    data = with_layout(logical, draw(st.sampled_from(LAYOUTS)))
    axes: list[int] | None
    if draw(st.booleans()) or rank == 0:
        axes = draw(st.sampled_from([None, []]))
    else:
        chosen = draw(st.lists(st.integers(0, rank - 1), min_size=1, max_size=rank, unique=True))
        axes = [a - rank if draw(st.booleans()) else a for a in chosen]
    return Case(data, axes, draw(st.booleans()), draw(st.booleans()))


# ------------------------------------------------------------------------------------------
# Checking one result against the oracle


def as_float(q) -> float:
    try:
        return float(q)
    except OverflowError:
        return math.inf


def allowed_ulps(op: str, row: np.ndarray, exact_value, dtype: np.dtype) -> float:
    """The error bound (ulps of ``dtype``) for one output element; see the module docstring."""
    base = BASE_ULPS[dtype]
    x = oracle.to_fraction(exact_value)
    if isinstance(x, float):
        return base
    u = ACC_EPS[dtype]
    n = row.size
    if op in ("ReduceSumSquare", "ReduceLogSum"):
        return base  # no cancellation in sums of squares; LogSum's suspects are recomputed
    ulp = oracle.ulp(x, dtype)
    values = row.astype(np.float64)
    if op == "ReduceSum":
        if (values >= 0).all() or (values <= 0).all():
            return base
        abs_sum = oracle._exact_float_sum([abs(v) for v in values.tolist()])
        return base + as_float(n * Fraction(u) * abs_sum / ulp)
    if op == "ReduceL2":
        magnitude = oracle.to_fraction(oracle.round_exact(x, np.float64))
        return base + as_float(n * Fraction(u) * magnitude / ulp)
    peak = float(values.max())
    with mpmath.workprec(oracle.PREC):
        tail = abs(oracle.to_mpf(x) - mpmath.mpf(peak))
        return base + float((2 * n + 4) * u * tail / (ulp.numerator / mpmath.mpf(ulp.denominator)))


def check(op: str, case: Case, result: np.ndarray, exact: np.ndarray | None = None) -> None:
    data = case.data
    if exact is None:
        exact = oracle.exact(op, data, case.axes, case.keepdims, case.noop)
    assert isinstance(result, np.ndarray)
    assert result.dtype == data.dtype
    assert result.shape == exact.shape
    if data.dtype.kind in "iu":
        np.testing.assert_array_equal(result, oracle.round_array(exact, data.dtype))
        return
    if case.noop and not case.axes:
        want = oracle.round_array(exact, data.dtype)
        np.testing.assert_array_equal(result.astype(np.float64), want.astype(np.float64))
        return
    axes = oracle.normalize_axes(data.ndim, case.axes, case.noop)
    rows = oracle.rows(data, axes)
    for i, (r, x, row) in enumerate(zip(result.reshape(-1).tolist(), exact.reshape(-1), rows,
                                        strict=True)):
        err = oracle.ulp_error(r, x, data.dtype)
        bound = allowed_ulps(op, row, x, data.dtype)
        if not err <= bound:
            note(f"output {i}: got {r!r}, exact {oracle.to_mpf(x)}, row {row.tolist()}")
        assert err <= bound, f"output {i}: {err} ulp > {bound}"


def run_and_check(op: str, path: str, case: Case, opset: int | None = None) -> None:
    before = case.data.copy()
    kwargs = case.kwargs()
    if opset is not None:
        kwargs["opset"] = opset
    result = run(op, path, case.data, **kwargs)
    unchanged = np.array_equal(case.data, before, equal_nan=oracle.is_float_dtype(before.dtype))
    assert unchanged, "input modified"
    if result is not None:
        check(op, case, result)


# ------------------------------------------------------------------------------------------
# The properties


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("op", OPS)
@settings(deadline=None, max_examples=70)
@given(data=st.data())
def test_floats_match_oracle(op: str, path: str, data) -> None:
    """Any shape, axes, keepdims, noop, layout, and values incl. inf/NaN/huge/subnormal."""
    require_path(op, path)
    run_and_check(op, path, data.draw(cases(op, FLOATS)))


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("op", OPS)
@settings(deadline=None, max_examples=40)
@given(data=st.data())
def test_integers_match_oracle(op: str, path: str, data) -> None:
    """Integer dtypes are exact: wrapped sums, isqrt L2, LSE (opset 18) truncated toward zero."""
    require_path(op, path)
    case = data.draw(cases(op, INTEGERS))
    opset = integer_opset(op)
    axes = oracle.normalize_axes(case.data.ndim, case.axes, case.noop)
    empty = axes is not None and math.prod(case.data.shape[a] for a in axes) == 0
    if empty and op_record(op).empty < 0:
        with pytest.raises(ValueError, match="empty set"):
            run(op, path, case.data, **case.kwargs(), opset=opset)
        return
    try:
        exact = oracle.exact(op, case.data, case.axes, case.keepdims, case.noop)
    except ValueError:  # integer ReduceLogSum of a sum <= 0: no integer holds its log
        event("integer log of a sum <= 0")
        with pytest.raises(ValueError, match="cannot represent"):
            run_served(op, path, case.data, **case.kwargs(), opset=opset)
        return
    result = run(op, path, case.data, **case.kwargs(), opset=opset)
    if result is not None:
        check(op, case, result, exact)


def has_integer_log(case: Case) -> bool:
    """Whether every output of an integer ReduceLogSum case has a sum >= 1."""
    try:
        oracle.exact("ReduceLogSum", case.data, case.axes, case.keepdims, case.noop)
    except ValueError:
        return False
    return True


def integer_opset(op: str) -> int | None:
    """The opset whose version takes integers: the newest, else 18 (ReduceLogSumExp-28 and
    ReduceLogSum-28 take floats only)."""
    return None if "int32" in latest(op).dtypes else 18


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("op", OPS)
@settings(deadline=None, max_examples=25)
@given(data=st.data())
def test_well_conditioned_float64_within_2_ulp(op: str, path: str, data) -> None:
    """Positive float64 data, no specials: sums and L2 within 2 ulp, LSE of data >= 0 too."""
    require_path(op, path)
    case = data.draw(cases(op, (np.dtype(np.float64),), specials=False))
    case.data = np.abs(case.data)
    before = case.data.copy()
    result = run(op, path, case.data, **case.kwargs())
    assert np.array_equal(case.data, before)
    if result is None:
        return
    exact = oracle.exact(op, case.data, case.axes, case.keepdims, case.noop)
    errors = [oracle.ulp_error(r, x, np.float64)
              for r, x in zip(result.reshape(-1).tolist(), exact.reshape(-1), strict=True)]
    assert max(errors, default=0.0) <= 2.0


@pytest.mark.parametrize("path", ["reference", "auto"])
@pytest.mark.parametrize("op", OPS)
@settings(deadline=None, max_examples=30)
@given(data=st.data(), block=st.integers(1, 20))
def test_small_blocks_match_oracle(op: str, path: str, data, block: int) -> None:
    """With BLOCK_ELEMENTS shrunk to a few elements, every case crosses block boundaries."""
    case = data.draw(cases(op, FLOATS + INTEGERS[:2], max_size=200))
    opset = integer_opset(op) if case.data.dtype.kind in "iu" else None
    if opset and case.data.size == 0:
        return  # the empty-set ValueError is covered by test_integers_match_oracle
    if opset and op == "ReduceLogSum" and not has_integer_log(case):
        return  # a sum <= 0: its ValueError is covered by test_integers_match_oracle
    with mock.patch.object(blocks, "BLOCK_ELEMENTS", block):
        run_and_check(op, path, case, opset)


# ------------------------------------------------------------------------------------------
# Larger shapes: block (2**18 elements) and thread / piece boundaries of the fast kernels


LARGE = [
    # (shape, axes, layout)
    ((2, 140_001), [1], "contiguous"),        # rows split in pieces across threads
    ((70_001, 3), [0], "contiguous"),         # columns, many reduced rows
    ((3, 1_029, 70), [1], "negative"),        # middle axis, negative strides
    ((700, 2, 190), [0, 2], "transposed"),    # non-adjacent axes, transposed storage
    ((262_147,), None, "sliced"),             # one output over more than one block
]


@pytest.fixture(scope="module")
def large_data() -> dict:
    rng = np.random.default_rng(20261121)
    return {shape: rng.standard_normal(shape) * 3 for shape, _, _ in LARGE}


_EXACT_CACHE: dict[tuple, np.ndarray] = {}


def cached_exact(op: str, data: np.ndarray, axes: list[int] | None) -> np.ndarray:
    """The oracle's exact values, shared by the kernel paths and layouts of one logical array."""
    key = (op, data.shape, data.dtype.str, str(data.dtype), tuple(axes or ()),
           hash(np.ascontiguousarray(data).tobytes()))
    if key not in _EXACT_CACHE:
        _EXACT_CACHE[key] = oracle.exact(op, data, axes)
    return _EXACT_CACHE[key]


#: float32/float64 in every large layout, the narrow floats in the contiguous ones (time)
LARGE_CASES = [(*case, dtype) for case in LARGE
               for dtype in (np.float32, np.float64, np.float16, oracle.bfloat16)
               if dtype in (np.float32, np.float64) or case[2] == "contiguous"]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize(("shape", "axes", "layout", "dtype"), LARGE_CASES)
def test_large_sum_and_l2(shape, axes, layout, dtype, path, large_data) -> None:
    for op in ("ReduceSum", "ReduceL2"):
        require_path(op, path)
        data = with_layout(large_data[shape].astype(dtype), layout)
        if op == "ReduceSum":
            data = np.abs(data)  # well-conditioned: the flat bound applies
        result = run(op, path, data, axes=axes)
        if result is not None:
            check(op, Case(data, axes, True, False), result, cached_exact(op, data, axes))


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_large_log_sum_exp(dtype, path, large_data) -> None:
    require_path("ReduceLogSumExp", path)
    data = large_data[(3, 1_029, 70)].astype(dtype)[:, :, :12]  # 37k elements, middle axis
    for layout, axes in (("contiguous", [1]), ("negative", [-1, 0])):
        view = with_layout(data, layout)
        result = run("ReduceLogSumExp", path, view, axes=axes)
        if result is not None:
            check("ReduceLogSumExp", Case(view, axes, True, False), result,
                  cached_exact("ReduceLogSumExp", view, axes))


@pytest.mark.parametrize("op", OPS)
def test_fast_kernels_serve_common_cases(op: str) -> None:
    """Once a fast module exists it must serve plain float32/float64 reductions (not silently
    fall back to the reference everywhere)."""
    require_path(op, "fast")
    x = np.random.default_rng(1).standard_normal((64, 1_000))
    served = []
    for dtype in (np.float32, np.float64):
        for axes in ([1], [0]):
            result = run(op, "fast", x.astype(dtype), axes=axes)
            served.append(result is not None)
    assert any(served), f"{op}: the fast kernel served none of the common float cases"


def test_oracle_self_checks() -> None:
    """The oracle agrees with independent exact tools where they apply."""
    import doctest

    assert doctest.testmod(oracle).failed == 0
    rng = np.random.default_rng(7)
    for _ in range(200):
        x = rng.standard_normal(rng.integers(1, 20)) * 10.0 ** rng.integers(-300, 300, 20)[:1]
        x = np.append(x, [5e-324, -2.5e-310, 0.0])
        assert oracle.expected("ReduceSum", x)[0] == math.fsum(x.tolist())
        assert oracle.exact_sum(x) == sum(map(Fraction, x.tolist()))
        assert oracle.exact_l2(x).square == sum(Fraction(v) ** 2 for v in x.tolist())
        q = Fraction(int(rng.integers(1, 2**62)), 2 ** int(rng.integers(0, 200)))
        assert oracle.round_exact(oracle.Sqrt(q * q), np.float32) == float(np.float32(float(q)))
    # bfloat16: 1 + 2**-8 + 2**-30 rounds up once; through float32 it would tie down to 1.0
    assert oracle.round_exact(Fraction(1) + Fraction(1, 2**8) + Fraction(1, 2**30),
                              oracle.bfloat16) == 1.0078125
    assert oracle.round_exact(Fraction(65520), np.float16) == math.inf
    assert oracle.round_exact(Fraction(65519), np.float16) == 65504.0
    assert oracle.round_exact(Fraction(1, 2**1075), np.float64) == 0.0  # tie to even: zero
    assert oracle.round_exact(Fraction(3, 2**1076), np.float64) == 5e-324
    # subnormal spacing: float16 3 * 2**-24 against exact 2 * 2**-24 is one ulp
    assert oracle.ulp_error(np.float16(3 * 2.0**-24), Fraction(2, 2**24), np.float16) == 1.0
    assert oracle.ulp_error(np.float32(np.inf), Fraction(2**128), np.float32) == 0.0  # overflow
    assert oracle.ulp_error(np.float32(np.inf), Fraction(2**127), np.float32) == math.inf
