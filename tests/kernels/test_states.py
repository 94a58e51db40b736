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
from onnx_reduce.kernels.dispatch import kernel_path
from onnx_reduce.kernels.exact_lse import reference_bound, threshold
from onnx_reduce.spec.ops import REGISTRY
from state_checks import finished, within_contract

OPS = tuple(record.name for record in REGISTRY)
FLOATS = [np.float16, ml_dtypes.bfloat16, np.float32, np.float64]


@pytest.fixture(autouse=True, params=["reference", "auto"])
def rows_path(request):
    """Every test with the numpy rows and with the compiled rows (:mod:`.fast.state_rows`)."""
    with kernel_path(request.param):
        yield request.param


def _pieces(op, data, axis, cuts):
    """The states of ``data`` cut along ``axis`` at ``cuts`` (empty pieces included),
    concatenated along ``axis``."""
    pieces = np.split(data, cuts, axis=axis)
    return np.concatenate([states.partial(op, piece, (axis,)) for piece in pieces], axis=axis)


def _reduce_in_pieces(op, data, axis, cuts, group=None):
    """Finish of the pieces' states merged all at once, or in consecutive groups of
    ``group`` (a tree, as dask combines), suspect outputs recomputed from their rows."""
    merged = _pieces(op, data, axis, cuts)
    pieces, depth = merged.shape[axis], 1
    while group and merged.shape[axis] > 1:
        parts = np.split(merged, range(group, merged.shape[axis], group), axis=axis)
        merged = np.concatenate([states.merge(op, part, (axis,)) for part in parts], axis=axis)
        depth += 1
    state = states.merge(op, merged, (axis,))
    tree = states.Tree(data.shape[axis], depth + 1, max(pieces, group or 0))
    return finished(op, state, data, (axis,), tree)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(OPS), st.sampled_from(FLOATS), st.integers(0, 2**32 - 1),
       st.lists(st.integers(0, 40), max_size=6), st.sampled_from([None, 2, 3]))
def test_any_cutting_and_grouping_is_within_the_contract(op, dtype, seed, cuts, group):
    data = (np.random.default_rng(seed).standard_normal((3, 40)) * 4).astype(dtype)
    result = _reduce_in_pieces(op, data, 1, sorted(cuts), group)
    within_contract(result, op, data, [1])


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint32, np.uint64])
def test_integer_states_are_exact(op, dtype):
    info = np.iinfo(dtype)
    data = np.array([[info.max, info.max, 3, info.min, 1, info.max],
                     [info.min, info.min, info.min, 0, 0, 7]], dtype)
    if op == "ReduceLogSum":  # positive sums (beyond the dtype: exact), not wrapped
        data = np.array([[info.max, info.max, 3, 0, 1, info.max], [1, 0, 0, 0, 0, 1]], dtype)
    for cuts in ([], [1], [1, 1, 4], [0, 2, 3, 5, 6]):
        within_contract(_reduce_in_pieces(op, data, 1, cuts, 2), op, data, [1])


@pytest.mark.parametrize(("values", "what"), [([3, -3, 0], "-inf"), ([-2, 1], "NaN")])
def test_integer_log_sum_of_a_sum_at_most_zero_raises_at_finish(values, what):
    data = np.array([values], np.int64)
    state = states.merge("ReduceLogSum", _pieces("ReduceLogSum", data, 1, [1]), (1,))
    with pytest.raises(ValueError, match=rf"ReduceLogSum: .*\({what}\) int64 cannot"):
        states.finish("ReduceLogSum", state, data.dtype)


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


@pytest.mark.parametrize(
    ("values", "want"),
    [
        ([1e154, 1e154], math.inf),  # 2e308: the true result overflows
        ([1e153, 1e153, 1e153], 3e306),
        ([3e-170, 4e-170], 2.5e-339),  # below the subnormals: 0, as the true result rounds
        ([1e-160, 0.0, 2e-160], 5e-320),  # subnormal
        ([1e150, 1e-150, 1.0], 1e300),
    ],
)
def test_float64_sum_square_scales_across_pieces(values, want):
    """float64 SumSquare keeps L2's scale and sums exact squares in double-double: 2 ulp in
    every cutting, overflow only where the true result overflows."""
    data = np.array([values])
    exact = oracle.exact("ReduceSumSquare", data, [1])
    for cuts in ([1], list(range(1, len(values))), [0, 1, 1]):
        result = _reduce_in_pieces("ReduceSumSquare", data, 1, cuts, 2)
        assert oracle.ulp_error(result[0, 0], exact[0, 0], data.dtype) <= 2.0
        assert result[0, 0] == pytest.approx(want, rel=1e-6, abs=1e-323)


def test_float64_sum_square_is_within_the_contract_where_float64_sums_are_not():
    """1 + 2**-30 squared 2**12 times, one piece per element: a float64 sum of the squares
    loses the 2**-60 terms; the double-double one keeps them."""
    data = np.full((1, 4096), 1 + 2.0**-30)
    exact = oracle.exact("ReduceSumSquare", data, [1])
    result = _reduce_in_pieces("ReduceSumSquare", data, 1, list(range(1, 4096)), 16)
    assert oracle.ulp_error(result[0, 0], exact[0, 0], data.dtype) <= 0.5


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
        within_contract(result, op, data, [1])


@pytest.mark.parametrize("op", OPS)
def test_an_empty_piece_merges_as_nothing(op):
    data = np.array([[1.5, -2.0, 3.25]], np.float32)
    alone = states.partial(op, data, (1,))
    empty = states.partial(op, data[:, :0], (1,))
    merged = states.merge(op, np.concatenate([empty, alone, empty], axis=1), (1,))
    assert states.finish(op, merged, data.dtype).tolist() == \
        states.finish(op, alone, data.dtype).tolist()


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", [*FLOATS, np.int64])
def test_states_of_no_outputs_merge(op, dtype):
    """Pieces whose kept axis is empty (a zero-length dask chunk there) hold no states; they
    merge and finish into no outputs, as the whole array would."""
    data = np.ones((3, 0), dtype)
    merged = states.merge(op, _pieces(op, data, 0, [1, 2]), (0,))
    assert merged.shape == (1, 0)
    assert states.finish(op, merged, data.dtype).shape == (1, 0)


@pytest.mark.parametrize("op", OPS)
def test_partial_walks_blocks_and_merges_them(op, monkeypatch):
    """Blocks of 7 elements inside one piece give the one-block result within the contract."""
    data = (np.random.default_rng(2).standard_normal((5, 6, 9)) * 3).astype(np.float32)
    monkeypatch.setattr(blocks, "BLOCK_ELEMENTS", 7)
    state = states.partial(op, data, (0, 2))
    assert state.shape == (1, 6, 1)
    result = finished(op, state, data, (0, 2), states.Tree(45, 2, 7))
    within_contract(result, op, data, [0, 2])


def test_every_registry_op_has_a_state():
    assert sorted(states.STATES) == sorted(record.name for record in REGISTRY)
    for name in states.STATES:
        assert states.state_dtype(name, np.dtype(np.float32)).names


@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16, np.float64])
def test_log_sum_near_one_is_recomputed(dtype):
    """Sums of 1 + 2**-80 (one cancelling): the accumulator loses the 2**-80, so one pass
    gives log 1 = 0, infinitely many ulp off; the outputs are flagged and recomputed."""
    data = np.array([[0.5, 0.25, 2.0**-80, 0.125, 0.125], [3.0, 1.0, -3.0, 2.0**-80, 0.0]],
                    dtype)
    merged = states.merge("ReduceLogSum", _pieces("ReduceLogSum", data, 1, [2, 3]), (1,))
    plain = states.finish("ReduceLogSum", merged, data.dtype)
    assert plain.tolist() == [[0.0], [0.0]]
    tree = states.Tree(5, 2, 3)
    assert states.suspects("ReduceLogSum", merged, plain, data.dtype, tree).all()
    result = _reduce_in_pieces("ReduceLogSum", data, 1, [2, 3])
    within_contract(result, "ReduceLogSum", data, [1])
    assert result.astype(np.float64).tolist() == [[2.0**-80], [2.0**-80]]  # log1p(2**-80)


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
