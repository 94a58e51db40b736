"""Measure the ulp error of every op x dtype x layout x kernel path against the exact oracle.

Usage::

    .venv/bin/python benchmarks/ulp_report.py            # Markdown tables on stdout
    .venv/bin/python benchmarks/ulp_report.py --quick    # smaller arrays (a few seconds)

Errors are ``|result - exact| / ulp(exact)`` in ulps of the output dtype (tests/oracle.py), so a
correctly rounded result scores <= 0.5. Data (seeded): ReduceSum of uniform [0, 1) values
(well-conditioned: the error is the kernel's, not the data's), ReduceL2 of standard normal
values, ReduceLogSumExp of standard normal values times 10. Shapes: 64 x 1000 for the 2-D
layouts, 30 x 40 x 50 for the 3-D ones.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import oracle
from onnx_reduce import reduce_l2, reduce_log_sum_exp, reduce_sum
from onnx_reduce.kernels.dispatch import kernel_path

FUNCTIONS = {"ReduceSum": reduce_sum, "ReduceL2": reduce_l2, "ReduceLogSumExp": reduce_log_sum_exp}
DTYPES = {"f16": np.dtype(np.float16), "bf16": oracle.bfloat16,
          "f32": np.dtype(np.float32), "f64": np.dtype(np.float64)}
LAYOUTS = ("inner", "outer", "all", "middle", "non-adjacent", "transposed", "negative-stride")


def layout_case(name: str, base2: np.ndarray, base3: np.ndarray) -> tuple[np.ndarray, list | None]:
    """(array view, axes) for one layout; base2 is 2-D (64 x 1000), base3 3-D (30 x 40 x 50)."""
    if name == "inner":
        return base2, [1]
    if name == "outer":
        return base2, [0]
    if name == "all":
        return base2, None
    if name == "middle":
        return base3, [1]
    if name == "non-adjacent":
        return base3, [0, 2]
    if name == "transposed":  # Fortran-ordered storage, reduce the long axis
        return np.ascontiguousarray(base2.T).T, [1]
    if name == "negative-stride":
        return base2[::-1, ::-1], [1]
    raise ValueError(name)


def data_for(op: str, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    if op == "ReduceSum":
        return rng.random(shape)
    if op == "ReduceL2":
        return rng.standard_normal(shape)
    return rng.standard_normal(shape) * 10


def run_path(op: str, path: str, data: np.ndarray, axes) -> np.ndarray | None:
    with kernel_path(path):
        try:
            return FUNCTIONS[op](data, axes=axes)
        except RuntimeError:  # "fast": no fast kernel serves the case
            return None


def measure(paths: list[str], quick: bool) -> dict:
    """{(op, dtype, layout, path): (max, mean)} (None where a path does not serve the case)."""
    shape2, shape3 = ((16, 300), (10, 12, 14)) if quick else ((64, 1000), (30, 40, 50))
    results: dict = {}
    for op in FUNCTIONS:
        rng = np.random.default_rng(2026)
        raw2, raw3 = data_for(op, shape2, rng), data_for(op, shape3, rng)
        for dname, dtype in DTYPES.items():
            base2, base3 = raw2.astype(dtype), raw3.astype(dtype)
            for layout in LAYOUTS:
                data, axes = layout_case(layout, base2, base3)
                exact = oracle.exact(op, data, axes).reshape(-1)
                for path in paths:
                    result = run_path(op, path, data, axes)
                    if result is None:
                        results[op, dname, layout, path] = None
                        continue
                    errors = np.array([oracle.ulp_error(r, x, dtype) for r, x in
                                       zip(result.reshape(-1).tolist(), exact, strict=True)])
                    results[op, dname, layout, path] = (errors.max(), errors.mean())
    return results


def markdown(results: dict, paths: list[str]) -> str:
    lines = []
    for path in paths:
        lines += [f"**Kernel path `{path}`** — max (mean) ulp error", "",
                  "| op | dtype | " + " | ".join(LAYOUTS) + " |",
                  "|---|---|" + "---|" * len(LAYOUTS)]
        for op in FUNCTIONS:
            for dname in DTYPES:
                cells = []
                for layout in LAYOUTS:
                    value = results.get((op, dname, layout, path))
                    cells.append("—" if value is None else f"{value[0]:.3g} ({value[1]:.3g})")
                lines.append(f"| {op} | {dname} | " + " | ".join(cells) + " |")
        lines.append("")
    worst = {p: max((v[0] for k, v in results.items() if k[3] == p and v), default=0.0)
             for p in paths}
    lines.append("Worst case: " + ", ".join(f"`{p}` {w:.3g} ulp" for p, w in worst.items()))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--paths", default="reference,auto",
                        help="comma-separated kernel paths (reference, auto, fast)")
    parser.add_argument("--quick", action="store_true", help="small arrays (smoke test)")
    args = parser.parse_args(argv)
    paths = [p.strip() for p in args.paths.split(",") if p.strip()]
    start = time.perf_counter()
    results = measure(paths, args.quick)
    print(markdown(results, paths))
    print(f"\n({time.perf_counter() - start:.0f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
