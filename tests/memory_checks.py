"""The memory a call takes: the growth of the peak resident size and tracemalloc's peak.

Both are read as the least over a few calls. tracemalloc sees every thread's allocations (a
worker's or a library's background thread can allocate mid-call) and a collection can run
finalizers mid-call, so one call can show memory it did not take; a copy the call makes shows in
every call."""

import gc
import tracemalloc

from onnx_reduce.benchmarking.memory import reset_peak, status_kib


def _one_call(call) -> tuple[int, int]:
    gc.collect()
    gc.disable()
    try:
        reset_peak()
        before = status_kib("VmHWM") * 1024
        tracemalloc.start()
        try:
            call()
            traced = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        return status_kib("VmHWM") * 1024 - before, traced
    finally:
        gc.enable()


def least_peaks(call, calls: int = 3) -> tuple[int, int]:
    """(peak resident growth, tracemalloc peak) in bytes, each the least over `calls` calls."""
    peaks = [_one_call(call) for _ in range(calls)]
    return min(p[0] for p in peaks), min(p[1] for p in peaks)
