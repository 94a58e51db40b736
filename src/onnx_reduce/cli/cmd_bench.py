"""``onnx-reduce bench``: the benchmark suite (onnx-reduce against onnxruntime, torch, jax, numpy,
scipy and onnx.reference), with a progress bar while it runs and a table at the end."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich import box
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ..spec.ops import BY_NAME
from . import peers
from .errors import UserError, shown, user_errors
from .files import atomic_path, check_writable
from .group import Settings
from .limits import check_fits
from .options import split_list
from .present import console, runner_header

_SHORT_DTYPE = {"float32": "f32", "float64": "f64", "float16": "f16", "bfloat16": "bf16"}
#: --plot formats (matplotlib's, by the file's suffix), checked before the benchmark runs.
_PLOT_FORMATS = (".png", ".svg", ".pdf", ".jpg", ".jpeg")


def _list_option(metavar: str, what: str, example: str) -> Any:
    return typer.Option(metavar=metavar, show_default=False,
                        help=f"Only these {what} (comma-separated or repeated), e.g. {example}.")


PresetOpt = Annotated[
    bool, typer.Option("--quick/--full", help="The quick matrix (latency and 1 MiB cells) or the "
                       "full one (up to 64 MiB).")
]
OpsOpt = Annotated[list[str] | None, _list_option("OPS", "operators", "--ops sum,l2")]
DtypesOpt = Annotated[list[str] | None, _list_option("DTYPES", "dtypes", "--dtypes f32,bf16")]
LayoutsOpt = Annotated[
    list[str] | None,
    _list_option("LAYOUTS", "layouts (inner, outer, all, middle, split)", "--layouts inner"),
]
SizesOpt = Annotated[
    list[str] | None,
    _list_option("SIZES", "sizes (latency, 1MiB, 64MiB, 256KiB...)", "--sizes latency"),
]
RunnersOpt = Annotated[
    list[str] | None,
    _list_option("RUNNERS", "runners besides onnx-reduce (onnxruntime, torch, jax, numpy, "
                 "scipy, onnx.reference)", "--runners ort,torch"),
]
RepeatsOpt = Annotated[
    int | None, typer.Option(help="Timed samples per runner and cell (default: the preset's).",
                             show_default=False)
]
RooflineOpt = Annotated[
    bool, typer.Option("--roofline/--no-roofline",
                       help="Measure the memory-read roofline (streams 256 MiB) and the exp "
                       "limit first.")
]
HotOpt = Annotated[
    bool, typer.Option("--hot/--no-hot", help="Also time the hot regime (each sample right "
                       "after an untimed call of the same runner).")
]
PlotOpt = Annotated[
    Path | None, typer.Option(metavar="FILE.png", help="Also save a plot (needs matplotlib).",
                              show_default=False)
]
ReportOpt = Annotated[
    Path | None, typer.Option("--output", "-o", metavar="FILE.md",
                              help="Also write the Markdown report.", show_default=False)
]
ForceOpt = Annotated[bool, typer.Option("--force", help="Overwrite existing output files.")]


def bench_command(
    quick: PresetOpt = True,
    ops: OpsOpt = None,
    dtypes: DtypesOpt = None,
    layouts: LayoutsOpt = None,
    sizes: SizesOpt = None,
    runners: RunnersOpt = None,
    repeats: RepeatsOpt = None,
    roofline: RooflineOpt = True,
    hot: HotOpt = True,
    plot: PlotOpt = None,
    output: ReportOpt = None,
    force: ForceOpt = False,
) -> None:
    """Time onnx-reduce against onnxruntime, torch, jax, numpy, scipy and onnx.reference, cell
    by cell (op x layout x dtype x size), and check every runner's result against onnx-reduce's.

    Example: onnx-reduce bench --quick --ops sum,l2 --dtypes f32 --plot bench.png -o bench.md
    """
    for path in (output, plot):
        if path is not None:
            check_writable(path, force)
    if output is not None and plot is not None and Path(output).resolve() == Path(plot).resolve():
        raise UserError(f"-o and --plot name the same file {shown(plot)}; give two names")
    if plot is not None and not peers.has_module("matplotlib"):
        raise UserError("--plot needs matplotlib: pip install -e '.[bench]'")
    if plot is not None and Path(plot).suffix.lower() not in _PLOT_FORMATS:
        suffix = Path(plot).suffix or "(none)"
        raise UserError(f"{shown(plot)}: unsupported plot format {suffix!r}; "
                        f"use one of {', '.join(_PLOT_FORMATS)}")
    config = make_config(quick, ops, dtypes, layouts, sizes, runners, repeats, roofline,
                         regimes=None if hot else ["memory"])
    check_inputs_fit(config.sizes)
    out = console()
    results = run_with_progress(out, config)
    out.print(results_table(results))
    print_summary(out, results)
    if output is not None:
        with atomic_path(output, force=force) as temporary:
            temporary.write_text(results.to_markdown(), encoding="utf-8")
        out.print(f"wrote the report to {shown(output)}", markup=False)
    if plot is not None:
        with atomic_path(plot, force=force) as temporary:
            results.plot(temporary)
        out.print(f"wrote the plot to {shown(plot)}", markup=False)


def make_config(
    quick: bool = True,
    ops: list[str] | None = None,
    dtypes: list[str] | None = None,
    layouts: list[str] | None = None,
    sizes: list[str] | None = None,
    runners: list[str] | None = None,
    repeats: int | None = None,
    roofline: bool = True,
    regimes: list[str] | None = None,
) -> Any:
    """The preset (quick or full) narrowed by the filters given."""
    from ..benchmarking import BenchConfig

    overrides: dict[str, Any] = {}
    for name, values in (("ops", ops), ("dtypes", dtypes), ("layouts", layouts),
                         ("sizes", sizes)):
        if values:
            overrides[name] = split_list(values)
    if runners:
        overrides["runners"] = ["onnx-reduce", *split_list(runners)]
    if repeats is not None:
        overrides["repeats"] = repeats
    if not roofline:
        overrides["roofline_bytes"] = 0
        overrides["exp_limit"] = False
    if regimes:
        overrides["regimes"] = regimes
    with user_errors("bench"):
        return BenchConfig.quick(**overrides) if quick else BenchConfig.full(**overrides)


def check_inputs_fit(sizes: tuple[str, ...]) -> None:
    """Refuse, before any work, a size whose cells cannot fit: the input and a peer's temporary
    of the same size (numpy's and onnx.reference's ReduceL2 square the whole input)."""
    from ..benchmarking.cases import size_bytes

    largest = max(sizes, key=lambda size: size_bytes(size) or 0, default="latency")
    check_fits(2 * (size_bytes(largest) or 0), f"bench --sizes {largest}")


def run_with_progress(out: Console, config: Any) -> Any:
    """``run_suite`` with a rich progress bar (the set-up before the first cell shows as a
    pulsing bar)."""
    from ..benchmarking import run_suite

    columns = (TextColumn("{task.description:<36}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn())
    with Progress(*columns, console=out, transient=True) as progress, \
            peers.quiet(not Settings.debug):
        task = progress.add_task("setting up the runners", total=None)

        def report(done: int, total: int, label: str) -> None:
            progress.update(task, completed=done, total=total, description=label)

        return run_suite(config, progress=report)


def results_table(results: Any) -> Table:
    """One row per cell: each runner's median time, onnxruntime's over onnx-reduce's, and the
    kernel path (only when not every cell ran the same one)."""
    from ..benchmarking.results import format_seconds

    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1, 0, 0))
    table.add_column("cell", no_wrap=True)
    table.add_column("size", no_wrap=True)
    for runner in results.runners:
        table.add_column(runner_header(runner), justify="right", no_wrap=True)
    has_peers = len(results.runners) > 1
    if has_peers:
        table.add_column("fastest /\nours", justify="right", no_wrap=True)
    kernels = {row.kernel for row in results.rows}
    if len(kernels) > 1:
        table.add_column("kernel", no_wrap=True)
    for row in results.rows:
        cell = " ".join([_short(row.op), row.layout,
                         _SHORT_DTYPE.get(row.dtype, row.dtype)])
        cells = [cell, row.size]
        for runner in results.runners:
            status = row.status.get(runner, "n/a")
            if status.startswith("n/a"):
                cells.append("[dim]n/a[/]")
            elif status == "mismatch":
                cells.append(f"[red]≠ {format_seconds(row.times.get(runner))}[/]")
            else:
                cells.append(format_seconds(row.times.get(runner)))
        if has_peers:
            cells.append(_fastest(row))
        if len(kernels) > 1:
            cells.append(row.kernel)
        table.add_row(*cells)
    return table


def _fastest(row: Any) -> str:
    """The fastest agreeing peer's time over onnx-reduce's (from memory), and who it is."""
    from ..benchmarking import targets

    best = targets.fastest_peer(row, "memory")
    ratio = targets.peer_ratio(row, "memory")
    return "—" if best is None or ratio is None else f"{ratio:.2f}× {best[0]}"


def print_summary(out: Console, results: Any) -> None:
    """Geomean speed-ups of onnx-reduce per runner and size, and any disagreement."""
    summary = results.summary()
    kernels = ", ".join(f"{kind} {count}" for kind, count in summary.get("kernels", {}).items())
    out.print(f"\n{summary['cells']} cells in {summary['elapsed_seconds']:.0f} s "
              f"(onnx-reduce kernels: {kernels})")
    out.print("onnx-reduce speed-up, geomean of time ratios (> 1: onnx-reduce is faster):")
    for runner in results.runners[1:]:
        ratios = summary[f"geomean_speedup_vs_{runner}"]
        parts = [f"{size} {value:.2f}×" for size, value in ratios.items() if value is not None]
        out.print(f"  vs {runner}: {', '.join(parts) or 'n/a'}")
    if summary.get("roofline_gbps"):
        out.print(f"read roofline: {summary['roofline_gbps']:.1f} GB/s")
    for mismatch in summary.get("mismatches", []):
        out.print(f"[red]≠ {mismatch}[/]", markup=True)


def _short(op: str) -> str:
    record = BY_NAME.get(op)
    return op if record is None else record.short
