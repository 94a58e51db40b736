"""The conformance collection: ONNX's own node tests, the same at every older version, and ours.

Three sources, each a list of :class:`Case` (a single-node or function-body model with inputs
and expected outputs):

* ``"onnx"`` — the official node tests of the registry's operators, built in memory by the very
  ``expect(...)`` code of :mod:`onnx.backend.test.case.node` (stamped with each op's newest opset);
* ``"restamped"`` — the same cases at every older version in scope (axes moved to the attribute
  where the version wants it; ``noop_with_empty_axes`` cases only where the version has it;
  function-body models only where the body exists, opset >= 18);
* ``"onnx-reduce"`` — our edge cases (rank 0, empty sets, infinities, NaN, overflow, integer wrap,
  exact integer L2, bfloat16) with expected values from exact arithmetic (``fractions``,
  ``decimal`` at 60 digits, ``math.isqrt``), and error cases.

:func:`run_case` runs one case through ``"onnx-reduce"``, ``"onnxruntime"`` or ``"onnx.reference"``.
Nothing is built at import time; the collection is built on first use and cached.

>>> cases = collect_cases()
>>> sorted({c.source for c in cases})
['onnx', 'onnx-reduce', 'restamped']
>>> case = next(c for c in cases if c.name == "test_reduce_l2_edge_overflow_float32_ver13")
>>> case.expected[0]
array([5.e+30], dtype=float32)
>>> run_case(case, "onnx-reduce").status
'pass'
"""

from __future__ import annotations

import copy
import dataclasses
import decimal
import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
import onnx
from onnx import helper as oh

from . import onnx_node_tests
from .spec import OPS, REGISTRY, VERSIONS, OpVersion, bfloat16, onnx_type_name, resolve

RUNNERS = ("onnx-reduce", "onnxruntime", "onnx.reference")
SOURCES = ("onnx", "restamped", "onnx-reduce")
STATUSES = ("pass", "fail", "error", "unsupported")


@dataclass
class Case:
    """One conformance case: a model, its inputs, and what it must produce (or raise)."""

    name: str
    op: str
    version: int
    """The operator's since-version in force in the model."""
    opset: int
    """The model's default-domain opset import."""
    source: str
    """``"onnx"``, ``"restamped"`` or ``"onnx-reduce"``."""
    model: onnx.ModelProto
    inputs: list[np.ndarray]
    expected: list[np.ndarray]
    rtol: float
    atol: float
    expect_error: type[Exception] | None = None
    """For error cases: the exception onnx-reduce must raise (other runners: any exception)."""

    @property
    def label(self) -> str:
        """``"ReduceSum-13"``: the operator version the case exercises."""
        return f"{self.op}-{self.version}"


@dataclass
class CaseResult:
    """The outcome of one case on one runner."""

    status: str
    """``"pass"``, ``"fail"`` (wrong answer), ``"error"`` (raised unexpectedly) or
    ``"unsupported"`` (the runner refuses the model: opset, dtype or kernel not available)."""
    detail: str = ""


def collect_cases(include_expanded: bool = True) -> list[Case]:
    """All conformance cases (official, re-stamped, ours); ``include_expanded=False`` drops the
    ``_expanded`` function-body models.

    >>> len([c for c in collect_cases() if c.source == "onnx"])
    76
    """
    cases = _all_cases()
    if not include_expanded:
        cases = tuple(c for c in cases if not _is_expanded(c))
    return list(cases)


def run_case(case: Case, runner: str) -> CaseResult:
    """Run ``case`` on ``runner`` (one of :data:`RUNNERS`) and judge the outcome.

    Values compare with ``allclose(rtol, atol)`` (NaN equals NaN; integers exactly) after an exact
    dtype and shape check. For an error case, *pass* means the runner raised (onnx-reduce: the
    declared exception type, with a message naming the operator version).
    """
    if runner not in RUNNERS:
        raise ValueError(f"unknown runner {runner!r}; choose one of {', '.join(RUNNERS)}")
    prepare: Callable[[Case], Callable[[], Sequence[Any]]] = _PREPARERS[runner]
    given = [np.array(x, copy=True) for x in case.inputs]  # the cached case stays pristine
    try:
        execute = prepare(dataclasses.replace(case, inputs=given))
    except _Unsupported as exc:
        return CaseResult("unsupported", str(exc))
    except Exception as exc:
        return _raised(case, runner, exc, at="prepare")
    try:
        outputs = execute()
    except _Unsupported as exc:
        return CaseResult("unsupported", str(exc))
    except Exception as exc:
        return _raised(case, runner, exc, at="run")
    if any(g.tobytes() != x.tobytes() for g, x in zip(given, case.inputs, strict=True)):
        return CaseResult("fail", "the runner modified its input arrays")
    if case.expect_error is not None:
        return CaseResult(
            "fail", f"expected {case.expect_error.__name__}, got outputs {_brief(outputs)}"
        )
    problem = compare_outputs(case.expected, outputs, case.rtol, case.atol)
    return CaseResult("fail", problem) if problem else CaseResult("pass")


def compare_outputs(
    expected: Sequence[np.ndarray], actual: Sequence[Any], rtol: float, atol: float
) -> str | None:
    """None when ``actual`` matches ``expected``, else a one-line description of the mismatch.

    >>> compare_outputs([np.array([np.nan, 1.0])], [np.array([np.nan, 1.0])], 0.0, 0.0) is None
    True
    >>> compare_outputs([np.array([1.0])], [np.array([1.0], dtype=np.float32)], 0.0, 0.0)
    'output 0: dtype float32, expected float64'
    """
    if len(actual) != len(expected):
        return f"{len(actual)} outputs, expected {len(expected)}"
    for i, (want, got) in enumerate(zip(expected, actual, strict=False)):
        got = np.asarray(got)
        if got.dtype != want.dtype:
            return f"output {i}: dtype {got.dtype}, expected {want.dtype}"
        if got.shape != want.shape:
            return f"output {i}: shape {got.shape}, expected {want.shape}"
        if want.dtype.kind in "iub":
            bad = got != want
        else:
            w, g = want.astype(np.float64), got.astype(np.float64)
            bad = ~np.isclose(g, w, rtol=rtol, atol=atol, equal_nan=True)
            # isclose treats inf == inf but also lets a finite value equal inf when rtol is
            # large; demand the same infinities exactly.
            bad |= np.isinf(w) != np.isinf(g)
        if np.any(bad):
            at = tuple(int(j) for j in np.argwhere(bad)[0]) if bad.ndim else ()
            n = int(np.count_nonzero(bad))
            return (
                f"output {i}: {n} of {want.size} values differ (rtol={rtol}, atol={atol}); "
                f"first at {list(at)}: got {got[at]!r}, expected {want[at]!r}"
            )
    return None


# ---------------------------------------------------------------------------------------------
# Runners


class _Unsupported(Exception):
    """The runner cannot run this model at all (not a wrong answer)."""


def _prepare_onnx_reduce(case: Case) -> Callable[[], Sequence[Any]]:
    from .backend import prepare

    rep = prepare(case.model)
    return lambda: rep.run(list(case.inputs))


def _prepare_onnxruntime(case: Case) -> Callable[[], Sequence[Any]]:
    try:
        import onnxruntime as ort
    except ImportError as exc:
        raise _Unsupported(f"onnxruntime is not installed ({exc})") from None
    options = ort.SessionOptions()
    options.log_severity_level = 4  # outcomes are reported by status, not by log lines
    try:
        session = ort.InferenceSession(
            case.model.SerializeToString(), options, providers=["CPUExecutionProvider"]
        )
    except Exception as exc:
        message = _first_line(exc)
        if case.expect_error is not None and not _ort_cannot(exc):
            raise  # a genuine rejection of an invalid model: the error case passes
        raise _Unsupported(f"onnxruntime refuses the model: {message}") from None
    feeds = _feeds(case)
    if any(v.dtype == bfloat16 for v in feeds.values()):
        raise _Unsupported("onnxruntime's Python API takes no bfloat16 arrays")
    return lambda: session.run(None, feeds)


def _ort_cannot(exc: Exception) -> bool:
    """True when onnxruntime refuses for want of support (opset, kernel), not for invalidity."""
    kind = type(exc).__name__
    text = str(exc)
    return kind == "NotImplemented" or "Unsupported" in text or "under development" in text


def _prepare_reference(case: Case) -> Callable[[], Sequence[Any]]:
    from onnx.reference import ReferenceEvaluator

    evaluator = ReferenceEvaluator(case.model)
    feeds = _feeds(case)

    def execute() -> Sequence[Any]:
        with np.errstate(all="ignore"):  # its overflow/invalid warnings are judged as results
            return evaluator.run(None, feeds)

    return execute


_PREPARERS: dict[str, Callable[[Case], Callable[[], Sequence[Any]]]] = {
    "onnx-reduce": _prepare_onnx_reduce,
    "onnxruntime": _prepare_onnxruntime,
    "onnx.reference": _prepare_reference,
}


def _feeds(case: Case) -> dict[str, np.ndarray]:
    initializers = {i.name for i in case.model.graph.initializer}
    names = [i.name for i in case.model.graph.input if i.name not in initializers]
    return dict(zip(names, case.inputs, strict=False))


def _raised(case: Case, runner: str, exc: Exception, at: str) -> CaseResult:
    message = f"{type(exc).__name__} at {at}: {_first_line(exc)}"
    if case.expect_error is None:
        return CaseResult("error", message)
    if runner != "onnx-reduce":
        return CaseResult("pass", message)
    if not isinstance(exc, case.expect_error):
        return CaseResult("fail", f"expected {case.expect_error.__name__}, got {message}")
    if case.label not in str(exc):
        return CaseResult("fail", f"the message does not name {case.label}: {message}")
    return CaseResult("pass", message)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else type(exc).__name__


def _brief(outputs: Sequence[Any]) -> str:
    return ", ".join(f"{np.asarray(o).dtype}{list(np.shape(o))}" for o in outputs)


# ---------------------------------------------------------------------------------------------
# The collection


@functools.lru_cache(maxsize=1)
def _all_cases() -> tuple[Case, ...]:
    official = _official_cases()
    return (*official, *_restamped_cases(official), *_edge_cases())


def _is_expanded(case: Case) -> bool:
    return "_expanded" in case.name


def _official_cases() -> list[Case]:
    """ONNX's node tests of the registry's operators, built in memory by their own ``export_*`` code
    (:func:`onnx_node_tests.exported_cases`)."""
    found = [(record.name, test) for record in REGISTRY
             for test in onnx_node_tests.exported_cases(record.name, record.node_tests)]
    cases = []
    for op, test in found:
        opset = _opset_of(test.model)
        inputs, outputs = test.data_sets[0]
        cases.append(Case(
            name=test.name, op=op, version=resolve(op, opset).version, opset=opset,
            source="onnx", model=test.model,
            inputs=[np.asarray(x) for x in inputs], expected=[np.asarray(y) for y in outputs],
            rtol=float(test.rtol), atol=float(test.atol),
        ))
    return cases


def _opset_of(model: onnx.ModelProto) -> int:
    return next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))


def _restamped_cases(official: list[Case]) -> list[Case]:
    """Each official case at every older version of its operator."""
    cases = []
    for case in official:
        newest = case.version
        for ver in VERSIONS[case.op].values():
            if ver.version >= newest:
                continue
            restamped = _restamp(case, ver)
            if restamped is not None:
                cases.append(restamped)
    return cases


def _restamp(case: Case, ver: OpVersion) -> Case | None:
    name = f"{case.name}_ver{ver.version}"
    if _is_expanded(case):
        if ver.version < 18:  # the function body exists from opset 18 on
            return None
        model = copy.deepcopy(case.model)
        _set_opset(model, ver.version)
        model.ir_version = oh.find_min_ir_version_for(list(model.opset_import))
        return _derived(case, name, ver, model, list(case.inputs))
    node = case.model.graph.node[0]
    attributes = {a.name: oh.get_attribute_value(a) for a in node.attribute}
    inputs = list(case.inputs)
    if attributes.get("noop_with_empty_axes") and not ver.axes_is_input:
        return None  # the version has no noop_with_empty_axes
    new_node = copy.deepcopy(node)
    graph_inputs = list(case.model.graph.input)
    if not ver.axes_is_input and len(node.input) > 1 and node.input[1]:
        axes = [int(a) for a in inputs.pop(1)]
        graph_inputs = [i for i in graph_inputs if i.name != node.input[1]]
        del new_node.input[1:]
        del new_node.attribute[:]
        kept = {k: v for k, v in attributes.items() if k != "noop_with_empty_axes"}
        if axes:  # an empty axes input without noop means "all axes": no attribute at all
            kept["axes"] = axes
        new_node.attribute.extend(oh.make_attribute(k, v) for k, v in sorted(kept.items()))
    graph = oh.make_graph(
        [new_node], case.model.graph.name, graph_inputs, list(case.model.graph.output)
    )
    model = oh.make_model_gen_version(
        graph, producer_name="onnx-reduce", opset_imports=[oh.make_opsetid("", ver.version)]
    )
    return _derived(case, name, ver, model, inputs)


def _set_opset(model: onnx.ModelProto, opset: int) -> None:
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx"):
            o.version = opset


def _derived(case: Case, name: str, ver: OpVersion, model: onnx.ModelProto, inputs) -> Case:
    return Case(
        name=name, op=case.op, version=ver.version, opset=ver.version, source="restamped",
        model=model, inputs=inputs, expected=list(case.expected),
        rtol=case.rtol, atol=case.atol,
    )


# ---------------------------------------------------------------------------------------------
# Our edge cases


#: Tolerances for exactly computed expectations: a few units in the last place of the dtype
#: (the contract is <= 1 ulp for narrow floats, <= 2 ulp for float64).
_RTOL = {"float16": 2e-3, "bfloat16": 1.6e-2, "float": 3e-7, "double": 1e-15}


@dataclass(frozen=True)
class _Edge:
    label: str
    op: str
    data: np.ndarray
    axes: tuple[int, ...] | None = None
    keepdims: int = 1
    noop: int | None = None
    versions: tuple[int, ...] | None = None
    """None: every version whose dtypes (and attributes) admit the case."""
    error: type[Exception] | None = None


def _edges() -> list[_Edge]:
    """Every edge case: those every op has, then each op's own."""
    return [edge for op in OPS for edge in _shared_edges(op)] + _op_edges()


def _shared_edges(op: str) -> list[_Edge]:
    """The edge cases of every op: ranks, empty sets, special values, dtypes, no-ops, errors."""
    f16, f32, f64, bf16 = np.float16, np.float32, np.float64, bfloat16
    inf, nan = np.inf, np.nan
    a = np.array
    return [
        _Edge("rank0_float32", op, a(-2.5, dtype=f32)),
        _Edge("rank0_keepdims0_float64", op, a(1.25, dtype=f64), keepdims=0),
        _Edge("empty_set_float32", op, np.zeros((2, 0, 3), f32), axes=(1,)),
        _Edge("empty_all_float64", op, np.zeros((0, 3), f64), keepdims=0),
        _Edge("empty_kept_axis_float32", op, np.zeros((0, 3), f32), axes=(1,)),
        _Edge("multi_axes_keepdims0_float64", op,
              np.linspace(-3, 3, 24).reshape(2, 3, 4), axes=(0, -1), keepdims=0),
        _Edge("nan_float32", op, a([[1.0, nan], [2.0, 3.0]], f32), axes=(1,)),
        _Edge("nan_and_inf_float64", op, a([nan, inf, -inf, 1.0]), keepdims=0),
        _Edge("plus_inf_float32", op, a([[inf, 1.0], [inf, inf]], f32), axes=(1,)),
        _Edge("minus_inf_float64", op, a([[-inf, -inf], [-inf, 0.5]]), axes=(1,)),
        _Edge("bfloat16", op, a([[1.0, 2.0], [3.0, 4.0]], bf16), axes=(1,)),
        _Edge("float16", op, a([[0.5, 1.5, -2.0], [3.0, 0.25, 8.0]], f16), axes=(0,)),
        _Edge("noop_empty_axes_float32", op, a([[-1.5, 2.0], [0.0, -3.0]], f32),
              axes=(), noop=1),
        _Edge("noop_no_axes_float64", op, a([-1.5, 2.0, 0.0]), noop=1),
        _Edge("int32", op, a([[1, -2, 3], [4, 5, -6]], np.int32), axes=(1,)),
        _Edge("uint64", op, a([[1, 2], [3, 4]], np.uint64), axes=(0,)),
        # errors
        _Edge("error_int8", op, a([1, 2], np.int8), error=TypeError),
        _Edge("error_bfloat16_before_13", op, a([1.0, 2.0], bf16), versions=(1, 11),
              error=TypeError),
        _Edge("error_axis_out_of_range", op, np.ones((2, 3), f32), axes=(2,),
              error=ValueError),
        _Edge("error_negative_axis_out_of_range", op, np.ones((2, 3), f32), axes=(-3,),
              error=ValueError),
        _Edge("error_duplicate_axes", op, np.ones((2, 3), f32), axes=(1, -1),
              error=ValueError),
        _Edge("error_axis_on_rank0", op, a(1.0, f32), axes=(0,), error=ValueError),
    ]


def _op_edges() -> list[_Edge]:
    """Each op's own edge cases: rounding, overflow, underflow, integer rules."""
    f16, f32 = np.float16, np.float32
    inf = np.inf
    a = np.array
    return [
        # ReduceSum: single rounding, cancellation, overflow, integer wrap-around
        _Edge("cancellation_float32", "ReduceSum", a([1e8, 1.0, -1e8], f32)),
        _Edge("single_rounding_float16", "ReduceSum", a([2048.0, 1.0, 1.0], f16)),
        _Edge("overflow_float16", "ReduceSum", a([60000.0, 60000.0], f16)),
        _Edge("overflow_float32", "ReduceSum", a([3e38, 3e38], f32)),
        _Edge("no_overflow_float32", "ReduceSum", a([3e38, 3e38, -3e38], f32)),
        _Edge("inf_minus_inf_float32", "ReduceSum", a([inf, -inf], f32)),
        _Edge("wrap_int32", "ReduceSum", a([2**31 - 1, 1], np.int32)),
        _Edge("wrap_uint32", "ReduceSum", a([2**32 - 1, 2], np.uint32)),
        _Edge("wrap_int64", "ReduceSum", a([2**63 - 1, 1], np.int64)),
        _Edge("wrap_uint64", "ReduceSum", a([2**64 - 1, 2**64 - 1], np.uint64)),
        _Edge("exact_int64", "ReduceSum", a([2**62, 2**62 - 1, -(2**62)], np.int64)),
        # ReduceL2: no intermediate overflow or underflow, exact integers
        _Edge("overflow_float32", "ReduceL2", a([3e30, 4e30], f32)),
        _Edge("overflow_float64", "ReduceL2", a([3e200, 4e200])),
        _Edge("underflow_float64", "ReduceL2", a([3e-200, 4e-200])),
        _Edge("underflow_float32", "ReduceL2", a([3e-30, 4e-30], f32)),
        _Edge("overflow_float16", "ReduceL2", a([300.0, 400.0], f16)),
        _Edge("true_overflow_float32", "ReduceL2", a([3e38, 3e38], f32)),
        _Edge("exact_int32", "ReduceL2", a([3, 4], np.int32)),
        _Edge("exact_square_overflow_int32", "ReduceL2", a([50000, 50000], np.int32)),
        _Edge("exact_int64", "ReduceL2", a([2**31, 2**31, 7], np.int64)),
        _Edge("exact_uint64", "ReduceL2", a([2**40, 2**40], np.uint64)),
        _Edge("floor_uint32", "ReduceL2", a([1, 1, 1], np.uint32)),
        # ReduceLogSumExp: no overflow/underflow for finite input, integer truncation
        _Edge("overflow_float64", "ReduceLogSumExp", a([800.0, 800.0])),
        _Edge("underflow_float64", "ReduceLogSumExp", a([-800.0, -800.0])),
        _Edge("overflow_float32", "ReduceLogSumExp", a([100.0, 100.0], f32)),
        _Edge("overflow_float16", "ReduceLogSumExp", a([12.0, 12.0], f16)),
        _Edge("wide_range_float64", "ReduceLogSumExp", a([1000.0, 0.0, -1000.0])),
        _Edge("int_truncation_int32", "ReduceLogSumExp", a([1, 2], np.int32),
              versions=(1, 11, 13, 18)),
        _Edge("int_truncation_negative_int64", "ReduceLogSumExp", a([-5, -5], np.int64),
              versions=(1, 11, 13, 18)),
        _Edge("error_int_at_28", "ReduceLogSumExp", a([1, 2], np.int32), versions=(28,),
              error=TypeError),
        # (an empty integer LSE is "undefined" by the spec; onnx-reduce raises ValueError, but
        # that is our choice, not a conformance requirement, so it is not a case here)
        # ReduceSumSquare: squares in a wider type, integer wrap-around
        _Edge("tiny_squares_float32", "ReduceSumSquare", a([1e-20, 2e-20], f32)),
        _Edge("true_overflow_float32", "ReduceSumSquare", a([2e19, 2e19], f32)),
        _Edge("subnormal_float64", "ReduceSumSquare", a([3e-162, 4e-162])),
        _Edge("inexact_squares_float64", "ReduceSumSquare", a([0.1, 0.2, 0.3])),
        _Edge("wrap_int32", "ReduceSumSquare", a([50000, 50000], np.int32)),
        _Edge("wrap_uint64", "ReduceSumSquare", a([2**32, 1], np.uint64)),
        # ReduceLogSum: sums near 1 and cancelling, log of 0 and of a negative sum, integers
        _Edge("near_one_float32", "ReduceLogSum", a([0.75, 0.25000003], f32)),
        _Edge("cancellation_float64", "ReduceLogSum", a([1e16, 1.0, -1e16])),
        _Edge("zero_sum_float32", "ReduceLogSum", a([1.0, -1.0], f32)),
        _Edge("negative_sum_float64", "ReduceLogSum", a([1.0, -2.0])),
        _Edge("int_floor_int32", "ReduceLogSum", a([2, 5], np.int32), versions=(1, 11, 13, 18)),
        _Edge("int_exact_sum_int64", "ReduceLogSum", a([2**62, 2**62], np.int64),
              versions=(1, 11, 13, 18)),
        _Edge("error_int_at_28", "ReduceLogSum", a([1, 2], np.int32), versions=(28,),
              error=TypeError),
    ]


def _edge_cases() -> list[Case]:
    cases = []
    for edge in _edges():
        for ver in VERSIONS[edge.op].values():
            if not _admits(edge, ver):
                continue
            cases.append(_edge_case(edge, ver))
    return cases


def _admits(edge: _Edge, ver: OpVersion) -> bool:
    if edge.versions is not None:
        return ver.version in edge.versions
    if edge.error is not None:
        return True
    if onnx_type_name(edge.data.dtype) not in ver.dtypes:
        return False
    # noop_with_empty_axes and an explicitly empty axes list exist only with the axes input
    return ver.axes_is_input or (edge.noop is None and edge.axes != ())


def _edge_case(edge: _Edge, ver: OpVersion) -> Case:
    attributes: dict[str, Any] = {"keepdims": edge.keepdims}
    inputs = [edge.data]
    names = ["data"]
    graph_inputs = [_value_info("data", edge.data.dtype, edge.data.shape)]
    if edge.noop is not None:
        attributes["noop_with_empty_axes"] = edge.noop
    if edge.axes is not None:
        if ver.axes_is_input:
            axes = np.array(edge.axes, dtype=np.int64)
            inputs.append(axes)
            names.append("axes")
            graph_inputs.append(_value_info("axes", axes.dtype, axes.shape))
        else:
            attributes["axes"] = list(edge.axes)
    if edge.error is None:
        expected = [expected_output(ver.op, edge.data, edge.axes, bool(edge.keepdims),
                                    bool(edge.noop))]
        out_shape: tuple[int, ...] | None = expected[0].shape
    else:
        expected, out_shape = [], None
    node = oh.make_node(ver.op, names, ["reduced"], **attributes)
    graph = oh.make_graph(
        [node], f"{ver.record.function}_{edge.label}", graph_inputs,
        [_value_info("reduced", edge.data.dtype, out_shape)],
    )
    model = oh.make_model_gen_version(
        graph, producer_name="onnx-reduce", opset_imports=[oh.make_opsetid("", ver.version)]
    )
    dtype_name = onnx_type_name(edge.data.dtype)
    return Case(
        name=f"{ver.record.node_test_prefix}_edge_{edge.label}_ver{ver.version}",
        op=ver.op, version=ver.version, opset=ver.version, source="onnx-reduce", model=model,
        inputs=inputs, expected=expected, rtol=_RTOL.get(dtype_name, 0.0), atol=0.0,
        expect_error=edge.error,
    )


def _value_info(name: str, dtype: np.dtype, shape: tuple[int, ...] | None):
    elem = oh.np_dtype_to_tensor_dtype(np.dtype(dtype))
    return oh.make_tensor_value_info(name, elem, None if shape is None else list(shape))


# ---------------------------------------------------------------------------------------------
# Exact expectations


def expected_output(
    op: str,
    data: np.ndarray,
    axes: Sequence[int] | None,
    keepdims: bool = True,
    noop: bool = False,
) -> np.ndarray:
    """The exactly computed result of ``op`` on ``data``, rounded once to the data's dtype.

    Sums and sums of squares are exact (``fractions``), ReduceL2, ReduceLogSumExp and
    ReduceLogSum are computed with ``decimal`` at 60 significant digits, integer L2 with
    ``math.isqrt``; integer sums wrap like numpy, integer LSE and LogSum truncate toward zero.
    IEEE rules for NaN and infinities; the empty sum is 0 (ReduceLogSumExp, ReduceLogSum: -inf).

    >>> expected_output("ReduceLogSumExp", np.array([800.0, 800.0]), None, keepdims=False)
    array(800.69314718)
    >>> expected_output("ReduceSum", np.array([2**31 - 1, 1], dtype=np.int32), [0])
    array([-2147483648], dtype=int32)
    """
    rank = data.ndim
    if noop and not axes:
        reduced: tuple[int, ...] = ()
    elif not axes:
        reduced = tuple(range(rank))
    else:
        reduced = tuple(sorted(a % rank for a in axes)) if rank else ()
    kept = tuple(d for d in range(rank) if d not in reduced)
    moved = np.transpose(data, kept + reduced)
    kept_shape = tuple(data.shape[d] for d in kept)
    flat = moved.reshape(math.prod(kept_shape), math.prod(data.shape[d] for d in reduced))
    values = [_exact(op, data.dtype, [v.item() for v in row]) for row in flat]
    result = _to_dtype(values, data.dtype).reshape(kept_shape)
    if keepdims:
        result = result.reshape(tuple(1 if d in reduced else data.shape[d] for d in range(rank)))
    return result


def _exact(op: str, dtype: np.dtype, values: list) -> Any:
    if np.dtype(dtype).kind in "iu":
        ints = [int(v) for v in values]
        if op == "ReduceSum":
            return sum(ints)
        if op in ("ReduceL2", "ReduceSumSquare"):
            squares = sum(v * v for v in ints)
            return squares if op == "ReduceSumSquare" else math.isqrt(squares)
        if op == "ReduceLogSum":
            return math.floor(_ln_decimal(Fraction(sum(ints))))
        if not ints:
            raise ValueError("integer ReduceLogSumExp of an empty set is undefined")
        return math.trunc(_lse_decimal([float(v) for v in ints]))
    floats = [float(v) for v in values]
    if any(math.isnan(v) for v in floats):
        return math.nan
    if op == "ReduceSumSquare":
        if any(math.isinf(v) for v in floats):
            return math.inf
        return float(sum((Fraction(v) ** 2 for v in floats), Fraction(0)))
    if op == "ReduceLogSum":
        if math.inf in floats:
            return math.nan if -math.inf in floats else math.inf
        if -math.inf in floats:
            return math.nan
        return _ln_decimal(sum((Fraction(v) for v in floats), Fraction(0)))
    if op == "ReduceSum":
        if math.inf in floats and -math.inf in floats:
            return math.nan
        if math.inf in floats or -math.inf in floats:
            return math.inf if math.inf in floats else -math.inf
        return float(sum((Fraction(v) for v in floats), Fraction(0)))
    if op == "ReduceL2":
        if any(math.isinf(v) for v in floats):
            return math.inf
        with decimal.localcontext(_DECIMAL):
            return float(sum((decimal.Decimal(v) ** 2 for v in floats), decimal.Decimal(0)).sqrt())
    return _lse_decimal(floats)


_DECIMAL = decimal.Context(prec=60, Emax=10**6, Emin=-(10**6))


def _lse_decimal(floats: list[float]) -> float:
    if math.inf in floats:
        return math.inf
    finite = [v for v in floats if v != -math.inf]
    if not finite:
        return -math.inf
    with decimal.localcontext(_DECIMAL):
        total = sum((decimal.Decimal(v).exp() for v in finite), decimal.Decimal(0))
        return float(total.ln())


def _ln_decimal(total: Fraction) -> float:
    """log of an exact sum (-inf for 0, NaN below)."""
    if total <= 0:
        return -math.inf if total == 0 else math.nan
    with decimal.localcontext(_DECIMAL):
        exact = decimal.Decimal(total.numerator) / decimal.Decimal(total.denominator)
        return float(exact.ln())


def _to_dtype(values: list, dtype: np.dtype) -> np.ndarray:
    dtype = np.dtype(dtype)
    if dtype.kind in "iu":
        bits = dtype.itemsize * 8
        wrapped = []
        for v in values:
            v %= 2**bits
            if dtype.kind == "i" and v >= 2 ** (bits - 1):
                v -= 2**bits
            wrapped.append(v)
        return np.array(wrapped, dtype=dtype)
    with np.errstate(over="ignore"):
        return np.array(values, dtype=np.float64).astype(dtype)
