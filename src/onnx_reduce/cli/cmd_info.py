"""``onnx-reduce info``: the version table, from ``onnx_reduce.spec.VERSIONS``."""

from __future__ import annotations

from typing import Annotated

import typer
from rich import box
from rich.table import Table

from ..spec import OPS, VERSIONS, OpVersion
from .options import op_name
from .present import console

#: The order dtypes are listed in (narrow floats first).
_DTYPE_ORDER = ("bfloat16", "float16", "float", "double", "int32", "int64", "uint32", "uint64")

OpArg = Annotated[
    str | None,
    typer.Argument(
        metavar="[OP]", help="One operator (ReduceSum, l2, logsumexp...); default: all of them.",
        show_default=False,
    ),
]


def info_command(op: OpArg = None) -> None:
    """Show every version of the operators: attributes and defaults, where axes live (attribute
    or optional int64 input), data types, and whether the version has a function body.

    Example: onnx-reduce info logsumexp
    """
    out = console()
    for index, name in enumerate([op_name(op)] if op else OPS):
        if index:
            out.print()
        out.print(version_table(name))


def version_table(op: str) -> Table:
    """A rich table of ``op``'s versions (fits 80 columns)."""
    table = Table(title=op, title_justify="left", title_style="bold", box=box.SIMPLE_HEAD,
                  show_edge=False, pad_edge=False)
    for column in ("version", "opsets", "axes", "attributes", "data types", "body"):
        table.add_column(column, no_wrap=True)
    versions = sorted(VERSIONS[op])
    for index, version in enumerate(versions):
        ver = VERSIONS[op][version]
        following = versions[index + 1] - 1 if index + 1 < len(versions) else None
        opsets = f"{version}-{following}" if following else f"{version}+"
        table.add_row(
            str(version), opsets, axes_text(ver), attributes_text(ver).replace(", ", "\n"),
            _dtype_lines(dtypes_text(ver).split(", ")),
            "yes" if ver.has_function_body else "no",
        )
    return table


def _dtype_lines(names: list[str]) -> str:
    """Two names a line, floats and integers on separate lines."""
    lines = []
    for group in ([n for n in names if "int" not in n], [n for n in names if "int" in n]):
        lines += [" ".join(group[i : i + 2]) for i in range(0, len(group), 2)]
    return "\n".join(lines)


def axes_text(ver: OpVersion) -> str:
    """Where the version takes its axes from."""
    return "input" if ver.axes_is_input else "attribute"


def attributes_text(ver: OpVersion) -> str:
    """``keepdims=1, noop_with_empty_axes=0``; an attribute without a default shows as optional.

    >>> from onnx_reduce.spec import resolve
    >>> attributes_text(resolve("ReduceSum", 11))
    'axes (optional), keepdims=1'
    """
    return ", ".join(
        f"{name} (optional)" if default is None else f"{name}={default}"
        for name, default in ver.attributes.items()
    )


def dtypes_text(ver: OpVersion) -> str:
    """The allowed data types in a fixed order."""
    known = [d for d in _DTYPE_ORDER if d in ver.dtypes]
    return ", ".join(known + sorted(ver.dtypes - set(known)))
