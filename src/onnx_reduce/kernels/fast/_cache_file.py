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
"""

from __future__ import annotations

import contextlib
import itertools
import os
from collections.abc import Iterator
from typing import Any

from numba.core import caching

try:
    import fcntl
except ImportError:  # not POSIX: numba's own saving stays
    fcntl = None


def install() -> None:
    """Replace numba's ``IndexDataCacheFile.save`` with :func:`_locked_save` (nothing where
    there is no ``fcntl``)."""
    if fcntl is not None:
        caching.IndexDataCacheFile.save = _locked_save


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
