"""``onnx-reduce eval`` on big-endian ``.npy`` files (the byte order other than this machine's).

The values are those of the same numbers in native order, from exact integer arithmetic; the
printed dtype is the ONNX type's, and a written result is in the machine's byte order.
"""

from __future__ import annotations

from pathlib import Path

import mpmath
import numpy as np
import pytest
from typer.testing import CliRunner

from onnx_reduce.cli import app

#: numpy byte-order code -> the dtype name the summary prints
CODES = {">f2": "float16", ">f4": "float32", ">f8": "float64", ">i4": "int32", ">i8": "int64",
         ">u4": "uint32", ">u8": "uint64"}


def invoke(*args: str | Path):
    return CliRunner().invoke(app, [str(a) for a in args])


def rows(code: str) -> np.ndarray:
    """Rows whose sums and Euclidean norms are exact integers: 3-4-12 -> 13, 2-3-6 -> 7."""
    return np.array([[3, 4, 12], [2, 3, 6]], dtype=code)


@pytest.mark.parametrize("code", CODES)
def test_eval_prints_the_native_values(tmp_path: Path, code: str) -> None:
    path = tmp_path / "x.npy"
    np.save(path, rows(code))
    for op, want in (("sum", [19, 11]), ("l2", [13, 7])):
        result = invoke("eval", op, path, "--axes", "1", "--keepdims", "0")
        assert result.exit_code == 0, result.stderr
        lines = result.stdout.splitlines()
        assert any(line.split()[:3] == ["output", CODES[code], "(2,)"]
                   for line in (line.strip() for line in lines)), result.stdout
        values = next(line for line in lines if line.strip().startswith("values"))
        got = [float(v) for v in values.split("[", 1)[1].rstrip("]").split(",")]
        assert got == want


@pytest.mark.parametrize("code", CODES)
def test_eval_writes_native_byte_order(tmp_path: Path, code: str) -> None:
    path, out = tmp_path / "x.npy", tmp_path / "y.npy"
    np.save(path, rows(code))
    result = invoke("eval", "lse", path, "--axes", "1", "--opset", "18", "-o", out)
    assert result.exit_code == 0, result.stderr
    written = np.load(out)
    assert written.dtype == np.dtype(code).newbyteorder("=")
    assert written.dtype.isnative
    exact = [mpmath.log(mpmath.fsum(mpmath.exp(v) for v in row))
             for row in ([3, 4, 12], [2, 3, 6])]
    if written.dtype.kind == "f":  # within 1 ulp of the exact value (the contract: float64 2)
        for got, want in zip(written[:, 0].tolist(), exact, strict=True):
            ulp = float(np.spacing(written.dtype.type(want)))
            assert abs(mpmath.mpf(got) - want) <= 2 * ulp
    else:
        assert written[:, 0].tolist() == [int(v) for v in exact]  # truncated toward zero
