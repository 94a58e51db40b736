"""``onnx-reduce showcase``: the main job — conformance against the peers, the headline edge
cases side by side, and a quick benchmark, on data it makes itself, in about a minute."""

from __future__ import annotations

import time
from collections import Counter
from typing import Annotated

import numpy as np
import typer
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..spec import OPS
from . import cmd_bench, cmd_conformance, peers
from .cmd_conformance import OURS, Outcome
from .group import Settings
from .headline import HEADLINES, OPSET, Headline, verdict
from .present import console, preview, runner_header, scalar

#: Significant digits shown in the headline table (the verdicts are exact).
DIGITS = 8

BenchOpt = Annotated[
    bool, typer.Option("--bench/--no-bench", help="Run the quick benchmark part.")
]


def showcase_command(bench: BenchOpt = True) -> None:
    """The showcase: the conformance collection on onnx-reduce, onnxruntime and onnx.reference;
    the headline edge cases side by side with their exact values; a short benchmark.

    Needs no set-up or data; a peer that is not installed is reported as missing.

    Exit status 0 when onnx-reduce passes everything, else 1.

    Example: onnx-reduce showcase
    """
    started = time.perf_counter()
    out = console()
    runners = [OURS, *peers.PEERS]
    out.rule("[bold]onnx-reduce showcase[/]")
    missing = [p for p in peers.PEERS if not peers.available(p)]
    if missing:
        out.print(f"[yellow]missing peers: {', '.join(missing)} (pip install -e \".[bench]\")[/]")

    out.rule("1. Conformance: ONNX's node tests (at every version) and our edge cases")
    outcome = cmd_conformance.run_collection(out, list(peers.PEERS), None, True)
    out.print(version_table(outcome))
    cmd_conformance.print_failures(out, outcome)
    cmd_conformance.print_summary(out, outcome)

    out.rule(f"2. Headline edge cases (opset {OPSET}, all axes, keepdims=0)")
    headline_ok = print_headlines(out, runners)

    if bench:
        out.rule("3. Quick benchmark (median time per call)")
        run_bench(out)
    ok = outcome.ours_pass and headline_ok
    verdict_text = "[green]onnx-reduce passed everything[/]" if ok else \
        "[bold red]onnx-reduce did not pass everything (see above)[/]"
    out.rule()
    out.print(f"{verdict_text} — showcase finished in {time.perf_counter() - started:.0f} s")
    if not ok:
        raise typer.Exit(1)


def version_table(outcome: Outcome) -> Table:
    """Per op-version: cases, and per runner the passed count with what else happened."""
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    table.add_column("op-version", no_wrap=True)
    table.add_column("cases", justify="right")
    for runner in (*outcome.runners, *outcome.missing):
        table.add_column(runner_header(runner), no_wrap=True)
    labels = sorted({(OPS.index(c.op), c.version, c.label) for c in outcome.cases})
    for _, _, label in labels:
        indices = [i for i, case in enumerate(outcome.cases) if case.label == label]
        cells = [label, str(len(indices))]
        for runner in outcome.runners:
            counts = Counter(outcome.results[runner][i].status for i in indices)
            cells.append(counts_text(counts, len(indices)))
        cells += ["[dim]missing[/]"] * len(outcome.missing)
        table.add_row(*cells)
    return table


def counts_text(counts: Counter, total: int) -> str:
    """``40 ✓`` when all pass, else ``31 ✓ 3 ✗ 6 n/a`` (rich markup).

    >>> counts_text(Counter({"pass": 2}), 2)
    '[green]2 ✓[/]'
    """
    if counts["pass"] == total:
        return f"[green]{total} ✓[/]"
    parts = [f"{counts['pass']} ✓"]
    bad = counts["fail"] + counts["error"]
    if bad:
        parts.append(f"[red]{bad} ✗[/]")
    if counts["unsupported"]:
        parts.append(f"[dim]{counts['unsupported']} n/a[/]")
    return " ".join(parts)


def print_headlines(out: Console, runners: list[str]) -> bool:
    """The headline table; True when onnx-reduce gets every case right."""
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1, 0, 0))
    table.add_column("case", no_wrap=True)
    table.add_column("exact", no_wrap=True)
    for runner in runners:
        table.add_column(runner_header(runner), no_wrap=True)
    notes: list[str] = []
    ours_ok = True
    with peers.quiet(not Settings.debug):
        for case in HEADLINES:
            cells = [escape(case.title), scalar(case.exact(), DIGITS)]
            for runner in runners:
                text, ok = _run_headline(runner, case, notes)
                cells.append(text)
                if runner == OURS and not ok:
                    ours_ok = False
            table.add_row(*cells)
    out.print(table)
    out.print(f"✓ = the exact value (within 1 ulp; 2 for float64, shown to {DIGITS} digits). "
              "The traps:")
    for case in HEADLINES:
        out.print(f"  {case.title}: {case.trap}", markup=False)
    for index, note in enumerate(notes, start=1):
        out.print(f"  [{index}] {note}", markup=False)
    return ours_ok


def _run_headline(runner: str, case: Headline, notes: list[str]) -> tuple[str, bool]:
    if not peers.available(runner):
        return "[dim]missing[/]", False
    try:
        (value,) = peers.run_model(runner, case.model(), {"data": case.data})
    except Exception as error:  # a peer refusing a model is a result to show, not a crash
        notes.append(f"{runner} on {case.title}: {peers.short_error(error)}")
        return f"[red]error [{len(notes)}][/]", False
    value = np.asarray(value)
    ok = verdict(case, value)
    text = scalar(value, DIGITS) if value.size == 1 else preview(value)
    if value.dtype != case.data.dtype:
        text += f" ({value.dtype})"
    return (f"[green]{escape(text)} ✓[/]" if ok else f"[red]{escape(text)} ✗[/]"), ok


def run_bench(out: Console) -> None:
    """A few cells of the quick configuration: each op, float32, inner and outer layouts,
    both quick sizes, every available runner."""
    runners = [p for p in ("onnxruntime", "onnx.reference") if peers.available(p)]
    config = cmd_bench.make_config(
        quick=True, ops=None, dtypes=["float32"], layouts=["inner", "outer"],
        sizes=["latency", "1MiB"], runners=[*runners, "numpy"], repeats=3, roofline=False,
        regimes=["memory"],
    )
    results = cmd_bench.run_with_progress(out, config)
    out.print(cmd_bench.results_table(results))
    cmd_bench.print_summary(out, results)
    out.print("The whole matrix: onnx-reduce bench --full --plot bench.png -o bench.md")
