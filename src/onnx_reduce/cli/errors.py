"""User errors: the one-line failures of the command line (exit status 2, no traceback).

A command raises :class:`UserError` for anything the user can fix; :func:`user_errors` turns the
``TypeError`` / ``ValueError`` the core raises for a bad request (its messages already name the
op-version and the value) into one.

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

#: Exit status of a user error (the same as a usage error).
USER_ERROR_EXIT = 2


class UserError(Exception):
    """Something the user can fix; shown as ``error: <message>`` on one line."""


@contextmanager
def user_errors(context: str = "") -> Iterator[None]:
    """Re-raise the core's ``TypeError`` / ``ValueError`` as :class:`UserError`.

    ``context`` (e.g. a file name) is put in front of the message.
    """
    try:
        yield
    except (TypeError, ValueError) as error:
        prefix = f"{context}: " if context else ""
        raise UserError(f"{prefix}{one_line(str(error))}") from error


def one_line(message: str) -> str:
    """``message`` with its lines joined, so that an error is always exactly one line.

    >>> one_line("first\\n  second ")
    'first second'
    """
    return " ".join(part.strip() for part in message.splitlines() if part.strip())
