"""Axes normalisation and output shapes of ``make_plan``."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from onnx_reduce.plan import ReductionPlan, make_plan, output_shape
from onnx_reduce.spec import VERSIONS, Request, validate
from onnx_reduce.spec.table import OPS

ALL = [VERSIONS[op][v] for op in OPS for v in VERSIONS[op]]
SUM13 = VERSIONS["ReduceSum"][13]


def plan_for(axes, shape, keepdims=True, noop=False, ver=SUM13) -> ReductionPlan:
    return make_plan(Request(ver, None if axes is None else tuple(axes), keepdims, noop), shape)


@pytest.mark.parametrize(
    ("axes", "expected"),
    [((-1,), (2,)), ((2, 0), (0, 2)), ((-1, -3), (0, 2)), ((1, -1, 0), (0, 1, 2)),
     ((0, 1, 2), (0, 1, 2)), ((-2,), (1,))],
)
def test_axes_are_sorted_and_non_negative(axes, expected) -> None:
    plan = plan_for(axes, (2, 3, 4))
    assert plan.axes == expected
    assert plan.noop is False


@pytest.mark.parametrize("axes", [None, ()])
@pytest.mark.parametrize("shape", [(), (5,), (2, 3, 4), (2, 0, 3)])
def test_none_and_empty_axes_reduce_everything(axes, shape) -> None:
    plan = plan_for(axes, shape)
    assert plan.axes == tuple(range(len(shape)))
    assert plan.noop is False
    assert plan.reduced_size == math.prod(shape)
    assert plan.output_shape == (1,) * len(shape)
    assert plan_for(axes, shape, keepdims=False).output_shape == ()


@pytest.mark.parametrize("axes", [None, ()])
@pytest.mark.parametrize("keepdims", [True, False])
@pytest.mark.parametrize("shape", [(), (5,), (2, 3, 4)])
def test_empty_axes_with_noop_is_a_noop(axes, keepdims, shape) -> None:
    plan = plan_for(axes, shape, keepdims=keepdims, noop=True)
    assert plan.noop is True
    assert plan.axes == ()
    assert plan.reduced_size == 1
    assert plan.output_shape == shape  # keepdims does not matter: nothing is reduced
    assert plan.kept_axes == tuple(range(len(shape)))
    assert plan.kept_shape == shape


def test_noop_flag_is_ignored_when_axes_are_given() -> None:
    plan = plan_for((1,), (2, 3, 4), keepdims=False, noop=True)
    assert plan.noop is False
    assert plan.axes == (1,)
    assert plan.output_shape == (2, 4)


@pytest.mark.parametrize("shape", [(2, 3, 4), (1, 5, 1, 2), (3, 0, 2)])
def test_every_subset_of_axes_against_numpy(shape) -> None:
    data = np.zeros(shape)
    rank = len(shape)
    for k in range(1, rank + 1):
        for subset in itertools.combinations(range(rank), k):
            for signs in itertools.product((0, 1), repeat=k):
                axes = [a - rank if neg else a for a, neg in zip(subset, signs, strict=True)]
                for keepdims in (True, False):
                    plan = plan_for(axes, shape, keepdims)
                    expected = np.sum(data, axis=tuple(subset), keepdims=keepdims).shape
                    assert plan.output_shape == expected
                    assert plan.axes == subset
                    assert plan.reduced_size == math.prod(shape[a] for a in subset)
                    assert plan.kept_axes == tuple(a for a in range(rank) if a not in subset)
                    assert plan.kept_shape == tuple(shape[a] for a in plan.kept_axes)
                    assert math.prod(plan.kept_shape) * plan.reduced_size == math.prod(shape)


def test_rank_zero() -> None:
    plan = plan_for(None, ())
    assert (plan.axes, plan.output_shape, plan.reduced_size, plan.kept_shape) == ((), (), 1, ())
    assert plan_for((), (), keepdims=False).output_shape == ()


def test_shape_is_normalised_to_python_ints() -> None:
    plan = plan_for((0,), (np.int64(2), np.int32(3)))
    assert plan.shape == (2, 3)
    assert all(type(d) is int for d in plan.shape)


@pytest.mark.parametrize("ver", ALL, ids=lambda v: v.label)
def test_bad_axes_raise_naming_the_version(ver) -> None:
    with pytest.raises(ValueError, match=f"{ver.label}: axis 3 is out of range"):
        plan_for((3,), (2, 3, 4), ver=ver)
    with pytest.raises(ValueError, match=rf"{ver.label}: axes \[0, -3\] name the same axis"):
        plan_for((0, -3), (2, 3, 4), ver=ver)


def test_make_plan_from_a_validated_request() -> None:
    ver = VERSIONS["ReduceL2"][18]
    request = validate(ver, np.dtype(np.float32), {"keepdims": 0}, np.array([-1, 0], np.int64))
    plan = make_plan(request, (2, 3, 4))
    assert plan == ReductionPlan((2, 3, 4), (0, 2), False, False)
    assert plan.output_shape == (3,)


def test_integer_lse_over_an_empty_set_is_rejected_by_the_plan() -> None:
    ver = VERSIONS["ReduceLogSumExp"][18]
    request = validate(ver, np.dtype(np.int64), {}, np.array([1], np.int64))
    with pytest.raises(ValueError, match="ReduceLogSumExp-18: the reduction over an empty set"):
        make_plan(request, (3, 0))
    float_request = validate(ver, np.dtype(np.float64), {}, np.array([1], np.int64))
    assert make_plan(float_request, (3, 0)).reduced_size == 0
    # A request built without a dtype (as shape inference does) is not checked.
    assert plan_for((1,), (3, 0), ver=ver).reduced_size == 0


@pytest.mark.parametrize(
    ("shape", "axes", "keepdims", "expected"),
    [(("N", 3, None), (1,), False, ("N", None)), (("N", 3, None), (0, 2), True, (1, 3, 1)),
     (("N", "C"), (), True, ("N", "C")), ((), (), False, ())],
)
def test_output_shape_with_symbols(shape, axes, keepdims, expected) -> None:
    assert output_shape(shape, axes, keepdims) == expected
