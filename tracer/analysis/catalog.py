"""The analyses every summary runs, listed once and registered in this order: the order of the summary's JSON
keys (``tracer summary --json``, summary.json). The text's order is each analysis's own ``text_order``.

A new analysis is a module that defines an :class:`~tracer.analysis.registry.Analysis` (docs/analyses.md) and a
place in :data:`BUILTIN` here; an analysis from outside tracer calls :func:`tracer.analysis.registry.register`.
"""

from __future__ import annotations

from tracer.analysis import builtin, builtin_comm, builtin_launches
from tracer.analysis.registry import Analysis, register

#: the whole timeline's analyses, then communication's, then the launches' (their JSON keys last)
BUILTIN: tuple[Analysis, ...] = (*builtin.BUILTIN, *builtin_comm.BUILTIN, builtin_launches.LAUNCHES)

for _analysis in BUILTIN:
    register(_analysis)
