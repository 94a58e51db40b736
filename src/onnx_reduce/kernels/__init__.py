"""Stage 3 of the pipeline: the kernels. ``reference`` is the numpy oracle, always available."""

from . import reference

__all__ = ["reference"]
