"""The compiled ReduceSumSquare and ReduceLogSum (:mod:`onnx_reduce.kernels.fast.derived`)
against exact results (``oracle``: Fractions, mpmath), in every layout and at threaded sizes.

Every call runs under ``kernel_path("fast")``, so a silent fallback to the reference fails.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

import oracle
from onnx_reduce import reduce_log_sum, reduce_sum_square
from onnx_reduce.kernels import dispatch, exact_lse
from onnx_reduce.kernels.dispatch import kernel_path
from onnx_reduce.kernels.exact_log_sum import log_sum_suspects
from onnx_reduce.kernels.rounding import round_to
from onnx_reduce.plan import make_plan
from onnx_reduce.spec import Request, latest, resolve
from test_properties import with_layout

pytest.importorskip("numba")
from onnx_reduce.kernels.fast import derived, state_rows, sum_l2

NARROW = [np.dtype(np.float32), np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)]
FLOATS = [*NARROW, np.dtype(np.float64)]
FUNCTIONS = {"ReduceSumSquare": reduce_sum_square, "ReduceLogSum": reduce_log_sum}
OPS = list(FUNCTIONS)
#: (shape, axes, view): inner, outer, middle, split, all, and views that
#: are not C-contiguous (transposed, negative strides, every other element)
LAYOUTS = [((300, 256), (1,), None), ((300, 256), (0,), None), ((16, 70, 64), (1,), None),
           ((40, 7, 300), (0, 2), None), ((70000,), (0,), None),
           ((256, 300), (0,), "transposed"), ((300, 256), (1,), "negative"),
           ((300, 256), (1,), "sliced"), ((5, 3, 7), (0, 2), None), ((8, 128), (1,), None)]


@pytest.fixture(autouse=True)
def _threaded_sizes(monkeypatch):
    """The threaded kernels on modest inputs (the threshold is a tuning knob)."""
    monkeypatch.setattr(sum_l2, "PARALLEL_MIN", 1 << 16)


def _data(op: str, shape: tuple, dtype: np.dtype, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    values = rng.standard_normal(shape) * 3
    return (np.abs(values) if op == "ReduceLogSum" else values).astype(dtype)


def _fast(op: str, data: np.ndarray, axes) -> np.ndarray:
    with kernel_path("fast"):
        return FUNCTIONS[op](data, axes=list(axes), keepdims=False)


def _bits(a: np.ndarray) -> np.ndarray:
    return np.atleast_1d(a).view(np.uint8)


def _assert_within(op: str, got: np.ndarray, data: np.ndarray, axes: tuple) -> None:
    exact = oracle.exact(op, data, axes, keepdims=False)
    worst = oracle.max_ulp_error(got, exact, data.dtype)
    assert worst <= (2 if data.dtype == np.float64 else 1), f"{op} {data.dtype}: {worst} ulp"


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize(("shape", "axes", "view"), LAYOUTS, ids=str)
def test_every_layout_within_the_contract(op, dtype, shape, axes, view) -> None:
    """Narrow floats correctly rounded (their float64 sums are far more precise than the
    dtype); float64 within 2 ulp; views give the same bits as C-contiguous copies."""
    data = _data(op, shape, dtype, seed=sum(shape))
    data = data if view is None else with_layout(data, view)
    got = _fast(op, data, axes)
    assert got.dtype == dtype
    assert got.shape == oracle.output_shape(data.shape, axes, False)
    if dtype == np.float64:
        _assert_within(op, got, data, axes)
    else:  # the correctly rounded result
        want = oracle.expected(op, data, axes, keepdims=False)
        np.testing.assert_array_equal(got.astype(np.float64), want.astype(np.float64))
    same = _fast(op, np.ascontiguousarray(data), axes)
    np.testing.assert_array_equal(_bits(got), _bits(same))


@pytest.mark.parametrize(("dtype", "values", "want"), [
    (np.float32, [2e19, 2e19], math.inf),  # 8e38: past float32's range, as the true result
    (np.float32, [1e19, 1e19], 2e38),
    (np.float32, [1e-30, 1e-30], 0.0),  # 2e-60 underflows float32, as the true result
    (np.float16, [200.0, 200.0], math.inf),
    (np.float16, [100.0, 120.0], 24400.0),
    (np.float64, [3e200, 4e200], math.inf),
    (np.float64, [3e-162, 4e-162], 2.5e-323),  # subnormal, as the true result
    (np.float64, [1e-160, 1e-160], 2e-320),
    (np.float32, [np.inf, 1.0], math.inf), (np.float32, [np.nan, 1.0], math.nan),
    (np.float64, [-np.inf, 1.0], math.inf), (np.float64, [np.nan, np.inf], math.nan),
], ids=str)
def test_sum_square_overflows_and_underflows_only_as_the_true_result(dtype, values, want):
    data = np.array([values, [3.0, 4.0]], dtype)
    got = _fast("ReduceSumSquare", data, (1,))
    assert got.dtype == dtype
    if math.isnan(want):
        assert math.isnan(float(got[0]))
    else:
        assert float(got[0]) == float(np.array(want, dtype))
    assert float(got[1]) == 25.0


@pytest.mark.parametrize("columns", [False, True], ids=["rows", "columns"])
def test_float64_sum_square_rescales_the_stretches_whose_squares_may_underflow(columns) -> None:
    """float64 ReduceSumSquare's one call sums a stretch of outputs' squares unscaled, and again
    scaled when a sum is so small that its squares may have rounded in the subnormal range:
    a row of 1.4e-162 in the first stretch (squares of 0.4 subnormal units, 0 unscaled: a sum of
    0 from a row that is not all zeros) and one of 3e-162 in the second (squares of 1.82 units,
    2 unscaled: 20 units where the true sum is 18.2), beside rows of zeros (zero either way),
    ordinary rows and (in the second) a row whose squares overflow, as its true sum does."""
    rows = state_rows.STRETCH + 5
    data = np.random.default_rng(3).standard_normal((rows, 10))
    tiny, zero = [1, rows - 2], [2, rows - 1]
    data[tiny] = [[1.4e-162], [3e-162]]
    data[zero] = 0.0
    data[rows - 4] = 1e155
    if columns:
        data = np.ascontiguousarray(data.T)
    axes = (0,) if columns else (1,)
    got = _fast("ReduceSumSquare", data, axes)
    want = oracle.expected("ReduceSumSquare", data, axes, keepdims=False)
    assert float(want[tiny[0]]) == 4 * 5e-324
    assert float(want[tiny[1]]) == 18 * 5e-324
    checked = [*tiny, *zero, rows - 4]
    np.testing.assert_array_equal(got[checked], want[checked])
    _assert_within("ReduceSumSquare", got, data, axes)


@pytest.mark.parametrize("op", OPS)
def test_float64_split_axes_leave_to_the_general_path_what_they_cannot_vouch_for(op) -> None:
    """Split axes walked in place (slabs of rows added up) hand the general path a call with
    an output whose squares may have rounded in the subnormal range (3e-162: 1.82 units each),
    a zero output, or an inf: each output as the exact result has it."""
    data = np.abs(np.random.default_rng(4).standard_normal((2, 600, 300)))
    data[:, 5] = 3e-162
    data[:, 6] = 0.0
    plan = make_plan(Request(latest(op), (0, 2), False, False), data.shape)
    assert derived._row_walk(data, plan)[1][2] is False  # slabs added up
    for special in (None, np.inf):
        if special is not None:
            data[1, 7, 3] = special
        got = _fast(op, data, (0, 2))
        want = oracle.expected(op, data, (0, 2), keepdims=False)
        np.testing.assert_array_equal(got[5:8], want[5:8])
        _assert_within(op, got[8:], data[:, 8:], (0, 2))


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize(("values", "want"), [
    ([0.25, 0.25, 0.5], 0.0),  # a sum of exactly 1: log 1
    ([0.0, 0.0, 0.0], -math.inf),
    ([1.0, -3.0, 1.0], math.nan),  # a negative sum
    ([np.inf, 1.0, 1.0], math.inf), ([np.inf, -np.inf, 1.0], math.nan),
    ([np.nan, 1.0, 1.0], math.nan), ([-np.inf, 1.0, 1.0], math.nan),
], ids=str)
def test_log_sum_special_values_as_the_log_of_the_sum(dtype, values, want) -> None:
    data = np.array([values, [1.0, 2.0, 4.0]], dtype)
    got = _fast("ReduceLogSum", data, (1,)).astype(np.float64)
    if math.isnan(want):
        assert math.isnan(got[0])
    else:
        assert got[0] == want
    assert got[1] == float(np.array(math.log(7.0), dtype))


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_log_sum_near_one_and_cancelling_sums_are_recomputed(dtype) -> None:
    """Rows of probabilities (sum ~1, log ~0, where a float64 sum's rounding is many ulps of
    the result) and rows whose large terms cancel, against the exact log of the exact sum."""
    rng = np.random.default_rng(7)
    p = rng.random((64, 300))
    rows = (p / p.sum(axis=1, keepdims=True)).astype(dtype)
    big = float(ml_dtypes.finfo(dtype).max) ** 0.5 if dtype != np.float16 else 1000.0
    cancel = np.tile(np.array([big, 1.5, -big], dtype), (8, 1))
    for data in (rows, cancel, np.ascontiguousarray(rows.T)):
        axes = (0,) if data.shape[0] == 300 else (1,)
        got = _fast("ReduceLogSum", data, axes)
        if dtype == np.float64:
            _assert_within("ReduceLogSum", got, data, axes)
        else:  # the correctly rounded result
            want = oracle.expected("ReduceLogSum", data, axes, keepdims=False)
            np.testing.assert_array_equal(got.astype(np.float64), want.astype(np.float64))


@pytest.mark.parametrize("second", [False, True], ids=["first half", "second half"])
def test_float64_log_sum_suspects_of_one_half_reach_the_exact_path(second, monkeypatch):
    """Two threads, sums near 1 (suspects) in one half only: the other half's "none" joins
    as no suspect, and the near-1 rows are recomputed (within the contract)."""
    monkeypatch.setattr(derived, "ONE_CALL_THREADED_BYTES", 1024)
    monkeypatch.setattr(derived, "num_threads", lambda: 2)
    data = np.abs(np.random.default_rng(6).standard_normal((64, 300))) * 3
    near = slice(32, 64) if second else slice(0, 32)
    data[near] /= data[near].sum(axis=1, keepdims=True)
    got = _fast("ReduceLogSum", data, (1,))
    _assert_within("ReduceLogSum", got, data, (1,))
    assert np.all(np.abs(got[near]) < 1e-12)


def test_narrow_logs_flags_only_what_the_bound_cannot_vouch_for() -> None:
    """The suspects of float32 logs: a sum near 1, a sum whose magnitudes (bounded by the
    norm) dwarf it, a sum of uncertain sign; not a plain sum far from 1."""
    total = np.array([1.0 + 1e-9, 1000.0, 1.0, 1e-12, 0.0, -5.0, np.inf])
    norm = np.array([0.1, 60.0, 1e6, 1.0, 0.0, 3.0, np.inf])
    logs, suspect = np.empty(7), np.empty(7, np.bool_)
    n = 1000
    derived._narrow_logs(total, norm, math.sqrt(n), 2 * 2.0**-53 * (n - 1), 0.5 * 2.0**-24,
                         0.5 * 2.0**-148, logs, suspect)
    assert suspect.tolist() == [True, False, True, True, False, False, False]
    assert logs[1] == math.log(1000.0)
    assert logs[4] == -math.inf
    assert math.isnan(logs[5])
    assert logs[6] == math.inf


@pytest.mark.parametrize("dtype", NARROW, ids=str)
def test_narrow_logs_flag_every_output_the_reference_test_flags(dtype) -> None:
    """The compiled suspects test is :func:`log_sum_suspects` with a spacing never above the
    true one: on sums near 1, cancelling, tiny, huge and of uncertain sign it flags at least
    what that test flags."""
    rng = np.random.default_rng(3)
    total = np.concatenate([1 + rng.standard_normal(200) * 10.0 ** rng.uniform(-12, 0, 200),
                            10.0 ** rng.uniform(-30, 30, 200), rng.standard_normal(100)])
    norm = np.abs(total) * 10.0 ** rng.uniform(-1, 8, total.size)
    n = 5000
    spread = math.sqrt(n) * (1 + 4 * 2.0**-53)
    gamma = 2 * 2.0**-53 * (n - 1)
    p, emin = exact_lse.float_format(dtype)
    room = exact_lse.tolerance_ulps(dtype) - 0.5
    out, suspect = np.empty(total.size), np.empty(total.size, np.bool_)
    derived._narrow_logs(total, norm, spread, gamma, room * 2.0**-p,
                         room * 2.0**(emin - p + 1), out, suspect)
    with np.errstate(divide="ignore", invalid="ignore"):
        rounded = round_to(np.log(total), dtype)
    sums = np.stack([total, norm * spread], axis=-1)
    want = log_sum_suspects(sums, rounded, dtype, n, (gamma, 2.0**-53))
    assert want.any()
    assert not (want & ~suspect).any()


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_the_bound_lane_and_the_general_path_agree(op, dtype) -> None:
    """Small and threaded sizes: the lane bound once per shape gives the general path's bits."""
    for shape, axes in [((8, 128), (1,)), ((300, 256), (0,)), ((40, 7, 300), (0, 2))]:
        data = _data(op, shape, dtype, seed=3)
        plan = make_plan(Request(latest(op), axes, False, False), shape)
        lane = dispatch.bind_fast(op, dtype, plan)
        assert lane is not None
        got = lane(data)
        np.testing.assert_array_equal(_bits(got), _bits(_fast(op, data, axes)))


@pytest.mark.parametrize("op", OPS)
def test_integers_and_empty_reductions_are_left_to_the_reference_path(op) -> None:
    plan = make_plan(Request(latest(op), (1,), False, False), (4, 0))
    assert dispatch.bind_fast(op, np.dtype(np.float32), plan) is None
    ints = make_plan(Request(resolve(op, 18), (1,), False, False), (4, 6))
    assert dispatch.bind_fast(op, np.dtype(np.int32), ints) is None
    with kernel_path("fast"), pytest.raises(RuntimeError, match="no fast kernel"):
        FUNCTIONS[op](np.ones((4, 6), np.int32), axes=[1], opset=18)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize(("shape", "axes"), [((300, 256), (1,)), ((256, 300), (0,)),
                                             ((301, 3), (1,)), ((3, 301), (0,)),
                                             ((9, 40, 30), (0, 2)), ((4, 2000), (0, 1)),
                                             ((9, 40, 30), (1,)), ((1, 40, 30), (1,)),
                                             ((5, 3, 2, 300), (0, 3))])
def test_float64_states_on_two_threads_give_the_one_piece_bits(op, shape, axes, monkeypatch):
    """Halves on two threads, by the one call (rows, columns, slabs of a middle axis: half the
    slabs each; split axes: half of each slab's rows) or the general states path (the rest),
    each with a slice holding inf or NaN in either half: the one-piece bits."""
    data = _data(op, shape, np.dtype(np.float64), seed=5)
    for special in (None, 0, -1):
        if special is not None:
            data.reshape(-1)[special] = np.inf if special else np.nan
        one = _fast(op, data, axes)
        with monkeypatch.context() as patch:
            patch.setattr(derived, "THREADED_BYTES", 1024)
            patch.setattr(derived, "ONE_CALL_THREADED_BYTES", 1024)
            patch.setattr(derived, "num_threads", lambda: 2)
            np.testing.assert_array_equal(_bits(_fast(op, data, axes)), _bits(one))
        if special is None:
            _assert_within(op, one, data, axes)


@pytest.mark.parametrize(("data", "patched"), [
    (np.ones((64, 128))[:, ::2], "states"), (np.ones((64, 64)), "one call")], ids=str)
def test_an_error_on_the_second_thread_reaches_the_caller(data, patched, monkeypatch) -> None:
    from onnx_reduce.kernels import states

    monkeypatch.setattr(derived, "THREADED_BYTES", 1024)
    monkeypatch.setattr(derived, "ONE_CALL_THREADED_BYTES", 1024)
    monkeypatch.setattr(derived, "num_threads", lambda: 2)
    data = data.copy() if patched == "one call" else data
    data[32:] = -1.0
    if patched == "states":
        real = states.partial

        def partial(op, data, axes):
            if data[0, 0] == -1.0:
                raise MemoryError("the second half")
            return real(op, data, axes)

        monkeypatch.setattr(states, "partial", partial)
    else:
        real = derived._values

        def values(op, walk, tree):
            (base, *_), _ = walk
            if base[0] == -1.0:
                raise MemoryError("the second half")
            return real(op, walk, tree)

        monkeypatch.setattr(derived, "_values", values)
    with pytest.raises(MemoryError, match="second half"):
        _fast("ReduceSumSquare", data, (1,))


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize(("shape", "axes", "walk"), [
    ((8, 128), (1,), "rows"), ((70000,), (0,), "rows"), ((4, 1, 6, 5), (2, 3), "rows"),
    ((9000, 3), (1,), "rows"), ((40000, 3), (1,), "rows"), ((700, 32), (1,), "rows"),
    ((300, 256), (0,), "columns"), ((6, 5, 1, 4), (0, 1), "columns"),
    ((16, 70, 64), (1,), "slabs"), ((8, 8, 16), (1,), "slabs"), ((2, 3, 50, 8), (2,), "slabs"),
    ((64, 96, 96), (1,), "slabs"), ((3, 4, 5, 16), (1, 2), "slabs"),
    ((40, 7, 300), (0, 2), "split"), ((4, 6, 5, 256), (0, 3), "split"),
    ((64, 96, 96), (0, 2), "split"),
    ((40, 7, 200), (0, 2), "copy"), ((8, 8, 16), (0, 2), "copy"), ((3, 5, 7, 2), (0, 2), "copy"),
    ((2, 40000, 3), (1,), "copy"), ((100, 2000, 2), (1,), "copy"),
    ((32, 96, 96), (0, 1, 2), "rows"), ((8, 3, 300, 200), (0, 2), None)], ids=str)
def test_small_float64_states_take_one_call_with_the_general_bits(op, shape, axes, walk,
                                                                 monkeypatch) -> None:
    """C-contiguous rows and columns, middle axes (slabs of columns), split axes (slabs of rows
    added up: long rows, or from ONE_CALL_THREADED_BYTES), all walked in place, and other
    small layouts (copied, kept axes first): the values in one compiled call (the general
    states path is not called); rows, columns and copies bit for bit what that path gives, the
    middle axes what each slab's columns give as an outer-axis reduction, the split axes
    within 2**-52 of the general path; other layouts take the general path."""
    data = _data(op, shape, np.dtype(np.float64), seed=7)
    plan = make_plan(Request(latest(op), axes, False, False), shape)
    found = derived._row_walk(data, plan)
    copied = found is None and derived._walk_of(data, plan) is not None
    kind = ("copy" if copied else None if found is None else "split" if not found[1][2]
            else "slabs" if found[1][0] > 1 else "rows" if found[0][3] == 1 else "columns")
    assert kind == walk
    if walk is not None:
        def general(*args):
            raise AssertionError("the general states path ran")
        monkeypatch.setattr(derived, "_partial_state", general)
    got = _fast(op, data, axes)
    monkeypatch.undo()
    if walk == "slabs":
        lead, trail = data.shape[:min(axes)], data.shape[max(axes) + 1:]
        slabs = data.reshape(math.prod(lead), -1, math.prod(trail))
        want = np.stack([_fast(op, slab, (0,)) for slab in slabs]).reshape(got.shape)
    else:
        monkeypatch.setattr(derived, "_walk_of", lambda data, plan: None)
        want = _fast(op, data, axes)
    if walk == "split":
        np.testing.assert_allclose(got, want, rtol=2**-52, atol=0)
    else:
        np.testing.assert_array_equal(_bits(got), _bits(want))
    _assert_within(op, got, data, axes)
    monkeypatch.undo()
    data.reshape(-1)[[0, -1]] = [np.inf, np.nan]  # slices the one call hands on
    got = _fast(op, data, axes)
    with kernel_path("reference"):
        want = FUNCTIONS[op](data, axes=list(axes), keepdims=False)
    special = ~np.isfinite(want)
    assert special.sum() in (1, 2)
    np.testing.assert_array_equal(got[special], want[special])
    np.testing.assert_allclose(got[~special], want[~special], rtol=1e-15)


def test_dd_logs_give_the_long_double_finish_where_they_are_sure() -> None:
    """float64 ReduceLogSum's finish in float64 (:func:`derived._dd_logs`): the state's own
    finish (the log of the sum rounded into ``long double``, rounded to float64) for every
    output it is sure of, over sums from 1 to 1e300 given as double-doubles; unsure of those
    under 1, not finite or too near a rounding boundary (all of them, through
    ``_logs_of_sums``, are the state's finish). Fails when its error bound is taken as 0."""
    rng = np.random.default_rng(11)
    head = np.concatenate([rng.uniform(1.0, 3.0, 100_000), rng.uniform(3.0, 1e4, 100_000),
                           10.0 ** rng.uniform(0, 300, 50_000), [0.5, 0.0, -1.0, np.inf,
                                                                  np.nan, 1.0]])
    with np.errstate(invalid="ignore", divide="ignore"):
        tail = np.nan_to_num(head * np.spacing(1.0) * rng.uniform(-0.5, 0.5, head.size))
        head, tail = head + tail, (head - (head + tail)) + tail
        want = np.log(np.add(head, tail, dtype=np.longdouble)).astype(np.float64)
    values, unsure = np.empty(head.size), np.empty(head.size, np.bool_)
    assert derived._dd_logs(head, tail, values, unsure)
    sure = ~unsure
    np.testing.assert_array_equal(values[sure], want[sure])
    assert unsure[-6:].all()
    assert sure.mean() > 0.5
    acc = np.dtype(np.longdouble)
    got, _ = derived._logs_of_sums(np.concatenate([head, np.abs(head)]),
                                   np.concatenate([tail, tail]), acc, derived._one_chunk(
                                       make_plan(Request(latest("ReduceLogSum"), (1,), False,
                                                         False), (1, 2))))
    np.testing.assert_array_equal(_bits(got), _bits(want))


def test_clear_logs_clears_only_what_the_state_test_passes() -> None:
    """float64 ReduceLogSum's one call clears outputs in float64 that the state path's test
    (:func:`log_sum_suspects`, in the accumulator) passes, on sums near 1, cancelling, tiny,
    huge, subnormal and of uncertain sign; most plain sums are cleared."""
    rng = np.random.default_rng(5)
    total = np.concatenate([1 + rng.standard_normal(300) * 10.0 ** rng.uniform(-16, 0, 300),
                            10.0 ** rng.uniform(-300, 300, 300),
                            rng.standard_normal(100) * 1e-11,
                            [5e-324, 1e-310, 2.0**-1000, 0.0, 1e308]])
    with np.errstate(over="ignore"):  # an infinite bound is never cleared
        magnitude = np.abs(total) * 10.0 ** rng.uniform(0, 6, total.size)
    magnitude[600:700] = 10.0 ** rng.uniform(4, 8, 100)  # cancelling: sums of either sign
    n = 4000
    gamma, v = 2 * 2.0**-64 * 40, 2.0**-64  # the long double accumulator's bound
    acc = np.longdouble
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        values = np.log(total.astype(acc)).astype(np.float64)
    clear = np.empty(total.size, np.bool_)
    derived._clear_logs(total, magnitude, values, gamma, v, 1.5, clear)
    sums = np.stack([total.astype(acc), magnitude.astype(acc)], axis=-1)
    flagged = log_sum_suspects(sums, values, np.dtype(np.float64), n, (gamma, v))
    assert flagged.any()
    assert not (flagged & clear).any()
    assert clear.sum() > 0.5 * (~flagged).sum()


def test_clear_logs_takes_the_spacing_below_r_from_its_bits() -> None:
    """At a power of two the spacing below ``|r|`` is the smaller one: a bound of 1.4 times
    the larger spacing is cleared one ulp above 4 (room 1.5 of it), not at 4 itself."""
    r = np.array([4.0, np.nextafter(4.0, 8.0)])
    b = 1.4 * 2.0**-50  # E / (S - E), with gamma 1 and v 0
    total = np.full(2, 1e6)
    clear = np.empty(2, np.bool_)
    derived._clear_logs(total, total * b / (1 + b), r, 1.0, 0.0, 1.5, clear)
    assert clear.tolist() == [False, True]
