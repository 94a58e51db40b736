"""onnx-reduce: spec-exact ONNX ReduceSum, ReduceL2, ReduceLogSumExp, ReduceSumSquare and
ReduceLogSum at every opset version.

>>> import numpy as np, onnx_reduce
>>> onnx_reduce.reduce_log_sum_exp(np.array([800.0, 800.0]))
array([800.69314718])
"""

from __future__ import annotations

import importlib
from typing import Any

from .functions import (
    reduce_l2,
    reduce_log_sum,
    reduce_log_sum_exp,
    reduce_sum,
    reduce_sum_square,
)
from .plan import UNKNOWN_AXES, infer_shape
from .spec import OPS, VERSIONS

__version__ = "0.1.0"

__all__ = [
    "OPS",
    "UNKNOWN_AXES",
    "VERSIONS",
    "__version__",
    "backend",
    "expand",
    "expand_model",
    "infer_shape",
    "reduce_l2",
    "reduce_log_sum",
    "reduce_log_sum_exp",
    "reduce_sum",
    "reduce_sum_square",
    "reference_ops",
]


#: Front doors that need onnx load on first use, keeping `import onnx_reduce` light.
_LAZY = {
    "expand": ("lowering", "expand"),
    "expand_model": ("lowering", "expand_model"),
    "reference_ops": ("reference_plugin", "reference_ops"),
}


def __getattr__(name: str) -> Any:
    if name == "backend":
        return importlib.import_module(".backend", __name__)
    if name in _LAZY:
        module, attribute = _LAZY[name]
        return getattr(importlib.import_module(f".{module}", __name__), attribute)
    raise AttributeError(f"module 'onnx_reduce' has no attribute {name!r}")
