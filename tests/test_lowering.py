"""onnx_reduce.lowering (expand, expand_model): the spec's function bodies and the stable
lowering, run through onnxruntime and onnx.reference (without our plug-in) and compared with
our kernels at the same version."""

from __future__ import annotations

import math
import warnings
import zlib

import ml_dtypes
import mpmath
import numpy as np
import onnx
import onnx.helper as oh
import onnxruntime as ort
import pytest
from onnx import TensorProto
from onnx.reference import ReferenceEvaluator

import onnx_reduce
from onnx_reduce.lowering import expand, expand_model

L2, LSE, SUM = "ReduceL2", "ReduceLogSumExp", "ReduceSum"
SSQ, LOGSUM = "ReduceSumSquare", "ReduceLogSum"
BF16 = np.dtype(ml_dtypes.bfloat16)
#: onnxruntime 1.31 loads models up to opset 26; newer opsets run in onnx.reference only.
ORT_MAX_OPSET = 26
KERNEL = {record.name: getattr(onnx_reduce, record.function)
          for record in onnx_reduce.spec.REGISTRY}


# --- building and running one-node models ---------------------------------------------------------


def one_node_model(op, opset, x, axes=None, keepdims=1, noop=None, axes_mode="init", out_shape=()):
    """A model with one ``op`` node at ``opset``; axes as attribute (versions before 18) or as an
    initializer (``axes_mode="init"``) or a graph input (``"input"``); output of ``out_shape``."""
    ver = onnx_reduce.spec.resolve(op, opset)
    elem = oh.np_dtype_to_tensor_dtype(x.dtype)
    node = oh.make_node(op, ["x"], ["y"], keepdims=keepdims)
    if noop is not None:
        node.attribute.append(oh.make_attribute("noop_with_empty_axes", noop))
    inputs = [oh.make_tensor_value_info("x", elem, list(x.shape))]
    inits = []
    if axes is not None and not ver.axes_is_input:
        node.attribute.append(oh.make_attribute("axes", axes, attr_type=onnx.AttributeProto.INTS))
    elif axes is not None:
        node.input.append("axes")
        if axes_mode == "init":
            inits.append(oh.make_tensor("axes", TensorProto.INT64, [len(axes)], axes))
        else:
            inputs.append(oh.make_tensor_value_info("axes", TensorProto.INT64, [len(axes)]))
    graph = oh.make_graph([node], "g", inputs, [oh.make_tensor_value_info("y", elem, out_shape)],
                          initializer=inits)
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)])
    model.ir_version = oh.find_min_ir_version_for(list(model.opset_import))
    return model


def feeds(model, x, axes):
    out = {"x": x}
    if any(i.name == "axes" for i in model.graph.input):
        out["axes"] = np.array(axes, dtype=np.int64)
    return out


def run_reference(model, inputs):
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        return ReferenceEvaluator(model).run(None, inputs)[0]


def run_ort(model, inputs, optimize=True):
    options = ort.SessionOptions()
    if not optimize:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    return session.run(None, inputs)[0]


def runtimes(opset, dtype):
    """The runtimes that can run an expanded model of ``dtype`` at ``opset``."""
    names = ["reference"]
    if opset <= ORT_MAX_OPSET and np.dtype(dtype) != BF16:  # ORT's python API takes no bfloat16
        names.append("onnxruntime")
    return names


def run(name, model, inputs):
    return run_reference(model, inputs) if name == "reference" else run_ort(model, inputs)


def expanded(model, stable):
    out = expand_model(model, stable=stable)
    onnx.checker.check_model(out, full_check=True)
    return out


# --- tolerances -----------------------------------------------------------------------------------


def rtol(op, dtype, stable, n):
    """What each expansion's arithmetic allows against our <= 1 ulp kernels (n: values reduced)."""
    eps = float(ml_dtypes.finfo(dtype).eps)
    if stable:
        # float16/bfloat16 accumulate in float32; float32/float64 in their own type.
        return 3 * eps if dtype in (np.float16, BF16) else (n + 4) * eps
    if op == L2:
        # Body: Mul and ReduceSum in the data type, then Sqrt in float32 (Cast to=FLOAT),
        # so even float64 data gets a float32-accurate result.
        return (n + 4) * max(eps, float(np.finfo(np.float32).eps))
    # Body: everything in float64, one CastLike at the end.
    return (n + 4) * eps if dtype == np.float64 else 3 * eps


# --- every version with a body, both modes, against the kernels -----------------------------------

AXES_CASES = {  # name -> (axes, noop_with_empty_axes)
    "all": (None, None),
    "one": ([1], None),
    "two": ([0, 2], None),
    "neg": ([-1], None),
    "empty": ([], None),
    "empty_noop": ([], 1),
}
SHAPE = (3, 4, 5)
BODY_CASES = [(L2, 18), (L2, 21), (LSE, 18), (LSE, 21), (LSE, 28), (SSQ, 18), (SSQ, 21),
              (LOGSUM, 18), (LOGSUM, 28)]
STABLE_CASES = [(op, o) for op in (L2, LSE, SSQ, LOGSUM) for o in (13, 15, 17, 18, 21, 26, 28)]


def matrix():
    for stable, cases in ((False, BODY_CASES), (True, STABLE_CASES)):
        for op, opset in cases:
            axes_input = onnx_reduce.spec.resolve(op, opset).axes_is_input
            for axes_name, (axes, noop) in AXES_CASES.items():
                if noop and not axes_input:
                    continue
                modes = ["init", "input"] if axes_input and axes is not None else ["attr"]
                if axes_name not in ("two", "empty_noop"):
                    modes = modes[:1]
                for mode in modes:
                    tag = f"{op}-{opset}-{'stable' if stable else 'spec'}-{axes_name}-{mode}"
                    yield pytest.param(op, opset, stable, axes, noop, mode, id=tag)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16], ids=lambda d: d.__name__)
@pytest.mark.parametrize("keepdims", [0, 1])
@pytest.mark.parametrize(("op", "opset", "stable", "axes", "noop", "mode"), list(matrix()))
def test_expansion_matches_kernels(op, opset, stable, axes, noop, mode, keepdims, dtype):
    rng = np.random.default_rng(zlib.crc32(repr((op, opset, stable, mode, keepdims)).encode()))
    # Magnitudes from 0.1: the spec body squares float16 data in float16, and squares below
    # 6.1e-5 (|x| < 0.0078) are subnormal there, with a larger relative error than rtol allows.
    x = (rng.choice([-1, 1], SHAPE) * rng.uniform(0.1, 3, SHAPE)).astype(dtype)
    if op == LOGSUM:
        x = np.abs(x)  # the log of a negative sum is NaN
    want = KERNEL[op](x, axes=axes, keepdims=bool(keepdims), noop_with_empty_axes=bool(noop),
                      opset=opset)
    model = expanded(one_node_model(op, opset, x, axes, keepdims, noop, mode, list(want.shape)),
                     stable)
    assert not any(n.op_type == op for n in model.graph.node)
    n = x.size // want.size
    tol = rtol(op, np.dtype(dtype), stable, n)
    atol = tol * 8 if op in (LSE, LOGSUM) else 0  # results near 0: their error is absolute
    for name in runtimes(opset, dtype):
        got = run(name, model, feeds(model, x, axes))
        assert got.dtype == want.dtype, name
        assert got.shape == want.shape, name
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=tol,
                                   atol=atol, err_msg=name)


@pytest.mark.parametrize("stable", [False, True], ids=["spec", "stable"])
@pytest.mark.parametrize(("op", "opset"), [(L2, 18), (LSE, 18), (L2, 28), (LSE, 28), (SSQ, 18),
                                           (LOGSUM, 18), (LOGSUM, 28)])
def test_bfloat16_in_reference(op, opset, stable):
    # onnxruntime's python API cannot feed bfloat16, so only onnx.reference runs these.
    x = np.random.default_rng(7).uniform(0 if op == LOGSUM else -3, 3, SHAPE).astype(BF16)
    want = KERNEL[op](x, axes=[2], keepdims=False, opset=opset)
    model = one_node_model(op, opset, x, [2], 0, out_shape=[3, 4])
    got = run_reference(expanded(model, stable), {"x": x})
    assert got.dtype == BF16
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64),
                               rtol=2 * float(ml_dtypes.finfo(BF16).eps), atol=1e-2)


@pytest.mark.parametrize("stable", [False, True], ids=["spec", "stable"])
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("op", [L2, LSE])
def test_integers_at_18(op, dtype, stable):
    # Version 18 takes integers: L2 is floor(sqrt(sum x^2)), LSE computes in float64 and truncates.
    x = np.random.default_rng(3).integers(-5, 6, SHAPE).astype(dtype)
    want = KERNEL[op](x, axes=[1], keepdims=True, opset=18)
    model = expanded(one_node_model(op, 18, x, [1], 1, out_shape=[3, 1, 5]), stable)
    for name in runtimes(18, dtype):
        got = run(name, model, {"x": x})
        assert got.dtype == dtype
        np.testing.assert_array_equal(got, want, err_msg=name)


@pytest.mark.parametrize("stable", [False, True], ids=["spec", "stable"])
@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint32])
def test_integer_sum_square_wraps_like_the_kernel(dtype, stable):
    # The spec body and the stable lowering both square and sum in the integer type, which
    # wraps in onnx.reference (numpy); onnxruntime's int32 sum gives INT_MIN on overflow instead.
    x = np.array([[50000, 50000, 3], [2**15, 7, 1]]).astype(dtype)
    want = KERNEL[SSQ](x, axes=[1], keepdims=True, opset=18)
    model = expanded(one_node_model(SSQ, 18, x, [1], 1, out_shape=[2, 1]), stable)
    np.testing.assert_array_equal(run_reference(model, {"x": x}), want)


def test_stable_integer_log_sum_truncates_like_the_kernel():
    # The spec body's Log takes no integers; the stable lowering works in float64 and casts.
    x = np.array([[2, 5, 1], [40, 1, 0]], np.int32)
    want = KERNEL[LOGSUM](x, axes=[1], keepdims=True, opset=18)
    model = expanded(one_node_model(LOGSUM, 18, x, [1], 1, out_shape=[2, 1]), True)
    for name in runtimes(18, x.dtype):
        np.testing.assert_array_equal(run(name, model, {"x": x}), want, err_msg=name)


# --- where the spec body fails and the stable lowering does not -----------------------------------


def nearest(value: mpmath.mpf, dtype) -> np.ndarray:
    """``value`` correctly rounded to ``dtype`` (decided by exact comparison of the neighbours)."""
    dtype = np.dtype(dtype)
    bits = {2: np.int16, 4: np.int32, 8: np.int64}[dtype.itemsize]
    guess = int(np.array(float(value)).astype(dtype).view(bits))
    around = [np.array(guess + k, dtype=bits).view(dtype) for k in (-1, 0, 1)]
    around = [c for c in around if np.isfinite(c)]
    return min(around, key=lambda c: abs(mpmath.mpf(float(c)) - value))


def exact_l2(x) -> mpmath.mpf:
    with mpmath.workprec(300):
        return mpmath.sqrt(sum(mpmath.mpf(float(v)) ** 2 for v in x.ravel()))


def exact_lse(x) -> mpmath.mpf:
    with mpmath.workprec(300):
        return mpmath.log(sum(mpmath.exp(mpmath.mpf(float(v))) for v in x.ravel()))


def ulps(got, want, dtype) -> int:
    bits = {2: np.int16, 4: np.int32, 8: np.int64}[np.dtype(dtype).itemsize]
    return abs(int(np.asarray(got, dtype).view(bits)) - int(np.asarray(want, dtype).view(bits)))


# (op, data, opset, what the spec body gives there). The spec body's values are what its own math
# gives (Exp of 800 is inf in float64, 3e30**2 is inf in float32, (3e-200)**2 is 0 in float64),
# so asserting them is asserting the spec, not copying a runtime's output.
OVERFLOW_CASES = {
    "lse-f64-800": (LSE, np.array([800.0, 800.0]), 18, np.inf),
    "lse-f64-minus800": (LSE, np.array([-800.0, -800.0]), 18, -np.inf),
    "lse-f64-800-opset28": (LSE, np.array([800.0, 800.0]), 28, np.inf),
    "l2-f32-3e30": (L2, np.array([3e30, 4e30], np.float32), 18, np.inf),
    "l2-f64-3e-200": (L2, np.array([3e-200, 4e-200]), 18, 0.0),
    "l2-f64-3e200": (L2, np.array([3e200, 4e200]), 18, np.inf),
    "l2-bf16-3e30": (L2, np.array([3e30, 4e30], BF16), 18, np.inf),
}


@pytest.mark.parametrize("case", list(OVERFLOW_CASES))
def test_stable_survives_where_spec_body_fails(case):
    op, x, opset, spec_value = OVERFLOW_CASES[case]
    truth = nearest(exact_l2(x) if op == L2 else exact_lse(x), x.dtype)
    model = one_node_model(op, opset, x, keepdims=0)
    spec, stable = expanded(model, False), expanded(model, True)
    # The literal spec math (onnx.reference follows it op by op):
    assert run_reference(spec, {"x": x}) == spec_value
    for name in runtimes(opset, x.dtype):
        got = run(name, stable, {"x": x})
        assert got.dtype == x.dtype
        assert ulps(got, truth, x.dtype) <= 1, (name, got, truth)
    # And our kernel agrees with the truth.
    assert ulps(KERNEL[op](x, keepdims=False, opset=opset), truth, x.dtype) <= 1


def test_stable_lse_800_is_800_plus_log2_exactly():
    x = np.array([800.0, 800.0])
    truth = float(mpmath.mpf(800) + mpmath.log(2))  # correctly rounded (mpmath prec 53 rounds)
    assert truth == 800 + math.log(2)
    model = expanded(one_node_model(LSE, 18, x, keepdims=0), True)
    for name in runtimes(18, x.dtype):
        assert run(name, model, {"x": x}) == truth, name


def test_float16_l2_300_400_is_500():
    x = np.array([300, 400], np.float16)
    model = one_node_model(L2, 18, x, keepdims=0)
    stable = expanded(model, True)
    for name in runtimes(18, x.dtype):
        assert run(name, stable, {"x": x}) == np.float16(500), name
    # The spec body squares in float16: 300**2 = 90000 > 65504, so it gives inf. (onnxruntime
    # runs float16 Mul in float32 through its inserted casts, so it is not asserted there.)
    assert run_reference(expanded(model, False), {"x": x}) == np.inf


SPECIAL_CASES = {  # name -> (op, data, expected for the stable lowering (and the truth))
    "lse-all-minus-inf": (LSE, [-np.inf, -np.inf], -np.inf),
    "lse-plus-inf": (LSE, [np.inf, 0.0, -np.inf], np.inf),
    "lse-plus-inf-alone": (LSE, [np.inf], np.inf),
    "lse-nan": (LSE, [np.nan, 1.0, np.inf], np.nan),
    "l2-inf": (L2, [np.inf, 1.0], np.inf),
    "l2-minus-inf": (L2, [-np.inf, -1e30], np.inf),
    "l2-nan": (L2, [np.nan, np.inf], np.nan),
    "l2-zeros": (L2, [0.0, -0.0], 0.0),
}


@pytest.mark.parametrize("opset", [13, 18])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", list(SPECIAL_CASES))
def test_stable_special_values(case, dtype, opset):
    op, data, expected = SPECIAL_CASES[case]
    x = np.array(data, dtype=dtype)
    model = expanded(one_node_model(op, opset, x, keepdims=0), True)
    for name in runtimes(opset, dtype):
        np.testing.assert_array_equal(run(name, model, {"x": x}), np.array(expected, dtype),
                                      err_msg=name)
    np.testing.assert_array_equal(KERNEL[op](x, keepdims=False, opset=opset), expected)


def test_spec_body_all_minus_inf_is_minus_inf():
    # Exp(-inf) = 0, Log(0) = -inf: the spec body is right here (the plain onnx.reference
    # ReduceLogSumExp kernel is not, it gives NaN; see test_reference_ops).
    x = np.array([-np.inf, -np.inf])
    model = expanded(one_node_model(LSE, 18, x, keepdims=0), False)
    for name in runtimes(18, x.dtype):
        assert run(name, model, {"x": x}) == -np.inf, name


@pytest.mark.parametrize("stable", [False, True], ids=["spec", "stable"])
@pytest.mark.parametrize(("op", "expected"), [(LSE, -np.inf), (L2, 0.0), (SSQ, 0.0),
                                              (LOGSUM, -np.inf)])
def test_empty_reduction(op, expected, stable):
    x = np.zeros((2, 0), dtype=np.float32)
    model = expanded(one_node_model(op, 18, x, [1], 1, out_shape=[2, 1]), stable)
    for name in runtimes(18, x.dtype):
        np.testing.assert_array_equal(run(name, model, {"x": x}), np.full((2, 1), expected),
                                      err_msg=name)


# --- the expansion itself -------------------------------------------------------------------------


def test_spec_body_is_the_schema_body_with_attributes_substituted():
    node = oh.make_node(LSE, ["data_in", "ax"], ["out"], keepdims=0, name="lse")
    nodes = expand(node, 18)
    body = onnx.defs.get_schema(LSE, 18).function_body
    assert [n.op_type for n in nodes] == [n.op_type for n in body.node]
    assert all(not a.ref_attr_name for n in nodes for a in n.attribute)
    reduce_sum = next(n for n in nodes if n.op_type == SUM)
    attrs = {a.name: oh.get_attribute_value(a) for a in reduce_sum.attribute}
    assert attrs == {"keepdims": 0, "noop_with_empty_axes": 0}  # given value, schema default
    assert list(reduce_sum.input)[1] == "ax"
    assert nodes[0].input[0] == "data_in"
    assert list(nodes[-1].output) == ["out"]
    internal = {o for n in nodes for o in n.output} - {"out"}
    assert all(name.startswith("lse/") for name in internal)


def test_missing_axes_input_stays_missing():
    nodes = expand(oh.make_node(L2, ["x"], ["y"]), 18)
    reduce_sum = next(n for n in nodes if n.op_type == SUM)
    assert len(reduce_sum.input) == 1
    attrs = {a.name: oh.get_attribute_value(a) for a in reduce_sum.attribute}
    assert attrs == {"keepdims": 1, "noop_with_empty_axes": 0}  # both defaults


@pytest.mark.parametrize("opset", [18, 21, 28])
def test_stable_lowering_is_wired_to_the_node(opset):
    node = oh.make_node(LSE, ["x", "ax"], ["y"], keepdims=0)
    nodes = expand(node, opset, stable=True, dtype="float16")
    produced = {o for n in nodes for o in n.output}
    consumed = {i for n in nodes for i in n.input if i}
    assert consumed - produced == {"x", "ax"}
    assert produced - consumed == {"y"}
    assert all(o == "y" or o.startswith("y/") for o in produced)
    assert nodes[0].op_type == "Cast"  # float16 accumulates in float32
    assert oh.get_attribute_value(nodes[0].attribute[0]) == TensorProto.FLOAT
    assert nodes[-1].op_type == "Cast"
    assert oh.get_attribute_value(nodes[-1].attribute[0]) == TensorProto.FLOAT16
    assert sum(n.op_type == "Constant" for n in nodes) >= 1


def test_stable_float64_needs_no_cast_and_opset13_uses_axes_attribute():
    node = oh.make_node(L2, ["x"], ["y"], axes=[0, 1])
    nodes = expand(node, 13, stable=True, dtype=np.float64)
    ops = [n.op_type for n in nodes]
    assert "Cast" not in ops
    assert "CastLike" not in ops
    reduce_max = next(n for n in nodes if n.op_type == "ReduceMax")
    assert {a.name: oh.get_attribute_value(a) for a in reduce_max.attribute} == {
        "axes": [0, 1], "keepdims": 1}
    reduce_sum = next(n for n in nodes if n.op_type == SUM)
    assert len(reduce_sum.input) == 2  # axes as an input (a Constant) for ReduceSum-13


def test_stable_without_dtype_computes_in_float64_with_castlike():
    node = oh.make_node(LSE, ["x", "axes"], ["y"], keepdims=1)
    nodes = expand(node, 18, stable=True)
    assert nodes[0].op_type == "Cast"
    assert oh.get_attribute_value(nodes[0].attribute[0]) == TensorProto.DOUBLE
    assert nodes[-1].op_type == "CastLike"
    x = np.random.default_rng(1).uniform(-3, 3, SHAPE).astype(np.float32)
    graph = oh.make_graph(nodes, "g", [oh.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
                          [oh.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4, 1])],
                          initializer=[oh.make_tensor("axes", TensorProto.INT64, [1], [2])])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    want = onnx_reduce.reduce_log_sum_exp(x, axes=[2], opset=18)
    for name in runtimes(18, x.dtype):
        np.testing.assert_allclose(run(name, model, {"x": x}), want, rtol=3e-7, err_msg=name)


def test_reduce_sum_is_a_primitive():
    node = oh.make_node(SUM, ["x"], ["y"])
    with pytest.raises(ValueError, match=r"ReduceSum-13 is a primitive"):
        expand(node, 13)
    assert expand(node, 13, stable=True) == [node]


@pytest.mark.parametrize(("op", "opset", "label"), [
    (L2, 1, "ReduceL2-1"), (L2, 11, "ReduceL2-11"), (L2, 17, "ReduceL2-13"),
    (LSE, 13, "ReduceLogSumExp-13"), (SUM, 11, "ReduceSum-11"),
])
def test_versions_without_body_raise(op, opset, label):
    with pytest.raises(ValueError, match=rf"^{label} "):
        expand(oh.make_node(op, ["x"], ["y"]), opset)


def test_errors():
    lse = oh.make_node(LSE, ["x"], ["y"])
    with pytest.raises(ValueError, match=r"ReduceLogSumExp-11: the stable lowering needs opset"):
        expand(lse, 12, stable=True)
    with pytest.raises(ValueError, match=r"ReduceLogSumExp-13: at opset 14 .* pass dtype="):
        expand(lse, 14, stable=True)
    with pytest.raises(TypeError, match=r"ReduceLogSumExp-28: data type 'int32' is not allowed"):
        expand(lse, 28, stable=True, dtype=np.int32)
    with pytest.raises(TypeError, match=r"ReduceLogSumExp-18: data type 'int8'"):
        expand(lse, 18, stable=True, dtype="int8")
    with pytest.raises(TypeError, match=r"ReduceLogSumExp-18: unknown ONNX element type 99"):
        expand(lse, 18, stable=True, dtype=99)
    with pytest.raises(ValueError, match=r"not one of ReduceSum"):
        expand(oh.make_node("ReduceMax", ["x"], ["y"]), 18)
    with pytest.raises(ValueError, match=r"ReduceL2-13: expected 1 input"):
        expand(oh.make_node(L2, ["x", "axes"], ["y"]), 13, stable=True, dtype="float")
    with pytest.raises(ValueError, match=r"ReduceL2-18: attribute 'axes' is not defined"):
        expand(oh.make_node(L2, ["x"], ["y"], axes=[0]), 18)
    with pytest.raises(ValueError, match=r"ReduceL2-18: attribute 'keepdims' must be 0 or 1"):
        expand(oh.make_node(L2, ["x"], ["y"], keepdims=2), 18)


def test_expand_model_keeps_other_nodes_and_names_are_unique():
    # Two unnamed LSE nodes, a tensor already called "a/sum" (a clash for the prefix "a"),
    # a ReduceSum and an Identity that must stay.
    x = np.random.default_rng(5).uniform(-3, 3, (2, 3)).astype(np.float32)
    nodes = [
        oh.make_node("Identity", ["x"], ["a/sum"]),
        oh.make_node(LSE, ["a/sum"], ["a"], keepdims=1),
        oh.make_node(LSE, ["x"], ["b"], keepdims=1),
        oh.make_node("Add", ["a", "b"], ["c"]),
        oh.make_node(SUM, ["c"], ["y"], keepdims=0),
    ]
    graph = oh.make_graph(nodes, "g", [oh.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                          [oh.make_tensor_value_info("y", TensorProto.FLOAT, [])])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)])
    model.ir_version = 8
    lse = float(exact_lse(x))
    for stable in (False, True):
        out = expanded(model, stable)
        ops = [n.op_type for n in out.graph.node]
        assert ops[0] == "Identity"
        assert ops[-2:] == ["Add", SUM]
        assert LSE not in ops
        produced = [o for n in out.graph.node for o in n.output]
        assert len(produced) == len(set(produced))
        for name in runtimes(18, x.dtype):
            assert run(name, out, {"x": x}) == pytest.approx(2 * lse, rel=1e-6), name
    # The input model is not modified.
    before = model.SerializeToString()
    expand_model(model, stable=True)
    assert model.SerializeToString() == before


def test_package_exports_expand():
    node = oh.make_node(L2, ["x"], ["y"])
    assert [n.op_type for n in onnx_reduce.expand(node, 18)] == [
        n.op_type for n in onnx.defs.get_schema(L2, 18).function_body.node]
    assert onnx_reduce.expand(node, 18) == expand(node, 18)  # also once the submodule is bound


@pytest.mark.parametrize(
    ("dtype", "values"),
    [(np.float32, [3e38, 3e38]), (BF16, [3e38, 3e38]), (np.float64, [1e308, 1e308]),
     (np.float64, [1e308, -5e307, 1e308]), (np.float32, [1e-40, 1e-40])],
)
def test_stable_log_sum_does_not_overflow_where_the_log_is_finite(dtype, values):
    """log(sum x) of elements near the largest float: the narrow floats sum in float64, float64
    divided by its largest magnitude first (Log(ReduceSum(x / s)) + Log(s)); the spec's body
    and a plain Log(ReduceSum(x)) give inf."""
    x = np.array([values]).astype(dtype)
    want = KERNEL[LOGSUM](x, axes=[1], keepdims=True, opset=18)
    assert np.isfinite(want.astype(np.float64)).all()
    model = expanded(one_node_model(LOGSUM, 18, x, [1], 1, out_shape=[1, 1]), True)
    for name in runtimes(18, x.dtype):
        got = run(name, model, {"x": x})
        assert got.dtype == x.dtype
        spacing = np.spacing(np.abs(want.astype(np.float64)))
        assert np.abs(got.astype(np.float64) - want.astype(np.float64)) <= 4 * spacing, name


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda: expand_model(None), TypeError, r"^expand_model takes an onnx\.ModelProto"),
        (lambda: expand(None, 18), TypeError, r"^expand takes an onnx\.NodeProto"),
        (lambda: expand(oh.make_node(L2, [], ["y"]), 18, stable=True, dtype="float"),
         ValueError, r"^ReduceL2-18: expected 1 or 2 inputs and 1 output"),
        (lambda: expand(oh.make_node(L2, ["x"], []), 18, stable=True, dtype="float"),
         ValueError, r"^ReduceL2-18: expected 1 or 2 inputs and 1 output"),
        (lambda: expand(oh.make_node(L2, ["x"], ["y"]), 18, stable=True, dtype=0),
         TypeError, r"^ReduceL2-18: unknown ONNX element type 0$"),
        (lambda: expand_model(oh.make_model(oh.make_graph(
            [oh.make_node(L2, ["x"], [])], "g", [oh.make_tensor_value_info("x", 1, [2])], []),
            opset_imports=[oh.make_opsetid("", 18)]), stable=True),
         ValueError, r"^ReduceL2-18: expected 1 or 2 inputs and 1 output"),
    ],
)
def test_bad_nodes_and_models_get_a_one_line_error(call, error, message):
    with pytest.raises(error, match=message):
        call()


def test_an_attribute_given_twice_or_by_reference_is_refused():
    twice = oh.make_node(L2, ["x"], ["y"], keepdims=1)
    twice.attribute.append(oh.make_attribute("keepdims", 0))
    with pytest.raises(ValueError, match=r"^ReduceL2-18: attribute 'keepdims' is given twice$"):
        expand(twice, 18, stable=True, dtype="float")
    referring = oh.make_node(L2, ["x"], ["y"])
    referring.attribute.append(oh.make_attribute_ref("keepdims", onnx.AttributeProto.INT))
    with pytest.raises(ValueError, match=r"'keepdims' refers to 'keepdims' of an enclosing"):
        expand(referring, 18, stable=True, dtype="float")


def test_new_names_avoid_the_names_of_subgraphs():
    """An If branch already writes 'y/max': the lowering of the main graph's node writing 'y'
    takes another prefix, so the model stays in single-assignment form."""
    then = oh.make_graph([oh.make_node("Identity", ["x"], ["y/max"])], "then", [],
                         [oh.make_tensor_value_info("y/max", TensorProto.FLOAT, [2])])
    other = oh.make_graph([oh.make_node("Identity", ["x"], ["e"])], "else", [],
                          [oh.make_tensor_value_info("e", TensorProto.FLOAT, [2])])
    nodes = [oh.make_node(L2, ["x"], ["y"], keepdims=0),
             oh.make_node("If", ["c"], ["z"], then_branch=then, else_branch=other)]
    graph = oh.make_graph(nodes, "g", [oh.make_tensor_value_info("x", TensorProto.FLOAT, [2]),
                                       oh.make_tensor_value_info("c", TensorProto.BOOL, [])],
                          [oh.make_tensor_value_info("y", TensorProto.FLOAT, []),
                           oh.make_tensor_value_info("z", TensorProto.FLOAT, [2])])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)])
    lowered = expanded(model, True)
    x = np.array([3.0, 4.0], np.float32)
    got = run_reference(lowered, {"x": x, "c": np.array(True)})
    assert got == np.float32(5.0)
