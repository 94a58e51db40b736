"""How validation reads the plain values it is given (integers) and shows them in errors."""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

#: Longest shown value, in characters.
LIMIT = 80
#: Integers wider than this are shown by their width: Python refuses ``str`` of the very wide.
_MAX_BITS = 256


def shown(value: Any, limit: int = LIMIT) -> str:
    """``repr(value)`` on one line and at most ``limit`` characters: a hostile value must neither
    flood nor break the one-line error that shows it.

    >>> shown([0] * 1000)[-12:]
    ', 0, 0, 0...'
    >>> shown(-(2**1000))
    '-<an integer of 1001 bits>'
    """
    if isinstance(value, int) and value.bit_length() > _MAX_BITS:
        return f"{'-' if value < 0 else ''}<an integer of {value.bit_length()} bits>"
    try:
        text = repr(value)
    except ValueError:  # it holds an integer too wide for str
        text = f"<a {type(value).__name__} holding an integer too wide to show>"
    text = " ".join(text.split())
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


def one_line(message: str) -> str:
    """``message`` with its lines joined, so that an error is always exactly one line.

    >>> one_line("first\\n  second ")
    'first second'
    """
    return " ".join(part.strip() for part in message.splitlines() if part.strip())


def as_integer(value: Any) -> int | None:
    """``value`` as a Python int when it is an integer (numpy's included, bools not), else None.

    >>> as_integer(np.int64(3)), as_integer(True), as_integer(3.0)
    (3, None, None)
    """
    if isinstance(value, (bool, np.bool_)):
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None
