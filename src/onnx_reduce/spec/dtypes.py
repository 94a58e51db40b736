"""ONNX tensor type names for numpy dtypes, and the accumulator each dtype reduces in."""

from __future__ import annotations

import ml_dtypes
import numpy as np

bfloat16 = np.dtype(ml_dtypes.bfloat16)

#: numpy dtype -> ONNX type name, for every dtype a message may need to name.
_ONNX_NAMES: dict[np.dtype, str] = {
    np.dtype(np.float32): "float",
    np.dtype(np.float64): "double",
    np.dtype(np.float16): "float16",
    bfloat16: "bfloat16",
    np.dtype(np.int8): "int8",
    np.dtype(np.int16): "int16",
    np.dtype(np.int32): "int32",
    np.dtype(np.int64): "int64",
    np.dtype(np.uint8): "uint8",
    np.dtype(np.uint16): "uint16",
    np.dtype(np.uint32): "uint32",
    np.dtype(np.uint64): "uint64",
    np.dtype(np.bool_): "bool",
    np.dtype(np.complex64): "complex64",
    np.dtype(np.complex128): "complex128",
}

FLOAT_TYPES = frozenset({"float", "double", "float16", "bfloat16"})
INTEGER_TYPES = frozenset({"int32", "int64", "uint32", "uint64"})

#: Extended precision for float64 accumulation where the platform has it (x86: 80-bit).
EXTENDED = np.dtype(np.longdouble) if np.finfo(np.longdouble).nmant > 52 else np.dtype(np.float64)


def onnx_type_name(dtype: np.dtype) -> str:
    """The ONNX name of a numpy dtype (``float32`` -> ``"float"``), or numpy's own name; byte
    order does not matter (a big-endian float32 is a float).

    >>> onnx_type_name(np.dtype(np.float32)), onnx_type_name(np.dtype(">f4"))
    ('float', 'float')
    """
    name = _ONNX_NAMES.get(dtype)  # the common case: already a native dtype, no conversion
    if name is None:
        dtype = native_dtype(np.dtype(dtype))
        name = _ONNX_NAMES.get(dtype, dtype.name)
    return name


def dtype_named(name: str) -> np.dtype:
    """The numpy dtype an ONNX type name or a numpy dtype name means; ValueError otherwise.

    >>> dtype_named("float"), dtype_named("float32"), dtype_named("bfloat16") == bfloat16
    (dtype('float32'), dtype('float32'), True)
    """
    for dtype, onnx_name in _ONNX_NAMES.items():
        if name == onnx_name:
            return dtype
    try:
        dtype = np.dtype(name)
    except TypeError:
        dtype = None
    if dtype not in _ONNX_NAMES:
        known = ", ".join(sorted(_ONNX_NAMES.values()))
        raise ValueError(f"unknown dtype {name!r}; choose from {known}")
    return dtype


def native_dtype(dtype: np.dtype) -> np.dtype:
    """``dtype`` in the machine's byte order (itself when it already is).

    >>> native_dtype(np.dtype(">i4")) == np.dtype(np.int32)
    True
    """
    return dtype if dtype.isnative else dtype.newbyteorder("=")


def is_float(dtype: np.dtype) -> bool:
    return onnx_type_name(dtype) in FLOAT_TYPES


def accumulator(dtype: np.dtype) -> np.dtype:
    """The dtype a float reduction accumulates in: float64 for narrow floats, extended for float64.

    >>> accumulator(np.dtype(np.float16))
    dtype('float64')
    """
    return EXTENDED if np.dtype(dtype) == np.float64 else np.dtype(np.float64)
