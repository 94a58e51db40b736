"""``onnx-reduce eval``: one operator on one tensor file."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Annotated

import numpy as np
import typer

from ..pipeline import execute, plan_call
from ..plan import ReductionPlan
from ..spec import REGISTRY, OpVersion, latest, resolve
from . import tensors
from .chunked_eval import (
    DEFAULT_CHUNK_MIB,
    Execution,
    Request,
    chunk_bytes_of,
    evaluate_chunked,
    installed,
    open_chunked,
    require_chunked,
)
from .errors import UserError, shown, user_errors
from .files import check_writable
from .limits import check_fits
from .options import op_name, parse_axes
from .present import console, describe, describe_type, duration, preview
from .schedulers import check_scheduler, wants_progress
from .sources import is_zarr

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
        help="The data tensor: a .npy file (memory-mapped; read in chunks when larger than "
        "--chunk-mib), an ONNX TensorProto .pb file, or a zarr store (a directory, v3 or v2).",
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
        "--output", "-o",
        help="Write the result to this .npy or .pb file, or a .zarr store (v3), instead of "
        "printing it. .npy and .zarr are written chunk by chunk.",
        show_default=False,
    ),
]
ForceOpt = Annotated[bool, typer.Option("--force", help="Overwrite an existing output.")]
SchedulerOpt = Annotated[
    str | None,
    typer.Option(help="Evaluate in chunks with this dask scheduler: threads, processes, "
                 "synchronous, or distributed (a local cluster unless --address).",
                 show_default=False),
]
AddressOpt = Annotated[
    str | None,
    typer.Option(help="A running dask scheduler to evaluate on, e.g. tcp://10.0.0.5:8786 "
                 "(its workers must see the input and output paths).", show_default=False),
]
ChunkOpt = Annotated[
    float, typer.Option("--chunk-mib", help="Chunk size of the chunked evaluation, in MiB.")
]
ProgressOpt = Annotated[
    bool | None,
    typer.Option("--progress/--no-progress",
                 help="A progress bar on stderr (default: when stderr is a terminal).",
                 show_default=False),
]

#: Input and output formats of ``eval``: tensor files and zarr stores.
EVAL_FORMATS = (".npy", ".pb", ".zarr")


def eval_command(
    op: OpArg,
    input: InputArg,
    axes: AxesOpt = None,
    keepdims: KeepdimsOpt = 1,
    noop_with_empty_axes: NoopOpt = False,
    opset: OpsetOpt = None,
    output: OutputOpt = None,
    force: ForceOpt = False,
    scheduler: SchedulerOpt = None,
    address: AddressOpt = None,
    chunk_mib: ChunkOpt = DEFAULT_CHUNK_MIB,
    progress: ProgressOpt = None,
) -> None:
    """Apply one operator to a tensor read from a .npy or .pb file or a zarr store.

    Example: onnx-reduce eval logsumexp x.npy --axes 1 --keepdims 0 --opset 18
    """
    ver = _version(op_name(op), opset)
    check_format(input, "input")
    if output is not None:
        check_format(output, "output")
        check_writable(output, force, store=is_zarr(output))
    data = None if is_zarr(input) else tensors.read_tensor(input)
    axes_list = parse_axes(axes)
    attributes, axes_input = request_for(ver, axes_list, keepdims, noop_with_empty_axes)
    run = Execution(chunk_bytes_of(chunk_mib), check_scheduler(scheduler, address), address,
                    wants_progress(progress))
    if _chunked(data, output, scheduler or address, run.chunk_bytes):
        require_chunked(input, output, run.scheduler)
        array = open_chunked(input, data, run.chunk_bytes)
        check_request(ver, array, attributes, axes_input)
        request = Request(ver, opset, axes_list, keepdims, noop_with_empty_axes)
        evaluate_chunked(request, input, array, output, force, run)
        return
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


def _chunked(data: np.ndarray | None, output: Path | None, scheduled: object,
             chunk_bytes: int) -> bool:
    """Whether to evaluate in chunks: a zarr input or output, a scheduler asked for, or an
    input larger than one chunk when dask is installed (smaller ones take the in-memory path,
    byte for byte)."""
    if data is None or scheduled or (output is not None and is_zarr(output)):
        return True
    return data.nbytes > chunk_bytes and installed("dask")  # (else the memory map serves)


def check_format(path: Path, role: str) -> None:
    """Refuse a file whose suffix names no format of ``eval``."""
    if is_zarr(path) or path.suffix.lower() in EVAL_FORMATS:
        return
    suffix = path.suffix.lower() or "(none)"
    raise UserError(f"{shown(path)}: unsupported {role} format {suffix!r}; "
                    "use .npy, .pb or a .zarr store")


def check_request(
    ver: OpVersion, data, attributes: dict, axes_input: np.ndarray | None
) -> ReductionPlan:
    """Validate and plan the request for ``data``'s dtype and shape (the messages of the
    in-memory path)."""
    with user_errors():
        return plan_call(ver, data.dtype, data.shape, attributes, axes_input)


def check_output_fits(
    ver: OpVersion, data: np.ndarray, attributes: dict, axes_input: np.ndarray | None
) -> None:
    """Refuse, before any work, a request that is invalid or whose output cannot fit in memory
    (an empty input of shape (0, 10**17) reduced over axis 0 has 10**17 outputs)."""
    plan = check_request(ver, data, attributes, axes_input)
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
