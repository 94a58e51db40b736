"""The showcase: the spec's examples and the hard edge cases, run through the ONNX backend.

Run it with ``python -m onnx_reduce.demo``.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx.helper as oh

from . import backend
from .spec import bfloat16

F32, F64 = onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE


def _model(op: str, opset: int, elem_type: int, axes: list[int] | None, **attrs: int):
    inputs = [oh.make_tensor_value_info("data", elem_type, None)]
    node_inputs = ["data"]
    initializers = []
    if axes is not None and opset >= {"ReduceSum": 13}.get(op, 18):
        node_inputs.append("axes")
        initializers.append(oh.make_tensor("axes", onnx.TensorProto.INT64, [len(axes)], axes))
    elif axes is not None:
        attrs["axes"] = axes
    node = oh.make_node(op, node_inputs, ["reduced"], **attrs)
    graph = oh.make_graph([node], op, inputs, [oh.make_tensor_value_info("reduced", elem_type,
                                                                         None)], initializers)
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)])


CASES = [
    # (title, op, opset, data, axes, attributes)
    ("spec: ReduceSum keepdims example", "ReduceSum", 13,
     np.arange(1, 13, dtype=np.float32).reshape(3, 2, 2), [1], {"keepdims": 1}),
    ("spec: ReduceL2 do_not_keepdims example", "ReduceL2", 18,
     np.arange(1, 13, dtype=np.float32).reshape(3, 2, 2), [2], {"keepdims": 0}),
    ("spec: ReduceLogSumExp default axes", "ReduceLogSumExp", 28,
     np.array([[[5, 1], [20, 2]], [[30, 1], [40, 2]], [[55, 1], [60, 2]]], np.float64), None,
     {"keepdims": 1}),
    ("LSE float64 [800, 800] (spec body: inf)", "ReduceLogSumExp", 28,
     np.array([800.0, 800.0]), None, {"keepdims": 0}),
    ("LSE all -inf", "ReduceLogSumExp", 18, np.array([-np.inf, -np.inf]), None, {"keepdims": 0}),
    ("LSE empty set", "ReduceLogSumExp", 28, np.zeros((2, 0), np.float32), [1], {"keepdims": 0}),
    ("L2 float32 [3e30, 4e30]", "ReduceL2", 18, np.array([3e30, 4e30], np.float32), None,
     {"keepdims": 0}),
    ("L2 float64 [3e-200, 4e-200]", "ReduceL2", 13, np.array([3e-200, 4e-200]), None,
     {"keepdims": 0}),
    ("L2 float16 [300, 400]", "ReduceL2", 18, np.array([300, 400], np.float16), None,
     {"keepdims": 0}),
    ("L2 int64 exact isqrt", "ReduceL2", 18, np.array([3037000499, 1], np.int64), None,
     {"keepdims": 0}),
    ("Sum int32 wraps", "ReduceSum", 13, np.array([2**31 - 1, 1], np.int32), None,
     {"keepdims": 0}),
    ("Sum bfloat16, one rounding", "ReduceSum", 13, np.full(4096, 0.1, bfloat16), None,
     {"keepdims": 0}),
    ("noop: L2 is |x|", "ReduceL2", 18, np.array([-3.0, 4.0], np.float32), [],
     {"noop_with_empty_axes": 1}),
]


def main() -> None:
    from onnx.helper import np_dtype_to_tensor_dtype

    for title, op, opset, data, axes, attrs in CASES:
        model = _model(op, opset, np_dtype_to_tensor_dtype(data.dtype), axes, **attrs)
        (result,) = backend.prepare(model).run([data])
        shown = np.array2string(np.asarray(result, dtype=np.float64) if data.dtype == bfloat16
                                else result, precision=8, separator=", ")
        print(f"{title:<42} {op}-{opset:<3} -> {shown} ({result.dtype}, shape {result.shape})")
    print("\nErrors are clear and name the op, version and value:")
    for op, opset, data, axes in [("ReduceLogSumExp", 28, np.arange(3, dtype=np.int32), None),
                                  ("ReduceSum", 13, np.ones((2, 3), np.float32), [2])]:
        try:
            backend.prepare(_model(op, opset, np_dtype_to_tensor_dtype(data.dtype), axes)).run(
                [data])
        except (TypeError, ValueError) as error:
            print(f"  {type(error).__name__}: {error}")


if __name__ == "__main__":
    main()
