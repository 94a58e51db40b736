"""Stage 2 of the pipeline: normalised axes, output shapes, canonical memory layouts."""

from .geometry import memory_order_geometry
from .layout import Canonical, Layout, canonical_layout, collapse
from .reduction import ReductionPlan, make_plan, output_shape
from .shape_inference import UNKNOWN_AXES, infer_shape

__all__ = [
    "UNKNOWN_AXES",
    "Canonical",
    "Layout",
    "ReductionPlan",
    "canonical_layout",
    "collapse",
    "infer_shape",
    "make_plan",
    "memory_order_geometry",
    "output_shape",
]
