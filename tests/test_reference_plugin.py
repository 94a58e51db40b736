"""onnx_reduce.reference_plugin (reference_ops): our three operators plugged into
onnx.reference.ReferenceEvaluator, in models that mix them with the reference's own operators,
at several opsets."""

from __future__ import annotations

import math
import warnings

import ml_dtypes
import mpmath
import numpy as np
import onnx
import onnx.helper as oh
import pytest
from onnx import TensorProto
from onnx.inliner import inline_local_functions
from onnx.reference import ReferenceEvaluator

import onnx_reduce
from onnx_reduce.spec import OPS

L2, LSE, SUM = "ReduceL2", "ReduceLogSumExp", "ReduceSum"
BF16 = np.dtype(ml_dtypes.bfloat16)
OPSETS = [1, 11, 13, 17, 18, 21, 28]


# --- helpers --------------------------------------------------------------------------------------


def reduce_node(op, opset, data, out, axes, axes_mode, **attrs):
    """``op`` over ``axes``: an attribute before the version that takes an input, else an
    initializer (``axes_mode="init"``) or a graph input (``"input"``).

    Returns the node, the initializers and the extra graph inputs."""
    if not onnx_reduce.spec.resolve(op, opset).axes_is_input:
        return oh.make_node(op, [data], [out], axes=axes, **attrs), [], []
    node = oh.make_node(op, [data, "axes"], [out], **attrs)
    if axes_mode == "init":
        return node, [oh.make_tensor("axes", TensorProto.INT64, [len(axes)], axes)], []
    return node, [], [oh.make_tensor_value_info("axes", TensorProto.INT64, [len(axes)])]


def model_of(nodes, opset, inputs, outputs, inits=(), functions=(), check=True):
    imports = [oh.make_opsetid("", opset)] + [oh.make_opsetid("local", 1)] * bool(functions)
    graph = oh.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    model = oh.make_model(graph, opset_imports=imports, functions=list(functions))
    model.ir_version = oh.find_min_ir_version_for(imports, ignore_unknown=True)
    if check:
        onnx.checker.check_model(model, full_check=True)
    return model


def binary(op, a, b, out, opset):
    # Before opset 7 the arithmetic operators broadcast only when told to.
    return oh.make_node(op, [a, b], [out], **({"broadcast": 1} if opset < 7 else {}))


def evaluate(model, inputs, ours=True):
    """Run ``model`` with our operators (``ours``) or with the plain reference."""
    evaluator = ReferenceEvaluator(model, new_ops=onnx_reduce.reference_ops() if ours else None)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)  # the plain reference overflows
        return evaluator.run(None, inputs)


def with_axes(model, inputs, axes):
    if any(i.name == "axes" for i in model.graph.input):
        return {**inputs, "axes": np.array(axes, dtype=np.int64)}
    return inputs


def as_mpf(value) -> mpmath.mpf:
    return mpmath.mpf(float(value))  # exact: a float has 53 bits


def nearest(value: mpmath.mpf, dtype) -> np.ndarray:
    """``value`` correctly rounded to ``dtype`` (decided by exact comparison of the neighbours)."""
    dtype = np.dtype(dtype)
    if mpmath.isinf(value) or mpmath.isnan(value):
        return np.array(float(value), dtype)
    bits = {2: np.int16, 4: np.int32, 8: np.int64}[dtype.itemsize]
    guess = int(np.array(float(value)).astype(dtype).view(bits))
    around = [np.array(guess + k, dtype=bits).view(dtype) for k in (-1, 0, 1)]
    return min((c for c in around if np.isfinite(c)), key=lambda c: abs(as_mpf(c) - value))


def exact_l2(row) -> mpmath.mpf:
    with mpmath.workprec(300):
        return mpmath.sqrt(mpmath.fsum(as_mpf(v) ** 2 for v in row))


def exact_lse(row) -> mpmath.mpf:
    with mpmath.workprec(300):
        return mpmath.log(mpmath.fsum(mpmath.exp(as_mpf(v)) for v in row))


def max_ulps(got, want) -> int:
    got, want = np.asarray(got), np.asarray(want, dtype=got.dtype)
    bits = {2: np.int16, 4: np.int32, 8: np.int64}[got.dtype.itemsize]
    assert got.shape == want.shape
    return int(np.max(np.abs(got.view(bits).astype(np.int64) - want.view(bits).astype(np.int64))))


def axes_modes(op, opset):
    return ["init", "input"] if onnx_reduce.spec.resolve(op, opset).axes_is_input else ["attr"]


def cases(op):
    return [pytest.param(o, m, id=f"{o}-{m}") for o in OPSETS for m in axes_modes(op, o)]


# --- models mixing our operators with others ------------------------------------------------------


@pytest.mark.parametrize(("opset", "axes_mode"), cases(LSE))
def test_log_softmax(opset, axes_mode):
    """y = x - ReduceLogSumExp(x, axes=[-1], keepdims=1); rows that overflow a naive exp."""
    x = np.array([[800.0, 800.0, 799.0], [-800.0, -800.0, -801.0], [1.0, 2.0, 3.0]])
    lse, inits, extra = reduce_node(LSE, opset, "x", "lse", [-1], axes_mode, keepdims=1)
    model = model_of([lse, binary("Sub", "x", "lse", "y", opset)], opset,
                     [oh.make_tensor_value_info("x", TensorProto.DOUBLE, [3, 3]), *extra],
                     [oh.make_tensor_value_info("y", TensorProto.DOUBLE, [3, 3]),
                      oh.make_tensor_value_info("lse", TensorProto.DOUBLE, [3, 1])], inits)
    y, got_lse = evaluate(model, with_axes(model, {"x": x}, [-1]))
    want_lse = np.array([[nearest(exact_lse(row), np.float64)] for row in x])
    assert max_ulps(got_lse, want_lse) <= 2  # the float64 contract
    np.testing.assert_array_equal(y, x - got_lse)  # Sub of our result, by the reference
    truth = np.array([[float(as_mpf(v) - exact_lse(row)) for v in row] for row in x])
    np.testing.assert_allclose(y, truth, rtol=0, atol=4 * np.spacing(800.0))


@pytest.mark.parametrize(("opset", "axes_mode"), cases(L2))
def test_l2_normalise(opset, axes_mode):
    """y = x / ReduceL2(x, axes=[-1], keepdims=1) in float32, on rows whose squares overflow or
    underflow float32."""
    x = np.array([[3e30, 4e30], [3e-30, -4e-30], [1.0, 0.0], [-5.0, 12.0]], dtype=np.float32)
    l2, inits, extra = reduce_node(L2, opset, "x", "norm", [-1], axes_mode, keepdims=1)
    model = model_of([l2, binary("Div", "x", "norm", "y", opset)], opset,
                     [oh.make_tensor_value_info("x", TensorProto.FLOAT, [4, 2]), *extra],
                     [oh.make_tensor_value_info("y", TensorProto.FLOAT, [4, 2]),
                      oh.make_tensor_value_info("norm", TensorProto.FLOAT, [4, 1])], inits)
    inputs = with_axes(model, {"x": x}, [-1])
    y, norm = evaluate(model, inputs)
    want_norm = np.array([[nearest(exact_l2(row), np.float32)] for row in x])
    assert max_ulps(norm, want_norm) <= 1  # the float32 contract
    np.testing.assert_array_equal(y, x / norm)  # IEEE division by our norm
    truth = np.array([[float(as_mpf(v) / exact_l2(row)) for v in row] for row in x])
    np.testing.assert_allclose(y, truth, rtol=3e-7)
    # The plain reference squares in float32: its first two rows come out wrong.
    plain_y, _ = evaluate(model, inputs, ours=False)
    assert not np.allclose(plain_y[:2], truth[:2], rtol=1e-3)
    np.testing.assert_allclose(plain_y[2:], truth[2:], rtol=3e-7)


@pytest.mark.parametrize("keepdims", [0, 1])
@pytest.mark.parametrize(("opset", "axes_mode"), cases(SUM))
def test_sum_pooling_nchw(opset, axes_mode, keepdims):
    """Global sum pooling of NCHW: ReduceSum over axes [2, 3], then Flatten to (N, C)."""
    x = np.random.default_rng(opset).uniform(-1e3, 1e3, (2, 3, 4, 5)).astype(np.float32)
    pool, inits, extra = reduce_node(SUM, opset, "x", "pooled", [2, 3], axes_mode,
                                     keepdims=keepdims)
    last = oh.make_node("Flatten", ["pooled"], ["y"]) if keepdims else oh.make_node(
        "Identity", ["pooled"], ["y"])
    model = model_of([pool, last], opset,
                     [oh.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4, 5]), *extra],
                     [oh.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])], inits)
    (y,) = evaluate(model, with_axes(model, {"x": x}, [2, 3]))
    exact = [[math.fsum(x[n, c].astype(np.float64).ravel()) for c in range(3)] for n in range(2)]
    assert y.dtype == np.float32
    assert max_ulps(y, np.array(exact, np.float32)) <= 1


def test_int32_sum_pooling_wraps():
    x = np.full((1, 2, 2, 2), 2**30, dtype=np.int32)
    pool, inits, _ = reduce_node(SUM, 13, "x", "y", [2, 3], "init", keepdims=0)
    model = model_of([pool], 13, [oh.make_tensor_value_info("x", TensorProto.INT32, [1, 2, 2, 2])],
                     [oh.make_tensor_value_info("y", TensorProto.INT32, [1, 2])], inits)
    (y,) = evaluate(model, {"x": x})
    wrapped = (4 * 2**30 + 2**31) % 2**32 - 2**31  # 2**32 wraps to 0 in int32
    np.testing.assert_array_equal(y, np.full((1, 2), wrapped, np.int32))


@pytest.mark.parametrize("opset", [18, 21, 28])
@pytest.mark.parametrize(("op", "expected"), [(SUM, lambda x: x), (L2, np.abs),
                                              (LSE, lambda x: x)])
def test_noop_with_empty_axes(op, expected, opset):
    x = np.array([[-1.5, 0.0], [2.0, -np.inf]])
    node, inits, extra = reduce_node(op, opset, "x", "y", [], "input", noop_with_empty_axes=1)
    model = model_of([node], opset, [oh.make_tensor_value_info("x", TensorProto.DOUBLE, [2, 2]),
                                     *extra],
                     [oh.make_tensor_value_info("y", TensorProto.DOUBLE, [2, 2])], inits)
    (y,) = evaluate(model, with_axes(model, {"x": x}, []))
    np.testing.assert_array_equal(y, expected(x))


# --- where the plain reference is wrong -----------------------------------------------------------

TRUTH_CASES = {  # name -> (op, data); the truth is computed exactly and rounded once
    "lse-f64-800": (LSE, np.array([800.0, 800.0])),
    "lse-f64-all-minus-inf": (LSE, np.array([-np.inf, -np.inf])),
    "lse-f64-plus-inf-alone": (LSE, np.array([np.inf])),
    "lse-f16-many": (LSE, np.linspace(-2, 2, 3001).astype(np.float16)),
    "l2-f32-3e30": (L2, np.array([3e30, 4e30], np.float32)),
    "l2-f64-3e-200": (L2, np.array([3e-200, 4e-200])),
    "l2-f16-300": (L2, np.array([300, 400], np.float16)),
    "l2-bf16-3e30": (L2, np.array([3e30, 4e30], BF16)),
}


def truth_of(op, x):
    if op == LSE and np.all(x == -np.inf):
        return np.array(-np.inf, x.dtype)
    if op == LSE and np.any(x == np.inf):
        return np.array(np.inf, x.dtype)
    return nearest(exact_l2(x) if op == L2 else exact_lse(x), x.dtype)


@pytest.mark.parametrize("opset", [13, 18])
@pytest.mark.parametrize("case", list(TRUTH_CASES))
def test_ours_give_the_truth(case, opset):
    op, x = TRUTH_CASES[case]
    elem = oh.np_dtype_to_tensor_dtype(x.dtype)
    model = model_of([oh.make_node(op, ["x"], ["y"], keepdims=0)], opset,
                     [oh.make_tensor_value_info("x", elem, list(x.shape))],
                     [oh.make_tensor_value_info("y", elem, [])])
    truth = truth_of(op, x)
    (y,) = evaluate(model, {"x": x})
    assert y.dtype == x.dtype
    assert y.shape == ()
    assert max_ulps(y, truth) <= 1, (y, truth)


def test_plain_reference_is_wrong_where_ours_are_right():
    """Only the cases that matter: the plain reference's result differs from the truth."""
    wrong = []
    for case, (op, x) in TRUTH_CASES.items():
        elem = oh.np_dtype_to_tensor_dtype(x.dtype)
        model = model_of([oh.make_node(op, ["x"], ["y"], keepdims=0)], 18,
                         [oh.make_tensor_value_info("x", elem, list(x.shape))],
                         [oh.make_tensor_value_info("y", elem, [])])
        (plain,) = evaluate(model, {"x": x}, ours=False)
        if max_ulps(np.asarray(plain, x.dtype), truth_of(op, x)) > 1:
            wrong.append(case)
    # float64 LSE at 800 is already right in the plain reference (it shifts by the max);
    # all -inf / a lone +inf give NaN there, and L2 squares in the data type.
    assert "lse-f64-800" not in wrong
    assert {"lse-f64-all-minus-inf", "lse-f64-plus-inf-alone", "l2-f32-3e30", "l2-f64-3e-200",
            "l2-f16-300", "l2-bf16-3e30"} <= set(wrong)


def test_integer_log_sum_exp_follows_the_version():
    """Version 18 takes integers (float64 arithmetic, truncated); version 28 does not."""
    x = np.array([[1, 2], [-3, -3]], dtype=np.int64)
    want = [math.trunc(math.log(math.exp(1) + math.exp(2))), math.trunc(-3 + math.log(2))]

    def model(opset):
        node, inits, _ = reduce_node(LSE, opset, "x", "y", [1], "init", keepdims=0)
        return model_of([node], opset, [oh.make_tensor_value_info("x", TensorProto.INT64, [2, 2])],
                        [oh.make_tensor_value_info("y", TensorProto.INT64, [2])], inits,
                        check=opset < 28)  # an invalid model at 28: the evaluator must say so

    (y,) = evaluate(model(18), {"x": x})
    np.testing.assert_array_equal(y, np.array(want, np.int64))
    with pytest.raises(TypeError, match=r"^ReduceLogSumExp-28: data type 'int64' is not allowed"):
        evaluate(model(28), {"x": x})
    with pytest.raises(TypeError):  # the plain reference rejects what version 18 allows
        evaluate(model(18), {"x": x}, ours=False)


# --- errors name the operator version -------------------------------------------------------------


def single(op, opset, elem, axes_input=False, **attrs):
    inputs = [oh.make_tensor_value_info("x", elem, [2, 2])]
    node = oh.make_node(op, ["x", "axes"] if axes_input else ["x"], ["y"], **attrs)
    if axes_input:
        inputs.append(oh.make_tensor_value_info("axes", TensorProto.INT64, [1]))
    graph = oh.make_graph([node], "g", inputs, [oh.make_tensor_value_info("y", elem, None)])
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)])


@pytest.mark.parametrize(("model", "inputs", "error", "message"), [
    pytest.param(single(SUM, 11, TensorProto.INT8), {"x": np.zeros((2, 2), np.int8)},
                 TypeError, r"^ReduceSum-11: data type 'int8' is not allowed", id="sum11-int8"),
    pytest.param(single(L2, 12, TensorProto.BFLOAT16), {"x": np.zeros((2, 2), BF16)},
                 TypeError, r"^ReduceL2-11: data type 'bfloat16' is not allowed", id="l2-11-bf16"),
    pytest.param(single(SUM, 13, TensorProto.FLOAT, True),
                 {"x": np.zeros((2, 2), np.float32), "axes": np.array([0], np.int32)},
                 TypeError, r"^ReduceSum-13: the axes input must be a tensor\(int64\), got int32",
                 id="sum13-axes-int32"),
    pytest.param(single(SUM, 13, TensorProto.FLOAT, True),
                 {"x": np.zeros((2, 2), np.float32), "axes": np.array([5])},
                 ValueError, r"^ReduceSum-13: axis 5 is out of range", id="sum13-axis5"),
    pytest.param(single(L2, 18, TensorProto.FLOAT, axes=[0]), {"x": np.zeros((2, 2), np.float32)},
                 ValueError, r"^ReduceL2-18: attribute 'axes' is not defined", id="l2-18-attr"),
    pytest.param(single(LSE, 11, TensorProto.FLOAT, keepdims=2),
                 {"x": np.zeros((2, 2), np.float32)}, ValueError,
                 r"^ReduceLogSumExp-11: attribute 'keepdims' must be 0 or 1", id="lse11-keepdims"),
])
def test_errors_name_op_and_version(model, inputs, error, message):
    with pytest.raises(error, match=message) as info:
        ReferenceEvaluator(model, new_ops=onnx_reduce.reference_ops()).run(None, inputs)
    assert type(info.value) is error  # not the reference's generic "Issues with types ..."


# --- model-local functions ------------------------------------------------------------------------


def function_model():
    """A model calling local.L2Normalize(x) = x / ReduceL2(x, axes=[0])."""
    body = [oh.make_node(L2, ["x"], ["n"], axes=[0]), oh.make_node("Div", ["x", "n"], ["y"])]
    fn = oh.make_function("local", "L2Normalize", ["x"], ["y"], body, [oh.make_opsetid("", 13)])
    call = oh.make_node("L2Normalize", ["x"], ["y"], domain="local")
    return model_of([call], 13, [oh.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                    [oh.make_tensor_value_info("y", TensorProto.FLOAT, [2])], functions=[fn])


FUNCTION_X = np.array([3e30, 4e30], np.float32)
FUNCTION_Y = np.array([3e30, 4e30], np.float32) / nearest(exact_l2(FUNCTION_X), np.float32)


@pytest.mark.xfail(strict=True, raises=AssertionError,
                   reason="onnx 1.23 builds the evaluators of model-local functions without "
                   "new_ops, so the reference's own ReduceL2 runs inside them")
def test_inside_a_local_function():
    (y,) = evaluate(function_model(), {"x": FUNCTION_X})
    np.testing.assert_array_equal(y, FUNCTION_Y)


def test_inside_a_local_function_once_inlined():
    """The workaround: inline the local functions first."""
    model = inline_local_functions(function_model())
    assert [n.op_type for n in model.graph.node] == [L2, "Div"]
    (y,) = evaluate(model, {"x": FUNCTION_X})
    np.testing.assert_array_equal(y, FUNCTION_Y)


def test_reference_ops_callable_after_submodule_import():
    import onnx_reduce.reference_plugin  # importing the submodule must not shadow the function

    ops = onnx_reduce.reference_ops()
    assert sorted(op.__name__ for op in ops) == sorted(OPS)
    assert onnx_reduce.reference_ops is not None
