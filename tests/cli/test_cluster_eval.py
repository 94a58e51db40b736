"""``eval`` on a distributed cluster: a running scheduler given by ``--address`` (a 2-worker
``LocalCluster`` of processes, started once for the module) and a local cluster started by
``--scheduler distributed``."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
import zarr
from typer.testing import CliRunner

import oracle
from onnx_reduce.cli import app

distributed = pytest.importorskip("distributed")


def invoke(*args: str | Path):
    return CliRunner().invoke(app, [str(a) for a in args])


@pytest.fixture(scope="module")
def address():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=":0", silence_logs=logging.ERROR,
                                  env={"NUMBA_NUM_THREADS": "1"}) as cluster:
        yield cluster.scheduler_address


def sample(shape=(40, 30)) -> np.ndarray:
    return (np.random.default_rng(7).standard_normal(shape) * 30).astype(np.float32)


def test_npy_to_zarr_on_a_running_cluster(tmp_path: Path, address: str) -> None:
    data = sample()
    np.save(tmp_path / "x.npy", data)
    out = tmp_path / "y.zarr"
    result = invoke("eval", "lse", tmp_path / "x.npy", "--axes", "1", "-o", out,
                    "--address", address, "--chunk-mib", str(1 / 1024), "--progress")
    assert result.exit_code == 0, result.stderr
    got = zarr.open_array(store=str(out))[...]
    exact = oracle.exact("ReduceLogSumExp", data, [1], True, False)
    errors = [oracle.ulp_error(g, e, np.float32) for g, e in zip(got.flat, exact.flat, strict=True)]
    assert max(errors) <= 1


def test_zarr_to_npy_on_a_running_cluster(tmp_path: Path, address: str) -> None:
    data = np.arange(-600, 600, dtype=np.int64).reshape(40, 30)
    store = zarr.create_array(store=str(tmp_path / "x.zarr"), shape=data.shape,
                              dtype=data.dtype, chunks=(3, 7))
    store[...] = data
    result = invoke("eval", "l2", tmp_path / "x.zarr", "--axes", "0", "-o", tmp_path / "y.npy",
                    "--address", address, "--scheduler", "distributed")
    assert result.exit_code == 0, result.stderr
    exact = oracle.expected("ReduceL2", data, [0])
    assert np.load(tmp_path / "y.npy").tolist() == exact.tolist()


def test_a_failing_task_on_the_cluster_is_one_line(tmp_path: Path, address: str) -> None:
    store = zarr.create_array(store=str(tmp_path / "x.zarr"), shape=(6, 4), dtype="float32",
                              chunks=(2, 4))
    store[...] = 1.0
    chunk = next(p for p in (tmp_path / "x.zarr" / "c").rglob("*") if p.is_file())
    chunk.write_bytes(b"\x00garbage")
    result = invoke("eval", "sum", tmp_path / "x.zarr", "--address", address)
    assert result.exit_code == 2, result.stderr
    assert result.stderr.startswith("error: ")
    assert "cannot read a chunk" in result.stderr
    assert len(result.stderr.splitlines()) == 1


def test_a_local_cluster_for_the_call(tmp_path: Path) -> None:
    data = sample((8, 5))
    np.save(tmp_path / "x.npy", data)
    result = invoke("eval", "sum", tmp_path / "x.npy", "--keepdims", "0",
                    "--scheduler", "distributed")
    assert result.exit_code == 0, result.stderr
    assert "distributed" in result.stdout
    assert "float32 ()" in result.stdout
