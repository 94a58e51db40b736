"""Does one runner tax the next? onnx-reduce timed right after each peer's call, against right
after itself and after a pause, for a few float32 cells.

torch's OpenMP threads and XLA's pool keep spinning for a while after a call returns; on a
2-core machine a spinning thread holds a core the next runner's second thread needs. Each
condition is one untimed call (of the peer, or of onnx-reduce itself), an optional pause
(``sleep``), then one timed onnx-reduce call; conditions are interleaved in a shuffled order
each round, medians over the rounds.

    .venv/bin/python benchmarks/after_peer.py [--rounds 41] [--sizes latency,1MiB,64MiB]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable

import numpy as np

from onnx_reduce.benchmarking.cases import Case, make_input
from onnx_reduce.benchmarking.runners import NotAvailable, bind, prepare
from onnx_reduce.benchmarking.suite import _set_numba_threads

PEERS = ("onnxruntime", "torch", "jax")
#: (kind, milliseconds) of the pauses tried between the untimed call and the timed one.
PAUSES = (("sleep", 1.0), ("busy", 0.5), ("busy", 2.0))


def conditions(case: Case, x: np.ndarray, threads: int) -> dict[str, Callable[[], object]]:
    """Condition name -> what runs (untimed) before the timed onnx-reduce call."""
    ours = bind("onnx-reduce", None, x, case)
    out: dict[str, Callable[[], object]] = {"itself": ours}
    for kind, ms in PAUSES:
        out[f"itself + {kind} {ms:g} ms"] = _then_pause(ours, kind, ms)
    for peer in PEERS:
        try:
            call = bind(peer, prepare(peer, case, threads), x, case, threads)
            call()
        except NotAvailable:
            continue
        out[f"{peer}"] = call
        for kind, ms in PAUSES:
            out[f"{peer} + {kind} {ms:g} ms"] = _then_pause(call, kind, ms)
    return out


def _then_pause(call: Callable[[], object], kind: str, ms: float) -> Callable[[], object]:
    def run() -> None:
        call()
        if kind == "sleep":
            time.sleep(ms / 1e3)
        else:
            busy_wait(ms / 1e3)
    return run


def busy_wait(seconds: float) -> None:
    """Spin on this thread (the other cores are left to whatever still runs there)."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def measure(case: Case, rounds: int, threads: int) -> dict[str, float]:
    """Median seconds of the onnx-reduce call after each condition."""
    x = make_input(case.shape, case.np_dtype)
    ours = bind("onnx-reduce", None, x, case)
    ours()
    before = conditions(case, x, threads)
    samples: dict[str, list[float]] = {name: [] for name in before}
    order = list(before)
    shuffle = random.Random(0).shuffle
    for _ in range(rounds):
        shuffle(order)
        for name in order:
            before[name]()
            start = time.perf_counter()
            ours()
            samples[name].append(time.perf_counter() - start)
    return {name: statistics.median(s) for name, s in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=41)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--sizes", default="latency,1MiB,64MiB")
    parser.add_argument("--ops", default="ReduceSum,ReduceLogSumExp")
    args = parser.parse_args()
    _set_numba_threads(args.threads)
    print("| cell | condition before the timed onnx-reduce call | median | / after itself |")
    print("|---|---|---|---|")
    for size in args.sizes.split(","):
        for op in args.ops.split(","):
            case = Case(op, "inner", "float32", size)
            medians = measure(case, args.rounds, args.threads)
            base = medians["itself"]
            for name, value in medians.items():
                print(f"| {case.label} | {name} | {value * 1e6:.1f} µs | {value / base:.2f}× |",
                      flush=True)


if __name__ == "__main__":
    main()
