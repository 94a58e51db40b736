"""The ``onnx-reduce`` command line: a thin front door (parse, call the core, present)."""

from __future__ import annotations

from typing import Annotated

import typer

from ..spec.ops import names_in_words
from . import cmd_bench, cmd_conformance, cmd_eval, cmd_info, cmd_run, cmd_showcase, cmd_warm
from .group import FrontDoorGroup, Settings

app = typer.Typer(
    name="onnx-reduce",
    cls=FrontDoorGroup,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
    help=f"Spec-exact ONNX {names_in_words()} at every opset version.\n\n"
    "Example: onnx-reduce eval l2 x.npy --axes -1",
)


@app.callback()
def _global_options(
    debug: Annotated[
        bool, typer.Option("--debug", help="Show the full traceback of an error.")
    ] = False,
) -> None:
    Settings.debug = debug


app.command("eval")(cmd_eval.eval_command)
app.command("run")(cmd_run.run_command)
app.command("conformance")(cmd_conformance.conformance_command)
app.command("bench")(cmd_bench.bench_command)
app.command("info")(cmd_info.info_command)
app.command("showcase")(cmd_showcase.showcase_command)
app.command("warm")(cmd_warm.warm_command)


def main() -> None:
    """Entry point for ``python -m onnx_reduce.cli``."""
    app(prog_name="onnx-reduce")
