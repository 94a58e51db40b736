"""The benchmark matrix: names of ops, layouts, dtypes and sizes, and the cell (case) each makes.

A *layout* fixes the input's rank and the reduced axes; a *size* fixes the input's bytes
(``"latency"`` is the fixed 8x128 = 1024-element case). Shapes are powers of two, as square as
the rank allows.

>>> case = Case("ReduceSum", "middle", "float32", "1MiB")
>>> case.shape, case.axes, case.nbytes
((64, 64, 64), (1,), 1048576)
>>> Case("ReduceL2", "inner", "float16", "latency").shape
(8, 128)
>>> normalize_op("lse"), normalize_dtype("f16"), normalize_size("64mib")
('ReduceLogSumExp', 'float16', '64MiB')
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from ..spec import REGISTRY, op_record
from ..spec.dtypes import bfloat16

#: The ops of the default matrix (the speed targets are read there).
OPS: tuple[str, ...] = ("ReduceSum", "ReduceL2", "ReduceLogSumExp")
#: Every op a run can time (``--ops``): the registry's.
ALL_OPS: tuple[str, ...] = tuple(record.name for record in REGISTRY)
#: layout name -> (rank, reduced axes)
LAYOUTS: dict[str, tuple[int, tuple[int, ...]]] = {
    "inner": (2, (1,)),
    "outer": (2, (0,)),
    "all": (2, (0, 1)),
    "middle": (3, (1,)),
    "split": (3, (0, 2)),
}
LAYOUT_HELP: dict[str, str] = {
    "inner": "2-D, reduce the last (contiguous) axis",
    "outer": "2-D, reduce the first axis",
    "all": "2-D, reduce both axes",
    "middle": "3-D, reduce the middle axis",
    "split": "3-D, reduce the two non-adjacent axes 0 and 2",
}
DTYPES: tuple[str, ...] = ("float32", "float64", "float16", "bfloat16")
SIZES: tuple[str, ...] = ("latency", "1MiB", "64MiB")
LATENCY_ELEMENTS = 8 * 128

_OP_ALIASES = {alias: record.name for record in REGISTRY
               for alias in (*record.aliases, record.name.lower(), record.short.lower())}
_DTYPE_ALIASES = {
    "f32": "float32", "float": "float32", "float32": "float32",
    "f64": "float64", "double": "float64", "float64": "float64",
    "f16": "float16", "half": "float16", "float16": "float16",
    "bf16": "bfloat16", "bfloat16": "bfloat16",
}
_SHORT_DTYPE = {"float32": "f32", "float64": "f64", "float16": "f16", "bfloat16": "bf16"}
_LAYOUT_ALIASES = {"two": "split", "non-adjacent": "split", "nonadjacent": "split"}
_SIZE_RE = re.compile(r"^(\d+)\s*(k|kib|m|mib)$", re.IGNORECASE)


def normalize_op(name: str) -> str:
    """``"sum"``, ``"ReduceSum"`` ... -> the ONNX op name; ValueError for anything else."""
    if name in ALL_OPS:
        return name
    key = name.strip().lower()
    if key in _OP_ALIASES:
        return _OP_ALIASES[key]
    short = ", ".join(record.aliases[-1] for record in REGISTRY)
    raise ValueError(f"unknown op {name!r}; choose from {', '.join(ALL_OPS)} (or {short})")


def short_name(name: str) -> str:
    """The short name of an op (the registry's) or dtype, for table cells.

    >>> short_name("ReduceLogSumExp"), short_name("bfloat16")
    ('LSE', 'bf16')
    """
    if name in _SHORT_DTYPE:
        return _SHORT_DTYPE[name]
    return op_record(name).short


def normalize_layout(name: str) -> str:
    """A layout name (see :data:`LAYOUTS`); ValueError for anything else."""
    key = name.strip().lower()
    key = _LAYOUT_ALIASES.get(key, key)
    if key in LAYOUTS:
        return key
    raise ValueError(f"unknown layout {name!r}; choose from {', '.join(LAYOUTS)}")


def normalize_dtype(name: str) -> str:
    """``"f32"``, ``"float"``, ``"float32"`` -> ``"float32"``; ValueError for anything else."""
    key = str(name).strip().lower()
    if key in _DTYPE_ALIASES:
        return _DTYPE_ALIASES[key]
    raise ValueError(f"unknown dtype {name!r}; choose from {', '.join(DTYPES)}")


def normalize_size(name: str) -> str:
    """``"latency"`` or a byte size like ``"1MiB"``, ``"256KiB"`` (canonical spelling)."""
    key = str(name).strip()
    if key.lower() == "latency":
        return "latency"
    match = _SIZE_RE.match(key)
    if match is None or int(match.group(1)) == 0:
        raise ValueError(f"unknown size {name!r}; use latency or a size like 1MiB, 64MiB, 256KiB")
    unit = "MiB" if match.group(2).lower().startswith("m") else "KiB"
    return f"{int(match.group(1))}{unit}"


def size_bytes(size: str) -> int | None:
    """Input bytes of a size name; None for ``"latency"`` (a fixed element count instead).

    >>> size_bytes("64MiB") == 64 * 2**20, size_bytes("latency")
    (True, None)
    """
    size = normalize_size(size)
    if size == "latency":
        return None
    number = int(size[:-3])
    return number * (2**20 if size.endswith("MiB") else 2**10)


def numpy_dtype(name: str) -> np.dtype:
    """The numpy dtype of a dtype name (bfloat16 from ml_dtypes)."""
    name = normalize_dtype(name)
    return bfloat16 if name == "bfloat16" else np.dtype(name)


def shape_for(layout: str, dtype: str, size: str) -> tuple[int, ...]:
    """The input shape of one cell: ``elements = bytes / itemsize``, split as evenly as possible.

    >>> shape_for("inner", "float64", "1MiB"), shape_for("split", "float16", "64MiB")
    ((256, 512), (256, 256, 512))
    """
    rank, _ = LAYOUTS[normalize_layout(layout)]
    nbytes = size_bytes(size)
    if nbytes is None:
        return (8, 128) if rank == 2 else (8, 8, 16)
    elements = max(1, nbytes // numpy_dtype(dtype).itemsize)
    return _split(elements, rank)


def _split(elements: int, rank: int) -> tuple[int, ...]:
    # Powers of two split evenly (larger factors last); other counts put the rest in the last dim.
    if elements & (elements - 1) == 0:
        k = elements.bit_length() - 1
        parts = [k // rank] * rank
        for i in range(k - sum(parts)):
            parts[rank - 1 - i] += 1
        return tuple(2**p for p in parts)
    side = max(1, round(elements ** (1 / rank)))
    dims = [side] * (rank - 1)
    dims.append(max(1, elements // side ** (rank - 1)))
    return tuple(dims)


@dataclass(frozen=True)
class Case:
    """One cell of the matrix."""

    op: str
    layout: str
    dtype: str
    size: str

    @property
    def axes(self) -> tuple[int, ...]:
        return LAYOUTS[self.layout][1]

    @property
    def shape(self) -> tuple[int, ...]:
        return shape_for(self.layout, self.dtype, self.size)

    @property
    def np_dtype(self) -> np.dtype:
        return numpy_dtype(self.dtype)

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape)) * self.np_dtype.itemsize

    @property
    def label(self) -> str:
        return f"{self.op} {self.layout} {self.dtype} {self.size}"


def input_for(case: Case, seed: int = 0) -> np.ndarray:
    """The input of a cell: :func:`make_input`, its magnitudes for ReduceLogSum (whose log of a
    negative sum is NaN)."""
    x = make_input(case.shape, case.np_dtype, seed)
    return np.abs(x, out=x) if case.op == "ReduceLogSum" else x


def make_input(shape: tuple[int, ...], dtype: np.dtype, seed: int = 0) -> np.ndarray:
    """Standard-normal data of ``shape`` and ``dtype`` (C-contiguous), filled chunk by chunk so no
    full-size temporary exists (the memory benchmark relies on that).

    Standard normal values keep every sum, L2 norm and log-sum-exp of up to 2**25 elements far
    inside the float16 range.

    >>> x = make_input((4, 8), np.dtype(np.float16))
    >>> x.shape, x.dtype, bool(np.all(np.isfinite(x)))
    ((4, 8), dtype('float16'), True)
    """
    dtype = np.dtype(dtype)
    rng = np.random.default_rng(seed)
    out = np.empty(int(np.prod(shape)), dtype)
    chunk = 1 << 20
    gen_dtype = np.float64 if dtype == np.float64 else np.float32
    for start in range(0, out.size, chunk):
        stop = min(out.size, start + chunk)
        out[start:stop] = rng.standard_normal(stop - start, dtype=gen_dtype)
    return out.reshape(shape)
