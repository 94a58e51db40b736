"""numba's thread count on dask workers, so that workers x threads stays within the cores.

The dask front door (:mod:`.dask_ops`) computes its chunk states with serial kernels (one per
task thread); chunks holding whole reduced slices, and numpy arrays reduced inside a user's own
tasks (``x.map_blocks(onnx_reduce.reduce_sum, ...)``), take the parallel kernels, which start
one thread per core by default. On a machine running W worker processes of T threads each, give
each kernel ``cores // (W * T)`` threads (at least 1):

* for worker processes you start: ``NUMBA_NUM_THREADS=1`` in their environment
  (``LocalCluster(..., env={"NUMBA_NUM_THREADS": "1"})``, or the shell of ``dask worker``);
* on a cluster you connect to: ``client.register_plugin(NumbaThreads(1))`` (every worker,
  now and those that join later; effective where no compiled kernel has run yet), or
  ``NumbaThreads.fitting(client)``: each worker's share of its machine's cores, from the
  workers the scheduler knows on each host (what ``onnx-reduce eval --address`` registers).

Kernels come from numba's on-disk cache (``__pycache__`` beside the installed sources), so a
worker compiles nothing that an earlier process on the machine compiled.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections import Counter

from distributed.diagnostics.plugin import WorkerPlugin


class NumbaThreads(WorkerPlugin):
    """Give numba's parallel kernels ``threads`` threads on every worker.

    numba's count is per thread (``numba.set_num_threads`` holds for the calling thread only)
    and its pool is sized once, at the first parallel launch, from ``NUMBA_NUM_THREADS``. So
    the plugin sets that variable and reloads numba's configuration when no kernel has run in
    the worker yet (the pool then has ``threads`` threads, for every task thread); on a worker
    where one has, it warns (start workers with the variable set instead)."""

    name = "onnx-reduce-numba-threads"

    def __init__(self, threads: int | None, per_host: dict[str, int] | None = None) -> None:
        if per_host is None and (type(threads) is not int or threads < 1):
            raise ValueError(f"NumbaThreads: threads must be an int >= 1, got {threads!r}")
        self.threads = threads  # None: each worker's share of its host (``per_host``)
        self.per_host = per_host

    @classmethod
    def fitting(cls, client) -> NumbaThreads:
        """The plugin giving each worker ``cores // (workers on its host x its threads)``
        (at least 1), from the workers ``client``'s scheduler knows now; a worker started
        with ``NUMBA_NUM_THREADS`` keeps it."""
        hosts = Counter(info.get("host") for info in
                        client.scheduler_info(n_workers=-1)["workers"].values())
        return cls(None, dict(hosts))

    def setup(self, worker) -> None:
        threads = self.threads
        if threads is None:
            if "NUMBA_NUM_THREADS" in os.environ:
                return  # the worker's own setting
            from distributed.comm import get_address_host

            workers = self.per_host.get(get_address_host(worker.address), 1)
            task_threads = getattr(getattr(worker, "state", None), "nthreads", 1)
            threads = max(1, (os.cpu_count() or 1) // max(workers * task_threads, 1))
        self._apply(worker, threads)

    def _apply(self, worker, threads: int) -> None:
        os.environ["NUMBA_NUM_THREADS"] = str(threads)
        if "numba" not in sys.modules:
            return  # read when numba is first imported
        import numba
        from numba.np.ufunc import parallel

        if parallel._is_initialized:
            if threads != numba.config.NUMBA_NUM_THREADS:
                warnings.warn(
                    f"NumbaThreads: numba's pool on worker {worker.address} already has "
                    f"{numba.config.NUMBA_NUM_THREADS} threads; start workers with "
                    f"NUMBA_NUM_THREADS={threads}", RuntimeWarning, stacklevel=1)
            return
        numba.config.reload_config()
