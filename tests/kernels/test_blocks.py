"""kernels.blocks: C-order block cutting and the blockwise reduction driver."""

from __future__ import annotations

import math

import numpy as np
import pytest

from onnx_reduce.kernels import blocks
from onnx_reduce.kernels.blocks import blockwise, c_order_blocks

SHAPES = [(), (0,), (5,), (2, 3), (0, 3), (3, 0), (2, 2, 3), (3, 1, 4, 5), (7, 11), (1, 1, 13)]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("budget", [1, 2, 3, 4, 6, 7, 12, 100])
def test_c_order_blocks_cover_every_element_once_in_order(shape, budget) -> None:
    a = np.arange(math.prod(shape)).reshape(shape)
    pieces = [np.asarray(a[index]).reshape(-1) for index in c_order_blocks(shape, budget)]
    assert np.concatenate(pieces).tolist() == list(range(a.size)) if pieces else a.size == 0
    for index, piece in zip(c_order_blocks(shape, budget), pieces, strict=True):
        assert piece.size <= max(budget, 1) or index == (), (index, piece.size)
        assert all(isinstance(i, (int, slice)) for i in index)


def test_c_order_blocks_examples() -> None:
    assert list(c_order_blocks((2, 3), 6)) == [()]
    assert list(c_order_blocks((2, 3), 3)) == [(slice(0, 1),), (slice(1, 2),)]
    assert list(c_order_blocks((4, 3), 7)) == [(slice(0, 2),), (slice(2, 4),)]
    assert list(c_order_blocks((2, 5), 2)) == [
        (0, slice(0, 2)), (0, slice(2, 4)), (0, slice(4, 5)),
        (1, slice(0, 2)), (1, slice(2, 4)), (1, slice(4, 5)),
    ]


def _sum_blockwise(view: np.ndarray, nkept: int, budget: int | None, seen: list) -> np.ndarray:
    def partial(block: np.ndarray, kept_index: tuple) -> np.ndarray:
        seen.append(block.size)
        return block.sum(axis=-1, dtype=np.int64)

    out = np.zeros(view.shape[:nkept], np.int64)
    return blockwise(view, nkept, partial, lambda ps: np.sum(ps, axis=0), out, budget)


@pytest.mark.parametrize("shape", [(3, 4, 5), (1, 7, 9), (6, 1, 1), (2, 3, 0), (0, 3, 4)])
@pytest.mark.parametrize("nkept", [0, 1, 2, 3])
@pytest.mark.parametrize("budget", [1, 3, 5, 16, 1000])
def test_blockwise_sums_match_numpy(shape, nkept, budget) -> None:
    a = np.arange(math.prod(shape), dtype=np.int64).reshape(shape) * 7 % 23
    seen: list[int] = []
    out = _sum_blockwise(a, nkept, budget, seen)
    want = a.sum(axis=tuple(range(nkept, a.ndim)), dtype=np.int64)
    assert out.tolist() == np.asarray(want).tolist()
    assert all(size <= budget for size in seen), seen
    if math.prod(shape[:nkept]) == 0:
        assert all(size == 0 for size in seen)  # no outputs: at most empty blocks


def test_blockwise_works_on_strided_views() -> None:
    a = np.arange(2 * 9 * 10, dtype=np.int64).reshape(2, 9, 10)
    view = np.moveaxis(a[:, ::-2, 1::3], 0, -1)  # reduced axis last, negative/strided kept ones
    out = _sum_blockwise(view, 2, 1, [])
    assert out.tolist() == view.sum(axis=-1).tolist()


def test_blockwise_reads_block_elements_at_call_time(monkeypatch) -> None:
    a = np.arange(40, dtype=np.int64).reshape(4, 10)
    seen: list[int] = []
    monkeypatch.setattr(blocks, "BLOCK_ELEMENTS", 4)
    out = _sum_blockwise(a, 1, None, seen)
    assert out.tolist() == a.sum(axis=1).tolist()
    assert max(seen) <= 4
    assert len(seen) == 12  # each row in 3 chunks of <= 4


_EMPTY_OUTPUT_OF_HUGE_INPUT = """
import numpy as np
from onnx_reduce import reduce_l2, reduce_log_sum_exp, reduce_sum
from onnx_reduce.kernels.dispatch import kernel_path

data = np.lib.stride_tricks.as_strided(np.zeros(1, np.{dtype}), (2, 10**17, 0), (0, 0, 0))
with kernel_path("reference"):
    for reduce in (reduce_sum, reduce_l2, reduce_log_sum_exp):
        assert reduce(data, axes=[0, 1], opset=13).shape == (1, 1, 0)
print("done")
"""


@pytest.mark.parametrize("dtype", ["uint32", "float64"])
def test_an_empty_output_reads_no_block_of_a_huge_reduction(dtype: str) -> None:
    """Shape (2, 10**17, 0) over axes 0, 1: no output, so no block of the 2e17 reduced elements
    is visited (the reference ReduceLogSumExp walked them all: a hang, found by the CLI fuzz
    test). In a subprocess, so that a regression fails on the timeout instead of hanging."""
    import subprocess
    import sys

    code = _EMPTY_OUTPUT_OF_HUGE_INPUT.format(dtype=dtype)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.stdout == "done\n", done.stderr
