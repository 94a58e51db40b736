"""Stage 1 of the pipeline: the table of operator versions and all validation."""

from .dtypes import accumulator, bfloat16, is_float, native_dtype, onnx_type_name
from .ops import REGISTRY, OpRecord, op_record
from .table import OPS, VERSIONS, OpVersion, latest, newest_opset, resolve
from .validate import (
    Request,
    as_array,
    as_axes,
    as_dtype,
    check_array,
    check_axes,
    check_dtype,
    check_shape,
    refuse_masked,
    validate,
    validate_attributes,
)

__all__ = [
    "OPS",
    "REGISTRY",
    "VERSIONS",
    "OpRecord",
    "OpVersion",
    "Request",
    "accumulator",
    "as_array",
    "as_axes",
    "as_dtype",
    "bfloat16",
    "check_array",
    "check_axes",
    "check_dtype",
    "check_shape",
    "is_float",
    "latest",
    "native_dtype",
    "newest_opset",
    "onnx_type_name",
    "op_record",
    "refuse_masked",
    "resolve",
    "validate",
    "validate_attributes",
]
