"""Run the matrix: set up every runner up front, then per cell warm up, verify, time interleaved.

>>> cfg = BenchConfig(ops=["sum"], layouts=["inner"], dtypes=["f32"], sizes=["latency"],
...                   repeats=2, runners=["onnx-reduce", "numpy"], roofline_bytes=0,
...                   min_sample_seconds=1e-4)
>>> res = run_suite(cfg)
>>> len(res.rows), res.rows[0].status["numpy"]
(1, 'ok')
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from ..kernels.dispatch import kernel_path
from . import roofline as _roofline
from .array_peers import to_numpy, torch_wait_policy
from .cases import Case, input_for
from .config import BenchConfig
from .exact import exact_result, ulp_error
from .exp_limit import measure_exp_limit
from .machine import machine_description
from .results import BenchResults, CellResult, speed_figures
from .runners import NotAvailable, bind, prepare, set_numba_threads
from .runners import _short as short_error
from .timing import calibrate, same_calls_per_sample, time_interleaved
from .verify import compare

Progress = Callable[[int, int, str], None]
#: onnx.reference's samples are capped from this input size up.
REFERENCE_CAP_BYTES = 16 * 2**20
#: Sum and L2 float32 cells from this size up (inputs that do not fit in the per-core caches)
#: also time the read-roofline kernel on the cell's own input, in the same interleaved rounds.
ROOFLINE_CELL_BYTES = 16 * 2**20
#: The name the side-by-side roofline kernel is timed under (not a runner of the tables).
ROOFLINE_CALL = "read roofline"


def run_suite(config: BenchConfig, progress: Progress | None = None) -> BenchResults:
    """Benchmark every cell of ``config``; ``progress(done, total, label)`` after each cell."""
    started = time.perf_counter()
    machine = machine_description()
    previous_threads = set_numba_threads(config.threads)
    try:
        roofline = _measure_roofline(config)
        exp_limit = measure_exp_limit(threads=config.threads) if config.exp_limit else None
        cases = config.cases()
        prepared = _prepare_all(config, cases)  # before anything is timed
        rows = _run_cells(config, cases, prepared, roofline, progress)
        roofline, method = _roofline_again(config, roofline, rows)
    finally:
        set_numba_threads(previous_threads)
    return BenchResults(
        rows=rows,
        runners=config.runners,
        machine=machine,
        roofline_gbps=roofline,
        roofline_method=method,
        exp_limit_gbps=exp_limit,
        regimes=config.regimes,
        repeats=config.repeats,
        threads=config.threads,
        elapsed_seconds=time.perf_counter() - started,
        notes=_method_notes(config),
    )


def _prepare_all(config: BenchConfig, cases: list[Case]) -> dict[tuple[Case, str], Any]:
    """Each runner's session or evaluator for each cell, or the NotAvailable it raised."""
    prepared: dict[tuple[Case, str], Any] = {}
    for case in cases:
        for runner in config.runners:
            try:
                prepared[case, runner] = prepare(runner, case, config.threads)
            except NotAvailable as exc:
                prepared[case, runner] = exc
    return prepared


def _run_cells(config: BenchConfig, cases: list[Case], prepared: dict[tuple[Case, str], Any],
               roofline: float | None, progress: Progress | None) -> list[CellResult]:
    """Every cell timed in order; cells of one shape and dtype share their input."""
    rows: list[CellResult] = []
    input_key: tuple | None = None
    x: np.ndarray | None = None
    for done, case in enumerate(cases, start=1):
        key = (case.shape, case.dtype, case.op == "ReduceLogSum")  # its input: magnitudes
        if key != input_key:
            x = None  # free the previous input first
            x = input_for(case, config.seed)
            input_key = key
        assert x is not None
        # Overflow to inf in numpy's float16 formulas is a result to compare, not a warning.
        with np.errstate(over="ignore", under="ignore", invalid="ignore", divide="ignore"):
            rows.append(_run_cell(case, x, prepared, config, roofline))
        if progress is not None:
            progress(done, len(cases), case.label)
    return rows


def _roofline_again(config: BenchConfig, roofline: float | None, rows: list[CellResult]
                    ) -> tuple[float | None, str]:
    """The read roofline measured again after the cells: the better of both stands (noise
    only slows a pass), the rows' best-pass fractions updated to it; with how it was measured."""
    if roofline is None:
        return None, ""
    again = _measure_roofline(config)
    assert again is not None
    method = (f"{_roofline.LAST_METHOD}; {roofline:.1f} GB/s before the cells, "
              f"{again:.1f} GB/s after, the better counts")
    best = max(roofline, again)
    if best != roofline:
        for row in rows:
            if row.roofline_fraction_best_pass is not None:
                row.roofline_fraction_best_pass = row.gbps / best
    return best, method


def _method_notes(config: BenchConfig) -> list[str]:
    """How the suite measured, as the report's notes say it."""
    return [
        "Times are medians per call. Every runner of a cell makes the same number of calls "
        "per sample, enough for the slowest runner's sample to last "
        f"{config.min_sample_seconds * 1e3:g} ms (so one from {REFERENCE_CAP_BYTES // 2**20} "
        "MiB up, where onnx.reference is called once per sample): calls after the first of a "
        "sample find the input in cache, and more of them for the faster runners would time "
        "those warmer than the rest. Runners are interleaved round by round, in an order "
        "shuffled each round (seeded): a call right after a single-threaded runner starts on "
        "an idle second core and measured 25-35% slower here, so a fixed order would charge "
        "that to one runner every time.",
        "Regimes: *from memory* times each sample's call right after another runner's (the "
        "suite's interleaving); *hot* makes one untimed call of the same runner first, so the "
        "timed call finds the input as its own previous call left it (cells shown as "
        "from memory / hot).",
        "onnxruntime: one InferenceSession per cell made up front (ReduceSum-13, ReduceL2-18, "
        "ReduceLogSumExp-18, axes as an int64 initializer), intra_op_num_threads="
        f"{config.threads}, pool spinning off (it would steal a core from the next runner); "
        "only `sess.run` is timed.",
        f"torch: eager torch.sum / torch.linalg.vector_norm / torch.logsumexp (dim, keepdim), "
        f"torch.set_num_threads({config.threads}), OpenMP wait policy "
        f"{torch_wait_policy()}; input by torch.from_numpy. jax: jnp.sum, "
        "jnp.sqrt(jnp.sum(x * x)), jax.nn.logsumexp, jit-compiled once per cell before timing, "
        "input by jax.device_put, each call up to block_until_ready; x64 enabled for float64. "
        "scipy: scipy.special.logsumexp (ReduceLogSumExp only).",
        f"onnx.reference: at most {config.reference_repeats} samples per cell from "
        f"{REFERENCE_CAP_BYTES // 2**20} MiB up (it is slow). Its ReduceLogSumExp shifts by the "
        "max; the numpy runner is the plain np.log(np.sum(np.exp(x))).",
        "GB/s = input bytes / onnx-reduce time (from memory). Roofline fractions (Sum and L2 of "
        "float32): *side by side* = the read-roofline "
        f"kernel's median time on the cell's own input, timed in the same shuffled rounds as "
        f"the runners, over onnx-reduce's (cells of {ROOFLINE_CELL_BYTES // 2**20} MiB and "
        "up: the same cache state and machine noise for both); *best pass* = onnx-reduce's "
        "GB/s over the read roofline above (the best of its passes, a median against a "
        "maximum; 1 MiB cells fit in cache and may exceed it).",
        "(n) after a time: the runner's largest error over the cell's outputs in ulps of the "
        "dtype, against the exact result (benchmarking/exact.py: math.fsum and double-double; "
        "a correctly rounded result scores <= 0.5).",
        "≠ marks a result that disagrees with onnx-reduce beyond the dtype's tolerance "
        "(relative to the largest output; f64 1e-9, f32 1e-4, f16 4e-3, bf16 3e-2).",
        "kernel: the onnx-reduce path that served the cell (fast = compiled kernel, reference = "
        "numpy fallback).",
        *config.notes,
    ]


def _run_cell(
    case: Case,
    x: np.ndarray,
    prepared: dict[tuple[Case, str], Any],
    config: BenchConfig,
    roofline: float | None,
) -> CellResult:
    calls, status, error, ulps = _warm_and_check(case, x, prepared, config)
    kernel = _kernel_used(case, x) if "onnx-reduce" in calls else "?"
    sum_l2_f32 = case.dtype == "float32" and case.op in ("ReduceSum", "ReduceL2")
    side_by_side = (roofline is not None and "onnx-reduce" in calls and sum_l2_f32
                    and case.nbytes >= ROOFLINE_CELL_BYTES)
    if side_by_side:
        calls[ROOFLINE_CALL] = _roofline.bind_read(x, config.threads)
    big = case.nbytes >= REFERENCE_CAP_BYTES
    caps = {"onnx.reference": config.reference_repeats} if big else {}
    calibrated = {
        name: 1 if big and name == "onnx.reference"
        else calibrate(call, config.min_sample_seconds)
        for name, call in calls.items()
    }
    numbers = dict.fromkeys(calibrated, same_calls_per_sample(calibrated))
    timings = {
        regime: time_interleaved(
            calls, config.repeats, min_sample_seconds=config.min_sample_seconds,
            max_seconds=config.max_cell_seconds, caps=caps, numbers=numbers,
            hot=regime == "hot",
        )
        for regime in config.regimes
    }
    medians = {regime: {runner: (timing[runner].median if runner in timing else None)
                        for runner in config.runners}
               for regime, timing in timings.items()}
    times = medians.get("memory") or medians["hot"]
    ours = times.get("onnx-reduce")
    gbps, ort_ratio, best_pass = speed_figures(case.nbytes, times, roofline,
                                               sum_l2_f32 and case.size != "latency")
    fraction = None
    first = timings[config.regimes[0]]
    if side_by_side and ours and ROOFLINE_CALL in first:
        fraction = first[ROOFLINE_CALL].median / ours
    return CellResult(
        op=case.op, layout=case.layout, dtype=case.dtype, size=case.size, shape=case.shape,
        axes=case.axes, nbytes=case.nbytes, kernel=kernel, times=times,
        samples={r: t.samples for r, t in first.items()},
        calls_per_sample=numbers.get("onnx-reduce"),
        status=status, error=error, ort_ratio=ort_ratio,
        gbps=gbps, roofline_fraction=fraction, roofline_fraction_best_pass=best_pass,
        hot_times=medians.get("hot", {}) if "memory" in medians else {}, ulps=ulps,
    )


def _warm_and_check(
    case: Case, x: np.ndarray, prepared: dict[tuple[Case, str], Any], config: BenchConfig
) -> tuple[dict[str, Callable[[], object]], dict[str, str], dict[str, float | None],
           dict[str, float | None]]:
    """Bind every runner (untimed set-up), call each once (compiles, allocates, warms), check
    its output against onnx-reduce's and measure its error in ulps against the exact result.
    Returns (calls, status, error relative to onnx-reduce's largest output, ulps)."""
    status: dict[str, str] = {}
    error: dict[str, float | None] = {}
    calls: dict[str, Callable[[], object]] = {}
    outputs: dict[str, np.ndarray] = {}
    for runner in config.runners:
        setup = prepared[case, runner]
        if isinstance(setup, NotAvailable):
            status[runner] = f"n/a: {setup}"
            continue
        try:
            call = bind(runner, setup, x, case, config.threads)
            outputs[runner] = to_numpy(call())
        except NotAvailable as exc:
            status[runner] = f"n/a: {exc}"
            continue
        except Exception as exc:
            status[runner] = f"n/a: {short_error(exc)}"
            continue
        calls[runner] = call
        status[runner] = "ok"
    ref = outputs.get("onnx-reduce")
    for runner, out in outputs.items():
        if runner == "onnx-reduce" or ref is None:
            continue
        agrees, err = compare(out, ref, case.dtype)
        error[runner] = err
        if not agrees:
            status[runner] = "mismatch"
    exact = exact_result(case, x) if config.ulps else None
    ulps = {runner: ulp_error(out, exact, case.dtype) for runner, out in outputs.items()}
    return calls, status, error, ulps


def _measure_roofline(config: BenchConfig) -> float | None:
    if config.roofline_bytes <= 0:
        return None
    return _roofline.measure_read_roofline(config.roofline_bytes, threads=config.threads)


def _kernel_used(case: Case, x: np.ndarray) -> str:
    """"fast" when a compiled kernel serves the cell, else "reference"."""
    call = bind("onnx-reduce", None, x, case)
    try:
        with kernel_path("fast"):
            call()
    except RuntimeError as exc:
        return "reference" if "no fast kernel" in str(exc) else "?"
    except Exception:
        return "?"
    return "fast"
