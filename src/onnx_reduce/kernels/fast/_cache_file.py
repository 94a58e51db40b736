"""numba's on-disk cache, safe for processes that save one kernel's signatures at once.

:func:`install` makes each save hold an exclusive lock on a file beside the kernel's index
and write the compiled code before the index entry naming it: numba's own read-modify-write
of the index loses entries, and can name one signature's code for another's, when two
processes (``warm_up(jobs=2)``, pytest-xdist workers) save at one moment (numba#10128;
measured: docs/kernel-design.md, "Compiling ahead").

>>> import tempfile
>>> from numba.core.caching import IndexDataCacheFile
>>> install()
>>> cache = IndexDataCacheFile(tempfile.mkdtemp(), "kernel", source_stamp=1)
>>> cache.save("int32", b"a"); cache.save("float32", b"b")
>>> cache.load("int32"), cache.load("float32")
(b'a', b'b')

It also stamps this package's kernels with a digest of every kernel module, not of their own
file only: a cached kernel holds the code of the kernels it calls, which numba does not track,
so an edit to one module (a walk, an ``exp``) would leave its callers' cached code stale.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import itertools
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from numba.core import caching

try:
    import fcntl
except ImportError:  # not POSIX: numba's own saving stays
    fcntl = None


_HERE = Path(__file__).resolve().parent
_numba_stamp = caching._SourceFileBackedLocatorMixin.get_source_stamp


def install() -> None:
    """Replace numba's ``IndexDataCacheFile.save`` with :func:`_locked_save` (nothing where
    there is no ``fcntl``), and its source stamps with :func:`_stamp`; before the first kernel
    is defined (a kernel's stamp is taken when it is)."""
    caching._SourceFileBackedLocatorMixin.get_source_stamp = _stamp
    if fcntl is not None:
        caching.IndexDataCacheFile.save = _locked_save


def kernels_digest() -> bytes:
    """A digest of the kernel modules' files (what a kernel may inline)."""
    return _digest(tuple(sorted(_HERE.glob("*.py"))))


@functools.cache
def _digest(paths: tuple[Path, ...]) -> bytes:
    digest = hashlib.sha1()
    for path in paths:
        digest.update(path.read_bytes())
    return digest.digest()


def _stamp(self: Any) -> Any:
    """numba's stamp of a function's source file, with :func:`kernels_digest` for the
    functions of this package's kernel modules."""
    stamp = _numba_stamp(self)
    if Path(self._py_file).resolve().parent == _HERE:
        return stamp, kernels_digest()
    return stamp


def _locked_save(self: Any, key: Any, data: Any) -> None:
    """numba's ``save(key, data)`` under the index's lock: the code first, then the index
    entry naming it (a new number where the key has none)."""
    with _lock(self._index_path + ".lock"):
        overloads = self._load_index()
        name = overloads.get(key)
        new = name is None
        if new:
            taken = set(overloads.values())
            name = next(n for n in map(self._data_name, itertools.count(1)) if n not in taken)
        self._save_data(name, data)
        if new:
            overloads[key] = name
            self._save_index(overloads)


@contextlib.contextmanager
def _lock(path: str) -> Iterator[None]:
    """An exclusive ``flock`` on ``path`` (created if need be) while the block runs; no lock
    where the file cannot be opened (numba's saving as it was)."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError:
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # (closing releases the lock)
