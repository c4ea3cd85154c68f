"""The summary's communication analyses (registered after the others, so their JSON keys come last):

- ``comm``: per GPU, compute (kernels that are not communication), comm (NCCL / RCCL kernels), their overlap
  and the exposed comm; JSON key ``comm`` (absent where no kernel is communication: such a summary reads as
  before);
- ``collectives``: each collective instance matched across ranks, and the skew per rank; JSON keys
  ``collectives`` and ``collective_ranks`` (absent without communication).

Definitions: :mod:`tracer.analysis.comm`; docs/analyses.md, "Communication".
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import pandas as pd

from tracer.analysis.comm import (
    Collectives,
    CollectiveStat,
    DeviceComm,
    RankSkew,
    collectives,
    comm_rows,
    comm_total,
    device_comm,
)
from tracer.analysis.registry import Analysis, Block, Column, Line, Table, TextOptions
from tracer.analysis.text import ms, parse_device_label, pct_text
from tracer.timeline import device_label

if TYPE_CHECKING:
    from tracer.analysis.summary import Summary


def _us(ns: int | None) -> str:
    return "–" if ns is None else f"{ns / 1e3:,.1f}"


def _comm_blocks(r: list[DeviceComm], s: Summary, _o: TextOptions) -> list[Block]:
    if not r:
        return []
    cols = ("GPU", "compute kernels", "comm kernels", "compute", "comm", "overlap", "hidden", "exposed")
    total = [(_TOTAL_LABEL[s.multi_rank], comm_total(r))] if len(r) > 1 else []
    rows = tuple(
        (label, f"{d.kernels:,}", f"{d.comm_kernels:,}", ms(d.compute_ns), ms(d.comm_ns), ms(d.overlap_ns),
         pct_text(d.comm_hidden_pct), ms(d.exposed_comm_ns))
        for label, d in [(device_label(d.key, s.multi_rank), d) for d in r] + total
    )
    return [Table("Per GPU communication (ms): compute = kernels that are not comm, comm = NCCL/RCCL kernels, "
                  "overlap = comm hidden behind compute, exposed = comm − overlap",
                  tuple(Column(c, no_wrap=True) for c in cols), rows,
                  f"{_TOTAL_LABEL[s.multi_rank]}: every GPU's time summed (GPU-time), hidden of that sum" if total
                  else None)]


#: the total row's label: the job's (several ranks), else the process's GPUs'
_TOTAL_LABEL = {True: "job", False: "all"}


def _comm_to_json(r: list[DeviceComm], s: Summary) -> dict[str, Any]:
    if not r:
        return {}
    return {"comm": {device_label(d.key, s.multi_rank): d.as_dict() for d in r},
            "comm_total": {**comm_total(r).as_dict(), "gpus": len(r)}}


def _comm_from_json(d: Mapping[str, Any]) -> list[DeviceComm]:
    return [DeviceComm.from_dict(parse_device_label(label), v) for label, v in (d.get("comm") or {}).items()]


COMM = Analysis(
    "comm", "Per GPU: compute beside communication (NCCL/RCCL kernels), their overlap, exposed comm",
    lambda t: device_comm(t.events),
    to_json=_comm_to_json, from_json=_comm_from_json, json_keys=("comm", "comm_total"), blocks=_comm_blocks,
    text_order=35,
    per_rank=lambda t: device_comm(t.events), combine=lambda parts, _job: [d for part in parts for d in part],
)


def _collectives_blocks(r: Collectives, s: Summary, o: TextOptions) -> list[Block]:
    if not r.rows:
        return []
    shared = [c for c in r.rows if c.ranks > 1]
    if not shared:
        counts = Counter(c.collective for c in r.rows)
        what = ", ".join(f"{k} {v:,}" for k, v in counts.most_common())
        return [Line.of(f"Collectives: {len(r.rows):,} on one rank ({what}); skew and stragglers need the job's "
                        "other ranks (summary --job)", "dim")]
    top = sorted(shared, key=lambda c: -c.skew_ns)
    limit = len(top) if o.max_collectives < 0 else o.max_collectives
    cols = ["collective", "pg", "seq", "ranks", "at ms", "skew µs", "straggler", "dur µs", "MB", "algbw GB/s",
            "busbw GB/s"]
    t0 = r.rows[0].start_ns
    rows = [
        [c.collective, c.pg or "–", f"{c.seq}" + ("" if c.matched_by == "seq" else "#"), str(c.ranks),
         ms(c.start_ns - t0), _us(c.skew_ns), str(c.straggler), _us(c.dur_ns),
         "–" if c.bytes is None else f"{c.bytes / 1e6:,.2f}",
         "–" if c.algbw_gb_s is None else f"{c.algbw_gb_s:,.1f}",
         "–" if c.busbw_gb_s is None else f"{c.busbw_gb_s:,.1f}"]
        for c in top[:limit]
    ]
    # columns the trace gave nothing for (no process groups, no sizes) are left out: narrower, same facts
    empty = [i for i, c in enumerate(cols) if c in ("pg", "MB", "algbw GB/s", "busbw GB/s")
             and all(row[i] == "–" for row in rows)]
    cols = [c for i, c in enumerate(cols) if i not in empty]
    rows = [[v for i, v in enumerate(row) if i not in empty] for row in rows]
    where = "comm kernels" if shared[0].where == "gpu" else "host records (no comm kernels)"
    caption = [f"{len(shared):,} collectives matched across ranks from their {where}; seq#: matched by order "
               "(the trace gives no sequence number); dur = the straggler's; busbw as NCCL-tests"]
    if limit < len(top):
        caption.append(f"{len(top) - limit:,} more in --json (--all-collectives lists them)")
    table = Table(f"Collectives by start skew (top {min(limit, len(top)):,} of {len(top):,})",
                  tuple(Column(c, justify="left" if c in ("collective", "pg") else "right", no_wrap=True)
                        for c in cols), tuple(map(tuple, rows)), "\n".join(caption))
    moved = dict(o.clock_moved_ns or ())
    rank_cols: tuple[str, ...] = ("rank", "count", "straggler", "mean late µs", "max late µs", "clock bounds µs",
                                  "clock fix µs") + (("moved µs",) if moved else ())
    rank_rows = tuple(
        (str(k.rank), f"{k.collectives:,}", f"{k.straggler:,}", _us(k.mean_late_ns), _us(k.max_late_ns),
         "–" if k.offset_lo_ns is None or k.offset_hi_ns is None
         else f"[{k.offset_lo_ns / 1e3:,.1f}, {k.offset_hi_ns / 1e3:,.1f}]",
         "contradict" if k.clock_fix_ns is None and k.offset_lo_ns is not None else _us(k.clock_fix_ns))
        + ((_us(moved.get(k.rank, 0)),) if moved else ())
        for k in r.ranks
    )
    if moved:
        fix = ("clock fix: the smallest further shift into them; moved: what --clock-fix moved each rank's clock by "
               "before every figure here was made")
    elif o.clock_moved_ns is not None:
        fix = "clock fix: the smallest shift into them (--clock-fix moved no rank: none needed it, or none fits)"
    else:
        fix = "clock fix: the smallest shift into them (not applied: summary --clock-fix applies it)"
    rank_table = Table(
        "Skew per rank: count = collectives matched; late = start − the collective's earliest start; "
        "straggler = times it started last",
        tuple(Column(c) for c in rank_cols), rank_rows,
        f"clock bounds: the offsets to rank {r.reference_rank}'s clock that no matched collective contradicts "
        f"(none may end on one rank before it started on another); {fix}; contradict: no one offset fits every "
        "match (process groups the trace does not name?)",
    )
    return [table, rank_table]


def _collectives_to_json(r: Collectives, _s: Summary) -> dict[str, Any]:
    if not r.rows:
        return {}
    return {"collectives": [c.as_dict() for c in r.rows],
            "collective_ranks": {"reference_rank": r.reference_rank, "ranks": [k.as_dict() for k in r.ranks]}}


def _collectives_from_json(d: Mapping[str, Any]) -> Collectives:
    ranks = d.get("collective_ranks") or {}
    return Collectives(
        tuple(CollectiveStat.from_dict(row) for row in d.get("collectives") or []),
        tuple(RankSkew.from_dict(row) for row in ranks.get("ranks") or []),
        int(ranks.get("reference_rank", 0)),
    )


COLLECTIVES = Analysis(
    "collectives", "Each collective matched across ranks: start skew, straggler, duration, size, bus bandwidth",
    lambda t: collectives(t.events),
    to_json=_collectives_to_json, from_json=_collectives_from_json, json_keys=("collectives", "collective_ranks"),
    blocks=_collectives_blocks, text_order=75,
    # (a worker sends its rank's communication rows, a few per step; the match across ranks is made from them)
    per_rank=lambda t: comm_rows(t.events),
    combine=lambda parts, _job: collectives(pd.concat(parts, ignore_index=True)),
)

#: in the order of the summary's JSON keys (tracer.analysis.catalog)
BUILTIN = (COMM, COLLECTIVES)
