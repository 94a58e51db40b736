"""What one benchmark run covers: :class:`BenchConfig`.

>>> cfg = BenchConfig.quick()
>>> cfg.sizes, cfg.threads
(('latency', '1MiB'), 2)
>>> BenchConfig(ops=["sum"], layouts=["inner"], dtypes=["f32"], sizes=["latency"]).ops
('ReduceSum',)
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from .cases import (
    DTYPES,
    LAYOUTS,
    OPS,
    SIZES,
    Case,
    normalize_dtype,
    normalize_layout,
    normalize_op,
    normalize_size,
)

#: Runner names, in table order. onnx-reduce is always run: the others are checked against it.
RUNNERS: tuple[str, ...] = (
    "onnx-reduce", "onnxruntime", "torch", "jax", "numpy", "scipy", "onnx.reference",
)


#: Timing regimes: "memory" (a sample's first call follows another runner's: the input as the
#: last runner left it, from memory at 64 MiB) and "hot" (each sample follows an untimed call
#: of the same runner on the same input).
REGIMES: tuple[str, ...] = ("memory", "hot")


def normalize_regime(name: str) -> str:
    key = name.strip().lower()
    key = {"cold": "memory", "from-memory": "memory", "warm": "hot"}.get(key, key)
    if key in REGIMES:
        return key
    raise ValueError(f"unknown regime {name!r}; choose from {', '.join(REGIMES)}")


def normalize_runner(name: str) -> str:
    key = name.strip().lower().replace("_", "-")
    aliases = {"ort": "onnxruntime", "reference": "onnx.reference",
               "onnx-reference": "onnx.reference", "np": "numpy",
               "onnxreduce": "onnx-reduce", "ours": "onnx-reduce", "pytorch": "torch"}
    key = aliases.get(key, key)
    if key in RUNNERS:
        return key
    raise ValueError(f"unknown runner {name!r}; choose from {', '.join(RUNNERS)}")


def _tuple(values: Iterable[str] | str, normalize) -> tuple[str, ...]:
    if isinstance(values, str):
        values = [v for v in values.split(",") if v.strip()]
    out: list[str] = []
    for value in values:
        name = normalize(value)
        if name not in out:
            out.append(name)
    if not out:
        raise ValueError("a benchmark filter selected nothing")
    return tuple(out)


@dataclass
class BenchConfig:
    """The matrix (ops x layouts x dtypes x sizes), how often to time, and who runs.

    Names may be given loosely (``"sum"``, ``"f16"``, ``"64mib"``, ``"ort"``, or one
    comma-separated string); they are normalized on creation. ``repeats`` is the number of
    timed samples per runner and cell (the median is reported); ``threads`` is given to
    onnxruntime (``intra_op_num_threads``), torch and numba (XLA sizes its pool to the
    machine's cores: 2 on the project machine, the default here). ``regimes``: see
    :data:`REGIMES`.
    """

    ops: tuple[str, ...] = OPS
    layouts: tuple[str, ...] = tuple(LAYOUTS)
    dtypes: tuple[str, ...] = DTYPES
    sizes: tuple[str, ...] = SIZES
    #: 15, not 9: with 9 a 64 MiB cell's median moved up to ~15% between runs on the project
    #: machine (whichever runner a call happened to follow: see timing.py)
    repeats: int = 15
    runners: tuple[str, ...] = RUNNERS
    regimes: tuple[str, ...] = REGIMES
    threads: int = 2
    #: onnx.reference is slow: at most this many samples per cell at 16 MiB and above.
    reference_repeats: int = 3
    #: stop sampling a cell after this long (each runner keeps at least 3 samples).
    max_cell_seconds: float = 20.0
    #: a timed sample repeats a fast call until it lasts this long (latency cells).
    min_sample_seconds: float = 0.002
    #: bytes streamed by the read-roofline measurement (0: skip it).
    roofline_bytes: int = 256 * 2**20
    #: measure the exp limit (exp_limit.py) before the cells.
    exp_limit: bool = True
    #: measure each runner's error in ulps against the exact result (exact.py; untimed).
    ulps: bool = True
    seed: int = 0
    #: filled by the suite: extra notes for the report.
    notes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.ops = _tuple(self.ops, normalize_op)
        self.layouts = _tuple(self.layouts, normalize_layout)
        self.dtypes = _tuple(self.dtypes, normalize_dtype)
        self.sizes = _tuple(self.sizes, normalize_size)
        self.regimes = tuple(r for r in REGIMES if r in _tuple(self.regimes, normalize_regime))
        runners = _tuple(self.runners, normalize_runner)
        # onnx-reduce first, always (it is the baseline of every ratio and check).
        self.runners = ("onnx-reduce", *[r for r in RUNNERS if r in runners and r != "onnx-reduce"])
        if self.repeats < 1:
            raise ValueError(f"repeats must be >= 1, got {self.repeats}")
        if self.threads < 1:
            raise ValueError(f"threads must be >= 1, got {self.threads}")

    @classmethod
    def quick(cls, **overrides) -> BenchConfig:
        """Latency and 1 MiB cells, 5 samples: a few minutes on 2 cores with every peer."""
        values = {"sizes": ("latency", "1MiB"), "repeats": 5, "max_cell_seconds": 5.0}
        values.update(overrides)
        return cls(**values)

    @classmethod
    def full(cls, **overrides) -> BenchConfig:
        """The whole matrix, 64 MiB cells included, 15 samples."""
        values = {"sizes": SIZES, "repeats": 15}
        values.update(overrides)
        return cls(**values)

    def cases(self) -> list[Case]:
        """Every cell, grouped so cells sharing an input are adjacent (size, rank, dtype)."""
        cells = [
            Case(op, layout, dtype, size)
            for size in self.sizes
            for rank in (2, 3)
            for dtype in self.dtypes
            for layout in self.layouts
            if LAYOUTS[layout][0] == rank
            for op in self.ops
        ]
        return cells
