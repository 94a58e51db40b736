"""Benchmark onnx-reduce against onnxruntime, torch, jax, numpy, scipy and onnx.reference.

    .venv/bin/python benchmarks/run.py                      # the full matrix (64 MiB cells too)
    .venv/bin/python benchmarks/run.py --quick              # latency + 1 MiB, a few minutes
    .venv/bin/python benchmarks/run.py --ops sum,l2 --dtypes f32 --sizes 64MiB \\
        --out results.md --detail-out detail.md --plot results.png

``--from-json a.json b.json ...`` renders saved runs instead, several runs of one matrix as
one (each time the median of the runs' medians: :mod:`onnx_reduce.benchmarking.merge`).

``--out`` gets the compact report (what BENCHMARKS.md embeds), ``--detail-out`` every runner's
time in both regimes with its ulps (what docs/benchmark-method.md embeds).

The engine is :mod:`onnx_reduce.benchmarking` (also behind ``onnx-reduce bench``).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

from onnx_reduce.benchmarking import BenchConfig, BenchResults, merge_runs, run_suite, targets


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="latency and 1 MiB cells, 5 repeats")
    parser.add_argument("--ops", help="comma list: sum,l2,lse (or ReduceSum, ...)")
    parser.add_argument("--layouts", help="comma list: inner,outer,all,middle,split")
    parser.add_argument("--dtypes", help="comma list: float32,float64,float16,bfloat16")
    parser.add_argument("--sizes", help="comma list: latency,1MiB,64MiB (any NMiB/NKiB)")
    parser.add_argument("--runners", help="comma list: onnx-reduce,onnxruntime,torch,jax,"
                        "numpy,scipy,onnx.reference")
    parser.add_argument("--regimes", help="comma list: memory,hot (default both)")
    parser.add_argument("--repeats", type=int, help="timed samples per runner and cell")
    parser.add_argument("--threads", type=int, default=2, help="threads (onnxruntime and numba)")
    parser.add_argument("--roofline-mib", type=int, default=256,
                        help="MiB streamed by the read-roofline measurement (0: skip it)")
    parser.add_argument("--no-exp-limit", action="store_true",
                        help="skip the exp-limit measurement")
    parser.add_argument("--no-ulps", action="store_true",
                        help="skip the ulp errors (the exact results of the 64 MiB cells)")
    parser.add_argument("--out", type=Path, help="write the Markdown report here (else stdout)")
    parser.add_argument("--detail-out", type=Path,
                        help="write the detailed tables (times in both regimes, ulps) here")
    parser.add_argument("--plot", type=Path, help="write a PNG plot here")
    parser.add_argument("--json", type=Path, help="save the raw results here (JSON)")
    parser.add_argument("--from-json", type=Path, nargs="+", metavar="JSON",
                        help="render saved results instead of running (with --out/--plot); "
                        "several runs of one matrix: each time the median of their medians")
    args = parser.parse_args(argv)

    overrides: dict = {"threads": args.threads, "roofline_bytes": args.roofline_mib * 2**20,
                       "exp_limit": not args.no_exp_limit, "ulps": not args.no_ulps}
    for name in ("ops", "layouts", "dtypes", "sizes", "runners", "repeats", "regimes"):
        if getattr(args, name) is not None:
            overrides[name] = getattr(args, name)
    config = BenchConfig.quick(**overrides) if args.quick else BenchConfig.full(**overrides)

    def progress(done: int, total: int, label: str) -> None:
        print(f"\r[{done}/{total}] {label:<48}", end="" if done < total else "\n",
              file=sys.stderr, flush=True)

    if args.from_json:
        results = merge_runs([BenchResults.from_dict(json.loads(path.read_text()))
                              for path in args.from_json])
    else:
        results = run_suite(config, progress=progress)
        results.command = shlex.join([".venv/bin/python", "benchmarks/run.py", *sys.argv[1:]])
    if args.json:
        args.json.write_text(json.dumps(results.to_dict(), indent=1))
    report = results.to_markdown()
    if args.out:
        args.out.write_text(report)
        print(f"wrote {args.out}", file=sys.stderr)
    else:
        print(report)
    if args.detail_out:
        args.detail_out.write_text(results.detail_markdown())
        print(f"wrote {args.detail_out}", file=sys.stderr)
    if args.plot:
        results.plot(args.plot)
        print(f"wrote {args.plot}", file=sys.stderr)
    print(targets.markdown(results), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
