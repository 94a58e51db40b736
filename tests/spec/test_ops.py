"""The op registry: one complete, consistent record per operator, and every stage finds what
the records name."""

from __future__ import annotations

import importlib

import onnx.defs
import pytest

import onnx_reduce
from onnx_reduce import lowering, onnx_node_tests
from onnx_reduce.kernels import dispatch, gradients, reference
from onnx_reduce.spec import OPS, REGISTRY, VERSIONS, op_record
from onnx_reduce.spec.ops import BY_NAME, by_alias, names_in_words

RECORDS = [pytest.param(record, id=record.name) for record in REGISTRY]


def test_ops_is_the_registry_in_order() -> None:
    assert tuple(record.name for record in REGISTRY) == OPS
    assert list(VERSIONS) == list(OPS)
    assert set(BY_NAME) == set(OPS)


@pytest.mark.parametrize("record", RECORDS)
def test_names_follow_onnx(record) -> None:
    """The ONNX name is a real operator; the function is its snake-case name."""
    assert onnx.defs.has(record.name)
    snake = "".join(f"_{c.lower()}" if c.isupper() else c for c in record.name)
    assert record.function == snake.lstrip("_").replace("l2", "_l2").replace("__", "_")
    assert record.node_test_prefix == f"test_{record.function}"


def test_names_are_unique() -> None:
    for field in ("name", "function", "short"):
        values = [getattr(record, field).lower() for record in REGISTRY]
        assert len(values) == len(set(values)), field
    aliases = [alias for record in REGISTRY for alias in record.aliases]
    assert len(aliases) == len(set(aliases))
    assert all(alias == alias.lower() for alias in aliases)


@pytest.mark.parametrize("record", RECORDS)
def test_every_named_piece_exists(record) -> None:
    assert callable(getattr(reference, record.function))
    assert callable(getattr(onnx_reduce, record.function))
    assert record.function in onnx_reduce.__all__
    assert record.gradient in gradients._WEIGHTS
    assert record.lowering == "primitive" or callable(getattr(lowering._Lowering,
                                                               record.lowering))
    assert record.empty in (0.0, -float("inf"))


@pytest.mark.parametrize("record", RECORDS)
def test_node_tests_module_names_the_official_cases(record) -> None:
    cases = onnx_node_tests.exported_cases(record.name, record.node_tests)
    assert cases
    assert all(case.name.startswith(record.node_test_prefix + "_") for case in cases)


@pytest.mark.parametrize("record", RECORDS)
def test_fast_kernels_are_served_exactly_when_module_and_functions_exist(record) -> None:
    """A missing fast module or function means the reference path, not an error."""
    module_name, kernel, binder = record.fast
    assert module_name.isidentifier()
    assert kernel == record.function
    assert binder.startswith("bind_")
    try:
        module = importlib.import_module(f"onnx_reduce.kernels.fast.{module_name}")
    except ImportError:
        present = False
    else:
        present = hasattr(module, kernel) and hasattr(module, binder)
    assert dispatch.has_fast(record.name) == present


def test_aliases_and_words() -> None:
    assert by_alias()["sum"] == "ReduceSum"
    assert by_alias()["lse"] == by_alias()["logsumexp"] == "ReduceLogSumExp"
    words = names_in_words()
    assert all(name in words for name in OPS)
    assert words.endswith(f" and {OPS[-1]}")


def test_op_record_of_an_unknown_name() -> None:
    with pytest.raises(KeyError):
        op_record("ReduceMax")
