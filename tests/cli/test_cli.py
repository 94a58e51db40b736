"""The ``onnx-reduce`` command line, driven as a user would: typer's CliRunner for most tests, a
real subprocess of the installed script for a few.

Expected values come from exact arithmetic (math.fsum, fractions, math.isqrt, mpmath) or from
the spec text; the ONNX schemas (onnx.defs) are the authority for ``info``.
"""

from __future__ import annotations

import importlib.util
import math
import os
import shutil
import subprocess
import sys
import tracemalloc
from fractions import Fraction
from pathlib import Path

import ml_dtypes
import mpmath
import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper
from typer.testing import CliRunner

from cli_checks import assert_user_error
from onnx_reduce.cli import app, peers, tensors
from onnx_reduce.cli.options import op_name

BF16 = np.dtype(ml_dtypes.bfloat16)
HAS_BENCH = importlib.util.find_spec("onnx_reduce.benchmarking") is not None
HAS_CONFORMANCE = importlib.util.find_spec("onnx_reduce.conformance") is not None


def invoke(*args: str | Path):
    """Run the CLI in-process; stdout and stderr are kept apart."""
    return CliRunner().invoke(app, [str(a) for a in args])


def script() -> list[str]:
    """The installed ``onnx-reduce`` script next to this interpreter, else ``python -m``."""
    installed = Path(sys.executable).with_name("onnx-reduce")
    if installed.exists():
        return [str(installed)]
    found = shutil.which("onnx-reduce")
    return [found] if found else [sys.executable, "-m", "onnx_reduce.cli"]


def run_script(*args: str | Path, module: bool = False) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "onnx_reduce.cli"] if module else script()
    return subprocess.run(
        [*command, *map(str, args)], capture_output=True, text=True, timeout=120,
        env={**os.environ, "COLUMNS": "100"},
    )


def save(path: Path, array: np.ndarray) -> Path:
    if path.suffix == ".pb":
        path.write_bytes(numpy_helper.from_array(array, "data").SerializeToString())
    else:
        np.save(path, array)
    return path


def load(path: Path) -> np.ndarray:
    if path.suffix == ".pb":
        return numpy_helper.to_array(onnx.load_tensor(str(path)))
    return np.load(path)



# --------------------------------------------------------------------------------------------
# help


def test_help_lists_every_command() -> None:
    result = invoke("--help")
    assert result.exit_code == 0
    for command in ("eval", "run", "conformance", "bench", "info", "showcase"):
        assert command in result.stdout


def test_bare_command_shows_help() -> None:
    result = invoke()
    assert result.exit_code == 0
    assert "eval" in result.stdout
    assert "showcase" in result.stdout


@pytest.mark.parametrize("command", ["eval", "run", "conformance", "bench", "info", "showcase"])
def test_every_command_has_help_with_an_example(command: str) -> None:
    result = invoke(command, "--help")
    assert result.exit_code == 0
    assert f"Example: onnx-reduce {command}" in result.stdout


# --------------------------------------------------------------------------------------------
# eval


def test_eval_prints_a_summary(tmp_path: Path) -> None:
    x = save(tmp_path / "x.npy", np.array([[800.0, 800.0], [1.0, 2.0]]))
    result = invoke("eval", "logsumexp", x, "--axes", "1", "--keepdims", "0")
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    assert "ReduceLogSumExp-28" in out  # the newest version by default
    assert "float64 (2, 2)" in out
    assert "float64 (2,)" in out
    values = next(line for line in out.splitlines() if line.strip().startswith("values"))
    first, second = (float(v) for v in values.split("[", 1)[1].rstrip("]").split(","))
    exact = [mpmath.mpf(800) + mpmath.log(2), mpmath.log(mpmath.e + mpmath.e**2)]
    for got, want in zip((first, second), exact, strict=True):
        assert abs(got - float(want)) <= 2 * math.ulp(float(want))  # the float64 contract


@pytest.mark.parametrize(
    ("name", "label"),
    [("sum", "ReduceSum-13"), ("ReduceSum", "ReduceSum-13"), ("reduce_l2", "ReduceL2-18"),
     ("L2", "ReduceL2-18"), ("lse", "ReduceLogSumExp-28"),
     ("REDUCELOGSUMEXP", "ReduceLogSumExp-28"), ("sumsquare", "ReduceSumSquare-18"),
     ("sum_sq", "ReduceSumSquare-18"), ("reduce-sum-square", "ReduceSumSquare-18"),
     ("logsum", "ReduceLogSum-28"), ("ReduceLogSum", "ReduceLogSum-28")],
)
def test_eval_accepts_onnx_and_short_names(tmp_path: Path, name: str, label: str) -> None:
    x = save(tmp_path / "x.npy", np.array([1.0, 2.0], np.float32))
    result = invoke("eval", name, x)
    assert result.exit_code == 0, result.stderr
    assert label in result.stdout


def test_eval_opset_selects_the_version_in_force(tmp_path: Path) -> None:
    data = np.array([[3, 4], [5, 12]], np.int64)
    x = save(tmp_path / "x.npy", data)
    out = tmp_path / "y.npy"
    # opset 17: ReduceL2-13, axes an attribute
    result = invoke("eval", "l2", x, "--opset", "17", "--axes", "1", "-o", out)
    assert result.exit_code == 0, result.stderr
    assert "ReduceL2-13" in result.stdout
    got = np.load(out)
    assert got.dtype == np.int64
    assert got.tolist() == [[math.isqrt(9 + 16)], [math.isqrt(25 + 144)]]


def test_eval_axes_comma_and_repeated_forms_agree(tmp_path: Path) -> None:
    data = np.arange(24, dtype=np.float64).reshape(2, 3, 4) / 7
    x = save(tmp_path / "x.npy", data)
    one, two = tmp_path / "a.npy", tmp_path / "b.npy"
    assert invoke("eval", "sum", x, "--axes", "0,2", "-o", one).exit_code == 0
    assert invoke("eval", "sum", x, "--axes", "0", "--axes", "-1", "-o", two).exit_code == 0
    a, b = np.load(one), np.load(two)
    assert a.shape == b.shape == (1, 3, 1)
    np.testing.assert_array_equal(a, b)
    for j in range(3):
        exact = float(sum(Fraction(float(v)) for v in data[:, j, :].ravel()))
        assert a[0, j, 0] == exact


def test_eval_noop_with_empty_axes_is_abs_for_l2(tmp_path: Path) -> None:
    data = np.array([[-3.0, 4.0], [0.5, -0.0]], np.float32)
    x = save(tmp_path / "x.npy", data)
    out = tmp_path / "y.npy"
    result = invoke("eval", "l2", x, "--axes", "", "--noop-with-empty-axes", "-o", out)
    assert result.exit_code == 0, result.stderr
    np.testing.assert_array_equal(np.load(out), np.abs(data))  # spec: no reduction, |x|


def test_eval_pb_round_trip(tmp_path: Path) -> None:
    data = np.array([[1e8, 1.0, -1e8], [0.1, 0.2, 0.3]], np.float32)
    x = save(tmp_path / "x.pb", data)
    out = tmp_path / "y.pb"
    result = invoke("eval", "sum", x, "--axes", "1", "--keepdims", "0", "-o", out)
    assert result.exit_code == 0, result.stderr
    got = load(out)
    assert got.dtype == np.float32
    exact = [sum(Fraction(float(v)) for v in row) for row in data]
    np.testing.assert_array_equal(got, np.array([float(e) for e in exact], np.float32))


def test_eval_bfloat16_pb_round_trip(tmp_path: Path) -> None:
    data = np.array([1.5, 2.25, -0.5, 0.0078125], BF16)
    x = save(tmp_path / "x.pb", data)
    out = tmp_path / "y.pb"
    result = invoke("eval", "sum", x, "-o", out)
    assert result.exit_code == 0, result.stderr
    got = load(out)
    assert got.dtype == BF16
    # the exact sum 3.2578125 lies halfway between two bfloat16 values: one rounding, to even
    exact = float(sum(Fraction(float(v)) for v in data))
    assert exact == 3.2578125
    assert got.reshape(-1)[0] == ml_dtypes.bfloat16(exact)
    assert float(got.reshape(-1)[0]) == 3.25
    summary = invoke("eval", "sum", x)
    assert "bfloat16 (4,)" in summary.stdout
    assert "values  [3.25]" in summary.stdout


def test_eval_refuses_bfloat16_into_npy(tmp_path: Path) -> None:
    x = save(tmp_path / "x.pb", np.array([1.0, 2.0], BF16))
    assert_user_error(invoke("eval", "sum", x, "-o", tmp_path / "y.npy"), "bfloat16", ".pb")
    assert not (tmp_path / "y.npy").exists()


def test_eval_memory_maps_npy_input(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    x = save(tmp_path / "x.npy", np.ones((64, 64), np.float32))
    seen = []
    read = tensors.read_tensor

    def spy(path):
        array = read(path)
        seen.append(array)
        return array

    monkeypatch.setattr(tensors, "read_tensor", spy)
    result = invoke("eval", "sum", x)
    assert result.exit_code == 0, result.stderr
    assert len(seen) == 1
    assert isinstance(seen[0], np.memmap)
    assert "4096" in result.stdout


def test_eval_does_not_read_a_large_npy_whole(tmp_path: Path) -> None:
    path = tmp_path / "big.npy"
    big = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(4096, 4096))
    big[:] = 0.5  # 64 MiB
    big.flush()
    del big
    nbytes = 4096 * 4096 * 4
    invoke("eval", "sum", path, "--axes", "1")  # untraced: loading the compiled kernels allocates
    tracemalloc.start()
    try:
        result = invoke("eval", "sum", path, "--axes", "1")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.exit_code == 0, result.stderr
    assert "2048" in result.stdout  # 4096 * 0.5
    assert peak < nbytes / 8, f"peak {peak / 2**20:.1f} MiB for a {nbytes / 2**20:.0f} MiB input"


# --------------------------------------------------------------------------------------------
# output files: atomic, never overwritten without --force


def test_existing_output_needs_force(tmp_path: Path) -> None:
    x = save(tmp_path / "x.npy", np.array([1.0, 2.0]))
    out = tmp_path / "y.npy"
    out.write_bytes(b"precious")
    assert_user_error(invoke("eval", "sum", x, "-o", out), "already exists", "--force")
    assert out.read_bytes() == b"precious"
    result = invoke("eval", "sum", x, "-o", out, "--force")
    assert result.exit_code == 0, result.stderr
    assert np.load(out).tolist() == [3.0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.npy", "y.npy"]  # no leftovers


@pytest.mark.parametrize("chunked", [False, True], ids=["in-memory", "chunked"])
def test_an_upper_case_npy_output_holds_the_result(tmp_path: Path, chunked: bool) -> None:
    """np.save appends ".npy" to a name not ending in lower-case ".npy": the temporary got
    the data and KEEP.NPY was left empty (with --force, an existing file wiped)."""
    x = save(tmp_path / "x.npy", np.arange(6.0).reshape(2, 3))
    out = tmp_path / "KEEP.NPY"
    out.write_bytes(x.read_bytes())
    extra = ["--scheduler", "synchronous"] if chunked else []
    result = invoke("eval", "sum", x, "--axes", "0", "-o", out, "--force", *extra)
    assert result.exit_code == 0, result.stderr
    assert np.load(out).tolist() == [[3.0, 5.0, 7.0]]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["KEEP.NPY", "x.npy"]


def test_a_long_output_name_is_written_and_a_too_long_input_name_is_an_error(
        tmp_path: Path) -> None:
    """A valid 254-byte name gets a temporary whose name fits too; a name the system refuses
    is a user error, not an internal one."""
    x = save(tmp_path / "x.npy", np.array([1.0, 2.0]))
    out = tmp_path / ("b" * 250 + ".npy")
    assert invoke("eval", "sum", x, "-o", out).exit_code == 0
    assert np.load(out).tolist() == [3.0]
    assert_user_error(invoke("eval", "sum", tmp_path / ("c" * 300 + ".npy")),
                      "cannot read (File name too long)")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes")
def test_a_pipe_is_refused_instead_of_read_without_end(tmp_path: Path) -> None:
    pipe = tmp_path / "f.npy"
    os.mkfifo(pipe)
    assert_user_error(invoke("eval", "sum", pipe), "f.npy: not a regular file (a pipe or a")


def test_chunked_bfloat16_results_bound_for_npy_or_zarr_are_refused_first(tmp_path: Path) -> None:
    x = save(tmp_path / "x.pb", np.ones((4, 6)).astype(ml_dtypes.bfloat16))
    for name, message in (("y.npy", "numpy's .npy format has no bfloat16"),
                          ("y.zarr", "zarr has no bfloat16 data type")):
        result = invoke("eval", "sum", x, "--axes", "1", "--scheduler", "synchronous", "-o",
                        tmp_path / name)
        assert_user_error(result, message, "write a .pb file instead")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.pb"]


def test_new_output_gets_ordinary_permissions(tmp_path: Path) -> None:
    x = save(tmp_path / "x.npy", np.array([1.0, 2.0]))
    out = tmp_path / "y.npy"
    assert invoke("eval", "sum", x, "-o", out).exit_code == 0
    umask = os.umask(0)
    os.umask(umask)
    assert out.stat().st_mode & 0o777 == 0o666 & ~umask


def test_failed_write_leaves_the_old_file_and_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    x = save(tmp_path / "x.npy", np.array([1.0, 2.0]))
    out = tmp_path / "y.npy"
    out.write_bytes(b"precious")

    def crash(path, *args, **kwargs):
        Path(path).write_bytes(b"half a fi")
        raise OSError("disk full")

    monkeypatch.setattr(tensors.np, "save", crash)
    result = invoke("eval", "sum", x, "-o", out, "--force")
    assert result.exit_code != 0
    assert out.read_bytes() == b"precious"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.npy", "y.npy"]


def test_output_directory_must_exist(tmp_path: Path) -> None:
    x = save(tmp_path / "x.npy", np.array([1.0]))
    assert_user_error(invoke("eval", "sum", x, "-o", tmp_path / "nope" / "y.npy"),
                      "no such directory")


# --------------------------------------------------------------------------------------------
# user errors: one line on stderr, exit status 2, no traceback (--debug shows it)


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    garbage = tmp_path / "garbage.npy"
    garbage.write_bytes(b"\x00\x01 this is not numpy")
    bad_pb = tmp_path / "garbage.pb"
    bad_pb.write_bytes(b"\xff\xff\xff\xff not a protobuf")
    text = tmp_path / "x.txt"
    text.write_text("1 2 3")
    objects = tmp_path / "objects.npy"
    np.save(objects, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    short = tmp_path / "short.npy"
    save(short, np.ones((100, 100)))
    short.write_bytes(short.read_bytes()[:1000])  # the header claims 80000 bytes of data
    return {
        "objects": objects,
        "short": short,
        "f32": save(tmp_path / "f32.npy", np.ones((2, 3), np.float32)),
        "i32": save(tmp_path / "i32.npy", np.arange(3, dtype=np.int32)),
        "garbage": garbage,
        "bad_pb": bad_pb,
        "text": text,
        "missing": tmp_path / "missing.npy",
    }


EVAL_ERRORS = [
    (["sum", "{missing}"], ["missing.npy", "no such file"]),
    (["sum", "{garbage}"], ["garbage.npy", "not a readable .npy",
                            "no .npy header; numpy would unpickle it, which onnx-reduce never"]),
    (["sum", "{objects}"], ["objects.npy", "an array of Python objects (dtype object)"]),
    (["sum", "{short}"], ["short.npy", "its header's shape and dtype do not match the file's"]),
    (["sum", "{bad_pb}"], ["garbage.pb", "not an ONNX TensorProto"]),
    (["sum", "{text}"], ["x.txt", "unsupported input format"]),
    (["sum", "{f32}", "--axes", "0,x"], ["bad axes", "'x' is not an integer"]),
    (["sum", "{f32}", "--axes", "1_0"], ["bad axes", "'1_0' is not an integer"]),
    (["sum", "{f32}", "--axes", "\u0661"], ["bad axes", "is not an integer"]),
    (["sum", "{f32}", "--axes", "5"], ["ReduceSum-13: axis 5 is out of range"]),
    (["sum", "{f32}", "--axes", "1,-1"], ["ReduceSum-13", "more than once"]),
    (["logsumexp", "{i32}"], ["ReduceLogSumExp-28: data type 'int32' is not allowed"]),
    (["max", "{f32}"], ["unknown operator 'max'", "ReduceSum"]),
    (["sum", "{f32}", "--opset", "0"], ["opset must be an integer >= 1"]),
    (["sum", "{f32}", "--keepdims", "2"], ["ReduceSum-13", "keepdims", "0 or 1"]),
    (["sum", "{f32}", "--opset", "11", "--noop-with-empty-axes"],
     ["ReduceSum-11", "noop_with_empty_axes", "not defined at this version"]),
    (["sum", "{f32}", "--bogus"], ["No such option: --bogus", "onnx-reduce eval --help"]),
    (["sum"], ["Missing argument"]),
]


@pytest.mark.parametrize(("args", "fragments"), EVAL_ERRORS)
def test_eval_user_errors(files: dict[str, Path], args: list[str], fragments: list[str]) -> None:
    args = [a.format(**{k: str(v) for k, v in files.items()}) for a in args]
    assert_user_error(invoke("eval", *args), *fragments)


def test_debug_shows_the_traceback(files: dict[str, Path]) -> None:
    result = invoke("--debug", "eval", "logsumexp", files["i32"])
    assert result.exit_code == 2
    assert "Traceback (most recent call last)" in result.stderr
    assert "TypeError: ReduceLogSumExp-28: data type 'int32'" in result.stderr


def test_info_unknown_op_is_a_user_error() -> None:
    assert_user_error(invoke("info", "ReduceMax"), "unknown operator 'ReduceMax'")


# --------------------------------------------------------------------------------------------
# through a real subprocess of the installed script


def test_script_eval_round_trip(tmp_path: Path) -> None:
    data = np.array([[3e30, 4e30]], np.float32)
    x = save(tmp_path / "x.npy", data)
    out = tmp_path / "y.npy"
    done = run_script("eval", "ReduceL2", x, "--axes", "-1", "-o", out)
    assert done.returncode == 0, done.stderr
    assert "ReduceL2-18" in done.stdout
    exact = math.hypot(float(data[0, 0]), float(data[0, 1]))  # float64, then one rounding
    assert np.load(out).tolist() == [[float(np.float32(exact))]]


def test_script_user_error_is_one_line(tmp_path: Path) -> None:
    x = save(tmp_path / "x.npy", np.arange(3, dtype=np.int32))
    done = run_script("eval", "lse", x)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "error: ReduceLogSumExp-28: data type 'int32' is not allowed at this version; "
        "allowed: bfloat16, double, float, float16"
    ]
    assert done.stdout == ""


def test_script_debug_shows_traceback(tmp_path: Path) -> None:
    done = run_script("--debug", "eval", "sum", tmp_path / "missing.npy")
    assert done.returncode == 2
    assert "Traceback (most recent call last)" in done.stderr
    assert "missing.npy: no such file" in done.stderr


def test_module_entry_point() -> None:
    done = run_script("info", "sum", module=True)
    assert done.returncode == 0, done.stderr
    assert "ReduceSum" in done.stdout


# --------------------------------------------------------------------------------------------
# run


def _model(path: Path, data_type: int = onnx.TensorProto.FLOAT) -> Path:
    """data (float32 [2, 3]) and axes (int64 [1]) -> l2 = ReduceL2-18(data, axes, keepdims=0),
    lse = ReduceLogSumExp-18(data), at opset 18."""
    nodes = [
        helper.make_node("ReduceL2", ["data", "axes"], ["l2"], keepdims=0),
        helper.make_node("ReduceLogSumExp", ["data"], ["lse"]),
    ]
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info("data", data_type, [2, 3]),
         helper.make_tensor_value_info("axes", onnx.TensorProto.INT64, [1])],
        [helper.make_tensor_value_info("l2", onnx.TensorProto.FLOAT, None),
         helper.make_tensor_value_info("lse", onnx.TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    onnx.save(model, str(path))
    return path


RUN_DATA = np.array([[3.0, 4.0, 12.0], [1.0, 0.0, 0.0]], np.float32)


def test_run_prints_each_output(tmp_path: Path) -> None:
    model = _model(tmp_path / "m.onnx")
    x = save(tmp_path / "x.npy", RUN_DATA)
    axes = save(tmp_path / "axes.pb", np.array([1], np.int64))
    result = invoke("run", model, "--input", f"data={x}", "--input", f"axes={axes}")
    assert result.exit_code == 0, result.stderr
    assert "l2  float32 (2,)  [13, 1]" in result.stdout  # sqrt(9 + 16 + 144) = 13
    assert "lse  float32 (1, 1)" in result.stdout


def test_run_writes_outputs_to_a_directory(tmp_path: Path) -> None:
    model = _model(tmp_path / "m.onnx")
    x = save(tmp_path / "x.npy", RUN_DATA)
    axes = save(tmp_path / "axes.npy", np.array([1], np.int64))
    out = tmp_path / "results"
    args = ["run", model, "-i", f"data={x}", "-i", f"axes={axes}", "-o", out]
    result = invoke(*args)
    assert result.exit_code == 0, result.stderr
    assert sorted(p.name for p in out.iterdir()) == ["l2.npy", "lse.npy"]
    assert np.load(out / "l2.npy").tolist() == [13.0, 1.0]
    lse = mpmath.log(mpmath.fsum(mpmath.exp(mpmath.mpf(float(v))) for v in RUN_DATA.ravel()))
    assert np.load(out / "lse.npy").tolist() == [[float(np.float32(float(lse)))]]
    assert_user_error(invoke(*args), "l2.npy", "already exists")
    assert invoke(*args, "--force").exit_code == 0


@pytest.mark.parametrize(
    ("inputs", "fragments"),
    [
        (["data={x}"], ["model input 'axes' is not given", "--input axes=FILE"]),
        (["data={x}", "axes={axes}", "extra={x}"], ["the model has no input 'extra'"]),
        (["data={x}", "axes"], ["bad --input 'axes'", "NAME=FILE"]),
        (["data={x}", "axes={missing}"], ["missing.npy: no such file"]),
    ],
)
def test_run_input_errors(tmp_path: Path, inputs: list[str], fragments: list[str]) -> None:
    model = _model(tmp_path / "m.onnx")
    names = {"x": save(tmp_path / "x.npy", RUN_DATA), "missing": tmp_path / "missing.npy",
             "axes": save(tmp_path / "axes.npy", np.array([1], np.int64))}
    args = [a for spec in inputs for a in ("--input", spec.format(**names))]
    assert_user_error(invoke("run", model, *args), *fragments)


def test_run_model_errors(tmp_path: Path) -> None:
    assert_user_error(invoke("run", tmp_path / "none.onnx"), "none.onnx: no such file")
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\xff\xff\xff\xff not a model")
    assert_user_error(invoke("run", bad), "bad.onnx", "not")


def test_run_wrong_dtype_for_the_version_is_a_user_error(tmp_path: Path) -> None:
    model = _model(tmp_path / "m.onnx", onnx.TensorProto.INT8)
    x = save(tmp_path / "x.npy", np.ones((2, 3), np.int8))
    axes = save(tmp_path / "axes.npy", np.array([1], np.int64))
    result = invoke("run", model, "-i", f"data={x}", "-i", f"axes={axes}")
    assert_user_error(result, "ReduceL2-18", "int8")


# --------------------------------------------------------------------------------------------
# info


def test_info_matches_the_onnx_schemas() -> None:
    result = invoke("info")
    assert result.exit_code == 0, result.stderr
    blocks = result.stdout.split("\n\n")
    for op, versions in (("ReduceSum", [1, 11, 13]), ("ReduceL2", [1, 11, 13, 18]),
                         ("ReduceLogSumExp", [1, 11, 13, 18, 28])):
        block = next(b for b in blocks if b.lstrip().startswith(op))
        rows = {int(line.split()[0]): line for line in block.splitlines()
                if line[:1].isdigit()}
        assert sorted(rows) == versions
        for version, line in rows.items():
            schema = onnx.defs.get_schema(op, version)
            assert schema.since_version == version
            axes_input = any(i.name == "axes" for i in schema.inputs)
            assert ("input" if axes_input else "attribute") in line.split()
            has_body = schema.has_function or schema.has_context_dependent_function
            assert line.split()[-1] == ("yes" if has_body else "no")
            assert "keepdims=1" in block
    assert "noop_with_empty_axes=0" in result.stdout


def test_info_one_op_lists_its_dtypes() -> None:
    result = invoke("info", "logsumexp")
    assert result.exit_code == 0
    assert "ReduceSum" not in result.stdout
    row28 = [line for line in result.stdout.splitlines() if line.startswith("28")]
    assert row28
    assert "bfloat16" in row28[0]
    # version 28 dropped the integers: its block ends without an int row after it
    tail = result.stdout.split("\n28", 1)[1]
    assert "int32" not in tail


# --------------------------------------------------------------------------------------------
# conformance


needs_conformance = pytest.mark.skipif(not HAS_CONFORMANCE, reason="no conformance module yet")


@needs_conformance
def test_conformance_onnx_reduce_only() -> None:
    result = invoke("conformance", "--op", "l2", "--no-expanded")
    assert result.exit_code == 0, result.stdout + result.stderr
    from onnx_reduce.conformance import collect_cases

    count = sum(1 for c in collect_cases(include_expanded=False) if c.op == "ReduceL2")
    assert f"onnx-reduce: {count} cases, {count} passed, 0 failed" in result.stdout
    assert "L2-1 " in result.stdout
    assert "L2-18 " in result.stdout
    assert "ReduceSum" not in result.stdout


@needs_conformance
@pytest.mark.parametrize(("op", "short"), [("sumsquare", "SumSq"), ("logsum", "LogSum")])
def test_conformance_of_the_newer_ops_passes_at_every_version(op: str, short: str) -> None:
    result = invoke("conformance", "--op", op)
    assert result.exit_code == 0, result.stdout + result.stderr
    from onnx_reduce.conformance import collect_cases
    from onnx_reduce.spec import VERSIONS

    name = op_name(op)
    count = sum(1 for c in collect_cases() if c.op == name)
    assert f"onnx-reduce: {count} cases, {count} passed, 0 failed" in result.stdout
    for version in VERSIONS[name]:
        assert f"{short}-{version} " in result.stdout


def test_eval_of_the_newer_ops_gives_exact_values(tmp_path: Path) -> None:
    x = save(tmp_path / "x.npy", np.array([[1e16, 1.0, -1e16], [3.0, 4.0, 0.0]]))
    out = tmp_path / "y.npy"
    result = invoke("eval", "logsum", x, "--axes", "1", "-o", out)
    assert result.exit_code == 0, result.stderr
    assert load(out).tolist() == [[0.0], [math.log(7.0)]]
    result = invoke("eval", "sumsq", x, "--axes", "1", "-o", out, "--force")
    assert result.exit_code == 0, result.stderr
    assert load(out).tolist() == [[2e32 + 1.0], [25.0]]


@needs_conformance
def test_conformance_exit_status_counts_only_onnx_reduce(monkeypatch: pytest.MonkeyPatch) -> None:
    from onnx_reduce import conformance

    def peers_fail(case, runner):
        status = "pass" if runner == "onnx-reduce" else "fail"
        return conformance.CaseResult(status, "made up")

    monkeypatch.setattr(conformance, "run_case", peers_fail)
    result = invoke("conformance", "--op", "sum", "--against", "all")
    assert result.exit_code == 0, result.stdout
    assert "onnxruntime:" in result.stdout
    assert "onnx.reference:" in result.stdout

    def ours_fail(case, runner):
        return conformance.CaseResult("fail" if case.version == 11 else "pass", "made up")

    monkeypatch.setattr(conformance, "run_case", ours_fail)
    result = invoke("conformance", "--op", "sum", "--differences")
    assert result.exit_code == 1
    assert "did not pass" in result.stdout
    assert "ReduceSum-13" not in result.stdout.split("did not pass")[0]  # --differences


@needs_conformance
def test_conformance_reports_a_missing_peer(monkeypatch: pytest.MonkeyPatch) -> None:
    real = peers.available
    monkeypatch.setattr(peers, "available", lambda r: r != "onnxruntime" and real(r))
    result = invoke("conformance", "--op", "sum", "--against", "ort", "--no-expanded")
    assert result.exit_code == 0
    assert "onnxruntime: missing" in result.stdout


def test_conformance_unknown_peer_is_a_user_error() -> None:
    assert_user_error(invoke("conformance", "--against", "tensorflow"),
                      "unknown peer 'tensorflow'")


# --------------------------------------------------------------------------------------------
# bench


needs_bench = pytest.mark.skipif(not HAS_BENCH, reason="no benchmarking package yet")


@needs_bench
def test_bench_quick_tiny(tmp_path: Path) -> None:
    report, plot = tmp_path / "bench.md", tmp_path / "bench.png"
    args = ["bench", "--quick", "--ops", "sum", "--dtypes", "f32", "--layouts", "inner",
            "--sizes", "latency", "--runners", "numpy", "--repeats", "1", "--no-roofline",
            "-o", report]
    has_matplotlib = importlib.util.find_spec("matplotlib") is not None
    if has_matplotlib:
        args += ["--plot", plot]
    result = invoke(*args)
    assert result.exit_code == 0, result.stdout + result.stderr
    assert "Sum inner f32" in result.stdout
    assert "latency" in result.stdout
    assert "vs numpy" in result.stdout
    assert "| Sum inner f32 |" in report.read_text()
    if has_matplotlib:
        assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert_user_error(invoke(*args), "bench.md", "already exists")


@needs_bench
def test_bench_bad_filter_is_a_user_error() -> None:
    assert_user_error(invoke("bench", "--dtypes", "int3"), "int3")


@needs_bench
@pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None, reason="no matplotlib")
@pytest.mark.parametrize(("output", "plot", "message"), [
    (None, "plot.txt", "plot.txt: unsupported plot format '.txt'; use one of .png"),
    (None, "plot", "unsupported plot format '(none)'"),
    ("same.png", "same.png", "-o and --plot name the same file"),
])
def test_bench_destinations_are_judged_before_the_benchmark(tmp_path: Path, output, plot,
                                                            message) -> None:
    args = ["bench", "--quick", "--ops", "sum", "--sizes", "latency", "--plot", tmp_path / plot]
    if output is not None:
        args += ["-o", tmp_path / output]
    assert_user_error(invoke(*args), message)
    assert list(tmp_path.iterdir()) == []


# --------------------------------------------------------------------------------------------
# showcase


@needs_conformance
@pytest.mark.skipif(not HAS_BENCH, reason="no benchmarking package yet")
def test_showcase_runs_everything() -> None:
    result = invoke("showcase")
    assert result.exit_code == 0, result.stdout + result.stderr
    out = result.stdout
    assert "1. Conformance" in out
    assert "2. Headline" in out
    assert "3. Quick benchmark" in out
    assert "onnx-reduce passed everything" in out
    # onnx-reduce's headline answers: the exact values, each checked
    assert "5e+30 ✓" in out
    assert "500 ✓" in out
    assert "1073697800 ✓" in out
    assert "800.69315 ✓" in out  # 800 + ln 2
    assert "Sum inner f32" in out


@needs_conformance
def test_showcase_reports_a_missing_peer(monkeypatch: pytest.MonkeyPatch) -> None:
    from onnx_reduce import conformance

    some = [c for c in conformance.collect_cases(include_expanded=False) if c.op == "ReduceSum"]
    monkeypatch.setattr(conformance, "collect_cases", lambda include_expanded=True: some[:30])
    real = peers.available
    monkeypatch.setattr(peers, "available", lambda r: r != "onnxruntime" and real(r))
    result = invoke("showcase", "--no-bench")
    assert result.exit_code in (0, 1), result.stdout + result.stderr  # 1: onnx-reduce failed
    assert "Traceback" not in result.stdout + result.stderr
    assert "missing peers: onnxruntime" in result.stdout
    assert "onnxruntime: missing" in result.stdout
    headline = result.stdout.split("2. Headline")[1]
    assert headline.count("missing") >= 5  # every headline row
    assert "onnx.reference: 30 cases" in result.stdout
    assert "3. Quick benchmark" not in result.stdout
