"""``tracer explain``: the dependency graph of a run and its critical path (issue 10).

- :func:`build_graph` (:mod:`tracer.explain.graph`): nodes and typed edges as DataFrames; a job's ranks joined
  at their collectives (:mod:`tracer.explain.collective`);
- :func:`critical_path` (:mod:`tracer.explain.critical`): the chain of dependent intervals that set the
  end-to-end time of a run, a window or a range, each piece labelled;
- :mod:`tracer.explain.findings` (``from tracer.explain.findings import findings``: the function is not
  re-exported here, where it would hide its module): why copies and GPU idle gaps did not overlap compute, each
  with the intervals it names, its cost (on the path and in all) and the fix; :func:`group_findings` ranks them
  by kind;
- :mod:`tracer.explain.replay` (``from tracer.explain.replay import replay``, likewise): the what-if replay of a
  window under a :class:`Plan` (:func:`parse_plan` reads ``NAME[=VALUE]``), predicted beside measured;
- :func:`explain` (:mod:`tracer.explain.explanation`): all of the above for one timeline, as ``tracer explain``
  and the dashboard run it, in one :class:`Explanation`;
- :mod:`tracer.explain.lines` (issue 37): the line of the user's code behind each finding (from Python stacks),
  the findings by line, and :func:`explain_lines`: GPU, critical-path, host-sync and exposed copy time per line
  (``tracer lines``).

Pure functions of a :class:`tracer.timeline.Timeline` and of what else they are given (the kernels' launch
figures, read by :mod:`tracer.parsers.demand`): no file read, no printing, no plotting. docs/explain.md.
"""

from tracer.explain.critical import LABELS, CriticalPath, Window, critical_path, window_of_range
from tracer.explain.explanation import Explanation, explain, explain_lines
from tracer.explain.findings import KINDS, group_findings
from tracer.explain.graph import EDGE_TYPES, Graph, build_graph
from tracer.explain.replay import Plan, Replay, parse_plan

__all__ = ["EDGE_TYPES", "KINDS", "LABELS", "CriticalPath", "Explanation", "Graph", "Plan", "Replay", "Window",
           "build_graph", "critical_path", "explain", "explain_lines", "group_findings", "parse_plan",
           "window_of_range"]
