"""Output files: written atomically (a temporary file in the same directory, then
``os.replace``), and never over an existing file unless the user says ``--force``.

The destination is checked before any work (the directory is tried with a real temporary file,
which catches read-only and special file systems that permission bits do not show). A temporary
file is named ``.<stem>.<pid>.<random>.tmp<suffix>``: it is removed on failure, on SIGTERM, SIGHUP
and SIGINT, and, if its process was killed outright (``kill -9``), by the next write to the same
destination on this machine (its process no longer exists).

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
import re
import signal
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .errors import UserError, one_line, shown

#: Signals that would end the process without running ``finally`` blocks.
_FATAL_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP")
                       if hasattr(signal, name))


def check_writable(path: Path, force: bool) -> None:
    """Fail early (before any work) unless ``path`` can be written."""
    path = Path(path)
    check_target(path, force)
    check_directory(path.parent)


def check_target(path: Path, force: bool) -> None:
    """Fail if ``path`` is a directory, or exists and ``force`` is not given."""
    if path.is_dir():
        raise UserError(f"{shown(path)}: is a directory")
    if path.exists() and not force:
        raise UserError(f"{shown(path)}: already exists (use --force to overwrite)")


def check_directory(folder: Path) -> None:
    """Fail unless a file can be created in ``folder`` (tried for real, then removed)."""
    if not folder.is_dir():
        raise UserError(f"{shown(folder)}: no such directory")
    try:
        descriptor, name = tempfile.mkstemp(dir=folder, prefix=f".{os.getpid()}.", suffix=".tmp")
    except OSError as error:
        raise UserError(f"{shown(folder)}: cannot write here ({error.strerror or error})") from None
    os.close(descriptor)
    os.unlink(name)


@contextmanager
def atomic_path(path: Path, *, force: bool) -> Iterator[Path]:
    """Yield a temporary path next to ``path`` (same suffix) to write; on success it replaces
    ``path`` in one step, on failure (or a terminating signal) it is removed and ``path`` is
    untouched."""
    path = Path(path)
    check_writable(path, force)
    remove_stale_temporaries(path)
    with _signals_raise():
        descriptor, name = tempfile.mkstemp(
            dir=path.parent, prefix=f".{path.stem}.{os.getpid()}.", suffix=f".tmp{path.suffix}"
        )
        os.close(descriptor)
        temporary = Path(name)
        try:
            yield temporary
            _publish(temporary, path, force)
        except OSError as error:  # disk full, quota, a file system gone read-only...
            temporary.unlink(missing_ok=True)
            raise UserError(f"{shown(path)}: cannot write ({write_failure(error)})") from error
        except BaseException:
            temporary.unlink(missing_ok=True)
            raise


def write_failure(error: OSError) -> str:
    """Why a write failed, in a few words.

    >>> write_failure(OSError(28, "No space left on device"))
    'No space left on device'
    """
    return error.strerror or one_line(str(error)) or type(error).__name__


def _publish(temporary: Path, path: Path, force: bool) -> None:
    """Flush ``temporary`` to disk, give it ``path``'s mode and move it into place."""
    with open(temporary, "rb+") as file:
        os.fsync(file.fileno())
    os.chmod(temporary, _file_mode(path))
    if not force and path.exists():  # appeared while we were writing
        raise UserError(f"{shown(path)}: already exists (use --force to overwrite)")
    os.replace(temporary, path)


def remove_stale_temporaries(path: Path) -> list[Path]:
    """Remove the temporary files of earlier writes to ``path`` whose process is gone; the
    removed paths."""
    pattern = re.compile(
        rf"\.{re.escape(path.stem)}\.(\d+)\.[^.]+\.tmp{re.escape(path.suffix)}"
    )
    removed = []
    for candidate in path.parent.glob(f".{glob_escape(path.stem)}.*.tmp{glob_escape(path.suffix)}"):
        match = pattern.fullmatch(candidate.name)
        if match and not _process_exists(int(match.group(1))):
            candidate.unlink(missing_ok=True)
            removed.append(candidate)
    return removed


def glob_escape(text: str) -> str:
    """``text`` matched literally by ``Path.glob``.

    >>> glob_escape("a[1]*")
    'a[[]1[]][*]'
    """
    return re.sub(r"([*?\[\]])", r"[\1]", text)


def _process_exists(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return pid < 2**31  # another user's live process (an absurd pid is no process)
    return True


class TerminatedBySignal(BaseException):
    """A terminating signal arrived while a file was being written (the write is undone)."""

    def __init__(self, number: int) -> None:
        super().__init__(f"terminated by signal {number}; the unfinished output was removed")
        self.exit_status = 128 + number


@contextmanager
def _signals_raise() -> Iterator[None]:
    """SIGTERM and SIGHUP raise :class:`TerminatedBySignal` inside the block (main thread only;
    SIGINT already raises ``KeyboardInterrupt``), so that the temporary file is removed."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {number: signal.signal(number, _raise_terminated) for number in _FATAL_SIGNALS}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def _raise_terminated(number: int, frame: object) -> None:
    raise TerminatedBySignal(number)


def _file_mode(path: Path) -> int:
    """The mode of the file being replaced, else the mode ``open`` would give a new file."""
    if path.exists():
        return path.stat().st_mode & 0o777
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask
