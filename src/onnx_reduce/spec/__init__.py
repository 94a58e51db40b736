"""Stage 1 of the pipeline: the table of operator versions and all validation."""

from .dtypes import accumulator, bfloat16, is_float, onnx_type_name
from .table import OPS, VERSIONS, OpVersion, latest, resolve
from .validate import Request, as_axes, check_axes, check_dtype, validate, validate_attributes

__all__ = [
    "OPS",
    "VERSIONS",
    "OpVersion",
    "Request",
    "accumulator",
    "as_axes",
    "bfloat16",
    "check_axes",
    "check_dtype",
    "is_float",
    "latest",
    "onnx_type_name",
    "resolve",
    "validate",
    "validate_attributes",
]
