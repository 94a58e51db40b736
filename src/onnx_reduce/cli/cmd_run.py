"""``onnx-reduce run``: a whole ONNX model through ``onnx_reduce.backend``."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated

import numpy as np
import typer
from rich.markup import escape

from ..spec import bfloat16
from . import tensors
from .errors import UserError, user_errors
from .files import check_writable
from .present import console, describe, preview

ModelArg = Annotated[
    Path, typer.Argument(metavar="MODEL", help="An ONNX model file (.onnx).", show_default=False)
]
InputsOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--input",
        "-i",
        metavar="NAME=FILE",
        help="A graph input and the .npy or .pb file that holds it (repeat for each input).",
        show_default=False,
    ),
]
OutDirOpt = Annotated[
    Path | None,
    typer.Option(
        "--output",
        "-o",
        metavar="DIR",
        help="Write each output to DIR/<output name>.npy (.pb for bfloat16) instead of printing.",
        show_default=False,
    ),
]
ForceOpt = Annotated[bool, typer.Option("--force", help="Overwrite existing output files.")]


def run_command(
    model: ModelArg, inputs: InputsOpt = None, output: OutDirOpt = None, force: ForceOpt = False
) -> None:
    """Run a whole ONNX model with onnx-reduce serving ReduceSum, ReduceL2 and ReduceLogSumExp.

    Other operators run in onnx.reference.

    Example: onnx-reduce run model.onnx --input data=x.npy --input axes=axes.pb -o results/
    """
    import onnx

    from .. import backend

    proto = _load_model(model)
    with user_errors(str(model)):
        rep = backend.prepare(proto)
    feeds = _feeds(rep.input_names, inputs or [])
    if output is not None:
        if output.exists() and not output.is_dir():
            raise UserError(f"{output}: exists and is not a directory")
        files = [output_file(name) for name in rep.output_names]
        if len(set(files)) < len(files):
            raise UserError(f"two outputs would share a file name in {output}: {files}")
        for name, declared in zip(rep.output_names, proto.graph.output, strict=True):
            bf16 = declared.type.tensor_type.elem_type == onnx.TensorProto.BFLOAT16
            if output.is_dir():  # else it is made below
                check_writable(output / output_file(name, bf16), force)
    with user_errors():
        results = rep.run(feeds)
    out = console()
    if output is None:
        for name, value in zip(rep.output_names, results, strict=True):
            out.print(f"[bold]{escape(name)}[/bold]  {describe(value)}  {escape(preview(value))}")
        return
    output.mkdir(parents=True, exist_ok=True)
    for name, value in zip(rep.output_names, results, strict=True):
        value = np.asarray(value)
        target = output / output_file(name, value.dtype == bfloat16)
        tensors.write_tensor(target, value, force=force, name=name)
        out.print(f"{name}: wrote {describe(value)} to {target}", markup=False)


def output_file(name: str, bfloat16: bool = False) -> str:
    """The file an output is written to: ``<name>.npy`` (``.pb`` for bfloat16, which .npy lacks);
    anything but letters, digits and ``.-_`` in the name becomes ``_``.

    >>> output_file("logits/reduced:0")
    'logits_reduced_0.npy'
    """
    stem = re.sub(r"[^A-Za-z0-9._-]", "_", name).lstrip(".") or "output"
    return stem + (".pb" if bfloat16 else ".npy")


def _load_model(path: Path):
    import onnx
    from google.protobuf.message import DecodeError

    if not path.exists():
        raise UserError(f"{path}: no such file")
    if path.is_dir():
        raise UserError(f"{path}: is a directory, not an ONNX model")
    try:
        model = onnx.load(str(path))
    except (DecodeError, OSError, ValueError) as error:
        raise UserError(f"{path}: not a readable ONNX model ({error})") from error
    if not model.graph.node and not model.graph.output:
        raise UserError(f"{path}: not an ONNX model (no graph)")
    return model


def _feeds(names: list[str], specs: list[str]) -> dict[str, np.ndarray]:
    feeds: dict[str, np.ndarray] = {}
    for spec in specs:
        name, sep, file = spec.partition("=")
        if not sep or not name or not file:
            raise UserError(f"bad --input {spec!r}: expected NAME=FILE, e.g. --input data=x.npy")
        if name not in names:
            raise UserError(f"the model has no input {name!r}; its inputs are {', '.join(names)}")
        if name in feeds:
            raise UserError(f"input {name!r} is given twice")
        feeds[name] = tensors.read_tensor(Path(file))
    missing = [n for n in names if n not in feeds]
    if missing:
        raise UserError(
            f"model input {missing[0]!r} is not given; pass --input {missing[0]}=FILE "
            f"(the model's inputs: {', '.join(names)})"
        )
    return feeds
