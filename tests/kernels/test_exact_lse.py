"""ReduceLogSumExp where the result nearly cancels the shift: the a-priori bounds, the exact
recomputation of the outputs they flag (kernels/exact_lse.py), on every path and layout.

Expected values come from the mpmath oracle (tests/oracle.py); the contract is 1 ulp for
float16/bfloat16/float32 and 2 ulp for float64.
"""

from __future__ import annotations

import math
import sys

import mpmath
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import onnx_reduce
import oracle
from onnx_reduce.kernels import exact_lse
from onnx_reduce.kernels.dispatch import kernel_path
from onnx_reduce.plan import make_plan
from onnx_reduce.plan.cache import BoundedCache
from onnx_reduce.spec import Request, resolve
from onnx_reduce.spec.dtypes import bfloat16

lse_module = pytest.importorskip("onnx_reduce.kernels.fast.log_sum_exp")

FLOATS = [np.dtype(np.float16), bfloat16, np.dtype(np.float32), np.dtype(np.float64)]
PATHS = ["reference", "fast", "fast-general"]


def tolerance(dtype: np.dtype) -> float:
    return 2.0 if dtype == np.float64 else 1.0


def lse(x: np.ndarray, axes, path: str) -> np.ndarray:
    """ReduceLogSumExp-18 of ``x`` on one path: the reference, the fast path as the functions
    call it (bound kernels for small C-contiguous arrays), or the fast general kernel."""
    if path == "fast-general":
        request = Request(resolve("ReduceLogSumExp", 18), axes, True, False)
        result = lse_module.reduce_log_sum_exp(x, make_plan(request, x.shape))
        assert result is not None
        return result
    with kernel_path(path):
        return onnx_reduce.reduce_log_sum_exp(x, axes=axes, opset=18)


def worst_ulps(x: np.ndarray, axes, got: np.ndarray) -> float:
    exact = oracle.exact("ReduceLogSumExp", x, axes, True)
    assert got.shape == exact.shape
    assert got.dtype == x.dtype
    return oracle.max_ulp_error(got, exact, x.dtype)


def assert_within_contract(x: np.ndarray, axes, path: str) -> None:
    got = lse(x, axes, path)
    assert worst_ulps(x, axes, got) <= tolerance(x.dtype), (path, x.dtype)


def log_softmax_rows(rows: int, length: int, dtype, seed: int = 0) -> np.ndarray:
    """Rows ``v - LSE(v)`` rounded to ``dtype``: their LSE is ~0 by construction."""
    rng = np.random.default_rng(seed)
    v = rng.standard_normal((rows, length)) * 3
    with mpmath.workprec(200):
        shift = [mpmath.log(mpmath.fsum(mpmath.exp(mpmath.mpf(float(a))) for a in row))
                 for row in v]
        out = [[float(mpmath.mpf(float(a)) - s) for a in row]
               for row, s in zip(v, shift, strict=True)]
    return np.array(out).astype(dtype)


# ----------------------------------------------------------------------------- the issue's cases


@pytest.mark.parametrize("path", PATHS)
def test_issue_float32_pair(path):
    """Issue 16: [-0.6306035, -0.7598651] float32 gave -6.88e-15 on the fast path (+9.5367e-14)."""
    x = np.array([-0.6306035, -0.7598651], np.float32)
    got = lse(x, None, path)
    assert worst_ulps(x, None, got) <= 1.0
    assert got.reshape(-1)[0] > 0


@pytest.mark.parametrize("dtype", [np.dtype(np.float32), np.dtype(np.float64)], ids=str)
@pytest.mark.parametrize("path", PATHS)
def test_issue_log_softmax_rows(dtype, path):
    """Issue 16: 300x20 log-softmax rows: float32 fast path 7,340 ulp off, reference 2.3;
    float64 reference 1.8e13 ulp, fast 1e16."""
    x = log_softmax_rows(300, 20, dtype)
    assert_within_contract(x, [1], path)


@pytest.mark.parametrize("path", PATHS)
def test_issue_float64_pair_near_minus_ln2(path):
    """Issue 16: a float64 pair near -ln 2 whose LSE is ~0.004 was 5 ulp off."""
    x = np.array([[-math.log(2) + 0.004, -math.log(2) + 0.004 - 2**-40],
                  [-0.6906, -0.6951], [-0.69, -0.6963], [-0.5, -0.9078]])
    assert_within_contract(x, [1], path)


def _count_mpmath_calls(monkeypatch) -> list:
    calls: list = []
    original = exact_lse._mpmath_lse
    monkeypatch.setattr(exact_lse, "_mpmath_lse",
                        lambda row, dtype: calls.append(1) or original(row, dtype))
    return calls


@pytest.mark.parametrize("path", ["reference", "fast"])
def test_float64_log_softmax_is_decided_in_triple_double(path, monkeypatch):
    """float64 log-softmax rows have LSE ~1e-17: beyond double-double, decided by the compiled
    triple-double stage without mpmath."""
    calls = _count_mpmath_calls(monkeypatch)
    x = log_softmax_rows(20, 7, np.float64, seed=3)
    assert_within_contract(x, [1], path)
    assert exact_lse.first_stage() is not exact_lse.double_double_lse
    assert not calls


@pytest.mark.parametrize("path", ["reference", "fast"])
def test_float64_log_softmax_needs_mpmath_after_double_double(path, monkeypatch):
    """Without numba the numpy double-double stage comes first: mpmath decides those rows."""
    calls = _count_mpmath_calls(monkeypatch)
    monkeypatch.setattr(exact_lse, "first_stage", lambda: exact_lse.double_double_lse)
    x = log_softmax_rows(20, 7, np.float64, seed=3)
    assert_within_contract(x, [1], path)
    assert calls


@pytest.mark.parametrize("path", ["reference", "fast"])
def test_results_beyond_triple_double_reach_mpmath(path, monkeypatch):
    """log(exp(-60) + exp(a)), a the float64 nearest log1p(-exp(-60)), is ~3e-43: below what
    triple-double decides (its bound ~2**-133 here); mpmath gives it within the contract."""
    calls = _count_mpmath_calls(monkeypatch)
    x = np.array([[-60.0, -8.75651076269652e-27], [-0.5, -0.9]])
    got = lse(x, [1], path)
    assert calls == [1]
    assert worst_ulps(x, [1], got) <= tolerance(x.dtype)
    assert 1e-43 < got[0, 0] < 1e-42


def test_the_first_stage_is_double_double_without_numba(monkeypatch):
    monkeypatch.setitem(sys.modules, "onnx_reduce.kernels.fast.extended", None)
    assert exact_lse.first_stage() is exact_lse.double_double_lse
    assert exact_lse.stages() == ((exact_lse.double_double_lse, 0.0),)


def _stage_calls(monkeypatch) -> tuple[list, list]:
    """The rows each call of the double- and the triple-double stage gets (patched where
    :func:`exact_lse.stages` imports them)."""
    extended = pytest.importorskip("onnx_reduce.kernels.fast.extended")
    calls: tuple[list, list] = ([], [])
    for name, record in zip(("dd_lse_rows", "td_lse_rows"), calls, strict=True):
        original = getattr(extended, name)
        monkeypatch.setattr(extended, name,
                            lambda rows, record=record, original=original:
                            record.append(len(rows)) or original(rows))
    return calls


@pytest.mark.parametrize("path", PATHS)
def test_float32_suspects_are_decided_in_double_double(path, monkeypatch):
    """float32 log-softmax rows (every output suspect) need far less than triple-double: the
    double-double stage decides them all."""
    cheap, precise = _stage_calls(monkeypatch)
    x = log_softmax_rows(200, 16, np.float32, seed=5)
    assert_within_contract(x, [1], path)
    assert sum(cheap) == 200
    assert not precise


@pytest.mark.parametrize("path", ["fast", "fast-general"])
def test_float64_pairs_are_decided_in_double_double(path, monkeypatch):
    """float64 pairs of normal data: about half their LSEs are under 1 (suspect on the fast
    path), none near enough to 0 to need more than double-double."""
    cheap, precise = _stage_calls(monkeypatch)
    x = np.random.default_rng(9).standard_normal((3000, 2))
    assert_within_contract(x, [1], path)
    assert sum(cheap) > 1000
    assert not precise


@pytest.mark.parametrize("path", ["fast", "fast-general"])
def test_float64_results_near_0_skip_double_double(path, monkeypatch):
    """float64 log-softmax rows (LSE ~1e-17, under DD_FLOOR) go straight to triple-double;
    the pairs beside them (LSE ~0.5) take double-double."""
    cheap, precise = _stage_calls(monkeypatch)
    x = np.concatenate([log_softmax_rows(50, 2, np.float64, seed=6),
                        np.array([[-0.2, -0.9], [-0.1, -1.5]])])
    assert_within_contract(x, [1], path)
    assert sum(cheap) == 2
    assert sum(precise) == 50


# ----------------------------------------------------------------------------- the machinery


def test_threshold_is_the_binade_of_the_bound():
    """Results above the threshold are within the contract by the bound alone."""
    for dtype in FLOATS:
        for n in (2, 20, 1000, 1 << 20):
            bound = exact_lse.fast_bound(dtype, n)
            limit = exact_lse.threshold(dtype, bound)
            p = {bfloat16: 8, np.dtype(np.float16): 11, np.dtype(np.float32): 24}.get(dtype, 53)
            room = (tolerance(dtype) - 0.5) * limit * 2.0 ** (1 - p)
            assert bound[0] + 2 * limit * bound[1] <= room
            assert bound[0] + limit * bound[1] > room / 2 / 2  # the least such power of two
    single = exact_lse.fast_bound(np.dtype(np.float32), 1)
    assert exact_lse.threshold(np.dtype(np.float32), single) < 0  # exact: none suspect


def test_double_double_exp_against_mpmath():
    d = np.array([0.0, -1e-300, -2**-30, -0.1, -0.5, -1.0, -7.25, -100.5, -700.0])
    dl = d * 2.0**-60
    head, tail = exact_lse._dd_exp(d, dl)
    with mpmath.workprec(300):
        for a, b, h, t in zip(d, dl, head, tail, strict=True):
            want = mpmath.exp(mpmath.mpf(a) + mpmath.mpf(b))
            error = abs(mpmath.mpf(h) + mpmath.mpf(t) - want)
            if want > mpmath.mpf(2) ** -1000:
                assert error < want * mpmath.mpf(2) ** -100
            else:  # the low part is subnormal: absolute error of a subnormal spacing
                assert error <= mpmath.mpf(2) ** -1074


def test_double_double_log_against_mpmath():
    s = np.array([1.0, 1 + 2**-50, 1.5, 7.0, 1e6])
    low = np.array([2**-60, 0.0, 2**-58, -(2**-55), 1e-11])
    head, tail = exact_lse._dd_log(s, low)
    with mpmath.workprec(300):
        for a, b, h, t in zip(s, low, head, tail, strict=True):
            want = mpmath.log(mpmath.mpf(a) + mpmath.mpf(b))
            assert abs(mpmath.mpf(h) + mpmath.mpf(t) - want) < mpmath.mpf(2) ** -100


def test_refinement_never_touches_specials_or_exact_outputs():
    x = np.array([[np.nan, 0.0], [np.inf, 1.0], [-np.inf, -np.inf], [0.0, -np.inf]], np.float32)
    for path in PATHS:
        got = lse(x, [1], path).reshape(-1)
        assert np.isnan(got[0])
        assert list(got[1:]) == [np.inf, -np.inf, 0.0]


# ----------------------------------------------------------------------------- properties

_PROPERTY = settings(max_examples=40, deadline=None,
                     suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@st.composite
def cancelling_rows(draw, dtype):
    """Rows whose LSE nearly cancels the maximum: log-softmax rows, pairs near -ln 2, rows
    shifted by their own (rounded) LSE, with lengths around BLOCK/CHUNK edges."""
    kind = draw(st.sampled_from(["softmax", "pair", "shifted"]))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    rows = draw(st.integers(1, 4))
    if kind == "pair":
        a = -math.log(2) + draw(st.floats(-0.01, 0.01))
        v = np.stack([np.full(rows, a), a - rng.uniform(0, 0.02, rows)], axis=1)
        return v.astype(dtype)
    length = draw(st.sampled_from([2, 3, 7, 63, 64, 65, 200, 1023, 1025]))
    v = rng.standard_normal((rows, length)) * draw(st.sampled_from([0.5, 3.0, 20.0]))
    shift = np.log(np.exp(v - v.max(axis=1, keepdims=True)).sum(axis=1)) + v.max(axis=1)
    v = v - shift[:, None] + (0 if kind == "softmax" else rng.uniform(-1e-6, 1e-6, (rows, 1)))
    return v.astype(dtype)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@_PROPERTY
@given(data=st.data())
def test_nearly_cancelling_rows_within_contract(dtype, data):
    x = data.draw(cancelling_rows(dtype))
    layout = data.draw(st.sampled_from(["inner", "outer", "strided", "transposed"]))
    if layout == "inner":
        view, axes = x, [1]
    elif layout == "outer":
        view, axes = np.ascontiguousarray(x.T), [0]
    elif layout == "strided":
        view, axes = np.repeat(x, 2, axis=1)[:, ::2], [1]
    else:
        view, axes = np.ascontiguousarray(x.T).T, [1]
    for path in PATHS:
        assert_within_contract(view, axes, path)


@pytest.mark.parametrize("dtype", [np.dtype(np.float32), np.dtype(np.float64)], ids=str)
@pytest.mark.parametrize("axis", [0, 1])
def test_threaded_sizes_with_few_outputs(dtype, axis, monkeypatch):
    """Few outputs over more than PARALLEL_MIN elements, nearly cancelling: the split kernels
    (pieces of 4096 elements here, so the oracle's work stays small)."""
    monkeypatch.setattr(lse_module, "MIN_PIECE", 1 << 12)
    monkeypatch.setattr(lse_module, "_JOBS", BoundedCache(256))
    n = lse_module.PARALLEL_MIN // 2 + 4099
    rng = np.random.default_rng(7)
    v = rng.standard_normal((2, n)) * 2
    v[0] -= float(np.log(np.exp(v[0] - v[0].max()).sum()) + v[0].max())
    x = (v if axis == 1 else np.ascontiguousarray(v.T)).astype(dtype)
    got = lse(x, [axis], "fast-general")
    assert worst_ulps(x, [axis], got) <= tolerance(dtype)
    request = Request(resolve("ReduceLogSumExp", 18), [axis], True, False)
    job = lse_module.choose_job(lse_module.canonical(x, (axis,)), x.dtype,
                                make_plan(request, x.shape))
    assert job.kernel in (lse_module._rows_split, lse_module._rows_online_split,
                      lse_module._columns_split)


# ----------------------------------------------------------------------------- integers

INTEGERS = [np.dtype(t) for t in (np.int32, np.int64, np.uint32, np.uint64)]


@pytest.mark.parametrize("dtype", INTEGERS, ids=str)
def test_integer_lse_saturates_at_the_maximum(dtype):
    """Issue 16: [2**63-1, 2**63-1] int64 gave 9223372036854774784, below max(x)."""
    top = np.iinfo(dtype).max
    got = onnx_reduce.reduce_log_sum_exp(np.array([top, top], dtype), keepdims=False, opset=18)
    assert got.dtype == dtype
    assert int(got) == int(top)


def integer_rows(dtype):
    info = np.iinfo(dtype)
    near = st.sampled_from([int(info.min), int(info.max), 0, -1 if info.min else 1])
    value = st.one_of(st.integers(int(info.min), int(info.max)),
                      near.flatmap(lambda c: st.integers(max(int(info.min), c - 50),
                                                         min(int(info.max), c + 50))))
    return st.lists(value, min_size=1, max_size=12)


@pytest.mark.parametrize("dtype", INTEGERS, ids=str)
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_integer_lse_is_exact_monotone_and_bounded(dtype, data):
    values = data.draw(integer_rows(dtype))
    x = np.array(values, dtype)
    got = int(onnx_reduce.reduce_log_sum_exp(x, keepdims=False, opset=18))
    assert got == oracle.exact_integer_log_sum_exp(values, dtype)
    assert got >= max(values)
    i = data.draw(st.integers(0, len(values) - 1))
    if values[i] < int(np.iinfo(dtype).max):
        bigger = list(values)
        bigger[i] += 1
        higher = int(onnx_reduce.reduce_log_sum_exp(np.array(bigger, dtype), keepdims=False,
                                                    opset=18))
        assert higher >= got


@pytest.mark.parametrize("dtype", INTEGERS, ids=str)
def test_integer_lse_blocks_and_axes(dtype, monkeypatch):
    """Blocked reduction (small blocks), several outputs: the same as the oracle."""
    from onnx_reduce.kernels import blocks

    monkeypatch.setattr(blocks, "BLOCK_ELEMENTS", 8)
    info = np.iinfo(dtype)
    rng = np.random.default_rng(5)
    x = rng.integers(int(info.max) - 40, int(info.max), (3, 5, 4), dtype=dtype, endpoint=True)
    x[0, 0, 0] = info.min
    for axes in ([1], [0, 2], None):
        got = onnx_reduce.reduce_log_sum_exp(x, axes=axes, opset=18)
        want = oracle.exact("ReduceLogSumExp", x, axes, True)
        assert [int(v) for v in got.reshape(-1)] == list(want.reshape(-1))


def test_float64_block_sums_are_exact():
    """The float64 terms' split parts add up exactly inside reassociating loops: the block
    equals the exact sum of its terms computed one by one (a fold of ``(t + c) - c`` or of the
    TwoDiff by the compiler would lose ~u here), and each term is within the bound's 1.28 u."""
    rng = np.random.default_rng(11)
    x = -rng.uniform(0, 3, 1024) - 1e-3 * rng.random(1024)
    m = 0.5
    big, rest, ties = lse_module._terms_contiguous(x, 0, 64, m)
    assert ties == 0.0
    parts = [lse_module._term_parts(float(v), m) for v in x[:64]]
    with mpmath.workprec(300):
        own = mpmath.fsum(mpmath.mpf(a) + mpmath.mpf(b) for a, b in parts)
        want = mpmath.fsum(mpmath.exp(mpmath.mpf(float(v)) - mpmath.mpf(m)) for v in x[:64])
        assert abs(mpmath.mpf(big) + mpmath.mpf(rest) - own) / own < mpmath.mpf(2) ** -60
        assert abs(own - want) / want <= 1.28 * exact_lse.U


def test_float64_terms_are_one_polynomial_and_the_gap_correction():
    """Each float64 term is ``exp(d) + exp(d) * dl`` (``d + dl == x - m`` exactly, ``exp`` the
    one ``TABLE_TERMS`` picks for this CPU): one exp per element, the cost of a plain exp."""
    exp_module = pytest.importorskip("onnx_reduce.kernels.fast._exp")
    table = lse_module.TABLE_TERMS
    exp_nonpos = exp_module.exp_nonpos_table if table else exp_module.exp_nonpos
    rng = np.random.default_rng(12)
    m_values = rng.uniform(3, 40, 200)
    for x, m in zip(m_values - rng.uniform(1e-9, 13, 200), m_values, strict=True):
        big, rest = lse_module._term_parts(float(x), float(m))
        d = float(x - m)
        h = mpmath.mpf(exp_nonpos(d))
        with mpmath.workprec(300):
            dl = mpmath.mpf(float(x)) - mpmath.mpf(float(m)) - mpmath.mpf(d)
            assert abs(mpmath.mpf(big) + mpmath.mpf(rest) - h * (1 + dl)) <= h * 2.0**-70, (x, m)


@st.composite
def rows_just_above_threshold(draw):
    """float64 rows whose LSE lies in [1, 4): the least results the float64 bound vouches for
    without recomputation (threshold 1), where the kernels' error is largest in ulps."""
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    rows = draw(st.integers(1, 4))
    length = draw(st.sampled_from([2, 3, 16, 63, 64, 65, 200, 1025, 4096]))
    v = rng.standard_normal((rows, length)) * draw(st.sampled_from([0.01, 0.5, 3.0, 20.0]))
    shift = np.log(np.exp(v - v.max(axis=1, keepdims=True)).sum(axis=1)) + v.max(axis=1)
    target = rng.uniform(1.001, 4.0, (rows, 1))
    return v - shift[:, None] + target


@_PROPERTY
@given(data=st.data())
def test_float64_results_the_bound_vouches_for_are_within_contract(data):
    x = data.draw(rows_just_above_threshold())
    outer = data.draw(st.booleans())
    view, axes = (np.ascontiguousarray(x.T), [0]) if outer else (x, [1])
    limit = exact_lse.threshold(x.dtype, exact_lse.fast_bound(x.dtype, x.shape[1]))
    for path in ("fast", "fast-general"):
        got = lse(view, axes, path)
        assert not exact_lse.suspects(got, x.dtype, limit).any()  # the kernel's own results
        assert worst_ulps(view, axes, got) <= 2.0, path
