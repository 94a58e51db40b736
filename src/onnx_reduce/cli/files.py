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
import shutil
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


def check_writable(path: Path, force: bool, *, store: bool = False) -> None:
    """Fail early (before any work) unless ``path`` can be written (``store``: a directory
    store such as zarr's, which ``force`` may replace)."""
    path = Path(path)
    check_target(path, force, store=store)
    check_directory(path.parent)


def check_target(path: Path, force: bool, *, store: bool = False) -> None:
    """Fail if ``path`` is a directory (unless ``store`` and it is a store too), or exists and
    ``force`` is not given."""
    if path.is_dir() and not (store and is_store(path)):
        raise UserError(f"{shown(path)}: is a directory" + (
            " that is not a zarr store (not replaced)" if store else ""))
    if store and path.exists() and not path.is_dir():
        raise UserError(f"{shown(path)}: is a file, not a zarr store (not replaced)")
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
            dir=path.parent, prefix=f".{_stem(path)}.{os.getpid()}.", suffix=f".tmp{path.suffix}"
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


def check_regular_file(path: Path, what: str) -> None:
    """``UserError`` unless ``path`` is a regular file: missing, a directory (not ``what``), or
    a pipe, socket or device, which a reader would wait on without end. A name the system
    refuses (too long) is an ``OSError``, as any unreadable file's."""
    if not path.exists():
        raise UserError(f"{shown(path)}: no such file")
    if path.is_dir():
        raise UserError(f"{shown(path)}: is a directory, not {what}")
    if not path.is_file():
        raise UserError(f"{shown(path)}: not a regular file (a pipe or a device); "
                        f"onnx-reduce reads {what} from a file")


def is_store(path: Path) -> bool:
    """Whether the directory ``path`` holds a zarr store's metadata (v3 or v2)."""
    return any((path / name).exists() for name in ("zarr.json", ".zarray", ".zgroup"))


@contextmanager
def atomic_directory(path: Path, *, force: bool) -> Iterator[Path]:
    """:func:`atomic_path` for a directory store: yield an empty temporary directory next to
    ``path`` to fill; on success it takes ``path``'s place (an existing store, with ``force``,
    is moved aside first and removed after), on failure it is removed and ``path`` untouched."""
    path = Path(path)
    check_writable(path, force, store=True)
    remove_stale_temporaries(path)
    with _signals_raise():
        temporary = Path(tempfile.mkdtemp(
            dir=path.parent, prefix=f".{_stem(path)}.{os.getpid()}.", suffix=f".tmp{path.suffix}"
        ))
        try:
            yield temporary
            _publish_directory(temporary, path, force)
        except OSError as error:
            shutil.rmtree(temporary, ignore_errors=True)
            raise UserError(f"{shown(path)}: cannot write ({write_failure(error)})") from error
        except BaseException:
            shutil.rmtree(temporary, ignore_errors=True)
            raise


def _publish_directory(temporary: Path, path: Path, force: bool) -> None:
    """Move ``temporary`` to ``path``; an existing store goes to a temporary name first (two
    renames: POSIX cannot replace a non-empty directory in one) and is removed last."""
    if path.exists() and not force:  # appeared while we were writing
        raise UserError(f"{shown(path)}: already exists (use --force to overwrite)")
    os.chmod(temporary, path.stat().st_mode & 0o777 if path.exists() else 0o777 & ~_umask())
    if not path.exists():
        os.rename(temporary, path)
        return
    old = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{_stem(path)}.{os.getpid()}.",
                                suffix=f".tmp{path.suffix}"))
    os.rename(path, old / "old")
    try:
        os.rename(temporary, path)
    except OSError:
        os.rename(old / "old", path)
        raise
    finally:
        shutil.rmtree(old, ignore_errors=True)


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
    stem = _stem(path)
    pattern = re.compile(rf"\.{re.escape(stem)}\.(\d+)\.[^.]+\.tmp{re.escape(path.suffix)}")
    removed = []
    for candidate in path.parent.glob(f".{glob_escape(stem)}.*.tmp{glob_escape(path.suffix)}"):
        match = pattern.fullmatch(candidate.name)
        if match and not _process_exists(int(match.group(1))):
            if candidate.is_dir() and not candidate.is_symlink():
                shutil.rmtree(candidate, ignore_errors=True)
            else:
                candidate.unlink(missing_ok=True)
            removed.append(candidate)
    return removed


#: Characters of an output's name that its temporary's name keeps: a name of up to 255 bytes
#: is valid, and the temporary's adds ~30.
_STEM_CHARS = 120


def _stem(path: Path) -> str:
    """The part of ``path``'s stem its temporaries are named after."""
    return path.stem[:_STEM_CHARS]


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
    return 0o666 & ~_umask()


def _umask() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return umask
