"""The bound lane (``dispatch.bind`` / ``bind_fast``: kernels bound to one op, dtype and plan)
against the exact oracle, and against the general path bit for bit; when it must step
aside; and the front door's cache."""

from __future__ import annotations

import itertools

import ml_dtypes
import numpy as np
import pytest

import onnx_reduce
import oracle
from onnx_reduce import reduce_l2, reduce_sum
from onnx_reduce.kernels import dispatch, exact_lse, reference
from onnx_reduce.kernels.dispatch import kernel_path, run_kernel
from onnx_reduce.plan import make_plan
from onnx_reduce.spec import OPS as OPS_OF_REGISTRY
from onnx_reduce.spec import REGISTRY, Request, latest, op_record
from test_properties import allowed_ulps

pytest.importorskip("numba")

FLOATS = [np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.float16),
          np.dtype(ml_dtypes.bfloat16)]
OPS = list(OPS_OF_REGISTRY)
#: The ops with fast kernels: the bound lanes' tests skip an op no fast kernel serves (its calls
#: would take the reference path: numba missing, or a new op before its kernels).
FAST_OPS = [pytest.param(op, marks=pytest.mark.skipif(not dispatch.has_fast(op),
                                                      reason=f"{op}: no fast kernels"))
            for op in OPS]
#: shapes and axes of the latency benchmark and around it: every canonical layout
LAYOUTS = [((8, 128), (1,)), ((8, 128), (0,)), ((8, 128), (0, 1)), ((8, 8, 16), (1,)),
           ((8, 8, 16), (0, 2)), ((5,), (0,)),
           ((2, 3, 4, 5), (1, 3)), ((2, 3, 4, 5), (0, 1, 2, 3)),
           ((2, 3000), (1,)), ((5, 3, 200), (0, 2)),  # rows longer than one block
           ((3, 300), (0,)), ((4, 3, 129), (1,))]  # columns wider than the narrow kernel's
#: Reduced axes of size 1 only: the elementwise part, no kernel.
ELEMENTWISE_LAYOUTS = [((3, 1, 5), (1,)), ((1, 7), (0,)), ((65536, 1), (1,))]


def _plan(op: str, shape: tuple, axes: tuple, keepdims: bool = True):
    return make_plan(Request(latest(op), axes, keepdims, False), shape)


def _lane(op: str, data: np.ndarray, plan) -> np.ndarray:
    """The bound lane's result; a ReduceLogSumExp lane steps aside (None) only when some
    output is small enough to need exact recomputation: then the general path's."""
    got = dispatch.bind_fast(op, data.dtype, plan)(data)
    if got is None:
        assert op == "ReduceLogSumExp"
        with kernel_path("fast"):
            got = run_kernel(op, data, plan)
        n = int(np.prod(data.shape)) // max(int(np.prod(plan.output_shape)), 1)
        limit = exact_lse.threshold(data.dtype, exact_lse.fast_bound(data.dtype, n))
        assert np.nanmin(np.abs(got.astype(np.float64))) <= limit
    return got


def _data(shape: tuple, dtype: np.dtype, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape) * 4).astype(dtype)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("op", FAST_OPS)
@pytest.mark.parametrize(("shape", "axes"), LAYOUTS, ids=str)
def test_bound_kernel_is_correctly_rounded(op, dtype, shape, axes) -> None:
    data = _data(shape, dtype, seed=len(shape) + sum(axes))
    plan = _plan(op, shape, axes)
    assert dispatch.bind_fast(op, dtype, plan) is not None, "the lane should serve them all"
    got = _lane(op, data, plan)
    assert got.shape == plan.output_shape
    assert got.dtype == dtype
    want = oracle.expected(op, data, axes)
    exact = oracle.exact(op, data, axes).reshape(-1)
    for g, x, row in zip(got.reshape(-1).tolist(), exact, oracle.rows(data, axes), strict=True):
        assert oracle.ulp_error(g, x, dtype) <= allowed_ulps(op, row, x, dtype)
    if op != "ReduceLogSumExp":  # the same kernel as the general path (LSE rows: its own)
        with kernel_path("fast"):
            general = run_kernel(op, data, plan)
        np.testing.assert_array_equal(got.view(np.uint8), np.asarray(general).view(np.uint8))
    if dtype != np.float64:  # as float64: numpy's NaN test does not read bfloat16
        np.testing.assert_array_equal(got.astype(np.float64), want.astype(np.float64))


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint32, np.uint64], ids=str)
def test_integer_sums_wrap(dtype) -> None:
    info = np.iinfo(dtype)
    data = np.full((4, 6), info.max, dtype)
    data[1] = info.min
    plan = _plan("ReduceSum", data.shape, (1,))
    got = dispatch.bind_fast("ReduceSum", np.dtype(dtype), plan)(data)
    np.testing.assert_array_equal(got, oracle.expected("ReduceSum", data, (1,)))


def test_integer_l2_and_no_ops_are_left_to_the_general_path() -> None:
    plan = _plan("ReduceL2", (4, 6), (1,))
    assert dispatch.bind_fast("ReduceL2", np.dtype(np.int32), plan) is None  # isqrt: reference
    noop = make_plan(Request(latest("ReduceSum"), (), True, True), (4, 6))
    assert dispatch.bind_fast("ReduceSum", np.dtype(np.float32), noop) is None
    big = _plan("ReduceLogSumExp", (1024, 1024), (1,))
    assert dispatch.bind_fast("ReduceLogSumExp", np.dtype(np.float32), big) is None  # threads


#: threaded sizes (PARALLEL_MIN lowered to 2**16 below): rows, columns, middle, split, all
LARGE_LAYOUTS = [((256, 300), (1,)), ((300, 256), (0,)), ((16, 70, 64), (1,)),
                 ((40, 7, 300), (0, 2)), ((70000,), (0,)), ((3, 1, 30000), (0, 1, 2)),
                 ((65536, 1), (1,))]  # only a size-1 axis: integers only (floats: elementwise)


@pytest.mark.parametrize("dtype", [*FLOATS, np.dtype(np.int64)], ids=str)
@pytest.mark.parametrize("op", ["ReduceSum", "ReduceL2"])
@pytest.mark.parametrize(("shape", "axes"), LARGE_LAYOUTS, ids=str)
def test_large_inputs_bound_run_the_threaded_kernels(op, dtype, shape, axes, monkeypatch):
    """From PARALLEL_MIN elements on the bound function runs the threaded kernels, with the
    layout worked out once (C order): the same bits as the general path, correctly rounded."""
    if op == "ReduceL2" and dtype.kind == "i":
        return
    from onnx_reduce.kernels.fast import sum_l2

    monkeypatch.setattr(sum_l2, "PARALLEL_MIN", 1 << 16)
    data = _data(shape, dtype, seed=len(shape) + sum(axes))
    plan = _plan(op, shape, axes)
    run = dispatch.bind_fast(op, dtype, plan)
    if plan.elementwise is not None and dtype.kind != "i":
        assert run is None  # the elementwise part: test_size_one_axes_give_the_elementwise_part
        return
    launched = []
    monkeypatch.setattr(sum_l2, "parallel_section",
                        lambda real=sum_l2.parallel_section: launched.append(1) or real())
    got = run(data)
    assert launched, "a threaded size ran serially"
    assert got.shape == plan.output_shape
    assert got.dtype == dtype
    with kernel_path("fast"):
        general = run_kernel(op, data, plan)
    np.testing.assert_array_equal(got.view(np.uint8), np.asarray(general).view(np.uint8))
    if dtype.kind == "i":
        np.testing.assert_array_equal(got, oracle.expected(op, data, axes))
        return
    exact = oracle.exact(op, data, axes).reshape(-1)
    for g, x, row in zip(got.reshape(-1).tolist(), exact, oracle.rows(data, axes), strict=True):
        assert oracle.ulp_error(g, x, dtype) <= allowed_ulps(op, row, x, dtype)


def test_large_float64_l2_that_overflows_is_redone_in_the_bound_lane(monkeypatch) -> None:
    from onnx_reduce.kernels.fast import sum_l2

    monkeypatch.setattr(sum_l2, "PARALLEL_MIN", 1 << 16)
    data = _data((300, 256), np.dtype(np.float64), 5)
    data[7] *= 1e300
    data[9] *= 1e-300
    plan = _plan("ReduceL2", data.shape, (1,))
    got = dispatch.bind_fast("ReduceL2", data.dtype, plan)(data)
    assert np.isfinite(got).all()
    assert (got > 0).all()
    exact = oracle.exact("ReduceL2", data, (1,)).reshape(-1)
    for g, x in zip(got.reshape(-1).tolist(), exact, strict=True):
        assert oracle.ulp_error(g, x, data.dtype) <= 2


@pytest.mark.parametrize("values", [[3e200, 4e200], [3e-200, 4e-200], [1e308, 1e308]], ids=str)
def test_float64_l2_that_overflows_or_underflows_is_redone(values) -> None:
    """The bound lane redoes those outputs itself, scaled (:func:`sum_l2._redo`)."""
    data = np.array([values, [3.0, 4.0]])
    plan = _plan("ReduceL2", data.shape, (1,))
    bound = dispatch.bind_fast("ReduceL2", data.dtype, plan)(data)
    got = reduce_l2(data, axes=[1], keepdims=False)
    want = oracle.expected("ReduceL2", data, (1,), keepdims=False)
    np.testing.assert_array_equal(bound.ravel(), want)
    np.testing.assert_array_equal(got, want)
    assert np.isfinite(got).all()
    assert (got > 0).all()


@pytest.mark.parametrize("op", FAST_OPS)
@pytest.mark.parametrize("columns", [False, True], ids=["rows", "columns"])
def test_special_values(op, columns) -> None:
    rows = np.array([[np.nan, 1.0], [np.inf, 1.0], [-np.inf, -np.inf], [np.inf, -np.inf],
                     [np.nan, np.inf], [-np.inf, 2.0], [0.0, -40.0], [1e30, 1e30]], np.float32)
    data, axes = (np.ascontiguousarray(rows.T), (0,)) if columns else (rows, (1,))
    got = _lane(op, data, _plan(op, data.shape, axes))
    np.testing.assert_array_equal(got, oracle.expected(op, data, axes))


def test_reference_path_bypasses_the_lane(monkeypatch) -> None:
    data = np.ones((4, 6), np.float32)
    plan = _plan("ReduceSum", data.shape, (1,))
    run = dispatch.bind("ReduceSum", data.dtype, plan)
    sentinel = np.array([-1.0], np.float32)
    monkeypatch.setattr(reference, "reduce_sum", lambda data, plan: sentinel)
    np.testing.assert_array_equal(run(data), np.full((4, 1), 6, np.float32))
    with kernel_path("reference"):
        assert run(data) is sentinel


FUNCTIONS = {record.name: getattr(onnx_reduce, record.function) for record in REGISTRY}


@pytest.mark.parametrize("op", OPS)
def test_arrays_the_lane_does_not_take_still_work(op) -> None:
    """Same dtype and shape as a cached call, but not C-contiguous, read-only or unaligned."""
    function = FUNCTIONS[op]
    base = _data((8, 256), np.dtype(np.float32), seed=3)
    plain = np.ascontiguousarray(base[:, ::2])
    function(plain, axes=[1])  # the call is now cached for (8, 128) float32
    readonly = plain.copy()
    readonly.flags.writeable = False
    raw = np.zeros(plain.nbytes + 1, np.uint8)
    unaligned = np.frombuffer(raw.data, np.float32, plain.size, offset=1).reshape(plain.shape)
    unaligned[...] = plain
    assert not unaligned.flags.aligned
    want = oracle.expected(op, plain, (1,))
    for variant in (base[:, ::2], base[:, -2::-2][:, ::-1], readonly, unaligned, plain):
        np.testing.assert_array_equal(function(variant, axes=[1]), want)


def test_repeated_calls_reuse_and_stay_correct() -> None:
    """Many arrays through one prepared call, interleaved with other shapes and axes."""
    rng = np.random.default_rng(7)
    for shape, axes in itertools.islice(itertools.cycle(LAYOUTS), 60):
        data = (rng.standard_normal(shape) * 100).astype(np.float32)
        np.testing.assert_array_equal(reduce_sum(data, axes=list(axes)),
                                      oracle.expected("ReduceSum", data, axes))


def _elementwise(op: str, kept: np.ndarray) -> np.ndarray:
    """The elementwise part of ``op`` on ``kept``: the result of reducing one element each
    (ReduceSum: the element itself, -0 kept; LogSumExp: -0 + log(1) is +0; SumSquare and
    LogSum: the exactly rounded oracle)."""
    if op == "ReduceSum":
        return kept
    if op == "ReduceL2":
        return np.abs(kept)
    if op == "ReduceLogSumExp":
        return kept + np.zeros((), kept.dtype)
    return oracle.expected(op, kept[..., None], [kept.ndim], keepdims=False)


def _same(got: np.ndarray, want: np.ndarray, ulps: int = 0) -> bool:
    """The same values, NaN where ``want`` has NaN (of either sign), zeros of the same sign;
    or within ``ulps`` of float64 ``want`` (logs: the contract's 2 ulp, the reference path's
    are not always correctly rounded)."""
    if ulps and not np.array_equal(got, want, equal_nan=True):
        spacing = np.spacing(np.abs(np.where(np.isfinite(want), want, 1.0)))
        return bool(np.all((np.abs(got - want) <= ulps * spacing) | (got == want)
                           | (np.isnan(got) & np.isnan(want))))
    got, want = got.astype(np.float64), want.astype(np.float64)
    number = ~np.isnan(want)
    return (np.array_equal(got, want, equal_nan=True)
            and np.array_equal(np.signbit(got[number]), np.signbit(want[number])))


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", FLOATS, ids=[d.name for d in FLOATS])
def test_size_one_axes_give_the_elementwise_part(op, dtype):
    """Reduced axes of size 1 (one element per output) give the operator's elementwise part,
    computed on whole arrays (no kernel takes a reduction's steps per output), on both paths,
    general and bound, strided views too, zeros' signs included."""
    rng = np.random.default_rng(90)
    values = np.concatenate([rng.standard_normal(500) * 4.0 ** rng.integers(-8, 8, 500),
                             [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, 2.0**-20]])
    x = values.astype(dtype).reshape(-1, 1, 1)
    function = getattr(onnx_reduce, op_record(op).function)
    ulps = 2 if op == "ReduceLogSum" and dtype == np.float64 else 0
    for view, axes in ((x, (1, 2)), (x[::-2], (1,)), (np.swapaxes(x, 0, 2), (0, 1))):
        want = _elementwise(op, np.squeeze(view, axis=axes))
        for path in ("auto", "reference"):
            with kernel_path(path):
                got = function(view, axes=list(axes), keepdims=False)
            assert got.dtype == dtype, path
            assert got.shape == want.shape, (path, axes)
            assert _same(got, want, ulps), (path, axes)
        plan = make_plan(Request(latest(op), axes, True, False), view.shape)
        bound = dispatch.bind(op, dtype, plan)(np.ascontiguousarray(view))
        assert _same(bound.reshape(want.shape), want, ulps)
    for shape, axes in ELEMENTWISE_LAYOUTS:
        plan = _plan(op, shape, axes)
        assert dispatch.bind_fast(op, dtype, plan) is None
        data = _data(shape, dtype, seed=3)
        want = _elementwise(op, data.reshape(plan.output_shape))
        assert _same(dispatch.bind(op, dtype, plan)(data), want, ulps)
