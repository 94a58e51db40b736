"""Parsing of the command line's own values: operator names, axes, comma-separated lists.

>>> op_name("logsumexp"), op_name("reduce_l2"), op_name("ReduceSum")
('ReduceLogSumExp', 'ReduceL2', 'ReduceSum')
>>> parse_axes(["0,1", "-1"])
[0, 1, -1]
>>> split_list(["float,double", "int32"])
['float', 'double', 'int32']
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from ..spec.ops import REGISTRY, by_alias
from .errors import UserError

#: Short, case-insensitive names accepted on the command line (after dropping "reduce", "-", "_"):
#: the registry's aliases, and each ONNX name's own rest (``sumsquare`` for ReduceSumSquare).
_SHORT = {**{record.name.lower().removeprefix("reduce"): record.name for record in REGISTRY},
          **by_alias()}


def op_name(text: str) -> str:
    """The operator a command-line name means: the ONNX name or a short one (sum, l2, logsumexp,
    ...: the registry's aliases)."""
    key = re.sub(r"[-_\s]", "", text).lower()
    key = key.removeprefix("reduce") or key
    if key in _SHORT:
        return _SHORT[key]
    names = ", ".join(f"{record.name} ({record.aliases[0]})" for record in REGISTRY)
    raise UserError(f"unknown operator {text!r}; onnx-reduce implements {names}")


def parse_axes(values: Iterable[str] | None) -> list[int] | None:
    """``--axes 0,1`` and ``--axes 0 --axes 1`` alike; ``--axes ''`` is an explicit empty list.

    None when the option was not given at all.
    """
    if values is None:
        return None
    values = list(values)
    if not values:
        return None
    axes = []
    for value in values:
        for token in value.split(","):
            token = token.strip()
            if not token:
                continue
            axes.append(_axis(value, token))
    return axes


def _axis(value: str, token: str) -> int:
    """One axis of ``--axes``: an integer that fits int64 (the type of an ONNX axis)."""
    try:
        if not re.fullmatch(r"[+-]?[0-9]+", token):  # int() takes 1_0 and other scripts' digits
            raise ValueError(token)
        axis = int(token)
    except ValueError:
        raise UserError(
            f"bad axes {value!r}: {token!r} is not an integer (use e.g. --axes 0,1 or --axes -1)"
        ) from None
    if not -(2**63) <= axis < 2**63:
        raise UserError(f"bad axes {value!r}: axis {axis} is out of range (not an int64)")
    return axis


def split_list(values: Iterable[str] | None) -> list[str]:
    """``--x a,b`` and ``--x a --x b`` alike, empty items dropped."""
    return [item.strip() for value in values or () for item in value.split(",") if item.strip()]

