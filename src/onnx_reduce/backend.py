"""Front door: an ``onnx.backend.base.Backend`` that runs whole models.

Nodes of the three operators run through onnx-reduce at the version the model's opset selects;
a graph made only of them runs directly, any other graph runs in
:class:`onnx.reference.ReferenceEvaluator` with onnx-reduce plugged in for the three operators.

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
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper
from onnx.backend.base import Backend, BackendRep, Device, DeviceType

from .pipeline import execute
from .pipeline import prepare as prepare_call
from .reference_plugin import reference_ops
from .spec import OPS, OpVersion, resolve

#: Prepared node calls kept per model (cleared when full).
_MAX_PREPARED = 1024


class OnnxReduceRep(BackendRep):
    """A prepared model: call :meth:`run` with the graph inputs (list, tuple, dict or array)."""

    def __init__(self, model: onnx.ModelProto) -> None:
        self.model = model
        graph = model.graph
        initializers = {init.name for init in graph.initializer}
        self.input_names = [i.name for i in graph.input if i.name not in initializers]
        self.output_names = [o.name for o in graph.output]
        opset = _default_opset(model)
        self._steps = _direct_steps(graph, opset)
        self._prepared: dict[tuple, Callable[[np.ndarray], np.ndarray]] = {}
        if self._steps is not None:
            self._constants = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
            self._evaluator = None
        else:
            from onnx.reference import ReferenceEvaluator

            self._evaluator = ReferenceEvaluator(model, new_ops=reference_ops())

    def run(self, inputs: Any, **kwargs: Any) -> tuple[np.ndarray, ...]:
        feeds = self._feeds(inputs)
        if self._evaluator is not None:
            return tuple(self._evaluator.run(None, feeds))
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
            run = prepare_call(ver, data.dtype, data.shape, attributes, axes)
            if len(self._prepared) >= _MAX_PREPARED:
                self._prepared.clear()
            self._prepared[key] = run
        return run(data)

    def _feeds(self, inputs: Any) -> dict[str, np.ndarray]:
        if isinstance(inputs, Mapping):
            feeds = {name: np.asarray(value) for name, value in inputs.items()}
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
            feeds = {name: np.asarray(value) for name, value in pairs}
        missing = [name for name in self.input_names if name not in feeds]
        if missing:
            raise ValueError(f"missing model inputs {missing} (the model takes {self.input_names})")
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
        if isinstance(model, bytes):
            model = onnx.load_from_string(model)
        elif isinstance(model, str) or hasattr(model, "__fspath__"):
            model = onnx.load(model)
        return OnnxReduceRep(model)

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
        opset = int(kwargs.get("opset_version", onnx.defs.onnx_opset_version()))
        values = list(inputs.values()) if isinstance(inputs, Mapping) else list(inputs)
        if node.domain == "" and node.op_type in OPS:
            ver = resolve(node.op_type, opset)
            axes = np.asarray(values[1]) if len(values) > 1 and values[1] is not None else None
            return (execute(ver, np.asarray(values[0]), _attributes(node), axes),)
        from onnx.reference import ReferenceEvaluator

        feeds = dict(zip([n for n in node.input if n], values, strict=False))
        evaluator = ReferenceEvaluator(node, new_ops=reference_ops(), opsets={"": opset})
        return tuple(evaluator.run(None, feeds))

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return Device(device).type == DeviceType.CPU


def _default_opset(model: onnx.ModelProto) -> int:
    for opset in model.opset_import:
        if opset.domain in ("", "ai.onnx"):
            return opset.version
    return onnx.defs.onnx_opset_version()


def _direct_steps(
    graph: onnx.GraphProto, opset: int
) -> list[tuple[OpVersion, onnx.NodeProto, dict]] | None:
    """The graph as a list of our own steps, or None when any node needs the reference."""
    if not all(n.domain in ("", "ai.onnx") and n.op_type in OPS for n in graph.node):
        return None
    return [(resolve(n.op_type, opset), n, _attributes(n)) for n in graph.node]


def _attributes(node: onnx.NodeProto) -> dict[str, Any]:
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


prepare = OnnxReduceBackend.prepare
run_model = OnnxReduceBackend.run_model
run_node = OnnxReduceBackend.run_node
supports_device = OnnxReduceBackend.supports_device
is_compatible = OnnxReduceBackend.is_compatible
