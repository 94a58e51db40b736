"""numba's on-disk cache saved by several processes at once: no entry lost, none mixed up."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("numba")
from numba.core.caching import IndexDataCacheFile, _SourceFileBackedLocatorMixin

from onnx_reduce.kernels.fast import _cache_file

ROOT = Path(__file__).resolve().parents[2]

#: One process's saves of signatures ``tag-0`` ... into the kernel ``kernel``'s index, each
#: entry's data naming itself, started when the file ``go`` appears (all processes at once).
_SAVER = """
import os, sys, time
from numba.core.caching import IndexDataCacheFile, _SourceFileBackedLocatorMixin
from onnx_reduce.kernels.fast import _cache_file
if sys.argv[3] == "locked":
    _cache_file.install()
cache = IndexDataCacheFile(sys.argv[1], "kernel", source_stamp=1)
while not os.path.exists(os.path.join(sys.argv[1], "go")):
    time.sleep(0.001)
for i in range(150):
    cache.save(f"{sys.argv[2]}-{i}", f"{sys.argv[2]}-{i}")
"""


def _save_at_once(folder: Path, mode: str) -> IndexDataCacheFile:
    """Three processes saving 150 signatures each into one index at the same moment (numba's
    own saves, ``mode`` "unlocked", lose about a fifth of them and mix up a few: not a test,
    a race does not always show under load)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    savers = [subprocess.Popen([sys.executable, "-c", _SAVER, str(folder), tag, mode], env=env)
              for tag in "abc"]
    time.sleep(2)  # (their imports done)
    (folder / "go").touch()
    assert [p.wait(timeout=120) for p in savers] == [0, 0, 0]
    return IndexDataCacheFile(str(folder), "kernel", source_stamp=1)


def test_concurrent_saves_keep_every_entry_and_its_own_data(tmp_path) -> None:
    cache = _save_at_once(tmp_path, "locked")
    keys = [f"{tag}-{i}" for tag in "abc" for i in range(150)]
    assert [cache.load(key) for key in keys] == keys


def test_a_save_where_no_lock_file_can_be_made_still_saves(tmp_path) -> None:
    """A lock file that cannot be opened (its path a directory here) leaves numba's saving."""
    _cache_file.install()
    cache = IndexDataCacheFile(str(tmp_path), "kernel", source_stamp=1)
    (tmp_path / "kernel.nbi.lock").mkdir()
    cache.save("int32", b"code")
    assert cache.load("int32") == b"code"


def test_importing_the_kernels_installs_the_locked_saves() -> None:
    from onnx_reduce.kernels.fast import _common  # noqa: F401 - the import installs it

    assert IndexDataCacheFile.save is _cache_file._locked_save
    assert _SourceFileBackedLocatorMixin.get_source_stamp is _cache_file._stamp


def test_a_kernel_is_stamped_with_every_kernel_module_and_other_code_with_its_file(
        tmp_path) -> None:
    """A cached kernel holds the code of the kernels it calls: editing any kernel module must
    miss the cache of all of them. Code outside the kernels keeps numba's own stamp."""
    from numba.core.caching import InTreeCacheLocator

    from onnx_reduce.kernels.fast import _exp

    kernel = InTreeCacheLocator.from_function(_exp.exp_open.py_func, _exp.__file__)
    stamp, digest = kernel.get_source_stamp()
    assert stamp == _cache_file._numba_stamp(kernel)
    assert digest == _cache_file.kernels_digest()
    other = tmp_path / "elsewhere.py"
    other.write_text("def f():\n    return 1\n")
    namespace: dict = {}
    exec(compile(other.read_text(), str(other), "exec"), namespace)
    outside = InTreeCacheLocator.from_function(namespace["f"], str(other))
    assert outside.get_source_stamp() == _cache_file._numba_stamp(outside)


def test_the_kernels_digest_changes_with_any_kernel_module(tmp_path) -> None:
    for name in ("a.py", "b.py"):
        (tmp_path / name).write_text("x = 1\n")
    before = _cache_file._digest(tuple(sorted(tmp_path.glob("*.py"))))
    (tmp_path / "b.py").write_text("x = 2\n")
    after = _cache_file._digest.__wrapped__(tuple(sorted(tmp_path.glob("*.py"))))
    assert before != after
