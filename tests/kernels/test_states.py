"""Partial states: pieces reduced separately, merged in any grouping and finished once give the
exact result within the contract (expected values from tests/oracle.py)."""

import math

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import oracle
from onnx_reduce.kernels import blocks, states
from onnx_reduce.kernels.exact_lse import reference_bound, threshold

OPS = ("ReduceSum", "ReduceL2", "ReduceLogSumExp")
FLOATS = [np.float16, ml_dtypes.bfloat16, np.float32, np.float64]


def _pieces(op, data, axis, cuts):
    """The states of ``data`` cut along ``axis`` at ``cuts`` (empty pieces included),
    concatenated along ``axis``."""
    pieces = np.split(data, cuts, axis=axis)
    return np.concatenate([states.partial(op, piece, (axis,)) for piece in pieces], axis=axis)


def _reduce_in_pieces(op, data, axis, cuts, group=None):
    """Finish of the pieces' states merged all at once, or in consecutive groups of
    ``group`` (a tree, as dask combines)."""
    merged = _pieces(op, data, axis, cuts)
    while group and merged.shape[axis] > 1:
        parts = np.split(merged, range(group, merged.shape[axis], group), axis=axis)
        merged = np.concatenate([states.merge(op, part, (axis,)) for part in parts], axis=axis)
    return states.finish(op, states.merge(op, merged, (axis,)), data.dtype)


def _within_contract(result, op, data, axes):
    exact = oracle.exact(op, data, axes)
    if data.dtype.kind in "iu":
        assert result.tolist() == oracle.round_array(exact, data.dtype).tolist()
        return
    bound = 2.0 if data.dtype == np.float64 else 1.0
    assert oracle.max_ulp_error(result, exact, data.dtype) <= bound


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(OPS), st.sampled_from(FLOATS), st.integers(0, 2**32 - 1),
       st.lists(st.integers(0, 40), max_size=6), st.sampled_from([None, 2, 3]))
def test_any_cutting_and_grouping_is_within_the_contract(op, dtype, seed, cuts, group):
    data = (np.random.default_rng(seed).standard_normal((3, 40)) * 4).astype(dtype)
    result = _reduce_in_pieces(op, data, 1, sorted(cuts), group)
    _within_contract(result, op, data, [1])


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint32, np.uint64])
def test_integer_states_are_exact(op, dtype):
    info = np.iinfo(dtype)
    data = np.array([[info.max, info.max, 3, info.min, 1, info.max],
                     [info.min, info.min, info.min, 0, 0, 7]], dtype)
    for cuts in ([], [1], [1, 1, 4], [0, 2, 3, 5, 6]):
        _within_contract(_reduce_in_pieces(op, data, 1, cuts, 2), op, data, [1])


def test_integer_log_sum_exp_lifts_a_sum_that_float64_rounds_to_the_maximum():
    data = np.array([[-5, -1000]], np.int64)  # -5 + e**-995: truncated toward zero, -4
    assert _reduce_in_pieces("ReduceLogSumExp", data, 1, [1]).tolist() == [[-4]]


@pytest.mark.parametrize(
    ("dtype", "values", "want"),
    [
        (np.float64, [1e300, 1e300], math.sqrt(2) * 1e300),
        (np.float64, [3e-200, 0.0, 4e-200], 5e-200),
        (np.float64, [0.0, 0.0, 5e-324, 0.0], 5e-324),
        (np.float64, [1e308, 1e308, 1e308], math.sqrt(3) * 1e308),
        (np.float32, [3e30, 4e30], 5e30),
        (np.float32, [3e-30, 4e-30], 5e-30),
    ],
)
def test_l2_scaling_neither_overflows_nor_underflows_across_pieces(dtype, values, want):
    data = np.array([values], dtype)
    for cuts in ([1], list(range(1, len(values))), [0, 1, 1]):
        result = _reduce_in_pieces("ReduceL2", data, 1, cuts)
        assert oracle.ulp_error(result[0, 0], oracle.exact("ReduceL2", data, [1])[0, 0],
                                data.dtype) <= 1.0
        assert math.isclose(float(result[0, 0]), want, rel_tol=1e-6)


def test_l2_overflows_when_the_true_result_does():
    data = np.array([[1.7e308, 1.7e308]])
    assert _reduce_in_pieces("ReduceL2", data, 1, [1])[0, 0] == np.inf


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", FLOATS)
def test_specials_and_empty_pieces_follow_the_math(op, dtype):
    inf, nan = np.inf, np.nan
    data = np.array([[1, -inf, 3, inf, 2, 5], [nan, 1, 2, 3, 4, 5], [-inf] * 6,
                     [inf, 2, 2, -inf, 0, 1], [0, 0, 0, 0, 0, 0], [2, 2, 2, 2, 2, 2]], dtype)
    for cuts in ([0, 0, 3], [1, 2, 3, 4, 5], [6]):
        with np.errstate(all="ignore"):
            result = _reduce_in_pieces(op, data, 1, cuts, 2)
        _within_contract(result, op, data, [1])


@pytest.mark.parametrize("op", OPS)
def test_an_empty_piece_merges_as_nothing(op):
    data = np.array([[1.5, -2.0, 3.25]], np.float32)
    alone = states.partial(op, data, (1,))
    empty = states.partial(op, data[:, :0], (1,))
    merged = states.merge(op, np.concatenate([empty, alone, empty], axis=1), (1,))
    assert states.finish(op, merged, data.dtype).tolist() == \
        states.finish(op, alone, data.dtype).tolist()


@pytest.mark.parametrize("op", OPS)
def test_partial_walks_blocks_and_merges_them(op, monkeypatch):
    """Blocks of 7 elements inside one piece give the one-block result within the contract."""
    data = (np.random.default_rng(2).standard_normal((5, 6, 9)) * 3).astype(np.float32)
    monkeypatch.setattr(blocks, "BLOCK_ELEMENTS", 7)
    state = states.partial(op, data, (0, 2))
    assert state.shape == (1, 6, 1)
    _within_contract(states.finish(op, state, data.dtype), op, data, [0, 2])


def test_state_dtypes_accumulate_wider_than_the_input():
    assert states.state_dtype("ReduceSum", np.dtype(np.float32))["sum"] == np.float64
    assert states.state_dtype("ReduceSum", np.dtype(np.int32))["sum"] == np.int32
    lse = states.state_dtype("ReduceLogSumExp", np.dtype(ml_dtypes.bfloat16))
    assert lse.names == ("peak", "tail", "ties")
    assert lse["tail"] == np.float64


def test_the_log_sum_exp_limit_covers_the_merges():
    one_pass = threshold(np.dtype(np.float64), reference_bound(np.dtype(np.float64), 1000))
    limits = [states.log_sum_exp_limit(np.dtype(np.float64), 1000, merges, 16)
              for merges in (1, 4, 1000)]
    assert one_pass <= limits[0] <= limits[1] <= limits[2]
    assert states.log_sum_exp_limit(np.dtype(np.float32), 1, 5, 16) == -1.0  # exact


@pytest.mark.parametrize(("nblocks", "group", "merges"),
                         [(1, 16, 2), (16, 16, 2), (17, 16, 3), (256, 16, 3), (5, 2, 4)])
def test_merges_along_counts_the_tree_depth_and_the_blocks_merge(nblocks, group, merges):
    assert states.merges_along(nblocks, group) == merges
