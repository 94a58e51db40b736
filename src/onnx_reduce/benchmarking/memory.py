"""Peak extra memory of one reduction, measured in a fresh subprocess per case.

The child makes the input (chunk by chunk: no full-size temporary), runs the reduction once on it
so that everything is compiled, allocated and warm, frees the result, resets the kernel's peak-RSS
mark (``/proc/self/clear_refs``), reads the baseline RSS, runs the reduction again and reads the
peak (``VmHWM``). Extra = peak - baseline: the output plus every temporary. glibc is told to
``mmap`` every allocation above 64 KiB (``MALLOC_MMAP_THRESHOLD_``), so freed temporaries leave
RSS and are counted again on the measured run; onnxruntime runs without its memory arena for
the same reason.

Target for onnx-reduce: extra <= 5% of the input + the output.

>>> r = measure_memory("ReduceSum", "inner", runner="numpy", nbytes=4 * 2**20)
>>> r["input_bytes"], r["output_bytes"], r["extra_bytes"] >= 0
(4194304, 4096, True)
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

from .cases import LAYOUTS, OPS, Case, _split, make_input, normalize_dtype, numpy_dtype
from .runners import bind, model_for, set_numba_threads

DEFAULT_BYTES = 128 * 2**20
BUDGET_FRACTION = 0.05


def status_kib(field: str) -> int:
    """A field of ``/proc/self/status`` in KiB (``VmRSS``, ``VmHWM``: the peak resident size)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def reset_peak() -> bool:
    """Reset ``VmHWM`` to the current resident size; False where the system cannot."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def _child(op: str, layout: str, dtype: str, nbytes: int, runner: str, threads: int) -> dict:
    rank, axes = LAYOUTS[layout]
    np_dtype = numpy_dtype(dtype)
    shape = _split(max(1, nbytes // np_dtype.itemsize), rank)
    case = Case(op, layout, dtype, "1MiB")  # op/layout/dtype only: the shape comes from `shape`
    prepared: Any = None
    if runner == "onnxruntime":
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.enable_cpu_mem_arena = False
        options.log_severity_level = 4
        prepared = ort.InferenceSession(model_for(case).SerializeToString(), options,
                                        providers=["CPUExecutionProvider"])
    elif runner == "onnx-reduce":
        set_numba_threads(threads)
    x = make_input(shape, np_dtype)
    call = bind(runner, prepared, x, case)
    out = call()  # warm: compile, first-touch allocations
    output_bytes = int(np.asarray(out).nbytes)
    del out
    gc.collect()
    reset = reset_peak()
    baseline = status_kib("VmRSS") if reset else status_kib("VmHWM")
    out = call()
    peak = status_kib("VmHWM")
    del out
    return {
        "op": op, "layout": layout, "dtype": dtype, "runner": runner,
        "shape": list(shape), "axes": list(axes),
        "input_bytes": int(x.nbytes), "output_bytes": output_bytes,
        "extra_bytes": max(0, peak - baseline) * 1024,
        "peak_reset": reset,
    }


def measure_memory(
    op: str,
    layout: str,
    dtype: str = "float32",
    nbytes: int = DEFAULT_BYTES,
    runner: str = "onnx-reduce",
    threads: int = 2,
    timeout: float = 600.0,
) -> dict[str, Any]:
    """Peak extra bytes of ``runner`` computing ``op`` over ``layout`` on an ``nbytes`` input.

    Returns the child's measurement plus ``extra_percent`` (of the input), ``budget_bytes``
    (5% of the input + the output) and ``within_budget``.
    """
    spec = {"op": op, "layout": layout, "dtype": normalize_dtype(dtype), "nbytes": int(nbytes),
            "runner": runner, "threads": threads}
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536", MALLOC_TRIM_THRESHOLD_="0")
    proc = subprocess.run(
        [sys.executable, "-m", "onnx_reduce.benchmarking.memory", json.dumps(spec)],
        capture_output=True, text=True, timeout=timeout, env=env, check=False,
    )
    if proc.returncode != 0:
        tail = " ".join(proc.stderr.strip().splitlines()[-1:]) or f"exit {proc.returncode}"
        return {**spec, "error": tail[:200]}
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["extra_percent"] = 100.0 * result["extra_bytes"] / result["input_bytes"]
    result["budget_bytes"] = BUDGET_FRACTION * result["input_bytes"] + result["output_bytes"]
    result["within_budget"] = result["extra_bytes"] <= result["budget_bytes"]
    return result


def run_memory_suite(
    ops: Iterable[str] = OPS,
    layouts: Iterable[str] = tuple(LAYOUTS),
    runners: Iterable[str] = ("onnx-reduce", "numpy", "onnxruntime"),
    dtype: str = "float32",
    nbytes: int = DEFAULT_BYTES,
    threads: int = 2,
    progress: Callable[[int, int, str], None] | None = None,
) -> list[dict[str, Any]]:
    """:func:`measure_memory` for every runner x op x layout, one subprocess each."""
    cases = [(r, o, la) for r in runners for o in ops for la in layouts]
    rows = []
    for done, (runner, op, layout) in enumerate(cases, start=1):
        rows.append(measure_memory(op, layout, dtype, nbytes, runner, threads))
        if progress is not None:
            progress(done, len(cases), f"{runner} {op} {layout}")
    return rows


def memory_markdown(rows: list[dict[str, Any]]) -> str:
    """A Markdown table of :func:`run_memory_suite` rows.

    >>> row = {"runner": "numpy", "op": "ReduceSum", "layout": "inner", "dtype": "float32",
    ...        "shape": [2, 2], "axes": [1], "input_bytes": 2**20, "output_bytes": 8,
    ...        "extra_bytes": 8192, "extra_percent": 0.78125, "budget_bytes": 52436.8,
    ...        "within_budget": True}
    >>> print(memory_markdown([row]).splitlines()[2])
    | numpy | ReduceSum | inner | float32 | 2x2 → [1] | 8 B | 8.0 KiB | 0.78% | yes |
    """
    head = ["runner", "op", "layout", "dtype", "shape → axes", "output", "peak extra",
            "extra / input", "<= 5% input + output"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        where = f"{'x'.join(map(str, r.get('shape', [])))} → {r.get('axes', [])}"
        if "error" in r:
            cells = [r["runner"], r["op"], r["layout"], r["dtype"], where, "—", "error",
                     r["error"], "—"]
        else:
            cells = [r["runner"], r["op"], r["layout"], r["dtype"], where,
                     _bytes(r["output_bytes"]), _bytes(r["extra_bytes"]),
                     f"{r['extra_percent']:.2f}%", "yes" if r["within_budget"] else "**no**"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _bytes(n: float) -> str:
    for unit, scale in (("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{int(n)} B"


if __name__ == "__main__":
    _spec = json.loads(sys.argv[1])
    print(json.dumps(_child(_spec["op"], _spec["layout"], _spec["dtype"], _spec["nbytes"],
                            _spec["runner"], _spec["threads"])))
