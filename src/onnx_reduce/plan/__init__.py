"""Stage 2 of the pipeline: normalised axes, output shapes, canonical memory layouts."""

from .layout import Layout, collapse
from .reduction import ReductionPlan, make_plan, output_shape
from .shape_inference import UNKNOWN_AXES, infer_shape

__all__ = [
    "UNKNOWN_AXES",
    "Layout",
    "ReductionPlan",
    "collapse",
    "infer_shape",
    "make_plan",
    "output_shape",
]
