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
from .errors import UserError, shown, user_errors
from .files import check_directory, check_regular_file, check_target
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
    """Run a whole ONNX model with onnx-reduce serving its operators (onnx-reduce info lists them).

    Other operators run in onnx.reference.

    Example: onnx-reduce run model.onnx --input data=x.npy --input axes=axes.pb -o results/
    """
    from .. import backend

    proto = _load_model(model)
    with user_errors(str(model)):
        rep = backend.prepare(proto)
    feeds = _feeds(rep.input_names, inputs or [])
    if output is not None:
        check_destinations(output, _targets(rep.output_names, _declared_bfloat16(proto)), force)
    with user_errors():
        results = [np.asarray(value) for value in rep.run(feeds)]
    if output is None:
        _print_results(rep.output_names, results)
    else:
        _write_results(output, rep.output_names, results, force)


def _print_results(names: list[str], results: list[np.ndarray]) -> None:
    out = console()
    for name, value in zip(names, results, strict=True):
        label = escape(shown(name))
        out.print(f"[bold]{label}[/bold]  {describe(value)}  {escape(preview(value))}")


def _write_results(
    output: Path, names: list[str], results: list[np.ndarray], force: bool
) -> None:
    """Every destination checked (with the real dtypes) before any file is written."""
    files = _targets(names, [value.dtype == bfloat16 for value in results])
    check_destinations(output, files, force)
    with user_errors():
        output.mkdir(parents=True, exist_ok=True)
    out = console()
    for name, file, value in zip(names, files, results, strict=True):
        tensors.write_tensor(output / file, value, force=force, name=name)
        out.print(f"{shown(name)}: wrote {describe(value)} to {shown(output / file)}", markup=False)


def check_destinations(output: Path, files: list[str], force: bool) -> None:
    """Fail unless every file of ``files`` can be written in the directory ``output`` (made if
    missing): a user error before any work or any file is written."""
    if output.exists() and not output.is_dir():
        raise UserError(f"{shown(output)}: exists and is not a directory")
    if len(set(files)) < len(files):
        raise UserError(f"two outputs would share a file name in {shown(output)}: {shown(files)}")
    if not output.is_dir():
        check_directory(_nearest_existing(output))
        return
    check_directory(output)
    for file in files:
        check_target(output / file, force)


def _nearest_existing(folder: Path) -> Path:
    """The closest ancestor of ``folder`` that exists (where ``mkdir -p`` starts)."""
    folder = folder.absolute()
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return folder


def _targets(names: list[str], bfloat16s: list[bool]) -> list[str]:
    return [output_file(name, bf16) for name, bf16 in zip(names, bfloat16s, strict=True)]


def _declared_bfloat16(proto) -> list[bool]:
    import onnx

    bf16 = onnx.TensorProto.BFLOAT16
    return [declared.type.tensor_type.elem_type == bf16 for declared in proto.graph.output]


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

    try:
        check_regular_file(path, "an ONNX model")
        model = onnx.load(str(path))
    except (DecodeError, OSError, ValueError, onnx.checker.ValidationError) as error:
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
