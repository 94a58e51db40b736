"""Cold reads: onnx-reduce's float32 ReduceSum/ReduceL2 on 64 MiB inputs read from main memory,
beside the read-roofline kernel under the same conditions.

Before every timed call a 1 GiB array is streamed (evicting the input from the caches); each
layout is timed ``--repeats`` times, interleaved with the roofline kernel's 64 MiB pass, and the
medians are printed with their fraction of the roofline's median.

    .venv/bin/python benchmarks/cold.py [--repeats 9] [--ops sum,l2]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numba
import numpy as np

import onnx_reduce
from onnx_reduce.benchmarking import roofline


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--ops", default="sum,l2", help="comma list: sum,l2,lse")
    args = parser.parse_args()
    functions = {"sum": onnx_reduce.reduce_sum, "l2": onnx_reduce.reduce_l2,
                 "lse": onnx_reduce.reduce_log_sum_exp}
    x = np.random.default_rng(0).standard_normal((4096, 4096), np.float32)
    cube = x.reshape(256, 256, 256)
    layouts = {"inner": (x, [1]), "outer": (x, [0]), "all": (x, None),
               "middle": (cube, [1]), "split": (cube, [0, 2])}
    onnx_reduce.reduce_sum(x)  # the first parallel launch picks numba's threading layer
    kernel = roofline._numba_kernel()
    flush = np.ones(2**28, np.float32)  # 1 GiB
    flat = x.reshape(-1)
    cases = {"roofline kernel": lambda: kernel(flat, 32)}
    for op in args.ops.split(","):
        for name, (data, axes) in layouts.items():
            cases[f"{op} {name}"] = (lambda f=functions[op], d=data, a=axes: f(d, a))
    times: dict[str, list[float]] = {name: [] for name in cases}
    for run in cases.values():
        run()  # compile
    for _ in range(args.repeats):
        for name, run in cases.items():
            kernel(flush, 32)
            start = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - start)
    print(f"threading layer: {numba.threading_layer()}, {numba.get_num_threads()} threads")
    roof = statistics.median(times["roofline kernel"])
    for name, samples in times.items():
        t = statistics.median(samples)
        print(f"{name:18s} {t * 1e3:6.2f} ms {x.nbytes / t / 1e9:5.1f} GB/s  {roof / t:4.0%}")


if __name__ == "__main__":
    main()
