"""Repeated full runs as one result: each runner's time in each cell is the median of the
runs' medians, so one run's outlier (a noisy neighbour on the VM, a core slow to wake) moves
a cell less than it moves a single run.

Runs merge only when they timed the same cells with the same runners on the same revision
and machine (the ``Load average`` line aside): anything else is a ``ValueError``. A peer
counts as agreeing with onnx-reduce only where it did in every run; errors and ulps are the
largest of any run; the read roofline and the exp limit are the median run's (a shared VM's
bandwidth moves between runs, and the best of them would set the bar by one quiet moment:
docs/benchmark-method.md, "Repeated runs"), and every derived figure (GB/s, roofline shares,
onnxruntime's ratio) is worked out again from the merged medians.

>>> from .results import BenchResults, CellResult, speed_figures
>>> def run(ours, torch):
...     row = CellResult(op="ReduceSum", layout="inner", dtype="float32", size="1MiB",
...                      shape=(512, 512), axes=(1,), nbytes=2**20, kernel="fast",
...                      times={"onnx-reduce": ours, "torch": torch}, samples={"torch": 5},
...                      status={"onnx-reduce": "ok", "torch": "ok"})
...     return BenchResults(rows=[row], runners=("onnx-reduce", "torch"), machine="m")
>>> merged = merge_runs([run(1e-5, 2e-5), run(3e-5, 2e-5), run(2e-5, 9e-5)])
>>> merged.rows[0].times, merged.runs
({'onnx-reduce': 2e-05, 'torch': 2e-05}, 3)
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from typing import Any

from .results import BenchResults, CellResult, speed_figures


def merge_runs(runs: Sequence[BenchResults]) -> BenchResults:
    """One :class:`BenchResults` from ``runs`` of the same matrix: medians of the runs'
    medians, cell by cell (see the module docstring for the rest)."""
    if not runs:
        raise ValueError("merge_runs needs at least one run")
    first = runs[0]
    for other in runs[1:]:
        _check_same(first, other)
    roofline = _median_of(runs, "roofline_gbps")
    rows = [_merge_cells([run.rows[i] for run in runs], roofline)
            for i in range(len(first.rows))]
    return BenchResults(
        rows=rows,
        runners=first.runners,
        machine=first.machine,
        roofline_gbps=roofline,
        roofline_method=_roofline_method(runs),
        exp_limit_gbps=_median_of(runs, "exp_limit_gbps"),
        regimes=first.regimes,
        repeats=first.repeats,
        threads=first.threads,
        elapsed_seconds=sum(r.elapsed_seconds for r in runs),
        command=first.command,
        notes=list(first.notes),
        runs=sum(r.runs for r in runs),
    )


def _check_same(a: BenchResults, b: BenchResults) -> None:
    """A ``ValueError`` naming the first difference that stops two runs from merging."""
    checks: list[tuple[str, Any, Any]] = [
        ("runners", a.runners, b.runners),
        ("regimes", a.regimes, b.regimes),
        ("threads", a.threads, b.threads),
        ("cells", [r.label for r in a.rows], [r.label for r in b.rows]),
        ("machine and revision", _steady(a.machine), _steady(b.machine)),
    ]
    for what, x, y in checks:
        if x != y:
            raise ValueError(f"cannot merge runs with different {what}: {_brief(x)} and "
                             f"{_brief(y)}")


def _steady(machine: str) -> list[str]:
    """The machine description without the line that changes from run to run."""
    return [line for line in machine.splitlines() if not line.startswith("Load average")]


def _brief(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _median_of(runs: Sequence[BenchResults], key: str) -> float | None:
    values = [getattr(r, key) for r in runs if getattr(r, key)]
    return statistics.median(values) if values else None


def _roofline_method(runs: Sequence[BenchResults]) -> str:
    """The first run's method, and with several runs each one's reading."""
    method = runs[0].roofline_method.split(";")[0]
    readings = [f"{r.roofline_gbps:.1f}" for r in runs if r.roofline_gbps]
    if len(runs) == 1 or not readings:
        return runs[0].roofline_method
    return f"{method}; the median of {len(runs)} runs' readings, {', '.join(readings)} GB/s"


def _merge_cells(cells: list[CellResult], roofline: float | None) -> CellResult:
    """One cell from its rows in every run."""
    first = cells[0]
    times = _per_key([c.times for c in cells], statistics.median)
    hot = _per_key([c.hot_times for c in cells], statistics.median)
    gbps, ort_ratio, best_pass = speed_figures(first.nbytes, times, roofline,
                                               first.roofline_fraction_best_pass is not None)
    side = [c.roofline_fraction for c in cells if c.roofline_fraction is not None]
    return CellResult(
        op=first.op, layout=first.layout, dtype=first.dtype, size=first.size,
        shape=first.shape, axes=first.axes, nbytes=first.nbytes, kernel=first.kernel,
        times=times,
        samples={r: sum(c.samples.get(r, 0) for c in cells) for r in first.samples},
        calls_per_sample=first.calls_per_sample,
        status={r: _status([c.status.get(r) for c in cells]) for r in first.status},
        error=_per_key([c.error for c in cells], max),
        ort_ratio=ort_ratio,
        gbps=gbps,
        roofline_fraction=statistics.median(side) if side else None,
        roofline_fraction_best_pass=best_pass,
        hot_times=hot,
        ulps=_per_key([c.ulps for c in cells], max),
    )


def _status(statuses: list[str | None]) -> str:
    """"ok" where every run said so, else the first other word (a mismatch in any run)."""
    return next((s for s in statuses if s != "ok"), "ok") or "n/a: not run"


def _per_key(per_run: list[dict[str, float | None]], pick: Callable[[list[float]], float]
             ) -> dict[str, float | None]:
    """Each key of any run's dict: ``pick`` of the runs' values for it (None where no run has
    one)."""
    out: dict[str, float | None] = {}
    for key in dict.fromkeys(k for d in per_run for k in d):
        values = [d[key] for d in per_run if d.get(key) is not None]
        out[key] = pick(values) if values else None
    return out
