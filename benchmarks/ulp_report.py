"""Measure the ulp error of every op x dtype x layout x kernel path against the exact oracle.

Usage::

    .venv/bin/python benchmarks/ulp_report.py            # Markdown tables on stdout
    .venv/bin/python benchmarks/ulp_report.py --quick    # smaller arrays (a few seconds)
    .venv/bin/python benchmarks/ulp_report.py --hard     # the families built to break the bound

Errors are ``|result - exact| / ulp(exact)`` in ulps of the output dtype (tests/oracle.py), so a
correctly rounded result scores <= 0.5. Data (seeded): ReduceSum of uniform [0, 1) values
(well-conditioned: the error is the kernel's, not the data's), ReduceL2 of standard normal
values, ReduceLogSumExp of standard normal values times 10, ReduceSumSquare of standard normal
values, ReduceLogSum of uniform [0, 1) values. Shapes: 64 x 1000 for the 2-D layouts,
30 x 40 x 50 for the 3-D ones.

``--hard`` measures instead the families built to break the bound: ReduceLogSumExp slices whose
result nearly cancels the shift (log-softmax rows, whose LSE is ~0 by construction; pairs
``[a, log1p(-exp(a))]`` rounded, whose LSE is a few ulps of 1 from 0), ReduceLogSum rows of
probabilities (sum ~1, log ~0) and rows whose large terms cancel, and float sums, L2 and sums of
squares of constant and same-sign rows of every length around the kernels' block sizes, each as
rows (inner axis) and as columns (outer axis).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import oracle
from onnx_reduce import reduce_l2, reduce_log_sum, reduce_log_sum_exp, reduce_sum, reduce_sum_square
from onnx_reduce.kernels.dispatch import kernel_path

FUNCTIONS = {"ReduceSum": reduce_sum, "ReduceL2": reduce_l2, "ReduceLogSumExp": reduce_log_sum_exp,
             "ReduceSumSquare": reduce_sum_square, "ReduceLogSum": reduce_log_sum}
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
    if op in ("ReduceSum", "ReduceLogSum"):
        return rng.random(shape)
    if op in ("ReduceL2", "ReduceSumSquare"):
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


HARD_LENGTHS = (1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 255, 256,
                257, 511, 512, 513, 1023, 1024, 1025, 2047, 2048, 4097, 8193, 20000)


def _log_softmax_rows(rng: np.random.Generator, shape: tuple[int, int], dtype) -> np.ndarray:
    x = rng.standard_normal(shape) * 3
    peak = x.max(axis=1, keepdims=True)
    lse = peak + np.log(np.exp(x - peak).sum(axis=1, keepdims=True))
    return (x - lse).astype(dtype)


def _cancelling_pairs(rng: np.random.Generator, count: int, dtype) -> np.ndarray:
    a = rng.uniform(-3.0, -0.05, count).astype(dtype)
    b = np.log1p(-np.exp(a.astype(np.float64))).astype(dtype)
    return np.stack([a, b], axis=1)


def _probabilities(rng: np.random.Generator, shape: tuple[int, int], dtype) -> np.ndarray:
    p = rng.random(shape)
    return (p / p.sum(axis=1, keepdims=True)).astype(dtype)


def _cancelling_sums(rng: np.random.Generator, count: int, dtype) -> np.ndarray:
    big = rng.uniform(1e3, 3e4, count) if dtype == np.float16 else rng.uniform(1e6, 1e15, count)
    small = rng.uniform(0.5, 4.0, count)
    return np.stack([big, small, -big], axis=1).astype(dtype)


def hard_cases(rng: np.random.Generator):
    """Yield (family, op, dtype name, 2-D array of rows): see the module docstring."""
    for dname, dtype in DTYPES.items():
        yield "log-softmax rows (300x20)", "ReduceLogSumExp", dname, \
            _log_softmax_rows(rng, (300, 20), dtype)
        yield "log-softmax rows (8x5000)", "ReduceLogSumExp", dname, \
            _log_softmax_rows(rng, (8, 5000), dtype)
        yield "pairs near -ln 2", "ReduceLogSumExp", dname, _cancelling_pairs(rng, 300, dtype)
    for dname in ("f32", "f64"):
        dtype = DTYPES[dname]
        for n in HARD_LENGTHS:
            constant = np.full((4, n), 0.1, dtype) * rng.uniform(0.5, 2.0, (4, 1)).astype(dtype)
            same_sign = rng.random((4, n)).astype(dtype)
            for op in ("ReduceSum", "ReduceL2", "ReduceSumSquare"):
                yield f"constant rows (n <= {n})", op, dname, constant
                yield f"same-sign rows (n <= {n})", op, dname, same_sign
    logs = np.random.default_rng(2027)  # a stream of their own: the families above keep theirs
    for dname, dtype in DTYPES.items():
        for shape in ((300, 20), (8, 5000)):
            yield f"probability rows ({shape[0]}x{shape[1]})", "ReduceLogSum", dname, \
                _probabilities(logs, shape, dtype)
        yield "cancelling rows [b, s, -b]", "ReduceLogSum", dname, \
            _cancelling_sums(logs, 300, dtype)


def measure_hard(paths: list[str]) -> dict:
    """{(family, op, dtype, layout, path): max ulp}; rows by length fold into one family each."""
    results: dict = {}
    for family, op, dname, rows in hard_cases(np.random.default_rng(2026)):
        family = family.split(" (n <=")[0]
        dtype = DTYPES[dname]
        for layout, data, axes in (("rows", rows, [1]), ("columns", np.ascontiguousarray(rows.T),
                                                        [0])):
            exact = oracle.exact(op, data, axes).reshape(-1)
            for path in paths:
                result = run_path(op, path, data, axes)
                if result is None:
                    continue
                error = max(oracle.ulp_error(r, x, dtype) for r, x in
                            zip(result.reshape(-1).tolist(), exact, strict=True))
                key = (family, op, dname, layout, path)
                results[key] = max(results.get(key, 0.0), error)
    return results


def markdown_hard(results: dict, paths: list[str]) -> str:
    lines = ["| family | op | dtype | layout | " + " | ".join(paths) + " |",
             "|---|---|---|---|" + "---|" * len(paths)]
    for family, op, dname, layout in dict.fromkeys(k[:4] for k in results):
        cells = [results.get((family, op, dname, layout, p)) for p in paths]
        lines.append(f"| {family} | {op} | {dname} | {layout} | "
                     + " | ".join("—" if c is None else f"{c:.3g}" for c in cells) + " |")
    return "\n".join(lines)


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
    parser.add_argument("--hard", action="store_true",
                        help="the near-cancellation and constant-row families instead")
    args = parser.parse_args(argv)
    paths = [p.strip() for p in args.paths.split(",") if p.strip()]
    start = time.perf_counter()
    if args.hard:
        print(markdown_hard(measure_hard(paths), paths))
    else:
        print(markdown(measure(paths, args.quick), paths))
    print(f"\n({time.perf_counter() - start:.0f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
