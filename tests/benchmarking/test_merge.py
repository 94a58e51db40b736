"""Repeated full runs merged into one result (onnx_reduce.benchmarking.merge)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from onnx_reduce.benchmarking import BenchResults, merge_runs, targets
from onnx_reduce.benchmarking.results import CellResult

ROOT = Path(__file__).resolve().parents[2]
MIB64 = 64 * 2**20
MACHINE = "CPU: test\nLoad average (1/5/15 min) at start: {load}\nonnx-reduce revision: {rev}"


def _cell(ours, torch, hot_ours, *, status="ok", ulps=0.5, fraction=0.9, layout="inner"):
    return CellResult(
        op="ReduceSum", layout=layout, dtype="float32", size="64MiB", shape=(4096, 4096),
        axes=(1,), nbytes=MIB64, kernel="fast",
        times={"onnx-reduce": ours, "torch": torch, "onnxruntime": 2 * torch},
        samples={"onnx-reduce": 5, "torch": 5, "onnxruntime": 5}, calls_per_sample=1,
        status={"onnx-reduce": "ok", "torch": status, "onnxruntime": "ok"},
        error={"torch": ulps * 1e-7}, gbps=MIB64 / ours / 1e9, roofline_fraction=fraction,
        roofline_fraction_best_pass=0.5,
        hot_times={"onnx-reduce": hot_ours, "torch": torch, "onnxruntime": 2 * torch},
        ulps={"onnx-reduce": 0.5, "torch": ulps})


def _run(cells, *, roofline=40.0, exp_limit=20.0, load="0.1", rev="abc"):
    return BenchResults(rows=list(cells), runners=("onnx-reduce", "torch", "onnxruntime"),
                        machine=MACHINE.format(load=load, rev=rev), roofline_gbps=roofline,
                        exp_limit_gbps=exp_limit, regimes=("memory", "hot"), repeats=15,
                        elapsed_seconds=900.0, roofline_method=f"best of 10 ({roofline})")


def _three():
    return [_run([_cell(1e-3, 2e-3, 1e-3, fraction=0.8)], roofline=40.0, load="0.1"),
            _run([_cell(3e-3, 2e-3, 0.9e-3, ulps=9.0, fraction=0.9)], roofline=45.0,
                 exp_limit=19.0, load="1.5"),
            _run([_cell(2e-3, 5e-3, 5e-3, status="mismatch", fraction=0.7)], roofline=41.0,
                 exp_limit=22.0)]


def test_each_time_is_the_median_of_the_runs_medians():
    merged = merge_runs(_three())
    row = merged.rows[0]
    assert row.times["onnx-reduce"] == 2e-3
    assert row.times["torch"] == 2e-3
    assert row.hot_times == {"onnx-reduce": 1e-3, "torch": 2e-3, "onnxruntime": 4e-3}
    assert row.samples["torch"] == 15
    assert merged.runs == 3
    assert merged.elapsed_seconds == 2700.0


def test_one_run_outlier_does_not_move_the_target_ratio():
    runs = _three()
    assert targets.peer_ratio(runs[0].rows[0], "hot") == pytest.approx(2.0)
    assert targets.peer_ratio(runs[2].rows[0], "hot") == pytest.approx(2.0)  # ort; torch ≠
    # merged: ours 1 ms hot; torch disagreed in one run, so onnxruntime's 4 ms (the median of
    # 4, 4 and 10 ms) is the fastest agreeing peer's
    assert targets.peer_ratio(merge_runs(runs).rows[0], "hot") == pytest.approx(4.0)


def test_a_peer_agrees_only_where_it_agreed_in_every_run():
    assert merge_runs(_three()).rows[0].status["torch"] == "mismatch"
    assert merge_runs(_three()[:2]).rows[0].status["torch"] == "ok"


def test_errors_are_the_largest_and_limits_the_median_run():
    merged = merge_runs(_three())
    row = merged.rows[0]
    assert row.ulps["torch"] == 9.0
    assert row.error["torch"] == pytest.approx(9e-7)
    assert merged.roofline_gbps == 41.0
    assert merged.roofline_method == ("best of 10 (40.0); the median of 3 runs' readings, "
                                      "40.0, 45.0, 41.0 GB/s")
    assert merged.exp_limit_gbps == 20.0
    assert merge_runs(_three()[1:2]).roofline_method == "best of 10 (45.0)"


def test_derived_figures_come_from_the_merged_medians():
    row = merge_runs(_three()).rows[0]
    assert row.gbps == pytest.approx(MIB64 / 2e-3 / 1e9)
    assert row.roofline_fraction_best_pass == pytest.approx(row.gbps / 41.0)
    assert row.roofline_fraction == pytest.approx(0.8)  # the median of 0.8, 0.9, 0.7
    assert row.ort_ratio == pytest.approx(2.0)  # onnxruntime 4 ms / ours 2 ms


@pytest.mark.parametrize(("other", "what"), [
    (_run([_cell(1e-3, 2e-3, 1e-3)], rev="def"), "machine and revision"),
    (_run([_cell(1e-3, 2e-3, 1e-3, layout="outer")]), "cells"),
    (_run([]), "cells"),
])
def test_runs_of_another_matrix_or_revision_do_not_merge(other, what):
    with pytest.raises(ValueError, match=f"different {what}"):
        merge_runs([_three()[0], other])


def test_nothing_to_merge_is_an_error():
    with pytest.raises(ValueError, match="at least one run"):
        merge_runs([])


def test_the_report_says_how_many_runs_and_json_keeps_it(tmp_path):
    merged = merge_runs(_three())
    assert "the median of 3 full runs' medians" in merged.to_markdown()
    back = BenchResults.from_dict(json.loads(json.dumps(merged.to_dict())))
    assert back.runs == 3
    old = merged.to_dict()
    del old["runs"]  # a run saved before the field existed
    assert BenchResults.from_dict(old).runs == 1
    assert "full runs" not in _three()[0].to_markdown()


def test_run_py_renders_several_saved_runs_as_one(tmp_path):
    paths = []
    for i, run in enumerate(_three()):
        paths.append(tmp_path / f"run{i}.json")
        paths[-1].write_text(json.dumps(run.to_dict()))
    out = tmp_path / "bench.md"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "run.py"), "--from-json",
                           *map(str, paths), "--out", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "the median of 3 full runs' medians" in out.read_text()
    assert "| Sum inner f32 | 2.00 ms |" in out.read_text()
