"""The user's lines (issue 37): the line of the user's code behind each finding, the findings grouped by line with
a fix that fits the line, and the GPU time, critical-path time, host-sync time and exposed copy time of each line
(``tracer lines``).

Each host call's user frame and line come from :mod:`tracer.analysis.source` and
:mod:`tracer.analysis.source_code` (:func:`read_sources`); GPU work takes its launch call's line (the timeline's one
launch join, :func:`tracer.timeline.launch_links`). A finding's line is its cause's: the blocking call of a host
sync, the late launch of a launch-bound gap, the launch of the copy or kernel it names otherwise.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from tracer.analysis import intervals as iv
from tracer.analysis.source import NO_STACKS, NO_USER_FRAMES, Attribution, SourceRule, attribute
from tracer.analysis.source_code import Sites, SourceFiles, chain_of, sites
from tracer.explain.critical import CriticalPath
from tracer.explain.findings import KINDS as FINDING_KINDS
from tracer.explain.findings import covered
from tracer.explain.graph import Graph
from tracer.timeline import GPU_WORK_KINDS, Timeline, launch_links
from tracer.timeline.meta import FRAME_LINES_CURRENT, is_unexported_note

#: A finding kind in a few words, for a line's summary ("host sync ×49").
SHORT: dict[str, str] = {
    "pageable": "pageable copy", "same_stream": "copy on the compute stream", "host_sync": "host sync",
    "launch_bound": "launch-bound gap", "event_wait": "event wait", "gpu_full": "kernel waiting on a full GPU",
    "serialised": "serialised kernel", "one_at_a_time": "kernels one at a time", "one_stream": "one-stream run",
    "straggler": "straggler", "exposed_comm": "exposed communication",
}


@dataclass(frozen=True)
class LineFix:
    """A call recognised on a line (``call``: what the line does, in a few words), the finding kinds it explains,
    and the fix that fits it."""

    call: str
    pattern: re.Pattern[str]
    kinds: frozenset[str]
    fix: str


_SYNC_KINDS = frozenset(("host_sync", "pageable", "launch_bound"))
#: The calls a fix can name, tried in this order on the line's text (``loop``: any line in a loop of its function).
LINE_FIXES: tuple[LineFix, ...] = (
    LineFix("torch.cuda.synchronize()", re.compile(r"\bsynchronize\s*\("), _SYNC_KINDS,
            "remove the synchronize from the loop: the next CUDA call queues behind the GPU's work anyway (to time "
            "the GPU, record torch.cuda.Event(enable_timing=True) pairs and read them once at the end)"),
    LineFix(".item()", re.compile(r"\.item\s*\(\s*\)"), _SYNC_KINDS,
            "keep the value on the GPU (add losses and metrics into a tensor) and read it with .item() every N steps "
            "or once at the end: each .item() waits for all the GPU work queued before it"),
    LineFix("print of a tensor", re.compile(r"\bprint\s*\("), _SYNC_KINDS,
            "print every N steps, or print values already on the host: printing a GPU tensor copies it to the host "
            "and waits for the GPU"),
    LineFix(".cpu()", re.compile(r"\.(cpu|numpy|tolist)\s*\("), _SYNC_KINDS | {"same_stream"},
            "copy into pinned memory without waiting (x.to('cpu', non_blocking=True) into a buffer from "
            ".pin_memory()) and read it after a later sync, or keep the work on the GPU"),
    LineFix(".to(...) from pageable memory", re.compile(r"\.(to|cuda)\s*\("), frozenset(("pageable", "host_sync")),
            "pin the host tensor (tensor.pin_memory(), DataLoader(pin_memory=True)) and copy with non_blocking=True: "
            "a copy from pageable memory is staged by the driver and the host waits for it"),
    LineFix(".to(...) on the compute stream", re.compile(r"\.(to|cuda|copy_)\s*\("), frozenset(("same_stream",)),
            "issue the copy on a side stream (with torch.cuda.stream(s): y = x.to(dev, non_blocking=True)), from "
            "pinned memory, and make the consumer wait for it (torch.cuda.current_stream().wait_stream(s))"),
)
LOOP_FIX = LineFix("a Python loop of small ops", re.compile(""), frozenset(("launch_bound", "one_stream")),
                   "the loop launches small kernels one by one, each waiting for the host: do its work as whole-tensor "
                   "operations (vectorise the loop), or compile it (torch.compile; CUDA graphs)")


def line_fix(text: str, kinds: set[str] | frozenset[str], in_loop: bool) -> LineFix | None:
    """The fix that fits a line (its ``text``, whether it is ``in_loop``) for findings of ``kinds``; None where no
    call on it is recognised (the findings' own fixes apply)."""
    for f in LINE_FIXES:
        if kinds & f.kinds and f.pattern.search(text):
            return f
    if in_loop and kinds & LOOP_FIX.kinds:
        return LOOP_FIX
    return None


@dataclass(frozen=True)
class Sources:
    """The user's frames and lines of one timeline (:func:`read_sources`): ``attribution`` (each host call's user
    frame), ``sites`` (its line), ``note`` (why there are none: no stacks, or no frame of the user's; None where
    there are), and ``call_of``: each attributed GPU row's launch call (index: work row)."""

    attribution: Attribution
    sites: Sites
    note: str | None
    call_of: pd.Series

    @property
    def has_lines(self) -> bool:
        return not self.sites.calls.empty

    def calls_of(self, rows: np.ndarray) -> np.ndarray:
        """The host call behind each timeline row: a GPU row's launch call, a host row itself (-1: none)."""
        rows = np.asarray(rows, np.int64)
        call = self.call_of.reindex(rows).to_numpy()
        return np.where(pd.isna(call), rows, np.nan_to_num(call, nan=-1)).astype(np.int64)

    def source(self, row: int) -> dict[str, Any] | None:
        """Where call ``row`` came from in the user's code, as plain data (``tracer explain --json``'s
        ``source``): file, line, function, text, exact, chain (the callers' lines outwards); None if unknown."""
        calls = self.sites.calls
        if row not in calls.index:
            return None
        c = calls.loc[row]
        return {"file": str(c["file"]), "line": int(c["line"]), "function": str(c["function"]),
                "text": str(c["text"]), "exact": bool(c["exact"]),
                "borrowed": bool(self.attribution.calls.at[row, "borrowed"]),
                "chain": [{"file": f, "line": n, "function": fn} for f, n, fn in
                          chain_of(self.sites, self.attribution, row)]}

    def meta(self) -> dict[str, Any]:
        """What ``--json`` says of the sources as a whole."""
        return {"stacks": self.attribution.has_stacks, "note": self.note, "files_read": list(self.sites.read),
                "files_not_found": list(self.sites.unread)}


def read_sources(timeline: Timeline, rule: SourceRule | None = None, files: SourceFiles | None = None) -> Sources:
    """Each host call's user frame and line in ``timeline`` (``rule``: which frames are the user's; ``files``:
    where the user's files are read from, None for none: each line is then its function's first)."""
    ev = timeline.events
    a = attribute(ev, rule)
    s = sites(a, ev, files, timeline.meta.extra.get("frame_lines") == FRAME_LINES_CURRENT)
    # (an nsys export whose backtraces were left out says so in the parser's notes: that, not "record with stacks")
    left_out = [n for n in timeline.meta.extra.get("notes") or [] if isinstance(n, str) and is_unexported_note(n)]
    note = None if not s.calls.empty else (NO_USER_FRAMES if a.has_stacks else left_out[0] if left_out else NO_STACKS)
    links = launch_links(ev)
    call_of = pd.Series(links["call_row"].to_numpy(np.int64), index=links["work_row"].to_numpy(np.int64))
    return Sources(a, s, note, call_of)


def source_folders(timeline: Timeline, trace: Path, roots: Sequence[str] = ()) -> list[Path]:
    """Where the user's files named by relative paths are looked for, in order: each folder of ``roots``
    (``--source-root``; its globs name no folder), the trace's folder (a run directory itself), and the working
    directory the run was recorded in (its meta.json's ``cwd``)."""
    out = [Path(os.path.expanduser(r)) for r in roots if not re.search(r"[*?\[]", r)]
    out.append(trace if trace.is_dir() else trace.parent)
    run = timeline.meta.extra.get("run")
    cwd = run.get("cwd") if isinstance(run, dict) else None
    if isinstance(cwd, str) and cwd:
        out.append(Path(cwd))
    return list(dict.fromkeys(out))


# -- the findings' lines -------------------------------------------------------------------------------------


def cause_rows(found: pd.DataFrame, graph: Graph) -> np.ndarray:
    """The timeline row of each finding's cause: the blocking call of a host sync (its third node), the launch
    call of a launch-bound gap (its second), else its subject (the copy, the kernel, the collective)."""
    if found.empty:
        return np.zeros(0, np.int64)
    node_row = graph.nodes["row"].to_numpy(np.int64)
    pick = [n[2] if k == "host_sync" and len(n) > 2 else n[1] if k == "launch_bound" and len(n) > 1 else n[0]
            for k, n in zip(found["kind"].tolist(), found["nodes"].tolist(), strict=True)]
    rows: np.ndarray = node_row[np.asarray(pick, np.int64)]
    return rows


def finding_sources(found: pd.DataFrame, graph: Graph, sources: Sources) -> list[dict[str, Any] | None]:
    """Each finding's ``source`` (:meth:`Sources.source` of its cause's call, :func:`cause_rows`), with the call
    recognised on its line and the fix that fits it (``call``, ``fix``; None where no call is recognised)."""
    if not sources.has_lines or found.empty:
        return [None] * len(found)
    calls = sources.calls_of(cause_rows(found, graph))
    in_loop = sources.sites.calls["in_loop"]
    out: list[dict[str, Any] | None] = []
    for call, kind in zip(calls.tolist(), found["kind"].tolist(), strict=True):
        src = sources.source(call) if call >= 0 else None
        if src is not None:
            fix = line_fix(src["text"], {kind}, bool(in_loop.get(call, False)))
            src["call"] = fix.call if fix is not None else None
            src["fix"] = fix.fix if fix is not None else None
        out.append(src)
    return out


BY_LINE_COLUMNS: tuple[str, ...] = ("file", "line", "function", "text", "exact", "count", "cost_ns", "path_ns",
                                    "kinds", "call", "fix", "chain")


def findings_by_line(found: pd.DataFrame) -> pd.DataFrame:
    """The findings (with their ``source`` column, :func:`finding_sources`) grouped by source line, ranked by time
    on the critical path then in all (:data:`BY_LINE_COLUMNS`; ``kinds``: each kind's count, cost and path time on
    the line, costliest first); the findings without a line in one last row of no file."""
    src = found["source"].tolist() if "source" in found.columns else []
    if not any(src):  # (no finding has a line: no stacks)
        return pd.DataFrame({c: [] for c in BY_LINE_COLUMNS})
    key = [(s["file"], s["line"]) if s else ("", 0) for s in src]
    f = found.assign(_file=[k[0] for k in key], _line=[k[1] for k in key])
    rows = []
    for (file, line), g in f.groupby(["_file", "_line"], sort=False):
        first = next((s for s in g["source"] if s), None)
        kinds = (g.groupby("kind", sort=False).agg(count=("node", "size"), cost_ns=("cost_ns", "sum"),
                                                  path_ns=("path_ns", "sum"))
                 .sort_values(["path_ns", "cost_ns"], ascending=False, kind="stable"))
        kind_list = [{"kind": str(k), "count": int(r["count"]), "cost_ns": int(r["cost_ns"]),
                      "path_ns": int(r["path_ns"])} for k, r in kinds.iterrows()]
        fix = line_fix(first["text"], set(kinds.index), any(_in_loop(s) for s in g["source"])) if first else None
        rows.append({"file": file, "line": int(line), "function": first["function"] if first else "",
                     "text": first["text"] if first else "", "exact": bool(first["exact"]) if first else False,
                     "count": len(g), "cost_ns": int(g["cost_ns"].sum()), "path_ns": int(g["path_ns"].sum()),
                     "kinds": kind_list, "call": fix.call if fix else None, "fix": fix.fix if fix else None,
                     "chain": first["chain"] if first else []})
    out = pd.DataFrame(rows, columns=list(BY_LINE_COLUMNS))
    out["_none"] = out["file"] == ""
    out = out.sort_values(["_none", "path_ns", "cost_ns"], ascending=[True, False, False], kind="stable")
    return out.drop(columns="_none").reset_index(drop=True)


def _in_loop(src: dict[str, Any] | None) -> bool:
    return bool(src and src.get("call") == LOOP_FIX.call)


def line_summary(r: Any, gains: dict[str, Any] | None = None, groups: pd.DataFrame | None = None) -> str:
    """One line of text for a row of :func:`findings_by_line`: ``train.py:24 `loss.item()` — host sync ×49,
    45.2 ms on the critical path (45.2 ms in all); fix: … (replayed: −44.0 ms)``. ``gains`` (each kind's fix
    replayed) and ``groups`` (the findings by kind) say what the fix of the line's main kind gives back: the
    kind's whole replay where every finding of that kind is on this line, else said to be the kind's."""
    kinds = ", ".join(f"{SHORT.get(k['kind'], k['kind'])} ×{k['count']:,}" for k in r.kinds)
    where = f"{r.file}:{r.line}" if r.file else "(no user line)"
    code = f" `{r.text}`" if r.text else (f" in {r.function}()" if r.function else "")
    out = (f"{where}{code} — {kinds}, {r.path_ns / 1e6:,.1f} ms on the critical path "
           f"({r.cost_ns / 1e6:,.1f} ms in all)")
    main = r.kinds[0]["kind"] if r.kinds else ""
    # (a line with no fix of its own holds a missing value: None, or NaN once pandas typed the column as text)
    own = r.fix if isinstance(r.fix, str) else ""
    fix = own or (FINDING_KINDS[main][1] if main in FINDING_KINDS else "")
    if fix:
        out += f"; fix: {fix}"
    g = (gains or {}).get(main)
    if g is not None and g.get("measured_ns") and "gain_ns" in g:
        total = int(groups.loc[groups["kind"] == main, "count"].sum()) if groups is not None else 0
        whole = total == r.kinds[0]["count"]
        out += (f" (replayed: {-g['gain_ns'] / 1e6:+,.1f} ms)" if whole else
                f" (replayed for all {total:,} {SHORT.get(main, main)}s together: {-g['gain_ns'] / 1e6:+,.1f} ms)")
    return out


# -- GPU time per line (tracer lines) ------------------------------------------------------------------------

LINE_COLUMNS: tuple[str, ...] = (
    "rank", "file", "line", "function", "text", "exact", "calls", "kernels", "copies", "gpu_ns", "comm_ns",
    "gpu_share", "path_ns", "sync_ns", "exposed_copy_ns", "chain",
)


def line_table(timeline: Timeline, sources: Sources, graph: Graph | None = None,
               path: CriticalPath | None = None) -> pd.DataFrame:
    """One row per (rank, user line) that launched GPU work, made a host call on the critical path or blocked
    (:data:`LINE_COLUMNS`): ``calls`` (host calls), ``kernels`` and ``copies`` launched, ``gpu_ns`` (their summed
    durations: kernels, copies, memsets, communication), ``comm_ns`` (its communication kernels'), ``gpu_share``
    (of the rank's GPU work), ``path_ns`` (critical-path time on the line's calls and the work they launched, the
    lags before them included), ``sync_ns`` (time its calls spent blocked waiting for the GPU), ``exposed_copy_ns``
    (its copies' time beside no compute of their GPU), ``chain`` (the callers' lines). Ranked per rank by GPU
    time, then path time. The last row of each rank (``file`` "") holds what no user line launched."""
    ev = timeline.events
    calls = sources.sites.calls
    if calls.empty:
        return pd.DataFrame({c: [] for c in LINE_COLUMNS})
    line_key = calls[["file", "line"]]
    key_of_call = pd.Series(np.arange(len(calls)), index=calls.index)
    kind = ev["kind"].astype(str).to_numpy()
    rank = ev["rank"].to_numpy(np.int64)
    start, end = ev["start_ns"].to_numpy(np.int64), ev["end_ns"].to_numpy(np.int64)
    gpu = np.flatnonzero(np.isin(kind, GPU_WORK_KINDS) & (ev["device"].to_numpy() >= 0))
    pos = ev.index.to_numpy(np.int64)

    def key_of_rows(rows: np.ndarray) -> np.ndarray:
        """The line (position in ``calls``) of each timeline row (labels), -1 for none."""
        c = sources.calls_of(rows)
        k = key_of_call.reindex(c).to_numpy()
        return np.where(pd.isna(k), -1, np.nan_to_num(k, nan=-1)).astype(np.int64)

    n = len(calls)
    frame = pd.DataFrame({"key": np.arange(n), "rank": rank[_positions(ev, calls.index.to_numpy(np.int64))]})
    parts: dict[str, np.ndarray] = {}
    # GPU work launched
    gk = key_of_rows(pos[gpu])
    dur = end[gpu] - start[gpu]
    is_kernel = kind[gpu] == "kernel"
    is_copy = kind[gpu] == "memcpy"
    comm = ev["collective"].astype(str).to_numpy()[gpu] != ""
    parts["gpu_ns"] = _sum_by(gk, dur, n)
    parts["comm_ns"] = _sum_by(gk, np.where(comm & is_kernel, dur, 0), n)
    parts["kernels"] = _sum_by(gk, is_kernel.astype(np.int64), n)
    parts["copies"] = _sum_by(gk, is_copy.astype(np.int64), n)
    parts["exposed_copy_ns"] = _sum_by(gk, _exposed_copies(ev, gpu, is_copy), n)
    # the critical path and the blocked time, by the graph's nodes
    if graph is not None and path is not None:
        p = path.pieces[path.pieces["row"].to_numpy() >= 0]
        parts["path_ns"] = _sum_by(key_of_rows(p["row"].to_numpy(np.int64)), p["dur_ns"].to_numpy(np.int64), n)
    else:
        parts["path_ns"] = np.zeros(n, np.int64)
    if graph is not None:
        b = graph.nodes[graph.nodes["blocking"].to_numpy(bool)]
        parts["sync_ns"] = _sum_by(key_of_rows(b["row"].to_numpy(np.int64)),
                                   (b["end_ns"] - b["start_ns"]).to_numpy(np.int64), n)
    else:
        parts["sync_ns"] = np.zeros(n, np.int64)
    for c, v in parts.items():
        frame[c] = v
    frame["calls"] = 1
    frame["file"] = line_key["file"].to_numpy()
    frame["line"] = line_key["line"].to_numpy()
    sums = ["calls", "kernels", "copies", "gpu_ns", "comm_ns", "path_ns", "sync_ns", "exposed_copy_ns"]
    g = frame.groupby(["rank", "file", "line"], sort=False)[sums].sum().reset_index()
    first = frame.groupby(["rank", "file", "line"], sort=False)["key"].first().to_numpy()
    g["function"] = calls["function"].to_numpy()[first]
    g["text"] = calls["text"].to_numpy()[first]
    g["exact"] = calls["exact"].to_numpy()[first]
    rows = calls.index.to_numpy(np.int64)[first]
    g["chain"] = [[{"file": f, "line": ln, "function": fn} for f, ln, fn in
                   chain_of(sources.sites, sources.attribution, int(r))] for r in rows]
    g = g[(g["gpu_ns"] > 0) | (g["path_ns"] > 0) | (g["sync_ns"] > 0)]
    # the rank's GPU time, and what no user line launched
    total = pd.Series(dur).groupby(rank[gpu]).sum() if gpu.size else pd.Series(dtype=np.int64)
    rest = []
    for r, t in total.items():
        got = g.loc[g["rank"] == r]
        rest.append({"rank": int(r), "file": "", "line": 0, "function": "", "text": "", "exact": False,
                     "calls": 0, "kernels": int(is_kernel[(rank[gpu] == r) & (gk < 0)].sum()),
                     "copies": int(is_copy[(rank[gpu] == r) & (gk < 0)].sum()),
                     "gpu_ns": int(t) - int(got["gpu_ns"].sum()),
                     "comm_ns": int((dur * (comm & is_kernel))[(rank[gpu] == r) & (gk < 0)].sum()),
                     "path_ns": 0, "sync_ns": 0,
                     "exposed_copy_ns": int(_exposed_copies(ev, gpu, is_copy)[(rank[gpu] == r) & (gk < 0)].sum()),
                     "chain": []})
    g["_rest"] = False
    out = pd.concat([g, pd.DataFrame(rest).assign(_rest=True)] if rest else [g], ignore_index=True)
    out["gpu_share"] = out["gpu_ns"] / out["rank"].map(total).replace(0, np.nan).fillna(1).to_numpy()
    out = out.sort_values(["rank", "_rest", "gpu_ns", "path_ns", "sync_ns"],
                          ascending=[True, True, False, False, False], kind="stable")
    out = out[(~out["_rest"]) | (out["gpu_ns"] > 0)]
    return out[list(LINE_COLUMNS)].reset_index(drop=True)


def _positions(events: pd.DataFrame, labels: np.ndarray) -> np.ndarray:
    index = events.index
    if isinstance(index, pd.RangeIndex) and index.start == 0 and index.step == 1:
        return labels
    return np.asarray(index.get_indexer(labels), np.int64)


def _sum_by(key: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    """``values`` summed per ``key`` (0 … n-1; -1 left out)."""
    ok = key >= 0
    out: np.ndarray = np.bincount(key[ok], weights=values[ok], minlength=n).round().astype(np.int64)
    return out


def _exposed_copies(ev: pd.DataFrame, gpu: np.ndarray, is_copy: np.ndarray) -> np.ndarray:
    """For each GPU row of ``gpu``: a copy's time beside no compute kernel (not communication) of its GPU; 0 for
    other rows."""
    out = np.zeros(gpu.size, np.int64)
    if not is_copy.any():
        return out
    kind = ev["kind"].astype(str).to_numpy()[gpu]
    comm = ev["collective"].astype(str).to_numpy()[gpu] != ""
    dev = pd.MultiIndex.from_arrays([ev["rank"].to_numpy()[gpu], ev["device"].to_numpy()[gpu]])
    start, end = ev["start_ns"].to_numpy(np.int64)[gpu], ev["end_ns"].to_numpy(np.int64)[gpu]
    codes, _ = pd.factorize(dev)
    for d in np.unique(codes[is_copy]).tolist():
        on = codes == d
        k = on & (kind == "kernel") & ~comm
        compute = iv.union(start[k], end[k])
        c = np.flatnonzero(on & is_copy)
        out[c] = (end[c] - start[c]) - covered(start[c], end[c], compute)
    return out


@dataclass(frozen=True)
class LinesReport:
    """``tracer lines``: the per-line table (:func:`line_table`), the sources it was read with, the critical path's
    length and the GPU work time of each rank (what ``gpu_share`` divides by)."""

    table: pd.DataFrame
    sources: Sources
    path_ns: int
    gpu_ns: dict[int, int]

    def to_dict(self) -> dict[str, Any]:
        """As plain data (``tracer lines --json``)."""
        rows = []
        for r in self.table.to_dict(orient="records"):
            rows.append({k: (v.item() if isinstance(v, np.generic) else v) for k, v in r.items()})
        return {"source": self.sources.meta(), "path_ns": self.path_ns,
                "gpu_ns": {str(k): v for k, v in self.gpu_ns.items()}, "lines": rows}


def gpu_work_ns(timeline: Timeline) -> dict[int, int]:
    """Each rank's GPU work time: its kernels', copies' and memsets' durations summed."""
    ev = timeline.events
    gpu = ev[(ev["kind"].isin(list(GPU_WORK_KINDS)) & (ev["device"] >= 0)).to_numpy()]
    by = (gpu["end_ns"] - gpu["start_ns"]).groupby(gpu["rank"].to_numpy()).sum()
    return {int(r): int(v) for r, v in by.items()}
