"""The one op registry: every operator onnx-reduce implements, one record each.

A record names everything the other stages look up per operator: the numpy-style function
(also the reference kernel's and the torch custom op's name), the short names of tables and the
command line, the fast kernels, the gradient and the stable lowering, onnx's node tests, and the
rows of the version table (:mod:`.table`). Kernels, gradients and lowerings are named, not
imported, so the spec stage stays free of the later stages (they look the names up).

>>> op_record("ReduceLogSumExp").short, op_record("ReduceLogSumExp").aliases
('LSE', ('logsumexp', 'lse'))
>>> [record.name for record in REGISTRY][:3]
['ReduceSum', 'ReduceL2', 'ReduceLogSumExp']
"""

from __future__ import annotations

from dataclasses import dataclass

_NUMERIC_V1 = frozenset({"float", "double", "float16", "int32", "int64", "uint32", "uint64"})
_NUMERIC_V13 = _NUMERIC_V1 | {"bfloat16"}
_FLOATS = frozenset({"bfloat16", "float16", "float", "double"})

#: One version row: (since_version, axes_is_input, dtypes, states_rank0_and_empty_set,
#: has_function_body); checked against ``onnx.defs`` by tests/spec/test_table.py.
VersionRow = tuple[int, bool, frozenset, bool, bool]

#: The version rows every reduction of the 1/11/13/18 family shares up to 13.
_UP_TO_13: tuple[VersionRow, ...] = (
    (1, False, _NUMERIC_V1, True, False),
    (11, False, _NUMERIC_V1, False, False),
    (13, False, _NUMERIC_V13, True, False),
)
_AT_18: VersionRow = (18, True, _NUMERIC_V13, True, True)


@dataclass(frozen=True)
class OpRecord:
    """One operator, as every stage of onnx-reduce refers to it."""

    name: str
    """The ONNX operator type, ``"ReduceLogSumExp"``."""
    function: str
    """The numpy-style function (``onnx_reduce.<function>``), the reference kernel
    (``kernels.reference.<function>``) and the torch custom op, ``"reduce_log_sum_exp"``."""
    short: str
    """The label of tables and version names (``"LSE-18"``)."""
    aliases: tuple[str, ...]
    """Command-line names (lower case, after dropping ``reduce``, ``-`` and ``_``); the first is
    the one messages show."""
    versions: tuple[VersionRow, ...]
    empty: float
    """The reduction over an empty set (0.0 or -inf; integers cannot hold -inf)."""
    fast: tuple[str, str, str] | None
    """(module under ``kernels.fast``, kernel, binder); a missing one falls back to the
    reference path."""
    gradient: str
    """The weight of the data gradient in :mod:`onnx_reduce.kernels.gradients`."""
    lowering: str
    """The stable lowering's builder in :mod:`onnx_reduce.lowering` (``"primitive"``: the node
    is kept as it is)."""
    node_tests: str
    """onnx's node-test module (:mod:`onnx.backend.test.case.node`) whose exporters build the
    official cases; their names start with ``"test_" + function``."""

    @property
    def node_test_prefix(self) -> str:
        """The prefix of the official node tests' names, ``"test_reduce_log_sum_exp"``."""
        return f"test_{self.function}"


REGISTRY: tuple[OpRecord, ...] = (
    OpRecord(
        name="ReduceSum", function="reduce_sum", short="Sum", aliases=("sum",),
        versions=(*_UP_TO_13[:2], (13, True, _NUMERIC_V13, True, False)), empty=0.0,
        fast=("sum_l2", "reduce_sum", "bind_sum"), gradient="broadcast",
        lowering="primitive", node_tests="reducesum",
    ),
    OpRecord(
        name="ReduceL2", function="reduce_l2", short="L2", aliases=("l2",),
        versions=(*_UP_TO_13, _AT_18), empty=0.0,
        fast=("sum_l2", "reduce_l2", "bind_l2"), gradient="l2",
        lowering="l2", node_tests="reducel2",
    ),
    OpRecord(
        name="ReduceLogSumExp", function="reduce_log_sum_exp", short="LSE",
        aliases=("logsumexp", "lse"),
        versions=(*_UP_TO_13, _AT_18, (28, True, _FLOATS, True, True)), empty=-float("inf"),
        fast=("log_sum_exp", "reduce_log_sum_exp", "bind_log_sum_exp"), gradient="softmax",
        lowering="log_sum_exp", node_tests="reduce_log_sum_exp",
    ),
    OpRecord(
        name="ReduceSumSquare", function="reduce_sum_square", short="SumSq",
        aliases=("sumsquare", "sumsq"), versions=(*_UP_TO_13, _AT_18), empty=0.0,
        fast=("derived", "reduce_sum_square", "bind_sum_square"), gradient="twice_x",
        lowering="sum_square", node_tests="reducesumsquare",
    ),
    OpRecord(
        name="ReduceLogSum", function="reduce_log_sum", short="LogSum", aliases=("logsum",),
        versions=(*_UP_TO_13, _AT_18, (28, True, _FLOATS, True, True)), empty=-float("inf"),
        fast=("derived", "reduce_log_sum", "bind_log_sum"), gradient="reciprocal_sum",
        lowering="log_sum", node_tests="reduce_log_sum",
    ),
)

#: The records by ONNX name.
BY_NAME: dict[str, OpRecord] = {record.name: record for record in REGISTRY}


def op_record(name: str) -> OpRecord:
    """The record of the operator ``name`` (its ONNX type); ``KeyError`` for another name."""
    return BY_NAME[name]


def by_alias() -> dict[str, str]:
    """Every command-line alias -> ONNX name, in registry order.

    >>> by_alias()["lse"]
    'ReduceLogSumExp'
    """
    return {alias: record.name for record in REGISTRY for alias in record.aliases}


def names_in_words() -> str:
    """The operators' ONNX names as a sentence lists them.

    >>> names_in_words().startswith("ReduceSum, ReduceL2")
    True
    """
    names = [record.name for record in REGISTRY]
    return f"{', '.join(names[:-1])} and {names[-1]}"
