"""The one table of operator versions: attributes and defaults, where axes live, allowed dtypes.

Everything else (validation, shape inference, the backend, the CLI's ``info``) reads this table.
Its rows are written out by hand in the op registry (:mod:`.ops`) from the ONNX schemas, and
checked against ``onnx.defs`` in the tests (importing onnx here would make ``import onnx_reduce``
heavy).

>>> resolve("ReduceL2", 17).label
'ReduceL2-13'
>>> resolve("ReduceLogSumExp", 28).dtypes == frozenset({"bfloat16", "float16", "float", "double"})
True
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from .ops import REGISTRY, OpRecord, VersionRow, op_record
from .values import as_integer, shown

#: The ONNX names of the operators, in registry order.
OPS = tuple(record.name for record in REGISTRY)


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
    def record(self) -> OpRecord:
        """The operator's registry record."""
        return op_record(self.op)

    @property
    def attributes(self) -> dict[str, int | None]:
        """Attribute names and defaults (None: no default, the attribute is optional)."""
        if self.axes_is_input:
            return {"keepdims": 1, "noop_with_empty_axes": 0}
        return {"axes": None, "keepdims": 1}


def _versions(op: str, rows: tuple[VersionRow, ...]) -> dict[int, OpVersion]:
    return {v: OpVersion(op, v, axes_in, dt, r0, fn) for v, axes_in, dt, r0, fn in rows}


#: op -> since_version -> OpVersion, from the registry's rows.
VERSIONS: dict[str, dict[int, OpVersion]] = {
    record.name: _versions(record.name, record.versions) for record in REGISTRY
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
