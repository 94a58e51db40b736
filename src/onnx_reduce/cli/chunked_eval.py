"""``onnx-reduce eval`` on inputs read in chunks (zarr stores, ``.npy`` files larger than one
chunk) or on a chosen dask scheduler: the reduction is built lazily through the functions'
dask front door, then computed straight into the output (``.npy`` or zarr, streamed) or, for
printing and ``.pb``, into memory (refused up front if it cannot fit).
"""

from __future__ import annotations

import importlib.util
import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..functions import reduce_array
from ..spec import OpVersion
from . import sinks, tensors
from .errors import UserError, shown, user_errors
from .limits import check_fits
from .present import console, describe, describe_type, duration, preview
from .schedulers import scheduler
from .sources import in_memory_chunks, is_zarr, open_npy_chunks, open_zarr

#: Default chunk size of the chunked path (and the largest ``.npy`` evaluated in one piece).
DEFAULT_CHUNK_MIB = 128


@dataclass(frozen=True)
class Request:
    """One evaluation as the command line states it."""

    ver: OpVersion
    opset: int | None
    axes: list[int] | None
    keepdims: int
    noop: bool


@dataclass(frozen=True)
class Execution:
    """How a chunked evaluation runs: chunk size, scheduler, progress bar."""

    chunk_bytes: int
    scheduler: str
    address: str | None
    progress: bool


def open_chunked(path: Path, data: np.ndarray | None, chunk_bytes: int):
    """The input as a dask array: a zarr store, a ``.npy`` file (``data`` its memory map) read
    slab by slab, or an in-memory array (a ``.pb``) cut into slabs."""
    if data is None:
        return open_zarr(path, chunk_bytes)
    if isinstance(data, np.memmap):
        return open_npy_chunks(path, data, chunk_bytes)
    return in_memory_chunks(data, chunk_bytes)


def evaluate_chunked(
    request: Request, source: Path, array, output: Path | None, force: bool, run: Execution
) -> None:
    """Reduce the dask array ``array`` (read from ``source``) and write or print the result."""
    with user_errors():
        lazy = reduce_array(request.ver.op, array, request.axes, bool(request.keepdims),
                            request.noop, request.opset)
    if output is None or not _streams(output):
        what = f"{request.ver.label}: the output {describe_type(lazy.dtype, lazy.shape)}"
        check_fits(math.prod(lazy.shape) * lazy.dtype.itemsize, what)
    started = time.perf_counter()
    with scheduler(run.scheduler, run.address, run.progress) as compute, user_errors():
        if output is None:
            result = compute(lazy)
        elif _streams(output):
            _stream(output, lazy, force, compute, run.chunk_bytes)
        else:
            tensors.write_tensor(output, compute(lazy), force=force, name="reduced")
    elapsed = time.perf_counter() - started
    out = console()
    if output is not None:
        out.print(f"{request.ver.label}: wrote {describe_type(lazy.dtype, lazy.shape)} to "
                  f"{shown(output)} ({duration(elapsed)}, {run.scheduler})", markup=False)
        return
    out.print(f"[bold]{request.ver.label}[/bold]  ({duration(elapsed)}, "
              f"{array.npartitions} chunks, {run.scheduler})")
    out.print(f"  input   {describe(array)}  {shown(source)}", markup=False)
    out.print(f"  output  {describe(result)}", markup=False)
    out.print(f"  values  {preview(result)}", markup=False)


def _streams(output: Path) -> bool:
    return is_zarr(output) or output.suffix.lower() == ".npy"


def _stream(output: Path, lazy, force: bool, compute, chunk_bytes: int) -> None:
    if is_zarr(output):
        sinks.write_zarr(output, lazy, force=force, compute=compute, chunk_bytes=chunk_bytes)
    else:
        sinks.write_npy(output, lazy, force=force, compute=compute)


def installed(module: str) -> bool:
    """Whether ``module`` can be imported (without importing it)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def require_chunked(source: Path, output: Path | None, scheduler_name: str) -> None:
    """Refuse, with the extra to install, a chunked evaluation whose libraries are missing."""
    needed = [("dask", "dask")]
    if scheduler_name == "distributed":
        needed.append(("distributed", "dask"))
    if is_zarr(source) or (output is not None and is_zarr(output)):
        needed.append(("zarr", "zarr"))
    for module, extra in needed:
        if not installed(module):
            raise UserError(f"chunked evaluation needs {module}, which is not installed "
                            f"(pip install 'onnx-reduce[{extra}]')")


def chunk_bytes_of(chunk_mib: float) -> int:
    """``--chunk-mib`` in bytes; refused unless positive.

    >>> chunk_bytes_of(0.5)
    524288
    """
    if not (chunk_mib > 0 and math.isfinite(chunk_mib)):
        raise UserError(f"bad --chunk-mib {chunk_mib!r}: give a positive size in MiB")
    return max(int(chunk_mib * 2**20), 1)
