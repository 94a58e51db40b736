"""Front door: the ``onnx-reduce`` command line (``onnx_reduce.cli:app`` is the console script).

>>> from typer.testing import CliRunner
>>> result = CliRunner().invoke(app, ["info", "ReduceSum"])
>>> result.exit_code
0
"""

from .app import app, main

__all__ = ["app", "main"]
