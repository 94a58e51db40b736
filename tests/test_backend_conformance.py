"""ONNX's own backend test runner on onnx_reduce.backend: the official node tests of our ops,
then the same cases re-stamped at every older version.

The runner's constructor would build *every* ONNX node test (~1900, several seconds); it is built
empty instead and given the 76 official cases of our operators, which
:mod:`onnx_reduce.conformance` builds in memory with ONNX's own ``expect`` code (no files).
Each case becomes ``OnnxBackendNodeModelTest.<name>_cpu`` (``_cuda`` is skipped: CPU only).
"""

from __future__ import annotations

import re
from unittest import mock

import numpy as np
import onnx.backend.test
import pytest
from onnx.backend.test.case.test_case import TestCase
from onnx.backend.test.runner import Runner

from onnx_reduce import backend
from onnx_reduce.conformance import Case, collect_cases

CASES = collect_cases()
OFFICIAL = [c for c in CASES if c.source == "onnx"]
RESTAMPED = [c for c in CASES if c.source == "restamped"]


def _test_case(case: Case) -> TestCase:
    return TestCase(
        name=case.name, model_name=case.name, url=None, model_dir=None, model=case.model,
        data_sets=[(case.inputs, case.expected)], kind="node", rtol=case.rtol, atol=case.atol,
    )


with mock.patch("onnx.backend.test.runner.load_model_tests", return_value=[]):
    backend_test = onnx.backend.test.BackendTest(backend, __name__)
for _case in OFFICIAL:
    backend_test._add_model_test(_test_case(_case), "Node")
backend_test.include(rf"^({'|'.join(re.escape(c.name) for c in OFFICIAL)})_(cpu|cuda)$")

globals().update(backend_test.test_cases)


def test_the_runner_holds_exactly_the_official_cases():
    (test_class,) = backend_test.test_cases.values()
    names = {n for n in vars(test_class) if n.startswith("test_") and n.endswith("_cpu")}
    assert len(OFFICIAL) == 76
    assert names == {f"{c.name}_cpu" for c in OFFICIAL}


@pytest.mark.parametrize("case", RESTAMPED, ids=[c.name for c in RESTAMPED])
def test_restamped(case: Case):
    """The official case at an older version, through the backend, judged as the runner does."""
    inputs = [x.copy() for x in case.inputs]
    outputs = backend.prepare(case.model).run(inputs)
    Runner.assert_similar_outputs(case.expected, outputs, rtol=case.rtol, atol=case.atol)
    for given, kept in zip(inputs, case.inputs, strict=True):
        np.testing.assert_array_equal(given, kept)  # inputs untouched


def test_restamped_counts():
    counts: dict[str, int] = {}
    for case in RESTAMPED:
        counts[case.label] = counts.get(case.label, 0) + 1
    assert counts == {
        "ReduceSum-1": 10, "ReduceSum-11": 10,
        "ReduceL2-1": 9, "ReduceL2-11": 9, "ReduceL2-13": 9,
        "ReduceLogSumExp-1": 9, "ReduceLogSumExp-11": 9, "ReduceLogSumExp-13": 9,
        "ReduceLogSumExp-18": 18,
        "ReduceSumSquare-1": 9, "ReduceSumSquare-11": 9, "ReduceSumSquare-13": 9,
        "ReduceLogSum-1": 5, "ReduceLogSum-11": 5, "ReduceLogSum-13": 5, "ReduceLogSum-18": 10,
    }
