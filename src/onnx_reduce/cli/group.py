"""The command group: turns user errors and usage errors into one line on stderr, exit status 2.

Anything else a command raises is a bug of onnx-reduce: one line too (``internal error``, exit
status 1), so that no input ever shows the user a traceback. ``--debug`` (a global option) shows
the full traceback instead of the one line. Every line is printed through :func:`shown`: messages
quote model-provided names.
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Sequence
from typing import Any

import typer
from typer.core import TyperGroup

from .errors import INTERNAL_ERROR_EXIT, USER_ERROR_EXIT, UserError, one_line, shown
from .files import TerminatedBySignal


class Settings:
    """Process-wide settings made by the global options (reset on every invocation)."""

    debug: bool = False


class FrontDoorGroup(TyperGroup):
    """A Typer group whose failures are one clear line (or a traceback with ``--debug``)."""

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        Settings.debug = False
        try:
            result = super().main(
                args, prog_name or "onnx-reduce", complete_var, standalone_mode=False, **extra
            )
        except UserError as error:
            code = _report(error, str(error))
        except TerminatedBySignal as error:
            sys.stderr.write(f"{error}\n")
            code = error.exit_status
        except typer.Abort:
            sys.stderr.write("aborted\n")
            code = 1
        except typer.TyperException as error:  # click's usage errors: bad option, missing argument
            code = _report_usage(error)
        except Exception as error:
            _report(error, f"internal error: {type(error).__name__}: {error} "
                           "(a bug in onnx-reduce; --debug shows the traceback)")
            code = INTERNAL_ERROR_EXIT
        else:
            code = result if isinstance(result, int) else 0
        if not standalone_mode:
            return code
        sys.exit(code)


def _report(error: BaseException, message: str) -> int:
    if Settings.debug:
        traceback.print_exception(error)
    else:
        sys.stderr.write(f"error: {shown(one_line(message))}\n")
    return USER_ERROR_EXIT


def _report_usage(error: typer.TyperException) -> int:
    ctx = getattr(error, "ctx", None)
    if type(error).__name__ == "NoArgsIsHelpError":  # bare `onnx-reduce`: show the help
        text = error.format_message()  # (rich help is printed while it is made; text is then "")
        if text.strip():
            sys.stdout.write(text + "\n")
        return 0
    message = error.format_message() if hasattr(error, "format_message") else str(error)
    if ctx is not None:
        message = f"{one_line(message)} (see '{ctx.command_path} --help')"
    _report(error, message)
    return int(getattr(error, "exit_code", USER_ERROR_EXIT))
