"""The array-library peers of the benchmark (torch, jax, scipy): each computes the op the cell
names, on the cell's axes with keepdims, in the cell's dtype, checked against the exact oracle;
a missing library is a clean "n/a", never an error."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import oracle
from onnx_reduce.benchmarking import array_peers
from onnx_reduce.benchmarking.cases import ALL_OPS, LAYOUTS, Case, input_for
from onnx_reduce.benchmarking.runners import NotAvailable, bind, prepare

ROOT = Path(__file__).resolve().parents[2]
HAS = {name: importlib.util.find_spec(name) is not None for name in ("torch", "jax", "scipy")}
OPS = ALL_OPS
DTYPES = ("float32", "float64", "float16", "bfloat16")
#: Small inputs, well conditioned (positive data for sums): a peer that reduces the right axes
#: in the right precision lands within a few ulps; a wrong axis, dtype or formula does not.
ULP_BOUND = 16


def _peer_params():
    out = []
    for peer in array_peers.PEERS:
        mark = pytest.mark.skipif(not HAS[peer], reason=f"{peer} is not installed")
        out.append(pytest.param(peer, marks=mark))
    return out


def _input(case: Case) -> np.ndarray:
    x = input_for(case, seed=5)
    if case.op == "ReduceSum":
        x = np.abs(x.astype(np.float64)).astype(case.np_dtype)
    return x


def _scipy_refuses(dtype: str) -> bool:
    """Whether this scipy's logsumexp raises TypeError for ``dtype`` (bfloat16 with ml_dtypes
    >= 0.7, whose dtype numpy's ``isdtype`` refuses)."""
    from scipy.special import logsumexp

    try:
        logsumexp(np.zeros(2, Case("ReduceSum", "inner", dtype, "latency").np_dtype))
    except TypeError:
        return True
    return False


@pytest.mark.parametrize("peer", _peer_params())
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", OPS)
def test_each_peer_computes_the_cell_within_a_few_ulps_of_the_exact_result(peer, op, dtype):
    if peer == "scipy" and op != "ReduceLogSumExp":
        case = Case(op, "inner", dtype, "latency")
        with pytest.raises(NotAvailable, match="ReduceLogSumExp only"):
            bind(peer, prepare(peer, case, threads=1), _input(case), case, threads=1)
        return
    if peer == "scipy" and _scipy_refuses(dtype):
        case = Case(op, "inner", dtype, "latency")
        with pytest.raises(NotAvailable, match=f"logsumexp refuses {dtype}"):
            bind(peer, prepare(peer, case, threads=1), _input(case), case, threads=1)
        return
    for layout in LAYOUTS:
        case = Case(op, layout, dtype, "latency")
        x = _input(case)
        call = bind(peer, prepare(peer, case, threads=1), x, case, threads=1)
        out = array_peers.to_numpy(call())
        exact = oracle.exact(op, x, list(case.axes), True)
        assert out.shape == exact.shape, (layout, out.shape)
        worst = max(float(oracle.ulp_error(v, e, case.np_dtype))
                    for v, e in zip(out.astype(case.np_dtype).ravel(), exact.ravel(), strict=True))
        assert worst <= ULP_BOUND, (peer, op, dtype, layout, worst)


@pytest.mark.skipif(not HAS["jax"], reason="jax is not installed")
def test_jax_is_compiled_before_timing_and_returns_a_ready_array():
    case = Case("ReduceSum", "split", "float32", "latency")
    x = np.ones(case.shape, np.float32)
    data, fn = array_peers.prepare("jax", case, x, threads=2)
    assert data.shape == x.shape  # on the device already
    out = fn(data)
    assert out.is_ready()
    assert np.asarray(out).reshape(-1).tolist() == [8.0 * 16.0] * 8


@pytest.mark.skipif(not HAS["torch"], reason="torch is not installed")
def test_torch_reads_the_input_in_place_bfloat16_included():
    case = Case("ReduceSum", "inner", "bfloat16", "latency")
    x = np.ones(case.shape, case.np_dtype)
    data, _ = array_peers.prepare("torch", case, x, threads=2)
    assert data.data_ptr() == x.ctypes.data  # torch.from_numpy: no copy
    assert str(data.dtype) == "torch.bfloat16"


def test_a_missing_library_is_not_available(monkeypatch):
    monkeypatch.setattr(array_peers, "installed", lambda peer: False)
    case = Case("ReduceLogSumExp", "inner", "float32", "latency")
    for peer in array_peers.PEERS:
        with pytest.raises(NotAvailable, match="not installed"):
            prepare(peer, case, threads=1)
        with pytest.raises(NotAvailable, match="not installed"):
            array_peers.prepare(peer, case, np.zeros(case.shape, np.float32), threads=1)


def test_the_suite_shows_a_missing_peer_as_n_a(monkeypatch):
    from onnx_reduce.benchmarking import BenchConfig, run_suite

    monkeypatch.setattr(array_peers, "installed", lambda peer: peer == "scipy")
    cfg = BenchConfig(ops=["sum"], layouts=["inner"], dtypes=["f32"], sizes=["latency"],
                      repeats=1, runners=["onnx-reduce", "torch", "jax", "scipy"],
                      roofline_bytes=0, exp_limit=False, min_sample_seconds=1e-4)
    (row,) = run_suite(cfg).rows
    assert row.status["torch"] == "n/a: torch is not installed"
    assert row.status["jax"] == "n/a: jax is not installed"
    assert row.status["scipy"].startswith("n/a: scipy: ReduceLogSumExp only")
    assert row.times["torch"] is None
    assert row.times["onnx-reduce"] > 0


@pytest.mark.skipif(not HAS["torch"], reason="torch is not installed")
def test_torch_waits_passively_when_the_suite_imports_it():
    """Spinning OpenMP workers of torch held a core the next runner needed (after_peer.py):
    the suite sets OMP_WAIT_POLICY=PASSIVE before importing torch, unless told otherwise."""
    code = ("import os; from onnx_reduce.benchmarking import array_peers; "
            "array_peers._torch(); print(os.environ.get('OMP_WAIT_POLICY'))")
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    env["PYTHONPATH"] = str(ROOT / "src")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, check=True, timeout=300)
    assert out.stdout.split()[-1] == "PASSIVE"
    env["OMP_WAIT_POLICY"] = "ACTIVE"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, check=True, timeout=300)
    assert out.stdout.split()[-1] == "ACTIVE"
