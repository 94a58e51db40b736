"""Checks shared by the tests of the partial states: finish a merged state as the dask front
door does, and compare with the exact oracle."""

import numpy as np

import oracle
from onnx_reduce.kernels import states


def finished(op, state, data, axes, tree):
    """``state`` finished, the outputs :func:`states.suspects` flags recomputed from their
    input slices (as the dask front door does)."""
    values = np.ascontiguousarray(states.finish(op, state, data.dtype))
    flagged = np.flatnonzero(states.suspects(op, state, values, data.dtype, tree))
    if flagged.size:
        moved = np.moveaxis(data, axes, range(data.ndim - len(axes), data.ndim))
        rows = moved.reshape(values.size, -1)[flagged]
        picked = values.reshape(-1)[flagged].copy()
        states.refine(op, rows, picked)
        values.reshape(-1)[flagged] = picked
    return values


def within_contract(result, op, data, axes):
    """``result`` within the contract of the exact value: 1 ulp (float64 2), integers exact."""
    exact = oracle.exact(op, data, axes)
    if data.dtype.kind in "iu":
        assert result.tolist() == oracle.round_array(exact, data.dtype).tolist()
        return
    bound = 2.0 if data.dtype == np.float64 else 1.0
    assert oracle.max_ulp_error(result, exact, data.dtype) <= bound
