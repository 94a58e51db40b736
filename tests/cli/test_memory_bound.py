"""Bounded memory: ``eval`` of a ``.npy`` file four times larger than a memory budget, written to
a ``.npy`` output twice the budget, stays within the budget (the peak of Python-traced
allocations, numpy's included, and the growth of the resident set sampled every millisecond), in
a fresh process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np

#: The memory budget the evaluation must stay within, and the sizes relative to it.
BUDGET = 16 * 2**20
INPUT_BYTES = 4 * BUDGET
CHUNK_MIB = 1

_MEASURE = textwrap.dedent("""
    import json, sys, threading, time, tracemalloc
    from onnx_reduce.cli.app import app

    def rss():
        with open("/proc/self/statm") as file:
            return int(file.read().split()[1]) * 4096

    def run(source, output):
        app(["eval", "sum", source, "--axes", "1", "-o", output, "--chunk-mib", sys.argv[4],
             "--scheduler", "threads", "--no-progress"], standalone_mode=False)

    if __name__ == "__main__":
        small, big, out = sys.argv[1:4]
        run(small, out + ".warm.npy")  # imports, compilation, dask's thread pool
        peak = [0]
        done = threading.Event()

        def sample():
            while not done.is_set():
                peak[0] = max(peak[0], rss())
                time.sleep(0.001)

        before = rss()
        sampler = threading.Thread(target=sample)
        sampler.start()
        tracemalloc.start()
        run(big, out)
        traced = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        done.set()
        sampler.join()
        print(json.dumps({"traced": traced, "rss_growth": peak[0] - before}))
""")


def _write_input(path: Path, rows: int) -> None:
    data = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(rows, 2))
    step = 2**20
    for start in range(0, rows, step):
        stop = min(start + step, rows)
        data[start:stop, 0] = np.arange(start, stop, dtype=np.float32) % 1024
        data[start:stop, 1] = 0.5
    data.flush()
    del data


def test_a_file_four_times_the_budget_stays_within_it(tmp_path: Path) -> None:
    rows = INPUT_BYTES // 8
    _write_input(tmp_path / "big.npy", rows)
    _write_input(tmp_path / "small.npy", 2**16)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    child = subprocess.run(
        [sys.executable, "-c", _MEASURE, str(tmp_path / "small.npy"), str(tmp_path / "big.npy"),
         str(tmp_path / "out.npy"), str(CHUNK_MIB)],
        capture_output=True, text=True, timeout=300, env=env,
    )
    assert child.returncode == 0, child.stderr
    measured = json.loads(child.stdout.strip().splitlines()[-1])
    result = np.load(tmp_path / "out.npy", mmap_mode="r")
    assert result.shape == (rows, 1)
    expected = np.arange(rows, dtype=np.float64) % 1024 + 0.5  # exact in float32
    assert np.array_equal(result[::9973, 0], expected[::9973].astype(np.float32))
    assert result.nbytes == 2 * BUDGET
    assert measured["traced"] < BUDGET, measured
    assert measured["rss_growth"] < BUDGET, measured
