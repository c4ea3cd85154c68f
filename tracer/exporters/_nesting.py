"""Moved to :mod:`tracer.layout`, which the dashboard shares; kept so that ``from tracer.exporters._nesting
import sub_tracks`` (the nsys-sqlite exporter's NVTX push/pop rows) still works."""

from tracer.layout import nesting_order, sub_tracks

__all__ = ["nesting_order", "sub_tracks"]
