"""The functions on xarray ``DataArray``s: a DataArray in (numpy or dask backed), a DataArray
out, with the same backing (lazy stays lazy). ``axes`` may name dimensions
(``axes=["time"]``) as well as number them. The reduced dimensions' coordinates are dropped
(kept with ``keepdims`` at length 1, as xarray's own reductions do not keep them either);
the name is kept, the attributes are not (xarray's default)."""

from __future__ import annotations

from typing import Any

import numpy as np


def reduce(op: str, data: Any, axes, keepdims, noop, opset) -> Any:
    """``op`` of the DataArray ``data`` (the functions' front door)."""
    import xarray as xr

    from ..functions import plan_for, reduce_array

    axes = _axis_numbers(data, axes)
    _, plan = plan_for(op, data.dtype, data.shape, axes, keepdims, noop, opset)
    values = reduce_array(op, data.data, axes, keepdims, noop, opset)
    if plan.noop:
        return data.copy(data=values)
    reduced = {data.dims[axis] for axis in plan.axes}
    dims = tuple(dim for dim in data.dims if plan.keepdims or dim not in reduced)
    coords = {name: coord for name, coord in data.coords.items()
              if not reduced.intersection(coord.dims)}
    return xr.DataArray(values, dims=dims, coords=coords, name=data.name)


def _axis_numbers(data: Any, axes) -> Any:
    """``axes`` with dimension names replaced by their numbers (other entries as given, for
    the numpy path to judge)."""
    if axes is None or isinstance(axes, (np.ndarray, str, bytes)):
        return [data.get_axis_num(axes)] if isinstance(axes, str) else axes
    try:
        entries = list(axes)
    except TypeError:
        return axes
    return [data.get_axis_num(a) if isinstance(a, str) else a for a in entries]
