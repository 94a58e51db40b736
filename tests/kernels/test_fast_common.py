"""Shared pieces of the compiled kernels: the single rounding to float16."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("numba")
from numba import njit

from onnx_reduce.kernels.fast import _common


@njit
def _round_all(values, fast, by_hand):
    for i in range(values.size):
        fast[i] = _common._f64_to_f16_bits(values[i])
        by_hand[i] = _common._f64_to_f16_bits_by_hand(values[i])


def _hard_cases() -> np.ndarray:
    """Every float16 value, every midpoint between neighbours, and a hair either side of each
    midpoint (where a double rounding would go wrong), plus values past the range and NaN."""
    every = np.arange(1 << 16, dtype=np.uint16).view(np.float16)
    finite = np.sort(every[np.isfinite(every)].astype(np.float64))
    mids = (finite[:-1] + finite[1:]) / 2
    hair = np.abs(mids) * 2.0**-40 + 2.0**-80
    extra = [65519.99, 65520.0, 65520.0001, 1e300, -1e300, 2.0**-25, 2.0**-26, 1e-300,
             np.inf, -np.inf, np.nan]
    return np.concatenate([finite, mids, mids - hair, mids + hair, extra])


def test_float16_rounding_is_correct_and_matches_the_bitwise_version() -> None:
    values = _hard_cases()
    fast = np.empty(values.size, np.uint16)
    by_hand = np.empty(values.size, np.uint16)
    _round_all(values, fast, by_hand)
    with np.errstate(over="ignore"):  # numpy rounds float64 -> float16 once, to nearest even
        want = values.astype(np.float16)
    nan = np.isnan(values)
    np.testing.assert_array_equal(fast[~nan], want[~nan].view(np.uint16))
    np.testing.assert_array_equal(by_hand[~nan], want[~nan].view(np.uint16))
    assert np.isnan(fast.view(np.float16)[nan]).all()
