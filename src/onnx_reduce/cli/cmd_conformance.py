"""``onnx-reduce conformance``: the conformance collection on onnx-reduce and, side by side,
on its peers (onnxruntime, onnx.reference)."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Annotated, Any

import typer
from rich import box
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ..spec.ops import BY_NAME
from . import peers
from .group import Settings
from .options import op_name, split_list
from .present import console, runner_header

OURS = "onnx-reduce"
_STYLE = {"pass": "green", "fail": "bold red", "error": "bold red", "unsupported": "dim"}
_SHOWN = {"pass": "pass", "fail": "FAIL", "error": "ERROR", "unsupported": "n/a"}

AgainstOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--against",
        metavar="PEER",
        help="Also run a peer: onnxruntime, onnx.reference, or all (repeatable).",
        show_default=False,
    ),
]
OpOpt = Annotated[
    list[str] | None,
    typer.Option("--op", metavar="OP", show_default=False,
                 help="Only these operators (repeatable, or comma-separated)."),
]
ExpandedOpt = Annotated[
    bool,
    typer.Option("--expanded/--no-expanded",
                 help="Include the function-body (_expanded) models."),
]
DifferencesOpt = Annotated[
    bool,
    typer.Option("--differences", help="List only the cases some runner does not pass."),
]


@dataclass
class Outcome:
    """The results of a conformance run: ``results[runner][i]`` is the result of ``cases[i]``."""

    cases: list
    runners: list[str]
    missing: list[str] = field(default_factory=list)
    results: dict[str, list] = field(default_factory=dict)

    def counts(self, runner: str) -> Counter:
        return Counter(result.status for result in self.results[runner])

    @property
    def ours_pass(self) -> bool:
        return all(result.status == "pass" for result in self.results[OURS])


def conformance_command(
    against: AgainstOpt = None,
    op: OpOpt = None,
    expanded: ExpandedOpt = True,
    differences: DifferencesOpt = False,
) -> None:
    """Run the conformance collection (ONNX's node tests, the same re-stamped at every older
    version, and onnx-reduce's edge cases) and show pass/fail per runner, side by side.

    Exit status 0 when onnx-reduce passes every case, 1 otherwise (peers' results do not count).

    Example: onnx-reduce conformance --against onnxruntime --against onnx.reference --op l2
    """
    ops = [op_name(o) for o in split_list(op)] or None
    wanted = peers.peers_from(split_list(against))
    out = console()
    outcome = run_collection(out, wanted, ops, expanded)
    out.print(case_table(outcome, differences))
    print_failures(out, outcome)
    print_summary(out, outcome)
    if not outcome.ours_pass:
        raise typer.Exit(1)


def run_collection(
    out: Console, wanted: list[str], ops: list[str] | None, expanded: bool
) -> Outcome:
    """Collect the cases and run them on onnx-reduce and the installed ``peers``, with a
    progress bar."""
    from ..conformance import collect_cases, run_case

    with out.status("collecting the conformance cases..."):
        cases = collect_cases(include_expanded=expanded)
    if ops:
        cases = [case for case in cases if case.op in ops]
    outcome = Outcome(cases, [OURS, *[p for p in wanted if peers.available(p)]],
                      [p for p in wanted if not peers.available(p)])
    columns = (TextColumn("{task.description:<16}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn())
    quiet = peers.quiet(not Settings.debug)
    with Progress(*columns, console=out, transient=True) as progress, quiet:
        for runner in outcome.runners:
            task = progress.add_task(runner, total=len(cases))
            results = []
            for case in cases:
                results.append(run_case(case, runner))
                progress.advance(task)
            outcome.results[runner] = results
    return outcome


def short_label(case: Any) -> str:
    """``Sum-13``, ``L2-18``, ``LSE-28``: the op-version, short (the registry's short name)."""
    record = BY_NAME.get(case.op)
    return f"{case.op if record is None else record.short}-{case.version}"


def short_name(case: Any) -> str:
    """A case's name without what the table's other columns say (test_, the op, the version).

    >>> from types import SimpleNamespace as Case
    >>> short_name(Case(name="test_reduce_l2_edge_overflow_float32_ver13", op="ReduceL2"))
    'edge_overflow_float32'
    """
    record = BY_NAME.get(case.op)
    name = case.name if record is None else case.name.removeprefix(record.node_test_prefix + "_")
    name = name.removeprefix("test_")
    return re.sub(r"_ver\d+$", "", name)


_SOURCE_TITLES = {
    "onnx": "ONNX's node tests",
    "restamped": "ONNX's node tests re-stamped at older versions",
    "onnx-reduce": "onnx-reduce's edge cases",
}


def case_table(outcome: Outcome, differences: bool = False) -> Table:
    """op-version x case, one status column per runner, a section per source (fits 80
    columns: short op names, runner names on two lines)."""
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    table.add_column("op", no_wrap=True)
    table.add_column("case", overflow="fold", min_width=20)
    for runner in outcome.runners:
        table.add_column(runner_header(runner), no_wrap=True)
    source = None
    for index, case in enumerate(outcome.cases):
        statuses = [outcome.results[r][index].status for r in outcome.runners]
        if differences and all(s == "pass" for s in statuses):
            continue
        if case.source != source:
            source = case.source
            if table.rows:
                table.add_section()
            title = _SOURCE_TITLES.get(source, source)
            table.add_row("", f"[italic]{title}[/]", *[""] * len(statuses))
        cells = [f"[{_STYLE[s]}]{_SHOWN[s]}[/]" for s in statuses]
        table.add_row(short_label(case), short_name(case), *cells)
    return table


def print_failures(out: Console, outcome: Outcome) -> None:
    """What went wrong for onnx-reduce, case by case (the peers' failures are in the table)."""
    bad = [(c, r) for c, r in zip(outcome.cases, outcome.results[OURS], strict=True)
           if r.status != "pass"]
    if bad:
        out.print(f"\n[bold red]onnx-reduce did not pass {len(bad)} case(s):[/]")
    for case, result in bad:
        out.print(f"  {case.name}: {result.status}: {result.detail}", markup=False)


def summary_line(outcome: Outcome, runner: str) -> str:
    """``onnx-reduce: 489 cases, 489 passed, 0 failed, 0 errors, 0 unsupported``."""
    counts = outcome.counts(runner)
    return (
        f"{runner}: {len(outcome.cases)} cases, {counts['pass']} passed, {counts['fail']} failed, "
        f"{counts['error']} errors, {counts['unsupported']} unsupported"
    )


def print_summary(out: Console, outcome: Outcome) -> None:
    out.print()
    for runner in outcome.runners:
        style = "green" if outcome.counts(runner)["pass"] == len(outcome.cases) else "yellow"
        out.print(f"[{style}]{summary_line(outcome, runner)}[/]")
    for runner in outcome.missing:
        out.print(f"[yellow]{runner}: missing (not installed; pip install -e \".[bench]\")[/]")
