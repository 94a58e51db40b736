"""The one pipeline every front door calls: spec (validate) -> plan -> kernel."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from .kernels.dispatch import run_kernel
from .plan import make_plan
from .spec import OpVersion, validate


def execute(
    ver: OpVersion,
    data: np.ndarray,
    attributes: Mapping[str, Any],
    axes_input: np.ndarray | None = None,
) -> np.ndarray:
    """Run one node of operator version ``ver`` on ``data``.

    ``attributes`` are the node's attributes as given (defaults are the version's);
    ``axes_input`` is the optional second input of the versions that take axes as an input.

    >>> from onnx_reduce.spec import resolve
    >>> execute(resolve("ReduceSum", 11), np.arange(6.0).reshape(2, 3), {"axes": [1]})
    array([[ 3.],
           [12.]])
    """
    if not isinstance(data, np.ndarray):
        raise TypeError(f"{ver.label}: data must be a numpy array, got {type(data).__name__}")
    request = validate(ver, data.dtype, attributes, axes_input)
    plan = make_plan(request, data.shape)
    return np.asarray(run_kernel(ver.op, data, plan))
