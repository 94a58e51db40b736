"""Fuzz test of the file and model loaders through the command line: random bytes, truncated and
byte-flipped protobufs and .npy files, valid models with one field mutated (types, dims, names,
domains, opsets, attributes, external data), .npy headers claiming huge shapes, TensorProto files
whose sizes lie. Every outcome must be a result (exit 0) or one clean line ``error: ...`` with exit
status 2: never a traceback, an internal error, an extra warning line or a hang (a case still
running after ``CASE_SECONDS``).

The cases are drawn from a seeded generator, in process through typer's runner (a few through a
real subprocess). ``ONNX_REDUCE_FUZZ_CASES`` sets how many (default 300, about 10-20 s) and
``ONNX_REDUCE_FUZZ_SEED`` the seed (default 16); run with ``-s`` to see the outcome histogram:

    ONNX_REDUCE_FUZZ_CASES=5000 pytest -s tests/cli/test_fuzz.py
"""

from __future__ import annotations

import collections
import io
import os
import random
import re
import signal
import subprocess
import sys
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from typer.testing import CliRunner

from onnx_reduce.cli import app

CASES = int(os.environ.get("ONNX_REDUCE_FUZZ_CASES", "300"))
SEED = int(os.environ.get("ONNX_REDUCE_FUZZ_SEED", "16"))
#: A case still running after this long is a hang (the first compiles the kernels: generous).
CASE_SECONDS = 120

#: Dims a mutation picks from: small, empty, negative, and far too large to allocate.
DIMS = (0, 1, 2, 3, 7, -1, -(2**63), 10**12, 10**17, 2**63 - 1)
#: Dims a .npy header claims (numpy refuses negative ones itself).
NPY_DIMS = (0, 1, 2, 3, 7, 10**12, 10**17)
#: Element types: every TensorProto type, an unknown one and a negative one.
ELEM_TYPES = (*range(0, 27), 999, -5)
OPS = ("ReduceSum", "ReduceL2", "ReduceLogSumExp", "Identity", "Add", "Foo", "")
DOMAINS = ("", "ai.onnx", "com.example", "ai.onnx.ml", "\x1b[2J")
OPSETS = (0, 1, 11, 13, 18, 28, 29, 10**9, 2**62, -1)
#: Warnings Python does not show by default (outside ``__main__``).
QUIET_WARNINGS = (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning)
LOCATIONS = ("../../etc/passwd", "/etc/hostname", "missing.bin", "x.npy", "", "sub/../x.npy")


# --- the valid seeds --------------------------------------------------------------------------


def seed_model() -> onnx.ModelProto:
    """ReduceL2-18 over an axes input, then a ReduceLogSumExp-18; an Identity in front makes the
    graph run through onnx.reference when the mutation keeps it."""
    nodes = [helper.make_node("Identity", ["data"], ["copy"]),
             helper.make_node("ReduceL2", ["copy", "axes"], ["l2"], keepdims=0),
             helper.make_node("ReduceLogSumExp", ["data"], ["lse"])]
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info("data", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("l2", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("lse", TensorProto.FLOAT, None)],
        initializer=[numpy_helper.from_array(np.array([1], np.int64), "axes")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def seed_tensor() -> onnx.TensorProto:
    return numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "data")


def seed_npy() -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, np.arange(6, dtype=np.float32).reshape(2, 3))
    return buffer.getvalue()


# --- mutations ----------------------------------------------------------------------------------


def flip_bytes(rng: random.Random, data: bytes) -> bytes:
    data = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        data[rng.randrange(len(data))] = rng.randrange(256)
    return bytes(data)


def truncate(rng: random.Random, data: bytes) -> bytes:
    return data[: rng.randrange(len(data))]


def random_bytes(rng: random.Random, _: bytes) -> bytes:
    return rng.randbytes(rng.choice((0, 1, 8, 64, 512)))


def _value_infos(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    return [*model.graph.input, *model.graph.output]


def mutate_dim(rng: random.Random, model: onnx.ModelProto) -> None:
    shape = model.graph.input[0].type.tensor_type.shape
    dim = rng.choice(shape.dim) if shape.dim else shape.dim.add()
    if rng.random() < 0.8:
        dim.dim_value = rng.choice(DIMS)
    else:
        dim.dim_param = rng.choice(("N", "", "\n"))


def mutate_elem_type(rng: random.Random, model: onnx.ModelProto) -> None:
    info = rng.choice(_value_infos(model))
    info.type.tensor_type.elem_type = rng.choice(ELEM_TYPES)


def mutate_input_kind(rng: random.Random, model: onnx.ModelProto) -> None:
    info = model.graph.input[0]
    tensor = helper.make_tensor_type_proto(TensorProto.FLOAT, None)
    kind = rng.choice(("sequence", "optional", "map", "sparse", "none"))
    if kind == "sequence":
        info.type.sequence_type.elem_type.CopyFrom(tensor)
    elif kind == "optional":
        info.type.optional_type.elem_type.CopyFrom(tensor)
    elif kind == "map":
        info.type.CopyFrom(helper.make_map_type_proto(TensorProto.INT64, tensor))
    elif kind == "sparse":
        info.type.sparse_tensor_type.elem_type = TensorProto.FLOAT
    else:
        info.ClearField("type")


def mutate_node(rng: random.Random, model: onnx.ModelProto) -> None:
    node = rng.choice(model.graph.node) if model.graph.node else model.graph.node.add()
    field = rng.choice(("op_type", "domain", "input", "output", "name"))
    if field == "op_type":
        node.op_type = rng.choice(OPS)
    elif field == "domain":
        node.domain = rng.choice(DOMAINS)
    elif field == "input":
        node.input[:] = rng.sample(["data", "copy", "axes", "l2", "zz", ""], rng.randint(0, 3))
    elif field == "output":
        node.output[:] = rng.sample(["copy", "l2", "lse", "data", ""], rng.randint(0, 2))
    else:
        node.name = "n\x1b[31m\n"


def mutate_attribute(rng: random.Random, model: onnx.ModelProto) -> None:
    node = rng.choice(model.graph.node) if model.graph.node else model.graph.node.add()
    name = rng.choice(("keepdims", "noop_with_empty_axes", "axes", "bogus"))
    value = rng.choice((0, 1, 2, -1, 2**62, 1.5, "x", b"\xff", [0, 0], [2**62], [-(2**63)], []))
    node.attribute.append(helper.make_attribute(name, value) if value != [] else
                          helper.make_attribute(name, [], attr_type=onnx.AttributeProto.INTS))


def mutate_opset(rng: random.Random, model: onnx.ModelProto) -> None:
    del model.opset_import[:]
    for _ in range(rng.randint(0, 2)):
        model.opset_import.append(helper.make_opsetid(rng.choice(DOMAINS), rng.choice(OPSETS)))


def mutate_graph(rng: random.Random, model: onnx.ModelProto) -> None:
    graph = model.graph
    choice = rng.randrange(4)
    if choice == 0:
        graph.node.reverse()  # a node reads what a later one makes
    elif choice == 1:
        graph.output.append(helper.make_tensor_value_info("nowhere", TensorProto.FLOAT, None))
    elif choice == 2 and graph.node:
        graph.node.append(graph.node[0])  # the same output made twice
    else:
        del graph.node[:]


def mutate_initializer(rng: random.Random, model: onnx.ModelProto) -> None:
    tensor = model.graph.initializer[0]
    mutate_tensor(rng, tensor)


def mutate_tensor(rng: random.Random, tensor: onnx.TensorProto) -> None:
    """One lie in a TensorProto: dims, element type, data size, or an external reference."""
    choice = rng.randrange(5)
    if choice == 0:
        tensor.dims[:] = [rng.choice(DIMS) for _ in range(rng.randint(0, 3))]
    elif choice == 1:
        tensor.data_type = rng.choice(ELEM_TYPES)
    elif choice == 2:
        tensor.raw_data = rng.randbytes(rng.choice((0, 1, 3, 5, 24, 100)))
    elif choice == 3:
        tensor.ClearField("raw_data")
        tensor.float_data[:] = [1.0] * rng.choice((0, 1, 7))
    else:
        make_external(rng, tensor)


def make_external(rng: random.Random, tensor: onnx.TensorProto) -> None:
    tensor.ClearField("raw_data")
    tensor.data_location = TensorProto.EXTERNAL
    entries = {"location": rng.choice(LOCATIONS)}
    if rng.random() < 0.5:
        entries["offset"] = str(rng.choice((0, 3, 10**12, -1)))
    if rng.random() < 0.5:
        entries["length"] = str(rng.choice((0, 4, 24, 10**12, -1)))
    for key, value in entries.items():
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value


MODEL_MUTATIONS = (mutate_dim, mutate_elem_type, mutate_input_kind, mutate_node,
                   mutate_attribute, mutate_opset, mutate_graph, mutate_initializer)


# --- the cases ------------------------------------------------------------------------------------


def npy_with_header(rng: random.Random) -> bytes:
    """A .npy header claiming any dtype and shape, followed by a little (or no) data."""
    descr = rng.choice(("<f4", ">f8", "<f2", "|b1", "<i8", ">u4", "<c16", "|O", "<U3", "|V2"))
    shape = tuple(rng.choice(NPY_DIMS) for _ in range(rng.randint(0, 3)))
    header = {"descr": descr, "fortran_order": rng.random() < 0.3, "shape": shape}
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(buffer, header)
    return buffer.getvalue() + rng.randbytes(rng.choice((0, 8, 24)))


def eval_options(rng: random.Random) -> list[str]:
    options = []
    if rng.random() < 0.3:
        options += ["--axes", rng.choice(("0", "1", "-1", "0,1", "", "5", "0,0", str(2**63)))]
    if rng.random() < 0.2:
        options += ["--opset", rng.choice(("1", "11", "13", "18", "28"))]
    if rng.random() < 0.2:
        options += ["--keepdims", rng.choice(("0", "1"))]
    return options


def make_case(rng: random.Random, folder: Path) -> list[str]:
    """Write one case's files into ``folder``; the command line that runs it."""
    np.save(folder / "x.npy", np.ones((2, 3), np.float32))  # a valid file external data may name
    kind = rng.choice(("model-bytes", "model-fields", "npy", "npy-header", "pb-bytes", "pb-fields"))
    op = rng.choice(("sum", "l2", "logsumexp"))
    if kind.startswith("model"):
        model = folder / "m.onnx"
        model.write_bytes(_model_bytes(rng, kind))
        return ["run", str(model), "-i", f"data={folder / 'x.npy'}"]
    data = folder / ("d.npy" if kind.startswith("npy") else "d.pb")
    data.write_bytes(_data_bytes(rng, kind))
    return ["eval", op, str(data), *eval_options(rng)]


def _model_bytes(rng: random.Random, kind: str) -> bytes:
    model = seed_model()
    if kind == "model-fields":
        for _ in range(rng.randint(1, 2)):
            rng.choice(MODEL_MUTATIONS)(rng, model)
        return model.SerializeToString()
    mutation: Callable = rng.choice((flip_bytes, truncate, random_bytes))
    return mutation(rng, model.SerializeToString())


def _data_bytes(rng: random.Random, kind: str) -> bytes:
    if kind == "npy-header":
        return npy_with_header(rng)
    if kind == "pb-fields":
        tensor = seed_tensor()
        mutate_tensor(rng, tensor)
        return tensor.SerializeToString()
    seed = seed_npy() if kind == "npy" else seed_tensor().SerializeToString()
    return rng.choice((flip_bytes, truncate, random_bytes))(rng, seed)


def make_zarr_case(rng: random.Random, folder: Path) -> list[str]:
    """A small zarr store (v2 or v3, compressed or not) with its metadata or one chunk damaged,
    deleted or left intact; ``eval`` on it, to a zarr or ``.npy`` output or printed."""
    import zarr

    store = folder / "d.zarr"
    dtype = rng.choice(("float32", "float64", "int64", "float16", "uint8", "bool"))
    shape = tuple(rng.choice((0, 1, 3, 7)) for _ in range(rng.randint(1, 3)))
    array = zarr.create_array(store=str(store), shape=shape, dtype=dtype,
                              chunks=tuple(rng.randint(1, 3) for _ in shape),
                              zarr_format=rng.choice((2, 3)),
                              compressors=None if rng.random() < 0.3 else "auto")
    array[...] = np.ones(shape, dtype)
    files = sorted(p for p in store.rglob("*") if p.is_file())
    target = rng.choice(files)
    damage = rng.choice(("flip", "truncate", "random", "delete", "none"))
    if damage == "delete":
        target.unlink()
    elif damage != "none":
        mutation = {"flip": flip_bytes, "truncate": truncate, "random": random_bytes}[damage]
        target.write_bytes(mutation(rng, target.read_bytes()))
    output = rng.choice(([], ["-o", str(folder / "y.zarr")], ["-o", str(folder / "y.npy")]))
    chunking = ["--chunk-mib", "0.0001"] if rng.random() < 0.5 else []
    op = rng.choice(("sum", "l2", "logsumexp"))
    return ["eval", op, str(store), *eval_options(rng), *output, *chunking,
            "--scheduler", "synchronous"]


# --- outcomes -------------------------------------------------------------------------------------


def outcome(exit_code: int, stdout: str, stderr: str, folder: Path) -> str:
    """``result``, ``error: <message class>`` (a clean one-line error), else ``FAILURE: ...``."""
    lines = stderr.splitlines()
    if "Traceback" in stdout + stderr:
        return "FAILURE: traceback"
    if exit_code == 0:
        return "result"
    if exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: "):
        return "error: " + message_class(lines[0], folder)
    return f"FAILURE: exit {exit_code}: {stderr[:300]!r}"


def message_class(line: str, folder: Path) -> str:
    """The message with its paths, names and numbers taken out (a histogram key)."""
    text = line.removeprefix("error: ").replace(str(folder), "")
    text = re.sub(r"'[^']*'|\"[^\"]*\"|\([^()]*\)", "…", text)
    text = re.sub(r"\b\d+\b", "N", text)
    return " ".join(text.split()[:7])


def run_cases(count: int, seed: int, folder: Path, maker: Callable = make_case
              ) -> collections.Counter:
    rng = random.Random(seed)
    runner = CliRunner()
    outcomes: collections.Counter = collections.Counter()
    for index in range(count):
        case = folder / f"case{index}"
        case.mkdir()
        args = maker(rng, case)
        key = run_case(runner, args, case)
        if key.startswith("FAILURE"):
            key = f"{key} <- {args}"
        outcomes[key] += 1
    return outcomes


class CaseTimeout(BaseException):
    """A case ran longer than :data:`CASE_SECONDS` (a hang): not an Exception, so that neither
    the command line nor the test runner catches it on its way out."""


def _time_out(number: int, frame: object) -> None:
    raise CaseTimeout


def run_case(runner: CliRunner, args: list[str], folder: Path) -> str:
    """One case's outcome; a warning a real process would print is a failure (an extra line),
    so is a case still running after :data:`CASE_SECONDS`."""
    previous = signal.signal(signal.SIGALRM, _time_out)
    signal.alarm(CASE_SECONDS)
    try:
        with warnings.catch_warnings(record=True) as shown:
            warnings.simplefilter("always")
            for category in QUIET_WARNINGS:
                warnings.simplefilter("ignore", category)
            result = runner.invoke(app, args)
    except CaseTimeout:
        return f"FAILURE: still running after {CASE_SECONDS} s"
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    key = outcome(result.exit_code, result.stdout, result.stderr, folder)
    if shown and not key.startswith("FAILURE"):
        key = f"FAILURE: warning {shown[0].category.__name__}: {shown[0].message}"
    return key


def test_fuzz_the_loaders_in_process(tmp_path: Path) -> None:
    outcomes = run_cases(CASES, SEED, tmp_path)
    print(f"\n{CASES} fuzz cases (seed {SEED}):")
    for key, count in outcomes.most_common():
        print(f"  {count:5d}  {key}")
    failures = [key for key in outcomes if key.startswith("FAILURE")]
    assert not failures, "\n".join(failures)
    assert outcomes["result"] > 0  # the mutations leave some inputs valid
    assert sum(outcomes.values()) == CASES


def test_fuzz_zarr_stores_in_process(tmp_path: Path) -> None:
    count = max(CASES // 5, 1)
    outcomes = run_cases(count, SEED, tmp_path, make_zarr_case)
    print(f"\n{count} zarr fuzz cases (seed {SEED}):")
    for key, number in outcomes.most_common():
        print(f"  {number:5d}  {key}")
    failures = [key for key in outcomes if key.startswith("FAILURE")]
    assert not failures, "\n".join(failures)
    assert outcomes["result"] > 0


@pytest.mark.parametrize("index", range(3))
def test_fuzz_through_a_real_process(tmp_path: Path, index: int) -> None:
    """A few cases through the installed entry point: the exit status and streams a user sees."""
    rng = random.Random(SEED * 1000 + index)
    args = make_case(rng, tmp_path)
    done = subprocess.run([sys.executable, "-m", "onnx_reduce.cli", *args], capture_output=True,
                          text=True, timeout=300)
    key = outcome(done.returncode, done.stdout, done.stderr, tmp_path)
    assert not key.startswith("FAILURE"), (args, key)
