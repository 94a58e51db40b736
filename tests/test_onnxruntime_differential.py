"""Differential tests against onnxruntime, and one test per known difference.

Part 1 runs random shapes, axes, keepdims and noop_with_empty_axes at every operator version
onnxruntime can load (``ort_max_opset``: 1.31 has no opset 27/28), for the dtypes its CPU
kernels have (float, double, int32, int64), and compares within a bound justified by the dtype
(see ``float_bound``).

Part 2 documents each known difference (also listed in ``docs/onnxruntime-differences.md``):
every test asserts our result against the exact value (``mpmath``, ``math.isqrt``, integer
arithmetic) or the spec, then records what onnxruntime does with ``record_property`` - it never
uses onnxruntime's output as an expected value, and when onnxruntime happens to agree with the
math the recorded verdict says so instead of failing.
"""

from __future__ import annotations

import math

import mpmath
import numpy as np
import onnx
import onnx.helper as oh
import pytest
from onnx import numpy_helper

import onnx_reduce
from onnx_reduce.spec import OPS, REGISTRY, VERSIONS, bfloat16, op_record, resolve
from onnxruntime_opsets import ort_max_opset

ort = pytest.importorskip("onnxruntime")

FUNCTIONS = {record.name: getattr(onnx_reduce, record.function) for record in REGISTRY}
mpmath.mp.prec = 200


# --- running one node in onnxruntime ---------------------------------------------------------


def make_model(op: str, opset: int, dtype, shape, axes=None, keepdims=None, noop=None,
               axes_as="initializer") -> onnx.ModelProto:
    """One node of ``op`` at ``opset``; ``axes`` goes where that version takes it."""
    elem = oh.np_dtype_to_tensor_dtype(np.dtype(dtype))
    inputs = [oh.make_tensor_value_info("x", elem, list(shape))]
    names, initializers = ["x"], []
    attributes = {}
    if keepdims is not None:
        attributes["keepdims"] = keepdims
    if noop is not None:
        attributes["noop_with_empty_axes"] = noop
    if axes is not None:
        if resolve(op, opset).axes_is_input:
            names.append("axes")
            if axes_as == "initializer":
                initializers.append(numpy_helper.from_array(np.array(axes, np.int64), "axes"))
            else:
                inputs.append(oh.make_tensor_value_info("axes", onnx.TensorProto.INT64,
                                                        [len(axes)]))
        else:
            attributes["axes"] = axes
    node = oh.make_node(op, names, ["y"])
    for name, value in attributes.items():
        kind = onnx.AttributeProto.INTS if name == "axes" else None
        node.attribute.append(oh.make_attribute(name, value, attr_type=kind))
    graph = oh.make_graph([node], "g", inputs, [oh.make_tensor_value_info("y", elem, None)],
                          initializer=initializers)
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)], ir_version=8)


def run_ort(op: str, opset: int, x: np.ndarray, axes=None, keepdims=None, noop=None,
            axes_as="initializer"):
    """onnxruntime's output, or the text of its error (it refuses a model or a dtype)."""
    model = make_model(op, opset, x.dtype, x.shape, axes, keepdims, noop, axes_as)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.log_severity_level = 3
    try:
        session = ort.InferenceSession(model.SerializeToString(), options,
                                       providers=["CPUExecutionProvider"])
        feeds = {"x": x}
        if axes_as == "input" and len(session.get_inputs()) > 1:
            feeds["axes"] = np.array(axes, np.int64)
        return session.run(None, feeds)[0]
    except Exception as error:  # onnxruntime raises its own exception classes
        return f"{type(error).__name__}: {str(error).splitlines()[0][:160]}"


def ours(op: str, opset: int, x: np.ndarray, axes=None, keepdims=None, noop=None):
    return FUNCTIONS[op](x, axes, 1 if keepdims is None else keepdims, bool(noop), opset=opset)


def verdict(record_property, name: str, ort_result, exact, equal=None) -> str:
    """Record what onnxruntime gives next to the exact value; returns the verdict."""
    if isinstance(ort_result, str):
        text = "onnxruntime rejects it"
        detail = ort_result
    else:
        same = equal(ort_result) if equal else np.array_equal(
            np.asarray(ort_result), np.asarray(exact), equal_nan=True)
        text = "onnxruntime matches the exact value" if same else "onnxruntime differs"
        detail = repr(ort_result)
    record_property(name, f"{text}: {detail} (exact: {exact!r})")
    return text


# --- part 1: random differential tests -------------------------------------------------------

U = {np.dtype(np.float32): 2.0**-24, np.dtype(np.float64): 2.0**-53}


def float_bound(op: str, x: np.ndarray, axes: tuple[int, ...], keepdims: bool,
                result: np.ndarray) -> np.ndarray:
    """How far onnxruntime may be from our (correctly rounded, <= 1 ulp) result.

    onnxruntime accumulates in the input's own precision, u = 2**-24 (float) or 2**-53 (double),
    over n terms:
    * Sum: recursive/blocked summation errs by at most (n - 1) u sum|x|; plus 1 ulp of ours.
    * L2: the sum of n positive squares is relatively (n + 1) u accurate, sqrt halves that and
      adds u: (n + 3) u |result| covers it and our ulp.
    * LSE: m + log(sum exp(x - m)): each x - m and exp term errs by u (|x - m| e^(x - m) <= 1/e
      bounds the propagated part), the sum by (n - 1) u relative, log turns relative into
      absolute error, then log and the add round: (2n + 4) u (1 + |result|).
    * SumSquare: n positive squares, each rounded, summed: (n + 2) u |result|.
    * LogSum (positive data here): the sum errs by (n + 1) u sum|x|, relative (n + 1) u after
      log turns it into absolute error, plus the log's rounding: (n + 2) u (1 + |result|).
    """
    u = U[x.dtype]
    n = math.prod(x.shape[a] for a in axes) if axes else x.size
    wide = x.astype(np.float64)
    if op == "ReduceSum":
        bound = (n + 1) * u * np.sum(np.abs(wide), axis=axes or None, keepdims=keepdims)
    elif op == "ReduceL2":
        bound = (n + 3) * u * np.abs(result.astype(np.float64))
    elif op == "ReduceSumSquare":
        bound = (n + 2) * u * np.abs(result.astype(np.float64))
    elif op == "ReduceLogSum":
        bound = (n + 2) * u * (1 + np.abs(result.astype(np.float64)))
    else:
        bound = (2 * n + 4) * u * (1 + np.abs(result.astype(np.float64)))
    return bound + np.finfo(x.dtype).smallest_subnormal


def lse_exact(values) -> mpmath.mpf:
    return mpmath.log(mpmath.fsum(mpmath.exp(mpmath.mpf(float(v))) for v in values))


def _opsets(op: str) -> list[int]:
    extra = {12, 17, ort_max_opset()}
    return sorted(o for o in set(VERSIONS[op]) | extra if o <= ort_max_opset())


def _random_case(rng: np.random.Generator, ver, dtype):
    rank = int(rng.integers(1, 5))
    shape = tuple(int(s) for s in rng.integers(1, 6, size=rank))
    if np.dtype(dtype).kind == "f":
        x = (rng.standard_normal(shape) * 3).astype(dtype)
    else:
        x = rng.integers(-5, 6, size=shape).astype(dtype)
    count = int(rng.integers(0, rank + 1))
    axes = [int(a) for a in rng.choice(rank, size=count, replace=False)]
    axes = [a - rank if rng.random() < 0.3 else a for a in axes]
    keepdims = int(rng.integers(0, 2))
    noop = int(rng.integers(0, 2)) if ver.axes_is_input and not axes else None
    return x, (None if not axes and rng.random() < 0.5 else axes), keepdims, noop


def _differential_params():
    # Integer LSE is left out: onnxruntime rounds each exp term to an integer (a known
    # difference, tested below); so is integer LogSum (a sum <= 0 raises here; the spec's Log
    # takes no integers). Integer Sum, L2 and SumSquare of small values are exact on both sides.
    for op in OPS:
        for dtype in (np.float32, np.float64, np.int32, np.int64):
            if op not in ("ReduceLogSumExp", "ReduceLogSum") or np.dtype(dtype).kind == "f":
                yield op, dtype


@pytest.mark.parametrize(("op", "dtype"), list(_differential_params()),
                         ids=lambda p: p if isinstance(p, str) else np.dtype(p).name)
def test_random_against_onnxruntime(op: str, dtype) -> None:
    rng = np.random.default_rng([OPS.index(op), np.dtype(dtype).num])
    compared = 0
    for opset in _opsets(op):
        ver = resolve(op, opset)
        for case in range(8):
            x, axes, keepdims, noop = _random_case(rng, ver, dtype)
            if op == "ReduceLogSum":
                x = np.abs(x) + x.dtype.type(0.5)  # where the log is real
            axes_as = "input" if case % 2 else "initializer"
            theirs = run_ort(op, opset, x, axes, keepdims, noop, axes_as)
            assert not isinstance(theirs, str), theirs
            mine = ours(op, opset, x, axes, keepdims, noop)
            where = f"{ver.label} opset {opset} {x.dtype} {x.shape} axes={axes} " \
                    f"keepdims={keepdims} noop={noop}"
            assert mine.shape == theirs.shape, where
            assert mine.dtype == theirs.dtype == x.dtype, where
            reduced = tuple(a % x.ndim for a in axes) if axes else ()
            if not reduced and noop:
                np.testing.assert_array_equal(mine, theirs, err_msg=where)
            elif x.dtype.kind == "f":
                bound = float_bound(op, x, reduced, bool(keepdims), mine)
                error = np.abs(mine.astype(np.float64) - theirs.astype(np.float64))
                assert np.all(error <= bound), f"{where}: {error.max()} > {bound.max()}"
            else:
                # Small integers: sums and floor(sqrt(sum x^2)) are exact on both sides.
                np.testing.assert_array_equal(mine, theirs, err_msg=where)
            compared += 1
    assert compared >= 8 * len(_opsets(op))


# --- part 2: known differences, one test each ------------------------------------------------

LSE_LOADABLE = [v for v in VERSIONS["ReduceLogSumExp"] if v <= 18]
L2_LOADABLE = list(VERSIONS["ReduceL2"])


def _to_float(value: mpmath.mpf, dtype) -> float:
    """The correctly rounded ``dtype`` value of an mpmath number."""
    return float(np.array(float(value), np.float64).astype(dtype)) if dtype != np.float64 \
        else float(value)


@pytest.mark.parametrize("opset", LSE_LOADABLE)
@pytest.mark.parametrize(("dtype", "values"), [(np.float64, [800.0, 800.0]),
                                               (np.float32, [100.0, 100.0]),
                                               (np.float32, [88.0, 89.0, -1e30])])
def test_lse_large_finite_inputs(opset, dtype, values, record_property) -> None:
    """The naive Log(ReduceSum(Exp(x))) (the spec's function body) overflows; the math does not.
    onnxruntime's kernel shifts by the maximum (as of 1.31 it matches)."""
    x = np.array(values, dtype)
    exact = _to_float(lse_exact(values), dtype)
    mine = ours("ReduceLogSumExp", opset, x, keepdims=0)
    np.testing.assert_array_max_ulp(mine, np.array(exact, dtype), maxulp=1)
    verdict(record_property, "onnxruntime", run_ort("ReduceLogSumExp", opset, x, keepdims=0),
            exact, lambda r: np.isfinite(r) and abs(float(r) - exact) <= 4 * np.spacing(
                np.array(exact, dtype)))


@pytest.mark.parametrize("opset", LSE_LOADABLE)
def test_lse_tiny_results_keep_their_relative_accuracy(opset, record_property) -> None:
    """[0, -40]: log(1 + e^-40) = 4.248e-18. onnxruntime's log(sum) rounds 1 + e^-40 to 1 and
    returns 0 (an absolute error of 4e-18, but no correct digit)."""
    x = np.array([0.0, -40.0])
    exact = float(lse_exact(x))
    assert exact == pytest.approx(4.248354255291589e-18, rel=1e-15)
    mine = ours("ReduceLogSumExp", opset, x, keepdims=0)
    np.testing.assert_array_max_ulp(mine, np.array(exact), maxulp=2)
    verdict(record_property, "onnxruntime", run_ort("ReduceLogSumExp", opset, x, keepdims=0),
            exact, lambda r: abs(float(r) - exact) <= 4 * np.spacing(exact))


@pytest.mark.parametrize("opset", LSE_LOADABLE)
@pytest.mark.parametrize(
    ("values", "expected"),
    [([np.inf, 1.0], np.inf), ([np.inf, -np.inf], np.inf), ([np.inf, np.inf], np.inf),
     ([-np.inf, -np.inf], -np.inf), ([-np.inf, 0.0], 0.0), ([np.nan, np.inf], np.nan),
     ([np.nan, 0.0], np.nan)],
)
def test_lse_infinities_and_nan(opset, values, expected, record_property) -> None:
    """All -inf -> -inf, any +inf (no NaN) -> +inf, NaN -> NaN: the limits of log(sum(exp)).
    A naive max-shift gives inf - inf = NaN; onnxruntime 1.31 handles these."""
    x = np.array(values)
    mine = ours("ReduceLogSumExp", opset, x, keepdims=0)
    np.testing.assert_array_equal(mine, np.array(expected))
    verdict(record_property, "onnxruntime", run_ort("ReduceLogSumExp", opset, x, keepdims=0),
            expected)


@pytest.mark.parametrize("opset", L2_LOADABLE)
@pytest.mark.parametrize(("dtype", "values", "expected"),
                         [(np.float32, [3e30, 4e30], 5e30), (np.float64, [3e200, 4e200], 5e200),
                          (np.float64, [3e-200, 4e-200], 5e-200),
                          (np.float16, [300.0, 400.0], 500.0)])
def test_l2_intermediate_overflow_and_underflow(opset, dtype, values, expected,
                                                record_property) -> None:
    """sqrt(sum x^2) is representable although x^2 is not: onnxruntime (1.31) squares in the
    input's type and gives inf (or 0); float16 it widens and gets right, but it refuses float16
    models at opsets 1-5."""
    x = np.array(values, dtype)
    exact = float(mpmath.sqrt(mpmath.fsum(mpmath.mpf(float(v)) ** 2 for v in x.tolist())))
    assert exact == pytest.approx(expected, rel=1e-3)
    mine = ours("ReduceL2", opset, x, keepdims=0)
    np.testing.assert_array_max_ulp(mine, np.array(exact).astype(dtype), maxulp=1)
    verdict(record_property, "onnxruntime", run_ort("ReduceL2", opset, x, keepdims=0),
            exact, lambda r: abs(float(r) - exact) <= 2 * float(np.spacing(np.array(exact, dtype))))


def test_float32_sum_accumulation(record_property) -> None:
    """2**24 followed by a thousand 1.0: float32 accumulation drops every 1.0 (2**24 + 1 rounds
    back to 2**24). We accumulate in float64: exactly 16778216."""
    x = np.array([2.0**24] + [1.0] * 1000, np.float32)
    exact = 2**24 + 1000
    mine = onnx_reduce.reduce_sum(x, keepdims=False)
    assert mine == np.float32(exact)
    assert int(mine) == exact
    for opset in (1, 11, 13):
        verdict(record_property, f"onnxruntime-opset{opset}",
                run_ort("ReduceSum", opset, x, keepdims=0), float(exact))


@pytest.mark.parametrize(("dtype", "values"),
                         [(np.int32, [2**31 - 1, 1]), (np.int32, [-(2**31), -1]),
                          (np.int64, [2**63 - 1, 2])])
def test_integer_sum_wraps(dtype, values, record_property) -> None:
    """Integer ReduceSum wraps modulo 2**bits, like numpy (onnxruntime 1.31 saturates)."""
    x = np.array(values, dtype)
    bits = np.dtype(dtype).itemsize * 8
    exact = (sum(values) + 2 ** (bits - 1)) % 2**bits - 2 ** (bits - 1)
    for opset in (1, 11, 13):
        assert int(ours("ReduceSum", opset, x, keepdims=0)) == exact
        verdict(record_property, f"onnxruntime-opset{opset}",
                run_ort("ReduceSum", opset, x, keepdims=0), exact)


@pytest.mark.parametrize("opset", L2_LOADABLE)
@pytest.mark.parametrize(("dtype", "values"),
                         [(np.int32, [1, 1]), (np.int32, [3, 3]), (np.int32, [40000, 40000]),
                          (np.int32, [2**31 - 1, 2**31 - 1]), (np.int64, [2**62, 2**62]),
                          (np.int64, [2**40, 2**40 + 1]), (np.int64, [-(2**63), 0])])
def test_integer_l2(opset, dtype, values, record_property) -> None:
    """Integer L2 is exactly floor(sqrt(sum x^2)), wrapped to the dtype. onnxruntime truncates
    too, but through floating point: right for small values, not for large ones."""
    x = np.array(values, dtype)
    bits = np.dtype(dtype).itemsize * 8
    root = math.isqrt(sum(v * v for v in values))
    exact = (root + 2 ** (bits - 1)) % 2**bits - 2 ** (bits - 1)
    assert int(ours("ReduceL2", opset, x, keepdims=0)) == exact
    verdict(record_property, "onnxruntime", run_ort("ReduceL2", opset, x, keepdims=0), exact)


@pytest.mark.parametrize("opset", LSE_LOADABLE)
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_integer_lse_truncates_toward_zero(opset, dtype, record_property) -> None:
    """The spec's body ends in CastLike: float -> int truncates toward zero ([-3, -3] -> -2)."""
    x = np.array([[1, 2], [-3, -3], [7, 7]], dtype)
    exact = [int(mpmath.floor(v) if v >= 0 else mpmath.ceil(v))
             for v in (lse_exact(row) for row in x.tolist())]
    assert exact == [2, -2, 7]
    np.testing.assert_array_equal(ours("ReduceLogSumExp", opset, x, [1], keepdims=0), exact)
    verdict(record_property, "onnxruntime",
            run_ort("ReduceLogSumExp", opset, x, [1], keepdims=0), np.array(exact, dtype))


@pytest.mark.parametrize("opset", LSE_LOADABLE)
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_integer_lse_sums_the_exponentials_exactly(opset, dtype, record_property) -> None:
    """[5, 4 x 8]: 5 + log(1 + 8/e) = 6.37 -> 6. Only the final CastLike truncates; onnxruntime
    truncates every exp(x - max) term to an integer as well (1.31 gives 5)."""
    x = np.array([5] + [4] * 8, dtype)
    value = lse_exact(x.tolist())
    exact = int(mpmath.floor(value))
    assert exact == 6
    assert int(ours("ReduceLogSumExp", opset, x, keepdims=0)) == exact
    verdict(record_property, "onnxruntime", run_ort("ReduceLogSumExp", opset, x, keepdims=0),
            exact)


@pytest.mark.parametrize("opset", LSE_LOADABLE)
def test_integer_lse_over_an_empty_set(opset, record_property) -> None:
    """-inf is not an int32: we raise ValueError (the spec says "undefined"); onnxruntime
    returns some integer (1.31: INT32_MIN)."""
    x = np.zeros((0, 3), np.int32)
    with pytest.raises(ValueError, match=f"{resolve('ReduceLogSumExp', opset).label}: .*empty"):
        ours("ReduceLogSumExp", opset, x, [0])
    theirs = run_ort("ReduceLogSumExp", opset, x, [0])
    record_property("onnxruntime", f"returns {theirs!r}" if not isinstance(theirs, str)
                    else f"rejects it: {theirs}")


@pytest.mark.parametrize("op", OPS)
def test_empty_set_float(op, record_property) -> None:
    """Sum, L2, SumSquare 0, LSE and LogSum -inf over an empty set (the spec's values)."""
    x = np.zeros((0, 3), np.float32)
    expected = op_record(op).empty
    opset = max(v for v in VERSIONS[op] if v <= ort_max_opset())
    mine = ours(op, opset, x, [0])
    np.testing.assert_array_equal(mine, np.full((1, 3), expected, np.float32))
    verdict(record_property, "onnxruntime", run_ort(op, opset, x, [0]),
            np.full((1, 3), expected, np.float32))


REJECTED_BY_ORT = [
    ("ReduceSum", 13, np.uint32), ("ReduceSum", 13, np.uint64), ("ReduceSum", 13, bfloat16),
    ("ReduceL2", 18, np.uint64), ("ReduceL2", 13, bfloat16),
    ("ReduceLogSumExp", 13, np.uint32), ("ReduceLogSumExp", 18, bfloat16),
    ("ReduceSum", 1, np.float16), ("ReduceL2", 5, np.float16), ("ReduceLogSumExp", 1, np.float16),
]


@pytest.mark.parametrize(("op", "opset", "dtype"), REJECTED_BY_ORT,
                         ids=lambda p: p if isinstance(p, (str, int)) else np.dtype(p).name)
def test_dtypes_the_spec_allows(op, opset, dtype, record_property) -> None:
    """Every dtype the version allows works here; onnxruntime (1.31) has no CPU kernel for
    uint32/uint64/bfloat16 and refuses float16 models at opsets 1-5."""
    x = np.array([[1, 2, 3], [4, 5, 6]]).astype(dtype)
    exact = {"ReduceSum": [6, 15], "ReduceL2": [math.sqrt(14), math.sqrt(77)],
             "ReduceLogSumExp": [float(lse_exact([1, 2, 3])), float(lse_exact([4, 5, 6]))]}[op]
    mine = ours(op, opset, x, [1], keepdims=0)
    assert mine.dtype == np.dtype(dtype)
    if np.dtype(dtype).kind in "iu":
        expected = np.array([math.isqrt(14), math.isqrt(77)] if op == "ReduceL2" else
                            [int(v) for v in exact], dtype)
        np.testing.assert_array_equal(mine, expected)
    else:
        np.testing.assert_array_max_ulp(mine.astype(np.float32),
                                        np.array(exact).astype(dtype).astype(np.float32), 1)
    verdict(record_property, "onnxruntime", run_ort(op, opset, x, [1], keepdims=0), exact,
            lambda r: np.allclose(np.asarray(r, np.float64), exact, rtol=1e-2))


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16, np.bool_])
@pytest.mark.parametrize("op", OPS)
def test_dtypes_the_spec_does_not_allow(op, dtype, record_property) -> None:
    """Both reject int8/uint8/int16/bool (onnxruntime as an invalid model)."""
    x = np.ones((2, 3), dtype)
    opset = max(v for v in VERSIONS[op] if v <= ort_max_opset())
    with pytest.raises(TypeError, match=f"{resolve(op, opset).label}: data type"):
        ours(op, opset, x)
    theirs = run_ort(op, opset, x)
    record_property("onnxruntime", "rejects it (agrees)" if isinstance(theirs, str)
                    else f"accepts it: {theirs!r}")


@pytest.mark.parametrize("op", OPS)
def test_duplicate_axes(op, record_property) -> None:
    """We reject repeated axes (ValueError); onnxruntime reduces the axis once."""
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    opset = max(v for v in VERSIONS[op] if v <= ort_max_opset())
    with pytest.raises(ValueError, match="more than once"):
        ours(op, opset, x, [0, -2])
    theirs = run_ort(op, opset, x, [0, -2])
    record_property("onnxruntime", f"accepts it: {theirs!r}" if not isinstance(theirs, str)
                    else f"rejects it (agrees): {theirs}")


@pytest.mark.parametrize("op", OPS)
def test_keepdims_other_than_0_or_1(op, record_property) -> None:
    """keepdims=2: we raise ValueError; onnxruntime treats any non-zero value as 1."""
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    opset = max(v for v in VERSIONS[op] if v <= ort_max_opset())
    with pytest.raises(ValueError, match="'keepdims' must be 0 or 1, got 2"):
        ours(op, opset, x, keepdims=2)
    theirs = run_ort(op, opset, x, keepdims=2)
    record_property("onnxruntime", f"accepts it: {theirs!r}" if not isinstance(theirs, str)
                    else f"rejects it (agrees): {theirs}")


def test_opset_28(record_property) -> None:
    """ReduceLogSumExp-28 (floats only) runs here; onnxruntime 1.31 cannot load opset 27+, 1.32
    loads it and overflows."""
    x = np.array([800.0, 800.0])
    exact = float(lse_exact(x))
    np.testing.assert_array_max_ulp(ours("ReduceLogSumExp", 28, x, keepdims=0),
                                    np.array(exact), maxulp=1)
    verdict(record_property, "onnxruntime", run_ort("ReduceLogSumExp", 28, x, keepdims=0), exact,
            lambda r: abs(float(r) - exact) <= 2 * np.spacing(exact))


@pytest.mark.parametrize("op", OPS)
def test_noop_with_empty_axes(op, record_property) -> None:
    """Sum -> x, L2 -> |x|, LSE -> x, SumSquare -> x**2, LogSum -> log x (onnxruntime agrees
    as of 1.31 for the first three)."""
    x = np.array([[-1.5, 2.0], [0.25, -3.0]], np.float32)
    with np.errstate(invalid="ignore"):
        expected = {"ReduceL2": np.abs(x), "ReduceSumSquare": x * x,
                    "ReduceLogSum": np.log(x.astype(np.float64)).astype(np.float32)}.get(op, x)
    opset = max(v for v in VERSIONS[op] if v <= ort_max_opset())
    np.testing.assert_array_equal(ours(op, opset, x, [], noop=1), expected)
    verdict(record_property, "onnxruntime", run_ort(op, opset, x, [], noop=1), expected)
