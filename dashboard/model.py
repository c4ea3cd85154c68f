"""The dashboard's model: a timeline laid out for drawing (lanes, sub-rows, colour classes, sorted arrays).

It lives in :mod:`tracer.analysis.drawing` (pure numpy, no Plotly), where a large job's workers lay out each rank
as they parse it (:mod:`tracer.job.views`); this module names it for the dashboard.
"""

from tracer.analysis.drawing import (
    CLASS_INDEX,
    CLASSES,
    FOLD_SUBS,
    MAX_OP_DEPTH,
    MAX_RANGE_DEPTH,
    N_CLASSES,
    DrawClass,
    Row,
    TimelineView,
    depth_subs,
    nesting_depth,
    prepare,
)

__all__ = [
    "CLASSES", "CLASS_INDEX", "FOLD_SUBS", "MAX_OP_DEPTH", "MAX_RANGE_DEPTH", "N_CLASSES", "DrawClass", "Row",
    "TimelineView", "depth_subs", "nesting_depth", "prepare",
]
