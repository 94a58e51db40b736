"""Interleaved timing: every round times each runner once, in a fresh random order (seeded), so
drifts of a shared machine hit all runners alike and no runner always follows the same one; the
median of the rounds is reported.

The order matters on a 2-core VM: a call right after a single-threaded runner starts its second
thread on a core that sat idle, and measured 25-35% slower here (64 MiB ReduceSum, both
onnx-reduce and onnxruntime, each right after numpy against right after itself). A rotating
order gives each runner the same predecessor in every round, so that cost fell on one runner
every time.

>>> import numpy as np
>>> calls = {"a": lambda: np.zeros(3), "b": lambda: np.ones(3)}
>>> stats = time_interleaved(calls, repeats=3, min_sample_seconds=1e-4)
>>> sorted(stats), stats["a"].samples, stats["a"].median > 0
(['a', 'b'], 3, True)
"""

from __future__ import annotations

import gc
import math
import random
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass


@dataclass
class Timing:
    """Seconds per call: the median over ``samples`` samples of ``number`` calls each."""

    median: float
    samples: int
    number: int
    best: float


#: A calibration probe is the fastest of PROBE_CALLS calls, or of PROBE_LEAST_CALLS when even
#: the fastest of those lasted PROBE_LONG_SAMPLES samples (a call that long is one per sample;
#: not one call, because a stalled call of a busy machine can take that long too).
PROBE_CALLS = 3
PROBE_LEAST_CALLS = 2
PROBE_LONG_SAMPLES = 10


def calibrate(call: Callable[[], object], min_sample_seconds: float) -> int:
    """Calls per sample so that one sample lasts about ``min_sample_seconds`` (>= 1), from the
    fastest of a few probe calls (:func:`fastest_call`).

    One call's time is the call's plus whatever a busy machine adds; with the other core busy,
    a single probe of a 1 ms call took 4 ms and more now and then, calibrating it to a quarter
    of the calls it needed. The fastest of a few is the call's own time.
    """
    once = fastest_call(call, PROBE_CALLS, PROBE_LEAST_CALLS,
                        PROBE_LONG_SAMPLES * min_sample_seconds)
    if once >= min_sample_seconds:
        return 1
    return min(100_000, max(1, math.ceil(min_sample_seconds / max(once, 1e-7))))


def fastest_call(
    call: Callable[[], object], most: int, least: int, long_seconds: float
) -> float:
    """Seconds of the fastest of up to ``most`` calls of ``call``; after ``least`` calls (at
    least one), stop when even the fastest took ``long_seconds``.

    >>> fastest_call(lambda: None, 3, 2, 1.0) < 1e-3
    True
    """
    best = math.inf
    for made in range(1, max(1, most) + 1):
        start = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - start)
        if made >= least and best >= long_seconds:
            break
    return best


def same_calls_per_sample(calibrated: Mapping[str, int]) -> int:
    """The calls per sample every runner of a cell makes: the fewest any runner was calibrated
    to (the slowest runner's).

    Calls after the first of a sample find the input where the first left it, in cache. Were
    each runner calibrated on its own, a runner fast enough to get two calls per sample would
    be timed half warm against one-call runners timed cold after another runner: on the
    project machine a 64 MiB float32 ReduceL2 right after itself took half the time it took
    after a 60 ms pause (``benchmarks/after_pause.py``).

    >>> same_calls_per_sample({"fast": 40, "slow": 3})
    3
    """
    return max(1, min(calibrated.values(), default=1))


def time_interleaved(
    calls: Mapping[str, Callable[[], object]],
    repeats: int,
    *,
    min_sample_seconds: float = 0.002,
    max_seconds: float = math.inf,
    caps: Mapping[str, int] | None = None,
    numbers: Mapping[str, int] | None = None,
    seed: int = 0,
    hot: bool = False,
) -> dict[str, Timing]:
    """Time each call ``repeats`` times, one round after another, in an order shuffled each
    round (``seed``); calls should be warm already.

    ``hot``: each sample starts with one untimed call of the same runner, so the timed calls
    find the input (and the runner's own state) as its previous call left them: the same input
    again and again. Otherwise a sample's first call follows another runner's.

    ``caps`` limits the samples of some runners; after ``max_seconds`` the rounds stop once each
    runner has 3 samples (or its cap). ``numbers`` gives calls per sample (else calibrated).
    """
    caps = dict(caps or {})
    names = list(calls)
    if numbers is None:
        numbers = {name: calibrate(calls[name], min_sample_seconds) for name in names}
    samples: dict[str, list[float]] = {name: [] for name in names}
    shuffle = random.Random(seed).shuffle
    started = time.perf_counter()
    gc_was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        for _round in range(repeats):
            order = list(names)
            shuffle(order)
            for name in order:
                if len(samples[name]) >= caps.get(name, repeats):
                    continue
                call, number = calls[name], numbers[name]
                if hot:
                    call()
                t0 = time.perf_counter()
                for _ in range(number):
                    call()
                samples[name].append((time.perf_counter() - t0) / number)
            if time.perf_counter() - started > max_seconds and all(
                len(samples[n]) >= min(3, caps.get(n, repeats)) for n in names
            ):
                break
    finally:
        if gc_was_enabled:
            gc.enable()
    return {
        name: Timing(statistics.median(s), len(s), numbers[name], min(s))
        for name, s in samples.items()
        if s
    }
