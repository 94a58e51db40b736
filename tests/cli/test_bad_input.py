"""Bad files, models and calls on the command line: each one line on stderr and exit status 2,
checked before the work it would waste (and before any output file is written)."""

from __future__ import annotations

import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from typer.testing import CliRunner

from cli_checks import assert_user_error
from onnx_reduce.cli import app, cmd_eval

F32 = TensorProto.FLOAT


def invoke(*args: str | Path):
    return CliRunner().invoke(app, [str(a) for a in args])



def save_model(path: Path, nodes, inputs, outputs, opsets=(("", 18),), initializers=()) -> Path:
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    opset_imports = [helper.make_opsetid(domain, version) for domain, version in opsets]
    onnx.save(helper.make_model(graph, opset_imports=opset_imports), str(path))
    return path


def vi(name: str, elem: int = F32, shape=None):
    return helper.make_tensor_value_info(name, elem, shape)


@pytest.fixture
def x(tmp_path: Path) -> Path:
    np.save(tmp_path / "x.npy", np.ones((2, 3), np.float32))
    return tmp_path / "x.npy"


# --- models -----------------------------------------------------------------------------------


def test_external_data_outside_the_model_directory(tmp_path: Path) -> None:
    tensor = helper.make_tensor("c", F32, [2], [1.0, 2.0])
    tensor.data_location = TensorProto.EXTERNAL
    del tensor.float_data[:]
    entry = tensor.external_data.add()
    entry.key, entry.value = "location", "../../etc/passwd"
    model = save_model(tmp_path / "m.onnx", [helper.make_node("ReduceSum", ["c"], ["y"])], [],
                       [vi("y")], initializers=[tensor])
    assert_user_error(invoke("run", model), "m.onnx", "points outside the directory")


@pytest.mark.parametrize(
    ("nodes", "outputs", "fragment"),
    [
        ([("ReduceSum", ["zz"], ["y"])], ["y"], "reads 'zz'"),
        ([("ReduceSum", ["x"], ["y"])], ["y", "w"], "graph output 'w' is produced by no node"),
        ([("ReduceSum", ["b"], ["a"]), ("ReduceSum", ["a"], ["b"]), ("ReduceSum", ["x"], ["y"])],
         ["y"], "reads 'b'"),
        ([("ReduceSum", [], ["y"])], ["y"], "takes data and optionally axes"),
    ],
    ids=["undefined-input", "unproduced-output", "cycle", "no-inputs"],
)
def test_invalid_graphs(tmp_path: Path, x: Path, nodes, outputs, fragment: str) -> None:
    made = [helper.make_node(op, ins, outs) for op, ins, outs in nodes]
    model = save_model(tmp_path / "m.onnx", made, [vi("x", shape=[2, 3])], list(map(vi, outputs)))
    assert_user_error(invoke("run", model, "-i", f"x={x}"), "m.onnx", fragment)


@pytest.mark.parametrize("imported", [True, False], ids=["imported", "not-imported"])
def test_unknown_op_domain(tmp_path: Path, x: Path, imported: bool) -> None:
    opsets = (("", 18), ("com.example", 1)) if imported else (("", 18),)
    node = helper.make_node("Foo", ["x"], ["y"], domain="com.example")
    model = save_model(tmp_path / "m.onnx", [node], [vi("x")], [vi("y")], opsets)
    assert_user_error(invoke("run", model, "-i", f"x={x}"), "m.onnx", "'com.example'")


def test_model_without_the_default_domain(tmp_path: Path, x: Path) -> None:
    node = helper.make_node("ReduceSum", ["x"], ["y"])
    model = save_model(tmp_path / "m.onnx", [node], [vi("x")], [vi("y")], (("com.example", 1),))
    assert_user_error(invoke("run", model, "-i", f"x={x}"), "does not import the default")


def test_input_of_another_declared_type(tmp_path: Path) -> None:
    node = helper.make_node("ReduceSum", ["x"], ["y"])
    model = save_model(tmp_path / "m.onnx", [node], [vi("x", F32, [2, 3])], [vi("y")])
    np.save(tmp_path / "x.npy", np.ones((2, 3)))
    assert_user_error(invoke("run", model, "-i", f"x={tmp_path / 'x.npy'}"),
                      "model input 'x' is declared float, got float64")


def test_names_from_the_model_are_printed_escaped(tmp_path: Path, x: Path) -> None:
    name = "y\x1b[31mRED\nfake line\u202e"
    node = helper.make_node("ReduceSum", ["x"], [name])
    model = save_model(tmp_path / "m.onnx", [node], [vi("x")], [vi(name)])
    result = invoke("run", model, "-i", f"x={x}")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.splitlines() == [r"y\x1b[31mRED\nfake line\u202e  float32 (1, 1)  [6]"]
    node = helper.make_node("ReduceSum", ["in\x1b]0;title\x07"], ["y"])
    model = save_model(tmp_path / "m2.onnx", [node], [vi("in\x1b]0;title\x07")], [vi("y")])
    line = assert_user_error(invoke("run", model),
                             r"model input 'in\x1b]0;title\x07' is not given")
    assert "\x1b" not in line
    assert "\x07" not in line


def test_names_are_printed_as_text_not_markup(tmp_path: Path, x: Path) -> None:
    """rich would read ``[bold]`` as markup and ``:smile:`` as an emoji: a name is plain text."""
    name = "y[bold]B[/bold]:smile:"
    node = helper.make_node("ReduceSum", ["x"], [name])
    model = save_model(tmp_path / "m.onnx", [node], [vi("x")], [vi(name)])
    result = invoke("run", model, "-i", f"x={x}")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.splitlines() == ["y[bold]B[/bold]:smile:  float32 (1, 1)  [6]"]


# --- calls --------------------------------------------------------------------------------------


def test_axes_beyond_int64(x: Path) -> None:
    assert_user_error(invoke("eval", "sum", x, "--axes", "99999999999999999999999"),
                      "axis 99999999999999999999999 is out of range")
    assert_user_error(invoke("eval", "sum", x, "--axes", str(2**63 - 1)),
                      "ReduceSum-13", "out of range")


def test_bench_size_that_cannot_fit() -> None:
    assert_user_error(invoke("bench", "--sizes", "100000000MiB", "--ops", "sum", "--dtypes",
                             "f32", "--layouts", "inner"), "bench --sizes 100000000MiB", "needs")


def _empty_huge(path: Path) -> Path:
    """A tiny file that claims shape (0, 10**17): no data, but 10**17 outputs over axis 0."""
    if path.suffix == ".npy":
        header = {"descr": "<f4", "fortran_order": False, "shape": (0, 10**17)}
        with open(path, "wb") as file:
            np.lib.format.write_array_header_1_0(file, header)
    else:
        tensor = helper.make_tensor("x", F32, [0, 10**17], [])
        path.write_bytes(tensor.SerializeToString())
    return path


@pytest.mark.parametrize("suffix", [".npy", ".pb"])
def test_output_that_cannot_fit_is_refused_up_front(
    tmp_path: Path, suffix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _empty_huge(tmp_path / f"huge{suffix}")
    monkeypatch.setattr(cmd_eval, "execute", _must_not_run)
    assert_user_error(invoke("eval", "sum", path, "--axes", "0"),
                      "ReduceSum-13: the output float32 (1, 100000000000000000) needs")


def _must_not_run(*args, **kwargs):
    raise AssertionError("the computation ran before the error was found")


def test_empty_huge_input_over_the_empty_axis_is_fine(tmp_path: Path) -> None:
    result = invoke("eval", "sum", _empty_huge(tmp_path / "huge.npy"), "--axes", "1")
    assert result.exit_code == 0, result.stderr
    assert "output  float32 (0, 1)" in result.stdout


# --- destinations ------------------------------------------------------------------------------

UNWRITABLE = [folder for folder in (Path("/proc"), Path("/sys")) if folder.is_dir()]


@pytest.mark.skipif(not UNWRITABLE or sys.platform != "linux", reason="needs Linux /proc, /sys")
@pytest.mark.parametrize("folder", UNWRITABLE, ids=str)
def test_unwritable_directory_is_refused_before_the_work(
    folder: Path, x: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cmd_eval, "execute", _must_not_run)
    assert_user_error(invoke("eval", "sum", x, "-o", folder / "y.npy"),
                      f"{folder}: cannot write here")


def test_run_checks_every_destination_before_writing_any(tmp_path: Path) -> None:
    """The outputs are declared float, but the second is computed in bfloat16 (.pb), whose file
    exists: nothing is written, the first output's file included."""
    nodes = [helper.make_node("ReduceSum", ["x"], ["first"]),
             helper.make_node("ReduceSum", ["h"], ["second"])]
    inputs = [vi("x"), vi("h", TensorProto.BFLOAT16)]
    model = save_model(tmp_path / "m.onnx", nodes, inputs, [vi("first"), vi("second")])
    np.save(tmp_path / "x.npy", np.ones(3, np.float32))
    half = np.ones(3, ml_dtypes.bfloat16)
    (tmp_path / "h.pb").write_bytes(numpy_helper.from_array(half, "h").SerializeToString())
    out = tmp_path / "out"
    out.mkdir()
    (out / "second.pb").write_bytes(b"keep")
    result = invoke("run", model, "-i", f"x={tmp_path / 'x.npy'}", "-i",
                    f"h={tmp_path / 'h.pb'}", "-o", out)
    assert_user_error(result, "second.pb: already exists")
    assert sorted(p.name for p in out.iterdir()) == ["second.pb"]
    assert (out / "second.pb").read_bytes() == b"keep"


def test_write_failure_is_one_line(
    tmp_path: Path, x: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def disk_full(file, *args, **kwargs):  # the open temporary (cli.tensors.save_npy)
        file.write(b"half")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(np, "save", disk_full)
    out = tmp_path / "y.npy"
    assert_user_error(invoke("eval", "sum", x, "-o", out), "y.npy: cannot write",
                      "No space left on device")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.npy"]


def test_an_unexpected_failure_is_one_line_too(x: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args, **kwargs):
        raise KeyError("a bug")

    monkeypatch.setattr(cmd_eval, "execute", broken)
    result = invoke("eval", "sum", x)
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [
        "error: internal error: KeyError: 'a bug' (a bug in onnx-reduce; --debug shows the "
        "traceback)"
    ]


def test_run_output_that_cannot_fit(tmp_path: Path) -> None:
    """In a model the backend allocates the output; numpy's MemoryError is one line too."""
    node = helper.make_node("ReduceSum", ["x"], ["y"], axes=[0])
    model = save_model(tmp_path / "m.onnx", [node], [vi("x")], [vi("y")], (("", 11),))
    huge = _empty_huge(tmp_path / "huge.npy")
    assert_user_error(invoke("run", model, "-i", f"x={huge}"), "not enough memory")
