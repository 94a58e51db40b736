"""Every error of the contract, at every version where it applies, through every front door.

Each error must be a ``TypeError`` (wrong type or dtype) or a ``ValueError`` (wrong value) - exactly
that class - and its message must name the op-version label (``"ReduceSum-13"``) and the offending
value. The same call is made through the pipeline (``pipeline.execute``), the ONNX backend
(``backend.prepare(model).run``) and, where the call can be expressed there, the numpy-style
functions, to show that no front door fails differently.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import mpmath
import numpy as np
import onnx
import onnx.defs
import onnx.helper as oh
import pytest

import onnx_reduce
from onnx_reduce import backend, pipeline
from onnx_reduce.pipeline import execute
from onnx_reduce.spec import (
    REGISTRY,
    VERSIONS,
    OpVersion,
    bfloat16,
    check_axes,
    op_record,
    validate,
)
from onnx_reduce.spec.table import OPS

ALL = [VERSIONS[op][v] for op in OPS for v in VERSIONS[op]]
ATTRIBUTE_AXES = [ver for ver in ALL if not ver.axes_is_input]
INPUT_AXES = [ver for ver in ALL if ver.axes_is_input]
#: Integer versions of the ops whose empty reduction is -inf (ReduceLogSumExp, ReduceLogSum).
INTEGER_LSE = [ver for ver in ALL if ver.record.empty < 0 and "int32" in ver.dtypes]
FUNCTIONS = {record.name: getattr(onnx_reduce, record.function) for record in REGISTRY}


def _ids(vers: list[OpVersion]) -> list[str]:
    return [v.label for v in vers]


# --- the front doors -------------------------------------------------------------------------

Runner = Callable[[OpVersion, np.ndarray, Mapping[str, Any], "np.ndarray | None"], np.ndarray]


def run_pipeline(ver, data, attributes, axes_input):
    return execute(ver, data, attributes, axes_input)


def _value_info(name: str, array: np.ndarray) -> onnx.ValueInfoProto:
    try:
        elem = oh.np_dtype_to_tensor_dtype(array.dtype)
    except (KeyError, TypeError, ValueError):
        elem = onnx.TensorProto.FLOAT  # the backend never trusts the declared type
    return oh.make_tensor_value_info(name, elem, list(array.shape))


def run_backend(ver, data, attributes, axes_input):
    names, feeds = ["data"], [data]
    if axes_input is not None:
        names.append("axes")
        feeds.append(axes_input)
    node = oh.make_node(ver.op, names, ["out"])
    for name, value in attributes.items():
        kind = onnx.AttributeProto.INTS if name == "axes" else None
        node.attribute.append(oh.make_attribute(name, value, attr_type=kind))
    graph = oh.make_graph(
        [node], "g", [_value_info(n, f) for n, f in zip(names, feeds, strict=True)],
        [oh.make_tensor_value_info("out", onnx.TensorProto.FLOAT, None)],
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", ver.version)])
    return backend.prepare(model).run(feeds)[0]


def run_functions(ver, data, attributes, axes_input):
    """The same call through ``onnx_reduce.reduce_*`` (only for calls the functions can express)."""
    extra = set(attributes) - {"axes", "keepdims", "noop_with_empty_axes"}
    assert not extra
    assert axes_input is None or "axes" not in attributes
    kwargs = {k: v for k, v in attributes.items() if k != "axes"}
    axes = attributes.get("axes", axes_input)
    return FUNCTIONS[ver.op](data, axes, opset=ver.version, **kwargs)


RUNNERS = {"pipeline": run_pipeline, "backend": run_backend, "functions": run_functions}
DOORS = list(RUNNERS)
MODEL_DOORS = ["pipeline", "backend"]


def expect_error(exc: type[Exception], call: Callable[[], Any], *fragments: str) -> str:
    with pytest.raises(exc) as info:
        call()
    assert type(info.value) is exc, f"{type(info.value).__name__}: {info.value}"
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"
    return message


def axes_call(ver: OpVersion, axes: list[int]) -> tuple[dict, np.ndarray | None]:
    """Attributes and axes input that pass ``axes`` the way ``ver`` takes them."""
    if ver.axes_is_input:
        return {}, np.array(axes, dtype=np.int64)
    return {"axes": axes}, None


# --- axes ------------------------------------------------------------------------------------


@pytest.mark.parametrize("door", DOORS)
@pytest.mark.parametrize("ver", ALL, ids=_ids(ALL))
@pytest.mark.parametrize("axes", [[0, 0], [1, -2], [2, 0, -1]])
def test_duplicate_axes(door: str, ver: OpVersion, axes: list[int]) -> None:
    data = np.ones((2, 3, 4), np.float32)
    attributes, axes_input = axes_call(ver, axes)
    expect_error(
        ValueError, lambda: RUNNERS[door](ver, data, attributes, axes_input),
        ver.label, str(axes), "more than once",
    )


@pytest.mark.parametrize("door", DOORS)
@pytest.mark.parametrize("ver", ALL, ids=_ids(ALL))
@pytest.mark.parametrize(
    ("shape", "axes", "bad"),
    [((2, 3, 4), [3], 3), ((2, 3, 4), [-4], -4), ((2, 3, 4), [0, 7], 7), ((), [0], 0),
     ((), [-1], -1), ((5,), [1], 1)],
)
def test_out_of_range_axes(door: str, ver: OpVersion, shape, axes, bad) -> None:
    data = np.ones(shape, np.float32)
    attributes, axes_input = axes_call(ver, axes)
    message = expect_error(
        ValueError, lambda: RUNNERS[door](ver, data, attributes, axes_input),
        ver.label, f"axis {bad} is out of range", f"rank {len(shape)}",
    )
    if not shape:
        assert "a rank-0 input has no axes" in message


@pytest.mark.parametrize("ver", ALL, ids=_ids(ALL))
def test_check_axes_normalises(ver: OpVersion) -> None:
    assert check_axes(ver, (-1, 0, 2), 4) == (3, 0, 2)
    assert check_axes(ver, (), 0) == ()


@pytest.mark.parametrize("door", MODEL_DOORS)
@pytest.mark.parametrize("ver", INPUT_AXES, ids=_ids(INPUT_AXES))
@pytest.mark.parametrize(
    ("axes_input", "shown"),
    [(np.array([[0]], np.int64), "[1, 1]"), (np.array(0, np.int64), "[]"),
     (np.zeros((0, 1), np.int64), "[0, 1]")],
)
def test_axes_input_not_1d(door: str, ver: OpVersion, axes_input, shown: str) -> None:
    data = np.ones((2, 3), np.float32)
    expect_error(
        ValueError, lambda: RUNNERS[door](ver, data, {}, axes_input),
        ver.label, "must be 1-D", shown,
    )


@pytest.mark.parametrize("door", MODEL_DOORS)
@pytest.mark.parametrize("ver", INPUT_AXES, ids=_ids(INPUT_AXES))
@pytest.mark.parametrize(
    ("dtype", "name"),
    [(np.int32, "int32"), (np.uint64, "uint64"), (np.float32, "float"), (np.float64, "double"),
     (np.int8, "int8"), (np.bool_, "bool")],
)
def test_axes_input_not_int64(door: str, ver: OpVersion, dtype, name: str) -> None:
    data = np.ones((2, 3), np.float32)
    axes_input = np.array([0], dtype)
    expect_error(
        TypeError, lambda: RUNNERS[door](ver, data, {}, axes_input),
        ver.label, "tensor(int64)", name,
    )


@pytest.mark.parametrize("ver", INPUT_AXES, ids=_ids(INPUT_AXES))
def test_axes_input_must_be_an_array(ver: OpVersion) -> None:
    data = np.ones((2, 3), np.float32)
    expect_error(TypeError, lambda: execute(ver, data, {}, [0]), ver.label, "list")


@pytest.mark.parametrize("door", MODEL_DOORS)
@pytest.mark.parametrize("ver", ATTRIBUTE_AXES, ids=_ids(ATTRIBUTE_AXES))
def test_axes_input_at_an_attribute_version(door: str, ver: OpVersion) -> None:
    data = np.ones((2, 3), np.float32)
    axes_input = np.array([1], np.int64)
    expect_error(
        ValueError, lambda: RUNNERS[door](ver, data, {}, axes_input),
        ver.label, "takes axes as an attribute", "[1]",
    )


@pytest.mark.parametrize("door", MODEL_DOORS)
@pytest.mark.parametrize("ver", INPUT_AXES, ids=_ids(INPUT_AXES))
def test_axes_attribute_at_an_input_version(door: str, ver: OpVersion) -> None:
    data = np.ones((2, 3), np.float32)
    expect_error(
        ValueError, lambda: RUNNERS[door](ver, data, {"axes": [1]}, None),
        ver.label, "'axes'", "is not defined at this version", "axes is an input",
    )


@pytest.mark.parametrize(
    ("door", "ver"),
    [(door, ver) for door in DOORS for ver in ALL if door != "backend" or ver.axes_is_input],
    ids=lambda p: p if isinstance(p, str) else p.label,
)
@pytest.mark.parametrize(
    ("axes", "exc", "shown"),
    [(np.array([[0]]), ValueError, "(1, 1)"), (np.array([0.0]), TypeError, "float64"),
     ([0.0], TypeError, "0.0"), ([True], TypeError, "True"), (["0"], TypeError, "'0'")],
)
def test_axes_of_the_wrong_kind_in_functions(door, ver: OpVersion, axes, exc, shown) -> None:
    """Axes that are not a sequence of integers (the functions' ``axes=``, an attribute).

    An ONNX attribute cannot hold them, so the backend only sees them as an axes input."""
    if door != "functions" and ver.axes_is_input:
        # An axes *input* must be an int64 tensor: covered by the tests above.
        axes = np.asarray(axes)
        exc, shown = (ValueError, "[1, 1]") if axes.ndim == 2 else (TypeError, "tensor(int64)")
        attributes, axes_input = {}, axes
    else:
        attributes, axes_input = {"axes": axes}, None
    data = np.ones((2, 3), np.float32)
    expect_error(exc, lambda: RUNNERS[door](ver, data, attributes, axes_input), ver.label, shown)


# --- attributes ------------------------------------------------------------------------------


@pytest.mark.parametrize("door", DOORS)
@pytest.mark.parametrize("ver", ATTRIBUTE_AXES, ids=_ids(ATTRIBUTE_AXES))
@pytest.mark.parametrize("value", [0, 1])
def test_noop_with_empty_axes_before_it_existed(door: str, ver: OpVersion, value: int) -> None:
    data = np.ones((2, 3), np.float32)
    if door == "functions" and value == 0:
        # reduce_*(..., noop_with_empty_axes=False) is the default and valid at every version.
        assert RUNNERS[door](ver, data, {"noop_with_empty_axes": value}, None).shape == (1, 1)
        return
    expect_error(
        ValueError, lambda: RUNNERS[door](ver, data, {"noop_with_empty_axes": value}, None),
        ver.label, "'noop_with_empty_axes'", "is not defined at this version",
    )


@pytest.mark.parametrize("door", MODEL_DOORS)
@pytest.mark.parametrize("ver", ALL, ids=_ids(ALL))
def test_unknown_attribute(door: str, ver: OpVersion) -> None:
    data = np.ones((2, 3), np.float32)
    expect_error(
        ValueError, lambda: RUNNERS[door](ver, data, {"select_last_index": 1}, None),
        ver.label, "'select_last_index'",
    )


@pytest.mark.parametrize("door", DOORS)
@pytest.mark.parametrize("ver", ALL, ids=_ids(ALL))
@pytest.mark.parametrize("value", [2, -1, 1.5])
def test_keepdims_not_0_or_1(door: str, ver: OpVersion, value) -> None:
    data = np.ones((2, 3), np.float32)
    expect_error(
        ValueError, lambda: RUNNERS[door](ver, data, {"keepdims": value}, None),
        ver.label, "'keepdims' must be 0 or 1", repr(value),
    )


@pytest.mark.parametrize("door", DOORS)
@pytest.mark.parametrize("ver", INPUT_AXES, ids=_ids(INPUT_AXES))
@pytest.mark.parametrize("value", [2, -1])
def test_noop_not_0_or_1(door: str, ver: OpVersion, value: int) -> None:
    data = np.ones((2, 3), np.float32)
    expect_error(
        ValueError, lambda: RUNNERS[door](ver, data, {"noop_with_empty_axes": value}, None),
        ver.label, "'noop_with_empty_axes' must be 0 or 1", repr(value),
    )


@pytest.mark.parametrize("ver", ALL, ids=_ids(ALL))
@pytest.mark.parametrize("flag", [0, 1, False, True, np.int64(1), np.bool_(False)])
def test_flags_accept_0_1_and_bools(ver: OpVersion, flag) -> None:
    attributes = {"keepdims": flag}
    if ver.axes_is_input:
        attributes["noop_with_empty_axes"] = flag
    request = validate(ver, np.dtype(np.float32), attributes)
    assert request.keepdims is bool(flag)
    assert request.noop_with_empty_axes is (bool(flag) and ver.axes_is_input)


# --- dtypes ----------------------------------------------------------------------------------

NEVER_ALLOWED = [np.int8, np.uint8, np.int16, np.uint16, np.bool_, np.complex64, np.complex128]
_ONNX_NAME = {np.int8: "int8", np.uint8: "uint8", np.int16: "int16", np.uint16: "uint16",
              np.bool_: "bool", np.complex64: "complex64", np.complex128: "complex128"}


@pytest.mark.parametrize("door", DOORS)
@pytest.mark.parametrize("ver", ALL, ids=_ids(ALL))
@pytest.mark.parametrize("dtype", NEVER_ALLOWED, ids=lambda d: _ONNX_NAME[d])
def test_dtypes_never_allowed(door: str, ver: OpVersion, dtype) -> None:
    data = np.ones((2, 3), dtype)
    expect_error(
        TypeError, lambda: RUNNERS[door](ver, data, {}, None),
        ver.label, f"data type {_ONNX_NAME[dtype]!r} is not allowed",
    )


BFLOAT16_TOO_EARLY = [ver for ver in ALL if ver.version < 13]


@pytest.mark.parametrize("door", DOORS)
@pytest.mark.parametrize("ver", BFLOAT16_TOO_EARLY, ids=_ids(BFLOAT16_TOO_EARLY))
def test_bfloat16_before_v13(door: str, ver: OpVersion) -> None:
    data = np.ones((2, 3), bfloat16)
    expect_error(
        TypeError, lambda: RUNNERS[door](ver, data, {}, None),
        ver.label, "data type 'bfloat16' is not allowed",
    )


@pytest.mark.parametrize("door", DOORS)
@pytest.mark.parametrize(
    ("dtype", "name"),
    [(np.int32, "int32"), (np.int64, "int64"), (np.uint32, "uint32"), (np.uint64, "uint64")],
)
def test_integers_in_reduce_log_sum_exp_28(door: str, dtype, name: str) -> None:
    ver = VERSIONS["ReduceLogSumExp"][28]
    data = np.ones((2, 3), dtype)
    message = expect_error(
        TypeError, lambda: RUNNERS[door](ver, data, {}, None),
        "ReduceLogSumExp-28", f"data type {name!r} is not allowed",
    )
    assert "allowed: bfloat16, double, float, float16" in message


def test_integers_in_reduce_log_sum_exp_default_function() -> None:
    expect_error(
        TypeError, lambda: onnx_reduce.reduce_log_sum_exp(np.arange(3)),
        "ReduceLogSumExp-28", "'int64'",
    )


@pytest.mark.parametrize("ver", ALL, ids=_ids(ALL))
def test_every_allowed_dtype_validates(ver: OpVersion) -> None:
    names = {"float": np.float32, "double": np.float64, "float16": np.float16,
             "bfloat16": bfloat16, "int32": np.int32, "int64": np.int64, "uint32": np.uint32,
             "uint64": np.uint64}
    for name in ver.dtypes:
        request = validate(ver, np.dtype(names[name]), {})
        assert request.dtype == np.dtype(names[name])
        assert request.axes is None
        assert request.keepdims is True
        assert request.noop_with_empty_axes is False


# --- integer ReduceLogSumExp over an empty set -----------------------------------------------


@pytest.mark.parametrize("door", DOORS)
@pytest.mark.parametrize("ver", INTEGER_LSE, ids=_ids(INTEGER_LSE))
@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint32, np.uint64])
@pytest.mark.parametrize(("shape", "axes"), [((0, 3), [0]), ((2, 0), None), ((0,), [])])
def test_integer_lse_over_an_empty_set(door, ver: OpVersion, dtype, shape, axes) -> None:
    data = np.zeros(shape, dtype)
    attributes, axes_input = ({}, None) if axes is None else axes_call(ver, axes)
    expect_error(
        ValueError, lambda: RUNNERS[door](ver, data, attributes, axes_input),
        ver.label, "empty set", np.dtype(dtype).name, str(list(shape)),
    )


@pytest.mark.parametrize("door", DOORS)
@pytest.mark.parametrize("ver", INTEGER_LSE, ids=_ids(INTEGER_LSE))
def test_integer_lse_over_nonempty_sets_of_an_empty_input_is_fine(door, ver: OpVersion) -> None:
    # Reducing axis 1 of a (0, 3) input: zero outputs, each over 3 values - nothing to reject.
    data = np.zeros((0, 3), np.int32)
    attributes, axes_input = axes_call(ver, [1])
    out = RUNNERS[door](ver, data, attributes, axes_input)
    assert out.shape == (0, 1)
    assert out.dtype == np.int32


@pytest.mark.parametrize("door", DOORS)
def test_integer_lse_noop_on_an_empty_input_is_fine(door: str) -> None:
    ver = VERSIONS["ReduceLogSumExp"][18]
    data = np.zeros((0, 3), np.int64)
    out = RUNNERS[door](ver, data, {"noop_with_empty_axes": 1}, None)
    assert out.shape == (0, 3)
    assert out.dtype == np.int64


@pytest.mark.parametrize("door", DOORS)
@pytest.mark.parametrize("ver", [v for v in ALL if v.op == "ReduceLogSumExp"],
                         ids=_ids([v for v in ALL if v.op == "ReduceLogSumExp"]))
def test_float_lse_over_an_empty_set_is_minus_inf(door: str, ver: OpVersion) -> None:
    data = np.zeros((0, 3), np.float32)
    attributes, axes_input = axes_call(ver, [0])
    out = RUNNERS[door](ver, data, attributes, axes_input)
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, np.full((1, 3), -np.inf, np.float32))


# --- data that is not an array ---------------------------------------------------------------


def test_pipeline_rejects_non_arrays() -> None:
    ver = VERSIONS["ReduceSum"][13]
    expect_error(TypeError, lambda: execute(ver, [1.0, 2.0], {}), "ReduceSum-13", "list")


@pytest.mark.parametrize("func", list(FUNCTIONS.values()))
def test_functions_reject_bad_opset(func) -> None:
    x = np.ones(3, np.float32)
    expect_error(ValueError, lambda: func(x, opset=0), "opset", "0")
    expect_error(TypeError, lambda: func(x, opset="13"), "opset", "'13'")


# --- axes beyond int64 -----------------------------------------------------------------------

HUGE_AXES = [
    ([2**70], 2**70), ([-(2**70)], -(2**70)), ([0, 2**63], 2**63),
    (np.array([2**63], np.uint64), 2**63), ([np.uint64(2**64 - 1)], 2**64 - 1),
]


@pytest.mark.parametrize("ver", ALL, ids=_ids(ALL))
@pytest.mark.parametrize(("axes", "bad"), HUGE_AXES)
def test_axes_beyond_int64_in_functions(ver: OpVersion, axes, bad: int) -> None:
    """An axis no int64 holds is out of range like any other, not an OverflowError."""
    data = np.ones((2, 3), np.float32)
    expect_error(
        ValueError, lambda: run_functions(ver, data, {"axes": axes}, None),
        ver.label, f"axis {bad} is out of range for an input of rank 2", "[-2, 1]",
    )


# --- data that is not a plain array ----------------------------------------------------------


@pytest.mark.parametrize("door", ["pipeline", "functions"])
@pytest.mark.parametrize("ver", ALL, ids=_ids(ALL))
def test_masked_arrays_are_refused(door: str, ver: OpVersion) -> None:
    """The kernels read the data, not the mask: a masked element would be reduced as if it
    were not masked, so masked arrays are refused, with what to pass instead."""
    data = np.ma.array([1.0, 2.0, 3.0], mask=[False, True, False])
    expect_error(
        TypeError, lambda: RUNNERS[door](ver, data, {}, None),
        ver.label, "masked arrays are not supported", ".filled(", ".data",
    )


def test_masked_arrays_are_refused_by_the_reference_plugin() -> None:
    from onnx.reference import ReferenceEvaluator

    node = oh.make_node("ReduceSum", ["x"], ["y"])
    graph = oh.make_graph([node], "g", [oh.make_tensor_value_info("x", 11, [3])],
                          [oh.make_tensor_value_info("y", 11, None)])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 13)])
    evaluator = ReferenceEvaluator(model, new_ops=onnx_reduce.reference_ops())
    data = np.ma.array([1.0, 2.0, 3.0], mask=[False, True, False])
    expect_error(TypeError, lambda: evaluator.run(None, {"x": data}), "ReduceSum-13", "masked")


@pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")
@pytest.mark.parametrize("door", ["pipeline", "functions"])
@pytest.mark.parametrize("ver", ALL, ids=_ids(ALL))
def test_array_subclasses_reduce_as_their_base_array(door: str, ver: OpVersion) -> None:
    """np.matrix stays 2-D through numpy's reductions; reduced as a plain array, it gives the
    same values as its base array (exact here: small integers)."""
    matrix = np.matrix([[0.0, 2.0], [4.0, 6.0]])
    attributes, axes_input = axes_call(ver, [1])
    attributes["keepdims"] = 0
    out = RUNNERS[door](ver, matrix, attributes, axes_input)
    assert type(out) is np.ndarray
    assert out.shape == (2,)
    rows = [[0, 2], [4, 6]]
    want = {
        "ReduceSum": [sum(r) for r in rows],
        "ReduceL2": [float(mpmath.sqrt(sum(v * v for v in r))) for r in rows],
        "ReduceLogSumExp": [float(mpmath.log(sum(mpmath.exp(v) for v in r))) for r in rows],
        "ReduceSumSquare": [sum(v * v for v in r) for r in rows],
        "ReduceLogSum": [float(mpmath.log(sum(r))) for r in rows],
    }[ver.op]
    np.testing.assert_array_equal(out, np.array(want))


@pytest.mark.parametrize("func", list(FUNCTIONS.values()))
@pytest.mark.parametrize("data", [[[1.0], [2.0, 3.0]], [1.0, [2.0]]])
def test_ragged_lists_are_a_clean_error(func, data) -> None:
    ver = FUNCTIONS_VERSIONS[func.__name__]
    expect_error(ValueError, lambda: func(data), ver.label, "data cannot be read as an array")


FUNCTIONS_VERSIONS = {func.__name__: onnx_reduce.spec.latest(op) for op, func in FUNCTIONS.items()}


@pytest.mark.parametrize("attributes", ["keepdims", ["keepdims"], 1])
def test_attributes_must_be_a_mapping(attributes) -> None:
    ver = VERSIONS["ReduceSum"][13]
    expect_error(
        TypeError, lambda: execute(ver, np.ones(3), attributes), "ReduceSum-13",
        "attributes must be a mapping", repr(attributes),
    )


# --- prepared calls --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("shape", "exc", "shown"),
    [("abc", TypeError, "'abc'"), (3, TypeError, "3"), ((2, -1), ValueError, "dim -1"),
     ((2.0,), TypeError, "2.0"), ((True,), TypeError, "True"), (("N",), TypeError, "'N'"),
     ((2**63,), ValueError, f"dim {2**63}")],
)
def test_prepare_checks_the_shape(shape, exc, shown: str) -> None:
    ver = VERSIONS["ReduceL2"][18]
    expect_error(
        exc, lambda: pipeline.prepare(ver, np.dtype(np.float32), shape, {}), "ReduceL2-18", shown
    )


@pytest.mark.parametrize("dtype", ["junk", "float33", object()])
def test_prepare_checks_the_dtype(dtype) -> None:
    ver = VERSIONS["ReduceL2"][18]
    expect_error(
        TypeError, lambda: pipeline.prepare(ver, dtype, (2,), {}), "ReduceL2-18",
        "cannot read", repr(dtype),
    )


# --- opsets at every front door --------------------------------------------------------------

NEWEST = onnx.defs.onnx_opset_version()
OPSET_DOORS = ["functions", "infer_shape", "expand", "run_node", "model", "reference", "cli"]


def call_at_opset(door: str, op: str, opset: Any) -> Any:
    """One call of ``op`` at ``opset`` through ``door``."""
    data = np.ones((2, 3), np.float32)
    node = oh.make_node(op, ["x"], ["y"])
    if door == "functions":
        return FUNCTIONS[op](data, opset=opset)
    if door == "infer_shape":
        return onnx_reduce.infer_shape(op, opset, (2, 3))
    if door == "expand":
        return onnx_reduce.expand(node, opset, stable=True)
    if door == "run_node":
        return backend.run_node(node, [data], opset_version=opset)
    if door == "cli":
        return _cli_at_opset(op, opset, data)
    graph = oh.make_graph([node], "g", [oh.make_tensor_value_info("x", 1, [2, 3])],
                          [oh.make_tensor_value_info("y", 1, None)])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)])
    if door == "model":
        return backend.prepare(model).run([data])
    from onnx.reference import ReferenceEvaluator

    return ReferenceEvaluator(model, new_ops=onnx_reduce.reference_ops()).run(None, {"x": data})


def _cli_at_opset(op: str, opset: int, data: np.ndarray) -> None:
    """The CLI's ``eval --opset``: a refusal must be one line on stderr and exit status 2."""
    import tempfile
    from pathlib import Path

    from typer.testing import CliRunner

    from onnx_reduce.cli import app

    name = op_record(op).aliases[0]
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "x.npy"
        np.save(path, data)
        result = CliRunner().invoke(app, ["eval", name, str(path), "--opset", str(opset)])
    if result.exit_code == 0:
        return
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    raise ValueError(lines[0])


#: (door, opsets beyond onnx's newest): a model's opset is an int64, one beyond is enough there
BEYOND = [(door, beyond) for door in OPSET_DOORS for beyond in (1, 10**9, 2**70)
          if beyond == 1 or door in ("functions", "infer_shape", "expand", "run_node")]


@pytest.mark.parametrize(("door", "beyond"), BEYOND)
@pytest.mark.parametrize("op", OPS)
def test_every_front_door_refuses_opsets_beyond_onnx(door: str, beyond: int, op: str) -> None:
    """An opset the installed onnx does not define may change the op: refused, with the range."""
    opset = NEWEST + beyond
    expect_error(ValueError, lambda: call_at_opset(door, op, opset), op,
                 f"opset {opset} is beyond the newest", f"(accepted: 1 to {NEWEST})")


@pytest.mark.parametrize(
    ("door", "opset", "exc"),
    [(door, opset, exc) for door in ("functions", "infer_shape", "expand", "run_node")
     for opset, exc in ((0, ValueError), (-3, ValueError), (True, TypeError), (13.0, TypeError))
     if door != "run_node" or exc is ValueError],  # run_node converts opset_version with int()
)
def test_every_front_door_refuses_opsets_that_are_not_versions(door: str, opset, exc) -> None:
    expect_error(exc, lambda: call_at_opset(door, "ReduceSum", opset), "ReduceSum",
                 repr(opset), "accepted: 1 to")


@pytest.mark.parametrize("door", OPSET_DOORS)
@pytest.mark.parametrize("op", OPS)
def test_the_newest_opset_onnx_defines_is_accepted(door: str, op: str) -> None:
    call_at_opset(door, op, NEWEST)  # the CLI door raises unless the exit status is 0


# --- hostile values in messages --------------------------------------------------------------

WIDE = 2**20000  # too wide for str(): Python refuses to convert it
HOSTILE_CALLS = {
    "wide axis": lambda x: onnx_reduce.reduce_sum(x, axes=[WIDE]),
    "wide axis (attribute)": lambda x: onnx_reduce.reduce_sum(x, axes=[5, WIDE], opset=11),
    "wide opset": lambda x: onnx_reduce.reduce_sum(x, opset=WIDE),
    "wide dim": lambda x: onnx_reduce.infer_shape("ReduceSum", 13, [WIDE]),
    "nested wide axis": lambda x: onnx_reduce.reduce_sum(x, axes=[[WIDE]]),
    "many duplicates": lambda x: onnx_reduce.reduce_sum(x, axes=[0] * 10**5),
    "many floats": lambda x: onnx_reduce.reduce_sum(x, axes=[1.5] * 10**5),
    "long opset list": lambda x: onnx_reduce.reduce_sum(x, opset=[1] * 10**5),
    "long string shape": lambda x: onnx_reduce.infer_shape("ReduceSum", 13, "a" * 10**5),
    "long operator": lambda x: onnx_reduce.infer_shape("R" * 10**5, 13, [1]),
    "2-D keepdims": lambda x: onnx_reduce.reduce_sum(x, keepdims=np.array([[1, 2], [3, 4]])),
    "escape keepdims": lambda x: onnx_reduce.reduce_sum(x, keepdims="\x1b[31m\nred"),
}


@pytest.mark.parametrize("call", list(HOSTILE_CALLS.values()), ids=list(HOSTILE_CALLS))
def test_errors_show_hostile_values_on_one_short_line(call) -> None:
    """A value too wide, too long or multi-line is shown cut to one short line (the error of a
    wide integer used to be Python's "Exceeds the limit (4300 digits)", not ours)."""
    with pytest.raises((TypeError, ValueError)) as info:
        call(np.ones((2, 3), np.float32))
    message = str(info.value)
    assert "\n" not in message
    assert "\x1b" not in message
    assert len(message) <= 200, message
    assert message.startswith(("ReduceSum", "unknown operator"))
