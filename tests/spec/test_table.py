"""The hand-written version table agrees with ``onnx.defs`` for every version in scope."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.defs
import onnx.helper
import pytest

from onnx_reduce.spec import OPS, VERSIONS, bfloat16, latest, newest_opset, resolve
from onnx_reduce.spec.table import OpVersion

ALL_VERSIONS = [(op, v) for op in OPS for v in VERSIONS[op]]
MAX_OPSET = 28
_NUMPY = {
    "float": np.dtype(np.float32),
    "double": np.dtype(np.float64),
    "float16": np.dtype(np.float16),
    "bfloat16": bfloat16,
    "int32": np.dtype(np.int32),
    "int64": np.dtype(np.int64),
    "uint32": np.dtype(np.uint32),
    "uint64": np.dtype(np.uint64),
}


def _schema(op: str, version: int) -> onnx.defs.OpSchema:
    return onnx.defs.get_schema(op, version)


def _since_versions(op: str) -> set[int]:
    return {_schema(op, opset).since_version for opset in range(1, MAX_OPSET + 1)}


def test_onnx_knows_opset_28() -> None:
    # The table is checked against onnx up to opset 28; a newer onnx may add versions.
    assert onnx.defs.onnx_opset_version() >= MAX_OPSET


@pytest.mark.parametrize("op", OPS)
def test_every_onnx_version_is_in_the_table(op: str) -> None:
    assert set(VERSIONS[op]) == _since_versions(op)


def test_ops() -> None:
    assert OPS == ("ReduceSum", "ReduceL2", "ReduceLogSumExp", "ReduceSumSquare", "ReduceLogSum")
    assert set(VERSIONS) == set(OPS)


@pytest.mark.parametrize(("op", "version"), ALL_VERSIONS)
def test_since_version_and_label(op: str, version: int) -> None:
    ver = VERSIONS[op][version]
    assert isinstance(ver, OpVersion)
    assert (ver.op, ver.version) == (op, version)
    assert _schema(op, version).since_version == version
    assert ver.label == f"{op}-{version}"


@pytest.mark.parametrize(("op", "version"), ALL_VERSIONS)
def test_attributes_and_defaults(op: str, version: int) -> None:
    schema = _schema(op, version)
    expected = {}
    for name, attr in schema.attributes.items():
        assert not attr.required, f"{op}-{version}: {name} is required"
        default = attr.default_value
        expected[name] = onnx.helper.get_attribute_value(default) if default.name else None
    assert VERSIONS[op][version].attributes == expected


@pytest.mark.parametrize(("op", "version"), ALL_VERSIONS)
def test_axes_is_input(op: str, version: int) -> None:
    schema = _schema(op, version)
    inputs = {i.name: i for i in schema.inputs}
    ver = VERSIONS[op][version]
    assert ver.axes_is_input == ("axes" in inputs)
    assert ver.axes_is_input == ("axes" not in schema.attributes)
    if ver.axes_is_input:
        axes = inputs["axes"]
        assert axes.option == onnx.defs.OpSchema.FormalParameterOption.Optional
        assert axes.type_str == "tensor(int64)"
        assert [i.name for i in schema.inputs] == ["data", "axes"]
    else:
        assert schema.attributes["axes"].type == onnx.defs.OpSchema.AttrType.INTS
        assert [i.name for i in schema.inputs] == ["data"]


@pytest.mark.parametrize(("op", "version"), ALL_VERSIONS)
def test_dtypes(op: str, version: int) -> None:
    schema = _schema(op, version)
    (constraint,) = schema.type_constraints
    allowed = {s.removeprefix("tensor(").removesuffix(")") for s in constraint.allowed_type_strs}
    assert VERSIONS[op][version].dtypes == allowed
    # The names the table uses are ONNX's own: each one maps to a TensorProto element type.
    for name in allowed:
        assert onnx.helper.np_dtype_to_tensor_dtype(_NUMPY[name]) == getattr(
            onnx.TensorProto, name.upper()
        )


@pytest.mark.parametrize(("op", "version"), ALL_VERSIONS)
def test_function_body(op: str, version: int) -> None:
    schema = _schema(op, version)
    has_body = schema.has_function or schema.has_context_dependent_function
    assert VERSIONS[op][version].has_function_body == has_body


@pytest.mark.parametrize(("op", "version"), ALL_VERSIONS)
def test_states_rank0_and_empty_set_matches_the_document(op: str, version: int) -> None:
    doc = " ".join(_schema(op, version).doc.split())
    states = "rank zero are valid" in doc and "empty set" in doc
    assert VERSIONS[op][version].states_rank0_and_empty_set == states


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("opset", range(1, MAX_OPSET + 1))
def test_resolve_matches_onnx(op: str, opset: int) -> None:
    ver = resolve(op, opset)
    assert ver.version == _schema(op, opset).since_version
    assert ver is VERSIONS[op][ver.version]


def test_the_newest_opset_onnx_defines_resolves_to_the_latest() -> None:
    newest = onnx.defs.onnx_opset_version()
    assert newest_opset() == newest
    for op in OPS:
        assert resolve(op, newest) is latest(op)


@pytest.mark.parametrize("beyond", [1, 2, 10**9 - onnx.defs.onnx_opset_version(), 2**70])
def test_resolve_refuses_opsets_beyond_what_onnx_defines(beyond: int) -> None:
    """An opset newer than the installed onnx may redefine the op: refused, not guessed."""
    newest = onnx.defs.onnx_opset_version()
    opset = newest + beyond
    with pytest.raises(ValueError) as info:  # noqa: PT011 (the message is checked below)
        resolve("ReduceL2", opset)
    assert type(info.value) is ValueError
    message = str(info.value)
    assert message.startswith(f"ReduceL2: opset {opset} is beyond the newest the installed onnx")
    assert f"(accepted: 1 to {newest})" in message
    assert onnx.__version__ in message
    assert "\n" not in message


@pytest.mark.parametrize("op", OPS)
def test_latest(op: str) -> None:
    assert latest(op).version == _schema(op, MAX_OPSET).since_version
    assert latest(op).version == max(VERSIONS[op])


def test_resolve_accepts_numpy_integers() -> None:
    assert resolve("ReduceL2", np.int64(17)).label == "ReduceL2-13"


@pytest.mark.parametrize("opset", [0, -1, -13, -(2**70)])
def test_resolve_rejects_opsets_below_1(opset: int) -> None:
    want = rf"ReduceSum: opset must be an integer >= 1, got {opset} \(accepted: 1 to"
    with pytest.raises(ValueError, match=want):
        resolve("ReduceSum", opset)


@pytest.mark.parametrize("opset", [True, False, np.True_, 13.0, 13.5, "13", None, [13]])
def test_resolve_rejects_non_integer_opsets(opset: object) -> None:
    with pytest.raises(TypeError, match=r"ReduceSum: opset must be an integer >= 1, got") as info:
        resolve("ReduceSum", opset)  # type: ignore[arg-type]
    assert repr(opset) in str(info.value)


@pytest.mark.parametrize("op", ["ReduceMax", "reducesum", "", "ReduceL1"])
def test_unknown_operator(op: str) -> None:
    with pytest.raises(ValueError, match="unknown operator") as info:
        resolve(op, 13)
    assert repr(op) in str(info.value)
    with pytest.raises(ValueError, match="unknown operator"):
        latest(op)


@pytest.mark.parametrize("op", [["ReduceSum"], None, 13, b"ReduceSum"])
def test_operator_names_must_be_strings(op: object) -> None:
    for call in (lambda: resolve(op, 13), lambda: latest(op)):  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="the operator must be a name") as info:
            call()
        assert repr(op) in str(info.value)

