"""``onnx-reduce warm``: compile the fast kernels into numba's on-disk cache now."""

from __future__ import annotations

import time
from typing import Annotated

import typer

from ..kernels.warm import LAYOUTS, warm_up
from ..spec.dtypes import dtype_named, onnx_type_name
from .errors import UserError
from .options import op_name, split_list
from .present import console

OpsArg = Annotated[
    list[str] | None,
    typer.Argument(metavar="[OPS]...", help="Operators (ReduceSum, l2, lse...); default: all.",
                   show_default=False),
]
DtypesOpt = Annotated[
    list[str] | None,
    typer.Option(metavar="DTYPES", show_default=False,
                 help="Only these dtypes (ONNX or numpy names), e.g. --dtypes float,bfloat16."),
]
SizesOpt = Annotated[
    list[str] | None,
    typer.Option(metavar="SIZES", show_default=False,
                 help="small (one-thread kernels) and/or large (threaded ones); default: both."),
]

JobsOpt = Annotated[
    int | None,
    typer.Option(min=1, show_default=False,
                 help="Processes compiling at once; default: one per usable core."),
]


def warm_command(ops: OpsArg = None, dtypes: DtypesOpt = None, sizes: SizesOpt = None,
                 jobs: JobsOpt = None) -> None:
    """Compile the kernels every operator, dtype and layout takes, into numba's on-disk cache:
    later processes load them instead of compiling on their first calls (up to a minute each).

    Example: onnx-reduce warm sum l2 --dtypes float
    """
    names = [op_name(op) for op in ops] if ops else None
    chosen_sizes = split_list(sizes) or list(LAYOUTS)
    for size in chosen_sizes:
        if size not in LAYOUTS:
            raise UserError(f"unknown size {size!r}; choose from {', '.join(LAYOUTS)}")
    from ..benchmarking.machine import usable_cores  # not at import: the CLI starts without it

    start = time.perf_counter()
    calls = warm_up(names, [_onnx_type(d) for d in split_list(dtypes)] or None, chosen_sizes,
                    jobs or usable_cores())
    console().print(f"warm: {calls} calls in {time.perf_counter() - start:.1f} s")


def _onnx_type(name: str) -> str:
    """The ONNX type name of ``name`` (an ONNX name or a numpy dtype name)."""
    try:
        return onnx_type_name(dtype_named(name))
    except ValueError as exc:
        raise UserError(str(exc)) from None
