"""The compiled rows of the partial states (:mod:`onnx_reduce.kernels.fast.state_rows`): every
layout a piece can have, and the rows they hand back to numpy (inf, NaN, overflowing sums,
peaks whose scale leaves the float64 range), within the contract of the exact oracle."""

import math
import tracemalloc
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from onnx_reduce.kernels import blocks, states
from onnx_reduce.kernels.dispatch import kernel_path, state_rows
from onnx_reduce.kernels.fast import state_rows as compiled_rows
from state_checks import finished, within_contract

OPS = ("ReduceSum", "ReduceL2", "ReduceLogSumExp", "ReduceSumSquare", "ReduceLogSum")
FLOATS = [np.float16, ml_dtypes.bfloat16, np.float32, np.float64]


def _layouts(data):
    """(name, 3-D view, reduced axes): rows (reduced axes contiguous), columns (kept axis
    contiguous), neither (both strided), reversed (negative strides), a single kept index."""
    wide = np.repeat(data, 2, axis=-1)
    return [
        ("rows", data, (1, 2)),
        ("columns", data, (0,)),
        ("middle", data, (1,)),
        ("neither", wide[..., ::2], (0, 1)),
        ("reversed", data[::-1, :, ::-1], (2,)),
        ("one output", data[:1], (1, 2)),
    ]


def _reduced(op, view, axes):
    state = states.merge(op, states.partial(op, view, axes), axes)
    n = int(np.prod([view.shape[a] for a in axes]))
    return finished(op, state, view, axes, states.Tree(n, 2, 2))


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(OPS), st.sampled_from(FLOATS), st.integers(0, 2**32 - 1),
       st.sampled_from([1.0, 1e-3, 300.0]))
def test_every_layout_is_within_the_contract(op, dtype, seed, scale):
    data = np.random.default_rng(seed).standard_normal((6, 7, 9)) * scale
    if op == "ReduceLogSum":
        data = np.abs(data)
    data = data.astype(dtype)
    assert state_rows(op, data.dtype) is not None
    for _, view, axes in _layouts(data):
        with np.errstate(all="ignore"):
            within_contract(_reduced(op, view, axes), op, view, list(axes))


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", FLOATS)
def test_rows_with_specials_are_redone_by_numpy(op, dtype):
    inf, nan = np.inf, np.nan
    data = np.array([[1, -inf, 3, inf], [nan, 1, 2, 3], [-inf] * 4, [inf, 2, 2, 1],
                     [0, 0, 0, 0], [2, 2, 2, 2]], dtype)
    for view, axes in ((data, (1,)), (data.T, (0,))):
        with np.errstate(all="ignore"):
            within_contract(_reduced(op, view, axes), op, view, list(axes))


@pytest.mark.parametrize("values", [[1e308, 1e308, -1e308], [-1.7e308, -1e308, 1e308, 0.5]])
def test_a_float64_sum_that_overflows_midway_keeps_its_finite_value(values):
    """The double-double's plain head overflows; the row goes to the long double rows."""
    data = np.array([values])
    for view, axes in ((data, (1,)), (data.T, (0,))):
        within_contract(_reduced("ReduceSum", view, axes), "ReduceSum", view, list(axes))


@pytest.mark.parametrize("op", ["ReduceL2", "ReduceSumSquare"])
@pytest.mark.parametrize("values", [
    [5e-324, 1e-320, 2.5e-322],  # subnormal peak: 2**-exp overflows, scaled in two steps
    [2.0**-1000, 3.0 * 2.0**-1001, 2.0**-1060],
    [1.7e308, 1e308, 1.0],  # exponent 1024: 2**-exp is subnormal
    [0.0, -0.0, 0.0],
])
def test_float64_scales_reach_both_ends_of_the_range(op, values):
    data = np.array([values, values[::-1]])
    for view, axes in ((data, (1,)), (data.T, (0,))):
        with np.errstate(all="ignore"):
            within_contract(_reduced(op, view, axes), op, view, list(axes))


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", FLOATS)
def test_exact_fields_match_the_numpy_rows(op, dtype):
    """The fields with one right value (peaks, tie counts, scale exponents) are the numpy
    rows' own, in rows and in column blocks."""
    data = np.round(np.random.default_rng(5).standard_normal((70, 33)) * 4).astype(dtype)
    for view, axes in ((data, (1,)), (data, (0,))):
        fast = states.partial(op, view, axes)
        with kernel_path("reference"):
            slow = states.partial(op, view, axes)
        for name in set(fast.dtype.names) & {"peak", "ties", "exp"}:
            assert fast[name].tolist() == slow[name].tolist(), name


@pytest.mark.parametrize("axes", [(1,), (0,)], ids=["rows", "columns"])
def test_log_sum_magnitudes_are_summed_apart_where_a_stretch_has_a_negative_term(axes):
    """float64 ReduceLogSum's sums of magnitudes: taken from the sums in stretches of rows with
    no negative term (-0.0 terms too), added up apart in a later stretch with one: both fields
    within 2**-52 of the exact sums (math.fsum) of x and of |x| in every stretch."""
    rows = compiled_rows.MAGNITUDE_STRETCH // 8 * 3 + 5  # rows of 8: four stretches
    data = np.abs(np.random.default_rng(8).standard_normal((rows, 8)))
    data[1, 2] = -0.0
    data[rows - 2, 3] = -5.0
    view = data if axes == (1,) else np.ascontiguousarray(data.T)
    state = states.partial("ReduceLogSum", view, axes)
    for name, values in (("sum", data), ("magnitude", np.abs(data))):
        exact = [math.fsum(row) for row in values]
        np.testing.assert_allclose(state[name].astype(np.float64).ravel(), exact, rtol=2**-52,
                                   err_msg=name)


def test_flat_blocks_walk_a_contiguous_axis_in_place():
    data = np.zeros((5, 10))
    columns = list(blocks.flat_blocks(data.T, 1, width=4))
    assert [where for where, _ in columns] == [slice(0, 4), slice(4, 8), slice(8, 10)]
    assert all(block.strides[0] == data.itemsize and np.shares_memory(block, data)
               for _, block in columns)
    rows = list(blocks.flat_blocks(data, 1, budget=25))
    assert [where for where, _ in rows] == [slice(0, 2), slice(2, 4), slice(4, 5)]
    assert [where for where, _ in blocks.flat_blocks(data, 1, budget=3)] == \
        [slice(i, i + 1) for i in range(5)]  # a row longer than the budget: one at a time
    assert blocks.flat_blocks(np.moveaxis(np.zeros((4, 3, 5)), 1, 2), 2) is None  # a copy
    assert blocks.flat_blocks(np.zeros((4, 6))[:, ::2], 1) is None  # no contiguous axis


def test_flat_blocks_never_copy_a_piece_they_cannot_use():
    split = np.moveaxis(np.zeros((64, 128, 128)), 1, 2)  # 8 MiB; (0, 2) reduced: no flat view
    tracemalloc.start()
    try:
        assert blocks.flat_blocks(split, 2) is None
        ((_, block),) = blocks.flat_blocks(np.zeros((6, 4)).T, 1)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert block.shape == (4, 6)
    assert peak < 2**20  # no copy of the 8 MiB piece


@pytest.mark.parametrize(("shape", "axes"), [((5, 1, 6), (0, 2)), ((1, 4, 1), (0,)),
                                         ((3, 4, 5), (1, 2)), ((2, 1, 3, 4), (0, 1))])
def test_flat_blocks_view_what_reshape_gives(shape, axes):
    data = np.arange(np.prod(shape), dtype=np.float64).reshape(shape)
    view = np.moveaxis(data, axes, range(data.ndim - len(axes), data.ndim))
    nkept = data.ndim - len(axes)
    walked = blocks.flat_blocks(view, nkept)
    if walked is None:  # only where numpy would have had to copy
        assert not np.shares_memory(view.reshape(-1, view[(0,) * nkept].size), data)
        return
    flat = view.reshape(int(np.prod(view.shape[:nkept])), -1)
    for where, block in walked:
        assert np.shares_memory(block, data)
        np.testing.assert_array_equal(block, flat[where])


def test_compiled_rows_serve_floats_and_leave_the_rest_to_numpy():
    assert compiled_rows.rows_for("ReduceSum", np.dtype(np.int32)) is None
    for dtype in FLOATS:
        assert compiled_rows.rows_for("ReduceLogSumExp", np.dtype(dtype)) is not None
    with kernel_path("reference"):
        assert state_rows("ReduceSum", np.dtype(np.float32)) is None


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(FLOATS), st.integers(0, 2**32 - 1), st.floats(-40, 3),
       st.sampled_from(["rows", "columns"]))
def test_log_sum_exp_near_cancellation_is_within_the_contract(dtype, seed, log2_shift, layout):
    """log-softmax rows shifted by +-2**k: results from ~0 to ~8 cross every threshold under
    which :func:`.states.suspects` sends an output back to its slice."""
    rng = np.random.default_rng(seed)
    logits = rng.standard_normal((5, 40)) * 3
    peak = logits.max(axis=1, keepdims=True)
    log_softmax = logits - (peak + np.log(np.exp(logits - peak).sum(axis=1, keepdims=True)))
    shift = rng.choice([-1.0, 1.0], size=(5, 1)) * 2.0**log2_shift
    data = (log_softmax + shift).astype(dtype)
    view, axes = (data, (1,)) if layout == "rows" else (np.ascontiguousarray(data.T), (0,))
    result = _reduced("ReduceLogSumExp", view, axes)
    within_contract(result, "ReduceLogSumExp", view, list(axes))


@pytest.mark.parametrize("layout", ["rows", "columns"])
def test_float64_log_sum_exp_under_one_is_sent_back_to_its_slice(layout):
    """The compiled float64 tails are the fast kernels' (1.28 u per term, not long double's):
    results under 1 can be several ulps off unless the limit accounts for it (6.3 ulp were
    measured when it did not)."""
    rng = np.random.default_rng(11)
    logits = rng.standard_normal((120, 40)) * 3
    peak = logits.max(axis=1, keepdims=True)
    log_softmax = logits - (peak + np.log(np.exp(logits - peak).sum(axis=1, keepdims=True)))
    data = log_softmax + 2.0 ** rng.uniform(-12, 1, size=(120, 1))
    view, axes = (data, (1,)) if layout == "rows" else (np.ascontiguousarray(data.T), (0,))
    within_contract(_reduced("ReduceLogSumExp", view, axes), "ReduceLogSumExp", view,
                    list(axes))


def test_short_float64_rows_give_the_lanes_bits():
    """Rows of at most TILED terms run side by side (:func:`compiled_rows._tiled_rows`) and
    give the double-doubles that the same rows padded with zeros past TILED take one at a
    time through the lanes (:func:`compiled_rows._lane_rows`), bit for bit: sums, sums of
    magnitudes and exact scaled squares, in partial and full tiles (rows that are not finite
    are redone by numpy, so only finiteness must agree there)."""
    rng = np.random.default_rng(80)
    tiled = compiled_rows.TILED
    specials = np.array([0.0, -0.0, np.inf, np.nan, 5e-324, -1e308, 1e-300, 3e200])
    for trial in range(700):
        n = 1 + trial % tiled if trial % 5 else 1 + trial % 33
        m = 3 if trial % 4 else 150
        x = rng.standard_normal((m, n)) * 10.0 ** rng.integers(-300, 300, (m, 1))
        if trial % 3 == 1:
            x -= x.mean(axis=1, keepdims=True)
        elif trial % 3 == 2:
            hit = rng.random(x.shape) < 0.2
            x[hit] = rng.choice(specials, hit.sum())
        padded = np.concatenate([x, np.zeros((m, tiled + 40 - n))], axis=1)
        scale = 2.0 ** rng.integers(-40, 40, m).astype(float)
        for squares, magnitude in ((False, False), (False, True), (True, False)):
            got, want = (np.empty((2, 2 * m)), np.empty((2, 2 * m)))
            for out, rows in ((got, x), (want, padded)):
                compiled_rows._dd_sums(rows.reshape(-1), m, rows.shape[1], rows.shape[1], 1,
                                       squares, magnitude, scale, np.ones(m), out[0], out[1])
            k = 2 * m if magnitude else m
            finite = np.isfinite(want[0, :k])
            assert np.array_equal(np.isfinite(got[0, :k]), finite)
            assert got[:, :k][:, finite].tobytes() == want[:, :k][:, finite].tobytes(), (x, n)


def test_scales_are_frexp_and_ldexp_of_every_peak_exponent():
    """:func:`compiled_rows._scales` takes normal peaks' exponents from their bits: the same
    ``e``, 2**-e and rescale as ``frexp`` and ``ldexp`` at every exponent, zero, subnormal,
    below 2**-1000 (two factors) and from 2**1022 on (2**-e subnormal) included."""
    fields = np.arange(0, 2047, dtype=np.int64)
    normal = (fields << 52 | 0x5A5A5A5A5A5).view(np.float64)
    peaks = np.concatenate([normal, [0.0, 5e-324, 1e-310, 2.0**-1000, 2.0**1023, 1.0]])
    exps, scale, rescale = (np.empty(peaks.size, np.int32), np.empty(peaks.size),
                            np.empty(peaks.size))
    compiled_rows._scales(peaks, exps, scale, rescale)
    for i, peak in enumerate(peaks):
        if peak == 0.0:
            assert (exps[i], scale[i], rescale[i]) == (states.ZERO_SCALE, 1.0, 1.0)
            continue
        e = math.frexp(peak)[1]
        assert exps[i] == e, peak
        assert Fraction(scale[i]) * Fraction(rescale[i]) == Fraction(2) ** -e, peak
        assert (rescale[i] == 1.0) == (e > -1000), peak


def test_finished_squares_are_ldexp_of_the_sums():
    """:func:`compiled_rows._finish_squares` (``out`` may be ``head``) gives ``np.ldexp``'s
    bits at every exponent: overflow, subnormal results (one rounding) and ZERO_SCALE."""
    rng = np.random.default_rng(2)
    exps = np.concatenate([np.arange(-1080, 1030, 3), [states.ZERO_SCALE, -511, 511, 512]])
    exps = exps.astype(np.int32)
    head = rng.uniform(0.25, 40.0, exps.size)
    head[exps == states.ZERO_SCALE] = 0.0
    tail = head * rng.uniform(-2.0**-53, 2.0**-53, exps.size)
    with np.errstate(over="ignore", under="ignore"):
        want = np.ldexp(head + tail, 2 * exps.astype(np.int64))
    got = np.empty(exps.size)
    compiled_rows._finish_squares(exps, head, tail, got)
    assert got.tobytes() == want.tobytes()
    compiled_rows._finish_squares(exps, head, tail, head)
    assert head.tobytes() == want.tobytes()
