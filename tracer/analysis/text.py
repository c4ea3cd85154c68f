"""How the summary's analyses write their figures as text: times in ms, shares in percent, a GPU's label read
back. Shared by every analysis module (:mod:`tracer.analysis.builtin` and its siblings)."""

from __future__ import annotations

from tracer.timeline import DeviceKey


def ms(ns: int) -> str:
    """ns as ms with three decimals and thousands separators: the summary's unit of time."""
    return f"{ns / 1e6:,.3f}"


def pct(part: int, whole: int) -> str:
    return f"{100.0 * part / whole:.1f}%" if whole else "–"


def pct_text(value: float | None) -> str:
    return "–" if value is None else f"{value:.1f}%"


def parse_device_label(label: str) -> DeviceKey:
    """``"0"`` → (0, 0); ``"1/0"`` → rank 1, device 0 (the inverse of :func:`~tracer.timeline.device_label`; a
    one-rank label does not say its rank, which then reads as 0)."""
    rank, _, device = label.rpartition("/")
    return DeviceKey(int(rank or 0), int(device))
