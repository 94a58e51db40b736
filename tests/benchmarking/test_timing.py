"""The calibration probe of the benchmark timing (onnx_reduce.benchmarking.timing)."""

from __future__ import annotations

import time

from onnx_reduce.benchmarking import timing
from onnx_reduce.benchmarking.timing import calibrate


def _slow_first(first_seconds: float, then_seconds: float = 0.0):
    """A call that sleeps ``first_seconds`` once (as a probe a busy machine stalls), then
    ``then_seconds`` each time (0: returns at once, so that no wake-up delay of a loaded
    machine can slow it); the list counts the calls."""
    calls: list[float] = []

    def call():
        seconds = first_seconds if not calls else then_seconds
        if seconds:
            time.sleep(seconds)
        calls.append(time.perf_counter())
    return call, calls


def test_a_probe_slowed_once_does_not_set_the_calls_per_sample():
    """A microsecond call whose first probe a busy core held up for 10 ms still gets several
    calls per 4 ms sample (one probe alone calibrated it to 1)."""
    call, calls = _slow_first(10e-3)
    assert calibrate(call, 4e-3) >= 2
    assert len(calls) == timing.PROBE_CALLS


def test_a_call_of_many_samples_is_probed_twice():
    """A call that lasts PROBE_LONG_SAMPLES samples and more is probed PROBE_LEAST_CALLS
    times, not PROBE_CALLS: the slow peers of a 64 MiB cell (tens of ms a call) cost two probes
    each."""
    sample = 1e-3
    long = timing.PROBE_LONG_SAMPLES * sample * 1.5
    call, calls = _slow_first(long, long)
    assert calibrate(call, sample) == 1
    assert len(calls) == timing.PROBE_LEAST_CALLS < timing.PROBE_CALLS


def test_one_stall_of_many_samples_does_not_set_the_calls_per_sample():
    """A microsecond call whose first probe a busy core held up for 60 ms (15 samples of 4 ms)
    is probed PROBE_CALLS times all the same, and gets several calls per sample."""
    call, calls = _slow_first(0.06)
    assert calibrate(call, 4e-3) >= 2
    assert len(calls) == timing.PROBE_CALLS


def test_fast_calls_get_many_per_sample():
    """Calls of a microsecond or less get many calls per sample, capped at 100 000."""
    assert 10 <= calibrate(lambda: None, 2e-3) <= 100_000
