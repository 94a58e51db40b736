"""The measured read roofline: how fast this machine streams a large array from memory.

A numba ``parallel`` sum of float32 over ``nbytes`` (default 256 MiB: the project machine
reports a 480 MiB L3, yet passes over 1, 2 and 4 GiB measure within 3% of the 256 MiB one),
split in chunks over ``threads`` threads; it shares no code with onnx-reduce's kernels. Where
numba is missing, single-threaded ``np.add.reduce`` stands in. The best of ``repeats`` passes
is the roofline (an upper bound: shared-machine noise only ever slows a pass down).

:func:`bind_read` gives the same kernel as a call over a benchmark cell's own input, to time
side by side with the runners (same cache state, same noise).

>>> measure_read_roofline(nbytes=2**20, repeats=2) > 0
True
>>> float(bind_read(np.ones((8, 125), np.float32))())
1000.0
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from .runners import set_numba_threads

#: Chunks per thread of one pass (each thread one contiguous block of them: numba's schedule).
CHUNKS_PER_THREAD = 16
_kernel: Any = None
LAST_METHOD = "not measured"


def _numba_kernel() -> Any:
    global _kernel
    if _kernel is None:
        from numba import njit, prange

        from ..kernels.fast._common import choose_threading_layer

        choose_threading_layer()  # the layer onnx-reduce's kernels run on (numba's own pick
        # here is GNU OpenMP, whose spinning workers and torch's take the cores from each other)

        @njit(parallel=True, fastmath=True, cache=False)
        def chunked_sum(x, nchunks):  # pragma: no cover - compiled
            n = x.size
            step = (n + nchunks - 1) // nchunks
            partial = np.zeros(nchunks, np.float64)
            for c in prange(nchunks):
                # the sum of a slice vectorizes (an indexed loop over a range does not)
                partial[c] = x[c * step:min(n, (c + 1) * step)].sum()
            return partial.sum()

        _kernel = chunked_sum
    return _kernel


def bind_read(x: np.ndarray, threads: int = 2) -> Callable[[], object]:
    """A call that streams C-contiguous float32 ``x`` once with the roofline kernel (chunked
    for ``threads`` threads; numba's thread count is the caller's to set)."""
    if x.dtype != np.float32 or not x.flags.c_contiguous:
        raise ValueError("the read-roofline kernel reads C-contiguous float32 arrays")
    kernel = _numba_kernel()
    flat = x.reshape(-1)
    nchunks = CHUNKS_PER_THREAD * max(1, threads)
    return lambda: kernel(flat, nchunks)


def measure_read_roofline(nbytes: int = 256 * 2**20, repeats: int = 10, threads: int = 2) -> float:
    """Streaming-read bandwidth in GB/s (10**9 bytes per second), best of ``repeats`` passes."""
    global LAST_METHOD
    x = np.ones(max(1, nbytes // 4), np.float32)  # written once: every page is resident
    try:
        import numba

        kernel = _numba_kernel()
        previous = set_numba_threads(threads)
        nchunks = CHUNKS_PER_THREAD * threads

        def one_pass() -> object:
            return kernel(x, nchunks)

        LAST_METHOD = f"numba parallel float32 sum, {numba.get_num_threads()} threads"
    except ImportError:  # pragma: no cover - numba is a dependency
        previous = None

        def one_pass() -> object:
            return np.add.reduce(x)

        LAST_METHOD = "np.add.reduce float32 (numba missing: 1 thread)"
    try:
        one_pass()  # compile / warm
        best = float("inf")
        for _ in range(max(1, repeats)):
            start = time.perf_counter()
            one_pass()
            best = min(best, time.perf_counter() - start)
    finally:
        set_numba_threads(previous)
    LAST_METHOD += f", {x.nbytes / 2**20:.0f} MiB, best of {max(1, repeats)}"
    return x.nbytes / best / 1e9
