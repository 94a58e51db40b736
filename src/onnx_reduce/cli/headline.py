"""The showcase's headline edge cases: where a naive reduction overflows, loses exactness or
returns NaN, each with its exact value (computed by ``onnx_reduce.conformance.expected_output``
with exact arithmetic) to judge every runner's answer by.

>>> case = HEADLINES[0]
>>> case.title, case.exact()
('LSE f64 [800, 800]', array(800.69314718))
>>> verdict(case, np.array(800.6931471805599)), verdict(case, np.array(np.inf))
(True, False)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper

from ..spec import onnx_type_name

#: The opset of every headline model: the newest both onnxruntime and onnx.reference run.
OPSET = 18


@dataclass(frozen=True)
class Headline:
    """One edge case: an operator on a small vector, reduced over all axes (keepdims=0)."""

    title: str
    op: str
    data: np.ndarray
    trap: str
    """What goes wrong in the textbook formula."""

    def exact(self) -> np.ndarray:
        """The exactly computed result, rounded once to the data's dtype."""
        from ..conformance import expected_output

        return expected_output(self.op, self.data, None, keepdims=False)

    def model(self) -> onnx.ModelProto:
        """A one-node model ``reduced = op(data)`` at opset :data:`OPSET`."""
        elem = helper.np_dtype_to_tensor_dtype(self.data.dtype)
        node = helper.make_node(self.op, ["data"], ["reduced"], keepdims=0)
        graph = helper.make_graph(
            [node], self.title, [helper.make_tensor_value_info("data", elem, self.data.shape)],
            [helper.make_tensor_value_info("reduced", elem, [])],
        )
        # the IR version the opset needs, not onnx's newest (onnxruntime may not read that yet)
        return helper.make_model_gen_version(
            graph, opset_imports=[helper.make_opsetid("", OPSET)]
        )


HEADLINES = (
    Headline("LSE f64 [800, 800]", "ReduceLogSumExp", np.array([800.0, 800.0]),
             "exp(800) overflows (the spec's function body gives inf)"),
    Headline("L2 f32 [3e30, 4e30]", "ReduceL2", np.array([3e30, 4e30], np.float32),
             "the squares overflow float32"),
    Headline("L2 f16 [300, 400]", "ReduceL2", np.array([300.0, 400.0], np.float16),
             "300² = 90000 overflows float16 (max 65504)"),
    Headline("LSE f32 [inf, inf]", "ReduceLogSumExp",
             np.array([np.inf, np.inf], np.float32), "the max shift computes inf - inf = NaN"),
    Headline("L2 i32 [1073697800, 46340]", "ReduceL2",
             np.array([1073697800, 46340], np.int32),
             "Σx² = 1073697801²-1: int32 wraps, floats round up"),
)


def verdict(case: Headline, value: np.ndarray) -> bool:
    """True when ``value`` has the data's dtype and is the exact result (floats: within the
    contract, 1 ulp, 2 ulp for float64; NaN and infinities exactly; integers exactly)."""
    value = np.asarray(value)
    exact = case.exact()
    if value.dtype != exact.dtype or value.shape != exact.shape:
        return False
    if exact.dtype.kind in "iu":
        return bool(np.array_equal(value, exact))
    got, want = value.astype(np.float64), exact.astype(np.float64)
    if np.isnan(want) or np.isinf(want) or np.isnan(got) or np.isinf(got):
        return bool(np.array_equal(got, want, equal_nan=True))
    ulps = 2 if onnx_type_name(exact.dtype) == "double" else 1
    return bool(abs(got - want) <= ulps * np.spacing(np.abs(exact)).astype(np.float64))
