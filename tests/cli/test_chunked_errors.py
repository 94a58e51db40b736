"""Bad input to the chunked ``eval``: missing or damaged zarr stores, unsupported dtypes, bad
schedulers and addresses, outputs that cannot be written: each one line on stderr, exit status 2,
and no output left behind."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import zarr
from typer.testing import CliRunner

from cli_checks import assert_user_error
from onnx_reduce.cli import app, schedulers


def invoke(*args: str | Path):
    return CliRunner().invoke(app, [str(a) for a in args])


@pytest.fixture
def store(tmp_path: Path) -> Path:
    array = zarr.create_array(store=str(tmp_path / "x.zarr"), shape=(6, 4), dtype="float32",
                              chunks=(2, 4))
    array[...] = np.arange(24, dtype=np.float32).reshape(6, 4)
    return tmp_path / "x.zarr"


def test_missing_store(tmp_path: Path) -> None:
    assert_user_error(invoke("eval", "sum", tmp_path / "none.zarr"), "none.zarr", "no such")


def test_a_file_named_like_a_store(tmp_path: Path) -> None:
    (tmp_path / "f.zarr").write_bytes(b"not a directory")
    assert_user_error(invoke("eval", "sum", tmp_path / "f.zarr"), "f.zarr", "not a zarr store")


@pytest.mark.parametrize("metadata", [b"{not json", b'{"zarr_format": 3, "node_type": "array"}',
                                      b'{"zarr_format": 9}', b"\x00\xff" * 40])
def test_damaged_metadata(store: Path, metadata: bytes) -> None:
    (store / "zarr.json").write_bytes(metadata)
    assert_user_error(invoke("eval", "sum", store), "x.zarr", "not a readable zarr store")


def test_damaged_chunk(store: Path) -> None:
    chunk = next(p for p in (store / "c").rglob("*") if p.is_file())
    chunk.write_bytes(b"\x00garbage" * 3)
    line = assert_user_error(invoke("eval", "sum", store, "--scheduler", "synchronous"))
    assert "internal error" not in line


def test_group_instead_of_array(tmp_path: Path) -> None:
    group = zarr.open_group(store=str(tmp_path / "g.zarr"), mode="w")
    group.create_array("weights", shape=(3,), dtype="float32")
    assert_user_error(invoke("eval", "sum", tmp_path / "g.zarr"), "is a zarr group", "weights")


@pytest.mark.parametrize("dtype", ["complex64", "U4"])
def test_unsupported_dtype(tmp_path: Path, dtype: str) -> None:
    zarr.create_array(store=str(tmp_path / "c.zarr"), shape=(3,), dtype=dtype, chunks=(3,))
    assert_user_error(invoke("eval", "sum", tmp_path / "c.zarr"), "c.zarr", "unsupported")


def test_a_dtype_the_version_refuses(tmp_path: Path) -> None:
    array = zarr.create_array(store=str(tmp_path / "i.zarr"), shape=(3,), dtype="int32",
                              chunks=(3,))
    array[...] = [1, 2, 3]
    assert_user_error(invoke("eval", "lse", tmp_path / "i.zarr"), "ReduceLogSumExp-28")


def test_axis_out_of_range(store: Path) -> None:
    assert_user_error(invoke("eval", "sum", store, "--axes", "5"), "ReduceSum-13", "5")


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["--scheduler", "gpu"], ["unknown scheduler", "gpu"]),
        (["--scheduler", "threads", "--address", "tcp://127.0.0.1:9"], ["--address needs"]),
        (["--chunk-mib", "0"], ["--chunk-mib"]),
        (["--chunk-mib", "nan"], ["--chunk-mib"]),
        (["--address", "nonsense://x"], ["cannot connect", "nonsense://x"]),
    ],
)
def test_bad_execution_options(store: Path, args: list[str], fragments: list[str]) -> None:
    assert_user_error(invoke("eval", "sum", store, *args), *fragments)


def test_unreachable_scheduler(store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(schedulers, "CONNECT_TIMEOUT", 0.5)
    line = assert_user_error(invoke("eval", "sum", store, "--address", "tcp://127.0.0.1:9"),
                             "cannot connect", "tcp://127.0.0.1:9")
    assert "internal error" not in line


def test_a_failed_connection_leaves_dask_s_default_scheduler_alone(
        store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # distributed's Client sets itself as the default before it connects; a failed connection
    # left "dask.distributed" as the scheduler of every later computation in the process
    import dask

    monkeypatch.setattr(schedulers, "CONNECT_TIMEOUT", 0.5)
    before = dask.config.get("scheduler", None)
    for address in ("tcp://127.0.0.1:9", "nonsense://x"):
        assert_user_error(invoke("eval", "sum", store, "--address", address), "cannot connect")
        assert dask.config.get("scheduler", None) == before, address


def test_output_onto_a_directory_that_is_not_a_store(store: Path, tmp_path: Path) -> None:
    (tmp_path / "keep.zarr").mkdir()
    (tmp_path / "keep.zarr" / "notes.txt").write_text("mine")
    assert_user_error(invoke("eval", "sum", store, "-o", tmp_path / "keep.zarr", "--force"),
                      "not a zarr store")
    assert (tmp_path / "keep.zarr" / "notes.txt").read_text() == "mine"


def test_output_store_onto_a_file(store: Path, tmp_path: Path) -> None:
    (tmp_path / "f.zarr").write_text("mine")
    assert_user_error(invoke("eval", "sum", store, "-o", tmp_path / "f.zarr", "--force"),
                      "is a file")
    assert (tmp_path / "f.zarr").read_text() == "mine"


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_unwritable_destination(store: Path, tmp_path: Path) -> None:
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        assert_user_error(invoke("eval", "sum", store, "-o", folder / "y.zarr"), "cannot write")
    finally:
        folder.chmod(0o700)


def test_destination_on_a_read_only_file_system(store: Path) -> None:
    if not Path("/proc/self").is_dir():
        pytest.skip("no /proc")
    assert_user_error(invoke("eval", "sum", store, "-o", "/proc/y.zarr"), "cannot write")


def test_unknown_format(store: Path, tmp_path: Path) -> None:
    assert_user_error(invoke("eval", "sum", store, "-o", tmp_path / "y.h5"),
                      "unsupported output format", ".zarr")


@pytest.mark.parametrize("missing", ["zarr", "dask", "distributed"])
def test_a_missing_optional_library(store: Path, monkeypatch, missing: str) -> None:
    from onnx_reduce.cli import chunked_eval

    monkeypatch.setattr(chunked_eval, "installed", lambda module: module != missing)
    args = ["--scheduler", "distributed"] if missing == "distributed" else []
    assert_user_error(invoke("eval", "sum", store, *args), f"needs {missing}",
                      "pip install 'onnx-reduce[")


def test_without_dask_a_large_npy_takes_the_memory_map(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr("onnx_reduce.cli.cmd_eval.installed", lambda module: False)
    np.save(tmp_path / "x.npy", np.full((64, 64), 0.5, np.float32))
    result = invoke("eval", "sum", tmp_path / "x.npy", "--chunk-mib", str(1 / 1024))
    assert result.exit_code == 0, result.stderr
    assert "2048" in result.stdout
    assert "chunks" not in result.stdout
