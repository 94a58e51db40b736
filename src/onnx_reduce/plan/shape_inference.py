"""Shape inference for the registry's operators, with unknown and symbolic dimensions."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..spec.table import OpVersion, resolve
from ..spec.validate import as_axes, check_shape, validate_attributes
from .reduction import output_shape, reduced_axes


class _Unknown:
    def __repr__(self) -> str:
        return "UNKNOWN_AXES"


#: Pass as ``axes`` when the model has an axes input whose value is not known statically.
UNKNOWN_AXES: Any = _Unknown()

Dim = int | str | None
"""A dimension: an int, a symbol such as ``"batch"``, or None (unknown)."""


def infer_shape(
    op: str,
    version: int,
    input_shape: Sequence[Dim] | None,
    attributes: Mapping[str, Any] | None = None,
    axes: Sequence[int] | np.ndarray | Any | None = None,
) -> tuple[Dim, ...] | None:
    """The output shape of ``op`` at opset ``version`` for an input of ``input_shape``.

    ``input_shape`` is a sequence of dims (ints >= 0, symbols, None; ``TypeError`` for anything
    else, a string included) or None when the rank is unknown; the result is None when the output
    rank cannot be known. ``axes`` is the axes *input* (versions that take one): None when absent,
    :data:`UNKNOWN_AXES` when present but not a constant. Attribute axes go in ``attributes``.

    >>> infer_shape("ReduceSum", 13, ("batch", 3, None), {"keepdims": 0}, axes=[1])
    ('batch', None)
    >>> infer_shape("ReduceL2", 11, ("N", 5), {"axes": [-1]})
    ('N', 1)
    >>> infer_shape("ReduceLogSumExp", 18, ("N", 5), {"keepdims": 1}, axes=UNKNOWN_AXES)
    (None, None)
    """
    ver = resolve(op, version)
    shape = None if input_shape is None else check_shape(ver, input_shape, symbolic=True)
    unknown_axes = axes is UNKNOWN_AXES
    request = validate_attributes(
        ver, {} if attributes is None else attributes,
        _axes_input(ver, axes, None if shape is None else len(shape)),
    )
    if shape is None:
        return None
    if unknown_axes:
        return tuple(None for _ in shape) if request.keepdims else None
    axes_to_reduce = reduced_axes(request, len(shape))
    if axes_to_reduce is None:
        return shape
    return output_shape(shape, axes_to_reduce, request.keepdims)


def _axes_input(ver: OpVersion, axes: Any, rank: int | None) -> np.ndarray | None:
    """The axes input as the pipeline takes it (int64 array), or None (absent or unknown)."""
    if axes is UNKNOWN_AXES:
        if not ver.axes_is_input:
            raise ValueError(f"{ver.label}: takes axes as an attribute, not as an input")
        return None
    if axes is None:
        return None
    return np.array(as_axes(ver, axes, "the axes input", rank), dtype=np.int64)
