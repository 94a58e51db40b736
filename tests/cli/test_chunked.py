"""``eval`` in chunks: zarr stores and ``.npy`` files larger than a chunk, read slab by slab and
reduced through the dask front door; ``.npy`` and zarr outputs streamed and atomic; values
against the exact oracle, and the in-memory path kept for small inputs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
import zarr
from onnx import numpy_helper
from typer.testing import CliRunner

import oracle
from onnx_reduce.cli import app, chunked_eval

#: A chunk of about 1 KiB: every test input below spans many chunks.
TINY_CHUNKS = ("--chunk-mib", str(1 / 1024))

#: The contract's ulp bound per float dtype.
ULPS = {np.dtype(np.float32): 1, np.dtype(np.float64): 2}


def invoke(*args: str | Path):
    return CliRunner().invoke(app, [str(a) for a in args])


def sample(dtype: str, shape=(40, 30), seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind in "iu":
        return rng.integers(-1000, 1000, size=shape).astype(dtype)
    # positive floats: the float64 Sum of rows that cancel is the compiled kernel's open gap
    # (README, "The bound, as measured"), not the chunked path's
    return rng.uniform(0.25, 4.0, size=shape).astype(dtype)


def save_zarr(path: Path, data: np.ndarray, chunks=(7, 11), zarr_format: int = 3) -> Path:
    store = zarr.create_array(store=str(path), shape=data.shape, dtype=data.dtype,
                              chunks=chunks, zarr_format=zarr_format)
    store[...] = data
    return path


def assert_within_contract(op: str, data: np.ndarray, axes, got: np.ndarray) -> None:
    exact = oracle.exact(op, data, axes, True, False)
    assert got.shape == exact.shape
    assert got.dtype == data.dtype
    if data.dtype.kind in "iu":
        assert got.tolist() == oracle.round_array(exact, data.dtype).tolist()
        return
    worst = max(oracle.ulp_error(g, e, data.dtype)
                for g, e in zip(got.flat, exact.flat, strict=True))
    assert worst <= ULPS[data.dtype], (op, axes, worst)


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceL2", "ReduceLogSumExp"])
@pytest.mark.parametrize("dtype", ["float32", "float64", "int32"])
@pytest.mark.parametrize("axes", [[0], [1], None])
def test_npy_in_chunks_into_npy(tmp_path: Path, op: str, dtype: str, axes) -> None:
    if op == "ReduceLogSumExp" and dtype == "int32":
        pytest.skip("ReduceLogSumExp-28 takes floats only")
    data = sample(dtype)
    np.save(tmp_path / "x.npy", data)
    out = tmp_path / "y.npy"
    axes_args = ["--axes", ",".join(map(str, axes))] if axes else []
    result = invoke("eval", op, tmp_path / "x.npy", *axes_args, "-o", out, *TINY_CHUNKS)
    assert result.exit_code == 0, result.stderr
    assert_within_contract(op, data, axes, np.load(out))


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_zarr_store_of_either_format_into_zarr_v3(tmp_path: Path, zarr_format: int) -> None:
    data = sample("float32", (50, 20))
    source = save_zarr(tmp_path / "x.zarr", data, zarr_format=zarr_format)
    out = tmp_path / "y.zarr"
    result = invoke("eval", "lse", source, "--axes", "0", "-o", out, *TINY_CHUNKS)
    assert result.exit_code == 0, result.stderr
    written = zarr.open_array(store=str(out), mode="r")
    assert written.metadata.zarr_format == 3
    assert_within_contract("ReduceLogSumExp", data, [0], written[...])


def test_zarr_store_printed(tmp_path: Path) -> None:
    data = np.arange(12, dtype=np.int64).reshape(3, 4)
    result = invoke("eval", "sum", save_zarr(tmp_path / "x.zarr", data, chunks=(1, 2)),
                    "--keepdims", "0", "--axes", "1")
    assert result.exit_code == 0, result.stderr
    assert "[6, 22, 38]" in result.stdout
    assert "int64 (3,)" in result.stdout


def test_fortran_and_big_endian_npy_in_chunks(tmp_path: Path) -> None:
    data = sample("float64", (30, 40))
    np.save(tmp_path / "f.npy", np.asfortranarray(data).astype(">f8"))
    result = invoke("eval", "l2", tmp_path / "f.npy", "--axes", "1", "-o", tmp_path / "y.npy",
                    *TINY_CHUNKS)
    assert result.exit_code == 0, result.stderr
    got = np.load(tmp_path / "y.npy")
    assert got.dtype == np.dtype("=f8")
    assert_within_contract("ReduceL2", data, [1], got)


def test_small_npy_keeps_the_in_memory_path(tmp_path: Path, monkeypatch) -> None:
    def refuse(*args, **kwargs):
        raise AssertionError("a small .npy took the chunked path")

    monkeypatch.setattr("onnx_reduce.cli.cmd_eval.evaluate_chunked", refuse)
    np.save(tmp_path / "x.npy", sample("float32"))
    result = invoke("eval", "sum", tmp_path / "x.npy", "-o", tmp_path / "y.npy")
    assert result.exit_code == 0, result.stderr


def test_an_npy_larger_than_a_chunk_is_read_in_chunks(tmp_path: Path, monkeypatch) -> None:
    seen = []
    original = chunked_eval.evaluate_chunked

    def spy(request, source, array, *rest):
        seen.append(array.npartitions)
        return original(request, source, array, *rest)

    monkeypatch.setattr("onnx_reduce.cli.cmd_eval.evaluate_chunked", spy)
    np.save(tmp_path / "x.npy", sample("float32", (64, 64)))  # 16 KiB: 16 slabs of 1 KiB
    result = invoke("eval", "sum", tmp_path / "x.npy", "--axes", "1", *TINY_CHUNKS)
    assert result.exit_code == 0, result.stderr
    assert seen == [16]


def test_empty_output_and_empty_input(tmp_path: Path) -> None:
    np.save(tmp_path / "e.npy", np.zeros((0, 5), np.float32))
    out = tmp_path / "y.npy"
    result = invoke("eval", "lse", tmp_path / "e.npy", "--axes", "1", "-o", out,
                    "--scheduler", "synchronous")
    assert result.exit_code == 0, result.stderr
    assert np.load(out).shape == (0, 1)
    result = invoke("eval", "lse", tmp_path / "e.npy", "--axes", "0", "-o", tmp_path / "z.zarr",
                    "--scheduler", "synchronous")
    assert result.exit_code == 0, result.stderr
    assert zarr.open_array(store=str(tmp_path / "z.zarr"))[...].tolist() == [[-np.inf] * 5]


@pytest.mark.parametrize("scheduler", ["synchronous", "threads", "processes"])
def test_local_schedulers_agree_with_the_oracle(tmp_path: Path, scheduler: str) -> None:
    data = sample("float32", (40, 30), seed=3)
    np.save(tmp_path / "x.npy", data)
    out = tmp_path / "y.npy"
    result = invoke("eval", "l2", tmp_path / "x.npy", "--axes", "0", "-o", out,
                    "--scheduler", scheduler, "--progress", *TINY_CHUNKS)
    assert result.exit_code == 0, result.stderr
    assert_within_contract("ReduceL2", data, [0], np.load(out))


def test_force_replaces_a_zarr_store_atomically(tmp_path: Path) -> None:
    source = save_zarr(tmp_path / "x.zarr", sample("float64"))
    out = save_zarr(tmp_path / "y.zarr", np.zeros(3), chunks=(3,))
    result = invoke("eval", "sum", source, "-o", out)
    assert result.exit_code == 2
    assert "already exists" in result.stderr
    assert zarr.open_array(store=str(out))[...].tolist() == [0, 0, 0]
    result = invoke("eval", "sum", source, "-o", out, "--force")
    assert result.exit_code == 0, result.stderr
    assert zarr.open_array(store=str(out)).shape == (1, 1)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.zarr", "y.zarr"]


def test_a_failed_zarr_write_leaves_the_old_store(tmp_path: Path, monkeypatch) -> None:
    source = save_zarr(tmp_path / "x.zarr", sample("float64"))
    out = save_zarr(tmp_path / "y.zarr", np.zeros(3), chunks=(3,))

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("dask.array.store", full_disk)
    result = invoke("eval", "sum", source, "-o", out, "--force")
    assert result.exit_code == 2
    assert "No space left on device" in result.stderr
    assert zarr.open_array(store=str(out))[...].tolist() == [0, 0, 0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.zarr", "y.zarr"]


def test_a_failed_npy_stream_leaves_no_file(tmp_path: Path, monkeypatch) -> None:
    np.save(tmp_path / "x.npy", sample("float32"))

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("onnx_reduce.cli.sinks.NpyRegions.__setitem__", full_disk)
    result = invoke("eval", "sum", tmp_path / "x.npy", "--axes", "1", "-o", tmp_path / "y.npy",
                    *TINY_CHUNKS)
    assert result.exit_code == 2
    assert "No space left on device" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.npy"]


def test_pb_input_on_a_scheduler_and_zarr_into_pb(tmp_path: Path) -> None:
    data = sample("float64", (20, 9), seed=5)
    (tmp_path / "x.pb").write_bytes(numpy_helper.from_array(data).SerializeToString())
    result = invoke("eval", "sum", tmp_path / "x.pb", "--axes", "0", "-o", tmp_path / "y.npy",
                    "--scheduler", "synchronous", *TINY_CHUNKS)
    assert result.exit_code == 0, result.stderr
    assert_within_contract("ReduceSum", data, [0], np.load(tmp_path / "y.npy"))
    source = save_zarr(tmp_path / "x.zarr", data)
    result = invoke("eval", "sum", source, "--axes", "0", "-o", tmp_path / "y.pb")
    assert result.exit_code == 0, result.stderr
    written = numpy_helper.to_array(onnx.load_tensor(str(tmp_path / "y.pb")))
    assert_within_contract("ReduceSum", data, [0], written)
