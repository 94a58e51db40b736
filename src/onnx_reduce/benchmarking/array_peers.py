"""The array-library peers: torch (eager, CPU), jax (jit, CPU) and scipy's logsumexp.

Each peer's :func:`prepare` does everything untimed that a user would do once: import the
library, set its threads, convert the input (``torch.from_numpy``, zero copy;
``jax.device_put``) and, for jax, compile the case's function (``jax.jit``, lowered and
compiled for the input's shape and dtype). :func:`bind` gives the timed call: the reduction
alone (jax: up to ``block_until_ready``), keepdims as ONNX's keepdims=1.

* torch: ``torch.sum``, ``torch.linalg.vector_norm``, ``torch.logsumexp`` with ``dim`` and
  ``keepdim``; ``torch.set_num_threads(threads)``. Its OpenMP pool waits passively
  (``OMP_WAIT_POLICY=PASSIVE``, set before torch is imported unless the environment says
  otherwise), as onnxruntime's pool runs with spinning off: spinning threads hold a core the
  next runner needs (docs/benchmark-method.md has the measurement).
* jax: ``jnp.sum``, ``jnp.sqrt(jnp.sum(x * x))``, ``jax.nn.logsumexp``; float64 needs
  ``jax_enable_x64``, which :func:`prepare` turns on (jax would otherwise compute float64 input
  as float32). XLA sizes its CPU pool to the machine's cores.
* scipy: ``scipy.special.logsumexp`` (ReduceLogSumExp only; a dtype it refuses is n/a).

>>> import numpy as np
>>> from .cases import Case
>>> case = Case("ReduceLogSumExp", "inner", "float64", "latency")
>>> x = np.zeros((8, 128))
>>> call = bind(prepare("scipy", case, x, threads=1))
>>> float(to_numpy(call())[0, 0]) == float(np.log(128))
True
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from .cases import Case

PEERS: tuple[str, ...] = ("torch", "jax", "scipy")


class NotAvailable(Exception):
    """A runner does not serve this case (the message says why)."""


def installed(peer: str) -> bool:
    """True when the peer's library can be imported (checked without importing it)."""
    module = "scipy.special" if peer == "scipy" else peer
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def prepare(peer: str, case: Case, x: np.ndarray, threads: int) -> Any:
    """The untimed setup of ``peer`` for ``case`` on input ``x``: the converted input and the
    function to call on it. Raises :class:`NotAvailable`."""
    if not installed(peer):
        raise NotAvailable(f"{peer} is not installed")
    if peer == "scipy":
        if case.op != "ReduceLogSumExp":
            raise NotAvailable("scipy: ReduceLogSumExp only (scipy.special.logsumexp)")
        from scipy.special import logsumexp

        _scipy_takes(logsumexp, x.dtype)
        return x, lambda a: logsumexp(a, axis=case.axes, keepdims=True)
    if peer == "torch":
        return _torch_setup(case, x, threads)
    if peer == "jax":
        return _jax_setup(case, x)
    raise ValueError(f"unknown peer {peer!r}")


def _scipy_takes(logsumexp: Callable[..., Any], dtype: np.dtype) -> None:
    """:class:`NotAvailable` where ``logsumexp`` refuses ``dtype`` (scipy's array-API dispatch
    asks ``np.isdtype``, which raises for ml_dtypes' bfloat16 from ml_dtypes 0.7 on)."""
    try:
        logsumexp(np.zeros(2, dtype))
    except TypeError as exc:
        raise NotAvailable(f"scipy.special.logsumexp refuses {dtype}: {exc}") from exc


def bind(setup: Any) -> Callable[[], Any]:
    """The timed call of a prepared peer."""
    data, fn = setup
    return lambda: fn(data)


def to_numpy(out: Any) -> np.ndarray:
    """A runner's result as a numpy array (torch tensors as float64 values: exact, every dtype
    here widens exactly, and numpy has no bfloat16 of torch's), for the checks; never timed."""
    if hasattr(out, "detach"):  # torch
        return out.detach().to(dtype=_torch().float64).numpy()
    return np.asarray(out)


def _torch() -> Any:
    if "torch" not in sys.modules:
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # read when libgomp loads
    import torch

    return torch


def torch_wait_policy() -> str:
    """torch's OpenMP wait policy for the report: the environment's, or unknown when torch was
    imported before the suite could set it."""
    return os.environ.get("OMP_WAIT_POLICY", "unset (spinning)")


def _torch_setup(case: Case, x: np.ndarray, threads: int) -> tuple[Any, Callable]:
    torch = _torch()
    torch.set_num_threads(threads)
    if case.dtype == "bfloat16":
        data = torch.from_numpy(x.view(np.int16)).view(torch.bfloat16)
    else:
        data = torch.from_numpy(x)
    dim = list(case.axes)
    ops = {
        "ReduceSum": lambda t: torch.sum(t, dim=dim, keepdim=True),
        "ReduceL2": lambda t: torch.linalg.vector_norm(t, dim=dim, keepdim=True),
        "ReduceLogSumExp": lambda t: torch.logsumexp(t, dim=dim, keepdim=True),
        "ReduceSumSquare": lambda t: torch.sum(t * t, dim=dim, keepdim=True),
        "ReduceLogSum": lambda t: torch.log(torch.sum(t, dim=dim, keepdim=True)),
    }
    return data, ops[case.op]


def _jax_setup(case: Case, x: np.ndarray) -> tuple[Any, Callable]:
    import jax
    import jax.numpy as jnp

    if case.dtype == "float64":
        jax.config.update("jax_enable_x64", True)
    axes = case.axes
    ops = {
        "ReduceSum": lambda a: jnp.sum(a, axis=axes, keepdims=True),
        "ReduceL2": lambda a: jnp.sqrt(jnp.sum(a * a, axis=axes, keepdims=True)),
        "ReduceLogSumExp": lambda a: jax.nn.logsumexp(a, axis=axes, keepdims=True),
        "ReduceSumSquare": lambda a: jnp.sum(a * a, axis=axes, keepdims=True),
        "ReduceLogSum": lambda a: jnp.log(jnp.sum(a, axis=axes, keepdims=True)),
    }
    data = jax.device_put(x)
    if data.dtype != x.dtype:
        raise NotAvailable(f"jax: {x.dtype} arrives as {data.dtype}")
    try:
        compiled = jax.jit(ops[case.op]).lower(data).compile()
    except Exception as exc:  # an XLA refusal is a missing cell, not a failed run
        raise NotAvailable(f"jax: {type(exc).__name__}: {exc}") from exc
    return data, lambda a: compiled(a).block_until_ready()
