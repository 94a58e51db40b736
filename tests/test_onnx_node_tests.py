"""The adapter to onnx's private node-test collector (onnx_reduce.onnx_node_tests)."""

from __future__ import annotations

import types

import numpy as np
import pytest

from onnx_reduce import onnx_node_tests
from onnx_reduce.spec import REGISTRY


def test_the_installed_onnx_has_the_collector_we_read():
    """Fails, naming what moved, the day onnx moves or renames its private collector."""
    module = onnx_node_tests.node_tests_module()
    for name in onnx_node_tests.PRIVATE_NAMES:
        assert hasattr(module, name)
    for record in REGISTRY:
        assert isinstance(onnx_node_tests.exporter(record.name, record.node_tests), type)


def test_every_op_exports_node_tests_with_models_and_data():
    for record in REGISTRY:
        op = record.name
        cases = onnx_node_tests.exported_cases(op, record.node_tests)
        assert len(cases) >= 10, op
        for case in cases:
            ops = {node.op_type for node in case.model.graph.node}
            assert ops == {op} or case.name.endswith("_expanded"), (case.name, ops)
            _inputs, outputs = case.data_sets[0]
            assert len(outputs) == 1


def test_a_moved_collector_is_one_clear_error(monkeypatch):
    moved = types.ModuleType(onnx_node_tests.NODE_TESTS_MODULE)
    moved._NodeTestCases = []  # the other two names gone
    monkeypatch.setattr(onnx_node_tests.importlib, "import_module", lambda name: moved)
    with pytest.raises(onnx_node_tests.NodeTestsMoved) as info:
        onnx_node_tests.node_tests_module()
    message = str(info.value)
    assert "_TargetOpType, _existing_names" in message
    assert "onnx_node_tests.py" in message
    assert "\n" not in message


def test_a_missing_exporter_class_is_one_clear_error():
    with pytest.raises(onnx_node_tests.NodeTestsMoved, match="has no class ReduceNothing"):
        onnx_node_tests.exporter("ReduceNothing", "reducesum")


def test_exporting_restores_onnx_and_numpy_state():
    before = onnx_node_tests.collector_state()
    state = np.random.get_state()[1].copy()  # noqa: NPY002 (the legacy RNG onnx seeds)
    onnx_node_tests.exported_cases("ReduceL2", "reducel2")
    assert onnx_node_tests.collector_state() == before
    np.testing.assert_array_equal(np.random.get_state()[1], state)  # noqa: NPY002
