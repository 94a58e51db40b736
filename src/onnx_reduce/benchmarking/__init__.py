"""The benchmark suite: onnx-reduce against onnxruntime, torch, jax, numpy, scipy and
onnx.reference, side by side.

Used by ``benchmarks/run.py`` and ``onnx-reduce bench``::

    from onnx_reduce.benchmarking import BenchConfig, run_suite
    results = run_suite(BenchConfig.quick(), progress=lambda done, total, label: ...)
    print(results.to_markdown()); results.plot("bench.png"); results.summary()
    print(targets.markdown(results))    # the speed targets against the fastest peer

>>> cfg = BenchConfig.full()
>>> len(cfg.cases())  # 3 ops x 5 layouts x 4 dtypes x 3 sizes
180
"""

from . import targets
from .cases import DTYPES, LAYOUTS, OPS, SIZES, Case
from .config import REGIMES, RUNNERS, BenchConfig
from .exp_limit import measure_exp_limit
from .machine import machine_description
from .memory import measure_memory, memory_markdown, run_memory_suite
from .merge import merge_runs
from .results import BenchResults, CellResult
from .roofline import measure_read_roofline
from .suite import run_suite

__all__ = [
    "DTYPES",
    "LAYOUTS",
    "OPS",
    "REGIMES",
    "RUNNERS",
    "SIZES",
    "BenchConfig",
    "BenchResults",
    "Case",
    "CellResult",
    "machine_description",
    "measure_exp_limit",
    "measure_memory",
    "measure_read_roofline",
    "memory_markdown",
    "merge_runs",
    "run_memory_suite",
    "run_suite",
    "targets",
]
