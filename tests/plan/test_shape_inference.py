"""``infer_shape`` against ``onnx.shape_inference.infer_shapes(model, strict_mode=True)``.

Models are generated for every operator at every opset 1..28, with static, symbolic (``dim_param``)
and unknown dims, unknown rank, rank 0, keepdims 0/1, noop_with_empty_axes 0/1, and axes absent,
as an attribute, as a constant initializer input or as a non-constant graph input (our
:data:`UNKNOWN_AXES`).

Where onnx's inference knows less than ours, or differs, the difference is asserted precisely:

* onnx names a dim it does not know with a fresh symbol (``unk__0``); we say None. The two mean
  the same, so a fresh onnx symbol is read as None.
* Non-constant axes input with keepdims=1: onnx gives no shape at all; we know the rank and that
  every dim is either the input's or 1, so we give ``(None,) * rank`` (``()`` for rank 0).
* Version 1 (opsets 1-10): onnx's inference does not range-check the axes attribute; an axis
  beyond the rank is ignored and the output shape is the input shape. We reject it (the
  document of version 1 does not state the range; we apply the one versions 11+ state).
* Duplicate axes: onnx's inference accepts them (reducing the axis once); the ONNX documents say
  nothing, and onnx-reduce rejects them like numpy does (``ValueError``).
"""

from __future__ import annotations

import itertools

import numpy as np
import onnx
import onnx.helper as oh
import pytest
from onnx import TensorProto, numpy_helper

from onnx_reduce.plan import UNKNOWN_AXES, infer_shape
from onnx_reduce.spec import OPS, resolve

OPSETS = range(1, 29)
SHAPES = [None, (), (4,), ("N", 3, None), (2, "C", 5, 1)]


def onnx_infer(op, opset, shape, attributes, mode, axes):
    """The output shape onnx infers: a tuple (None for an unknown dim) or None (no shape)."""
    data = oh.make_tensor_value_info("x", TensorProto.FLOAT, None if shape is None else list(shape))
    inputs, initializers, names = [data], [], ["x"]
    if mode == "const":
        initializers.append(numpy_helper.from_array(np.array(axes, np.int64), "axes"))
        names.append("axes")
    elif mode == "input":
        inputs.append(oh.make_tensor_value_info("axes", TensorProto.INT64, [len(axes)]))
        names.append("axes")
    node = oh.make_node(op, names, ["y"])
    for name, value in attributes.items():
        kind = onnx.AttributeProto.INTS if name == "axes" else None
        node.attribute.append(oh.make_attribute(name, value, attr_type=kind))
    graph = oh.make_graph([node], "g", inputs, [oh.make_tensor_value_info("y", 1, None)],
                          initializer=initializers)
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)])
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    tensor_type = inferred.graph.output[0].type.tensor_type
    assert tensor_type.elem_type == TensorProto.FLOAT
    if not tensor_type.HasField("shape"):
        return None
    dims = []
    for dim in tensor_type.shape.dim:
        if dim.HasField("dim_value"):
            dims.append(dim.dim_value)
        elif dim.HasField("dim_param") and not dim.dim_param.startswith("unk__"):
            dims.append(dim.dim_param)
        else:
            dims.append(None)  # unknown, or a fresh symbol onnx made up for an unknown dim
    return tuple(dims)


def axes_choices(rank: int | None) -> list[list[int] | None]:
    choices: list[list[int] | None] = [None, []]
    if rank is None:
        return [*choices, [0], [-1]]
    if rank:
        choices += [[0], [-1], [rank - 1, 0], list(range(rank))[::-1]]
    if rank >= 3:
        choices += [[-3, 1]]
    choices += [[rank], [-rank - 1]]  # out of range (at rank 0: any axis)
    if rank:
        choices += [[0, -rank]]  # duplicate
    return choices


def cases():
    for op, opset in itertools.product(OPS, OPSETS):
        ver = resolve(op, opset)
        for shape in SHAPES:
            rank = None if shape is None else len(shape)
            for axes, keepdims in itertools.product(axes_choices(rank), (0, 1)):
                if not ver.axes_is_input:
                    yield op, opset, shape, "attr", axes, keepdims, None
                    continue
                for noop in (None, 0, 1):
                    modes = ["absent"] if axes is None else ["const", "input"]
                    for mode in modes:
                        yield op, opset, shape, mode, axes, keepdims, noop


CASES = list(cases())


def _call(op, opset, shape, mode, axes, keepdims, noop):
    attributes = {"keepdims": keepdims}
    if noop is not None:
        attributes["noop_with_empty_axes"] = noop
    onnx_attributes = dict(attributes)
    if mode == "attr" and axes is not None:
        onnx_attributes["axes"] = axes
        attributes["axes"] = axes
    axes_arg = {"const": axes, "input": UNKNOWN_AXES}.get(mode)
    return attributes, onnx_attributes, axes_arg


def _is_duplicate(axes, rank) -> bool:
    if not axes or rank is None or rank == 0:
        return False
    if any(not -rank <= a < rank for a in axes):
        return False
    return len({a % rank for a in axes}) != len(axes)


@pytest.mark.parametrize("op", OPS)
def test_against_onnx(op: str) -> None:
    checked = less_informative = lax = exact = 0
    for case in CASES:
        if case[0] != op:
            continue
        _, opset, shape, mode, axes, keepdims, _ = case
        attributes, onnx_attributes, axes_arg = _call(*case)
        rank = None if shape is None else len(shape)
        try:
            ours = infer_shape(op, opset, shape, attributes, axes=axes_arg)
            our_error = None
        except ValueError as error:
            ours, our_error = None, error
        try:
            theirs = onnx_infer(op, opset, shape, onnx_attributes, mode, axes)
            their_error = None
        except onnx.shape_inference.InferenceError as error:
            theirs, their_error = None, error
        where = f"{case}: ours {ours!r} / {our_error}, onnx {theirs!r} / {their_error}"
        checked += 1
        if our_error is not None:
            assert resolve(op, opset).label in str(our_error)
            if _is_duplicate(axes, rank) and mode != "input":
                # Documented difference: onnx reduces a repeated axis once; we reject it.
                assert their_error is None, where
                assert "more than once" in str(our_error)
            elif mode != "input" and resolve(op, opset).version == 1:
                # Documented difference: version 1's inference does not range-check the axes
                # attribute; it ignores an axis that does not exist and reduces nothing.
                assert "out of range" in str(our_error), where
                assert their_error is None, where
                assert theirs == shape, where
                lax += 1
            else:
                assert "out of range" in str(our_error), where
                if mode != "input":
                    assert their_error is not None, where
            continue
        assert their_error is None, where
        if mode == "input" and keepdims and rank is not None:
            # Documented difference: onnx gives no shape, we know the rank.
            assert theirs is None, where
            assert ours == (None,) * rank, where
            less_informative += 1
            continue
        assert ours == theirs, where
        exact += theirs is not None
    assert checked > 5000
    assert exact >= 2000
    assert less_informative > 0
    assert lax > 0


@pytest.mark.parametrize(
    ("shape", "attributes", "axes", "expected"),
    [
        (("batch", 3, None), {"keepdims": 0}, [1], ("batch", None)),
        (("batch", 3, None), {}, [-1, 0], (1, 3, 1)),
        (("N", "C"), {"noop_with_empty_axes": 1}, [], ("N", "C")),
        (("N", "C"), {"noop_with_empty_axes": 1}, None, ("N", "C")),
        (("N", "C"), {"noop_with_empty_axes": 0}, [], (1, 1)),
        (("N", "C"), {"keepdims": 0}, None, ()),
        ((), {"keepdims": 0}, None, ()),
        ((), {}, [], ()),
        ((), {}, UNKNOWN_AXES, ()),
        ((), {"keepdims": 0}, UNKNOWN_AXES, None),
        (("N", 5), {}, UNKNOWN_AXES, (None, None)),
        (("N", 5), {"keepdims": 0}, UNKNOWN_AXES, None),
        (None, {}, [0], None),
        (None, {}, UNKNOWN_AXES, None),
        ((2, 3), {}, np.array([1], np.int32), (2, 1)),
    ],
)
def test_examples_at_an_input_version(shape, attributes, axes, expected) -> None:
    for op in OPS:
        assert infer_shape(op, 18 if op != "ReduceSum" else 13, shape, attributes, axes) == expected


def test_examples_at_an_attribute_version() -> None:
    assert infer_shape("ReduceL2", 11, ("N", 5), {"axes": [-1]}) == ("N", 1)
    assert infer_shape("ReduceL2", 13, ("N", 5), {"axes": [0], "keepdims": 0}) == (5,)
    assert infer_shape("ReduceSum", 1, ("N", 5), {"axes": []}) == (1, 1)
    assert infer_shape("ReduceLogSumExp", 17, ("N", 5), {}) == (1, 1)


def test_errors_name_the_version() -> None:
    with pytest.raises(ValueError, match="ReduceSum-11: takes axes as an attribute"):
        infer_shape("ReduceSum", 12, (2, 3), {}, axes=UNKNOWN_AXES)
    with pytest.raises(ValueError, match="ReduceSum-11: takes axes as an attribute"):
        infer_shape("ReduceSum", 12, (2, 3), {}, axes=[0])
    with pytest.raises(ValueError, match="ReduceL2-18: attribute 'axes' is not defined"):
        infer_shape("ReduceL2", 18, (2, 3), {"axes": [0]})
    with pytest.raises(ValueError, match="ReduceLogSumExp-13: attribute 'noop_with_empty_axes'"):
        infer_shape("ReduceLogSumExp", 13, (2, 3), {"noop_with_empty_axes": 1})
    with pytest.raises(ValueError, match="ReduceSum-13: attribute 'keepdims' must be 0 or 1"):
        infer_shape("ReduceSum", 13, (2, 3), {"keepdims": 2})
    with pytest.raises(TypeError, match="ReduceSum-13: the axes input must be integers"):
        infer_shape("ReduceSum", 13, (2, 3), {}, axes=[0.5])
    with pytest.raises(ValueError, match="ReduceSum-13: axis 2 is out of range"):
        infer_shape("ReduceSum", 13, (2, 3), {}, axes=[2])


def test_the_rank_is_checked_even_with_unknown_dims() -> None:
    with pytest.raises(ValueError, match="axis -3 is out of range for an input of rank 2"):
        infer_shape("ReduceSum", 13, (None, None), {}, axes=[-3])


@pytest.mark.parametrize(
    ("shape", "exc", "shown"),
    [("abc", TypeError, "'abc'"), (b"ab", TypeError, "b'ab'"), (3, TypeError, "3"),
     ({2, 3}, TypeError, "{2, 3}"), ([2.0], TypeError, "2.0"), ([True], TypeError, "True"),
     ([[2]], TypeError, "[2]"), ([2, b"N"], TypeError, "b'N'"), ([-1], ValueError, "dim -1"),
     ((2**63,), ValueError, f"dim {2**63}"), ((2, 2**70), ValueError, f"dim {2**70}")],
)
def test_input_shape_must_be_a_sequence_of_dims(shape, exc, shown: str) -> None:
    """A string is not a shape (it used to give one dim per character); dims are ints that fit
    an ONNX dim (int64, >= 0), symbols or None."""
    with pytest.raises(exc) as info:
        infer_shape("ReduceSum", 13, shape, {})
    assert type(info.value) is exc
    assert "ReduceSum-13" in str(info.value)
    assert shown in str(info.value)


def test_numpy_dims_are_read_as_ints() -> None:
    out = infer_shape("ReduceL2", 18, np.array([2, 3]), {"keepdims": 1}, axes=[1])
    assert out == (2, 1)
    assert all(type(d) is int for d in out)
    assert infer_shape("ReduceL2", 18, [np.int64(4), "N"], {}, axes=[1]) == (4, 1)


@pytest.mark.parametrize("axes", [[2**70], [-(2**70)], np.array([2**63], np.uint64)])
def test_axes_beyond_int64(axes) -> None:
    bad = int(np.asarray(axes)[0])
    out_of_range = rf"ReduceSum-13: axis {bad} is out of range for an input of"
    with pytest.raises(ValueError, match=rf"{out_of_range} rank 2 \(accepted: \[-2, 1\]\)"):
        infer_shape("ReduceSum", 13, (2, 3), {}, axes=axes)
    with pytest.raises(ValueError, match=rf"{out_of_range} any rank \(an axis is an int64"):
        infer_shape("ReduceSum", 13, None, {}, axes=axes)
    with pytest.raises(ValueError, match=rf"ReduceSum-11: axis {bad} is out of range"):
        infer_shape("ReduceSum", 11, (2, 3), {"axes": list(np.asarray(axes).tolist())})


@pytest.mark.parametrize("attributes", ["keepdims", [("keepdims", 0)], 0])
def test_attributes_must_be_a_mapping(attributes) -> None:
    with pytest.raises(TypeError, match="ReduceSum-13: attributes must be a mapping"):
        infer_shape("ReduceSum", 13, (2, 3), attributes)


@pytest.mark.parametrize("version", [29, 10**9, 2**70, 0, -1, True, 13.0, "13"])
def test_versions_onnx_does_not_define(version) -> None:
    exc = ValueError if type(version) is int else TypeError
    with pytest.raises(exc, match="ReduceSum: opset") as info:
        infer_shape("ReduceSum", version, (2, 3), {})
    assert f"accepted: 1 to {onnx.defs.onnx_opset_version()}" in str(info.value)
