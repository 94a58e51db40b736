"""The outcome of a run: one :class:`CellResult` per cell, and its renderings (Markdown,
summary, PNG plot).

>>> row = CellResult(op="ReduceSum", layout="inner", dtype="float32", size="latency",
...                  shape=(8, 128), axes=(1,), nbytes=4096, kernel="fast",
...                  times={"onnx-reduce": 1e-6, "onnxruntime": 4e-6},
...                  status={"onnx-reduce": "ok", "onnxruntime": "ok"}, ort_ratio=4.0, gbps=4.1)
>>> res = BenchResults(rows=[row], runners=("onnx-reduce", "onnxruntime"), machine="test")
>>> res.summary()["geomean_speedup_vs_onnxruntime"]["latency"]
4.0
>>> "| Sum inner f32 | 1.00 µs | 4.00 µs | 4.00× ort |" in res.to_markdown()
True
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .cases import short_name, size_bytes

#: The two roofline shares of a row: side by side, then against the best pass.
_ROOFLINE_KEYS = ("roofline_fraction", "roofline_fraction_best_pass")


def format_seconds(seconds: float | None) -> str:
    """``1.5e-05`` -> ``"15.0 µs"``; None -> ``"n/a"``.

    >>> format_seconds(1.5e-05), format_seconds(0.25), format_seconds(None)
    ('15.0 µs', '250 ms', 'n/a')
    """
    if seconds is None:
        return "n/a"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if seconds >= scale or unit == "µs":
            value = seconds / scale
            digits = 0 if value >= 100 else 1 if value >= 10 else 2
            return f"{value:.{digits}f} {unit}"
    raise AssertionError  # pragma: no cover


def geomean(values: list[float]) -> float | None:
    """Geometric mean of positive values; None for none.

    >>> geomean([1.0, 4.0]), geomean([])
    (2.0, None)
    """
    values = [v for v in values if v and v > 0 and math.isfinite(v)]
    if not values:
        return None
    return math.exp(sum(math.log(v) for v in values) / len(values))


def _size_order(size: str) -> float:
    nbytes = size_bytes(size)
    return -1.0 if nbytes is None else float(nbytes)


@dataclass
class CellResult:
    """One cell of a run: the case, then what each runner measured (runner name -> value)."""

    op: str
    layout: str
    dtype: str
    size: str
    shape: tuple[int, ...]
    axes: tuple[int, ...]
    nbytes: int
    #: onnx-reduce's path for the cell: "fast", "reference" or "?".
    kernel: str
    #: Median seconds per call, or None.
    times: dict[str, float | None]
    #: Timed samples.
    samples: dict[str, int] = field(default_factory=dict)
    #: Calls per timed sample, the same for every runner of the cell (None in older results).
    calls_per_sample: int | None = None
    #: "ok", "n/a: <reason>" or "mismatch".
    status: dict[str, str] = field(default_factory=dict)
    #: max |out - onnx-reduce| / max |onnx-reduce|, or None.
    error: dict[str, float | None] = field(default_factory=dict)
    #: onnxruntime time / onnx-reduce time (> 1: onnx-reduce is faster), or None.
    ort_ratio: float | None = None
    #: Input bytes / onnx-reduce time, in GB/s.
    gbps: float | None = None
    #: Side by side: the read-roofline kernel's median time on this cell's input (same rounds)
    #: over onnx-reduce's (Sum and L2 of float32, 16 MiB and up), or None.
    roofline_fraction: float | None = None
    #: gbps / the run's read roofline, the best of its passes (Sum and L2 of float32, 1 MiB
    #: and up), or None.
    roofline_fraction_best_pass: float | None = None
    #: Median seconds per call in the hot regime (``times`` is the from-memory one), or {}.
    hot_times: dict[str, float | None] = field(default_factory=dict)
    #: Each runner's largest error in ulps of the dtype against the exact result, or None.
    ulps: dict[str, float | None] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"{self.op} {self.layout} {self.dtype} {self.size}"

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CellResult:
        """A row saved by :meth:`BenchResults.to_dict` (JSON: shapes and axes as lists)."""
        return cls(**{**data, "shape": tuple(data["shape"]), "axes": tuple(data["axes"])})


@dataclass
class BenchResults:
    """Rows of a run plus what it ran on; render with :meth:`to_markdown`, :meth:`plot`."""

    rows: list[CellResult]
    runners: tuple[str, ...]
    machine: str
    roofline_gbps: float | None = None
    roofline_method: str = ""
    #: The exp limit (exp_limit.py) in float32 GB/s, or None.
    exp_limit_gbps: float | None = None
    #: The timing regimes run (config.REGIMES); ``times`` of a row is the first's.
    regimes: tuple[str, ...] = ("memory",)
    repeats: int = 0
    threads: int = 2
    elapsed_seconds: float = 0.0
    command: str | None = None
    notes: list[str] = field(default_factory=list)
    #: Full runs behind the times (benchmarking.merge: medians of the runs' medians).
    runs: int = 1

    @property
    def sizes(self) -> list[str]:
        return sorted({r.size for r in self.rows}, key=_size_order)

    def summary(self) -> dict[str, Any]:
        """Geomean speed-ups of onnx-reduce over each runner per size (> 1: onnx-reduce is
        faster; only cells both ran), roofline fractions, mismatches and n/a counts."""
        out: dict[str, Any] = {
            "cells": len(self.rows),
            "roofline_gbps": self.roofline_gbps,
            "elapsed_seconds": self.elapsed_seconds,
        }
        for runner in self.runners[1:]:
            per_size: dict[str, float | None] = {}
            for size in self.sizes:
                ratios = [
                    r.times[runner] / r.times["onnx-reduce"]
                    for r in self.rows
                    if r.size == size
                    and r.times.get(runner)
                    and r.times.get("onnx-reduce")
                ]
                per_size[size] = geomean(ratios)
            out[f"geomean_speedup_vs_{runner}"] = per_size
        for key in _ROOFLINE_KEYS:
            out[f"{key}_median"] = {
                size: _median([
                    getattr(r, key) for r in self.rows
                    if r.size == size and getattr(r, key) is not None
                ])
                for size in self.sizes
            }
        out["mismatches"] = [
            f"{r.label}: {runner} (error {r.error.get(runner, float('nan')):.2e})"
            for r in self.rows
            for runner, status in r.status.items()
            if status == "mismatch"
        ]
        out["not_available"] = sum(
            1 for r in self.rows for s in r.status.values() if s.startswith("n/a")
        )
        out["kernels"] = {
            kind: sum(1 for r in self.rows if r.kernel == kind)
            for kind in sorted({r.kernel for r in self.rows})
        }
        return out

    def to_markdown(self, level: int = 2) -> str:
        """The compact report (machine, targets, summaries, one line per cell: what
        BENCHMARKS.md embeds), section headings at Markdown ``level``."""
        from .report import compact

        return compact(self, level)

    def detail_markdown(self, level: int = 2) -> str:
        """Every runner's time in each regime with its ulps, the roofline shares, the kernel
        path and the notes on method (what docs/benchmark-method.md embeds)."""
        from .report import detail

        return detail(self, level)

    def to_dict(self) -> dict[str, Any]:
        """Everything as JSON-ready data (:meth:`from_dict` reads it back)."""
        data = {k: getattr(self, k) for k in self.__dataclass_fields__}
        data["runners"] = list(self.runners)
        data["regimes"] = list(self.regimes)
        data["rows"] = [dataclasses.asdict(row) for row in self.rows]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BenchResults:
        """The inverse of :meth:`to_dict` (shapes and axes come back as tuples)."""
        data = dict(data)
        data["runners"] = tuple(data["runners"])
        data["regimes"] = tuple(data.get("regimes", ("memory",)))
        data["rows"] = [CellResult.from_dict(row) for row in data["rows"]]
        return cls(**data)

    def plot(self, path: str | Path) -> None:
        """A PNG: per size, each runner's time over onnx-reduce's for every cell (log scale;
        above 1 means onnx-reduce is faster)."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        sizes = self.sizes
        others = self.runners[1:]
        fig, axes_ = plt.subplots(
            len(sizes), 1, figsize=(max(8.0, 0.16 * max(1, len(self.rows) // max(1, len(sizes)))
                                        + 3), 3.6 * len(sizes)),
            squeeze=False,
        )
        markers = {"onnxruntime": "o", "onnx.reference": "s", "numpy": "^", "torch": "D",
                   "jax": "v", "scipy": "P"}
        for ax, size in zip(axes_[:, 0], sizes, strict=True):
            rows = [r for r in self.rows if r.size == size]
            xs = range(len(rows))
            for runner in others:
                points = [
                    (i, r.times[runner] / r.times["onnx-reduce"])
                    for i, r in zip(xs, rows, strict=True)
                    if r.times.get(runner) and r.times.get("onnx-reduce")
                ]
                if points:
                    ax.scatter([p[0] for p in points], [p[1] for p in points], s=14,
                               marker=markers.get(runner, "x"), label=runner, alpha=0.8)
            ax.axhline(1.0, color="black", linewidth=0.8)
            ax.set_yscale("log")
            ax.set_xticks(list(xs))
            ax.set_xticklabels(
                [f"{short_name(r.op)} {r.layout} {short_name(r.dtype)}" for r in rows],
                rotation=90, fontsize=6,
            )
            ax.set_ylabel("time / onnx-reduce time")
            ax.set_title(f"{size}: above 1 = onnx-reduce faster", fontsize=10)
            ax.grid(axis="y", which="both", alpha=0.3)
            ax.legend(fontsize=7, loc="best")
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)


def speed_figures(nbytes: int, times: dict[str, float | None], roofline: float | None,
                  against_roofline: bool) -> tuple[float | None, float | None, float | None]:
    """(GB/s, onnxruntime's time over ours, GB/s over the read roofline) of a cell from its
    median ``times``, None where a time is missing; the share only where
    ``against_roofline`` (Sum and L2 of float32, 1 MiB and up)."""
    ours, ort = times.get("onnx-reduce"), times.get("onnxruntime")
    gbps = nbytes / ours / 1e9 if ours else None
    share = gbps / roofline if gbps and roofline and against_roofline else None
    return gbps, (ort / ours if ort and ours else None), share


def _median(values: list[float]) -> float | None:
    if not values:
        return None
    values = sorted(values)
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2
