"""The dask front door's cost: the chunk step of each op's state against numpy on the same
chunk, and whole reductions of a dask array against dask's own (threaded scheduler).

Rounds interleave the contenders (each round: every contender's best of ``--repeats``); the
tables give the median over rounds of the time ratio, ``> 1`` meaning onnx-reduce is slower.

* chunk step: ``states.partial(op, chunk, axes)`` against ``np.sum(chunk)`` (float32 sums
  accumulate in float32 there) and against what a user writes for the same op in numpy
  (``np.sqrt(np.sum(x * x))``; ``m + np.log(np.sum(np.exp(x - m)))`` with ``m`` the max);
* whole array: ``reduce_*(x).compute()`` against ``x.sum()``, ``da.linalg.norm`` and the same
  hand-written LSE in dask, on a ``--mib`` float32 array in memory cut into chunks holding
  whole rows (the in-memory path per chunk) or not (the states), with each result's error in
  ulps against the float64 computation of the same data.

    .venv/bin/python benchmarks/dask_chunk_step.py [--rounds 5] [--repeats 3] [--mib 256]
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time
from collections.abc import Callable

import numpy as np

import onnx_reduce
from onnx_reduce.kernels import states

OPS = ("ReduceSum", "ReduceL2", "ReduceLogSumExp")


def _best(run: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return min(times)


def _numpy_op(op: str, x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    if op == "ReduceSum":
        return np.sum(x, axis=axes)
    if op == "ReduceL2":
        return np.sqrt(np.sum(x * x, axis=axes))
    peak = np.max(x, axis=axes, keepdims=True)
    return np.log(np.sum(np.exp(x - peak), axis=axes)) + np.squeeze(peak, axes)


def chunk_step(rounds: int, repeats: int) -> None:
    chunk = np.random.default_rng(0).standard_normal((1024, 8192)).astype(np.float32)
    print("| op | axes | vs np.sum | vs numpy's own op | states GB/s |\n|---|---|---|---|---|")
    for axes, label in (((1,), "rows"), ((0,), "columns"), ((0, 1), "all")):
        for op in OPS:
            to_sum, to_own, speed = [], [], []
            for _ in range(rounds):
                mine = _best(functools.partial(states.partial, op, chunk, axes), repeats)
                plain = _best(functools.partial(np.sum, chunk, axis=axes), repeats)
                own = _best(functools.partial(_numpy_op, op, chunk, axes), repeats)
                to_sum.append(mine / plain)
                to_own.append(mine / own)
                speed.append(chunk.nbytes / mine / 1e9)
            print(f"| {op} | {label} | {statistics.median(to_sum):.2f} | "
                  f"{statistics.median(to_own):.2f} | {statistics.median(speed):.2f} |")


def _ulps(got: np.ndarray, exact: np.ndarray) -> float:
    spacing = np.spacing(np.abs(exact).astype(np.float32)).astype(np.float64)
    return float(np.max(np.abs(got.astype(np.float64) - exact) / spacing))


def whole_array(rounds: int, repeats: int, mib: int) -> None:
    import dask
    import dask.array as da

    rows = mib * 2**20 // 4 // 8192
    data = (np.random.default_rng(1).standard_normal((rows, 8192)) * 30).astype(np.float32)
    exact = {op: _numpy_op(op, data.astype(np.float64), (1,)) for op in OPS}
    mine = {"ReduceSum": onnx_reduce.reduce_sum, "ReduceL2": onnx_reduce.reduce_l2,
            "ReduceLogSumExp": onnx_reduce.reduce_log_sum_exp}
    theirs = {"ReduceSum": lambda a: a.sum(axis=1),
              "ReduceL2": lambda a: da.linalg.norm(a, axis=1),
              "ReduceLogSumExp": lambda a: _numpy_op("ReduceLogSumExp", a, (1,))}
    print(f"\n{mib} MiB float32 ({rows}x8192), rows reduced, threaded scheduler\n\n"
          "| chunks | op | time ratio (onnx-reduce / dask) | max ulp onnx-reduce | "
          "max ulp dask |\n|---|---|---|---|---|")
    for chunks in ((512, 8192), (512, 1024)):
        x = da.from_array(data, chunks=chunks)
        for op in OPS:
            ours = mine[op](x, axes=[1], keepdims=False)
            dasks = theirs[op](x)
            with dask.config.set(scheduler="threads"):
                ratios = [_best(ours.compute, repeats) / _best(dasks.compute, repeats)
                          for _ in range(rounds)]
                print(f"| {chunks[0]}x{chunks[1]} | {op} | {statistics.median(ratios):.2f} | "
                      f"{_ulps(ours.compute(), exact[op]):.2f} | "
                      f"{_ulps(dasks.compute(), exact[op]):.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--mib", type=int, default=256)
    args = parser.parse_args()
    chunk_step(args.rounds, args.repeats)
    whole_array(args.rounds, args.repeats, args.mib)


if __name__ == "__main__":
    main()
