"""Normalise the axes of a validated request and compute the output shape."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

from ..spec.validate import Request, check_axes, check_nonempty


@dataclass(frozen=True)
class ReductionPlan:
    """What to reduce, for an input of a known shape.

    >>> from onnx_reduce.spec import resolve, Request
    >>> plan = make_plan(Request(resolve("ReduceSum", 13), (-1, 0), False, False), (2, 3, 4))
    >>> plan.axes, plan.output_shape, plan.reduced_size
    ((0, 2), (3,), 8)
    """

    shape: tuple[int, ...]
    axes: tuple[int, ...]
    """Sorted, non-negative axes to reduce (empty when ``noop``)."""
    keepdims: bool
    noop: bool
    """Empty axes with ``noop_with_empty_axes``: only the elementwise part is applied."""

    @cached_property
    def kept_axes(self) -> tuple[int, ...]:
        return tuple(i for i in range(len(self.shape)) if i not in self.axes)

    @cached_property
    def kept_shape(self) -> tuple[int, ...]:
        return tuple(self.shape[i] for i in self.kept_axes)

    @cached_property
    def reduced_size(self) -> int:
        """How many elements each output element reduces (1 for a no-op)."""
        return math.prod(self.shape[i] for i in self.axes)

    @cached_property
    def elementwise(self) -> ReductionPlan | None:
        """The no-op plan of the output shape when each output reduces exactly one element
        (reduced axes of size 1): the operator is then its elementwise part; else None."""
        if self.noop or self.reduced_size != 1:
            return None
        return ReductionPlan(self.output_shape, (), self.keepdims, True)

    @cached_property
    def output_shape(self) -> tuple[int, ...]:
        if self.noop:
            return self.shape
        return output_shape(self.shape, self.axes, self.keepdims)


def make_plan(request: Request, shape: tuple[int, ...]) -> ReductionPlan:
    """Resolve ``request`` against an input of ``shape`` (raises on bad axes)."""
    shape = tuple(int(d) for d in shape)
    axes = reduced_axes(request, len(shape))
    noop = axes is None
    plan = ReductionPlan(shape, () if noop else axes, request.keepdims, noop)
    if not noop:
        check_nonempty(request.version, request.dtype, shape, plan.reduced_size)
    return plan


def reduced_axes(request: Request, rank: int) -> tuple[int, ...] | None:
    """The sorted non-negative axes to reduce, or None for a no-op (empty axes + noop flag)."""
    if not request.axes:
        return None if request.noop_with_empty_axes else tuple(range(rank))
    return tuple(sorted(check_axes(request.version, request.axes, rank)))


def output_shape(shape: tuple, axes: tuple[int, ...], keepdims: bool) -> tuple:
    """Shape after reducing ``axes`` (non-negative); dims may be ints or symbols."""
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)
