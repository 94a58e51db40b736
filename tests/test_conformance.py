"""Fast tests of onnx_reduce.conformance itself: the collection, the expectations, run_case."""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import math
import subprocess
import sys

import mpmath
import numpy as np
import onnx
import pytest

from onnx_reduce import conformance, onnx_node_tests
from onnx_reduce.conformance import Case, CaseResult, collect_cases, compare_outputs, run_case
from onnx_reduce.kernels.dispatch import kernel_path
from onnx_reduce.spec import REGISTRY, VERSIONS, bfloat16
from onnxruntime_opsets import ort_max_opset

CASES = collect_cases()
BY_NAME = {c.name: c for c in CASES}


def _count(source: str) -> dict[tuple[str, int], int]:
    return dict(collections.Counter((c.op, c.version) for c in CASES if c.source == source))


# --- collect_cases ----------------------------------------------------------------------------


def test_official_counts_and_versions():
    assert _count("onnx") == {("ReduceSum", 13): 12, ("ReduceL2", 18): 18,
                              ("ReduceLogSumExp", 28): 18, ("ReduceSumSquare", 18): 18,
                              ("ReduceLogSum", 28): 10}
    official = [c for c in CASES if c.source == "onnx"]
    assert len(official) == 76
    assert all(c.opset == c.version for c in official)
    expanded = [c.name for c in official if c.name.endswith("_expanded")]
    assert len(expanded) == 9 + 9 + 9 + 5  # ReduceSum has no function body
    assert not any(c.op == "ReduceSum" for c in official if c.name in expanded)


def test_restamped_counts_per_version():
    assert _count("restamped") == {
        ("ReduceSum", 1): 10, ("ReduceSum", 11): 10,  # the two noop cases need version 13
        ("ReduceL2", 1): 9, ("ReduceL2", 11): 9, ("ReduceL2", 13): 9,
        ("ReduceLogSumExp", 1): 9, ("ReduceLogSumExp", 11): 9, ("ReduceLogSumExp", 13): 9,
        ("ReduceLogSumExp", 18): 18,  # 9 plain + 9 function-body models (body exists at 18)
        ("ReduceSumSquare", 1): 9, ("ReduceSumSquare", 11): 9, ("ReduceSumSquare", 13): 9,
        ("ReduceLogSum", 1): 5, ("ReduceLogSum", 11): 5, ("ReduceLogSum", 13): 5,
        ("ReduceLogSum", 18): 10,  # 5 plain + 5 function-body models
    }


def test_every_version_has_edge_and_error_cases():
    edges = [c for c in CASES if c.source == "onnx-reduce"]
    for op, versions in VERSIONS.items():
        for version in versions:
            mine = [c for c in edges if (c.op, c.version) == (op, version)]
            assert any(c.expect_error is None for c in mine), (op, version)
            assert any(c.expect_error is TypeError for c in mine), (op, version)
            assert any(c.expect_error is ValueError for c in mine), (op, version)


def test_names_are_unique_and_labelled():
    assert len(BY_NAME) == len(CASES)
    assert all(c.name.startswith("test_") for c in CASES)
    assert {c.source for c in CASES} == set(conformance.SOURCES)
    assert BY_NAME["test_reduce_sum_keepdims_example_ver11"].label == "ReduceSum-11"


def test_include_expanded_false():
    plain = collect_cases(include_expanded=False)
    assert not any("_expanded" in c.name for c in plain)
    assert len([c for c in plain if c.source == "onnx"]) == 76 - 32
    assert len(CASES) - len(plain) == 32 + 9 + 5  # official, LSE-18 and LogSum-18 restamped


def test_collect_cases_is_cached():
    again = collect_cases()
    assert again == CASES
    assert again is not CASES
    assert all(a is b for a, b in zip(again, CASES, strict=False))


def test_restamped_models_follow_the_version():
    for case in (c for c in CASES if c.source == "restamped" and "_expanded" not in c.name):
        ver = VERSIONS[case.op][case.version]
        (node,) = case.model.graph.node
        attributes = {a.name for a in node.attribute}
        assert [o.version for o in case.model.opset_import] == [case.version]
        if ver.axes_is_input:
            assert "axes" not in attributes
        else:
            assert (len(node.input), len(case.inputs)) == (1, 1), case.name
            assert "noop_with_empty_axes" not in attributes, case.name
        onnx.checker.check_model(case.model, full_check=True)


def test_restamped_axes_moved_to_the_attribute():
    case = BY_NAME["test_reduce_l2_negative_axes_keep_dims_example_ver13"]
    (node,) = case.model.graph.node
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    assert attrs == {"axes": [-1], "keepdims": 1}
    # an empty axes input (reduce all) becomes no axes attribute at all
    case = BY_NAME["test_reduce_sum_default_axes_keepdims_example_ver1"]
    assert {a.name for a in case.model.graph.node[0].attribute} == {"keepdims"}
    assert "test_reduce_sum_empty_axes_input_noop_ver11" not in BY_NAME


def test_expanded_restamped_only_where_the_body_exists():
    restamped = [c for c in CASES if c.source == "restamped"]
    expanded = {(c.op, c.version) for c in restamped if "_expanded" in c.name}
    assert expanded == {("ReduceLogSumExp", 18), ("ReduceLogSum", 18)}


def test_edge_models_are_valid_onnx():
    for case in (c for c in CASES if c.source == "onnx-reduce" and c.expect_error is None):
        onnx.checker.check_model(case.model, full_check=True)


def test_collection_leaves_onnx_and_numpy_state_alone():
    before = onnx_node_tests.collector_state()
    state = np.random.get_state()[1].copy()  # noqa: NPY002 (the legacy RNG onnx seeds)
    conformance._official_cases()
    assert onnx_node_tests.collector_state() == before
    np.testing.assert_array_equal(np.random.get_state()[1], state)  # noqa: NPY002


def test_import_is_light():
    code = ("import sys, onnx_reduce.conformance; "
            "print('onnx.backend.test.case.node' in sys.modules, 'onnxruntime' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


PREFIXES = tuple(record.node_test_prefix + "_" for record in REGISTRY)


def test_official_cases_match_onnx_own_collector():
    """Our in-memory build equals what onnx's loader collects (run apart: it imports every op)."""
    code = (
        "import hashlib, warnings; warnings.simplefilter('ignore')\n"
        "from onnx.backend.test.loader import load_model_tests\n"
        "for t in load_model_tests(kind='node'):\n"
        f"    if t.model.graph.node and t.name.startswith({PREFIXES!r}):\n"
        "        data = b''.join(x.tobytes() for x in t.data_sets[0][0] + t.data_sets[0][1])\n"
        "        print(t.name, hashlib.sha256(t.model.SerializeToString() + data).hexdigest())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    theirs = dict(line.split() for line in out.stdout.splitlines())
    ours = {}
    for case in (c for c in CASES if c.source == "onnx"):
        data = b"".join(x.tobytes() for x in case.inputs + case.expected)
        ours[case.name] = hashlib.sha256(case.model.SerializeToString() + data).hexdigest()
    assert theirs == ours


# --- expected values are exact ----------------------------------------------------------------


def _expected(name: str) -> np.ndarray:
    return BY_NAME[name].expected[0]


def test_expected_values_from_exact_arithmetic():
    mpmath.mp.dps = 50
    lse800 = float(mpmath.mpf(800) + mpmath.log(2))
    assert _expected("test_reduce_log_sum_exp_edge_overflow_float64_ver28")[0] == lse800
    lse_minus800 = float(mpmath.mpf(-800) + mpmath.log(2))
    assert _expected("test_reduce_log_sum_exp_edge_underflow_float64_ver13")[0] == lse_minus800
    assert _expected("test_reduce_l2_edge_overflow_float32_ver13")[0] == np.float32(5e30)
    assert _expected("test_reduce_l2_edge_underflow_float64_ver18")[0] == 5e-200
    assert _expected("test_reduce_l2_edge_overflow_float16_ver1")[0] == np.float16(500)
    assert _expected("test_reduce_l2_edge_exact_int64_ver18")[0] == math.isqrt(2 * 4**31 + 49)
    assert _expected("test_reduce_l2_edge_floor_uint32_ver11")[0] == 1
    assert _expected("test_reduce_sum_edge_wrap_int32_ver13")[0] == -(2**31)
    assert _expected("test_reduce_sum_edge_wrap_uint64_ver1")[0] == 2**64 - 2
    assert _expected("test_reduce_sum_edge_cancellation_float32_ver13")[0] == 1.0
    assert _expected("test_reduce_sum_edge_single_rounding_float16_ver13")[0] == 2050
    assert np.isposinf(_expected("test_reduce_sum_edge_overflow_float16_ver13")[0])
    assert _expected("test_reduce_log_sum_exp_edge_int_truncation_int32_ver18")[0] == 2
    assert _expected("test_reduce_log_sum_exp_edge_int_truncation_negative_int64_ver1")[0] == -4
    bf = _expected("test_reduce_l2_edge_bfloat16_ver13")
    assert bf.dtype == bfloat16
    want = np.array([math.sqrt(5), 5.0]).astype(bfloat16)  # one rounding from float64
    np.testing.assert_array_equal(bf.ravel(), want)


def test_expected_special_values_and_shapes():
    np.testing.assert_array_equal(
        _expected("test_reduce_log_sum_exp_edge_minus_inf_float64_ver13").ravel(), [-np.inf, 0.5])
    np.testing.assert_array_equal(
        _expected("test_reduce_log_sum_exp_edge_plus_inf_float32_ver13").ravel(), [np.inf, np.inf])
    assert np.isnan(_expected("test_reduce_l2_edge_nan_and_inf_float64_ver11"))
    empty = _expected("test_reduce_log_sum_exp_edge_empty_set_float32_ver18")
    assert empty.shape == (2, 1, 3)
    assert np.all(empty == -np.inf)
    assert _expected("test_reduce_sum_edge_empty_kept_axis_float32_ver13").shape == (0, 1)
    assert _expected("test_reduce_sum_edge_rank0_float32_ver1").shape == ()
    np.testing.assert_array_equal(
        _expected("test_reduce_l2_edge_noop_empty_axes_float32_ver18"), [[1.5, 2.0], [0.0, 3.0]])
    np.testing.assert_array_equal(
        _expected("test_reduce_log_sum_exp_edge_noop_no_axes_float64_ver28"), [-1.5, 2.0, 0.0])


# --- run_case -------------------------------------------------------------------------------


EDGES = [c for c in CASES if c.source == "onnx-reduce"]


@pytest.mark.parametrize("path", ["reference", "auto"])
def test_onnx_reduce_passes_every_edge_case(path):
    """Our own cases through our backend, on the reference kernels and on the default path."""
    with kernel_path(path):
        failed = {c.name: r for c in EDGES if (r := run_case(c, "onnx-reduce")).status != "pass"}
    assert failed == {}
    assert len(EDGES) > 300



def test_run_case_rejects_unknown_runner():
    with pytest.raises(ValueError, match="unknown runner"):
        run_case(CASES[0], "tvm")


@pytest.mark.parametrize("runner", conformance.RUNNERS)
def test_official_sum_case_passes_everywhere(runner):
    assert run_case(BY_NAME["test_reduce_sum_keepdims_random"], runner) == CaseResult("pass")


def onnxruntime_loads_opset_28() -> bool:
    """Whether the installed onnxruntime loads opset 28 (1.31 does not, 1.32 does)."""
    pytest.importorskip("onnxruntime")
    return ort_max_opset() >= 28


def test_onnxruntime_at_opset_28():
    """An onnxruntime without opset 28 is reported as refusing the case, not as failing it."""
    result = run_case(BY_NAME["test_reduce_log_sum_exp_keepdims_random"], "onnxruntime")
    if onnxruntime_loads_opset_28():
        assert result == CaseResult("pass")
    else:
        assert result.status == "unsupported"
        assert "refuses" in result.detail
    assert run_case(BY_NAME["test_reduce_log_sum_exp_keepdims_random_ver18"],
                    "onnxruntime").status == "pass"


def test_onnxruntime_unsupported_types():
    assert run_case(BY_NAME["test_reduce_sum_edge_uint64_ver13"], "onnxruntime").status == (
        "unsupported")
    assert run_case(BY_NAME["test_reduce_l2_edge_bfloat16_ver13"], "onnxruntime").status == (
        "unsupported")


def test_known_disagreements_are_failures():
    # the reference evaluator's LSE turns inf - inf into NaN and its L2 overflows
    for name in ("test_reduce_log_sum_exp_edge_plus_inf_float32_ver18",
                 "test_reduce_l2_edge_overflow_float32_ver13"):
        assert run_case(BY_NAME[name], "onnx-reduce").status == "pass"
        result = run_case(BY_NAME[name], "onnx.reference")
        assert result.status == "fail"
        assert "differ" in result.detail


@pytest.mark.parametrize("runner", conformance.RUNNERS)
def test_error_case_passes_when_the_runner_raises(runner):
    case = BY_NAME["test_reduce_log_sum_exp_edge_error_int_at_28_ver28"]
    assert case.expect_error is TypeError
    result = run_case(case, runner)
    refused = runner == "onnxruntime" and not onnxruntime_loads_opset_28()
    assert result.status == ("unsupported" if refused else "pass"), result


def test_error_case_checks_type_and_message_for_onnx_reduce():
    case = BY_NAME["test_reduce_sum_edge_error_duplicate_axes_ver11"]
    result = run_case(case, "onnx-reduce")
    assert result.status == "pass"
    assert "ReduceSum-11" in result.detail
    wrong_type = dataclasses.replace(case, expect_error=TypeError)
    assert run_case(wrong_type, "onnx-reduce").status == "fail"
    wrong_label = dataclasses.replace(case, version=13)
    result = run_case(wrong_label, "onnx-reduce")
    assert result.status == "fail"
    assert "does not name ReduceSum-13" in result.detail
    # onnxruntime and the reference accept duplicate axes: a failure for them
    assert run_case(case, "onnxruntime").status == "fail"


def test_error_case_that_does_not_raise_fails():
    case = dataclasses.replace(BY_NAME["test_reduce_sum_keepdims_example"], expect_error=ValueError)
    result = run_case(case, "onnx-reduce")
    assert result.status == "fail"
    assert "expected ValueError" in result.detail


def test_unexpected_exception_is_an_error():
    case = BY_NAME["test_reduce_sum_edge_int32_ver13"]
    broken = dataclasses.replace(case, inputs=[case.inputs[0].astype(np.int8), *case.inputs[1:]])
    result = run_case(broken, "onnx-reduce")
    assert result.status == "error"
    assert "TypeError" in result.detail


def test_a_runner_that_modifies_its_inputs_fails(monkeypatch):
    def scribbling(case):
        def execute():
            out = case.inputs[0].sum(axis=1, keepdims=True)
            case.inputs[0][...] = 0
            return [out]
        return execute

    monkeypatch.setitem(conformance._PREPARERS, "onnx-reduce", scribbling)
    case = BY_NAME["test_reduce_sum_edge_int32_ver11"]
    kept = case.inputs[0].copy()
    result = run_case(case, "onnx-reduce")
    assert result == CaseResult("fail", "the runner modified its input arrays")
    np.testing.assert_array_equal(case.inputs[0], kept)  # the collection is untouched


def test_wrong_values_fail():
    case = BY_NAME["test_reduce_l2_keep_dims_example"]
    wrong = dataclasses.replace(case, expected=[case.expected[0] * 1.01])
    result = run_case(wrong, "onnx-reduce")
    assert result.status == "fail"
    assert "values differ" in result.detail


# --- compare_outputs ------------------------------------------------------------------------


def test_compare_outputs():
    f = np.array([1.0, np.nan, np.inf], dtype=np.float32)
    assert compare_outputs([f], [f.copy()], 0.0, 0.0) is None
    assert "dtype" in compare_outputs([f], [f.astype(np.float64)], 0.0, 0.0)
    assert "shape" in compare_outputs([f], [f.reshape(1, 3)], 0.0, 0.0)
    assert "outputs" in compare_outputs([f], [f, f], 0.0, 0.0)
    big = np.array([1.0, np.nan, 3e38], dtype=np.float32)
    assert "differ" in compare_outputs([f], [big], 1.0, 0.0)  # inf is not "close" to 3e38
    ints = np.array([2**63 - 1], dtype=np.int64)
    assert "differ" in compare_outputs([ints], [ints - 1], 1.0, 1.0)  # integers exactly
    b = np.array([1.0, 2.0], dtype=bfloat16)
    assert compare_outputs([b], [b.copy()], 0.0, 0.0) is None


def test_case_is_a_dataclass_with_the_agreed_fields():
    names = [f.name for f in dataclasses.fields(Case)]
    assert names == ["name", "op", "version", "opset", "source", "model", "inputs", "expected",
                     "rtol", "atol", "expect_error"]
    assert [f.name for f in dataclasses.fields(CaseResult)] == ["status", "detail"]
    assert conformance.RUNNERS == ("onnx-reduce", "onnxruntime", "onnx.reference")
