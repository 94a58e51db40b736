"""The one table of operator versions: attributes and defaults, where axes live, allowed dtypes.

Everything else (validation, shape inference, the backend, the CLI's ``info``) reads this table.
It is written out by hand from the ONNX documents and checked against ``onnx.defs`` in the tests.

>>> resolve("ReduceL2", 17).label
'ReduceL2-13'
>>> resolve("ReduceLogSumExp", 28).dtypes == frozenset({"bfloat16", "float16", "float", "double"})
True
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from .values import as_integer, shown

OPS = ("ReduceSum", "ReduceL2", "ReduceLogSumExp")

_NUMERIC_V1 = frozenset({"float", "double", "float16", "int32", "int64", "uint32", "uint64"})
_NUMERIC_V13 = _NUMERIC_V1 | {"bfloat16"}
_FLOATS = frozenset({"bfloat16", "float16", "float", "double"})


@dataclass(frozen=True, eq=False)
class OpVersion:
    """One version of one operator, as its schema defines it (one instance per version: compared
    and hashed by identity)."""

    op: str
    version: int
    axes_is_input: bool
    """True: ``axes`` is an optional int64 input; False: an ``INTS`` attribute."""
    dtypes: frozenset[str]
    """Allowed ONNX element types of ``data`` (and of the output)."""
    states_rank0_and_empty_set: bool
    """The version's document says rank-0 input is valid and what an empty reduction gives.
    (Version 11 is silent; onnx-reduce applies the same rule there.)"""
    has_function_body: bool

    @property
    def label(self) -> str:
        return f"{self.op}-{self.version}"

    @property
    def attributes(self) -> dict[str, int | None]:
        """Attribute names and defaults (None: no default, the attribute is optional)."""
        if self.axes_is_input:
            return {"keepdims": 1, "noop_with_empty_axes": 0}
        return {"axes": None, "keepdims": 1}


def _versions(op: str, rows: list[tuple[int, bool, frozenset[str], bool, bool]]) -> dict:
    return {v: OpVersion(op, v, axes_in, dt, r0, fn) for v, axes_in, dt, r0, fn in rows}


#: op -> since_version -> OpVersion.   (version, axes_is_input, dtypes, states_rank0, function)
VERSIONS: dict[str, dict[int, OpVersion]] = {
    "ReduceSum": _versions("ReduceSum", [
        (1, False, _NUMERIC_V1, True, False),
        (11, False, _NUMERIC_V1, False, False),
        (13, True, _NUMERIC_V13, True, False),
    ]),
    "ReduceL2": _versions("ReduceL2", [
        (1, False, _NUMERIC_V1, True, False),
        (11, False, _NUMERIC_V1, False, False),
        (13, False, _NUMERIC_V13, True, False),
        (18, True, _NUMERIC_V13, True, True),
    ]),
    "ReduceLogSumExp": _versions("ReduceLogSumExp", [
        (1, False, _NUMERIC_V1, True, False),
        (11, False, _NUMERIC_V1, False, False),
        (13, False, _NUMERIC_V13, True, False),
        (18, True, _NUMERIC_V13, True, True),
        (28, True, _FLOATS, True, True),
    ]),
}


#: The newest version in the table (every opset up to it is defined by any supported onnx).
_NEWEST_VERSION = max(v for versions in VERSIONS.values() for v in versions)


def latest(op: str) -> OpVersion:
    """The newest version of ``op``."""
    return VERSIONS[_known_op(op)][max(VERSIONS[op])]


def resolve(op: str, opset: int) -> OpVersion:
    """The version of ``op`` in force in a model that imports the default domain at ``opset``.

    ``opset`` is an integer from 1 to :func:`newest_opset` (a newer opset may change the
    operator in ways this table cannot know, so it is refused rather than guessed)."""
    versions = VERSIONS[_known_op(op)]
    opset = _opset_number(op, opset)
    return versions[max(v for v in versions if v <= opset)]


@functools.cache
def newest_opset() -> int:
    """The newest default-domain opset accepted: the one the installed onnx defines (onnx is
    imported only when an opset beyond this table's newest version asks)."""
    import onnx.defs

    return max(onnx.defs.onnx_opset_version(), _NEWEST_VERSION)


def _opset_number(op: str, opset: Any) -> int:
    """``opset`` as a Python int; ``TypeError``/``ValueError`` outside 1..:func:`newest_opset`."""
    number = as_integer(opset)
    if number is None or number < 1:
        error = TypeError if number is None else ValueError
        raise error(f"{op}: opset must be an integer >= 1, got {shown(opset)} {_accepted()}")
    if number > _NEWEST_VERSION and number > newest_opset():
        import onnx

        raise ValueError(
            f"{op}: opset {shown(number)} is beyond the newest the installed onnx "
            f"{onnx.__version__} defines {_accepted()}"
        )
    return number


def _accepted() -> str:
    return f"(accepted: 1 to {newest_opset()})"


def _known_op(op: str) -> str:
    if not isinstance(op, str):
        raise TypeError(f"the operator must be a name such as 'ReduceSum', got {shown(op)}")
    if op not in VERSIONS:
        raise ValueError(
            f"unknown operator {shown(op)}; onnx-reduce implements {', '.join(OPS)}"
        )
    return op
