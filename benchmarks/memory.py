"""Peak extra memory of each reduction on a large input, one fresh subprocess per case.

    .venv/bin/python benchmarks/memory.py                      # 128 MiB float32, every op x layout
    .venv/bin/python benchmarks/memory.py --runners onnx-reduce --size-mib 256 --out memory.md

Prints a Markdown table: extra = peak RSS during the call - RSS before it (input made, everything
compiled and warm), as % of the input. Target for onnx-reduce: <= 5% of the input + the output.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from onnx_reduce.benchmarking import LAYOUTS, OPS, memory_markdown, run_memory_suite
from onnx_reduce.benchmarking.cases import normalize_dtype, normalize_layout, normalize_op
from onnx_reduce.benchmarking.config import normalize_runner


def _list(text: str | None, default, normalize) -> list[str]:
    if not text:
        return list(default)
    return [normalize(t) for t in text.split(",") if t.strip()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", help="comma list: sum,l2,lse")
    parser.add_argument("--layouts", help="comma list: inner,outer,all,middle,split")
    parser.add_argument("--runners", default="onnx-reduce,numpy,onnxruntime")
    parser.add_argument("--dtypes", default="float32", help="comma list (default float32)")
    parser.add_argument("--size-mib", type=int, default=128, help="input size (default 128 MiB)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, help="write the Markdown table here (else stdout)")
    args = parser.parse_args(argv)

    def progress(done: int, total: int, label: str) -> None:
        print(f"[{done}/{total}] {label}", file=sys.stderr, flush=True)

    rows = []
    for dtype in _list(args.dtypes, (), normalize_dtype):
        rows += run_memory_suite(
            ops=_list(args.ops, OPS, normalize_op),
            layouts=_list(args.layouts, LAYOUTS, normalize_layout),
            runners=_list(args.runners, (), normalize_runner),
            dtype=dtype,
            nbytes=args.size_mib * 2**20,
            threads=args.threads,
            progress=progress,
        )
    table = memory_markdown(rows)
    ours = [r for r in rows if r["runner"] == "onnx-reduce" and "error" not in r]
    verdict = (
        f"onnx-reduce within budget in {sum(r['within_budget'] for r in ours)}/{len(ours)} cases"
        if ours else ""
    )
    text = table + ("\n" + verdict + "\n" if verdict else "")
    if args.out:
        args.out.write_text(text)
        print(f"wrote {args.out}", file=sys.stderr)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
