"""Where a chunked evaluation runs: dask's local schedulers (threads, processes, synchronous) or a
distributed cluster (``--address tcp://...``, or a local one started for the call), with a
progress bar on stderr when it is a terminal.

A cluster started here has one worker process per core, one thread each, and numba limited to
one thread per worker (``NUMBA_NUM_THREADS=1``), so that workers x threads <= cores.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from .errors import UserError, one_line, shown
from .present import console

SCHEDULERS = ("threads", "processes", "synchronous", "distributed")

#: Seconds to wait for a distributed scheduler to answer before giving up.
CONNECT_TIMEOUT = 10.0

#: Computes a dask collection and returns its value.
Compute = Callable[[Any], Any]


def check_scheduler(name: str | None, address: str | None) -> str:
    """The scheduler to use (``threads`` unless told); a bad name or combination is refused.

    >>> check_scheduler(None, None), check_scheduler(None, "tcp://h:8786")
    ('threads', 'distributed')
    """
    if name is None:
        return "distributed" if address else "threads"
    name = name.strip().lower()
    if name not in SCHEDULERS:
        raise UserError(f"unknown scheduler {shown(name)!r}; use one of {', '.join(SCHEDULERS)}")
    if address and name != "distributed":
        raise UserError(f"--address needs the distributed scheduler, not {name!r}")
    return name


@contextmanager
def scheduler(name: str, address: str | None, progress: bool) -> Iterator[Compute]:
    """A function computing dask collections on scheduler ``name`` (a client is connected, or a
    local cluster started, for the duration of the block)."""
    if name != "distributed":
        yield lambda collection: _compute_locally(collection, name, progress)
        return
    with _client(address) as client:
        yield lambda collection: _compute_on_cluster(client, collection, progress)


def _compute_locally(collection: Any, name: str, progress: bool) -> Any:
    import dask

    if not progress:
        return dask.compute(collection, scheduler=name)[0]
    with TaskBar():
        return dask.compute(collection, scheduler=name)[0]


def _compute_on_cluster(client: Any, collection: Any, progress: bool) -> Any:
    future = client.compute(collection)
    if progress:
        show_cluster_progress([future])
    return future.result()


@contextmanager
def _client(address: str | None) -> Iterator[Any]:
    import logging

    from distributed import Client, LocalCluster

    if address is None:
        workers = max(os.cpu_count() or 1, 1)
        with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                          dashboard_address=":0", silence_logs=logging.ERROR,
                          env={"NUMBA_NUM_THREADS": "1"}) as cluster, Client(cluster) as client:
            yield client
        return
    import dask

    before = dask.config.get("scheduler", None)
    try:
        client = Client(address, timeout=CONNECT_TIMEOUT)
    except Exception as error:  # bad scheme, refused, timed out: one line either way
        # a Client makes itself the default scheduler before it connects, and stays so if it
        # fails: put back what was there
        if before is None:
            dask.config.config.pop("scheduler", None)
        else:
            dask.config.set(scheduler=before)
        raise UserError(f"cannot connect to the scheduler at {shown(address)!r} "
                        f"({one_line(str(error)) or type(error).__name__})") from None
    with client:
        from ..interop.dask_workers import NumbaThreads

        client.register_plugin(NumbaThreads.fitting(client))  # workers x threads <= cores
        yield client


class TaskBar:
    """A rich progress bar of the tasks a local dask scheduler has finished (stderr)."""

    def __enter__(self) -> TaskBar:
        from dask.callbacks import Callback
        from rich.progress import Progress

        self._progress = Progress(console=console(stderr=True), transient=True)
        self._task = self._progress.add_task("reducing", total=None)
        self._callback = Callback(start_state=self._start, posttask=self._done)
        self._progress.start()
        self._callback.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._callback.__exit__(*exc)
        self._progress.stop()

    def _start(self, graph: Any, state: dict) -> None:
        total = sum(len(state[part]) for part in ("ready", "waiting", "running", "finished"))
        self._progress.update(self._task, total=total)

    def _done(self, key: Any, result: Any, graph: Any, state: dict, worker: Any) -> None:
        self._progress.advance(self._task)


def show_cluster_progress(futures: list) -> None:
    """Show a rich progress bar of ``futures`` and their dependencies until they finish."""
    from distributed.diagnostics.progressbar import TextProgressBar
    from rich.progress import Progress

    class _RichClusterBar(TextProgressBar):
        def _draw_bar(self, remaining: int, all: int, **kwargs: Any) -> None:
            progress.update(task, total=all, completed=all - remaining)

        def _draw_stop(self, **kwargs: Any) -> None:
            pass

    with Progress(console=console(stderr=True), transient=True) as progress:
        task = progress.add_task("reducing", total=None)
        _RichClusterBar(futures)


def wants_progress(choice: bool | None) -> bool:
    """``--progress``/``--no-progress``, else only when stderr is a terminal."""
    return console(stderr=True).is_terminal if choice is None else choice
