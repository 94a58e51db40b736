"""The speed targets of issue 20, computed from a run: onnx-reduce against the fastest peer.

Per cell the ratio is the fastest peer's median time over onnx-reduce's (> 1: onnx-reduce is
faster); the fastest peer is the quickest of the runners other than onnx-reduce whose result
agrees with onnx-reduce's (a peer flagged ≠ gave a wrong answer and does not compete). The
targets, per timing regime:

* every cell at least :data:`CELL_FLOOR` x the fastest peer;
* geomean at least :data:`GEOMEAN_FLOOR` x over the cells of every size run (the 64 MiB,
  1 MiB and latency cells in the full matrix);
* float32 ReduceLogSumExp at least :data:`LSE_GBPS_FLOOR` GB/s in every 64 MiB layout (shown
  also as a fraction of the exp limit, exp_limit.py);
* float32 ReduceSum and ReduceL2 at least :data:`ROOFLINE_FLOOR` of the read roofline in every
  64 MiB layout (side by side in the from-memory regime; against the best pass in both).

>>> from .results import CellResult
>>> row = CellResult(op="ReduceSum", layout="inner", dtype="float32", size="latency",
...                  shape=(8, 128), axes=(1,), nbytes=4096, kernel="fast",
...                  times={"onnx-reduce": 1e-6, "torch": 3e-6, "jax": 2e-6},
...                  status={"onnx-reduce": "ok", "torch": "ok", "jax": "ok"})
>>> fastest_peer(row, "memory")
('jax', 2e-06)
>>> round(peer_ratio(row, "memory"), 6)
2.0
"""

from __future__ import annotations

from typing import Any

from .cases import short_name
from .results import BenchResults, CellResult, geomean

CELL_FLOOR = 0.9
GEOMEAN_FLOOR = 1.5
LSE_GBPS_FLOOR = 16.0
ROOFLINE_FLOOR = 0.9
#: The size whose layouts the GB/s and roofline targets are read at.
BIG = "64MiB"


def times_in(row: CellResult, regime: str) -> dict[str, float | None]:
    """The row's median times in ``regime`` ("hot" rows of a hot-only run keep ``times``)."""
    return row.hot_times if regime == "hot" and row.hot_times else row.times


def fastest_peer(row: CellResult, regime: str) -> tuple[str, float] | None:
    """(name, seconds) of the fastest peer that agrees with onnx-reduce, or None."""
    times = times_in(row, regime)
    peers = [(t, name) for name, t in times.items()
             if name != "onnx-reduce" and t and row.status.get(name) == "ok"]
    if not peers:
        return None
    seconds, name = min(peers)
    return name, seconds


def peer_ratio(row: CellResult, regime: str) -> float | None:
    """The fastest peer's time over onnx-reduce's, or None."""
    best = fastest_peer(row, regime)
    ours = times_in(row, regime).get("onnx-reduce")
    return best[1] / ours if best and ours else None


def compute(results: BenchResults, regime: str) -> dict[str, Any]:
    """The targets' figures in one regime (plain data: ratios, GB/s, shares, labels)."""
    ratios = {r.label: (peer_ratio(r, regime), r) for r in results.rows}
    ratios = {k: v for k, v in ratios.items() if v[0] is not None}
    lowest = min(ratios.items(), key=lambda kv: kv[1][0], default=None)
    per_size = {size: geomean([v for v, r in ratios.values() if r.size == size])
                for size in results.sizes}
    lse = {}
    shares: dict[str, list[float]] = {"side_by_side": [], "best_pass": []}
    for row in results.rows:
        if row.size != BIG or row.dtype != "float32":
            continue
        ours = times_in(row, regime).get("onnx-reduce")
        if not ours:
            continue
        if row.op == "ReduceLogSumExp":
            lse[row.layout] = row.nbytes / ours / 1e9
        elif results.roofline_gbps:
            shares["best_pass"].append(row.nbytes / ours / 1e9 / results.roofline_gbps)
            if regime == "memory" and row.roofline_fraction is not None:
                shares["side_by_side"].append(row.roofline_fraction)
    return {
        "cells": len(ratios),
        "cells_at_floor": sum(1 for v, _ in ratios.values() if v >= CELL_FLOOR),
        "lowest": None if lowest is None else (
            lowest[0], lowest[1][0], fastest_peer(lowest[1][1], regime)[0]),
        "geomean": geomean([v for v, _ in ratios.values()]),
        "geomean_per_size": per_size,
        "lse_gbps": lse,
        "lse_exp_fraction": ({k: v / results.exp_limit_gbps for k, v in lse.items()}
                             if results.exp_limit_gbps else {}),
        "roofline_lowest": {k: min(v) if v else None for k, v in shares.items()},
    }


def markdown(results: BenchResults) -> str:
    """The targets table: one column per regime run, "— met" / "— missed" after each figure."""
    regimes = [r for r in ("hot", "memory") if r in results.regimes]
    figures = {regime: compute(results, regime) for regime in regimes}
    names = {"hot": "hot (same input again and again)", "memory": "from memory (interleaved)"}
    head = ["target", *[names[r] for r in regimes]]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for label, render in _ROWS:
        lines.append("| " + " | ".join([label, *[render(figures[r]) for r in regimes]]) + " |")
    return "\n".join(lines)


def _met(ok: bool) -> str:
    return " — met" if ok else " — **missed**"


def _cells(f: dict[str, Any]) -> str:
    if f["lowest"] is None:
        return "n/a"
    label, ratio, peer = f["lowest"]
    return (f"{f['cells_at_floor']} of {f['cells']}; lowest {ratio:.2f}× ({_short(label)} vs "
            f"{peer})" + _met(f["cells_at_floor"] == f["cells"]))


def _geomean(f: dict[str, Any]) -> str:
    if f["geomean"] is None:
        return "n/a"
    sizes = ", ".join(f"{s} {v:.2f}×" for s, v in f["geomean_per_size"].items() if v)
    return f"{f['geomean']:.2f}× ({sizes})" + _met(f["geomean"] >= GEOMEAN_FLOOR)


def _lse(f: dict[str, Any]) -> str:
    if not f["lse_gbps"]:
        return "n/a"
    text = ", ".join(f"{k} {v:.1f}" for k, v in f["lse_gbps"].items())
    return text + _met(min(f["lse_gbps"].values()) >= LSE_GBPS_FLOOR)


def _exp(f: dict[str, Any]) -> str:
    if not f["lse_exp_fraction"]:
        return "n/a"
    return ", ".join(f"{k} {v:.0%}" for k, v in f["lse_exp_fraction"].items())


def _roofline(f: dict[str, Any]) -> str:
    low = f["roofline_lowest"]
    parts = [f"lowest {low[k]:.0%} {name}" for k, name in
             (("side_by_side", "side by side"), ("best_pass", "of the best pass")) if low[k]]
    if not parts:
        return "n/a"
    return "; ".join(parts) + _met(min(v for v in low.values() if v) >= ROOFLINE_FLOOR)


def _short(label: str) -> str:
    return " ".join(_short_word(word) for word in label.split())


def _short_word(word: str) -> str:
    try:
        return short_name(word)
    except KeyError:  # a layout or size
        return word


_ROWS = (
    (f"every cell ≥ {CELL_FLOOR}× the fastest peer", _cells),
    (f"geomean ≥ {GEOMEAN_FLOOR}× over every size", _geomean),
    (f"float32 LSE ≥ {LSE_GBPS_FLOOR:.0f} GB/s, every {BIG} layout", _lse),
    ("float32 LSE / exp limit, per layout", _exp),
    (f"float32 Sum/L2 ≥ {ROOFLINE_FLOOR:.0%} of the read roofline, every {BIG} layout",
     _roofline),
)
