"""Front door: an ``onnx.backend.base.Backend`` that runs whole models.

Nodes of the registry's operators run through onnx-reduce at the version the model's opset
selects; a graph made only of them runs directly, any other graph runs in
:class:`onnx.reference.ReferenceEvaluator` with onnx-reduce plugged in for those operators.

A model is checked when prepared (a clear ``ValueError``/``TypeError`` instead of a failure deep
inside): the default domain is imported (as ``""`` or ``"ai.onnx"``), every node reads only names
defined before it, every graph output is produced, every node's domain is imported and known, and
every graph input is declared a tensor (or not declared). Each run checks the inputs against their
declared element type, rank and fixed dims, and binds a dict of inputs by name. Names from the model
are quoted with ``repr`` in messages, which escapes control characters.

>>> import onnx.helper as oh
>>> node = oh.make_node("ReduceL2", ["x"], ["y"], axes=[0], keepdims=0)
>>> graph = oh.make_graph([node], "g", [oh.make_tensor_value_info("x", 1, [2])],
...                       [oh.make_tensor_value_info("y", 1, [])])
>>> model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 13)])
>>> prepare(model).run([np.array([3e30, 4e30], dtype=np.float32)])[0]
array(5.e+30, dtype=float32)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper
from onnx.backend.base import Backend, BackendRep, Device, DeviceType

from .pipeline import execute
from .pipeline import prepare as prepare_call
from .plan.cache import BoundedCache
from .reference_plugin import reference_ops
from .spec import OPS, OpVersion, resolve
from .spec.validate import as_array, read_array
from .spec.values import as_integer, one_line, shown

#: Prepared node calls kept per model.
_MAX_PREPARED = 1024

#: The names of the default (ONNX) domain.
_DEFAULT_DOMAINS = ("", "ai.onnx")


class OnnxReduceRep(BackendRep):
    """A prepared model: call :meth:`run` with the graph inputs (list, tuple, dict or array)."""

    def __init__(self, model: onnx.ModelProto) -> None:
        self.model = model
        if model.functions:  # onnx.reference runs a local function's nodes without new_ops
            model = _inlined(model)
        graph = model.graph
        initializers = {init.name for init in graph.initializer}
        graph_inputs = [i for i in graph.input if i.name not in initializers]
        self.input_names = [i.name for i in graph_inputs]
        #: Graph inputs with an initializer: its value unless a dict of inputs names them.
        self.defaulted_names = [i.name for i in graph.input if i.name in initializers]
        self.output_names = [o.name for o in graph.output]
        self._input_types = [t for t in map(_declared_type, graph.input) if t is not None]
        opset = _default_opset(model)
        _check_graph(graph)
        self._steps = _direct_steps(graph, opset)
        self._prepared: BoundedCache[tuple, Callable[[np.ndarray], np.ndarray]] = (
            BoundedCache(_MAX_PREPARED))
        if self._steps is not None:
            self._constants = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
            self._evaluator = None
        else:
            self._evaluator = _reference_evaluator(model)

    def run(self, inputs: Any, **kwargs: Any) -> tuple[np.ndarray, ...]:
        feeds = self._feeds(inputs)
        if self._evaluator is not None:
            return _evaluate(self._evaluator, feeds)
        values = {**self._constants, **feeds}
        for step, (ver, node, attributes) in enumerate(self._steps):
            names = list(node.input)
            data = values[names[0]]
            axes = values[names[1]] if len(names) > 1 and names[1] else None
            values[node.output[0]] = self._run_node(step, ver, attributes, data, axes)
        return tuple(values[name] for name in self.output_names)

    def _run_node(
        self, step: int, ver: OpVersion, attributes: Mapping[str, Any], data: Any,
        axes: np.ndarray | None,
    ) -> np.ndarray:
        """One node, through a call prepared once per (dtype, shape, axes values)
        (:func:`onnx_reduce.pipeline.prepare`, as the numpy-style functions keep theirs): a
        repeated run skips validation and planning and takes the kernel bound to the case."""
        if not isinstance(data, np.ndarray):
            return execute(ver, data, attributes, axes)  # raises, naming the op and version
        key = (step, data.dtype, data.shape,
               None if axes is None else (axes.dtype, axes.shape, axes.tobytes()))
        run = self._prepared.get(key)
        if run is None:
            run = self._prepared.put(key, prepare_call(ver, data.dtype, data.shape, attributes,
                                                       axes))
        return run(data)

    def _feeds(self, inputs: Any) -> dict[str, np.ndarray]:
        if isinstance(inputs, Mapping):
            _check_names(inputs, self.input_names + self.defaulted_names, "the model")
            feeds = {name: _feed(name, value) for name, value in inputs.items()}
        else:
            if isinstance(inputs, np.ndarray):
                inputs = [inputs]
            if not isinstance(inputs, Sequence):
                raise TypeError(
                    f"inputs must be a list, tuple, dict or array, got {type(inputs)}"
                )
            if len(inputs) > len(self.input_names):
                raise ValueError(
                    f"the model takes {len(self.input_names)} inputs {self.input_names}, "
                    f"got {len(inputs)}"
                )
            pairs = zip(self.input_names, inputs, strict=False)  # fewer inputs: reported below
            feeds = {name: _feed(name, value) for name, value in pairs}
        missing = [name for name in self.input_names if name not in feeds]
        if missing:
            raise ValueError(f"missing model inputs {missing} (the model takes {self.input_names})")
        for declared in self._input_types:
            value = feeds.get(declared.name)
            if value is None:  # a defaulted input left to its initializer
                continue
            if value.dtype is not declared.dtype or value.shape != declared.dims:  # else it fits
                declared.check(value)
        return feeds


class OnnxReduceBackend(Backend):
    """The onnx-reduce backend (CPU only)."""

    @classmethod
    def is_compatible(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> bool:
        return cls.supports_device(device)

    @classmethod
    def prepare(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> OnnxReduceRep:
        if not cls.supports_device(device):
            raise ValueError(f"onnx-reduce runs on CPU only, not on {device!r}")
        model = _model_of(model)
        try:
            return OnnxReduceRep(model)
        except onnx.checker.ValidationError as error:  # e.g. external data it cannot read
            raise ValueError(f"the model cannot be prepared: {one_line(str(error))}") from None

    @classmethod
    def run_model(
        cls, model: onnx.ModelProto, inputs: Any, device: str = "CPU", **kwargs: Any
    ) -> tuple[np.ndarray, ...]:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(
        cls,
        node: onnx.NodeProto,
        inputs: Any,
        device: str = "CPU",
        outputs_info: Any = None,
        **kwargs: Any,
    ) -> tuple[np.ndarray, ...]:
        """Run one node; ``opset_version`` (default: the newest onnx knows) picks its version."""
        opset = kwargs.get("opset_version", onnx.defs.onnx_opset_version())
        values = _node_values(node, inputs)
        if node.domain in _DEFAULT_DOMAINS and node.op_type in OPS:
            ver = resolve(node.op_type, opset)
            _check_arity(ver, node)
            if not values or values[0] is None:
                raise ValueError(f"{ver.label}: the data input is not given")
            axes = as_array(ver, values[1]) if len(values) > 1 and values[1] is not None else None
            return (execute(ver, as_array(ver, values[0]), _attributes(node), axes),)
        if as_integer(opset) is None:
            raise TypeError(f"opset_version must be an integer, got {shown(opset)}")
        from onnx.reference import ReferenceEvaluator

        if node.domain == "ai.onnx":
            node = _in_domain(node, "")
        pairs = zip(node.input, values, strict=False)
        feeds = {name: value for name, value in pairs if name and value is not None}
        try:
            evaluator = ReferenceEvaluator(node, new_ops=reference_ops(), opsets={"": opset})
        except (NotImplementedError, RuntimeError) as error:  # an op or domain it does not know
            raise ValueError(f"node {node.op_type!r} cannot run: {one_line(str(error))}") from None
        return _evaluate(evaluator, feeds)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        try:
            return Device(device).type == DeviceType.CPU
        except (AttributeError, TypeError, ValueError):  # not a device onnx names
            return False


def _model_of(model: Any) -> onnx.ModelProto:
    """``model`` (a ModelProto, its serialized bytes or a path) as a ModelProto; ``ValueError``
    for what is not a readable model, ``TypeError`` for anything else."""
    from google.protobuf.message import DecodeError

    if isinstance(model, onnx.ModelProto):
        return model
    try:
        if isinstance(model, bytes):
            return onnx.load_from_string(model)
        if isinstance(model, str) or hasattr(model, "__fspath__"):
            return onnx.load(model)
    except (DecodeError, OSError, ValueError, onnx.checker.ValidationError) as error:
        reason = one_line(str(error)) or type(error).__name__
        raise ValueError(f"not a readable ONNX model: {reason}") from None
    raise TypeError(f"prepare takes an onnx.ModelProto, its bytes or a path; got "
                    f"{type(model).__name__}")


def _feed(name: str, value: Any) -> np.ndarray:
    """A model input as a plain array (:func:`~onnx_reduce.spec.validate.read_array`); plain
    arrays pass without building a message (the per-run path)."""
    return value if type(value) is np.ndarray else read_array(f"model input {name!r}", value)


def _node_values(node: onnx.NodeProto, inputs: Any) -> list[Any]:
    """``inputs`` in the order of ``node.input``: a dict is bound by name (None where absent);
    a sequence by position, one value per input the node names at most (an absent optional
    input, named "", takes None)."""
    if not isinstance(inputs, Mapping):
        values = list(inputs)
        names = list(node.input)
        if len(values) > len(names):
            raise ValueError(f"node {node.op_type!r} has {len(names)} input(s) {names}, "
                             f"but {len(values)} values were given")
        for name, value in zip(names, values, strict=False):
            if not name and value is not None:
                raise ValueError(f"node {node.op_type!r}: a value was given for an absent "
                                 f"input (named \"\"); its inputs: {names}")
        return values
    _check_names(inputs, [name for name in node.input if name], f"node {node.op_type!r}")
    return [inputs.get(name) if name else None for name in node.input]


def _check_arity(ver: OpVersion, node: onnx.NodeProto) -> None:
    """``ValueError`` for a node with more inputs than its version takes (data, and axes where
    it is an input) or other than one output."""
    most = 2 if ver.axes_is_input else 1
    if not ver.axes_is_input and len(node.input) == 2 and node.input[1]:
        raise ValueError(f"{ver.label}: takes axes as an attribute, not as an input (the node "
                         f"names input {node.input[1]!r})")
    if len(node.input) > most:
        raise ValueError(f"{ver.label}: takes at most {most} input(s) (data"
                         f"{', axes' if ver.axes_is_input else ''}), the node has "
                         f"{len(node.input)}: {list(node.input)}")
    if len(node.output) != 1:
        raise ValueError(f"{ver.label}: has one output, the node names {len(node.output)}: "
                         f"{list(node.output)}")


def _check_names(inputs: Mapping[str, Any], names: list[str], owner: str) -> None:
    unknown = [name for name in inputs if name not in names]
    if unknown:
        raise ValueError(f"{owner} has no input {unknown[0]!r}; its inputs: {names}")


def _in_domain(node: onnx.NodeProto, domain: str) -> onnx.NodeProto:
    moved = onnx.NodeProto()
    moved.CopyFrom(node)
    moved.domain = domain
    return moved


def _default_opset(model: onnx.ModelProto) -> int | None:
    """The version of the default domain the model imports (None if no node needs one)."""
    for opset in model.opset_import:
        if opset.domain in _DEFAULT_DOMAINS:
            return opset.version
    if any(node.domain in _DEFAULT_DOMAINS for node in model.graph.node):
        imported = [f"{o.domain!r} {o.version}" for o in model.opset_import]
        raise ValueError(
            "the model does not import the default ONNX domain ('' or 'ai.onnx'), which its "
            f"nodes use; its opset_import: {', '.join(imported) or 'none'}"
        )
    return None


def _check_graph(graph: onnx.GraphProto) -> None:
    """Every initializer can be decoded, every node reads only names defined before it (graph
    inputs, initializers, earlier outputs: a graph in topological order, so no cycle) and
    defines names nothing else defines (single assignment), every graph output is produced."""
    _check_initializers(graph)
    defined = {i.name for i in graph.input} | {i.name for i in graph.initializer}
    for index, node in enumerate(graph.node):
        if node.domain in _DEFAULT_DOMAINS and node.op_type in OPS:
            _check_reduce_node(index, node)
        for name in node.input:
            if name and name not in defined:
                raise ValueError(
                    f"{_node_label(index, node)} reads {name!r}, which no graph input, "
                    "initializer or earlier node defines"
                )
        for name in node.output:
            if name in defined:
                raise ValueError(f"{_node_label(index, node)} writes {name!r}, which a graph "
                                 "input, initializer or earlier node already defines")
            if name:
                defined.add(name)
    for output in graph.output:
        if output.name not in defined:
            raise ValueError(f"graph output {output.name!r} is produced by no node or input")


def _check_initializers(graph: onnx.GraphProto) -> None:
    """Every initializer has a data type onnx can decode."""
    for initializer in graph.initializer:
        try:
            onnx.helper.tensor_dtype_to_np_dtype(initializer.data_type)
        except (KeyError, ValueError, TypeError):
            raise ValueError(
                f"initializer {initializer.name!r} has an unknown data type {initializer.data_type}"
            ) from None


def _check_reduce_node(index: int, node: onnx.NodeProto) -> None:
    """A reduce node has the data input, at most an axes input besides, and one output."""
    if not node.input or not node.input[0] or len(node.input) > 2:
        raise ValueError(
            f"{_node_label(index, node)} takes data and optionally axes, got inputs "
            f"{list(node.input)}"
        )
    if len(node.output) != 1 or not node.output[0]:
        raise ValueError(f"{_node_label(index, node)} has one output, got {list(node.output)}")


def _node_label(index: int, node: onnx.NodeProto) -> str:
    named = f" {node.name!r}" if node.name else ""
    return f"node {index}{named} ({node.op_type!r})"


def _reference_evaluator(model: onnx.ModelProto) -> Any:
    """``onnx.reference``'s evaluator for the model; nodes it cannot run (an unknown domain or
    op) are a ``ValueError``."""
    from onnx.reference import ReferenceEvaluator

    imported = {opset.domain for opset in model.opset_import} | set(_DEFAULT_DOMAINS)
    for index, node in enumerate(model.graph.node):
        if node.domain not in imported:
            raise ValueError(
                f"{_node_label(index, node)} is in domain {node.domain!r}, "
                "which the model does not import"
            )
    try:
        return ReferenceEvaluator(_default_domain(model), new_ops=reference_ops())
    except (NotImplementedError, RuntimeError) as error:
        raise ValueError(f"the model cannot run: {error}") from None


def _inlined(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with its model-local functions inlined: their reduce nodes then run on
    onnx-reduce as the main graph's do (onnx.reference builds a function's evaluator without
    the plug-in's ``new_ops``, so ReduceL2 of float32 [3e30, 4e30] was inf there)."""
    import onnx.inliner

    try:
        return onnx.inliner.inline_local_functions(model)
    except Exception as error:  # the inliner's C++ errors have no common type
        raise ValueError(f"the model's local functions cannot be inlined: "
                         f"{one_line(str(error))}") from None


def _default_domain(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with its nodes of domain "ai.onnx" (the default domain's other name, which
    onnx.reference does not know) in "", the default domain imported at that version."""
    if not any(node.domain == "ai.onnx" for node in model.graph.node):
        return model
    moved = onnx.ModelProto()
    moved.CopyFrom(model)
    for node in moved.graph.node:
        if node.domain == "ai.onnx":
            node.domain = ""
    versions = {opset.domain: opset.version for opset in moved.opset_import}
    if "" not in versions and "ai.onnx" in versions:
        moved.opset_import.append(onnx.helper.make_opsetid("", versions["ai.onnx"]))
    return moved


def _evaluate(evaluator: Any, feeds: dict[str, np.ndarray]) -> tuple[np.ndarray, ...]:
    """Run the graph in onnx.reference; a node the model feeds wrongly (its RuntimeError, e.g.
    ``Add`` of float32 and int64) is a ``ValueError``, as our own nodes' bad inputs are."""
    try:
        return tuple(evaluator.run(None, feeds))
    except (RuntimeError, NotImplementedError, IndexError, KeyError, ZeroDivisionError,
            OverflowError) as error:  # e.g. Gather of an index past the end, Range of step 0
        reason = one_line(str(error)) or type(error).__name__
        raise ValueError(f"the model fails in onnx.reference: {reason}") from None


def _direct_steps(
    graph: onnx.GraphProto, opset: int | None
) -> list[tuple[OpVersion, onnx.NodeProto, dict]] | None:
    """The graph as a list of our own steps, or None when any node needs the reference."""
    if not all(n.domain in _DEFAULT_DOMAINS and n.op_type in OPS for n in graph.node):
        return None
    return [(resolve(n.op_type, opset), n, _attributes(n)) for n in graph.node]


@dataclass(frozen=True)
class _DeclaredType:
    """A graph input's declared tensor type: element type (None: any) and dims (None: any
    rank; a dim None: any size)."""

    name: str
    dtype: np.dtype | None
    type_name: str
    dims: tuple[int | None, ...] | None

    def check(self, value: np.ndarray) -> None:
        """Refuse a fed array of another element type, rank or fixed size."""
        fed = value.dtype.newbyteorder("=")  # either byte order: the pipeline converts
        if self.dtype is not None and fed != self.dtype and not _both_strings(self.dtype, fed):
            raise TypeError(
                f"model input {self.name!r} is declared {self.type_name}, got {value.dtype}"
            )
        if self.dims is not None and not self._fits(value.shape):
            shape = tuple("?" if d is None else d for d in self.dims)
            raise ValueError(
                f"model input {self.name!r} is declared of shape {shape}, got {value.shape}"
            )


    def _fits(self, shape: tuple[int, ...]) -> bool:
        return len(shape) == len(self.dims) and all(
            want is None or want == got for want, got in zip(self.dims, shape, strict=True)
        )


def _both_strings(declared: np.dtype, fed: np.dtype) -> bool:
    """A STRING input (object in numpy) is fed as str, bytes or object arrays alike."""
    return declared.kind == "O" and fed.kind in "OUS"


def _declared_type(info: onnx.ValueInfoProto) -> _DeclaredType | None:
    """What a graph input declares (None: nothing to check); a non-tensor type is refused."""
    kind = info.type.WhichOneof("value")
    if kind is None:
        return None
    if kind != "tensor_type":
        raise TypeError(
            f"model input {info.name!r} is declared a {kind.removesuffix('_type')}; "
            "onnx-reduce's backend takes tensors only"
        )
    tensor = info.type.tensor_type
    dims = None
    if tensor.HasField("shape"):
        dims = tuple(d.dim_value if d.HasField("dim_value") else None for d in tensor.shape.dim)
    return _DeclaredType(info.name, *_element_type(info.name, tensor.elem_type), dims)


def _element_type(name: str, elem_type: int) -> tuple[np.dtype | None, str]:
    if elem_type == onnx.TensorProto.UNDEFINED:
        return None, "any"
    try:
        type_name = onnx.TensorProto.DataType.Name(elem_type).lower()
        return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type)), type_name
    except (KeyError, ValueError, TypeError):
        raise ValueError(
            f"model input {name!r} has an unknown element type {elem_type}"
        ) from None


def _attributes(node: onnx.NodeProto) -> dict[str, Any]:
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


prepare = OnnxReduceBackend.prepare
run_model = OnnxReduceBackend.run_model
run_node = OnnxReduceBackend.run_node
supports_device = OnnxReduceBackend.supports_device
is_compatible = OnnxReduceBackend.is_compatible
