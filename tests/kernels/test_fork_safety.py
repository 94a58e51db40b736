"""No fork may hang: forked children run the parallel kernels, parents never deadlock.

A child forked while a TBB worker held one of TBB's locks waits for it forever (the worker does
not exist in the child). Each scenario runs in a fresh interpreter (this file run as a script)
under a timeout, so a hang fails the test instead of stalling CI; a child that outlives
``CHILD_SECONDS`` is killed and counted as hung.

The scenarios time hangs, not compilation: a fixture first fills numba's on-disk cache with
their kernels in a process of its own (~90 s from a cold cache, a few seconds warm), so each
scenario loads them as a user's second run does. Compiled under the scenario's timeout, on a
fresh clone's cold cache beside another test worker, the first-import scenario's one thread
took most of its 180 s.

``ONNX_REDUCE_FORKS`` sets how many forks :func:`test_forks_during_parallel_kernels` makes
(default 250, ~15 s here; e.g. ``ONNX_REDUCE_FORKS=2000`` for a longer hunt). Expected values
come from the exact oracle (``tests/oracle.py``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

FORKS = int(os.environ.get("ONNX_REDUCE_FORKS", "250"))
CHILD_SECONDS = 10.0
POOL_TASKS = 48


@pytest.fixture(scope="module", autouse=True)
def _kernels_cached() -> None:
    """Compile (or load) every scenario's kernels once, in a process of its own."""
    out = _run_scenario("warm", timeout=900)
    assert out.split()[-1] == "ok", out


def _run_scenario(*args: str, timeout: float) -> str:
    """Run this file as a script with ``args``; its stdout. A non-zero exit fails the test, so
    does a timeout (the parent hung), after killing the script's whole process group."""
    tests = Path(__file__).resolve().parents[1]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(tests), *filter(None, [os.environ.get("PYTHONPATH")])]))
    script = subprocess.Popen([sys.executable, __file__, *args], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
    try:
        out, err = script.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(script.pid, signal.SIGKILL)
        script.communicate()
        raise AssertionError(f"{args[0]}: the parent hung ({timeout:.0f} s)") from None
    assert script.returncode == 0, out + err
    return out


def test_forks_during_parallel_kernels() -> None:
    """FORKS forks (every fourth from a short-lived thread) while three threads run parallel
    kernels (ReduceSum inner and outer axis, ReduceL2, ReduceLogSumExp rows and columns,
    float32 above the parallel thresholds); each child runs one of them and must exit with the
    exact answer."""
    out = _run_scenario("forks", str(FORKS), timeout=120 + FORKS * 0.5)
    assert f"forks={FORKS} hung=0 wrong=0" in out, out


def test_child_of_a_parent_that_never_launched() -> None:
    """Fork before any parallel launch (from the main thread and from another thread): the
    child starts the threading layer itself and gets the exact answers."""
    out = _run_scenario("fresh", timeout=120)
    assert out.split()[-1] == "ok", out


def test_forks_during_the_first_import() -> None:
    """Forks while another thread makes the first call, which imports the kernel modules
    (and numba) and loads the kernels: the children, importing them too, must not wait on an
    import lock the other thread held at the fork."""
    out = _run_scenario("first-import", timeout=180)
    assert out.split()[-1] == "ok", out


def test_fork_while_holding_the_parallel_section() -> None:
    """A fork from code that holds the parallel section (say a signal handler or callback
    that runs between a kernel's return and the lock's release) must not deadlock the parent
    on its own lock, and the child can still launch."""
    out = _run_scenario("reentrant", timeout=120)
    assert out.split()[-1] == "ok", out


def test_fork_pools_while_kernels_run() -> None:
    """``multiprocessing`` fork pools whose workers call the kernels while the parent's threads
    do too: a Pool renewing each worker after one task (new workers are forked from the pool's
    handler thread) and a ProcessPoolExecutor; every task returns the exact answer."""
    out = _run_scenario("pools", str(POOL_TASKS), timeout=180)
    assert out.split()[-1] == "ok", out


def test_children_of_a_parent_that_first_asked_for_the_thread_count() -> None:
    """The process's first reduction asks for numba's thread count before any launch (a large
    float64 ReduceLogSum, split across two threads by its size): that must not start numba's
    own threading layer (GNU OpenMP here, which kills every forked child), so the layer is
    TBB and the children get the exact answers."""
    out = _run_scenario("count-first", timeout=180)
    assert out.split()[-2:] == ["tbb", "ok"], out


# ----------------------------------------------------------------------------- the scenarios


def _cases() -> list:
    """(name, call, expected) for float32 inputs above the parallel thresholds (ReduceSum and
    ReduceL2: 2**20 elements, ReduceLogSumExp 2**16); every row alike, so the oracle needs one
    row (or a few columns) to give every output."""
    import onnx_reduce
    import oracle

    rng = np.random.default_rng(16)
    row = rng.uniform(-4, 4, 1024).astype(np.float32)
    wide = np.tile(row, (1100, 1))
    lse_row = rng.uniform(-30, 5, 300).astype(np.float32)
    square = np.tile(lse_row, (300, 1))
    least = np.tile(lse_row[:256], (256, 1))  # 2**16 elements: the shortest parallel launch

    def inner(op: str, data: np.ndarray) -> np.ndarray:
        one = oracle.expected(op, data[:1], axes=[1], keepdims=False)
        return np.repeat(one, data.shape[0])

    sum_outer = oracle.expected("ReduceSum", wide[:, :16], axes=[0], keepdims=False)
    return [
        ("sum inner", lambda: onnx_reduce.reduce_sum(wide, axes=[1], keepdims=False),
         inner("ReduceSum", wide)),
        ("sum outer", lambda: onnx_reduce.reduce_sum(wide, axes=[0], keepdims=False)[:16],
         sum_outer),
        ("l2 inner", lambda: onnx_reduce.reduce_l2(wide, axes=[1], keepdims=False),
         inner("ReduceL2", wide)),
        ("lse inner", lambda: onnx_reduce.reduce_log_sum_exp(square, axes=[1], keepdims=False),
         inner("ReduceLogSumExp", square)),
        ("lse columns", lambda: onnx_reduce.reduce_log_sum_exp(least, axes=[0], keepdims=False),
         oracle.expected("ReduceLogSumExp", least, axes=[0], keepdims=False)),
    ]


def _warm_up(cases: list) -> None:
    """Load every case's kernels (the first call imports and compiles) in a thread of its own,
    which numba's TBB layer then takes as its main thread: none of the forks comes from it."""
    thread = threading.Thread(target=lambda: [_right(case) for case in cases])
    thread.start()
    thread.join()


def _right(case: tuple) -> bool:
    _, call, want = case
    return bool(np.array_equal(call(), want))


def _busy_threads(cases: list, errors: list, count: int = 3) -> tuple:
    """Start ``count`` threads calling the cases in turn until the returned event is set."""
    stop = threading.Event()

    def loop(k: int) -> None:
        i = k
        while not stop.is_set():
            if not _right(cases[i % len(cases)]):
                errors.append(cases[i % len(cases)][0])
            i += 1

    threads = [threading.Thread(target=loop, args=(k,), daemon=True) for k in range(count)]
    for thread in threads:
        thread.start()
    return stop, threads


def _fork_child(case: tuple) -> int:
    """Fork a child that runs ``case`` and exits 0 when right (3 wrong, 4 raised)."""
    pid = os.fork()
    if pid == 0:
        try:
            os._exit(0 if _right(case) else 3)
        except BaseException:
            os._exit(4)
    return pid


def _fork_from_thread(case: tuple) -> int:
    pids: list[int] = []
    thread = threading.Thread(target=lambda: pids.append(_fork_child(case)))
    thread.start()
    thread.join()
    return pids[0]


def _wait_child(pid: int) -> int | None:
    """The child's exit code, or None when it hung (killed after CHILD_SECONDS)."""
    deadline = time.monotonic() + CHILD_SECONDS
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.002)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return None


def _forks(count: int) -> None:
    """Stop at the first hung child: the count says after how many forks."""
    cases = _cases()
    _warm_up(cases)
    errors: list[str] = []
    stop, threads = _busy_threads(cases, errors)
    wrong = made = 0
    hung = 0
    for i in range(count):
        fork = _fork_from_thread if i % 4 == 3 else _fork_child
        code = _wait_child(fork(cases[i % len(cases)]))
        made += 1
        if code is None:
            hung = 1
            break
        wrong += code != 0
    stop.set()
    for thread in threads:
        thread.join()
    print(f"forks={made} hung={hung} wrong={wrong} parent_errors={len(errors)}")
    sys.exit(1 if errors else 0)


def _fresh() -> None:
    cases = _cases()
    for fork in (_fork_child, _fork_from_thread):
        for case in (cases[0], cases[-1]):  # a ReduceSum and a ReduceLogSumExp kernel
            assert _wait_child(fork(case)) == 0, case[0]
    print("ok")


def _first_import() -> None:
    cases = _cases()
    first = threading.Thread(target=lambda: [_right(case) for case in cases])
    first.start()
    forks = 0
    while first.is_alive() or forks < 4:
        code = _wait_child(_fork_child(cases[forks % len(cases)]))
        assert code == 0, f"fork {forks}: child exit {code} (None: hung)"
        forks += 1
    first.join()
    print(forks, "ok")


def _reentrant() -> None:
    from onnx_reduce.kernels.fast._common import parallel_section

    cases = _cases()
    assert _right(cases[0])
    with parallel_section():
        pid = _fork_child(cases[1])
    assert _wait_child(pid) == 0
    assert _right(cases[2])
    print("ok")


def _task(i: int) -> bool:
    return _right(_CASES[i % len(_CASES)])


def _pools(tasks: int) -> None:
    import concurrent.futures
    import multiprocessing

    context = multiprocessing.get_context("fork")
    errors: list[str] = []
    stop, threads = _busy_threads(_CASES, errors)
    with context.Pool(2, maxtasksperchild=1) as pool:
        assert all(pool.map_async(_task, range(tasks), chunksize=1).get(timeout=60))
    with concurrent.futures.ProcessPoolExecutor(2, mp_context=context) as executor:
        assert all(executor.map(_task, range(tasks), timeout=60))
    stop.set()
    for thread in threads:
        thread.join()
    assert not errors, errors
    print("ok")


def _warm() -> None:
    _count_first_call()
    _warm_up(_cases())
    print("ok")


def _count_first_call() -> None:
    """A float64 ReduceLogSum just past the two-thread size: it asks for the thread count."""
    import onnx_reduce
    from onnx_reduce.kernels.fast import derived

    rows = -(-derived.THREADED_BYTES // (8 * 256))
    x = np.full((rows, 512), 2.0)[:, ::2]
    assert np.all(onnx_reduce.reduce_log_sum(x, axes=[1]) == np.log(512.0))


def _count_first() -> None:
    import numba

    _count_first_call()
    cases = _cases()
    _warm_up(cases)  # compiled or loaded in the parent: the children only run them
    for case in (cases[0], cases[-1]):
        assert _wait_child(_fork_child(case)) == 0, case[0]
    print(numba.threading_layer(), "ok")


if __name__ == "__main__":
    scenario = sys.argv[1]
    if scenario == "warm":
        _warm()
    elif scenario == "forks":
        _forks(int(sys.argv[2]))
    elif scenario == "fresh":
        _fresh()
    elif scenario == "count-first":
        _count_first()
    elif scenario == "first-import":
        _first_import()
    elif scenario == "reentrant":
        _reentrant()
    elif scenario == "pools":
        _CASES = _cases()
        _warm_up(_CASES)
        _pools(int(sys.argv[2]))
