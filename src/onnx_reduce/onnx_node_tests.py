"""The one place that reaches into onnx's private node-test collector.

onnx builds its official node tests with ``export_*`` functions that append to module-private
state of :mod:`onnx.backend.test.case.node` (``_NodeTestCases``, ``_TargetOpType``,
``_existing_names``); its public ``collect_testcases(op_type)`` fills one process-wide list once
(a second call with another op returns the first op's cases). So the exporters of one operator
are run here directly, into a list of our own, with the seeding onnx's collector uses, and the
private state is put back. Should onnx move any of it, :func:`node_tests_module` says so in one
line naming what moved (a test calls it).

>>> [test.name for test in exported_cases("ReduceSum", "reducesum")][:1]
['test_reduce_sum_do_not_keepdims_example']
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

import numpy as np

#: onnx's node-test package and the private names of its collector that we set and restore.
NODE_TESTS_MODULE = "onnx.backend.test.case.node"
PRIVATE_NAMES = ("_NodeTestCases", "_TargetOpType", "_existing_names")


class NodeTestsMoved(RuntimeError):
    """onnx no longer has the node-test collector this module reads."""


def node_tests_module() -> ModuleType:
    """onnx's node-test package, checked to have every name of PRIVATE_NAMES."""
    try:
        module = importlib.import_module(NODE_TESTS_MODULE)
    except ImportError as exc:
        raise NodeTestsMoved(f"{_onnx_version()}: {NODE_TESTS_MODULE} is gone ({exc}); "
                             f"update onnx_reduce/onnx_node_tests.py") from exc
    missing = [name for name in PRIVATE_NAMES if not hasattr(module, name)]
    if missing:
        raise NodeTestsMoved(f"{_onnx_version()}: {NODE_TESTS_MODULE} has no "
                             f"{', '.join(missing)}; update onnx_reduce/onnx_node_tests.py")
    return module


def exporter(op: str, module_name: str) -> type:
    """The class ``op`` of onnx's node-test module ``module_name``, whose ``export*`` static
    methods build the op's cases."""
    package = node_tests_module()
    with np.errstate(all="ignore"):  # a first import runs the exporters once
        module = importlib.import_module(f"{package.__name__}.{module_name}")
    found = getattr(module, op, None)
    if not isinstance(found, type):
        raise NodeTestsMoved(f"{_onnx_version()}: {module.__name__} has no class {op}; "
                             f"update onnx_reduce/onnx_node_tests.py")
    return found


def exported_cases(op: str, module_name: str) -> list[Any]:
    """onnx's node tests of ``op`` (its ``TestCase`` records: name, model, data_sets, rtol,
    atol), built by the exporters of ``module_name``; onnx's collector state and numpy's
    legacy random state are left as they were."""
    package, cls = node_tests_module(), exporter(op, module_name)
    saved = tuple(getattr(package, name) for name in PRIVATE_NAMES)
    random_state = np.random.get_state()  # noqa: NPY002 (onnx's exporters seed the legacy RNG)
    for name, fresh in zip(PRIVATE_NAMES, ([], op, {}), strict=True):
        setattr(package, name, fresh)
    try:
        with np.errstate(all="ignore"):
            for name, member in vars(cls).items():
                if name.startswith("export") and isinstance(member, staticmethod):
                    np.random.seed(0)  # noqa: NPY002 (as onnx's own collector does)
                    getattr(cls, name)()
        return list(package._NodeTestCases)
    finally:
        for name, value in zip(PRIVATE_NAMES, saved, strict=True):
            setattr(package, name, value)
        np.random.set_state(random_state)  # noqa: NPY002


def collector_state() -> tuple[int, Any]:
    """(cases collected so far, target op type) of onnx's own collector."""
    package = node_tests_module()
    return len(package._NodeTestCases), package._TargetOpType


def _onnx_version() -> str:
    try:
        import onnx
    except ImportError:  # pragma: no cover - onnx is a dependency
        return "onnx (not installed)"
    return f"onnx {onnx.__version__}"
