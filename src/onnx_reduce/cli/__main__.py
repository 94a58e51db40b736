"""``python -m onnx_reduce.cli``: the same as the ``onnx-reduce`` script."""

from .app import main

main()
