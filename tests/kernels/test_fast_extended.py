"""The compiled first stage of the exact recomputations (kernels/fast/extended.py): rows of
ReduceLogSumExp and ReduceLogSum in triple-double, against mpmath at 600 bits."""

from __future__ import annotations

import math
from fractions import Fraction

import mpmath
import numpy as np
import pytest

extended = pytest.importorskip("onnx_reduce.kernels.fast.extended")

PREC = 600


def _exact_lse(row: np.ndarray) -> mpmath.mpf:
    finite = [mpmath.mpf(float(v)) for v in row if v > -np.inf]
    return mpmath.log(mpmath.fsum(mpmath.exp(v) for v in finite))


def _log_softmax(rows: int, length: int, seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal((rows, length)) * 3
    with mpmath.workprec(200):
        return np.array([[float(mpmath.mpf(float(a)) - _exact_lse(row)) for a in row]
                         for row in v])


def _families() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(3)
    gaps = rng.standard_normal((40, 9))
    gaps[:, 4:] -= 800.0  # beyond exp's range: zero terms
    gaps[::2, 1] = -np.inf
    pairs = -math.log(2) + rng.random((60, 1)) * 1e-3 + np.array([0.0, -(2.0**-40)])
    return {
        "log-softmax": _log_softmax(30, 17, 4),
        "pairs near -ln 2": pairs,
        "large maxima": rng.standard_normal((30, 5)) * 40 + 700,
        "negative maxima": rng.standard_normal((30, 5)) - 1e5,
        "dead gaps and -inf": gaps,
        "ties": np.full((5, 8), -2.0794415416798357),  # -ln 8: the LSE is ~0
    }


@pytest.mark.parametrize("stage", ["td_lse_rows", "dd_lse_rows"])
@pytest.mark.parametrize("family", list(_families()))
def test_rows_within_their_bound(family, stage):
    """Every row within its bound (triple- and double-double); where the result is near 0 (the
    bound's last term, on the result's magnitude, is negligible) within a 64th of it: the bound
    is not vacuous."""
    rows = _families()[family]
    head, tail, bound = getattr(extended, stage)(np.ascontiguousarray(rows))
    with mpmath.workprec(PREC):
        for row, h, t, b in zip(rows, head, tail, bound, strict=True):
            error = abs(mpmath.mpf(h) + t - _exact_lse(row))
            assert error <= b, family
            if abs(h) < 1e-10:
                assert error <= b / 64, family


@pytest.mark.parametrize("stage", ["td_lse_rows", "dd_lse_rows"])
@pytest.mark.parametrize(("count", "length"), [(1, 40_000), (2_500, 7), (3, 16_384)])
def test_blocks_of_rows_and_rows_longer_than_a_block(count, length, stage):
    """Rows cut into blocks of BLOCK elements (the last one short) or one row longer than a
    block: each row's result is the one it gets alone, within 2**-95 relative."""
    rows = np.random.default_rng(5).standard_normal((count, length)) - 3.0
    rows_of = getattr(extended, stage)
    head, tail, _ = rows_of(rows)
    for i in (0, count // 2, count - 1):
        alone = rows_of(rows[i:i + 1])
        assert (head[i], tail[i]) == (alone[0][0], alone[1][0])
    with mpmath.workprec(PREC):
        want = _exact_lse(rows[-1])
        assert abs(mpmath.mpf(head[-1]) + tail[-1] - want) <= abs(want) * mpmath.mpf(2) ** -95


def test_double_double_bounds_decide_float64_results_away_from_0():
    """The double-double stage's bound (what lets it decide float64 results): under 2**-88 for
    rows of up to 2**16 elements with maxima and logs under 30 in magnitude."""
    rng = np.random.default_rng(8)
    for length in (2, 100, 1 << 16):
        rows = rng.standard_normal((2, length)) * 5
        assert np.all(extended.dd_lse_rows(rows)[2] < 2.0**-88), length


def test_threads_take_runs_of_whole_blocks_with_one_threads_results(monkeypatch):
    """Blocks shared out across threads (5 blocks and 3 rows: runs of unequal length) give what
    one thread gives, row for row."""
    calls = []
    threaded = extended._threaded_blocks
    monkeypatch.setattr(extended, "_threaded_blocks",
                        lambda *args: calls.append(1) or threaded(*args))
    per = extended.BLOCK // 7
    rows = np.random.default_rng(6).standard_normal((5 * per + 3, 7)) * 2
    alone = np.empty((3, rows.shape[0]))
    extended._blocks(rows, per, extended.LSE, 0, rows.shape[0], alone)
    got = np.array(extended.td_lse_rows(rows))
    if extended.num_threads() < 2:
        pytest.skip("one thread: nothing is shared out")
    assert calls == [1]
    assert np.array_equal(got, alone)


def _exact_log_sum(row: np.ndarray) -> mpmath.mpf:
    return mpmath.log(sum((Fraction(float(v)) for v in row), Fraction(0)))


@pytest.mark.parametrize(("stage", "low"), [("td_log_sum_rows", Fraction(2) ** -900),
                                            ("dd_log_sum_rows", Fraction(3, 4))])
def test_log_sum_rows_within_their_bound_or_left_undecided(stage, low):
    """Sums near 1, cancelling sums, wide magnitudes (triple- and double-double): within the
    bound (a 64th of it where the log is near 0); sums at or under 0, beyond 2**900 or under
    the stage's least (2**-900, 0.75): bound inf."""
    rng = np.random.default_rng(8)
    near = rng.random((40, 9))
    near /= near.sum(axis=1, keepdims=True)
    cancel = rng.standard_normal((20, 9))
    cancel[:, -1] = -cancel[:, :-1].sum(axis=1) + rng.random(20) * 2.0**-20
    wide = np.array([[1e300, 1.0, -1e300, 0.5, 0.0], [2.0**-1010, 2.0**-1020, 0.0, 0.0, 0.0],
                     [2.0**-899, 2.0**-950, 0.0, 0.0, 0.0],
                     [2.0**899, 2.0**850, 0.0, 0.0, 0.0],
                     [1.0, -1.0, 0.0, 0.0, 0.0], [-1.0, 0.25, 0.0, 0.0, 0.0],
                     [1e308, 1e308, 0.0, 0.0, 0.0],
                     [1e40, 1.0, 2.0**-60, 2.0**-120, -1e40],  # four parts: the sum rounds
                     [3e40, 1.0, 2.0**-61, -(2.0**-115), -3e40]])
    for block in (near, cancel, wide):
        head, tail, bound = getattr(extended, stage)(np.ascontiguousarray(block))
        for row, h, t, b in zip(block, head, tail, bound, strict=True):
            total = sum((Fraction(float(v)) for v in row), Fraction(0))
            if total <= 0 or not low < total < Fraction(2) ** 900:
                assert b == np.inf
                continue
            with mpmath.workprec(PREC):
                error = abs(mpmath.mpf(h) + t - _exact_log_sum(row))
                assert error <= b
                if abs(h) < 1e-10:
                    assert error <= b / 64


def test_sums_to_one_is_exact():
    assert extended._sums_to_one(np.array([0.5, 0.25, 0.25]))
    assert extended._sums_to_one(np.array([1e300, 1.0, -1e300]))
    assert extended._sums_to_one(np.array([2.0**-1074, 1.0, -(2.0**-1074)]))
    assert not extended._sums_to_one(np.array([0.1, 0.9]))  # 0.1 + 0.9 rounds to 1 in float64
    assert not extended._sums_to_one(np.array([1.0, 2.0**-1074]))
    assert not extended._sums_to_one(np.array([1e308, 1e308, -1e308, -1e308, 1.0]))  # overflow


def test_long_rows_take_chunks_on_every_thread_with_one_threads_sums():
    """A row longer than a block: chunk sums shared out across threads equal one thread's, and
    the row's LSE and log of sum are within their bounds (scratch stays at a block)."""
    rng = np.random.default_rng(9)
    row = rng.standard_normal(5 * extended.BLOCK + 123) - 12.0
    chunks = 6
    for kind, peak in ((extended.LSE, float(row.max())), (extended.LOG_SUM, 0.0)):
        alone, shared = np.empty((3, chunks)), np.empty((3, chunks))
        extended._chunk_sums(row, peak, kind, 0, chunks, alone)
        with extended.parallel_section():
            extended._threaded_chunk_sums(row, peak, kind, shared)
        assert np.array_equal(alone, shared)
    rows = np.abs(row)[None, :]
    with mpmath.workprec(PREC):
        head, tail, bound = extended.td_lse_rows(row[None, :])
        assert abs(mpmath.mpf(head[0]) + tail[0] - _exact_lse(row)) <= bound[0]
        head, tail, bound = extended.td_log_sum_rows(rows)
        assert abs(mpmath.mpf(head[0]) + tail[0] - _exact_log_sum(rows[0])) <= bound[0]


@pytest.mark.parametrize(("stage", "most"), [("td_log_sum_rows", 2.0**-100),
                                             ("dd_log_sum_rows", 2.0**-80)])
def test_a_long_row_summing_to_exactly_one_gives_0_exactly(stage, most):
    rows_of = getattr(extended, stage)
    row = np.full(4 * extended.BLOCK, 1.0 / (4 * extended.BLOCK))
    head, tail, bound = rows_of(row[None, :])
    assert (head[0], tail[0], bound[0]) == (0.0, 0.0, 0.0)
    row[0] += 2.0**-60
    head, tail, bound = rows_of(row[None, :])
    assert 0 < bound[0] < most
    assert head[0] == 2.0**-60
