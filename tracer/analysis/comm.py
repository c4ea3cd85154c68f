"""Communication beside computation: per GPU, and per collective across the ranks of a job.

Per GPU (a (rank, device)): compute = union of its kernels that are not communication; comm = union of its
communication kernels (NCCL / RCCL: rows whose ``collective`` is set, :mod:`tracer.timeline.comm`); overlap =
their intersection (comm hidden behind compute); exposed comm = comm − overlap.

Collectives: each instance of a collective is matched across ranks, by (process group, sequence number) where
the trace says them, else by order: the k-th ``allreduce`` of process group P on one rank is the k-th on every
other. On GPUs an instance is a rank's comm kernel(s); in a job without comm kernels (gloo on the CPU) it is the
rank's ``gloo:*`` / ``nccl:*`` host range, else its ``record_param_comms`` op. For each instance: the start skew
across ranks (latest start − earliest), the straggler (the rank that started last: the others waited for it),
its duration (the straggler's: once it arrived the collective ran), message size, and NCCL-tests' algorithm and
bus bandwidth.

Clocks: a collective cannot end on one rank before it started on another. Each matched instance bounds the
offset between two ranks' clocks; :func:`clock_offsets` reports, per rank against the lowest rank, the interval
of offsets every instance allows and the smallest shift into it (0 where the clocks are consistent).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracer.analysis import intervals as iv
from tracer.timeline import KINDS, DeviceKey

#: NCCL-tests' bus bandwidth factor per collective, for a group of n ranks (doc/PERFORMANCE.md there):
#: allreduce 2(n−1)/n; allgather, reducescatter, alltoall (n−1)/n; broadcast, reduce, point-to-point 1.
_BUS_FACTOR: dict[str, Callable[[int], float]] = {
    "allreduce": lambda n: 2 * (n - 1) / n,
    "allgather": lambda n: (n - 1) / n,
    "reducescatter": lambda n: (n - 1) / n,
    "alltoall": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
    "sendrecv": lambda n: 1.0,
    "send": lambda n: 1.0,
    "recv": lambda n: 1.0,
}


def bus_factor(collective: str, n: int) -> float | None:
    """NCCL-tests' busbw / algbw for ``collective`` over ``n`` ranks; None where it defines none (barrier,
    unknown collectives) or n < 1."""
    f = _BUS_FACTOR.get(collective)
    return f(n) if f is not None and n >= 1 else None


# ---------------------------------------------------------------------------------------------------- per GPU


@dataclass(frozen=True)
class DeviceComm:
    """Compute beside communication on one GPU, ns and counts."""

    rank: int
    device: int
    compute_ns: int
    comm_ns: int
    overlap_ns: int
    kernels: int  # compute kernels (not comm)
    comm_kernels: int

    @property
    def key(self) -> DeviceKey:
        return DeviceKey(self.rank, self.device)

    @property
    def exposed_comm_ns(self) -> int:
        """Comm time not hidden behind compute: the GPU did nothing but communicate."""
        return self.comm_ns - self.overlap_ns

    @property
    def comm_hidden_pct(self) -> float | None:
        """overlap / comm in percent (HTA's ``comp_comm_overlap_pctg``); None without comm."""
        return 100.0 * self.overlap_ns / self.comm_ns if self.comm_ns else None

    def as_dict(self) -> dict[str, int]:
        return {
            "compute_ns": self.compute_ns, "comm_ns": self.comm_ns, "overlap_ns": self.overlap_ns,
            "exposed_comm_ns": self.exposed_comm_ns, "kernels": self.kernels, "comm_kernels": self.comm_kernels,
        }

    @classmethod
    def from_dict(cls, key: DeviceKey, d: dict[str, int]) -> DeviceComm:
        return cls(key.rank, key.device, *(int(d.get(k, 0)) for k in (
            "compute_ns", "comm_ns", "overlap_ns", "kernels", "comm_kernels")))


def comm_total(gpus: list[DeviceComm]) -> DeviceComm:
    """Every GPU's figures summed (GPU-time: two GPUs busy for 1 s are 2 s): the job's, or a process's over its
    GPUs; rank and device -1. Each sum is checked (:func:`tracer.analysis.intervals.checked_sum`)."""
    def total(attr: str) -> int:
        return iv.checked_sum(np.array([getattr(g, attr) for g in gpus], dtype=np.int64), f"{attr} over the GPUs")

    return DeviceComm(-1, -1, total("compute_ns"), total("comm_ns"), total("overlap_ns"), total("kernels"),
                      total("comm_kernels"))


def _kernels(events: pd.DataFrame) -> pd.DataFrame:
    return events[(events["kind"] == "kernel").to_numpy() & (events["device"] >= 0).to_numpy()]


def device_comm(events: pd.DataFrame) -> list[DeviceComm]:
    """Compute, comm, overlap and exposed comm for each GPU that ran kernels, by (rank, device); [] where no
    kernel is communication (the figures would only repeat the per-GPU table's)."""
    k = _kernels(events)
    is_comm = (k["collective"] != "").to_numpy()
    if not is_comm.any():
        return []
    out = []
    rank, device = k["rank"].to_numpy(), k["device"].to_numpy()
    start, end = k["start_ns"].to_numpy(), k["end_ns"].to_numpy()
    for r, d in sorted(set(zip(rank.tolist(), device.tolist()))):
        mine = (rank == r) & (device == d)
        comp, comm = mine & ~is_comm, mine & is_comm
        comp_set, comm_set = iv.union(start[comp], end[comp]), iv.union(start[comm], end[comm])
        out.append(DeviceComm(
            int(r), int(d), iv.total(comp_set), iv.total(comm_set), iv.total(iv.intersect(comp_set, comm_set)),
            int(comp.sum()), int(comm.sum()),
        ))
    return out


# ---------------------------------------------------------------------------------------------------- collectives


@dataclass(frozen=True)
class CollectiveStat:
    """One collective instance, matched across the ranks that ran it."""

    collective: str
    pg: str
    #: the sequence number where the trace gives it (matched by it), else the instance's place among the
    #: process group's collectives of this name on each rank (matched by that)
    seq: int
    matched_by: str  # "seq" | "order"
    where: str  # "gpu" (comm kernels) | "host" (host records)
    ranks: int  # ranks found running it
    group_size: int  # ranks the trace says take part (0: not said)
    start_ns: int  # earliest start over the ranks
    skew_ns: int  # latest start − earliest start
    straggler: int  # the rank that started last
    dur_ns: int  # the straggler's duration
    bytes: int | None  # message size (NCCL-tests' "size")
    algbw_gb_s: float | None
    busbw_gb_s: float | None

    def as_dict(self) -> dict[str, object]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}

    @classmethod
    def from_dict(cls, d: Mapping[str, object]) -> CollectiveStat:
        return cls(
            str(d.get("collective", "")), str(d.get("pg", "")), _int(d, "seq"), str(d.get("matched_by", "")),
            str(d.get("where", "")), _int(d, "ranks"), _int(d, "group_size"), _int(d, "start_ns"),
            _int(d, "skew_ns"), _int(d, "straggler"), _int(d, "dur_ns"),
            _opt_int(d, "bytes"), _opt_float(d, "algbw_gb_s"), _opt_float(d, "busbw_gb_s"),
        )


def _int(d: Mapping[str, object], key: str) -> int:
    v = d.get(key)
    return int(v) if isinstance(v, (int, float)) else 0


def _opt_int(d: Mapping[str, object], key: str) -> int | None:
    v = d.get(key)
    return int(v) if isinstance(v, int) else None


def _opt_float(d: Mapping[str, object], key: str) -> float | None:
    v = d.get(key)
    return float(v) if isinstance(v, (int, float)) else None


@dataclass(frozen=True)
class RankSkew:
    """One rank over every matched collective: how often it came last, how late it started on average (start −
    the instance's earliest start), and what the collectives say of its clock against the lowest rank's."""

    rank: int
    collectives: int
    straggler: int  # instances where it started last
    mean_late_ns: int
    max_late_ns: int
    #: offsets (ns to add to this rank's times) every matched instance allows: with any other, a collective
    #: would end on one rank before it started on the other; None where no instance is shared with the
    #: reference rank
    offset_lo_ns: int | None
    offset_hi_ns: int | None
    #: the smallest shift into [lo, hi] (0 where the clocks are consistent as they are); None where no single
    #: offset fits every instance (lo > hi: the matches contradict one another, e.g. process groups the trace
    #: does not name) or no instance is shared with the reference rank
    clock_fix_ns: int | None

    def as_dict(self) -> dict[str, object]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}

    @classmethod
    def from_dict(cls, d: Mapping[str, object]) -> RankSkew:
        return cls(_int(d, "rank"), _int(d, "collectives"), _int(d, "straggler"), _int(d, "mean_late_ns"),
                   _int(d, "max_late_ns"), _opt_int(d, "offset_lo_ns"), _opt_int(d, "offset_hi_ns"),
                   _opt_int(d, "clock_fix_ns"))


@dataclass(frozen=True)
class Collectives:
    """Every matched collective instance (in time order) and the per-rank skew."""

    rows: tuple[CollectiveStat, ...] = ()
    ranks: tuple[RankSkew, ...] = ()
    reference_rank: int = 0


def comm_rows(events: pd.DataFrame) -> pd.DataFrame:
    """The rows that are communication (``collective`` set): all :func:`instances` looks at, so that
    ``collectives(pd.concat([comm_rows(rank) for rank in job]))`` is ``collectives(job)``."""
    return events.iloc[np.flatnonzero(events["collective"].cat.codes.to_numpy() > 0)]


def instances(events: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """The rows that stand for one rank's part in one collective instance, with their matching key (columns
    rank, collective, pg, seq, key, matched_by, start_ns, end_ns, bytes, group_size, and ``row``: the row's
    index in ``events``), and where they were found ("gpu" or "host"; "" where the timeline has no
    communication)."""
    # (codes, not strings: the categoricals' categories are fixed, and a job's frame holds millions of rows)
    comm = events["collective"].cat.codes.to_numpy() > 0
    kind = events["kind"].cat.codes.to_numpy()
    on_gpu = comm & (kind == KINDS.index("kernel")) & (events["device"].to_numpy() >= 0)
    where = "gpu"
    rows = on_gpu
    if not rows.any():
        where = "host"
        rows = comm & (kind == KINDS.index("range"))
        if not rows.any():
            rows = comm & (kind == KINDS.index("cpu_op"))
    if not rows.any():
        return pd.DataFrame(), ""
    idx = np.flatnonzero(rows)  # (column by column: the few comm rows, not a copy of the whole frame)

    def col(name: str) -> pd.Series:
        return events[name].iloc[idx]

    df = pd.DataFrame({
        "rank": col("rank").to_numpy(np.int64),
        "collective": col("collective").astype(str).to_numpy(dtype=object),
        "pg": col("pg").astype(str).to_numpy(dtype=object),
        "seq": col("seq").to_numpy(dtype=np.float64, na_value=np.nan),
        "start_ns": col("start_ns").to_numpy(),
        "end_ns": col("end_ns").to_numpy(),
        "bytes": col("bytes").to_numpy(dtype=np.float64, na_value=np.nan),
        "group_size": col("group_size").to_numpy(np.int64),
        "row": events.index.to_numpy()[idx],
    })
    # host records: a wait() recorded as record_param_comms is no collective of its own
    df = df.sort_values(["rank", "start_ns", "end_ns"], kind="stable").reset_index(drop=True)
    by_seq = ~np.isnan(df["seq"].to_numpy())
    order = df.groupby(["rank", "pg", "collective"], sort=False).cumcount().to_numpy()
    seq = np.where(by_seq, np.nan_to_num(df["seq"].to_numpy()), order).astype(np.int64)
    df["seq"] = seq
    df["matched_by"] = np.where(by_seq, "seq", "order")
    # by seq: the process group and its number name the instance (the collective too, as a check); by order:
    # the process group, the collective and its place
    df["key"] = df.groupby(["matched_by", "pg", "collective", "seq"], sort=False).ngroup().to_numpy(np.int64)
    return df, where


def collectives(events: pd.DataFrame) -> Collectives:
    """Every collective instance matched across ranks, and the per-rank skew and clock bounds."""
    df, where = instances(events)
    if df.empty:
        return Collectives()
    # one rank's part: its earliest start, latest end (a collective split into several kernels is one part)
    part = df.groupby(["key", "rank"], sort=False).agg(
        collective=("collective", "first"), pg=("pg", "first"), seq=("seq", "first"),
        matched_by=("matched_by", "first"), start_ns=("start_ns", "min"), end_ns=("end_ns", "max"),
        bytes=("bytes", "max"), group_size=("group_size", "max"),
    ).reset_index()
    part["dur_ns"] = part["end_ns"] - part["start_ns"]
    g = part.groupby("key", sort=False)
    first = g["start_ns"].transform("min")
    part["late_ns"] = part["start_ns"] - first
    # the straggler: latest start (the lowest rank among equals)
    last = part.sort_values(["key", "start_ns", "rank"], ascending=[True, False, True]).drop_duplicates("key")
    inst = g.agg(
        collective=("collective", "first"), pg=("pg", "first"), seq=("seq", "first"),
        matched_by=("matched_by", "first"), ranks=("rank", "nunique"), group_size=("group_size", "max"),
        start_ns=("start_ns", "min"), last_start=("start_ns", "max"), bytes=("bytes", "max"),
    )
    inst = inst.join(last.set_index("key")[["rank", "dur_ns"]].rename(columns={"rank": "straggler"}))
    inst = inst.sort_values(["start_ns"], kind="stable")
    n = np.where(inst["group_size"].to_numpy() > 0, inst["group_size"].to_numpy(), inst["ranks"].to_numpy())
    dur = inst["dur_ns"].to_numpy(np.int64)
    size = inst["bytes"].to_numpy(np.float64)
    rows = []
    for i, (coll, pg, seq, by, ranks, gs, start, last_start, straggler) in enumerate(zip(
        inst["collective"].tolist(), inst["pg"].tolist(), inst["seq"].tolist(), inst["matched_by"].tolist(),
        inst["ranks"].tolist(), inst["group_size"].tolist(), inst["start_ns"].tolist(), inst["last_start"].tolist(),
        inst["straggler"].tolist(),
    )):
        nbytes = None if np.isnan(size[i]) else int(size[i])
        algbw = nbytes / int(dur[i]) if nbytes is not None and dur[i] > 0 else None  # bytes per ns = GB/s
        factor = bus_factor(str(coll), int(n[i]))
        rows.append(CollectiveStat(
            str(coll), str(pg), int(seq), str(by), where, int(ranks), int(gs), int(start), int(last_start - start),
            int(straggler), int(dur[i]), nbytes, None if algbw is None else round(algbw, 3),
            None if algbw is None or factor is None else round(algbw * factor, 3),
        ))
    return Collectives(tuple(rows), _rank_skew(part, last), int(part["rank"].min()))


def _rank_skew(part: pd.DataFrame, last: pd.DataFrame) -> tuple[RankSkew, ...]:
    shared = part[part.groupby("key")["rank"].transform("nunique") > 1]
    straggled = last[last["key"].isin(shared["key"])]["rank"].value_counts()
    bounds = clock_offsets(part)
    out = []
    for rank, mine in part.groupby("rank"):
        in_shared = mine[mine["key"].isin(shared["key"])]
        late = in_shared["late_ns"].to_numpy()
        lo, hi = bounds.get(int(rank), (None, None))
        fix = None if lo is None or hi is None or lo > hi else int(min(max(0, lo), hi))
        out.append(RankSkew(
            int(rank), int(len(in_shared)), int(straggled.get(rank, 0)),
            int(late.mean()) if late.size else 0, int(late.max()) if late.size else 0, lo, hi, fix,
        ))
    return tuple(out)


def clock_offsets(part: pd.DataFrame) -> dict[int, tuple[int | None, int | None]]:
    """Per rank, the offsets (ns to add to its times) that the collectives it shares with the lowest rank
    allow: for each shared instance, neither rank may end it before the other started it:
    ``start_r + x <= end_ref`` and ``start_ref <= end_r + x``, so x lies in [max(start_ref − end_r),
    min(end_ref − start_r)]. ``part``: one row per (key, rank) with start_ns / end_ns. The lowest rank's own
    interval is (0, 0); a rank sharing nothing with it gets (None, None). lo > hi means no single offset fits
    every instance (the clocks drift, or a match is wrong)."""
    ref = int(part["rank"].min())
    mine = part.loc[part["rank"] == ref, ["key", "start_ns", "end_ns"]]
    out: dict[int, tuple[int | None, int | None]] = {ref: (0, 0)}
    for rank, rows in part[part["rank"] != ref].groupby("rank"):
        j = rows[["key", "start_ns", "end_ns"]].merge(mine, on="key", suffixes=("", "_ref"), how="inner")
        if j.empty:
            out[int(rank)] = (None, None)
            continue
        lo = int((j["start_ns_ref"] - j["end_ns"]).max())
        hi = int((j["end_ns_ref"] - j["start_ns"]).min())
        out[int(rank)] = (lo, hi)
    return out


def shift_ranks(events: pd.DataFrame, offsets: dict[int, int]) -> pd.DataFrame:
    """``events`` with each rank's times moved by its offset (ns; ranks not named stay): e.g. the
    ``clock_fix_ns`` of :func:`collectives` (tracer does not apply it by itself: a shift that the matches
    imply is an estimate, and the figures stay on the clocks the traces were written with). A new frame; the one
    given is not changed."""
    out = events.copy()
    add = out["rank"].map({int(k): int(v) for k, v in offsets.items()}).fillna(0).to_numpy(np.int64)
    out["start_ns"] = out["start_ns"].to_numpy() + add
    out["end_ns"] = out["end_ns"].to_numpy() + add
    return out
