"""Smoke tests of the benchmark engine with tiny sizes (the real benchmark never runs in CI)."""

from __future__ import annotations

import importlib.util
import json
import math
import time
from pathlib import Path

import numpy as np
import pytest

from onnx_reduce.benchmarking import (
    LAYOUTS,
    BenchConfig,
    BenchResults,
    machine_description,
    measure_memory,
    measure_read_roofline,
    memory_markdown,
    run_suite,
    suite,
)
from onnx_reduce.benchmarking.cases import (
    ALL_OPS,
    Case,
    input_for,
    make_input,
    shape_for,
    short_name,
    size_bytes,
)
from onnx_reduce.benchmarking.results import CellResult, format_seconds, geomean
from onnx_reduce.benchmarking.timing import time_interleaved
from onnx_reduce.benchmarking.verify import compare

ROOT = Path(__file__).resolve().parents[2]


# --- the matrix ------------------------------------------------------------------------------


@pytest.mark.parametrize("size", ["1MiB", "64MiB", "256KiB"])
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_shapes_have_exactly_the_requested_bytes(layout, dtype, size):
    case = Case("ReduceSum", layout, dtype, size)
    assert case.nbytes == size_bytes(size)
    assert len(case.shape) == LAYOUTS[layout][0]
    assert max(case.shape) <= 2 * min(case.shape)  # as square as powers of two allow


def test_latency_cells_are_8x128():
    assert shape_for("inner", "float64", "latency") == (8, 128)
    assert math.prod(shape_for("middle", "float16", "latency")) == 8 * 128
    assert Case("ReduceL2", "split", "float32", "latency").axes == (0, 2)
    assert Case("ReduceL2", "all", "float32", "latency").axes == (0, 1)


def test_config_normalizes_names_and_always_runs_onnx_reduce_first():
    cfg = BenchConfig(ops="lse,sum", layouts=["Inner"], dtypes=["bf16", "double"],
                      sizes=["64mib"], runners=["np", "ort"])
    assert cfg.ops == ("ReduceLogSumExp", "ReduceSum")
    assert cfg.dtypes == ("bfloat16", "float64")
    assert cfg.sizes == ("64MiB",)
    assert cfg.runners == ("onnx-reduce", "onnxruntime", "numpy")
    assert len(cfg.cases()) == 2 * 1 * 2 * 1


def test_every_registry_op_can_be_timed_though_the_default_matrix_has_three():
    cfg = BenchConfig(ops="sumsq,LogSum", sizes=["latency"])
    assert cfg.ops == ("ReduceSumSquare", "ReduceLogSum")
    assert BenchConfig().ops == ("ReduceSum", "ReduceL2", "ReduceLogSumExp")
    log_sum = input_for(Case("ReduceLogSum", "inner", "float32", "latency"))
    assert (log_sum > 0).all()  # its benchmark input: magnitudes (the log of a positive sum)
    assert (input_for(Case("ReduceSum", "inner", "float32", "latency")) < 0).any()
    assert [short_name(op) for op in ALL_OPS] == ["Sum", "L2", "LSE", "SumSq", "LogSum"]


@pytest.mark.parametrize(
    "kwargs",
    [{"ops": ["ReduceMax"]}, {"layouts": ["diagonal"]}, {"dtypes": ["int8"]},
     {"sizes": ["huge"]}, {"runners": ["tensorflow"]}, {"repeats": 0}, {"ops": []},
     {"regimes": ["lukewarm"]}],
)
def test_config_rejects_unknown_names(kwargs):
    with pytest.raises(ValueError, match=r"unknown|must be|selected nothing"):
        BenchConfig(**kwargs)


def test_quick_has_no_big_cells_and_full_has_the_whole_matrix():
    quick, full = BenchConfig.quick(), BenchConfig.full()
    assert all(c.nbytes <= 2**20 for c in quick.cases())
    assert len(full.cases()) == 3 * 5 * 4 * 3
    assert {c.size for c in full.cases()} == {"latency", "1MiB", "64MiB"}
    assert quick.threads == full.threads == 2


def test_inputs_are_deterministic_finite_and_of_the_dtype():
    a = make_input((3, 5), np.dtype(np.float16), seed=1)
    b = make_input((3, 5), np.dtype(np.float16), seed=1)
    assert a.dtype == np.float16
    assert a.flags.c_contiguous
    assert np.array_equal(a, b)
    assert np.all(np.isfinite(a))
    assert not np.array_equal(a, make_input((3, 5), np.dtype(np.float16), seed=2))


# --- verification and timing -----------------------------------------------------------------


def test_compare_accepts_ulps_and_flags_wrong_answers():
    ref = np.array([[4.0], [-8.0]])
    assert compare(ref + np.array([[2**-40], [0.0]]), ref, "float64") == (True, 2**-43)
    assert compare(ref + np.array([[2**-20], [0.0]]), ref, "float64")[0] is False
    assert compare(ref[:1], ref, "float64") == (False, math.inf)  # shape
    assert compare(np.array([[np.inf], [-8.0]]), ref, "float64")[0] is False  # overflow
    nan_ref = np.array([np.nan, 1.0])
    assert compare(np.array([np.nan, 1.0]), nan_ref, "float32") == (True, 0.0)
    assert compare(np.array([0.0, 1.0]), nan_ref, "float32")[0] is False
    assert compare(np.array([-np.inf]), np.array([-np.inf]), "float32") == (True, 0.0)
    # bfloat16 tolerance: 2**-6 of the largest output passes, 2**-4 does not.
    assert compare(np.array([1.0 + 2**-6]), np.array([1.0]), "bfloat16")[0] is True
    assert compare(np.array([1.0 + 2**-4]), np.array([1.0]), "bfloat16")[0] is False


def test_time_interleaved_honours_repeats_caps_and_the_time_budget():
    order: list[str] = []
    calls = {name: (lambda n=name: order.append(n)) for name in ("a", "b", "c")}
    numbers = dict.fromkeys(calls, 1)
    stats = time_interleaved(calls, 4, caps={"c": 2}, numbers=numbers)
    assert (stats["a"].samples, stats["b"].samples, stats["c"].samples) == (4, 4, 2)
    assert sorted(order[:3]) == ["a", "b", "c"]  # each round times every runner once
    assert sorted(order[3:6]) == ["a", "b", "c"]
    stats = time_interleaved(calls, 50, max_seconds=0.0, numbers=numbers)
    assert {s.samples for s in stats.values()} == {3}


def test_every_runner_of_a_cell_makes_the_same_calls_per_sample(monkeypatch):
    """A runner fast enough for more calls per sample would be timed warmer (its later calls
    find the input in cache): each cell's runners all get the slowest runner's count."""
    seen: list[dict[str, int]] = []
    real = suite.time_interleaved

    def spy(calls, repeats, **kw):
        seen.append(dict(kw["numbers"]))
        return real(calls, repeats, **kw)

    monkeypatch.setattr(suite, "time_interleaved", spy)
    slow = {"numpy": 0.0}  # a runner that takes ~1 ms a call, against microseconds

    def slow_bind(runner, setup, x, case, threads=2, _bind=suite.bind):
        call = _bind(runner, setup, x, case, threads)
        if runner != "numpy":
            return call

        def sleepy():
            time.sleep(1e-3)
            slow["numpy"] += 1
            return call()
        return sleepy

    monkeypatch.setattr(suite, "bind", slow_bind)
    cfg = BenchConfig(ops=["sum"], layouts=["inner"], dtypes=["float32"], sizes=["latency"],
                      repeats=3, runners=["onnx-reduce", "numpy"], roofline_bytes=0,
                      min_sample_seconds=4e-3, max_cell_seconds=5.0)
    (row,) = run_suite(cfg).rows
    numbers = seen[0]
    assert len(seen) == 2  # the from-memory and the hot regime, with the same counts
    assert seen[1] == numbers
    assert set(numbers) == {"onnx-reduce", "numpy"}
    assert len(set(numbers.values())) == 1  # the same for both
    assert 2 <= numbers["onnx-reduce"] <= 4  # numpy's count: ~4 ms of ~1 ms calls
    assert row.calls_per_sample == numbers["numpy"]
    assert slow["numpy"] >= 3 * numbers["numpy"]


def test_time_interleaved_shuffles_the_order_of_each_round_reproducibly():
    """No runner always follows the same one (a call after a single-threaded runner starts
    on an idle core): over many rounds every runner follows every other; the same seed gives
    the same order."""
    order: list[str] = []
    calls = {name: (lambda n=name: order.append(n)) for name in ("a", "b", "c")}
    numbers = dict.fromkeys(calls, 1)
    time_interleaved(calls, 60, numbers=numbers)
    rounds = [order[i:i + 3] for i in range(0, len(order), 3)]
    assert all(sorted(r) == ["a", "b", "c"] for r in rounds)
    assert len({tuple(r) for r in rounds}) > 3  # not one rotation of a fixed order
    followers = {(order[i], order[i + 1]) for i in range(len(order) - 1)}
    assert {(p, q) for p in "abc" for q in "abc" if p != q} <= followers
    first = list(order)
    order.clear()
    time_interleaved(calls, 60, numbers=numbers)
    assert order == first
    order.clear()
    time_interleaved(calls, 60, numbers=numbers, seed=1)
    assert order != first


def test_format_and_geomean():
    assert format_seconds(2.5e-6) == "2.50 µs"
    assert format_seconds(1.5) == "1.50 s"
    assert geomean([2.0, 8.0]) == pytest.approx(4.0)
    assert geomean([None, 0.0]) is None


# --- the suite end to end (tiny) --------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_results():
    cfg = BenchConfig(ops=["sum", "lse"], layouts=["inner", "split"],
                      dtypes=["float32", "bfloat16"], sizes=["latency", "16KiB"], repeats=2,
                      roofline_bytes=2**20, min_sample_seconds=2e-4, max_cell_seconds=1.0,
                      runners=["onnx-reduce", "onnxruntime", "onnx.reference", "numpy"],
                      exp_limit=False)
    calls: list[tuple[int, int, str]] = []
    results = run_suite(cfg, progress=lambda d, t, label: calls.append((d, t, label)))
    return results, calls


def test_suite_runs_every_cell_and_reports_progress(tiny_results):
    results, calls = tiny_results
    assert len(results.rows) == 16
    assert [c[0] for c in calls] == list(range(1, 17))
    assert {c[1] for c in calls} == {16}
    assert calls[-1][2].endswith(("latency", "16KiB"))
    assert results.roofline_gbps is not None
    assert results.roofline_gbps > 0


def test_suite_times_verifies_and_marks_missing_runners(tiny_results):
    results, _ = tiny_results
    for row in results.rows:
        assert row.times["onnx-reduce"] > 0
        assert row.kernel in ("fast", "reference")
        if row.dtype == "bfloat16":  # onnxruntime's CPU reductions lack bfloat16
            assert row.status["onnxruntime"].startswith("n/a")
            assert row.times["onnxruntime"] is None
            assert row.ort_ratio is None
        else:
            # float32 on small standard-normal data: every runner agrees with onnx-reduce.
            assert {row.status[r] for r in results.runners} == {"ok"}, row
            assert row.ort_ratio == pytest.approx(
                row.times["onnxruntime"] / row.times["onnx-reduce"])
        has_fraction = (row.dtype == "float32" and row.size != "latency"
                        and row.op != "ReduceLogSumExp")
        assert (row.roofline_fraction_best_pass is not None) == has_fraction
        assert row.roofline_fraction is None  # side by side: 16 MiB cells and up only
        assert "read roofline" not in row.times


def test_large_float32_cells_time_the_roofline_kernel_side_by_side(monkeypatch):
    monkeypatch.setattr(suite, "ROOFLINE_CELL_BYTES", 2**14)
    cfg = BenchConfig(ops=["sum", "lse"], layouts=["inner"], dtypes=["float32", "float64"],
                      sizes=["16KiB"], repeats=3, runners=["onnx-reduce", "numpy"],
                      roofline_bytes=2**20, min_sample_seconds=2e-4, max_cell_seconds=1.0)
    rows = {(r.op, r.dtype): r for r in run_suite(cfg).rows}
    row = rows["ReduceSum", "float32"]
    assert row.samples["read roofline"] == 3  # timed in the same rounds as the runners
    assert 0 < row.roofline_fraction < 100
    assert set(row.times) == {"onnx-reduce", "numpy"}
    for key in (("ReduceLogSumExp", "float32"), ("ReduceSum", "float64")):
        assert rows[key].roofline_fraction is None
        assert "read roofline" not in rows[key].samples


def test_summary_markdown_and_json_round_trip(tiny_results, tmp_path):
    results, _ = tiny_results
    summary = results.summary()
    assert summary["cells"] == 16
    assert set(summary["geomean_speedup_vs_onnxruntime"]) == {"latency", "16KiB"}
    assert summary["not_available"] >= 8  # onnxruntime on every bfloat16 cell
    text = results.to_markdown()
    assert "CPU:" in text
    assert "Read roofline" in text
    assert "## Targets (issue 20)" in text
    assert text.count("| Sum split bf16 |") == 2
    detail = results.detail_markdown()
    assert "n/a[" in detail
    assert detail.count("| ReduceSum | split | bfloat16 |") == 2
    saved = tmp_path / "r.json"
    saved.write_text(json.dumps(results.to_dict()))
    again = BenchResults.from_dict(json.loads(saved.read_text()))
    assert again.to_markdown() == text
    assert again.detail_markdown() == detail


def test_rows_are_typed_and_survive_json(tiny_results):
    results, _ = tiny_results
    assert all(isinstance(row, CellResult) for row in results.rows)
    again = BenchResults.from_dict(json.loads(json.dumps(results.to_dict())))
    assert again.rows == results.rows


def test_results_saved_without_the_newer_fields_still_load(tiny_results):
    results, _ = tiny_results
    data = json.loads(json.dumps(results.to_dict()))
    del data["regimes"], data["exp_limit_gbps"]
    for row in data["rows"]:
        del row["calls_per_sample"], row["roofline_fraction_best_pass"]
        del row["hot_times"], row["ulps"]
    loaded = BenchResults.from_dict(data)
    assert {(r.calls_per_sample, r.roofline_fraction_best_pass) for r in loaded.rows} == {
        (None, None)}
    assert loaded.regimes == ("memory",)
    assert "| Sum split bf16 |" in loaded.to_markdown()


def test_plot_writes_a_png(tiny_results, tmp_path):
    pytest.importorskip("matplotlib")
    results, _ = tiny_results
    path = tmp_path / "bench.png"
    results.plot(path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_run_script_writes_report(tmp_path):
    spec = importlib.util.spec_from_file_location("bench_run", ROOT / "benchmarks" / "run.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = tmp_path / "report.md"
    detail = tmp_path / "detail.md"
    code = module.main(["--quick", "--ops", "sum", "--layouts", "outer", "--dtypes", "f64",
                        "--sizes", "latency", "--repeats", "1", "--runners", "numpy",
                        "--roofline-mib", "0", "--no-exp-limit", "--regimes", "hot",
                        "--out", str(out), "--detail-out", str(detail)])
    assert code == 0
    text = out.read_text()
    assert "| Sum outer f64 |" in text
    assert "vs numpy" in text
    assert "vs onnxruntime" not in text
    assert "hot (same input again and again)" in text
    assert "from memory (interleaved)" not in text
    assert "| ReduceSum | outer | float64 | 8x128 → [0] |" in detail.read_text()


# --- machine, roofline, memory ------------------------------------------------------------------


def test_machine_description_names_hardware_and_versions():
    text = machine_description()
    for key in ("CPU:", "Cores:", "RAM:", "python", "numpy", "numba", "onnxruntime", "revision"):
        assert key in text


def test_roofline_is_a_positive_bandwidth():
    # Only sanity: on a busy shared machine a pass can be arbitrarily slow.
    gbps = measure_read_roofline(nbytes=2**20, repeats=2, threads=1)
    assert math.isfinite(gbps)
    assert gbps > 0


def test_memory_measurement_sees_a_full_size_temporary():
    # np.log(np.sum(np.exp(x))) materializes exp(x): extra ~ 100% of the input; np.sum of the
    # inner axis allocates only the output.
    nbytes = 8 * 2**20
    lse = measure_memory("ReduceLogSumExp", "inner", runner="numpy", nbytes=nbytes)
    assert lse["peak_reset"]
    assert 90 <= lse["extra_percent"] <= 130
    assert not lse["within_budget"]
    total = measure_memory("ReduceSum", "inner", runner="numpy", nbytes=nbytes)
    assert total["within_budget"]
    assert total["extra_percent"] < 5
    table = memory_markdown([lse, total])
    assert "**no**" in table
    assert "| numpy | ReduceSum | inner | float32 |" in table
