"""Front door: the registry's operators as ``onnx.reference`` plug-ins.

>>> import onnx.helper as oh
>>> from onnx.reference import ReferenceEvaluator
>>> node = oh.make_node("ReduceLogSumExp", ["x"], ["y"], keepdims=0)
>>> graph = oh.make_graph([node], "g", [oh.make_tensor_value_info("x", 11, [2])],
...                       [oh.make_tensor_value_info("y", 11, [])])
>>> model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)])
>>> ReferenceEvaluator(model, new_ops=reference_ops()).run(None, {"x": np.array([800.0, 800.0])})
[array(800.69314718)]
"""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx.reference.op_run import OpRun

from .pipeline import execute
from .spec import OPS, resolve


class _OnnxReduceOp(OpRun):
    """Runs the node through onnx-reduce at the version the model's opset selects."""

    op_domain = ""

    def run(self, *args: Any, **kwargs: Any) -> tuple:
        # OpRun.run replaces any TypeError raised by _run with a generic "Issues with types ..."
        # TypeError; ours (which names op-version and the bad value) is smuggled past it.
        try:
            return super().run(*args, **kwargs)
        except _Passthrough as wrapped:
            raise wrapped.error from None

    def _run(self, data: np.ndarray, *axes: np.ndarray | None, **attributes: Any) -> tuple:
        ver = resolve(self.onnx_node.op_type, self.run_params["opsets"][""])
        given = {a.name for a in self.onnx_node.attribute}
        attributes = {k: v for k, v in attributes.items() if k in given}
        try:
            return (execute(ver, data, attributes, *axes),)
        except TypeError as error:
            raise _Passthrough(error) from None


class _Passthrough(Exception):
    """Carries one of our errors through :meth:`OpRun.run` unchanged."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


def reference_ops() -> list[type[OpRun]]:
    """``new_ops`` for :class:`onnx.reference.ReferenceEvaluator`: every operator of the op
    registry served by onnx-reduce, every version."""
    return [type(op, (_OnnxReduceOp,), {}) for op in OPS]
