"""kernels.rounding.round_to: one correct rounding to every float output dtype."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import oracle
from onnx_reduce.kernels.rounding import round_to

DTYPES = [np.dtype(np.float16), oracle.bfloat16, np.dtype(np.float32), np.dtype(np.float64)]


def _same(got: np.ndarray, want: list[float]) -> None:
    g = got.astype(np.float64)
    w = np.array(want, np.float64)
    assert np.array_equal(g, w, equal_nan=True), (g.tolist(), want)
    assert (np.signbit(g) == np.signbit(w)).all() or np.isnan(w).any()


@pytest.mark.parametrize("dtype", DTYPES)
@settings(deadline=None, max_examples=150)
@given(st.lists(st.floats(allow_nan=False, width=64), min_size=1, max_size=20))
def test_round_to_matches_exact_rounding(dtype, values) -> None:
    got = round_to(np.array(values), dtype)
    assert got.dtype == dtype
    _same(got, [oracle.round_exact(v, dtype) if v != 0 else v for v in values])


def _bf16_ties() -> list[float]:
    """float64 values just off bfloat16 ties whose float32 rounding lands exactly on the tie."""
    out = []
    for e in (0, -20, 100, -126, -130, -133, 127):
        base = 2.0**e
        for k in (1, 2, 3, 127):
            tie = base * (1 + (2 * k + 1) * 2.0**-8) if e > -126 else (2 * k + 1) * 2.0**-134
            for nudge in (2.0**-30, -(2.0**-30)):
                out += [tie * (1 + nudge), -tie * (1 + nudge)]
            out.append(tie)
    return out


@pytest.mark.parametrize("value", _bf16_ties())
def test_bfloat16_is_rounded_once(value) -> None:
    want = oracle.round_exact(Fraction(value), oracle.bfloat16)
    _same(round_to(np.array([value]), oracle.bfloat16), [want])


def test_bfloat16_double_rounding_example() -> None:
    x = np.array([1 + 2.0**-8 + 2.0**-30])
    assert float(x.astype(np.float32).astype(oracle.bfloat16)[0]) == 1.0  # twice: wrong
    assert float(round_to(x, oracle.bfloat16)[0]) == 1.0078125


@pytest.mark.parametrize("dtype", DTYPES)
def test_round_to_specials_and_range_ends(dtype) -> None:
    info_max = float(np.finfo(np.float32).max) if dtype != np.float64 else 1.7976931348623157e308
    values = [np.inf, -np.inf, np.nan, 0.0, -0.0, info_max, -info_max]
    got = round_to(np.array(values), dtype)
    want = [np.inf, -np.inf, np.nan, 0.0, -0.0] + [oracle.round_exact(v, dtype)
                                                   for v in values[5:]]
    _same(got, want)


def test_bfloat16_overflow_threshold() -> None:
    threshold = (2 - 2.0**-8) * 2.0**127  # halfway between bfloat16 max and 2**128
    got = round_to(np.array([threshold, np.nextafter(threshold, 0), 1e39, -1e39]),
                   oracle.bfloat16).astype(np.float64)
    assert got.tolist() == [np.inf, (2 - 2.0**-7) * 2.0**127, np.inf, -np.inf]


def test_round_to_accepts_extended_precision() -> None:
    x = np.array([1 + 2.0**-30], dtype=np.longdouble)
    assert round_to(x, np.float64)[0] == 1 + 2.0**-30
    assert round_to(x, oracle.bfloat16)[0] == 1.0


@pytest.mark.parametrize("dtype", DTYPES)
def test_round_to_gives_an_array_for_a_scalar(dtype) -> None:
    """A ufunc over every axis gives a numpy scalar; the rounded value must be an array the
    exact recomputations can write into."""
    got = round_to(np.log(np.array([1.5]).sum()), dtype)
    assert isinstance(got, np.ndarray)
    assert got.shape == ()
    assert got.dtype == dtype
    got.reshape(-1)[0] = 2.0
    assert float(got) == 2.0
