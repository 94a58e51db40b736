"""The implementations timed side by side. Each runner turns a case into a zero-argument call
(``prepare``, done up front and untimed) which is then bound to the input (``bind``).

A runner that cannot serve a case raises :class:`NotAvailable` with the reason; the table then
shows "n/a" for it.

>>> import numpy as np
>>> from .cases import Case
>>> case = Case("ReduceL2", "inner", "float32", "latency")
>>> call = bind("numpy", prepare("numpy", case, threads=1), np.ones((8, 128), np.float32), case)
>>> call()[0, 0]
np.float32(11.313708)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .. import functions
from . import array_peers
from .array_peers import NotAvailable
from .cases import Case

Call = Callable[[], Any]

#: The op version each onnx model is built at (axes as an int64 initializer in all).
ONNX_VERSIONS: dict[str, int] = {"ReduceSum": 13, "ReduceL2": 18, "ReduceLogSumExp": 18,
                                 "ReduceSumSquare": 18, "ReduceLogSum": 18}
_ONNX_ELEM = {"float32": 1, "float64": 11, "float16": 10, "bfloat16": 16}  # TensorProto values
_ONNX_REDUCE = {
    "ReduceSum": functions.reduce_sum,
    "ReduceL2": functions.reduce_l2,
    "ReduceLogSumExp": functions.reduce_log_sum_exp,
    "ReduceSumSquare": functions.reduce_sum_square,
    "ReduceLogSum": functions.reduce_log_sum,
}


def model_for(case: Case) -> Any:
    """The one-node ONNX model of a case: input X (the case's dtype, any shape), output Y,
    axes as an int64 initializer, keepdims=1."""
    from onnx import helper, numpy_helper

    elem = _ONNX_ELEM[case.dtype]
    version = ONNX_VERSIONS[case.op]
    node = helper.make_node(case.op, ["X", "axes"], ["Y"], keepdims=1)
    graph = helper.make_graph(
        [node],
        f"{case.op}_{case.layout}",
        [helper.make_tensor_value_info("X", elem, [None] * len(case.shape))],
        [helper.make_tensor_value_info("Y", elem, None)],
        initializer=[numpy_helper.from_array(np.array(case.axes, np.int64), "axes")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", version)])
    model.ir_version = 10
    return model


def prepare(runner: str, case: Case, threads: int) -> Any:
    """Untimed setup for ``runner`` on ``case`` (an onnxruntime session, a ReferenceEvaluator);
    raises :class:`NotAvailable`."""
    if runner in ("onnx-reduce", "numpy"):
        return None
    if runner in array_peers.PEERS:
        if not array_peers.installed(runner):
            raise NotAvailable(f"{runner} is not installed")
        return None  # the input's conversion (and jax's compilation) come with it, in bind
    if runner == "onnxruntime":
        try:
            import onnxruntime as ort
        except ImportError as exc:
            raise NotAvailable("onnxruntime is not installed") from exc
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        # Spinning pool threads would steal a core from the runner timed next (interleaving).
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.log_severity_level = 4
        try:
            return ort.InferenceSession(
                model_for(case).SerializeToString(), options, providers=["CPUExecutionProvider"]
            )
        except Exception as exc:
            raise NotAvailable(_short(exc)) from exc
    if runner == "onnx.reference":
        from onnx.reference import ReferenceEvaluator

        try:
            return ReferenceEvaluator(model_for(case))
        except Exception as exc:
            raise NotAvailable(_short(exc)) from exc
    raise ValueError(f"unknown runner {runner!r}")


def bind(runner: str, prepared: Any, x: np.ndarray, case: Case, threads: int = 2) -> Call:
    """The timed call of ``runner`` on input ``x`` (keepdims=1, the case's axes); the
    array peers convert ``x`` (and jax compiles) here, untimed. Raises :class:`NotAvailable`."""
    axes = case.axes
    if runner in array_peers.PEERS:
        return array_peers.bind(array_peers.prepare(runner, case, x, threads))
    if runner == "onnx-reduce":
        fn = _ONNX_REDUCE[case.op]
        axes_list = list(axes)
        return lambda: fn(x, axes_list, True)
    if runner == "numpy":
        return _numpy_call(case.op, x, axes)
    if runner == "onnxruntime":
        feeds = {"X": x}
        return lambda: prepared.run(None, feeds)[0]
    if runner == "onnx.reference":
        feeds = {"X": x}
        return lambda: prepared.run(None, feeds)[0]
    raise ValueError(f"unknown runner {runner!r}")


def _numpy_call(op: str, x: np.ndarray, axes: tuple[int, ...]) -> Call:
    # The textbook formulas (onnx.reference's for Sum, L2, SumSquare, LogSum; LSE without the
    # max shift).
    if op == "ReduceSum":
        return lambda: np.sum(x, axis=axes, keepdims=True)
    if op == "ReduceL2":
        return lambda: np.sqrt(np.sum(np.square(x), axis=axes, keepdims=True))
    if op == "ReduceSumSquare":
        return lambda: np.sum(np.square(x), axis=axes, keepdims=True)
    if op == "ReduceLogSum":
        return lambda: np.log(np.sum(x, axis=axes, keepdims=True))
    return lambda: np.log(np.sum(np.exp(x), axis=axes, keepdims=True))


def _short(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    for marker in ("NOT_IMPLEMENTED : ", "INVALID_ARGUMENT : ", "FAIL : "):
        if marker in text:
            text = text.split(marker, 1)[1]
    if len(text) > 110:
        text = text[:107] + "..."
    return f"{type(exc).__name__}: {text}"


def set_numba_threads(threads: int | None) -> int | None:
    """Set numba's thread count (which starts its threading layer: onnx-reduce's choice first,
    as its users get it); the previous count."""
    if threads is None:
        return None
    try:
        import numba

        from ..kernels.fast._common import num_threads
    except ImportError:  # pragma: no cover - numba is a dependency
        return None
    previous = num_threads()  # chooses the layer first
    numba.set_num_threads(max(1, min(threads, numba.config.NUMBA_NUM_THREADS)))
    return previous
