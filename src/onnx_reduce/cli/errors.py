"""User errors: the one-line failures of the command line (exit status 2, no traceback).

A command raises :class:`UserError` for anything the user can fix; :func:`user_errors` turns what
the core raises for a bad request (``TypeError``, ``ValueError``, ``OverflowError``: its messages
already name the op-version and the value), an allocation that does not fit (``MemoryError``) and a
file that cannot be read or written (``OSError``) into one. Model-provided text (names, paths) is
shown with :func:`shown`, so that no control character from a file reaches the terminal.

>>> try:
...     with user_errors():
...         raise ValueError("ReduceSum-13: axis 5 is out of range")
... except UserError as error:
...     print(error)
ReduceSum-13: axis 5 is out of range
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from ..spec.values import one_line

__all__ = ["INTERNAL_ERROR_EXIT", "REQUEST_ERRORS", "USER_ERROR_EXIT", "UserError", "memory_detail",
           "one_line", "os_error_text", "shown", "user_errors"]

#: Exit status of a user error (the same as a usage error).
USER_ERROR_EXIT = 2

#: Exit status of an internal error (a bug in onnx-reduce, not the user's doing).
INTERNAL_ERROR_EXIT = 1

#: The core's exceptions that mean "this request is bad" (their messages say why).
REQUEST_ERRORS = (TypeError, ValueError, OverflowError)


class UserError(Exception):
    """Something the user can fix; shown as ``error: <message>`` on one line."""


@contextmanager
def user_errors(context: str = "") -> Iterator[None]:
    """Re-raise a bad request, an allocation that does not fit or a file error as
    :class:`UserError`, ``context`` (e.g. a file name) in front of the message."""
    prefix = f"{context}: " if context else ""
    try:
        yield
    except REQUEST_ERRORS as error:
        raise UserError(f"{prefix}{one_line(str(error))}") from error
    except MemoryError as error:
        raise UserError(f"{prefix}not enough memory ({memory_detail(error)})") from error
    except OSError as error:
        raise UserError(f"{prefix}{os_error_text(error)}") from error


def memory_detail(error: MemoryError) -> str:
    """numpy's allocation message, or what Python says (often nothing).

    >>> memory_detail(MemoryError())
    'an allocation failed'
    """
    return one_line(str(error)) or "an allocation failed"


def os_error_text(error: OSError) -> str:
    """``<file>: <reason>`` of a failed file operation, the file name shown escaped.

    >>> os_error_text(PermissionError(13, "Permission denied", "/x\\n.npy"))
    '/x\\\\n.npy: Permission denied'
    """
    reason = error.strerror or one_line(str(error)) or type(error).__name__
    return f"{shown(error.filename)}: {reason}" if error.filename else reason


def shown(text: object) -> str:
    """``text`` safe to print: control and format characters (ESC, newlines, bidi overrides)
    escaped as Python would in a string literal, everything else unchanged.

    >>> shown("y\\x1b[31m\\nz é")
    'y\\\\x1b[31m\\\\nz é'
    """
    return "".join(char if char.isprintable() else repr(char)[1:-1] for char in str(text))
