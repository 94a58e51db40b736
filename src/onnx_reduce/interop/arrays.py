"""Which library an input array belongs to, and the device rule and DLPack path for arrays of
any Array API library (torch and jax have their own modules)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

#: Types that are never another library's array: checked first, so lists and scalars do not pay
#: for the namespace detection.
_PLAIN = (np.ndarray, np.generic, list, tuple, int, float, complex, bool, str, bytes)

_KDL_CPU = 1  # DLPack's device type of memory the CPU reads directly

Reduction = Callable[..., Any]


def foreign_reduction(data: Any) -> Reduction | None:
    """The front door for ``data``'s library (called as ``(op, data, axes, keepdims, noop,
    opset)``), or None when numpy reads ``data`` itself (numpy arrays, lists, scalars).
    Detection by ``array_api_compat``, which imports no library that is not loaded already."""
    if isinstance(data, _PLAIN):
        return None
    if _is_xarray(data):
        from . import xarray_ops

        return xarray_ops.reduce
    import array_api_compat as compat

    if compat.is_dask_array(data):  # before the Array API test: dask arrays pass it too
        from . import dask_ops

        return dask_ops.reduce
    if compat.is_torch_array(data):
        from . import torch_ops

        return torch_ops.reduce
    if compat.is_jax_array(data):
        from . import jax_ops

        return jax_ops.reduce
    if compat.is_array_api_obj(data):
        return reduce_array_api
    return None


def _is_xarray(data: Any) -> bool:
    """An xarray ``DataArray``, recognised without importing xarray."""
    kind = type(data)
    return kind.__name__ == "DataArray" and kind.__module__.startswith("xarray.")


def reduce_array_api(op: str, data: Any, axes, keepdims, noop, opset) -> Any:
    """Any Array API array on the CPU: read through DLPack (no copy), reduced by the numpy path,
    returned as an array of the input's namespace on the input's device."""
    import array_api_compat as compat

    from ..functions import reduce_array

    result = reduce_array(op, read_cpu(op, opset, data), axes, keepdims, noop, opset)
    return compat.array_namespace(data).asarray(result, device=compat.device(data))


def read_cpu(op: str, opset: int | None, data: Any) -> np.ndarray:
    """``data`` as a numpy array over the same memory, through DLPack; ``TypeError`` naming the
    device for memory the CPU cannot read (never a silent transfer)."""
    try:
        device_type = data.__dlpack_device__()[0]
    except (AttributeError, ValueError, TypeError, BufferError):
        device_type = None
    if device_type != _KDL_CPU:
        raise device_error(op, opset, _device_name(data))
    return np.from_dlpack(data)


def device_error(
    op: str, opset: int | None, device: Any, way_out: str = "copy it to the CPU"
) -> TypeError:
    """The one message for data the kernels cannot read: names the device and the way out."""
    from ..functions import version_label

    return TypeError(
        f"{version_label(op, opset)}: data is on device {str(device)!r}, which onnx-reduce "
        f"cannot read; {way_out} first (no transfer is made silently)"
    )


def _device_name(data: Any) -> Any:
    import array_api_compat as compat

    try:
        return compat.device(data)
    except Exception:  # any library's failure to name its device still gets the message
        return "unknown"
