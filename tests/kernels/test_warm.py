"""Ahead-of-use compilation: what warm_up compiles, a later process loads from numba's cache."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from cli_checks import assert_user_error
from onnx_reduce.cli import app
from onnx_reduce.kernels.warm import LAYOUTS, _group, warm_up

pytest.importorskip("numba")

ROOT = Path(__file__).resolve().parents[2]

_LATER_PROCESS = """
import numpy as np, onnx_reduce
for dtype in (np.int32, np.int64, np.uint32, np.uint64):  # unsigned: the signed ones' kernels
    x = np.arange(8 * 128, dtype=dtype).reshape(8, 128)
    assert int(onnx_reduce.reduce_sum(x, axes=[1])[3, 0]) == sum(range(3 * 128, 4 * 128))
    onnx_reduce.reduce_sum(x[:, ::-1], axes=[1])
"""

#: prints [signatures loaded from the cache, signatures compiled] of the two kernels
_LOADED = """
import json
from onnx_reduce.kernels.fast import sum_l2
kernels = (sum_l2._small_sum, sum_l2._rows_serial)
print(json.dumps([[len(k.stats.cache_hits), len(k.stats.cache_misses)] for k in kernels]))
"""


def _python(code: str, cache: Path) -> str:
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache), "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          check=True, timeout=600)
    return done.stdout


def test_a_later_process_loads_what_warm_up_compiled(tmp_path) -> None:
    """In a fresh cache: warm up ReduceSum on int32 and int64 arrays of one small layout in two
    processes at once (each kernel compiles afresh here: one layout keeps that short), then
    another process's first calls (bound, and a view's row kernel) of those and of the unsigned
    types of their widths (one group each) load their kernels instead of compiling them."""
    cache = tmp_path / "numba-cache"
    warm = _python("from onnx_reduce.kernels import warm\n"
                   "warm.LAYOUTS['small'] = [((8, 128), (1,))]\n"
                   "print(warm.warm_up(['ReduceSum'], ['int32', 'int64'], ['small'], 2))\n"
                   + _LOADED, cache)
    calls, loaded = warm.splitlines()[-2:]
    assert int(calls) == 4
    assert any(cache.rglob("*.nbi"))
    assert json.loads(loaded) == [[2, 0], [2, 0]]  # the two processes compiled, this one loaded
    later = _python(_LATER_PROCESS + _LOADED, cache)
    assert json.loads(later.splitlines()[-1]) == [[2, 0], [2, 0]]


def test_groups_that_share_kernels_are_warmed_together() -> None:
    """A group is one kernel family and storage type: what two processes would both compile
    stays in one (the integer sums of one width, the ops running the ReduceSum kernels)."""
    assert _group("ReduceSum", "int32") == _group("ReduceL2", "uint32")
    assert _group("ReduceSumSquare", "float") == _group("ReduceLogSum", "float")
    assert _group("ReduceLogSumExp", "float") != _group("ReduceSum", "float")
    assert _group("ReduceSum", "int32") != _group("ReduceSum", "int64")
    assert _group("ReduceSum", "float16") != _group("ReduceSum", "bfloat16")


@pytest.mark.parametrize("dtype", ["float32", "float16", "float64"])
def test_the_large_layouts_take_every_threaded_log_sum_exp_kernel(dtype) -> None:
    """What the large layouts compile is what large inputs run: every threaded kernel of
    ReduceLogSumExp's choice for the dtype (float64 reads exact maxima first: no slab rows)."""
    from onnx_reduce.kernels.fast import log_sum_exp as lse
    from onnx_reduce.plan import make_plan
    from onnx_reduce.spec import Request, resolve

    chosen = set()
    for shape, axes in LAYOUTS["large"]:
        plan = make_plan(Request(resolve("ReduceLogSumExp", 18), axes, True, False), shape)
        canon = lse.canonical(np.empty(shape, dtype), axes)
        chosen.add(lse.choose_job(canon, np.dtype(dtype), plan, contiguous=True).kernel)
    expected = {lse._rows_parallel, lse._columns_parallel, lse._short_rows, lse._TINY_ROWS[4],
                lse._slab_columns,
                lse._rows_split if dtype == "float64" else lse._rows_online_split}
    if dtype != "float64":
        expected |= {lse._slab_rows, lse._long_rows}
    assert expected <= chosen


def test_warm_up_in_processes_makes_the_same_calls() -> None:
    assert warm_up(["ReduceL2"], ["float", "int32"], ["small"], jobs=2) == 4 * len(
        LAYOUTS["small"])


def test_warm_up_runs_every_allowed_dtype() -> None:
    small = 2 * len(LAYOUTS["small"])
    assert warm_up(["ReduceLogSumExp"], ["float", "int32"], ["small"]) == small  # float only
    assert warm_up(["ReduceSum"], ["float", "int32"], ["small"]) == 2 * small
    with pytest.raises(KeyError):
        warm_up(["ReduceMax"], sizes=["small"])


def test_warm_command() -> None:
    runner = CliRunner()
    done = runner.invoke(app, ["warm", "l2", "--dtypes", "float32", "--sizes", "small"])
    assert done.exit_code == 0, done.output
    assert done.stdout.startswith(f"warm: {2 * len(LAYOUTS['small'])} calls in ")
    assert_user_error(runner.invoke(app, ["warm", "--dtypes", "float128x"]), "unknown dtype")
    assert_user_error(runner.invoke(app, ["warm", "max"]), "unknown operator")
    assert_user_error(runner.invoke(app, ["warm", "--sizes", "huge"]), "unknown size")
    assert_user_error(runner.invoke(app, ["warm", "--jobs", "0"]), "--jobs")
