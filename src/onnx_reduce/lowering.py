"""Front door: one node of the registry's operators rewritten as a subgraph of primitive operators.

``expand(node, opset)`` returns the spec's own function body (ReduceL2-18, ReduceLogSumExp-18
and -28) instantiated for ``node``; ``expand(node, opset, stable=True)`` returns a numerically
stable lowering (max-shifted LogSumExp, max-scaled L2) usable at any opset >= 13, for runtimes
that lack the operator or overflow where the true result does not. ``expand_model`` rewrites every
such node of a model.

>>> import onnx.helper as oh
>>> node = oh.make_node("ReduceLogSumExp", ["x", "axes"], ["y"], keepdims=0)
>>> [n.op_type for n in expand(node, 18)]
['Cast', 'Exp', 'ReduceSum', 'Log', 'CastLike']
>>> [n.op_type for n in expand(node, 18, stable=True, dtype="float")][:5]
['ReduceMax', 'IsInf', 'IsNaN', 'Or', 'Constant']
"""

from __future__ import annotations

import contextlib
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper

from .spec import (
    OPS,
    VERSIONS,
    OpVersion,
    check_dtype,
    native_dtype,
    op_record,
    resolve,
    validate_attributes,
)

#: The first opset whose operators the stable lowering needs (ReduceSum with an axes input).
STABLE_MIN_OPSET = 13
#: CastLike, needed by the stable lowering when the data type is not known, exists from here.
_CASTLIKE_OPSET = 15
#: ReduceMax takes axes (and noop_with_empty_axes) as an input from here.
_REDUCEMAX_AXES_INPUT = 18

_DOMAINS = ("", "ai.onnx")
_ELEM_NAMES = dict(TensorProto.DataType.items())


def expand(
    node: onnx.NodeProto,
    opset: int,
    stable: bool = False,
    *,
    dtype: Any = None,
    prefix: str | None = None,
) -> list[onnx.NodeProto]:
    """The primitive-operator subgraph equivalent to ``node`` in a model importing ``opset``.

    The returned nodes read the node's own inputs and write its own output; intermediate values
    are named ``<prefix>/<name>`` (``prefix`` defaults to the node's name, else its output).

    ``stable=False``: the function body of the operator version ``opset`` selects, with the
    attribute references replaced by the node's values (or the defaults) and a missing ``axes``
    input left missing. Versions without a body, and ReduceSum (a primitive), raise ``ValueError``.

    ``stable=True`` (``opset >= 13``): ``m = ReduceMax(x)``, non-finite ``m`` replaced by 0,
    ``Log(ReduceSum(Exp(x - m))) + m`` for ReduceLogSumExp; ``s = ReduceMax(|x|)`` (0 or
    non-finite -> 1), ``s * Sqrt(ReduceSum((x / s)**2))`` for ReduceL2 (float16 and integer
    data, whose squares cannot overflow their wider accumulator, go unscaled);
    ``ReduceSum(x * x)`` for ReduceSumSquare (integers in their own type, wrapping) and
    ``Log(ReduceSum(x / s)) + Log(s)`` for ReduceLogSum (float16/bfloat16/float32 in float64;
    integers ``Log(ReduceSum(x))``); ReduceSum is returned as is. LSE and L2: all -inf
    gives -inf, any +inf gives +inf, NaN gives NaN. ``dtype`` (ONNX type name, ``TensorProto``
    enum or numpy dtype of the data) chooses the arithmetic: float16/bfloat16 in float32,
    float32/float64 in their own type, integers in float64, each cast back once at the end.
    Integer results equal onnx-reduce's while the float64 arithmetic is exact for them (sums
    of squares and elements under 2**53, results in the dtype's range): beyond, it rounds, and
    the cast back neither saturates nor keeps LSE at max(x). A ReduceLogSum whose sum cancels
    has the float sum's error (``[1e16, 1, -1e16]`` gives log 0), as no lowering to sums can.
    Without ``dtype`` it runs in float64 and casts back with CastLike, which needs
    ``opset >= 15``.

    >>> import onnx.helper as oh
    >>> node = oh.make_node("ReduceL2", ["x"], ["y"], axes=[1], keepdims=0, name="l2")
    >>> [(n.op_type, list(n.output)) for n in expand(node, 13, stable=True, dtype="float")][:3]
    [('Abs', ['l2/abs']), ('ReduceMax', ['l2/max']), ('IsInf', ['l2/isinf'])]
    >>> expand(node, 13)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: ReduceL2-13 has no function body in the ONNX spec (bodies exist for ...
    """
    if not isinstance(node, onnx.NodeProto):
        raise TypeError(f"expand takes an onnx.NodeProto, got {type(node).__name__}")
    ver = _version(node, opset)
    attributes = _attributes(ver, node)
    validate_attributes(ver, attributes)
    inputs = list(node.input)
    if (not inputs or not inputs[0] or len(inputs) > (2 if ver.axes_is_input else 1)
            or len(node.output) != 1 or not node.output[0]):
        raise ValueError(
            f"{ver.label}: expected {'1 or 2 inputs' if ver.axes_is_input else '1 input'} and "
            f"1 output, got inputs {inputs} and outputs {list(node.output)}"
        )
    names = _Names(prefix if prefix is not None else (node.name or node.output[0]))
    if not stable:
        return _spec_body(ver, node, opset, names)
    if opset < STABLE_MIN_OPSET:
        raise ValueError(
            f"{ver.label}: the stable lowering needs opset >= {STABLE_MIN_OPSET}, got {opset}"
        )
    if ver.record.lowering == "primitive":
        copy = onnx.NodeProto()
        copy.CopyFrom(node)
        return [copy]
    elem = None if dtype is None else _elem_type(ver, dtype)
    if elem is None and opset < _CASTLIKE_OPSET:
        raise ValueError(
            f"{ver.label}: at opset {opset} (no CastLike before {_CASTLIKE_OPSET}) the stable "
            "lowering needs the data type: pass dtype="
        )
    return _Lowering(ver, node, opset, elem, names, attributes).build()


def expand_model(model: onnx.ModelProto, stable: bool = False) -> onnx.ModelProto:
    """A copy of ``model`` with each node of the registry's operators in its main graph replaced
    by :func:`expand`'s subgraph (ReduceSum nodes stay as they are when ``stable=False``).

    With ``stable=True`` each node's data type is taken from the model (after shape inference);
    where it is unknown the lowering computes in float64 (opset >= 15).

    >>> import numpy as np, onnx.helper as oh
    >>> from onnx.reference import ReferenceEvaluator
    >>> node = oh.make_node("ReduceLogSumExp", ["x"], ["y"], keepdims=0)
    >>> graph = oh.make_graph([node], "g", [oh.make_tensor_value_info("x", 11, [2])],
    ...                       [oh.make_tensor_value_info("y", 11, [])])
    >>> model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)])
    >>> x = {"x": np.array([800.0, 800.0])}
    >>> ReferenceEvaluator(expand_model(model)).run(None, x)  # the spec body overflows
    [array(inf)]
    >>> ReferenceEvaluator(expand_model(model, stable=True)).run(None, x)
    [array(800.69314718)]
    """
    if not isinstance(model, onnx.ModelProto):
        raise TypeError(f"expand_model takes an onnx.ModelProto, got {type(model).__name__}")
    opset = _default_opset(model)
    types_ = _known_types(model) if stable else {}
    graph = model.graph
    taken = _all_names(graph)
    nodes: list[onnx.NodeProto] = []
    for node in graph.node:
        ours = node.domain in _DOMAINS and node.op_type in OPS
        if not ours or (op_record(node.op_type).lowering == "primitive" and not stable):
            nodes.append(node)
            continue
        prefix = _free_prefix(node.name or (node.output[0] if node.output else node.op_type),
                              taken)  # a node without outputs: refused by expand
        dtype = types_.get(node.input[0]) if stable and node.input else None
        nodes.extend(expand(node, opset, stable, dtype=dtype, prefix=prefix))
    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    return out


# --- the spec's function body ------------------------------------------------------------------


def _spec_body(
    ver: OpVersion, node: onnx.NodeProto, opset: int, names: _Names
) -> list[onnx.NodeProto]:
    if ver.record.lowering == "primitive":
        raise ValueError(
            f"{ver.label} is a primitive operator: the ONNX spec gives it no function body"
        )
    if not ver.has_function_body:
        bodies = ", ".join(v.label for vs in VERSIONS.values() for v in vs.values()
                           if v.has_function_body)
        raise ValueError(
            f"{ver.label} has no function body in the ONNX spec (bodies exist for {bodies}); "
            "use stable=True for a lowering"
        )
    schema = onnx.defs.get_schema(ver.op, opset, "")
    body = schema.function_body
    if schema.since_version != ver.version or not body.node:
        raise ValueError(f"{ver.label}: onnx {onnx.__version__} has no function body for it")
    actual = {formal: (node.input[i] if i < len(node.input) else "")
              for i, formal in enumerate(body.input)}
    actual.update(zip(body.output, node.output, strict=True))
    given = {a.name: a for a in node.attribute}
    out = []
    for i, proto in enumerate(body.node):
        new = onnx.NodeProto()
        new.CopyFrom(proto)
        new.name = f"{names.prefix}/{i}_{proto.op_type}"
        new.input[:] = _trim([actual.get(n, names.fixed(n)) if n else "" for n in proto.input])
        new.output[:] = [actual.get(n, names.fixed(n)) if n else "" for n in proto.output]
        del new.attribute[:]
        for attr in proto.attribute:
            if not attr.ref_attr_name:
                new.attribute.append(attr)
                continue
            source = given.get(attr.ref_attr_name)
            if source is None:
                source = _default(schema, attr.ref_attr_name)
            if source is None:
                continue  # an optional attribute the node leaves out
            value = onnx.AttributeProto()
            value.CopyFrom(source)
            value.name = attr.name
            new.attribute.append(value)
        out.append(new)
    return out


def _default(schema: onnx.defs.OpSchema, name: str) -> onnx.AttributeProto | None:
    attr = schema.attributes.get(name)
    if attr is None or attr.default_value.type == onnx.AttributeProto.UNDEFINED:
        return None
    return attr.default_value


def _trim(inputs: list[str]) -> list[str]:
    while inputs and not inputs[-1]:
        inputs.pop()
    return inputs


# --- the stable lowering -----------------------------------------------------------------------


class _Lowering:
    """Builds the stable subgraph of one node; the registry's ``lowering`` names the method."""

    def __init__(
        self,
        ver: OpVersion,
        node: onnx.NodeProto,
        opset: int,
        elem: int | None,
        names: _Names,
        attributes: dict[str, Any],
    ) -> None:
        self.ver, self.opset, self.elem, self.names = ver, opset, elem, names
        self.nodes: list[onnx.NodeProto] = []
        self.data = node.input[0]
        self.output = node.output[0]
        self.keepdims = int(attributes.get("keepdims", 1))
        self.noop = int(attributes.get("noop_with_empty_axes", 0))
        if ver.axes_is_input:
            self.axes_input = node.input[1] if len(node.input) > 1 else ""
            self.axes_attr = None
        else:
            self.axes_input = ""
            self.axes_attr = list(attributes["axes"]) if attributes.get("axes") else None
        self.integer = elem is not None and helper.tensor_dtype_to_np_dtype(elem).kind in "iu"
        if self.integer and ver.record.lowering == "sum_square":
            self.acc = elem  # integer squares and sums wrap in their own type, as in the spec
        elif elem is None or self.integer:
            self.acc = TensorProto.DOUBLE
        elif ver.record.lowering == "log_sum" and elem != TensorProto.DOUBLE:
            self.acc = TensorProto.DOUBLE  # a float32 sum of float32 data can overflow
        elif elem in (TensorProto.FLOAT16, TensorProto.BFLOAT16):
            self.acc = TensorProto.FLOAT
        else:
            self.acc = elem
        # Squares of float16 data or of integers converted to float64 can neither overflow nor
        # underflow in the accumulator; everything else is scaled by its largest magnitude.
        self.scale = not (self.integer or elem == TensorProto.FLOAT16)

    def build(self) -> list[onnx.NodeProto]:
        x = self.data
        if self.acc != self.elem:
            x = self.add("Cast", [x], "data", to=self.acc)
        result = getattr(self, self.ver.record.lowering)(x)
        if self.acc == self.elem:
            self.nodes[-1].output[0] = self.output
        elif self.elem is None:
            self.add("CastLike", [result, self.data], self.output, final=True)
        else:
            self.add("Cast", [result], self.output, final=True, to=self.elem)
        return self.nodes

    def log_sum_exp(self, x: str) -> str:
        m = self.safe(self.reduce_max(x), 0.0, zero_is_bad=False)
        total = self.reduce_sum(self.add("Exp", [self.add("Sub", [x, m], "shifted")], "exp"))
        return self.add("Add", [self.add("Log", [total], "log"), self.like(m, total)], "result")

    def sum_square(self, x: str) -> str:
        return self.reduce_sum(self.add("Mul", [x, x], "squares"))

    def log_sum(self, x: str) -> str:
        if self.integer:
            return self.add("Log", [self.reduce_sum(x)], "result")
        s = self.safe(self.reduce_max(self.add("Abs", [x], "abs")), 1.0, zero_is_bad=True)
        total = self.reduce_sum(self.add("Div", [x, s], "scaled"))
        log_s = self.add("Log", [self.like(s, total)], "log_scale")
        return self.add("Add", [self.add("Log", [total], "log"), log_s], "result")

    def l2(self, x: str) -> str:
        if not self.scale:
            squares = self.add("Mul", [x, x], "squares")
            return self.add("Sqrt", [self.reduce_sum(squares)], "result")
        s = self.safe(self.reduce_max(self.add("Abs", [x], "abs")), 1.0, zero_is_bad=True)
        scaled = self.add("Div", [x, s], "scaled")
        total = self.reduce_sum(self.add("Mul", [scaled, scaled], "squares"))
        return self.add("Mul", [self.like(s, total), self.add("Sqrt", [total], "sqrt")], "result")

    def safe(self, value: str, replacement: float, zero_is_bad: bool) -> str:
        """``value`` with +-inf and NaN (and 0 when ``zero_is_bad``) replaced."""
        bad = self.add("Or", [self.add("IsInf", [value], "isinf"),
                              self.add("IsNaN", [value], "isnan")], "nonfinite")
        if zero_is_bad:
            zero = self.constant(0.0, "zero")
            bad = self.add("Or", [bad, self.add("Equal", [value, zero], "iszero")], "bad")
        fill = self.constant(replacement, "one" if replacement else "zero")
        return self.add("Where", [bad, fill, value], "safe")

    def reduce_max(self, x: str) -> str:
        if self.opset >= _REDUCEMAX_AXES_INPUT:
            return self.add("ReduceMax", _trim([x, self.axes_input]), "max", keepdims=1,
                            noop_with_empty_axes=self.noop)
        axes = {} if self.axes_attr is None else {"axes": self.axes_attr}
        return self.add("ReduceMax", [x], "max", keepdims=1, **axes)

    def reduce_sum(self, x: str) -> str:
        axes = self.axes_input
        if self.axes_attr is not None:
            axes = self.names("axes")
            self.nodes.append(helper.make_node(
                "Constant", [], [axes], name=self.node_name("Constant"),
                value=helper.make_tensor(axes, TensorProto.INT64, [len(self.axes_attr)],
                                         self.axes_attr)))
        return self.add("ReduceSum", _trim([x, axes]), "sum", keepdims=self.keepdims,
                        noop_with_empty_axes=self.noop)

    def like(self, kept: str, reduced: str) -> str:
        """``kept`` (reduced with keepdims=1) in the shape of ``reduced`` (the node's keepdims)."""
        if self.keepdims:
            return kept
        shape = self.add("Shape", [reduced], "shape")
        return self.add("Reshape", [kept, shape], "squeezed")

    def constant(self, value: float, name: str) -> str:
        out = self.names(name)
        tensor = helper.make_tensor(out, self.acc, [], [value])
        self.nodes.append(helper.make_node("Constant", [], [out], name=self.node_name("Constant"),
                                           value=tensor))
        return out

    def add(self, op: str, inputs: list[str], name: str, final: bool = False, **attrs: Any) -> str:
        out = name if final else self.names(name)
        self.nodes.append(helper.make_node(op, inputs, [out], name=self.node_name(op), **attrs))
        return out

    def node_name(self, op: str) -> str:
        return f"{self.names.prefix}/{len(self.nodes)}_{op}"


# --- helpers -----------------------------------------------------------------------------------


class _Names:
    """Intermediate value names ``<prefix>/<name>``, made unique within one expansion."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.count: dict[str, int] = {}

    def fixed(self, local: str) -> str:
        return f"{self.prefix}/{local}"

    def __call__(self, local: str) -> str:
        n = self.count.get(local, 0)
        self.count[local] = n + 1
        return f"{self.prefix}/{local}" + (f"_{n}" if n else "")


def _version(node: onnx.NodeProto, opset: int) -> OpVersion:
    if not isinstance(node, onnx.NodeProto):
        raise TypeError(f"expand: node must be an onnx.NodeProto, got {type(node).__name__}")
    if node.domain not in _DOMAINS or node.op_type not in OPS:
        raise ValueError(
            f"expand: node {node.op_type!r} (domain {node.domain!r}) is not one of {', '.join(OPS)}"
        )
    return resolve(node.op_type, opset)


def _elem_type(ver: OpVersion, dtype: Any) -> int:
    """The ``TensorProto`` element type of ``dtype``; ``TypeError`` if the version rejects it."""
    if isinstance(dtype, (int, np.integer)) and not isinstance(dtype, bool):
        elem = int(dtype)
        if elem not in TensorProto.DataType.values() or elem == TensorProto.UNDEFINED:
            raise TypeError(f"{ver.label}: unknown ONNX element type {elem}")
    elif isinstance(dtype, str) and dtype.upper() in _ELEM_NAMES:
        elem = _ELEM_NAMES[dtype.upper()]
    else:
        try:
            elem = helper.np_dtype_to_tensor_dtype(native_dtype(np.dtype(dtype)))
        except (TypeError, KeyError, ValueError):
            raise TypeError(f"{ver.label}: cannot read {dtype!r} as a data type") from None
    check_dtype(ver, helper.tensor_dtype_to_np_dtype(elem))
    return elem


def _attributes(ver: OpVersion, node: onnx.NodeProto) -> dict[str, Any]:
    """The node's attributes by name; ``ValueError`` for one given twice or one that refers to
    an attribute of an enclosing function (``ref_attr_name``: expand the function's caller)."""
    attributes: dict[str, Any] = {}
    for attribute in node.attribute:
        if attribute.name in attributes:
            raise ValueError(f"{ver.label}: attribute {attribute.name!r} is given twice")
        if attribute.ref_attr_name:
            raise ValueError(f"{ver.label}: attribute {attribute.name!r} refers to "
                             f"{attribute.ref_attr_name!r} of an enclosing function")
        attributes[attribute.name] = helper.get_attribute_value(attribute)
    return attributes


def _default_opset(model: onnx.ModelProto) -> int:
    for opset in model.opset_import:
        if opset.domain in _DOMAINS:
            return opset.version
    raise ValueError("expand_model: the model does not import the default ONNX domain")


def _known_types(model: onnx.ModelProto) -> dict[str, int]:
    with contextlib.suppress(Exception):  # a best effort: unknown types are handled
        model = onnx.shape_inference.infer_shapes(model)
    graph = model.graph
    types_ = {i.name: i.data_type for i in graph.initializer}
    for info in [*graph.input, *graph.value_info, *graph.output]:
        if info.type.HasField("tensor_type") and info.type.tensor_type.elem_type:
            types_[info.name] = info.type.tensor_type.elem_type
    return types_


def _all_names(graph: onnx.GraphProto) -> set[str]:
    """Every name of ``graph`` and of its nodes' subgraphs (If/Loop/Scan bodies share the
    model's single-assignment namespace)."""
    names = {i.name for i in [*graph.input, *graph.output, *graph.value_info, *graph.initializer]}
    for node in graph.node:
        names.update(node.input)
        names.update(node.output)
        names.add(node.name)
        for attribute in node.attribute:
            for body in [attribute.g, *attribute.graphs]:
                names |= _all_names(body)
    return names


def _free_prefix(base: str, taken: set[str]) -> str:
    prefix, n = base, 0
    while any(name.startswith(prefix + "/") for name in taken):
        n += 1
        prefix = f"{base}_{n}"
    taken.update({prefix + "/"})
    return prefix
