"""The dask front door on a real cluster (worker processes, a Client connected by address) and
on the threaded scheduler with several threads, numba's kernels inside its tasks included."""

import numpy as np
import pytest

import onnx_reduce
import oracle
from onnx_reduce.kernels.dispatch import kernel_path
from onnx_reduce.spec.ops import REGISTRY

da = pytest.importorskip("dask.array")
dask = pytest.importorskip("dask")
distributed = pytest.importorskip("distributed")
from onnx_reduce.interop.dask_workers import NumbaThreads  # noqa: E402

OPS = [onnx_reduce.reduce_sum, onnx_reduce.reduce_l2, onnx_reduce.reduce_log_sum_exp]


@pytest.fixture(scope="module")
def client():
    """A client connected by address to 2 worker processes of 1 thread each, numba's pool
    sized to 1 thread on each (2 workers x 1 x 1 <= the 2 cores CI has)."""
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=":0") as cluster, \
            distributed.Client(cluster.scheduler_address) as connected:
        connected.register_plugin(NumbaThreads(1))
        yield connected


def _numpy_path(reduce, data, **kwargs):
    with kernel_path("reference"):
        return reduce(data, **kwargs)


@pytest.mark.parametrize("record", REGISTRY, ids=lambda record: record.name)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
def test_the_cluster_computes_the_numpy_result(client, record, dtype):
    reduce = getattr(onnx_reduce, record.function)
    data = oracle.in_domain(record.name, np.random.default_rng(4).standard_normal((40, 30)) * 50)
    data = data.astype(dtype)
    lazy = da.from_array(data, chunks=(7, 4))
    result = reduce(lazy, axes=[1], keepdims=False, opset=18)
    got = client.compute(result).result()
    want = _numpy_path(reduce, data, axes=[1], keepdims=False, opset=18)
    if np.dtype(dtype) == np.float64:
        np.testing.assert_array_max_ulp(got, want, maxulp=1)
    else:
        np.testing.assert_array_equal(got, want)
    assert len(client.scheduler_info()["workers"]) == 2


def test_near_cancelling_log_sum_exp_is_recomputed_on_a_worker(client):
    """log-softmax rows: the recomputation reads its rows from the input on the worker."""
    logits = np.random.default_rng(6).standard_normal((6, 50)) * 3
    rows = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    data = da.from_array(rows, chunks=(2, 9))
    got = client.compute(onnx_reduce.reduce_log_sum_exp(data, axes=[1])).result()
    exact = oracle.exact("ReduceLogSumExp", rows, [1])
    assert oracle.max_ulp_error(got, exact, rows.dtype) <= 2.0


def test_a_lazy_source_is_never_held_whole(client):
    """An array built on the workers (dask random) is reduced there; the result is exact
    against the same array computed separately."""
    lazy = da.random.default_rng(1).standard_normal((64, 4096), chunks=(16, 1024))
    data = client.compute(lazy).result()
    got = client.compute(onnx_reduce.reduce_l2(lazy, axes=[0, 1])).result()
    np.testing.assert_array_equal(got, _numpy_path(onnx_reduce.reduce_l2, data))


def _kernel_compilations() -> tuple[int, int]:
    """(loaded from numba's disk cache, compiled) over the compiled kernels this process ran."""
    import sys

    hits = misses = 0
    for name, module in list(sys.modules.items()):
        if not name.startswith("onnx_reduce.kernels.fast"):
            continue
        for value in vars(module).values():
            stats = getattr(value, "stats", None)
            if hasattr(stats, "cache_misses"):
                hits += sum(stats.cache_hits.values())
                misses += sum(stats.cache_misses.values())
    return hits, misses


def test_workers_load_the_compiled_kernels_from_the_disk_cache(client):
    """Chunks holding whole rows run the compiled kernels on the workers: loaded from the
    cache this process wrote (or read), and never compiled again by later tasks. (A kernel
    another process is writing to the cache at the same moment may still be compiled once:
    numba's cache index is rewritten whole by each writer.)"""
    data = np.random.default_rng(10).standard_normal((8, 4096)).astype(np.float32)
    for reduce in OPS:
        reduce(data[:2], axes=[1])  # compiled or loaded here: on disk now
    lazy = da.from_array(data, chunks=(2, 4096))
    for reduce in OPS:
        got = client.compute(reduce(lazy, axes=[1])).result()
        np.testing.assert_array_equal(got, reduce(data, axes=[1]))
    first = client.run(_kernel_compilations)
    assert sum(hits for hits, _ in first.values()) > 0, first
    for reduce in OPS:  # more tasks of the same kernels: nothing compiled
        client.compute(reduce(lazy * 2, axes=[1])).result()
    again = client.run(_kernel_compilations)
    assert {worker: misses for worker, (_, misses) in again.items()} == \
        {worker: misses for worker, (_, misses) in first.items()}


def test_numba_threads_plugin_sizes_the_pool_on_every_worker(client):
    def threads():
        import numba

        return numba.config.NUMBA_NUM_THREADS, numba.get_num_threads()

    results = client.run(threads)
    assert len(results) == 2
    assert set(results.values()) == {(1, 1)}
    task = client.submit(threads, pure=False).result()
    assert task == (1, 1)


def test_fitting_numba_threads_shares_each_host_among_its_workers(monkeypatch):
    """Two workers of one thread on one host, 8 cores: 4 numba threads each; a worker started
    with NUMBA_NUM_THREADS keeps it."""
    import os

    scheduler = type("Client", (), {"scheduler_info": lambda self, n_workers: {"workers": {
        "tcp://10.0.0.1:1": {"host": "10.0.0.1"}, "tcp://10.0.0.1:2": {"host": "10.0.0.1"},
        "tcp://10.0.0.2:1": {"host": "10.0.0.2"}}}})()
    plugin = NumbaThreads.fitting(scheduler)
    assert plugin.per_host == {"10.0.0.1": 2, "10.0.0.2": 1}
    applied = []
    monkeypatch.setattr(plugin, "_apply", lambda worker, threads: applied.append(threads))
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    state = type("State", (), {"nthreads": 1})()
    for address in ("tcp://10.0.0.1:1", "tcp://10.0.0.2:1"):
        monkeypatch.delenv("NUMBA_NUM_THREADS", raising=False)
        plugin.setup(type("Worker", (), {"address": address, "state": state})())
    monkeypatch.setenv("NUMBA_NUM_THREADS", "3")
    plugin.setup(type("Worker", (), {"address": "tcp://10.0.0.1:1", "state": state})())
    assert applied == [4, 8]


def test_the_cli_fits_numba_threads_on_a_cluster_it_connects_to(client):
    from onnx_reduce.cli import schedulers

    def setting():
        import os

        return os.environ.get("NUMBA_NUM_THREADS")

    with schedulers._client(client.scheduler.address) as connected:
        assert set(connected.run(setting).values()) == {"1"}  # the fixture's, kept
        plugins = connected.run(lambda dask_worker: sorted(dask_worker.plugins))
        assert all(NumbaThreads.name in names for names in plugins.values())


def test_numba_threads_refuses_a_bad_count():
    with pytest.raises(ValueError, match="threads must be an int >= 1"):
        NumbaThreads(0)


@pytest.mark.parametrize("reduce", OPS)
def test_threaded_scheduler_with_several_threads(reduce):
    data = np.random.default_rng(7).standard_normal((64, 512)).astype(np.float32)
    lazy = da.from_array(data, chunks=(8, 64))
    result = reduce(lazy, axes=[0])
    with dask.config.set(scheduler="threads", num_workers=4):
        got = result.compute()
    np.testing.assert_array_equal(got, _numpy_path(reduce, data, axes=[0]))


def test_compiled_kernels_inside_dask_threads_neither_crash_nor_deadlock():
    """numpy blocks reduced by the compiled kernels in 4 dask threads at once, blocks large
    enough for the kernels' own threads: same values as one call per block in this thread."""
    data = np.random.default_rng(8).standard_normal((8, 1 << 17)).astype(np.float32)
    lazy = da.from_array(data, chunks=(1, 1 << 17))
    for reduce in OPS:
        blockwise = lazy.map_blocks(reduce, axes=[1], dtype=np.float32)
        with dask.config.set(scheduler="threads", num_workers=4):
            got = blockwise.compute()
        want = np.concatenate([reduce(data[i:i + 1], axes=[1]) for i in range(8)])
        np.testing.assert_array_equal(got, want)


def test_numba_threads_warns_where_the_pool_already_runs(monkeypatch):
    """numba's pool is sized once: on a worker where it runs, the plugin says how to fix it."""
    import numba
    from numba.np.ufunc import parallel

    monkeypatch.setenv("NUMBA_NUM_THREADS", str(numba.config.NUMBA_NUM_THREADS))  # restored
    monkeypatch.setattr(parallel, "_is_initialized", True)
    worker = type("Worker", (), {"address": "tcp://worker:1234"})()
    threads = numba.config.NUMBA_NUM_THREADS + 1
    with pytest.warns(RuntimeWarning, match=f"start workers with NUMBA_NUM_THREADS={threads}"):
        NumbaThreads(threads).setup(worker)
