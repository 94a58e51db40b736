"""``onnx-reduce eval``: one operator on one tensor file."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Annotated

import numpy as np
import typer

from ..pipeline import execute, plan_call
from ..spec import REGISTRY, OpVersion, latest, resolve
from . import tensors
from .errors import shown, user_errors
from .files import check_writable
from .limits import check_fits
from .options import op_name, parse_axes
from .present import console, describe, describe_type, duration, preview

_OP_HELP = (f"{', '.join(r.name for r in REGISTRY)} "
            f"(or {', '.join(r.aliases[0] for r in REGISTRY)}).")
OpArg = Annotated[
    str,
    typer.Argument(
        metavar="OP", help=_OP_HELP,
    ),
]
InputArg = Annotated[
    Path,
    typer.Argument(
        metavar="INPUT",
        help="The data tensor: a .npy file (memory-mapped) or an ONNX TensorProto .pb file.",
        show_default=False,
    ),
]
AxesOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--axes",
        "-a",
        metavar="AXES",
        help="Axes to reduce: --axes 0,1 or --axes 0 --axes 1 (default: all). "
        "--axes '' is an explicit empty list.",
        show_default=False,
    ),
]
KeepdimsOpt = Annotated[
    int, typer.Option(help="1 keeps each reduced axis with size 1, 0 drops it.")
]
NoopOpt = Annotated[
    bool,
    typer.Option(
        "--noop-with-empty-axes",
        help="With empty axes, reduce nothing (versions with axes as an input).",
    ),
]
OpsetOpt = Annotated[
    int | None,
    typer.Option(help="The opset whose version of OP applies (default: OP's newest).",
                 show_default=False),
]
OutputOpt = Annotated[
    Path | None,
    typer.Option(
        "--output", "-o", help="Write the result to this .npy or .pb file instead of printing it.",
        show_default=False,
    ),
]
ForceOpt = Annotated[bool, typer.Option("--force", help="Overwrite an existing output file.")]


def eval_command(
    op: OpArg,
    input: InputArg,
    axes: AxesOpt = None,
    keepdims: KeepdimsOpt = 1,
    noop_with_empty_axes: NoopOpt = False,
    opset: OpsetOpt = None,
    output: OutputOpt = None,
    force: ForceOpt = False,
) -> None:
    """Apply one operator to a tensor read from a .npy or .pb file.

    Example: onnx-reduce eval logsumexp x.npy --axes 1 --keepdims 0 --opset 18
    """
    ver = _version(op_name(op), opset)
    if output is not None:
        check_writable(output, force)
    data = tensors.read_tensor(input)
    attributes, axes_input = request_for(ver, parse_axes(axes), keepdims, noop_with_empty_axes)
    check_output_fits(ver, data, attributes, axes_input)
    started = time.perf_counter()
    with user_errors():
        result = execute(ver, data, attributes, axes_input)
    elapsed = time.perf_counter() - started
    if output is not None:
        tensors.write_tensor(output, result, force=force, name="reduced")
        console().print(f"{ver.label}: wrote {describe(result)} to {shown(output)}", markup=False)
        return
    out = console()
    out.print(f"[bold]{ver.label}[/bold]  ({duration(elapsed)})")
    out.print(f"  input   {describe(data)}  {shown(input)}", markup=False)
    out.print(f"  output  {describe(result)}", markup=False)
    out.print(f"  values  {preview(result)}", markup=False)


def check_output_fits(
    ver: OpVersion, data: np.ndarray, attributes: dict, axes_input: np.ndarray | None
) -> None:
    """Refuse, before any work, a request that is invalid or whose output cannot fit in memory
    (an empty input of shape (0, 10**17) reduced over axis 0 has 10**17 outputs)."""
    with user_errors():
        plan = plan_call(ver, data.dtype, data.shape, attributes, axes_input)
    nbytes = math.prod(plan.output_shape) * data.dtype.itemsize
    check_fits(nbytes, f"{ver.label}: the output {describe_type(data.dtype, plan.output_shape)}")


def _version(op: str, opset: int | None) -> OpVersion:
    if opset is None:
        return latest(op)
    with user_errors():
        return resolve(op, opset)


def request_for(
    ver: OpVersion, axes: list[int] | None, keepdims: int, noop: bool
) -> tuple[dict, np.ndarray | None]:
    """The node's attributes and axes input for ``ver``, as a model would carry them.

    >>> request_for(resolve("ReduceSum", 11), [0], 1, False)
    ({'keepdims': 1, 'axes': [0]}, None)
    >>> request_for(resolve("ReduceSum", 13), [0], 0, True)
    ({'keepdims': 0, 'noop_with_empty_axes': 1}, array([0]))
    """
    attributes: dict = {"keepdims": keepdims}
    if noop:
        attributes["noop_with_empty_axes"] = 1
    if axes is None:
        return attributes, None
    if ver.axes_is_input:
        return attributes, np.array(axes, dtype=np.int64)
    attributes["axes"] = axes
    return attributes, None
