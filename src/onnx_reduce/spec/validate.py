"""All validation of a call against its operator version.

Every error names the operator version and the offending value, and is a ``TypeError`` (wrong type
or dtype) or a ``ValueError`` (wrong value). Nothing here computes.

>>> from onnx_reduce.spec.table import resolve
>>> validate(resolve("ReduceSum", 13), np.dtype("float32"), {}, np.array([1], dtype=np.int32))
Traceback (most recent call last):
...
TypeError: ReduceSum-13: the axes input must be a tensor(int64), got int32
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .dtypes import onnx_type_name
from .table import OpVersion
from .values import as_integer, shown


@dataclass(frozen=True)
class Request:
    """A validated call: what to reduce, before the input's rank is known."""

    version: OpVersion
    axes: tuple[int, ...] | None
    """The axes as given (possibly negative); None when not given at all."""
    keepdims: bool
    noop_with_empty_axes: bool
    dtype: np.dtype | None = None
    """The data's dtype when known (None from shape inference, which has no data)."""


def validate(
    ver: OpVersion,
    dtype: np.dtype,
    attributes: Mapping[str, Any],
    axes_input: np.ndarray | None = None,
) -> Request:
    """Check dtype, attributes and the axes input of one call; return the validated request."""
    check_dtype(ver, dtype)
    request = validate_attributes(ver, attributes, axes_input)
    return dataclasses.replace(request, dtype=np.dtype(dtype))


def validate_attributes(
    ver: OpVersion, attributes: Mapping[str, Any], axes_input: np.ndarray | None = None
) -> Request:
    """Check the attributes and the axes input of one call (the dtype is not looked at)."""
    if not isinstance(attributes, Mapping):
        raise TypeError(
            f"{ver.label}: attributes must be a mapping of names to values, got {shown(attributes)}"
        )
    unknown = sorted(set(attributes) - set(ver.attributes))
    if unknown:
        hint = ""
        if "axes" in unknown and ver.axes_is_input:
            hint = f" (since version {ver.version} axes is an input, not an attribute)"
        raise ValueError(
            f"{ver.label}: attribute {shown(unknown[0])} is not defined at this version{hint}; "
            f"its attributes are {sorted(ver.attributes)}"
        )
    keepdims = _flag(ver, "keepdims", attributes.get("keepdims", 1))
    noop = _flag(ver, "noop_with_empty_axes", attributes.get("noop_with_empty_axes", 0))
    if ver.axes_is_input:
        axes = _axes_from_input(ver, axes_input)
    else:
        if axes_input is not None:
            raise ValueError(
                f"{ver.label}: takes axes as an attribute, not as an input "
                f"(got an axes input {shown(np.asarray(axes_input).tolist())})"
            )
        raw = attributes.get("axes")
        axes = None if raw is None else as_axes(ver, raw, "the axes attribute")
    return Request(ver, axes, keepdims, noop)


def check_dtype(ver: OpVersion, dtype: np.dtype) -> None:
    """Raise ``TypeError`` unless ``dtype`` is one of the version's allowed element types."""
    name = onnx_type_name(dtype)
    if name not in ver.dtypes:
        raise TypeError(
            f"{ver.label}: data type {name!r} is not allowed at this version; "
            f"allowed: {', '.join(sorted(ver.dtypes))}"
        )


def as_dtype(ver: OpVersion, dtype: Any) -> np.dtype:
    """``dtype`` as a numpy dtype; ``TypeError`` naming the version when numpy cannot read it."""
    try:
        return np.dtype(dtype)
    except (TypeError, ValueError):
        raise TypeError(f"{ver.label}: cannot read {shown(dtype)} as a data type") from None


def check_array(ver: OpVersion, data: Any) -> np.ndarray:
    """``data`` as a plain ``ndarray`` (:func:`read_array`); ``TypeError`` for anything that
    is not an array."""
    if not isinstance(data, np.ndarray):
        raise TypeError(f"{ver.label}: data must be a numpy array, got {type(data).__name__}")
    return read_array(ver.label, data)


def as_array(ver: OpVersion, data: Any) -> np.ndarray:
    """:func:`read_array` with messages naming the version."""
    return read_array(ver.label, data)


def read_array(who: str, data: Any) -> np.ndarray:
    """``data`` as a plain ``ndarray``: subclasses viewed as their base array, anything else
    converted by ``np.asarray`` (lists, scalars). Messages start with ``who``.

    ``TypeError`` for masked arrays (the kernels read the data, so a mask would be silently
    ignored); ``ValueError`` when numpy cannot make an array of ``data``."""
    if type(data) is np.ndarray:
        return data
    refuse_masked(who, data)
    if isinstance(data, np.ndarray):
        return data.view(np.ndarray)
    try:
        return np.asarray(data)
    except (TypeError, ValueError) as error:
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise ValueError(f"{who}: data cannot be read as an array: {reason}") from None


def refuse_masked(who: str, data: Any) -> None:
    """``TypeError`` for a masked array (a dask array's chunks: pass its ``_meta``): the kernels
    read the data, so the mask would be silently ignored."""
    if isinstance(data, np.ma.MaskedArray):
        raise TypeError(
            f"{who}: masked arrays are not supported (the mask would be ignored); "
            "pass data.filled(value) to reduce with masked elements replaced, or data.data"
        )


def check_shape(ver: OpVersion, shape: Any, symbolic: bool = False) -> tuple:
    """``shape`` as a tuple of dims: ints in [0, 2**63 - 1] (ONNX dims are int64) and, when
    ``symbolic``, also symbols (str) and None (unknown). ``TypeError`` for anything that is not
    a sequence of those (a string is not a shape), ``ValueError`` for a dim out of range."""
    if isinstance(shape, (str, bytes)) or not isinstance(shape, (Sequence, np.ndarray)):
        raise TypeError(f"{ver.label}: a shape must be a sequence of dims, got {shown(shape)}")
    return tuple(_dim(ver, dim, shape, symbolic) for dim in shape)


def _dim(ver: OpVersion, dim: Any, shape: Any, symbolic: bool) -> int | str | None:
    if symbolic and (dim is None or isinstance(dim, str)):
        return dim
    number = as_integer(dim)
    if number is None:
        kinds = "ints, symbols (str) or None" if symbolic else "ints"
        raise TypeError(
            f"{ver.label}: the dims of a shape must be {kinds}, got {shown(dim)} in {shown(shape)}"
        )
    if not 0 <= number <= _INT64_MAX:
        raise ValueError(
            f"{ver.label}: dim {shown(number)} of shape {shown(shape)} is out of range "
            f"[0, {_INT64_MAX}]"
        )
    return number


def check_axes(ver: OpVersion, axes: Sequence[int], rank: int) -> tuple[int, ...]:
    """Range- and duplicate-check ``axes`` for an input of ``rank``; return them non-negative."""
    normalized = []
    for axis in axes:
        if not -rank <= axis < rank:
            raise _axis_out_of_range(ver, axis, rank)
        normalized.append(axis % rank)
    if len(set(normalized)) != len(normalized):
        raise ValueError(f"{ver.label}: axes {shown(list(axes))} name the same axis more than once")
    return tuple(normalized)


def _axis_out_of_range(ver: OpVersion, axis: int, rank: int | None) -> ValueError:
    if rank is None:  # the rank is unknown (shape inference): the axis cannot be an int64
        return ValueError(
            f"{ver.label}: axis {shown(axis)} is out of range for an input of any rank "
            f"(an axis is an int64: [{_INT64_MIN}, {_INT64_MAX}])"
        )
    accepted = f"[{-rank}, {rank - 1}]" if rank else "none: a rank-0 input has no axes"
    return ValueError(
        f"{ver.label}: axis {shown(axis)} is out of range for an input of rank {rank} "
        f"(accepted: {accepted})"
    )


_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def check_nonempty(ver: OpVersion, dtype: np.dtype | None, shape: Sequence[int], size: int) -> None:
    """Raise ``ValueError`` for an integer reduction whose empty set gives -inf (ReduceLogSumExp):
    -inf has no integer.

    >>> from onnx_reduce.spec.table import resolve
    >>> check_nonempty(resolve("ReduceLogSumExp", 18), np.dtype(np.int32), (0, 3), 0)
    ... # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: ReduceLogSumExp-18: the reduction over an empty set is -inf, which int32 cannot ...
    """
    if size == 0 and ver.record.empty < 0 and dtype is not None and dtype.kind in "iu":
        raise ValueError(
            f"{ver.label}: the reduction over an empty set is -inf, which {dtype} cannot "
            f"represent (input shape {list(shape)})"
        )


def as_axes(
    ver: OpVersion, axes: Any, what: str = "axes", rank: int | None = None
) -> tuple[int, ...]:
    """Turn a sequence of integers into a tuple of Python ints that fit an int64 (as ONNX axes
    do); reject anything else. ``rank`` (when known) words the error for an axis beyond int64
    like any other out-of-range axis."""
    axes = _axes_as_ints(ver, axes, what)
    for axis in axes:
        if not _INT64_MIN <= axis <= _INT64_MAX:
            raise _axis_out_of_range(ver, axis, rank)
    return axes


def _axes_as_ints(ver: OpVersion, axes: Any, what: str) -> tuple[int, ...]:
    if isinstance(axes, np.ndarray):
        if axes.ndim != 1 and not (axes.ndim == 0 and axes.size == 1):
            raise ValueError(f"{ver.label}: {what} must be 1-D, got shape {axes.shape}")
        if axes.dtype.kind not in "iu":
            raise TypeError(f"{ver.label}: {what} must be integers, got dtype {axes.dtype}")
        return tuple(int(a) for a in axes.reshape(-1))
    if isinstance(axes, (str, bytes)) or not isinstance(axes, Sequence):
        raise TypeError(f"{ver.label}: {what} must be a sequence of integers, got {shown(axes)}")
    out = []
    for a in axes:
        axis = as_integer(a)
        if axis is None:
            raise TypeError(
                f"{ver.label}: {what} must be integers, got {shown(a)} in {shown(list(axes))}"
            )
        out.append(axis)
    return tuple(out)


def _axes_from_input(ver: OpVersion, axes_input: np.ndarray | None) -> tuple[int, ...] | None:
    if axes_input is None:
        return None
    if not isinstance(axes_input, np.ndarray):
        raise TypeError(
            f"{ver.label}: the axes input must be a numpy array, got {type(axes_input).__name__}"
        )
    if onnx_type_name(axes_input.dtype) != "int64":  # in either byte order
        raise TypeError(
            f"{ver.label}: the axes input must be a tensor(int64), "
            f"got {onnx_type_name(axes_input.dtype)}"
        )
    if axes_input.ndim != 1:
        raise ValueError(
            f"{ver.label}: the axes input must be 1-D, got shape {list(axes_input.shape)}"
        )
    return tuple(int(a) for a in axes_input)


def _flag(ver: OpVersion, name: str, value: Any) -> bool:
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)) and value in (0, 1):
        return bool(value)
    raise ValueError(f"{ver.label}: attribute {name!r} must be 0 or 1, got {shown(value)}")
