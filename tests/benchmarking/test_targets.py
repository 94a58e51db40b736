"""The targets table (onnx_reduce.benchmarking.targets) and the fair protocol around it: hot and
from-memory regimes, the exp limit, numba's threading layer."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from onnx_reduce.benchmarking import BenchConfig, BenchResults, run_suite, targets
from onnx_reduce.benchmarking.exp_limit import exp_sum_kernel, measure_exp_limit
from onnx_reduce.benchmarking.results import CellResult
from onnx_reduce.benchmarking.timing import time_interleaved

MIB64 = 64 * 2**20
ROOT = Path(__file__).resolve().parents[2]


def _row(op, layout, size, times, hot=None, status=None, nbytes=4096, fraction=None):
    status = status or dict.fromkeys(times, "ok")
    return CellResult(op=op, layout=layout, dtype="float32", size=size, shape=(8, 128),
                      axes=(1,), nbytes=nbytes, kernel="fast", times=times, status=status,
                      hot_times=hot or {}, roofline_fraction=fraction)


def _results():
    rows = [
        # fastest agreeing peer: jax (2 us); torch is faster but wrong (mismatch)
        _row("ReduceSum", "inner", "latency",
             {"onnx-reduce": 1e-6, "torch": 0.5e-6, "jax": 2e-6},
             hot={"onnx-reduce": 1e-6, "torch": 0.5e-6, "jax": 4e-6},
             status={"onnx-reduce": "ok", "torch": "mismatch", "jax": "ok"}),
        _row("ReduceLogSumExp", "inner", "64MiB",
             {"onnx-reduce": 8e-3, "torch": 4e-3, "jax": None},
             hot={"onnx-reduce": 4e-3, "torch": 4e-3, "jax": None}, nbytes=MIB64),
        _row("ReduceSum", "outer", "64MiB",
             {"onnx-reduce": 2e-3, "torch": 3e-3},
             hot={"onnx-reduce": 2e-3, "torch": 3e-3}, nbytes=MIB64, fraction=0.95),
        _row("ReduceL2", "outer", "1MiB", {"onnx-reduce": 1e-5}, hot={"onnx-reduce": 1e-5}),
    ]
    return BenchResults(rows=rows, runners=("onnx-reduce", "torch", "jax"), machine="test",
                        roofline_gbps=40.0, exp_limit_gbps=16.0, regimes=("memory", "hot"))


def test_the_fastest_peer_is_the_quickest_that_agrees():
    row = _results().rows[0]
    assert targets.fastest_peer(row, "memory") == ("jax", 2e-6)
    assert targets.peer_ratio(row, "memory") == pytest.approx(2.0)
    assert targets.peer_ratio(row, "hot") == pytest.approx(4.0)
    assert targets.peer_ratio(_results().rows[3], "memory") is None  # no peer ran


def test_targets_in_each_regime():
    results = _results()
    memory = targets.compute(results, "memory")
    assert memory["cells"] == 3
    assert memory["cells_at_floor"] == 2
    assert memory["lowest"] == ("ReduceLogSumExp inner float32 64MiB", 0.5, "torch")
    assert memory["geomean"] == pytest.approx((2.0 * 0.5 * 1.5) ** (1 / 3))
    assert memory["geomean_per_size"]["latency"] == pytest.approx(2.0)
    assert memory["geomean_per_size"]["1MiB"] is None
    assert memory["lse_gbps"] == {"inner": pytest.approx(MIB64 / 8e-3 / 1e9)}
    assert memory["lse_exp_fraction"]["inner"] == pytest.approx(MIB64 / 8e-3 / 1e9 / 16.0)
    assert memory["roofline_lowest"]["side_by_side"] == pytest.approx(0.95)
    assert memory["roofline_lowest"]["best_pass"] == pytest.approx(MIB64 / 2e-3 / 1e9 / 40)
    hot = targets.compute(results, "hot")
    assert hot["cells_at_floor"] == 3
    assert hot["lowest"][1] == pytest.approx(1.0)
    assert hot["roofline_lowest"]["side_by_side"] is None  # side by side: from memory only


def test_targets_markdown_says_met_or_missed():
    text = targets.markdown(_results())
    lines = text.splitlines()
    assert lines[0] == "| target | hot (same input again and again) | from memory (interleaved) |"
    cells = next(line for line in lines if line.startswith("| every cell"))
    assert "3 of 3; lowest 1.00× (LSE inner f32 64MiB vs torch) — met" in cells
    assert "2 of 3; lowest 0.50× (LSE inner f32 64MiB vs torch) — **missed**" in cells
    lse = next(line for line in lines if line.startswith("| float32 LSE ≥"))
    assert "inner 16.8 — met" in lse
    assert "inner 8.4 — **missed**" in lse
    exp = next(line for line in lines if "exp limit" in line)
    assert "inner 105%" in exp
    assert "inner 52%" in exp
    assert "geomean ≥ 1.5×" in text


def test_the_compact_report_embeds_the_targets_and_every_cell(tmp_path):
    results = _results()
    text = results.to_markdown()
    assert "## Targets (issue 20)" in text
    assert "| Sum inner f32 | 1.00 µs | 0.50 µs ≠ | 2.00 µs | 2.00× jax | 4.00× jax |" in text
    assert "Exp limit: **16.0 GB/s**" in text


def test_the_hot_regime_calls_the_same_runner_right_before_each_sample():
    order: list[str] = []
    calls = {name: (lambda n=name: order.append(n)) for name in ("a", "b", "c")}
    time_interleaved(calls, 5, numbers=dict.fromkeys(calls, 2), hot=True)
    # each sample: one untimed call and two timed ones, all of the same runner
    samples = [order[i:i + 3] for i in range(0, len(order), 3)]
    assert len(samples) == 15
    assert all(len(set(s)) == 1 for s in samples)
    order.clear()
    time_interleaved(calls, 5, numbers=dict.fromkeys(calls, 2))
    assert len(order) == 30  # from memory: no extra call


def test_the_suite_times_both_regimes_and_measures_ulps():
    cfg = BenchConfig(ops=["sum", "lse"], layouts=["inner"], dtypes=["f32"], sizes=["16KiB"],
                      repeats=3, runners=["onnx-reduce", "numpy"], roofline_bytes=0,
                      exp_limit=False, min_sample_seconds=2e-4)
    results = run_suite(cfg)
    assert results.regimes == ("memory", "hot")
    for row in results.rows:
        assert set(row.hot_times) == {"onnx-reduce", "numpy"}
        assert all(t > 0 for t in row.hot_times.values())
        assert row.ulps["onnx-reduce"] <= 1.0  # the contract
        assert 0 <= row.ulps["numpy"] < math.inf
    assert BenchConfig(regimes="hot").regimes == ("hot",)


def test_the_suite_runs_onnx_reduce_on_the_threading_layer_users_get():
    """The roofline kernel launches first; left to numba it would fix GNU OpenMP for the whole
    process (onnx-reduce picks TBB, or workqueue), and OpenMP's spinning workers and torch's
    took the two cores from each other."""
    code = ("from onnx_reduce.benchmarking import BenchConfig, run_suite; "
            "run_suite(BenchConfig(ops=['sum'], layouts=['inner'], dtypes=['f32'], "
            "sizes=['latency'], repeats=1, runners=['onnx-reduce'], roofline_bytes=2**20, "
            "exp_limit=False, min_sample_seconds=1e-4))")
    assert _threading_layer_after(code) in ("tbb", "workqueue")


def test_the_memory_child_runs_onnx_reduce_on_the_threading_layer_users_get():
    """The memory measurement's child sets numba's thread count before its first call, which
    would start numba's own pick (GNU OpenMP here) and measure a layer users do not get."""
    code = ("from onnx_reduce.benchmarking.memory import _child; "
            "_child('ReduceSum', 'inner', 'f32', 2**20, 'onnx-reduce', 2)")
    assert _threading_layer_after(code) in ("tbb", "workqueue")


def _threading_layer_after(code: str) -> str:
    """numba's threading layer after ``code`` ran in a fresh interpreter (no layer preset)."""
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_THREADING_LAYER"}
    env["PYTHONPATH"] = str(ROOT / "src")
    code = f"import numba\n{code}\nprint(numba.threading_layer())"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, check=True, timeout=600)
    return out.stdout.split()[-1]


def test_the_exp_limit_kernel_sums_exp_exactly_enough():
    x = np.linspace(-5, 2, 999, dtype=np.float32)
    total = exp_sum_kernel()(x, 2.0, 4, 2)
    expected = 2 * math.fsum(math.exp(float(v) - 2.0) for v in x)
    assert total == pytest.approx(expected, rel=1e-9)
    assert measure_exp_limit(elements=4096, passes=2, repeats=2, threads=1) > 0
