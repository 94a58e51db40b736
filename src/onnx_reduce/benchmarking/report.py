"""Markdown renderings of a run: :func:`compact` (machine, targets, summaries and one line per
cell with every runner's time: what BENCHMARKS.md embeds) and :func:`detail` (every runner's
time in both regimes with its error in ulps, the roofline shares, the kernel path, the notes:
what docs/benchmark-method.md embeds).

>>> from .results import BenchResults, CellResult
>>> row = CellResult(op="ReduceSum", layout="inner", dtype="float32", size="latency",
...                  shape=(8, 128), axes=(1,), nbytes=4096, kernel="fast",
...                  times={"onnx-reduce": 1e-6, "torch": 4e-6},
...                  status={"onnx-reduce": "ok", "torch": "ok"},
...                  ulps={"onnx-reduce": 0.5, "torch": 3.0})
>>> res = BenchResults(rows=[row], runners=("onnx-reduce", "torch"), machine="test")
>>> "| Sum inner f32 | 1.00 µs | 4.00 µs | 4.00× torch |" in compact(res)
True
>>> "| 1.00 µs (0.5) | 4.00 µs (3) |" in detail(res)
True
"""

from __future__ import annotations

from . import targets
from .cases import LAYOUT_HELP, short_name
from .results import BenchResults, CellResult, format_seconds, geomean

_PEER_SHORT = {"onnxruntime": "ort", "onnx.reference": "ref"}
_TITLE = {"latency": "latency (8x128 = 1024 elements; 8x8x16 for middle and split)"}


def compact(results: BenchResults, level: int = 2) -> str:
    """Machine, targets, summary, ulp summary and one compact table per size."""
    h = "#" * level
    lines = _header(results, h)
    lines += [f"{h} Targets (issue 20)", "", targets.markdown(results), "",
              f"{h} Summary", "", _summary_table(results), ""]
    mismatches = _mismatch_summary(results)
    if mismatches:
        lines += [mismatches, ""]
    lines += [_ulp_summary(results), ""]
    for size in results.sizes:
        rows = [r for r in results.rows if r.size == size]
        lines += [f"{h} {_TITLE.get(size, size)}", "", _compact_table(results, rows), ""]
    lines += ["Layouts: " + "; ".join(f"`{k}` {v}" for k, v in LAYOUT_HELP.items()) + ".", ""]
    return "\n".join(lines) + "\n"


def detail(results: BenchResults, level: int = 2) -> str:
    """Every cell: each runner's times (from memory / hot) with its ulps, GB/s, roofline shares,
    kernel; then the notes on method."""
    h = "#" * level
    lines: list[str] = []
    footnotes: list[str] = []
    for size in results.sizes:
        rows = [r for r in results.rows if r.size == size]
        lines += [f"{h} {_TITLE.get(size, size)}", "", _detail_table(results, rows, footnotes), ""]
    if footnotes:
        lines += ["Notes:", ""] + [f"{i + 1}. {t}" for i, t in enumerate(footnotes)] + [""]
    lines += [f"- {note}" for note in results.notes]
    return "\n".join(lines) + "\n"


def _header(results: BenchResults, h: str) -> list[str]:
    lines = [f"{h} Machine", "", "```text", results.machine, "```", ""]
    if results.command:
        lines += [f"Command: `{results.command}`", ""]
    regimes = " and ".join(results.regimes)
    runs = (f"; each time the median of {results.runs} full runs' medians"
            if results.runs > 1 else "")
    lines.append(
        f"{len(results.rows)} cells, up to {results.repeats} interleaved samples per runner, "
        f"cell and regime ({regimes}; median reported{runs}), {results.threads} threads for "
        f"onnxruntime, torch and numba, {results.elapsed_seconds:.0f} s in all.")
    if results.roofline_gbps:
        lines += ["", f"Read roofline: **{results.roofline_gbps:.1f} GB/s** "
                  f"({results.roofline_method})."]
    if results.exp_limit_gbps:
        lines += ["", f"Exp limit: **{results.exp_limit_gbps:.1f} GB/s** of float32 (the sum "
                  "of exp of an in-cache array with onnx-reduce's float32 LSE exp, "
                  f"{results.threads} threads, best of 10)."]
    return [*lines, ""]


def _summary_table(results: BenchResults) -> str:
    peers = results.runners[1:]
    head = ["size", *[f"vs {p}" for p in peers],
            *[f"vs the fastest peer ({r})" for r in results.regimes]]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    summary = results.summary()
    for size in results.sizes:
        cells = [size]
        for peer in peers:
            value = summary[f"geomean_speedup_vs_{peer}"][size]
            cells.append("n/a" if value is None else f"{value:.2f}×")
        for regime in results.regimes:
            value = geomean([targets.peer_ratio(r, regime) for r in results.rows
                             if r.size == size])
            cells.append("n/a" if value is None else f"{value:.2f}×")
        out.append("| " + " | ".join(cells) + " |")
    first = "from memory" if results.regimes[0] == "memory" else "hot"
    return (f"Geomean speed-up of onnx-reduce (peer's time / ours, {first}; > 1: "
            "onnx-reduce is faster):\n\n" + "\n".join(out))


def _ulp_summary(results: BenchResults) -> str:
    dtypes = [d for d in ("float32", "float64", "float16", "bfloat16")
              if any(r.dtype == d for r in results.rows)]
    head = ["largest error, ulps", *[short_name(d) for d in dtypes]]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for runner in results.runners:
        cells = [runner]
        for dtype in dtypes:
            values = [r.ulps.get(runner) for r in results.rows if r.dtype == dtype]
            values = [v for v in values if v is not None]
            cells.append(_ulps(max(values)) if values else "—")
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def _compact_table(results: BenchResults, rows: list[CellResult]) -> str:
    head = ["cell", *results.runners,
            *[f"fastest / ours ({r})" for r in results.regimes]]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [f"{short_name(r.op)} {r.layout} {short_name(r.dtype)}"]
        for runner in results.runners:
            status = r.status.get(runner, "n/a")
            text = "n/a" if status.startswith("n/a") else format_seconds(r.times.get(runner))
            cells.append(text + (" ≠" if status == "mismatch" else ""))
        for regime in results.regimes:
            cells.append(_ratio(r, regime))
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def _ratio(row: CellResult, regime: str) -> str:
    ratio = targets.peer_ratio(row, regime)
    if ratio is None:
        return "—"
    peer = targets.fastest_peer(row, regime)[0]
    return f"{ratio:.2f}× {_PEER_SHORT.get(peer, peer)}"


def _detail_table(results: BenchResults, rows: list[CellResult], footnotes: list[str]) -> str:
    def note(text: str) -> int:
        if text not in footnotes:
            footnotes.append(text)
        return footnotes.index(text) + 1

    head = ["op", "layout", "dtype", "shape → axes", *results.runners,
            "onnx-reduce GB/s (roofline: side by side / best pass)", "kernel"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r.op, r.layout, r.dtype, f"{'x'.join(map(str, r.shape))} → {list(r.axes)}"]
        for runner in results.runners:
            status = r.status.get(runner, "n/a: not run")
            if status.startswith("n/a"):
                cells.append(f"n/a[{note(f'{runner}: {status[4:].strip()}')}]")
                continue
            cells.append(_runner_cell(r, runner, status))
        cells.append(_gbps(r))
        cells.append(r.kernel)
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def _runner_cell(row: CellResult, runner: str, status: str) -> str:
    text = format_seconds(row.times.get(runner))
    if row.hot_times.get(runner):
        text += f" / {format_seconds(row.hot_times[runner])}"
    ulps = row.ulps.get(runner)
    if ulps is not None:
        text += f" ({_ulps(ulps)})"
    if status == "mismatch":
        text += f" ≠ ({row.error[runner]:.1e})"
    return text


def _gbps(row: CellResult) -> str:
    fractions = [row.roofline_fraction, row.roofline_fraction_best_pass]
    if any(f is not None for f in fractions):
        shares = " / ".join("—" if f is None else f"{f:.0%}" for f in fractions)
        return f"{row.gbps:.1f} ({shares})"
    if row.gbps is not None and row.size != "latency":
        return f"{row.gbps:.1f}"
    return "—"


def _ulps(value: float) -> str:
    """0.4999 -> "0.5", 3.0 -> "3", 12345.6 -> "1.2e+04", inf -> "inf"."""
    if value != value or value == float("inf"):
        return "inf"
    if value < 10:
        return f"{value:.2g}" if value >= 1 else f"{value:.1f}"
    return f"{value:.0f}" if value < 1e4 else f"{value:.1e}"


def _mismatch_summary(results: BenchResults) -> str:
    counts: dict[str, dict[str, int]] = {}
    for r in results.rows:
        for runner, status in r.status.items():
            if status == "mismatch":
                per = counts.setdefault(runner, {})
                per[r.dtype] = per.get(r.dtype, 0) + 1
    if not counts:
        return ""
    parts = [f"{runner} in {sum(per.values())} (" + ", ".join(
        f"{short_name(d)} {n}" for d, n in per.items()) + ")" for runner, per in counts.items()]
    return ("Cells where a peer disagrees with onnx-reduce beyond the dtype's tolerance (≠; not "
            "counted as the fastest peer): " + "; ".join(parts) + ".")
