"""Level of detail (:func:`merge_blocks`, :func:`busy_fraction`, :class:`Blocks`): what a time window of a big trace
looks like at a given pixel width. It lives in :mod:`tracer.analysis.lod` (pure numpy, no Plotly), where a large
job's workers build each rank's coarse levels as they parse it; this module names it for the dashboard."""

from tracer.analysis.lod import BIG_PX, Blocks, busy_fraction, merge_blocks, sort_order

__all__ = ["BIG_PX", "Blocks", "busy_fraction", "merge_blocks", "sort_order"]
