"""The peers onnx-reduce is compared with: which are installed, and running a model on one.

>>> available("onnx.reference")
True
>>> normalize_runner("ort")
'onnxruntime'
"""

from __future__ import annotations

import importlib.util
import os
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from .errors import UserError

PEERS = ("onnxruntime", "onnx.reference")
_ALIASES = {"ort": "onnxruntime", "reference": "onnx.reference", "onnx-reference": "onnx.reference"}
_PACKAGE = {"onnxruntime": "onnxruntime", "onnx.reference": "onnx.reference"}


def normalize_runner(name: str) -> str:
    """``onnxruntime``/``ort`` or ``onnx.reference``/``reference``; anything else is an error."""
    key = name.strip().lower()
    key = _ALIASES.get(key, key)
    if key not in PEERS:
        raise UserError(f"unknown peer {name!r}; choose from {', '.join(PEERS)} (or all)")
    return key


def peers_from(names: list[str]) -> list[str]:
    """The peers named on the command line, in table order; ``all`` means both."""
    wanted = {p for n in names for p in (PEERS if n.lower() == "all" else [normalize_runner(n)])}
    return [p for p in PEERS if p in wanted]


def has_module(name: str) -> bool:
    """True when ``name`` can be imported (without importing it)."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def available(runner: str) -> bool:
    """True when the runner's package is installed (onnx-reduce itself always is)."""
    return runner == "onnx-reduce" or has_module(_PACKAGE[runner])


@contextmanager
def quiet(native: bool = True) -> Iterator[None]:
    """Silence the peers' own chatter while they run (their results are what the tables show):
    Python warnings and, with ``native``, what native code writes to file descriptor 2
    (onnxruntime logs every failed run there, whatever its session's log level)."""
    if available("onnxruntime"):
        import onnxruntime

        onnxruntime.set_default_logger_severity(4)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        if not native:
            yield
            return
        with _native_stderr_silenced():
            yield


@contextmanager
def _native_stderr_silenced() -> Iterator[None]:
    try:
        saved = os.dup(2)
    except OSError:  # no file descriptor 2 at all
        yield
        return
    sys.stderr.flush()
    try:
        with open(os.devnull, "wb") as devnull:
            os.dup2(devnull.fileno(), 2)
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def run_model(runner: str, model: Any, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """Run an ONNX model on ``runner`` ("onnx-reduce", "onnxruntime" or "onnx.reference")."""
    if runner == "onnx-reduce":
        from .. import backend

        return list(backend.prepare(model).run(feeds))
    if runner == "onnxruntime":
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.log_severity_level = 4
        session = onnxruntime.InferenceSession(
            model.SerializeToString(), options, providers=["CPUExecutionProvider"]
        )
        return list(session.run(None, feeds))
    from onnx.reference import ReferenceEvaluator

    return list(ReferenceEvaluator(model).run(None, feeds))


def short_error(error: BaseException, width: int = 110) -> str:
    """An exception as one short line, without onnxruntime's boilerplate.

    >>> short_error(RuntimeError("[ONNXRuntimeError] : 9 : NOT_IMPLEMENTED : no kernel"))
    'RuntimeError: no kernel'
    """
    text = " ".join(str(error).split())
    for marker in ("NOT_IMPLEMENTED : ", "INVALID_ARGUMENT : ", "INVALID_GRAPH : ", "FAIL : "):
        text = text.split(marker, 1)[-1]
    text = f"{type(error).__name__}: {text}"
    return text if len(text) <= width else text[: width - 1] + "…"
