"""The onnx Backend front door: prepare/run, run_model, run_node, devices, mixed graphs, errors."""

from __future__ import annotations

import math

import numpy as np
import onnx
import onnx.helper as oh
import pytest
from onnx import TensorProto, numpy_helper

from onnx_reduce import backend

F32, F64 = TensorProto.FLOAT, TensorProto.DOUBLE


def _model(nodes, inputs, outputs, opset, initializers=()):
    graph = oh.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    return oh.make_model_gen_version(graph, opset_imports=[oh.make_opsetid("", opset)])


def _vi(name, elem=F32, shape=None):
    return oh.make_tensor_value_info(name, elem, shape)


def _reduce_model(op, opset, axes=None, elem=F32, **attrs):
    """A single reduce node; axes become the attribute or a graph input as the version wants."""
    axes_is_input = opset >= (13 if op == "ReduceSum" else 18)
    inputs = [_vi("x", elem)]
    names = ["x"]
    if axes is not None and axes_is_input:
        inputs.append(_vi("axes", TensorProto.INT64, ["n_axes"]))
        names.append("axes")
    elif axes is not None:
        attrs["axes"] = list(axes)
    node = oh.make_node(op, names, ["y"], **attrs)
    return _model([node], inputs, [_vi("y", elem)], opset)


X = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], dtype=np.float32)


def _lse(values) -> float:
    m = max(values)
    return m + math.log(math.fsum(math.exp(v - m) for v in values))


# --- prepare / run ------------------------------------------------------------------------------


def test_run_accepts_list_tuple_dict_and_array():
    rep = backend.prepare(_reduce_model("ReduceSum", 11, axes=[1], keepdims=0))
    want = np.array([6.0, 15.0], dtype=np.float32)
    for inputs in ([X], (X,), {"x": X}, X):
        (y,) = rep.run(inputs)
        assert y.dtype == np.float32
        np.testing.assert_array_equal(y, want)


def test_axes_as_graph_input():
    rep = backend.prepare(_reduce_model("ReduceL2", 18, axes=[0], keepdims=0))
    axes = np.array([0], dtype=np.int64)
    want = np.array([math.hypot(1, 4), math.hypot(2, 5), math.hypot(3, 6)], dtype=np.float32)
    np.testing.assert_allclose(rep.run([X, axes])[0], want, rtol=1e-7)
    np.testing.assert_allclose(rep.run({"x": X, "axes": axes})[0], want, rtol=1e-7)
    # the same prepared model, other axes
    (y,) = rep.run([X, np.array([-1], dtype=np.int64)])
    np.testing.assert_allclose(y, [math.sqrt(14), math.sqrt(77)], rtol=1e-7)


def test_repeated_runs_reuse_prepared_calls_keyed_by_dtype_shape_and_axes():
    """A model run again takes the call prepared for that node, dtype, shape and axes values:
    other axes, shapes, dtypes or layouts get their own (never a stale plan), invalid axes raise
    on every run, and non-contiguous inputs still give the right answer."""
    rep = backend.prepare(_reduce_model("ReduceSum", 13, axes=[0], keepdims=1))
    big = np.arange(12 * 5, dtype=np.float32).reshape(12, 5)
    for _ in range(2):
        for data in (X, big, big.T, big[::-2], X.astype(np.float32) * 2):
            for axes in ([0], [1], [-1], [0, 1]):
                got = rep.run([data, np.array(axes, dtype=np.int64)])[0]
                want = np.sum(data.astype(np.float64), axis=tuple(axes), keepdims=True)
                np.testing.assert_array_equal(got, want.astype(np.float32))
    assert 0 < len(rep._prepared) <= 5 * 4  # one per (dtype, shape, axes); views share it
    for _ in range(2):
        with pytest.raises(ValueError, match=r"ReduceSum-13: axis 2 is out of range"):
            rep.run([X, np.array([2], dtype=np.int64)])
    rep16 = backend.prepare(_reduce_model("ReduceSum", 13, axes=[1], elem=TensorProto.FLOAT16,
                                          keepdims=0))
    h = X.astype(np.float16)
    for _ in range(2):
        got = rep16.run([h, np.array([1], dtype=np.int64)])[0]
        assert got.dtype == np.float16
        np.testing.assert_array_equal(got, np.array([6.0, 15.0], dtype=np.float16))


def test_run_rejects_bad_inputs():
    rep = backend.prepare(_reduce_model("ReduceSum", 13))
    with pytest.raises(ValueError, match="takes 1 inputs"):
        rep.run([X, X])
    with pytest.raises(TypeError, match="list, tuple, dict or array"):
        rep.run(42)


def test_missing_inputs_are_named():
    rep = backend.prepare(_reduce_model("ReduceL2", 18, axes=[0]))
    with pytest.raises(ValueError, match=r"missing model inputs \['axes'\]"):
        rep.run([X])
    with pytest.raises(ValueError, match=r"missing model inputs \['x'\]"):
        rep.run({"axes": np.array([0])})


def test_prepare_from_serialized_bytes():
    model = _reduce_model("ReduceSum", 1, keepdims=0)
    (y,) = backend.prepare(model.SerializeToString()).run([X])
    assert y == 21


def test_input_is_not_modified():
    x = X.copy()
    x.setflags(write=False)
    backend.prepare(_reduce_model("ReduceLogSumExp", 13, axes=[0])).run([x])
    np.testing.assert_array_equal(x, X)


def test_run_model_and_prepare_from_a_file(tmp_path):
    model = _reduce_model("ReduceLogSumExp", 28, keepdims=0, elem=F64)
    x = np.array([800.0, 800.0])
    (y,) = backend.run_model(model, [x])
    assert y == 800 + math.log(2)
    path = tmp_path / "lse.onnx"
    onnx.save(model, str(path))
    assert backend.prepare(str(path)).run([x])[0] == y


def test_devices():
    assert backend.supports_device("CPU")
    assert not backend.supports_device("CUDA")
    assert backend.is_compatible(_reduce_model("ReduceSum", 13))
    assert not backend.is_compatible(_reduce_model("ReduceSum", 13), "CUDA")
    with pytest.raises(ValueError, match="CPU only"):
        backend.prepare(_reduce_model("ReduceSum", 13), "CUDA")


# --- run_node -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("op", "opset", "axes_input"),
    [("ReduceSum", 1, False), ("ReduceSum", 11, False), ("ReduceSum", 13, True),
     ("ReduceSum", 21, True), ("ReduceL2", 11, False), ("ReduceL2", 13, False),
     ("ReduceL2", 18, True), ("ReduceLogSumExp", 1, False), ("ReduceLogSumExp", 17, False),
     ("ReduceLogSumExp", 18, True), ("ReduceLogSumExp", 28, True)],
)
def test_run_node_at_opset(op, opset, axes_input):
    x = X.astype(np.float64)
    if axes_input:
        node = oh.make_node(op, ["x", "axes"], ["y"], keepdims=0)
        inputs = [x, np.array([1], dtype=np.int64)]
    else:
        node = oh.make_node(op, ["x"], ["y"], axes=[1], keepdims=0)
        inputs = [x]
    (y,) = backend.run_node(node, inputs, opset_version=opset)
    rows = x.tolist()
    want = {
        "ReduceSum": [math.fsum(r) for r in rows],
        "ReduceL2": [math.sqrt(math.fsum(v * v for v in r)) for r in rows],
        "ReduceLogSumExp": [_lse(r) for r in rows],
    }[op]
    assert y.dtype == np.float64
    np.testing.assert_allclose(y, want, rtol=1e-15)


def test_run_node_dict_inputs_and_default_opset():
    node = oh.make_node("ReduceLogSumExp", ["x", "axes"], ["y"], keepdims=1)
    # default: the newest opset onnx knows (LSE-28)
    (y,) = backend.run_node(node, {"x": X, "axes": np.array([0], dtype=np.int64)})
    np.testing.assert_allclose(y, [[_lse([1, 4]), _lse([2, 5]), _lse([3, 6])]], rtol=3e-7)
    with pytest.raises(TypeError, match="ReduceLogSumExp-28"):
        backend.run_node(node, [np.array([1, 2], dtype=np.int32)])


def test_run_node_axes_meaning_depends_on_the_opset():
    # at opset 13 ReduceL2 takes axes as an attribute: an axes input is refused
    node = oh.make_node("ReduceL2", ["x", "axes"], ["y"])
    with pytest.raises(ValueError, match="ReduceL2-13: takes axes as an attribute"):
        backend.run_node(node, [X, np.array([0], dtype=np.int64)], opset_version=13)
    node = oh.make_node("ReduceSum", ["x"], ["y"], axes=[0])
    with pytest.raises(ValueError, match="ReduceSum-13: attribute 'axes' is not defined"):
        backend.run_node(node, [X], opset_version=13)


def test_run_node_delegates_other_ops_to_the_reference():
    node = oh.make_node("Add", ["a", "b"], ["c"])
    (c,) = backend.run_node(node, [X, X], opset_version=14)
    np.testing.assert_array_equal(c, 2 * X)
    (e,) = backend.run_node(oh.make_node("Exp", ["a"], ["e"]), [np.zeros(2)])
    np.testing.assert_array_equal(e, [1.0, 1.0])


# --- whole graphs -------------------------------------------------------------------------------


@pytest.mark.parametrize("opset", [11, 13, 17, 18, 21])
def test_mixed_exp_reducesum_log(opset):
    """Exp -> ReduceSum -> Log: ReduceSum by onnx-reduce inside the reference evaluator."""
    sum_inputs = ["e", "axes"] if opset >= 13 else ["e"]
    sum_attrs = {} if opset >= 13 else {"axes": [1]}
    nodes = [
        oh.make_node("Exp", ["x"], ["e"]),
        oh.make_node("ReduceSum", sum_inputs, ["s"], keepdims=0, **sum_attrs),
        oh.make_node("Log", ["s"], ["y"]),
    ]
    inits = [numpy_helper.from_array(np.array([1], dtype=np.int64), "axes")] if opset >= 13 else []
    model = _model(nodes, [_vi("x", F64)], [_vi("y", F64)], opset, inits)
    x = np.array([[0.5, -1.0, 2.0], [3.0, 3.0, -7.0]])
    (y,) = backend.prepare(model).run([x])
    want = [math.log(math.fsum(math.exp(v) for v in row)) for row in x.tolist()]
    np.testing.assert_allclose(y, want, rtol=1e-14)


@pytest.mark.parametrize("opset", [11, 13, 18])
def test_mixed_l2_normalise(opset):
    """x / ReduceL2(x, axes=[-1]): our L2 does not overflow where a naive one would."""
    l2_inputs = ["x", "axes"] if opset >= 18 else ["x"]
    l2_attrs = {} if opset >= 18 else {"axes": [-1]}
    nodes = [
        oh.make_node("ReduceL2", l2_inputs, ["n"], keepdims=1, **l2_attrs),
        oh.make_node("Div", ["x", "n"], ["y"]),
    ]
    inits = [numpy_helper.from_array(np.array([-1], dtype=np.int64), "axes")] if opset >= 18 else []
    model = _model(nodes, [_vi("x")], [_vi("y")], opset, inits)
    x = np.array([[3e30, 4e30], [3.0, -4.0], [0.0, 2.0]], dtype=np.float32)
    (y,) = backend.prepare(model).run({"x": x})
    assert y.dtype == np.float32
    np.testing.assert_allclose(y, [[0.6, 0.8], [0.6, -0.8], [0.0, 1.0]], rtol=3e-7)


def test_graph_of_our_ops_with_axes_initializers():
    """ReduceSum (axes initializer) -> ReduceLogSumExp (axes initializer), opset 18: run direct."""
    inits = [numpy_helper.from_array(np.array([1], dtype=np.int64), "ax1"),
             numpy_helper.from_array(np.array([0], dtype=np.int64), "ax0")]
    nodes = [oh.make_node("ReduceSum", ["x", "ax1"], ["s"], keepdims=1),
             oh.make_node("ReduceLogSumExp", ["s", "ax0"], ["y"], keepdims=0)]
    model = _model(nodes, [_vi("x", F64)], [_vi("y", F64)], 18, inits)
    rep = backend.prepare(model)
    assert rep.input_names == ["x"]
    x = np.array([[400.0, 400.0], [399.0, 401.0], [-1.0, 1.0]])
    (y,) = rep.run([x])
    assert y.shape == (1,)
    np.testing.assert_allclose(y, [_lse([800.0, 800.0, 0.0])], rtol=1e-15)


def test_graph_of_our_ops_at_old_opset():
    nodes = [oh.make_node("ReduceL2", ["x"], ["n"], axes=[0], keepdims=0),
             oh.make_node("ReduceSum", ["n"], ["y"], keepdims=0)]
    model = _model(nodes, [_vi("x", TensorProto.INT64)], [_vi("y", TensorProto.INT64)], 1)
    (y,) = backend.prepare(model).run([np.array([[3, 5], [4, 12]], dtype=np.int64)])
    assert y.dtype == np.int64
    assert y.shape == ()
    assert int(y) == 5 + 13


# --- errors -------------------------------------------------------------------------------------


def test_errors_name_op_and_version_direct_path():
    rep = backend.prepare(_reduce_model("ReduceSum", 13, elem=TensorProto.INT8))
    with pytest.raises(TypeError, match=r"ReduceSum-13: data type 'int8'"):
        rep.run([np.array([1, 2], dtype=np.int8)])
    rep = backend.prepare(_reduce_model("ReduceL2", 18, axes=[5]))
    with pytest.raises(ValueError, match=r"ReduceL2-18: axis 5 is out of range"):
        rep.run([X, np.array([5], dtype=np.int64)])
    rep = backend.prepare(_reduce_model("ReduceLogSumExp", 11, axes=[0, -2]))
    with pytest.raises(ValueError, match=r"ReduceLogSumExp-11: axes \[0, -2\] name the same"):
        rep.run([X])


def test_errors_name_op_and_version_inside_a_mixed_graph():
    nodes = [oh.make_node("Identity", ["x"], ["t"]),
             oh.make_node("ReduceL2", ["t"], ["y"], axes=[2])]
    rep = backend.prepare(_model(nodes, [_vi("x")], [_vi("y")], 13))
    with pytest.raises(ValueError, match="ReduceL2-13: axis 2 is out of range"):
        rep.run([X])
    nodes = [oh.make_node("Identity", ["x"], ["t"]), oh.make_node("ReduceLogSumExp", ["t"], ["y"])]
    model = _model(nodes, [_vi("x", TensorProto.BFLOAT16)], [_vi("y", TensorProto.BFLOAT16)], 11)
    from onnx_reduce.spec import bfloat16

    with pytest.raises(TypeError, match="ReduceLogSumExp-11: data type 'bfloat16'"):
        backend.prepare(model).run([np.ones(2, dtype=bfloat16)])


# --- models checked when prepared, inputs checked when run ---------------------------------------


def _sequence_input():
    return oh.make_tensor_sequence_value_info("x", F32, None)


def _map_input():
    value = oh.make_tensor_type_proto(F32, None)
    return oh.make_value_info("x", oh.make_map_type_proto(TensorProto.INT64, value))


def _optional_input():
    tensor = oh.make_tensor_type_proto(F32, None)
    return oh.make_value_info("x", oh.make_optional_type_proto(tensor))


def _sparse_input():
    return oh.make_sparse_tensor_value_info("x", F32, [2, 3])


@pytest.mark.parametrize(
    ("declared", "kind"),
    [(_sequence_input, "sequence"), (_map_input, "map"), (_optional_input, "optional"),
     (_sparse_input, "sparse_tensor")],
)
def test_graph_inputs_must_be_tensors(declared, kind):
    model = _model([oh.make_node("ReduceSum", ["x"], ["y"])], [declared()], [_vi("y")], 13)
    with pytest.raises(TypeError, match=rf"model input 'x' is declared a {kind}; .* tensors only"):
        backend.prepare(model)


def test_inputs_are_checked_against_their_declared_type():
    node = oh.make_node("ReduceSum", ["x"], ["y"], keepdims=0)
    rep = backend.prepare(_model([node], [_vi("x", F32, ["n", 3])], [_vi("y")], 13))
    assert rep.run([np.ones((5, 3), np.float32)])[0] == 15  # a symbolic dim takes any size
    with pytest.raises(TypeError, match="model input 'x' is declared float, got float64"):
        rep.run([np.ones((2, 3))])
    with pytest.raises(ValueError, match=r"model input 'x' is declared of shape \('\?', 3\), got"):
        rep.run([np.ones((2, 4), np.float32)])
    with pytest.raises(ValueError, match="model input 'x' is declared of shape"):
        rep.run({"x": np.ones(3, np.float32)})
    untyped = oh.make_value_info("x", onnx.TypeProto())
    rep = backend.prepare(_model([node], [untyped], [_vi("y")], 13))
    assert rep.run([np.ones(4)])[0] == 4  # nothing declared: anything is taken


def test_inputs_checked_in_mixed_graphs_too():
    nodes = [oh.make_node("Identity", ["x"], ["t"]), oh.make_node("ReduceSum", ["t"], ["y"])]
    rep = backend.prepare(_model(nodes, [_vi("x", F64, [2])], [_vi("y", F64)], 13))
    with pytest.raises(TypeError, match="model input 'x' is declared double, got int32"):
        rep.run([np.array([1, 2], np.int32)])


def test_a_model_must_import_the_default_domain():
    node = oh.make_node("ReduceSum", ["x"], ["y"])
    graph = oh.make_graph([node], "g", [_vi("x")], [_vi("y")])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("com.example", 1)])
    with pytest.raises(ValueError, match="does not import the default ONNX domain"):
        backend.prepare(model)


def test_the_default_domain_may_be_named_ai_onnx():
    node = oh.make_node("ReduceSum", ["x"], ["y"], keepdims=0, domain="ai.onnx")
    graph = oh.make_graph([node], "g", [_vi("x")], [_vi("y")])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("ai.onnx", 13)])
    assert backend.prepare(model).run([np.ones(3, np.float32)])[0] == 3
    (y,) = backend.run_node(node, [np.ones(3, np.float32)], opset_version=13)
    assert y == 3
    add = oh.make_node("Add", ["a", "b"], ["c"], domain="ai.onnx")
    (c,) = backend.run_node(add, [np.ones(2), np.ones(2)], opset_version=14)
    np.testing.assert_array_equal(c, [2.0, 2.0])


def test_run_node_binds_a_dict_by_name():
    node = oh.make_node("ReduceSum", ["x", "axes"], ["y"], keepdims=0)
    x = np.array([[1.0, 2.0], [3.0, 4.0]])
    feeds = {"axes": np.array([1], np.int64), "x": x}  # not in the node's order
    (y,) = backend.run_node(node, feeds, opset_version=13)
    np.testing.assert_array_equal(y, [3.0, 7.0])
    (y,) = backend.run_node(node, {"x": x}, opset_version=13)  # axes left out: all axes
    assert y == 10.0
    with pytest.raises(ValueError, match="node 'ReduceSum' has no input 'data'"):
        backend.run_node(node, {"data": x}, opset_version=13)
    with pytest.raises(ValueError, match="ReduceSum-13: the data input is not given"):
        backend.run_node(node, {"axes": np.array([1], np.int64)}, opset_version=13)
    sub = oh.make_node("Sub", ["a", "b"], ["c"])
    (c,) = backend.run_node(sub, {"b": np.ones(2), "a": np.zeros(2)}, opset_version=14)
    np.testing.assert_array_equal(c, [-1.0, -1.0])


def test_run_with_a_dict_refuses_unknown_names():
    rep = backend.prepare(_reduce_model("ReduceSum", 13))
    with pytest.raises(ValueError, match="the model has no input 'y'"):
        rep.run({"x": X, "y": X})


def _initializer_of_type(data_type):
    tensor = numpy_helper.from_array(np.array([1], np.int64), "axes")
    tensor.data_type = data_type
    return tensor


def _graph_model(nodes, outputs=("y",)):
    return _model(nodes, [_vi("x")], [_vi(name) for name in outputs], 13)


@pytest.mark.parametrize(
    ("model", "message"),
    [
        (_graph_model([oh.make_node("ReduceSum", ["zz"], ["y"])]),
         r"node 0 \('ReduceSum'\) reads 'zz', which no graph input"),
        (_graph_model([oh.make_node("ReduceSum", ["x"], ["y"])], outputs=("y", "w")),
         "graph output 'w' is produced by no node"),
        (_graph_model([oh.make_node("ReduceSum", ["b"], ["a"], name="first"),
                       oh.make_node("ReduceSum", ["a"], ["b"]),
                       oh.make_node("ReduceSum", ["x"], ["y"])]),
         r"node 0 'first' \('ReduceSum'\) reads 'b'"),
        (_graph_model([oh.make_node("ReduceSum", [], ["y"])]),
         r"node 0 \('ReduceSum'\) takes data and optionally axes, got inputs \[\]"),
        (_graph_model([oh.make_node("ReduceSum", ["", "x"], ["y"])]),
         "takes data and optionally axes"),
        (_graph_model([oh.make_node("ReduceSum", ["x"], [])], outputs=()),
         r"has one output, got \[\]"),
        (_graph_model([oh.make_node("Identity", ["x"], ["t"]),
                       oh.make_node("Relu", ["u"], ["y"])]),
         r"node 1 \('Relu'\) reads 'u'"),
        (_model([oh.make_node("ReduceSum", ["x", "axes"], ["y"])], [_vi("x")], [_vi("y")], 18,
                [_initializer_of_type(999)]),
         "initializer 'axes' has an unknown data type 999"),
        (_model([oh.make_node("Relu", ["axes"], ["y"])], [], [_vi("y")], 18,
                [_initializer_of_type(TensorProto.UNDEFINED)]),
         "initializer 'axes' has an unknown data type 0"),
    ],
    ids=["undefined-input", "unproduced-output", "cycle", "no-inputs", "empty-data",
         "no-output", "mixed-undefined", "initializer-type", "initializer-no-type"],
)
def test_invalid_graphs_are_refused_when_prepared(model, message):
    with pytest.raises(ValueError, match=message):
        backend.prepare(model)


def test_unknown_domains_are_refused_when_prepared():
    node = oh.make_node("Foo", ["x"], ["y"], domain="com.example")
    graph = oh.make_graph([node], "g", [_vi("x")], [_vi("y")])
    imported = [oh.make_opsetid("", 18), oh.make_opsetid("com.example", 1)]
    with pytest.raises(ValueError, match=r"the model cannot run: .*'Foo'.*'com\.example'"):
        backend.prepare(oh.make_model(graph, opset_imports=imported))
    not_imported = oh.make_model(graph, opset_imports=imported[:1])
    with pytest.raises(ValueError, match=r"node 0 \('Foo'\) is in domain 'com.example', which"):
        backend.prepare(not_imported)


def test_names_in_messages_are_escaped():
    node = oh.make_node("ReduceSum", ["x\x1b[2J"], ["y"])
    with pytest.raises(ValueError, match="reads 'x") as raised:
        backend.prepare(_graph_model([node]))
    assert "\x1b" not in str(raised.value)
    assert r"'x\x1b[2J'" in str(raised.value)


def test_a_model_that_feeds_another_op_wrongly_is_a_value_error():
    nodes = [oh.make_node("Add", ["x", "axes"], ["y"])]
    inits = [numpy_helper.from_array(np.array([1], np.int64), "axes")]
    rep = backend.prepare(_model(nodes, [_vi("x")], [_vi("y")], 18, inits))
    with pytest.raises(ValueError, match=r"the model fails in onnx\.reference: .*float32 != int64"):
        rep.run([np.ones(2, np.float32)])


# --- feeds numpy cannot read faithfully --------------------------------------------------------


@pytest.mark.parametrize("as_dict", [False, True])
def test_run_refuses_masked_feeds(as_dict):
    rep = backend.prepare(_reduce_model("ReduceSum", 11, keepdims=0))
    masked = np.ma.masked_array(X, mask=X > 4)
    with pytest.raises(TypeError, match=r"model input 'x': masked arrays are not supported"):
        rep.run({"x": masked} if as_dict else [masked])


def test_run_names_the_input_numpy_cannot_read():
    rep = backend.prepare(_reduce_model("ReduceSum", 11, keepdims=0))
    with pytest.raises(ValueError, match=r"model input 'x': data cannot be read as an array"):
        rep.run([[[1.0], [2.0, 3.0]]])


def test_run_node_refuses_masked_and_ragged_data():
    node = oh.make_node("ReduceSum", ["x"], ["y"], keepdims=0)
    with pytest.raises(TypeError, match=r"ReduceSum-13: masked arrays"):
        backend.run_node(node, [np.ma.masked_array(X, mask=X > 4)], opset_version=13)
    with pytest.raises(ValueError, match=r"ReduceSum-13: data cannot be read as an array"):
        backend.run_node(node, [[[1.0], [2.0, 3.0]]], opset_version=13)


@pytest.mark.parametrize("opset", [13.7, "13", True])
@pytest.mark.parametrize("op_type", ["ReduceSum", "Relu"])
def test_run_node_refuses_an_opset_that_is_not_an_integer(op_type, opset):
    """13.7 is not read as 13: an opset is an integer, for our ops and the evaluator's alike."""
    node = oh.make_node(op_type, ["x"], ["y"])
    with pytest.raises(TypeError, match="opset"):
        backend.run_node(node, [X], opset_version=opset)


@pytest.mark.parametrize(
    ("inputs", "outputs", "values", "opset", "message"),
    [
        (["x"], ["y"], [X, np.array([1])], 13, r"has 1 input\(s\) \['x'\], but 2 values"),
        (["x", "a", "b"], ["y"], [X, np.array([1]), np.array([0])], 13,
         r"ReduceSum-13: takes at most 2 input\(s\) \(data, axes\), the node has 3"),
        (["x", "a"], ["y"], [X], 11, r"ReduceSum-11: takes axes as an attribute, not as an "
         r"input \(the node names input 'a'\)"),
        (["x", "", "b"], ["y"], [X], 11, r"ReduceSum-11: takes at most 1 input\(s\) \(data\)"),
        (["x", "a"], ["y", "z"], [X, np.array([1])], 13, r"has one output, the node names 2"),
        (["x", ""], ["y"], [X, np.array([1])], 13, r"a value was given for an absent input"),
    ],
)
def test_run_node_refuses_values_and_names_the_node_does_not_take(inputs, outputs, values,
                                                                  opset, message):
    """A value beyond the node's inputs, or for an absent one, is not taken as axes: the
    reduction would run over axes the node does not name."""
    node = oh.make_node("ReduceSum", inputs, outputs)
    with pytest.raises(ValueError, match=message):
        backend.run_node(node, values, opset_version=opset)


def test_run_node_takes_none_for_an_absent_axes_input():
    node = oh.make_node("ReduceSum", ["x", ""], ["y"])
    (got,) = backend.run_node(node, [X, None], opset_version=13)
    np.testing.assert_array_equal(got, np.array([[21.0]], np.float32))


@pytest.mark.parametrize(
    ("model", "device", "error", "message"),
    [
        (b"garbage", "CPU", ValueError, r"^not a readable ONNX model: "),
        ("/nonexistent/model.onnx", "CPU", ValueError, r"^not a readable ONNX model: .*No such"),
        (None, "CPU", TypeError, r"^prepare takes an onnx\.ModelProto, its bytes or a path; "
         r"got NoneType$"),
        (5, "CPU", TypeError, r"got int$"),
        ("model", "TPU:7", ValueError, r"^onnx-reduce runs on CPU only, not on 'TPU:7'$"),
    ],
)
def test_prepare_refuses_what_is_not_a_model_with_a_one_line_error(model, device, error,
                                                                   message):
    if model == "model":
        model = _reduce_model("ReduceSum", 13)
    with pytest.raises(error, match=message):
        backend.prepare(model, device)


def test_prepare_refuses_external_data_it_cannot_read():
    axes = numpy_helper.from_array(np.array([1], np.int64), "axes")
    axes.data_location = TensorProto.EXTERNAL
    axes.ClearField("raw_data")
    entry = axes.external_data.add()
    entry.key, entry.value = "location", "missing.bin"
    node = oh.make_node("ReduceSum", ["x", "axes"], ["y"])
    model = _model([node], [_vi("x", F32, [2, 3])], [_vi("y")], 13, [axes])
    with pytest.raises(ValueError, match=r"^the model cannot be prepared: .*missing\.bin"):
        backend.prepare(model).run([X])


def test_run_node_of_an_unknown_domain_is_a_value_error():
    node = oh.make_node("Foo", ["x"], ["y"], domain="com.foo")
    with pytest.raises(ValueError, match=r"^node 'Foo' cannot run: .*com\.foo"):
        backend.run_node(node, [X])


def test_a_name_written_twice_is_refused():
    """Graphs assign each name once: a second writer of 'y' (or a node writing a graph input)
    would make which value a reader sees depend on the runtime."""
    nodes = [oh.make_node("ReduceSum", ["x"], ["y"]), oh.make_node("ReduceL2", ["x"], ["y"])]
    model = _model(nodes, [_vi("x", F32, [2, 3])], [_vi("y")], 13)
    with pytest.raises(ValueError, match=r"^node 1 \('ReduceL2'\) writes 'y', which .* already "):
        backend.prepare(model)
    model = _model([oh.make_node("ReduceSum", ["x"], ["x"])], [_vi("x", F32, [2, 3])],
                   [_vi("x")], 13)
    with pytest.raises(ValueError, match=r"^node 0 \('ReduceSum'\) writes 'x'"):
        backend.prepare(model)


@pytest.mark.parametrize("reference", [False, True], ids=["direct", "onnx.reference"])
def test_a_graph_input_with_an_initializer_is_a_default_a_dict_may_override(reference):
    """ONNX: an initializer named like a graph input is that input's default value."""
    axes = numpy_helper.from_array(np.array([1], np.int64), "a")
    nodes = [oh.make_node("ReduceSum", ["x", "a"], ["y"])]
    if reference:  # a node of another op: the graph runs in onnx.reference
        nodes = [oh.make_node("Abs", ["x"], ["t"]), oh.make_node("ReduceSum", ["t", "a"], ["y"])]
    inputs = [_vi("x", F32, [2, 3]), _vi("a", TensorProto.INT64, [1])]
    rep = backend.prepare(_model(nodes, inputs, [_vi("y")], 13, [axes]))
    assert rep.input_names == ["x"]
    assert rep.defaulted_names == ["a"]
    np.testing.assert_array_equal(rep.run([X])[0], [[6.0], [15.0]])
    np.testing.assert_array_equal(rep.run({"x": X, "a": np.array([0])})[0], [[5.0, 7.0, 9.0]])
    with pytest.raises(TypeError, match=r"^model input 'a' is declared int64, got float64$"):
        rep.run({"x": X, "a": np.array([0.5])})
    with pytest.raises(ValueError, match=r"^the model takes 1 inputs \['x'\], got 2$"):
        rep.run([X, np.array([0])])


@pytest.mark.parametrize("imported", ["", "ai.onnx"])
def test_nodes_of_the_ai_onnx_domain_run_in_onnx_reference_too(imported):
    """"ai.onnx" is the default domain's other name: a graph that needs onnx.reference (an Abs
    node here) runs with it as with ""."""
    nodes = [oh.make_node("Abs", ["x"], ["t"], domain="ai.onnx"),
             oh.make_node("ReduceSum", ["t"], ["y"], domain="ai.onnx")]
    graph = oh.make_graph(nodes, "g", [_vi("x", F32, [2, 3])], [_vi("y")])
    model = oh.make_model_gen_version(graph, opset_imports=[oh.make_opsetid(imported, 13)])
    np.testing.assert_array_equal(backend.prepare(model).run([-X])[0], [[21.0]])


@pytest.mark.parametrize(
    ("op", "x", "want"),
    [
        ("ReduceL2", np.array([3e30, 4e30], np.float32), np.float32(5e30)),
        ("ReduceLogSumExp", np.array([np.inf, np.inf], np.float32), np.float32(np.inf)),
        ("ReduceLogSumExp", np.array([5, 5], np.int32), np.int32(5)),  # LSE 5.69, truncated
    ],
)
def test_reduce_nodes_inside_local_functions_run_on_onnx_reduce(op, x, want):
    """Model-local functions are inlined before the graph runs: onnx.reference evaluates a
    function's nodes without the plug-in (its own ReduceL2 of [3e30, 4e30] float32 is inf)."""
    elem = oh.np_dtype_to_tensor_dtype(x.dtype)
    body = [oh.make_node(op, ["a"], ["b"], keepdims=0)]
    function = oh.make_function("local", "F", ["a"], ["b"], body, [oh.make_opsetid("", 18)])
    graph = oh.make_graph([oh.make_node("F", ["x"], ["y"], domain="local")], "g",
                          [_vi("x", elem, [2])], [_vi("y", elem, [])])
    model = oh.make_model(graph, functions=[function], opset_imports=[
        oh.make_opsetid("", 18), oh.make_opsetid("local", 1)])
    onnx.checker.check_model(model, full_check=True)
    (got,) = backend.prepare(model).run([x])
    assert got.dtype == x.dtype
    assert got == want


@pytest.mark.parametrize(
    ("nodes", "inputs", "feeds", "message"),
    [
        ([oh.make_node("Gather", ["x", "i"], ["t"]), oh.make_node("ReduceSum", ["t"], ["y"])],
         [_vi("x", F32, [2, 3]), _vi("i", TensorProto.INT64, [1])],
         [X, np.array([5], np.int64)], r"index 5 is out of bounds"),
        ([oh.make_node("Range", ["a", "b", "c"], ["t"]), oh.make_node("ReduceSum", ["t"], ["y"])],
         [_vi(name, F32, []) for name in "abc"],
         [np.float32(0), np.float32(5), np.float32(0)], r"division by zero"),
    ],
)
def test_another_op_s_failure_in_onnx_reference_is_a_value_error(nodes, inputs, feeds, message):
    """A node onnx.reference runs and the feeds break (an index past the end, a Range of step
    0) raises what onnx.reference raises: an IndexError, a ZeroDivisionError; given as
    ValueError, a bad input's error like our own nodes'."""
    rep = backend.prepare(_model(nodes, inputs, [_vi("y")], 13))
    with pytest.raises(ValueError, match=rf"^the model fails in onnx\.reference: .*{message}"):
        rep.run(feeds)
