"""What a pause before a call costs on this machine: the read-roofline kernel and onnx-reduce's
float32 ReduceSum/ReduceL2, each timed right after itself and after a pause of each kind.

The benchmark suite interleaves its runners, so every onnx-reduce sample follows another
runner's call; some of those last 50+ ms (onnxruntime's ReduceL2 over the outer axis). This
script shows what such a gap alone does, with nothing else running: on a shared VM the
caches and cores the process had are not its own after a pause.

    .venv/bin/python benchmarks/after_pause.py [--repeats 21]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np

import onnx_reduce
from onnx_reduce.benchmarking import roofline


def _busy(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=21)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    big = rng.standard_normal((4096, 4096), np.float32)  # 64 MiB
    small = rng.standard_normal((512, 512), np.float32)  # 1 MiB
    other = np.ones(1 << 26, np.float32)  # 256 MiB
    kernel = roofline._numba_kernel()
    pauses: dict[str, Callable[[], object]] = {
        "none": lambda: None,
        "sleep 5 ms": lambda: time.sleep(0.005),
        "sleep 60 ms": lambda: time.sleep(0.06),
        "busy 60 ms": lambda: _busy(0.06),
        "read 256 MiB": lambda: kernel(other, 1),
    }
    calls: dict[str, Callable[[], object]] = {
        "roofline 64 MiB": roofline.bind_read(big),
        "Sum outer 64 MiB": lambda: onnx_reduce.reduce_sum(big, [0]),
        "L2 outer 64 MiB": lambda: onnx_reduce.reduce_l2(big, [0]),
        "L2 inner 64 MiB": lambda: onnx_reduce.reduce_l2(big, [1]),
        "L2 all 1 MiB": lambda: onnx_reduce.reduce_l2(small, None),
    }
    for run in (*pauses.values(), *calls.values()):
        run()  # compile, fault in
    times: dict[tuple[str, str], list[float]] = {}
    for _ in range(args.repeats):
        for pause_name, pause in pauses.items():
            for call_name, call in calls.items():
                call()  # the state "right after itself"
                pause()
                start = time.perf_counter()
                call()
                times.setdefault((call_name, pause_name), []).append(time.perf_counter() - start)
    print("median ms after each pause (and its ratio to no pause)")
    print(f"{'':18s}" + "".join(f"{name:>20s}" for name in pauses))
    for call_name in calls:
        base = statistics.median(times[(call_name, "none")])
        cells = []
        for pause_name in pauses:
            t = statistics.median(times[(call_name, pause_name)])
            cells.append(f"{t * 1e3:9.3f} ({t / base:4.2f}x)")
        print(f"{call_name:18s}" + "".join(f"{c:>20s}" for c in cells))


if __name__ == "__main__":
    main()
