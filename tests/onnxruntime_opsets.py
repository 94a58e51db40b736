"""The newest opset the installed onnxruntime loads, asked of onnxruntime itself, not of the code
under test: the differential tests run every operator version up to it, and the conformance tests
expect onnxruntime to refuse the cases above it."""

from __future__ import annotations

import functools

import onnx.helper as oh
from onnx import TensorProto


@functools.cache
def ort_max_opset() -> int:
    """The newest default-domain opset at which onnxruntime loads a one-node ReduceSum model
    (1.31 loads up to 26, 1.32 up to 28; 17 when none from 18 on). Needs onnxruntime."""
    import onnxruntime as ort

    x = oh.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    y = oh.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = oh.make_graph([oh.make_node("ReduceSum", ["x"], ["y"])], "g", [x], [y])
    options = ort.SessionOptions()
    options.log_severity_level = 3
    for opset in range(28, 17, -1):
        model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)], ir_version=8)
        try:
            ort.InferenceSession(model.SerializeToString(), options,
                                 providers=["CPUExecutionProvider"])
        except Exception:  # onnxruntime raises its own exception classes
            continue
        return opset
    return 17
