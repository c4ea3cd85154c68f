"""The summary's launch analysis (registered after the communication ones, so its JSON key comes last):

- ``launches``: per GPU, how far the host ran ahead of it: the launch calls' time, the launch delay, the
  kernels shorter than their launch, and the stream's queue when each call returned; JSON key ``launches``
  (absent where no GPU work was launched from the timeline's calls).

Definitions: :mod:`tracer.analysis.launches`; docs/analyses.md, "Launches".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tracer.analysis.launches import LaunchStat, launch_table
from tracer.analysis.registry import Analysis, Block, Column, Table, TextOptions, stack_parts
from tracer.analysis.text import parse_device_label, pct
from tracer.timeline import DeviceKey, Timeline, device_label

if TYPE_CHECKING:
    from tracer.analysis.summary import Summary


def _launches(t: Timeline) -> list[LaunchStat]:
    return [LaunchStat.from_dict(row) for row in launch_table(t.events).to_dict("records")]


def _us(ns: int) -> str:
    """µs, a decimal only below a millisecond (the table stays narrow enough for 80 columns)."""
    return f"{ns / 1e3:,.1f}" if abs(ns) < 1_000_000 else f"{ns / 1e3:,.0f}"


def _blocks(r: list[LaunchStat], s: Summary, _o: TextOptions) -> list[Block]:
    shown = [x for x in r if x.launches]
    if not s.devices or not shown:
        return []
    cols = ("GPU", "launches", "call µs", "delay µs", "p95 µs", "short kernels", "queue mean", "empty queue")
    rows = tuple(
        (device_label(DeviceKey(x.rank, x.device), s.multi_rank), f"{x.launches:,}", _us(x.call_p50_ns),
         _us(x.delay_p50_ns), _us(x.delay_p95_ns),
         pct(x.short_kernels, x.kernels), f"{x.queue_mean:,.2f}",
         pct(x.empty_at_launch, x.launches))
        for x in shown
    )
    unlinked = sum(x.unlinked for x in r)
    caption = ["call: the launch call's time on the host (median); delay: the work's start − its call's end "
               "(median, 95th percentile); short kernels: of those launched one per call, the share that ran for "
               "less time than their call took; queue: other work of the stream queued and not finished when the "
               "call returned; empty queue: the launches that found none (the stream waited for the host)"]
    if unlinked:
        caption.append(f"{unlinked:,} rows of GPU work have no launch call in the trace: in no figure here")
    return [Table("Launches: how far the host ran ahead of each GPU",
                  tuple(Column(c, justify="left" if c == "GPU" else "right") for c in cols), rows,
                  "\n".join(caption))]


def _to_json(r: list[LaunchStat], s: Summary) -> dict[str, Any]:
    if not any(x.launches for x in r):
        return {}
    return {"launches": {device_label(DeviceKey(x.rank, x.device), s.multi_rank): x.as_dict(False) for x in r}}


def _from_json(d: Mapping[str, Any]) -> list[LaunchStat]:
    out = []
    for label, v in (d.get("launches") or {}).items():
        key = parse_device_label(label)
        out.append(LaunchStat.from_dict({**v, "rank": key.rank, "device": key.device}))
    return out


LAUNCHES = Analysis(
    "launches", "Per GPU: launch calls, launch delay, short kernels, the stream's queue at each launch",
    _launches, to_json=_to_json, from_json=_from_json, json_keys=("launches",), blocks=_blocks, text_order=65,
    lazy=True, per_rank=_launches, combine=stack_parts,
)
