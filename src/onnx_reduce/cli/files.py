"""Output files: written atomically (a temporary file in the same directory, then
``os.replace``), and never over an existing file unless the user says ``--force``.

>>> import tempfile, pathlib
>>> target = pathlib.Path(tempfile.mkdtemp()) / "report.md"
>>> with atomic_path(target, force=False) as temporary:
...     _ = temporary.write_text("# results\\n")
>>> target.read_text()
'# results\\n'
>>> with atomic_path(target, force=False) as temporary:
...     pass
Traceback (most recent call last):
...
onnx_reduce.cli.errors.UserError: ...report.md: already exists (use --force to overwrite)
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .errors import UserError


def check_writable(path: Path, force: bool) -> None:
    """Fail early (before any work) unless ``path`` can be written."""
    path = Path(path)
    if path.is_dir():
        raise UserError(f"{path}: is a directory")
    if path.exists() and not force:
        raise UserError(f"{path}: already exists (use --force to overwrite)")
    if not path.parent.is_dir():
        raise UserError(f"{path.parent}: no such directory")


@contextmanager
def atomic_path(path: Path, *, force: bool) -> Iterator[Path]:
    """Yield a temporary path next to ``path`` (same suffix) to write; on success it replaces
    ``path`` in one step, on failure it is removed and ``path`` is untouched."""
    path = Path(path)
    check_writable(path, force)
    descriptor, name = tempfile.mkstemp(
        dir=path.parent, prefix=f".{path.stem}.", suffix=f".tmp{path.suffix}"
    )
    os.close(descriptor)
    temporary = Path(name)
    try:
        yield temporary
        with open(temporary, "rb+") as file:
            os.fsync(file.fileno())
        os.chmod(temporary, _file_mode(path))
        if not force and path.exists():  # appeared while we were writing
            raise UserError(f"{path}: already exists (use --force to overwrite)")
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def _file_mode(path: Path) -> int:
    """The mode of the file being replaced, else the mode ``open`` would give a new file."""
    if path.exists():
        return path.stat().st_mode & 0o777
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask
