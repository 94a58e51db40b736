"""Memory limits: an output (or benchmark input) that cannot fit is refused up front, with one
line, instead of failing inside numpy after the work (or swapping the machine to a halt).

>>> check_fits(10, "a tiny output")
>>> check_fits(2**80, "an output of 2**80 bytes")
Traceback (most recent call last):
...
onnx_reduce.cli.errors.UserError: an output of 2**80 bytes needs 1.05e+06 EiB; only ... available
"""

from __future__ import annotations

import os
from pathlib import Path

from .errors import UserError

_MEMINFO = Path("/proc/meminfo")


def available_memory() -> int | None:
    """Bytes this process can still allocate: Linux's MemAvailable plus free swap, else the free
    physical pages, else None (unknown: no check)."""
    try:
        fields = dict(line.split(":", 1) for line in _MEMINFO.read_text().splitlines())
        return sum(int(fields[key].split()[0]) * 1024 for key in ("MemAvailable", "SwapFree"))
    except (OSError, KeyError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def check_fits(nbytes: int, what: str) -> None:
    """Raise a :class:`UserError` if ``nbytes`` exceed the memory available now."""
    available = available_memory()
    if available is not None and nbytes > available:
        raise UserError(
            f"{what} needs {byte_size(nbytes)}; only {byte_size(available)} of memory is available"
        )


def byte_size(nbytes: int) -> str:
    """``1536`` -> ``"1.5 KiB"``, binary units up to EiB.

    >>> byte_size(1536), byte_size(3 * 2**30), byte_size(12)
    ('1.5 KiB', '3 GiB', '12 B')
    """
    value, unit = float(nbytes), "B"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"):
        if value < 1024 or unit == "EiB":
            break
        value /= 1024
    return f"{value:.3g} {unit}"
