"""``tracer explain``: the dependency graph of a run and its critical path (issue 10).

- :func:`build_graph` (:mod:`tracer.explain.graph`): nodes and typed edges as DataFrames;
- :func:`critical_path` (:mod:`tracer.explain.critical`): the chain of dependent intervals that set the
  end-to-end time of a run, a window or a range, each piece labelled.

Pure functions of a :class:`tracer.timeline.Timeline`: no printing, no plotting. docs/explain.md.
"""

from tracer.explain.critical import LABELS, CriticalPath, Window, critical_path, window_of_range
from tracer.explain.graph import EDGE_TYPES, Graph, build_graph

__all__ = ["EDGE_TYPES", "LABELS", "CriticalPath", "Graph", "Window", "build_graph", "critical_path",
           "window_of_range"]
