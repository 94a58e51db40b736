"""Compiled (numba) kernels. Each module exposes ``reduce_<op>(data, plan)`` returning the result,
or None for a case it does not serve (:mod:`onnx_reduce.kernels.dispatch` falls back to the
reference path then), and ``bind_<op>(dtype, plan)``, the same bound to one dtype and shape for
small arrays (:func:`onnx_reduce.kernels.dispatch.bind`). numba is imported only when one of these
modules is first used."""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable

#: Held while a module of this package is first imported (:mod:`..dispatch`) and across every
#: fork: a child forked mid-import would wait forever on the module's import lock, held by a
#: thread it does not have. Re-entrant.
first_import = threading.RLock()


def _fork_hooks(name: str) -> Callable[[], None] | None:
    """:mod:`._common`'s fork hook ``name`` when it is loaded (it holds the kernels' locks)."""
    return getattr(sys.modules.get(f"{__name__}._common"), name, None)


def _before_fork() -> None:
    """The one fork hook of the kernels, so that its locks are always taken in one order: the
    import lock first (an import takes numba's compiler lock), then :mod:`._common`'s, looked
    up only once no import runs (one may have loaded it)."""
    first_import.acquire()
    hold = _fork_hooks("hold_across_fork")
    if hold is not None:
        hold()


def _after_fork(name: str) -> None:
    release = _fork_hooks(name)
    if release is not None:
        release()
    first_import.release()


os.register_at_fork(before=_before_fork,
                    after_in_parent=lambda: _after_fork("release_after_fork"),
                    after_in_child=lambda: _after_fork("release_in_child"))
