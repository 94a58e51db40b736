"""onnx-reduce on dask against dask's own reductions, on a LocalCluster, for arrays larger than
any worker holds: throughput, peak memory per worker and accuracy in ulps.

    .venv/bin/python benchmarks/dask_bench.py                     # 4 GiB per dtype (~1 h here)
    .venv/bin/python benchmarks/dask_bench.py --gib 0.25 --repeats 1 --out /tmp/dask.md

The input is a zarr store on disk (uncompressed, written chunk by chunk from a seeded generator,
one seed per chunk; reused while its size, dtype and seed match): it never exists in memory.
Each cell reduces it with onnx-reduce's function (lazy on dask) and with dask's own reduction
(``da.sum``; ``da.linalg.norm``; a hand-written LSE: ``max``, then ``log(sum(exp(x - max)))``)
on the same cluster (2 worker processes x 1 thread, numba 1 thread per worker), in rounds whose
runner order is shuffled (seeded). Throughput is the input's bytes over the median time; peak
memory is the largest growth of a worker's resident set over its size before the call (sampled
every 5 ms in each worker); accuracy is the largest error of any output, in ulps of the dtype,
against a reference computed chunkwise in a wider type (float64 for float32 data, x87 extended
np.longdouble for float64).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

AXES = {"all": None, "inner": (1,), "outer": (0,)}
OPS = ("sum", "l2", "lse")
RUNNERS = ("onnx-reduce", "dask")


def dask_reduction(op: str, x, axis):
    """dask's own reduction of ``x`` (keepdims=False)."""
    import dask.array as da

    if op == "sum":
        return x.sum(axis=axis)
    if op == "l2":
        return da.linalg.norm(x, axis=(0, 1) if axis is None else axis)  # 2-D: Frobenius
    peak = x.max(axis=axis, keepdims=True)
    return (peak + da.log(da.exp(x - peak).sum(axis=axis, keepdims=True))).squeeze(
        axis=axis if axis is not None else tuple(range(x.ndim)))


def ours(op: str, x, axis):
    """onnx-reduce's function on the dask array ``x`` (keepdims=False)."""
    import onnx_reduce

    function = {"sum": onnx_reduce.reduce_sum, "l2": onnx_reduce.reduce_l2,
                "lse": onnx_reduce.reduce_log_sum_exp}[op]
    return function(x, axes=None if axis is None else list(axis), keepdims=False)


def reference(x, axis) -> dict[str, np.ndarray]:
    """Sum, L2 and LSE of ``x`` chunk by chunk in a wider type (float64 for float32 data: its
    rounding errors stay below 1/100 of a float32 ulp on these data; np.longdouble for float64),
    one pass for Sum and L2, a second for LSE's exponentials after the exact maximum."""
    import dask
    import dask.array as da

    wide = x.astype(np.float64 if x.dtype.itemsize < 8 else np.longdouble)
    peak = x.max(axis=axis, keepdims=True).astype(wide.dtype)
    total, squares, peak_value = dask.compute(wide.sum(axis=axis), (wide * wide).sum(axis=axis),
                                              peak)
    tail = da.exp(wide - peak_value).sum(axis=axis).compute()
    lse = np.squeeze(peak_value, axis=axis) + np.log(tail)
    return {"sum": np.asarray(total), "l2": np.sqrt(np.asarray(squares)), "lse": np.asarray(lse)}


def max_ulps(result: np.ndarray, exact: np.ndarray, dtype: np.dtype) -> float:
    """The largest ``|result - exact|`` over the outputs, in ulps of ``dtype`` at ``exact``
    (inf where the result is not finite and the reference is)."""
    result = np.asarray(result)
    if not np.all(np.isfinite(result)):
        return float("inf")
    spacing = np.spacing(np.abs(exact.astype(dtype))).astype(np.longdouble)
    return float(np.max(np.abs(result.astype(np.longdouble) - exact) / spacing))


def make_store(folder: Path, dtype: np.dtype, nbytes: int, chunk_bytes: int, seed: int):
    """A 2-D zarr store of about ``nbytes`` of standard-normal ``dtype`` values (shape
    (rows, 2**k), row slabs of ``chunk_bytes``), written chunk by chunk; reused if it exists."""
    import dask.array as da
    import zarr

    columns = 2 ** int(np.log2(np.sqrt(nbytes / dtype.itemsize)))
    rows = nbytes // dtype.itemsize // columns
    slab = max(chunk_bytes // dtype.itemsize // columns, 1)
    path = folder / f"normal-{dtype.name}-{rows}x{columns}-{slab}-seed{seed}.zarr"
    if path.exists():
        return da.from_zarr(str(path))
    blocks = da.map_blocks(_normal_block, seed, dtype, chunks=((slab,) * (rows // slab)
                           + ((rows % slab,) if rows % slab else ()), (columns,)), dtype=dtype)
    target = zarr.create_array(store=str(path) + ".partial", shape=blocks.shape, dtype=dtype,
                               chunks=(slab, columns), compressors=None, zarr_format=3)
    da.store(blocks, target, lock=False)
    Path(str(path) + ".partial").rename(path)
    return da.from_zarr(str(path))


def _normal_block(seed: int, dtype: np.dtype, block_info=None) -> np.ndarray:
    info = block_info[None]
    generator = np.random.default_rng([seed, *info["chunk-location"]])
    return generator.standard_normal(info["chunk-shape"], dtype=dtype)


def _start_sampler(dask_worker) -> None:
    import threading

    import psutil

    process = psutil.Process()
    state = {"base": process.memory_info().rss, "peak": 0, "stop": threading.Event()}

    def sample() -> None:
        while not state["stop"].is_set():
            state["peak"] = max(state["peak"], process.memory_info().rss)
            state["stop"].wait(0.005)

    state["thread"] = threading.Thread(target=sample, daemon=True)
    state["thread"].start()
    dask_worker.bench_memory = state


def _stop_sampler(dask_worker) -> int:
    state = dask_worker.bench_memory
    state["stop"].set()
    state["thread"].join()
    return max(state["peak"] - state["base"], 0)


def timed(client, lazy) -> tuple[float, int, np.ndarray]:
    """Seconds to compute ``lazy`` on the cluster, the largest worker's memory growth, value."""
    client.run(_start_sampler)
    started = time.perf_counter()
    value = client.compute(lazy).result()
    seconds = time.perf_counter() - started
    growth = max(client.run(_stop_sampler).values())
    return seconds, growth, np.asarray(value)


def run_cell(client, x, op: str, axis, repeats: int, order: random.Random) -> dict:
    """Each runner on ``x`` in ``repeats`` rounds, in an order shuffled each round (the value
    kept from the first)."""
    build = {"onnx-reduce": ours, "dask": dask_reduction}
    samples: dict[str, list] = {name: [] for name in RUNNERS}
    values = {}
    for _ in range(repeats):
        names = list(RUNNERS)
        order.shuffle(names)
        for name in names:
            seconds, growth, value = timed(client, build[name](op, x, axis))
            samples[name].append((seconds, growth))
            values.setdefault(name, value)
    return {name: {"seconds": statistics.median(s for s, _ in samples[name]),
                   "peak": max(g for _, g in samples[name]), "value": values[name]}
            for name in RUNNERS}


def warm_up(client) -> None:
    """Every runner once on a small array: imports and compilation on the workers, untimed."""
    import dask.array as da

    small = da.random.default_rng(0).standard_normal((256, 256), chunks=(64, 256))
    for op in OPS:
        for axis in AXES.values():
            for future in client.compute([ours(op, small, axis), dask_reduction(op, small, axis)]):
                future.result()


def markdown(rows: list[dict], header: str) -> str:
    """The results table."""
    lines = [header, "",
             "| dtype | axes | op | onnx-reduce GB/s | dask GB/s | ratio | peak MiB/worker "
             "(ours / dask) | max ulps (ours / dask) |",
             "|---|---|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        a, b = r["onnx-reduce"], r["dask"]
        lines.append(
            f"| {r['dtype']} | {r['axes']} | {r['op']} | {a['gbps']:.2f} | {b['gbps']:.2f} | "
            f"{a['gbps'] / b['gbps']:.2f}x | {a['peak'] / 2**20:.0f} / {b['peak'] / 2**20:.0f} | "
            f"{_ulps(a['ulps'])} / {_ulps(b['ulps'])} |")
    return "\n".join(lines) + "\n"


def _ulps(value: float) -> str:
    return "inf" if value == float("inf") else f"{value:.2f}"


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=4.0, help="input size per dtype (GiB)")
    parser.add_argument("--dtypes", default="float32,float64")
    parser.add_argument("--axes", default="all,inner,outer")
    parser.add_argument("--ops", default=",".join(OPS))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--chunk-mib", type=int, default=64)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=19)
    parser.add_argument("--store", type=Path, help="folder of the zarr inputs (default: a "
                        "temporary folder, removed at the end)")
    parser.add_argument("--out", type=Path, help="write the Markdown table here (else stdout)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    from distributed import Client, LocalCluster

    args = parse(argv)
    order = random.Random(args.seed)
    rows = []
    with contextlib.ExitStack() as stack:
        folder = args.store or Path(stack.enter_context(tempfile.TemporaryDirectory()))
        cluster = stack.enter_context(LocalCluster(
            n_workers=args.workers, threads_per_worker=1, processes=True, dashboard_address=":0",
            silence_logs=logging.ERROR, env={"NUMBA_NUM_THREADS": "1"}))
        client = stack.enter_context(Client(cluster))
        warm_up(client)
        for dtype in (np.dtype(d) for d in args.dtypes.split(",")):
            x = make_store(folder, dtype, int(args.gib * 2**30),
                           args.chunk_mib * 2**20, args.seed)
            for axes in args.axes.split(","):
                exact = reference(x, AXES[axes])
                for op in args.ops.split(","):
                    print(f"{dtype.name} {axes} {op}", file=sys.stderr, flush=True)
                    cell = run_cell(client, x, op, AXES[axes], args.repeats, order)
                    for result in cell.values():
                        result["gbps"] = x.nbytes / result["seconds"] / 1e9
                        result["ulps"] = max_ulps(result["value"], exact[op], dtype)
                    rows.append({"dtype": dtype.name, "axes": axes, "op": op, **cell})
                    report(rows, args)  # after every cell: a long run interrupted keeps its rows
    print(report(rows, args))
    return 0


def report(rows: list[dict], args: argparse.Namespace) -> str:
    """The table of ``rows`` so far, written to ``--out`` if given."""
    header = (f"dask LocalCluster, {args.workers} workers x 1 thread, {args.gib:g} GiB per dtype "
              f"(zarr on disk, {args.chunk_mib} MiB chunks), median of {args.repeats}")
    text = markdown(rows, header)
    if args.out:
        args.out.write_text(text)
    return text


if __name__ == "__main__":
    sys.exit(main())
