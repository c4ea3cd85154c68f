"""What ran on the GPUs: kernels by name, copies by (rank, device, direction) with bandwidth, idle gaps per GPU."""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracer.analysis import intervals as iv
from tracer.analysis.overlap import gpu_work, kind_mask, on_device
from tracer.timeline import DEVICE_COLUMNS, DeviceKey


def kind_counts(kind: pd.Series, keys: list[pd.Series]) -> pd.DataFrame:
    """Kernels, memcpys and memsets counted per key (the index: ``keys``' values, ascending), as int64 columns
    ``kernels``, ``memcpys``, ``memsets`` — what ``pd.crosstab(keys, kind)`` gives, without its pure-Python
    count per group (a quarter of a second over a job rank's 10,000 ranges)."""
    codes = kind.cat.codes.to_numpy()
    cats = list(kind.cat.categories)
    flags = {f"{k}s": codes == cats.index(k) if k in cats else np.zeros(len(codes), bool)
             for k in ("kernel", "memcpy", "memset")}
    return pd.DataFrame(flags, index=kind.index).groupby(keys).sum().astype("int64")


def kernel_summary(events: pd.DataFrame, top: int | None = None) -> pd.DataFrame:
    """Per kernel name: count, total/mean/min/max duration (ns) and share of all kernel time, longest first."""
    return kernels_by_total(kernel_totals(events), top)


def kernel_totals(events: pd.DataFrame) -> pd.DataFrame:
    """Per kernel name (the index, as text, ascending): count, total_ns, min_ns, max_ns; the sums a job's ranks
    compute apart and :func:`add_kernel_totals` adds up."""
    rows = np.flatnonzero(kind_mask(events["kind"], ("kernel",)) & (events["device"].to_numpy() >= 0))
    if not rows.size:
        return _no_totals()
    every = events["end_ns"].to_numpy()[rows] - events["start_ns"].to_numpy()[rows]
    iv.checked_sum(every, "kernel time (ns)")  # bounds every per-name total below
    name = events["name"].iloc[rows]
    if not isinstance(name.dtype, pd.CategoricalDtype):
        return _totals_by_text(every, name)
    # grouped on the name's integer codes (sorted, reduceat), not on the names made text row by row
    code = name.cat.codes.to_numpy()
    named = code >= 0  # (a missing name is no group, as pandas drops it)
    code, dur = code[named], every[named]
    if not code.size:
        return _no_totals()
    order = np.argsort(code, kind="stable")
    code, dur = code[order], dur[order]
    opens = np.flatnonzero(np.r_[True, code[1:] != code[:-1]])
    names = name.cat.categories[code[opens]].astype(str).rename("name")
    if not names.is_unique:  # (categories that read alike as text are one name: grouped on the text)
        return _totals_by_text(every, name)
    g = pd.DataFrame({
        "count": np.diff(np.r_[opens, code.size]),
        "total_ns": np.add.reduceat(dur, opens),
        "min_ns": np.minimum.reduceat(dur, opens),
        "max_ns": np.maximum.reduceat(dur, opens),
    }, index=names).astype("int64")
    return g.iloc[names.argsort(kind="stable")]


def _totals_by_text(dur: np.ndarray, name: pd.Series) -> pd.DataFrame:
    """:func:`kernel_totals` grouped on the names as text (pandas' groupby)."""
    g = pd.Series(dur, index=name.index, name="dur").groupby(name.astype(str)).agg(["size", "sum", "min", "max"])
    g.columns = list(_TOTALS)
    return g.astype("int64").rename_axis("name")


_TOTALS = ("count", "total_ns", "min_ns", "max_ns")


def _no_totals() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series([], dtype="int64") for c in _TOTALS},
                        index=pd.Index([], dtype=object, name="name"))


def add_kernel_totals(parts: list[pd.DataFrame]) -> pd.DataFrame:
    """Several :func:`kernel_totals` (a job's ranks) as one, as if computed over their rows together."""
    frames = [p for p in parts if len(p)]
    if len(frames) <= 1:
        return frames[0] if frames else _no_totals()
    g = pd.concat(frames).groupby(level="name").agg(
        count=("count", "sum"), total_ns=("total_ns", "sum"), min_ns=("min_ns", "min"), max_ns=("max_ns", "max"))
    iv.checked_sum(g["total_ns"], "kernel time (ns)")
    return g.astype("int64")


def kernels_by_total(totals: pd.DataFrame, top: int | None = None) -> pd.DataFrame:
    """:func:`kernel_totals` as :func:`kernel_summary` gives them: with mean and share, longest first."""
    cols = ["name", "count", "total_ns", "mean_ns", "min_ns", "max_ns", "share"]
    if totals.empty:
        return pd.DataFrame(columns=cols)
    g = totals.copy()
    # (total / count: what pandas' mean gives for integer durations, whose sums float64 holds exactly)
    g["mean_ns"] = (g["total_ns"] / g["count"]).round().astype("int64")
    g["share"] = g["total_ns"] / g["total_ns"].sum()
    g = g.sort_values("total_ns", ascending=False).reset_index()
    g = g[cols]
    return g.head(top) if top else g


def copy_summary(events: pd.DataFrame) -> pd.DataFrame:
    """Per (rank, device, copy direction): count, bytes, total duration and bandwidth in GB/s (bytes / busy
    time)."""
    c = events[(events["kind"] == "memcpy") & (events["device"] >= 0)]
    cols = [*DEVICE_COLUMNS, "copy_kind", "count", "bytes", "total_ns", "gb_per_s"]
    if c.empty:
        return pd.DataFrame(columns=cols)
    df = pd.DataFrame(
        {
            "rank": c["rank"].astype("int64"),
            "device": c["device"].astype("int64"),
            "copy_kind": c["copy_kind"].astype(str),
            "bytes": c["bytes"].fillna(0).astype("int64"),
            "dur": (c["end_ns"] - c["start_ns"]).astype("int64"),
        }
    )
    iv.checked_sum(df["bytes"], "of bytes copied")  # bounds every per-direction total below
    iv.checked_sum(df["dur"], "copy time (ns)")
    g = df.groupby([*DEVICE_COLUMNS, "copy_kind"]).agg(
        count=("dur", "size"), bytes=("bytes", "sum"), total_ns=("dur", "sum")
    )
    g["gb_per_s"] = np.where(g["total_ns"] > 0, g["bytes"] / g["total_ns"].clip(lower=1), 0.0)  # B/ns == GB/s
    return g.reset_index()[cols]


def idle_gaps(events: pd.DataFrame, device: int | DeviceKey, min_ns: int = 0) -> pd.DataFrame:
    """Stretches between a GPU's first and last work where it did nothing, longest first. ``device``: a
    :class:`DeviceKey`, or a bare index in a timeline of one rank (:func:`tracer.analysis.overlap.on_device`)."""
    work = on_device(gpu_work(events), device)
    s, e = iv.union(work["start_ns"].to_numpy(), work["end_ns"].to_numpy())
    if s.size < 2:
        return pd.DataFrame({"start_ns": [], "end_ns": [], "gap_ns": []}, dtype="int64")
    gaps = pd.DataFrame({"start_ns": e[:-1], "end_ns": s[1:]})
    gaps["gap_ns"] = gaps["end_ns"] - gaps["start_ns"]
    gaps = gaps[gaps["gap_ns"] >= max(min_ns, 1)]
    return gaps.sort_values("gap_ns", ascending=False, ignore_index=True)
