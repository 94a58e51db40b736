"""Presentation: the rich console and short, readable summaries of tensors.

>>> import numpy as np
>>> describe(np.arange(6, dtype=np.float32).reshape(2, 3))
'float32 (2, 3)'
>>> preview(np.arange(100.0))
'[0, 1, 2, …, 97, 98, 99]'
>>> preview(np.array([500, 1.581, 6e-8], np.float16))
'[500, 1.581, 6e-08]'
"""

from __future__ import annotations

import numpy as np
from rich.console import Console

from ..spec import bfloat16, onnx_type_name


def console(stderr: bool = False) -> Console:
    """A console on the current ``sys.stdout`` (made per call, so test runners can capture it).

    Text lines are not wrapped by rich (the terminal does it; paths and messages stay whole);
    tables are still fitted to the width. No emoji codes: `:smile:` in a name is text."""
    return Console(stderr=stderr, highlight=False, soft_wrap=True, emoji=False)


def duration(seconds: float) -> str:
    """``0.00123`` -> ``"1.23 ms"``, ``2.5`` -> ``"2.5 s"``.

    >>> duration(0.00123), duration(2.5)
    ('1.23 ms', '2.5 s')
    """
    return f"{seconds * 1e3:.3g} ms" if seconds < 1 else f"{seconds:.3g} s"


def describe(array: np.ndarray) -> str:
    """dtype and shape, e.g. ``float32 (2, 3)``; ONNX-only types by their ONNX name."""
    return describe_type(array.dtype, array.shape)


def describe_type(dtype: np.dtype, shape: tuple[int, ...]) -> str:
    """``describe`` of an array of ``dtype`` and ``shape`` (that need not exist)."""
    name = "bfloat16" if dtype == bfloat16 else dtype.name
    return f"{name} {tuple(shape)}"


def preview(array: np.ndarray, count: int = 6) -> str:
    """The first and last few values of ``array`` (flattened), in full precision."""
    flat = np.asarray(array).reshape(-1)
    if flat.dtype == bfloat16:
        flat = flat.astype(np.float32)
    if flat.size > count:
        half = count // 2
        parts = [*map(_value, flat[:half]), "…", *map(_value, flat[-half:])]
    else:
        parts = [_value(v) for v in flat]
    return "[" + ", ".join(parts) + "]"


def scalar(value: np.ndarray, digits: int | None = None) -> str:
    """A one-element array as a plain number: the shortest text that round-trips in its dtype,
    float64 cut to ``digits`` significant digits if given.

    >>> scalar(np.array(800.6931471805599), 8), scalar(np.array(5e30, np.float32), 8)
    ('800.69315', '5e+30')
    """
    value = np.asarray(value).reshape(-1)[0]
    if value.dtype == bfloat16:
        value = np.float32(value)
    if digits is not None and value.dtype == np.float64 and np.isfinite(value):
        value = np.float64(float(f"{float(value):.{digits}g}"))
    return _value(value)


def _value(value: np.generic) -> str:
    if not isinstance(value, np.floating):
        return str(value)
    magnitude = abs(float(value))  # (compare as a Python float: 1e16 overflows float16)
    if magnitude == 0 or 1e-4 <= magnitude < 1e16:
        return np.format_float_positional(value, trim="-")
    return np.format_float_scientific(value, trim="-")


def onnx_dtype(array: np.ndarray) -> str:
    """The ONNX name of an array's element type (``float``, ``bfloat16``...)."""
    return onnx_type_name(array.dtype)


def runner_header(runner: str) -> str:
    """Two short lines, so that the table fits 80 columns.

    >>> runner_header("onnx.reference")
    'onnx.\\nreference'
    """
    for mark in ("-", "."):
        if mark in runner:
            head, tail = runner.split(mark, 1)
            return f"{head}{mark}\n{tail}"
    return "onnx\nruntime" if runner == "onnxruntime" else runner
