"""Triple-double arithmetic (kernels/fast/triple_double.py): the elementwise exp and log
against mpmath at 600 bits."""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
from numba import njit

td = pytest.importorskip("onnx_reduce.kernels.fast.triple_double")

PREC = 600


@njit
def _exps(d):
    t = np.zeros((3, d.size))
    t[0] = d
    td.exp_all(t, np.ones(d.size), np.empty(d.size), np.empty((3, d.size)), d.size)
    return t


@njit
def _logs(s):
    n = s.shape[1]
    out = s.copy()
    td.log_all(out, np.empty((3, n)), np.empty(n), np.empty(n), np.empty((3, n)), n)
    return out


@pytest.mark.parametrize(("low", "high"), [(0.0, 0.5), (0.5, 12.0), (12.0, 600.0),
                                           (-0.5, 0.0), (-700.0, -0.5)])
def test_exp_within_2_to_the_minus_150(low, high):
    rng = np.random.default_rng(1)
    d = -(low + rng.random(500) * (high - low))
    d[:3] = [-low, -1e-300 if low >= 0 else 1e-300, -math.log(2) / 64]
    parts = _exps(d)
    with mpmath.workprec(PREC):
        for x, a, b, c in zip(d, *parts, strict=True):
            want = mpmath.exp(mpmath.mpf(x))
            assert abs(mpmath.mpf(a) + b + c - want) <= want * mpmath.mpf(2) ** -150, x


def test_exp_of_tiny_results_within_a_few_subnormal_spacings():
    d = -np.linspace(700.0, 745.0, 400)
    parts = _exps(d)
    with mpmath.workprec(PREC):
        for x, a, b, c in zip(d, *parts, strict=True):
            error = abs(mpmath.mpf(a) + b + c - mpmath.exp(mpmath.mpf(x)))
            assert error <= 4 * mpmath.mpf(2) ** -1074, x


def test_log_within_2_to_the_minus_150():
    rng = np.random.default_rng(2)
    s = np.zeros((3, 400))
    s[0] = np.concatenate([1 + rng.random(150) * 2**-40, 1 + rng.random(100) * 50,
                           rng.random(100) * 2.0**40 + 1, 1 - rng.random(25) * 2**-40,
                           2.0 ** rng.uniform(-890, 890, 25)])
    s[1] = s[0] * 2.0**-60 * rng.random(400)
    s[2] = s[0] * 2.0**-115 * rng.random(400)
    s[:, 0] = [1.0, 0.0, 0.0]
    logs = _logs(s)
    with mpmath.workprec(PREC):
        for (s0, s1, s2), (a, b, c) in zip(s.T, logs.T, strict=True):
            want = mpmath.log(mpmath.mpf(s0) + s1 + s2)
            assert abs(mpmath.mpf(a) + b + c - want) <= (1 + abs(want)) * mpmath.mpf(2) ** -150


# ----------------------------------------------------------------------------- double-double


@njit
def _exps_dd(d, dl):
    t = np.zeros((3, d.size))
    t[0], t[1] = d, dl
    td.exp_all_dd(t, np.ones(d.size), d.size)
    return t


@pytest.mark.parametrize(("low", "high"), [(0.0, 0.02), (0.02, 1.0), (1.0, 40.0), (40.0, 660.0),
                                           (-0.3, 0.0)])
def test_exp_dd_within_2_to_the_minus_100(low, high):
    """exp(d + dl), dl carrying what the gap's rounding lost, within 2**-100 relative while the
    low part stays normal (results over 2**-950), and for d up to 0.3 (the log of sums from
    0.75 starts there)."""
    rng = np.random.default_rng(3)
    d = -(low + rng.random(600) * (high - low))
    d[:2] = [-low, -math.log(2) / 64]
    dl = d * 2.0**-53 * rng.uniform(-1, 1, d.size)
    parts = _exps_dd(d, dl)
    with mpmath.workprec(PREC):
        for x, xl, a, b in zip(d, dl, parts[0], parts[1], strict=True):
            want = mpmath.exp(mpmath.mpf(x) + mpmath.mpf(xl))
            assert abs(mpmath.mpf(a) + b - want) <= want * mpmath.mpf(2) ** -100, x


def test_exp_dd_of_tiny_results_within_2_to_the_minus_100_and_a_few_subnormal_spacings():
    d = -np.linspace(660.0, 745.0, 400)
    parts = _exps_dd(d, np.zeros(d.size))
    with mpmath.workprec(PREC):
        for x, a, b in zip(d, parts[0], parts[1], strict=True):
            want = mpmath.exp(mpmath.mpf(x))
            error = abs(mpmath.mpf(a) + b - want)
            assert error <= want * mpmath.mpf(2) ** -100 + 4 * mpmath.mpf(2) ** -1074, x


@njit
def _logs_dd(s):
    n = s.shape[1]
    out = s.copy()
    td.log_all_dd(out, np.empty((3, n)), np.empty(n), n)
    return out


def test_log_dd_within_2_to_the_minus_100():
    """log(s) for s from 0.75 within 2**-100 (1 + |log s|): what the double-double stages'
    bounds assume."""
    rng = np.random.default_rng(4)
    s = np.zeros((3, 400))
    s[0] = np.concatenate([1 + rng.random(150) * 2**-40, 1 + rng.random(50) * 50,
                           0.75 + rng.random(50) / 4, rng.random(125) * 2.0**40 + 1,
                           2.0 ** rng.uniform(1, 890, 25)])
    s[1] = s[0] * 2.0**-60 * rng.random(400)
    s[:, 0] = [1.0, 0.0, 0.0]
    logs = _logs_dd(s)
    with mpmath.workprec(PREC):
        for s0, s1, a, b in zip(s[0], s[1], logs[0], logs[1], strict=True):
            want = mpmath.log(mpmath.mpf(s0) + s1)
            assert abs(mpmath.mpf(a) + b - want) <= (1 + abs(want)) * mpmath.mpf(2) ** -100
