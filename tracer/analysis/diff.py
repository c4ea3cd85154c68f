"""Two timelines side by side: what work was added, removed, grew or shrank, and where the time went.

Work is matched by kind and name (kernels, CPU operators, runtime/driver calls and NVTX / record_function
ranges by name; copies by direction; memsets as one item), after names that carry a step number, an address or
an id are normalised (:func:`normalise_name`). Each item gets HTA's five classes (added, removed, increased,
decreased, unchanged); the headline figures of both traces (span, compute, copy, overlap, copy hidden, idle, per
GPU) sit beside each other; and :attr:`TraceDiff.account` says, largest first, which lanes and which overlap
moved the time. Pure: no printing; the CLI and the dashboard render the same :class:`TraceDiff`.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from tracer.analysis import intervals as iv
from tracer.analysis.launches import launch_table
from tracer.analysis.overlap import device_keys, device_overlap, gpu_span_ns, gpu_work, hidden_frac, span_ns
from tracer.analysis.states import STATES, span_states
from tracer.analysis.work import idle_gaps
from tracer.errors import UsageError
from tracer.timeline import LANE_COLUMNS, DeviceKey, LaneKey, Timeline, device_label, device_title, is_multi_rank
from tracer.timeline.keys import pack
from tracer.timeline.links import CALL_KINDS, launch_links

#: Kinds that become items. gpu_range rows are the profiler's copy of a host range drawn over a stream (counting
#: them would count each range twice); "other" is what tracer does not model (Kineto's process-wide "PyTorch
#: Profiler (0)" span, for one), so a difference there says nothing about the work.
ITEM_KINDS: tuple[str, ...] = ("kernel", "memcpy", "memset", "cpu_op", "runtime", "driver", "range", "sync")

#: HTA's five classes, in the order they are listed.
CHANGES: tuple[str, ...] = ("added", "removed", "increased", "decreased", "unchanged")

# Normalisation, applied in this order (docs/diff.md lists the rules with examples):
_HEX = re.compile(r"0x[0-9a-fA-F]+")  # addresses, handles: 0x7f3a9c000000 -> 0xADDR
# ProfilerStep#1012 -> ProfilerStep#N; only after a word character, so that the lambdas of a kernel's name
# ({lambda()#1}, {lambda(float)#2}), which tell two kernels apart, are kept
_NUMBERED = re.compile(r"(?<=\w)#\d+")
_LONG_DIGITS = re.compile(r"\d{5,}")  # ids, pids, timestamps: 5 digits or more -> N


def normalise_name(name: str) -> str:
    """``name`` with step numbers, addresses and long digit runs replaced, so that the same work matches.

    Runs of up to four digits are kept: they are tile sizes and template arguments (``gemm_128x256``,
    ``<4, ...>``) and Triton's kernel suffixes (``triton_poi_fused_add_0``), which tell different kernels apart.
    """
    name = _HEX.sub("0xADDR", name)
    name = _NUMBERED.sub("#N", name)
    return _LONG_DIGITS.sub("N", name)


@dataclass(frozen=True)
class Threshold:
    """When a total time counts as unchanged: |B − A| ≤ max(``abs_ns``, ``rel`` × A), with the same count."""

    #: the absolute floor, ns (default 1 µs: below a kernel launch, and below the timers' jitter)
    abs_ns: int = 1_000
    #: the share of A's total (default 1%: run-to-run noise of a warm GPU)
    rel: float = 0.01

    def tolerance_ns(self, base_ns: int) -> float:
        return max(float(self.abs_ns), self.rel * abs(base_ns))

    def text(self) -> str:
        return f"|B − A| ≤ max({_duration_text(self.abs_ns)}, {self.rel * 100:g}% of A) with the same count"


def _duration_text(ns: int) -> str:
    for unit, size in (("s", 10**9), ("ms", 10**6), ("µs", 10**3)):
        if ns >= size and ns % size == 0:
            return f"{ns // size} {unit}"
    return f"{ns} ns"


_UNITS = {"ns": 1, "us": 1_000, "µs": 1_000, "ms": 1_000_000, "s": 1_000_000_000}
_PART = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(%|ns|us|µs|ms|s)\s*$")


def parse_threshold(text: str) -> Threshold:
    """``"1us,1%"``, ``"5%"`` or ``"0.5ms"`` → a :class:`Threshold`; a part not given keeps its default."""
    default = Threshold()
    abs_ns, rel = default.abs_ns, default.rel
    if text.strip() == "0":  # (no unit needed for nothing: every change is one)
        return Threshold(abs_ns=0, rel=0.0)
    parts = [p for p in text.split(",") if p.strip()]
    if not parts:
        raise UsageError("--threshold", f"{text!r} is empty; write e.g. '1us,1%', '5%' or '0.5ms'")
    for part in parts:
        m = _PART.match(part)
        if not m:
            raise UsageError(
                "--threshold", f"{part.strip()!r} is not a share or a duration; write e.g. '1us,1%', '5%' or '0.5ms'"
            )
        value, unit = float(m.group(1)), m.group(2)
        if unit == "%":
            rel = value / 100.0
        else:
            abs_ns = round(value * _UNITS[unit])
    return Threshold(abs_ns=abs_ns, rel=rel)


@dataclass(frozen=True)
class ItemDiff:
    """One kind of work (kind + normalised name) in both traces. Times are summed durations (HTA's cumulative
    time: nested or concurrent instances each count), ns."""

    kind: str
    name: str
    count_a: int
    count_b: int
    time_a_ns: int
    time_b_ns: int
    change: str  # one of CHANGES

    @property
    def diff_ns(self) -> int:
        return self.time_b_ns - self.time_a_ns

    @property
    def count_diff(self) -> int:
        return self.count_b - self.count_a

    @property
    def ratio(self) -> float | None:
        """B's total over A's (None where A's is 0)."""
        return self.time_b_ns / self.time_a_ns if self.time_a_ns else None

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "count_diff": self.count_diff, "diff_ns": self.diff_ns, "ratio": self.ratio}


@dataclass(frozen=True)
class DeviceFigures:
    """The headline figures of one GPU in one trace (the definitions of ``tracer summary``), ns."""

    compute_ns: int = 0
    copy_ns: int = 0
    overlap_ns: int = 0
    busy_ns: int = 0
    idle_ns: int = 0
    kernels: int = 0
    memcpys: int = 0
    #: the ``launches`` analysis' figures of the GPU (did it wait for the host?): calls that queued work on it,
    #: the median launch delay, and the launches that found their stream's queue empty
    launches: int = 0
    launch_delay_p50_ns: int = 0
    empty_at_launch: int = 0

    @property
    def empty_queue_frac(self) -> float | None:
        """Share of launches that found their stream's queue empty (None without launches)."""
        return self.empty_at_launch / self.launches if self.launches else None

    @property
    def copy_hidden_frac(self) -> float | None:
        """Share of copy time hidden behind compute (None without copies): the one definition,
        :func:`tracer.analysis.overlap.hidden_frac`."""
        return hidden_frac(self.overlap_ns, self.copy_ns)

    @property
    def exposed_copy_ns(self) -> int:
        return self.copy_ns - self.overlap_ns

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "copy_hidden_frac": self.copy_hidden_frac, "empty_queue_frac": self.empty_queue_frac}


@dataclass(frozen=True)
class DeviceDiff:
    device: int
    a: DeviceFigures
    b: DeviceFigures
    rank: int = 0

    @property
    def key(self) -> DeviceKey:
        return DeviceKey(self.rank, self.device)

    def as_dict(self, multi_rank: bool = False) -> dict[str, Any]:
        """The GPU's figures in A and B; ``rank`` named only where a trace holds several ranks."""
        d = {"device": self.device, "a": self.a.as_dict(), "b": self.b.as_dict()}
        return {"rank": self.rank, **d} if multi_rank else d


@dataclass(frozen=True)
class AccountLine:
    """One place the time moved: ``what`` on ``where`` went from ``a_ns`` to ``b_ns``."""

    where: str  # "GPU 0 stream 17", "GPU 0", "host"
    what: str  # "kernels", "copies", "memsets", "exposed copy", "idle", "framework ops"
    a_ns: int
    b_ns: int
    text: str  # the line as the CLI prints it

    @property
    def delta_ns(self) -> int:
        return self.b_ns - self.a_ns

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "delta_ns": self.delta_ns}


@dataclass(frozen=True)
class TraceDiff:
    """Everything ``tracer diff`` reports; B is compared against A (differences are B − A)."""

    source_a: str
    source_b: str
    span_a_ns: int
    span_b_ns: int
    gpu_span_a_ns: int
    gpu_span_b_ns: int
    devices: list[DeviceDiff]
    #: every item, largest |time difference| first
    items: list[ItemDiff]
    #: where the time went, largest |change| first (only lines beyond the threshold of the span)
    account: list[AccountLine]
    #: the span's time by what ran at each instant (:mod:`tracer.analysis.states`), largest |change| first: the
    #: changes add up to :attr:`span_diff_ns`
    states: list[AccountLine] = field(default_factory=list)
    threshold: Threshold = field(default_factory=Threshold)
    exact_names: bool = False
    step: int | None = None
    #: what the comparison did that a reader should know (GPUs of different index paired)
    notes: list[str] = field(default_factory=list)
    #: whether A or B holds several ranks: GPUs are then paired by (rank, device) and named with their rank
    multi_rank: bool = False

    @property
    def span_diff_ns(self) -> int:
        return self.span_b_ns - self.span_a_ns

    def counts(self) -> dict[str, int]:
        """How many items fall in each class."""
        out = dict.fromkeys(CHANGES, 0)
        for item in self.items:
            out[item.change] += 1
        return out

    def by_change(self) -> dict[str, list[str]]:
        """Item names per class (HTA's ``ops_diff`` shape), each list sorted."""
        out: dict[str, list[str]] = {c: [] for c in CHANGES}
        for item in self.items:
            out[item.change].append(item.name)
        return {k: sorted(v) for k, v in out.items()}

    def as_dict(self) -> dict[str, Any]:
        return {
            "a": self.source_a,
            "b": self.source_b,
            "step": self.step,
            "notes": list(self.notes),
            "exact_names": self.exact_names,
            "threshold": {"abs_ns": self.threshold.abs_ns, "rel": self.threshold.rel, "rule": self.threshold.text()},
            "span_a_ns": self.span_a_ns,
            "span_b_ns": self.span_b_ns,
            "span_diff_ns": self.span_diff_ns,
            "gpu_span_a_ns": self.gpu_span_a_ns,
            "gpu_span_b_ns": self.gpu_span_b_ns,
            "devices": [d.as_dict(self.multi_rank) for d in self.devices],
            "states": [line.as_dict() for line in self.states],
            "account": [line.as_dict() for line in self.account],
            "counts": self.counts(),
            "items": [item.as_dict() for item in self.items],
        }


# ---------------------------------------------------------------------------------------------------- items


def item_keys(events: pd.DataFrame, *, exact_names: bool = False) -> pd.Series:
    """The name each row is matched by: copies by direction (``Memcpy HtoD``), memsets as ``Memset``, the rest by
    their (normalised) name."""
    names = events["name"].astype(str)
    if not exact_names:
        # normalise each distinct name once, not each row
        uniq = pd.unique(names)
        names = names.map(dict(zip(uniq, (normalise_name(n) for n in uniq))))
    kind = events["kind"].astype(str)
    copy_kind = events["copy_kind"].astype(str).replace("", "Other")
    names = names.where(kind != "memcpy", "Memcpy " + copy_kind)
    return names.where(kind != "memset", "Memset")


def item_table(events: pd.DataFrame, *, exact_names: bool = False) -> pd.DataFrame:
    """Per (kind, name): count and total_ns (summed durations)."""
    rows = events[events["kind"].isin(ITEM_KINDS)]
    if rows.empty:
        return pd.DataFrame({"kind": [], "name": [], "count": [], "total_ns": []}).astype(
            {"count": "int64", "total_ns": "int64"}
        )
    dur = (rows["end_ns"] - rows["start_ns"]).to_numpy(dtype=np.int64)
    iv.checked_sum(dur, "of durations (ns)")  # bounds every per-item total below
    df = pd.DataFrame({"kind": rows["kind"].astype(str).to_numpy(),
                       "name": item_keys(rows, exact_names=exact_names).to_numpy(), "dur": dur})
    g = df.groupby(["kind", "name"], sort=True)["dur"].agg(["size", "sum"]).reset_index()
    return g.rename(columns={"size": "count", "sum": "total_ns"}).astype({"count": "int64", "total_ns": "int64"})


def classify(count_a: int, count_b: int, time_a_ns: int, time_b_ns: int, threshold: Threshold) -> str:
    """HTA's five classes. Increased and decreased are about total time, the figure the table is sorted by: a
    time difference beyond the threshold decides; within it, a change in count does (HTA's rule, so a kernel
    that ran once more for no measurable time is still "increased"); else unchanged."""
    if count_a == 0:
        return "added" if count_b else "unchanged"
    if count_b == 0:
        return "removed"
    diff = time_b_ns - time_a_ns
    if abs(diff) > threshold.tolerance_ns(time_a_ns):
        return "increased" if diff > 0 else "decreased"
    if count_b != count_a:
        return "increased" if count_b > count_a else "decreased"
    return "unchanged"


def diff_items(a: pd.DataFrame, b: pd.DataFrame, *, threshold: Threshold, exact_names: bool = False) -> list[ItemDiff]:
    ta = item_table(a, exact_names=exact_names)
    tb = item_table(b, exact_names=exact_names)
    both = ta.merge(tb, on=["kind", "name"], how="outer", suffixes=("_a", "_b"))
    cols = ["count_a", "count_b", "total_ns_a", "total_ns_b"]
    both[cols] = both[cols].fillna(0).astype("int64")
    out = []
    for kind, name, ca, cb, sa, sb in zip(both["kind"], both["name"], *(both[c].tolist() for c in cols)):
        out.append(ItemDiff(str(kind), str(name), ca, cb, sa, sb, classify(ca, cb, sa, sb, threshold)))
    out.sort(key=lambda i: (-abs(i.diff_ns), -abs(i.count_diff), i.kind, i.name))
    return out


# ---------------------------------------------------------------------------------------------------- figures


def device_figures(events: pd.DataFrame) -> dict[DeviceKey, DeviceFigures]:
    launches = {DeviceKey(int(r["rank"]), int(r["device"])): r for r in launch_table(events).to_dict("records")}
    out = {}
    for d in device_overlap(events):
        gaps = idle_gaps(events, d.key)
        lx = launches.get(d.key, {})
        out[d.key] = DeviceFigures(
            compute_ns=d.compute_ns, copy_ns=d.copy_ns, overlap_ns=d.overlap_ns, busy_ns=d.busy_ns,
            idle_ns=int(gaps["gap_ns"].sum()) if len(gaps) else 0, kernels=d.kernels, memcpys=d.memcpys,
            launches=int(lx.get("launches", 0)), launch_delay_p50_ns=int(lx.get("delay_p50_ns", 0)),
            empty_at_launch=int(lx.get("empty_at_launch", 0)),
        )
    return out


_GROUPS = {"kernel": "kernels", "memcpy": "copies", "memset": "memsets"}


def _lane_totals(events: pd.DataFrame) -> dict[tuple[LaneKey, str], int]:
    """(lane, kernels | copies | memsets) -> the union of that work on the lane, ns."""
    work = gpu_work(events)
    out: dict[tuple[LaneKey, str], int] = {}
    kinds = work["kind"].to_numpy()
    for kind, what in _GROUPS.items():
        rows = work[kinds == kind]
        if rows.empty:
            continue
        code = pack(*(rows[c].to_numpy() for c in LANE_COLUMNS))
        totals = iv.grouped_union_total(code, rows["start_ns"].to_numpy(), rows["end_ns"].to_numpy())
        lanes = rows[list(LANE_COLUMNS)].drop_duplicates()
        key_of = dict(zip(pack(*(lanes[c].to_numpy() for c in LANE_COLUMNS)).tolist(),
                          (LaneKey(int(r), int(d), int(s)) for r, d, s in lanes.itertuples(index=False))))
        out.update({(key_of[int(k)], what): int(v) for k, v in totals.items()})
    return out


def _host_ops_ns(events: pd.DataFrame) -> int:
    ops = events[(events["kind"] == "cpu_op") & (events["device"] < 0)]
    return iv.total(iv.union(ops["start_ns"].to_numpy(), ops["end_ns"].to_numpy()))


def ms_text(ns: int) -> str:
    """Nanoseconds as milliseconds, three decimals (the CLI, the dashboard and the account write times so)."""
    return f"{ns / 1e6:,.3f}"


def signed_ms_text(ns: int) -> str:
    """A difference in nanoseconds as signed milliseconds, three decimals."""
    return f"{ns / 1e6:+,.3f}"


def ratio_text(r: float | None) -> str:
    """B / A as ``×1.54``; a dash where A is 0."""
    return "–" if r is None else f"×{r:,.2f}"


def _signed_ms(ns: int) -> str:
    return f"{signed_ms_text(ns)} ms"


def _pct(frac: float | None) -> str:
    return "–" if frac is None else f"{100 * frac:.0f}%"


def account(
    a: pd.DataFrame,
    b: pd.DataFrame,
    fa: dict[DeviceKey, DeviceFigures],
    fb: dict[DeviceKey, DeviceFigures],
    threshold: Threshold,
    *,
    multi_rank: bool = False,
) -> list[AccountLine]:
    """Where the time went: lanes (per kind of work), exposed copy and idle time per GPU, host operators.

    A line is kept when its change is beyond the threshold applied to the longer span, so that the lines left
    are the ones that can explain a change in span; largest |change| first.
    """
    lines: list[AccountLine] = []
    la, lb = _lane_totals(a), _lane_totals(b)
    for key in sorted(set(la) | set(lb)):
        lane, what = key
        va, vb = la.get(key, 0), lb.get(key, 0)
        note = " (not in A)" if key not in la else " (not in B)" if key not in lb else ""
        where = f"{device_title(lane.device_key, multi_rank)} stream {lane.stream}"
        lines.append(AccountLine(where, what, va, vb,
                                 f"{what} on {where} {_signed_ms(vb - va)}: {ms_text(va)} → {ms_text(vb)} ms{note}"))
    for dev in sorted(set(fa) | set(fb)):
        da, db = fa.get(dev, DeviceFigures()), fb.get(dev, DeviceFigures())
        gpu = device_title(dev, multi_rank)
        if da.copy_ns or db.copy_ns:
            lines.append(AccountLine(gpu, "exposed copy", da.exposed_copy_ns, db.exposed_copy_ns,
                                     f"copy not hidden on {gpu} {_signed_ms(db.exposed_copy_ns - da.exposed_copy_ns)}"
                                     f"; hidden behind compute {_pct(da.copy_hidden_frac)} → "
                                     f"{_pct(db.copy_hidden_frac)}"))
        lines.append(AccountLine(gpu, "idle", da.idle_ns, db.idle_ns,
                                 f"idle between work on {gpu} {_signed_ms(db.idle_ns - da.idle_ns)}: "
                                 f"{ms_text(da.idle_ns)} → {ms_text(db.idle_ns)} ms"))
    ha, hb = _host_ops_ns(a), _host_ops_ns(b)
    lines.append(AccountLine("host", "framework ops", ha, hb,
                             f"framework ops on the host (union over threads) {_signed_ms(hb - ha)}: "
                             f"{ms_text(ha)} → {ms_text(hb)} ms"))
    tol = threshold.tolerance_ns(max(span_ns(a), span_ns(b)))
    kept = [line for line in lines if abs(line.delta_ns) > tol]
    kept.sort(key=lambda line: (-abs(line.delta_ns), line.where, line.what))
    return kept


def state_lines(a: pd.DataFrame, b: pd.DataFrame) -> list[AccountLine]:
    """The span of A and of B by what ran at each instant (:func:`tracer.analysis.states.span_states`): one line
    per state either has time in, largest |change| first. Their changes add up to the change of span."""
    sa, sb = span_states(a), span_states(b)
    lines = [AccountLine("span", state, sa[state], sb[state],
                         f"{state} {_signed_ms(sb[state] - sa[state])}: {ms_text(sa[state])} → {ms_text(sb[state])} ms")
             for state in STATES if sa[state] or sb[state]]
    lines.sort(key=lambda line: -abs(line.delta_ns))
    return lines


# ---------------------------------------------------------------------------------------------------- steps


def select_step(events: pd.DataFrame, step: int, source: str = "") -> pd.DataFrame:
    """The rows of one profiler step (``ProfilerStep#<step>``), as HTA assigns iterations: host rows that start
    inside the step's range, and GPU rows launched by a runtime or driver call among them (the timeline's launch
    join: by rank, process and correlation id)."""
    name = f"ProfilerStep#{step}"
    names = events["name"].astype(str)
    marks = events[(events["kind"] == "range") & (names == name)]
    if marks.empty:
        found = sorted({int(m.group(1)) for m in (re.fullmatch(r"ProfilerStep#(\d+)", n) for n in pd.unique(
            names[events["kind"] == "range"])) if m})
        have = f"steps here: {', '.join(map(str, found[:10]))}{' …' if len(found) > 10 else ''}" if found else \
            "no ProfilerStep ranges at all: record with torch.profiler's schedule and prof.step()"
        raise UsageError(source, f"no {name} in this trace ({have})")
    lo, hi = int(marks["start_ns"].min()), int(marks["end_ns"].max())
    host = events["device"] < 0
    inside = host & (events["start_ns"] >= lo) & (events["start_ns"] < hi)
    calls = events.index[(inside & events["kind"].isin(CALL_KINDS)).to_numpy()]
    links = launch_links(events)
    launched = events.index.isin(links.loc[links["call_row"].isin(calls), "work_row"].to_numpy())
    return events[inside.to_numpy() | launched]


#: What a run's variant is replaced by in its ranges' names, where two runs of different variants are compared.
VARIANT = "<variant>"


def _variant(t: Timeline) -> str | None:
    """The variant a run directory's meta.json names (one variant, not "all"); None for a bare trace."""
    run = t.meta.extra.get("run")
    variant = run.get("variant") if isinstance(run, dict) else None
    return variant if isinstance(variant, str) and variant and variant != "all" else None


def _variant_named(events: pd.DataFrame, variant: str) -> pd.DataFrame:
    """``events`` with ``variant``, where a range's name holds it as a whole word, replaced by :data:`VARIANT`."""
    word = re.compile(rf"(?<![A-Za-z0-9]){re.escape(variant)}(?![A-Za-z0-9])")
    ranges = (events["kind"] == "range").to_numpy()
    if not ranges.any():
        return events
    names = events["name"].astype(str).to_numpy(dtype=object).copy()
    uniq = pd.unique(names[ranges])
    renamed = {n: word.sub(VARIANT, n) for n in uniq}
    names[ranges] = [renamed[n] for n in names[ranges]]
    return events.assign(name=names)


# ---------------------------------------------------------------------------------------------------- facade


def diff_timelines(
    a: Timeline,
    b: Timeline,
    *,
    threshold: Threshold | None = None,
    exact_names: bool = False,
    step: int | None = None,
) -> TraceDiff:
    """Compare ``b`` against ``a`` (differences are B − A). ``step``: only that ``ProfilerStep#`` of each."""
    threshold = threshold or Threshold()
    ea, eb = a.events, b.events
    if step is not None:
        ea = select_step(ea, step, a.meta.source)
        eb = select_step(eb, step, b.meta.source)
    notes = []
    multi_rank = is_multi_rank(ea) or is_multi_rank(eb)
    if not multi_rank:
        # Two traces of one rank each: their GPUs pair by index, whatever rank each trace names (comparing rank
        # 0's trace with rank 1's is comparing two runs of one program). Several ranks pair by (rank, device).
        ra, rb = (int(e["rank"].iloc[0]) if len(e) else 0 for e in (ea, eb))
        if ra != rb:
            eb = eb.assign(rank=np.full(len(eb), ra, dtype=eb["rank"].dtype))
    # Two ranks of one job, or one job run on another GPU: each trace has a single GPU, but not the same index.
    # Matched by index they would share nothing; compare them as one GPU (under A's index) and say so.
    da, db = device_keys(ea), device_keys(eb)
    if len(da) == 1 and len(db) == 1 and da != db:
        gpu = (eb["device"] >= 0).to_numpy()
        eb = eb.assign(device=np.where(gpu, da[0].device, eb["device"]).astype(eb["device"].dtype),
                       rank=np.where(gpu, da[0].rank, eb["rank"]).astype(eb["rank"].dtype))
        notes.append(f"B's only GPU ({device_label(db[0], multi_rank)}) is compared with A's only GPU "
                     f"({device_label(da[0], multi_rank)}), under A's index")
    items_a, items_b = ea, eb
    va, vb = _variant(a), _variant(b)
    if va and vb and va != vb and not exact_names:
        # Two variants of one scenario name their ranges after the variant ("compute-copy/run+copy-blocking"):
        # matched by name they would be one range removed and another added, the largest rows of the diff.
        items_a, items_b = _variant_named(ea, va), _variant_named(eb, vb)
        notes.append(f"ranges named after the run's variant ({va} in A, {vb} in B) are matched as one, "
                     f"named with {VARIANT}")
    fa, fb = device_figures(ea), device_figures(eb)
    devices = [DeviceDiff(d.device, fa.get(d, DeviceFigures()), fb.get(d, DeviceFigures()), rank=d.rank)
               for d in sorted(set(fa) | set(fb))]
    return TraceDiff(
        source_a=a.meta.source,
        source_b=b.meta.source,
        span_a_ns=span_ns(ea),
        span_b_ns=span_ns(eb),
        gpu_span_a_ns=gpu_span_ns(ea),
        gpu_span_b_ns=gpu_span_ns(eb),
        devices=devices,
        items=diff_items(items_a, items_b, threshold=threshold, exact_names=exact_names),
        account=account(ea, eb, fa, fb, threshold, multi_rank=multi_rank),
        states=state_lines(ea, eb),
        threshold=threshold,
        exact_names=exact_names,
        step=step,
        notes=notes,
        multi_rank=multi_rank,
    )
