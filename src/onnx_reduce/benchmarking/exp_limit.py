"""The exp limit: how fast this machine sums exp of float32 data that sits in cache.

ReduceLogSumExp cannot read faster than it can evaluate exp. This kernel does nothing else:
a numba ``parallel`` loop over a contiguous float32 array small enough for the per-core caches
(256 KiB, split over the threads), each element widened to float64, shifted by the array's
maximum and passed to the same exp as onnx-reduce's float32 LogSumExp kernels' guessed
shifts (:func:`onnx_reduce.kernels.fast._exp.exp_open`, imported, not copied), the terms
summed with reassociation allowed (vector lanes, as wide as the kernels': 512 bits where the
CPU has them), many passes per call. Reported as input
GB/s (10**9 bytes of float32 per second), the best of several calls: an upper bound for
ReduceLogSumExp float32 in any layout, which the report gives as a fraction of it.

>>> gbps = measure_exp_limit(elements=4096, passes=2, repeats=2, threads=1)
>>> gbps > 0
True
>>> x = np.zeros(1000, np.float32)
>>> round(float(exp_sum_kernel()(x, 0.0, 4, 3)))  # exp(0) summed 1000 times, 3 passes
3000
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from .runners import set_numba_threads

#: float32 elements of the in-cache array (256 KiB).
ELEMENTS = 1 << 16
#: Passes over the array per call (about 16 M exp per call).
PASSES = 256
#: Chunks of the array per thread (handed out by numba's prange).
CHUNKS_PER_THREAD = 4
_kernel: Any = None


def exp_sum_kernel() -> Any:
    """The compiled kernel ``(x, m, nchunks, passes) -> sum over passes of exp(x - m)``."""
    global _kernel
    if _kernel is None:
        _kernel = _compile()
    return _kernel


def _compile() -> Any:
    from numba import njit, prange

    from ..kernels.fast._common import choose_threading_layer, wide_vectors
    from ..kernels.fast._exp import exp_open

    choose_threading_layer()  # before numba would pick its own at the first launch

    @njit(fastmath={"reassoc"}, cache=False)
    def exp_terms(base, start, count, m, passes):  # pragma: no cover - compiled
        # the kernels' own form: a slice taken here, in a serial function, vectorizes, with
        # the vector width theirs
        wide_vectors()
        seg = base[start:start + count]
        total = 0.0
        for _ in range(passes):
            for i in range(seg.size):
                total += exp_open(np.float64(seg[i]) - m)
        return total

    @njit(parallel=True, cache=False)
    def exp_sum(x, m, nchunks, passes):  # pragma: no cover - compiled
        n = x.size
        step = (n + nchunks - 1) // nchunks
        partial = np.zeros(nchunks, np.float64)
        for c in prange(nchunks):
            start = c * step
            partial[c] = exp_terms(x, start, max(0, min(n, start + step) - start), m, passes)
        return partial.sum()

    return exp_sum


def measure_exp_limit(
    elements: int = ELEMENTS, passes: int = PASSES, repeats: int = 10, threads: int = 2
) -> float:
    """exp throughput in float32 GB/s on ``threads`` threads: the best of ``repeats`` calls
    of :func:`exp_sum_kernel` over an in-cache standard-normal array."""
    x = np.random.default_rng(0).standard_normal(elements, np.float32)
    m = float(np.max(x))
    kernel = exp_sum_kernel()
    previous = set_numba_threads(threads)
    nchunks = CHUNKS_PER_THREAD * max(1, threads)
    try:
        kernel(x, m, nchunks, 1)  # compile, bring the array into cache
        best = float("inf")
        for _ in range(max(1, repeats)):
            start = time.perf_counter()
            kernel(x, m, nchunks, passes)
            best = min(best, time.perf_counter() - start)
    finally:
        set_numba_threads(previous)
    return x.nbytes * passes / best / 1e9
