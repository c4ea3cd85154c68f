"""An Nsight Systems report of several processes that ran GPU work is read as the ranks of one job
(tracer/parsers/nsys.py, ``_process_ranks``): tests/data/nsys_two_ranks.sqlite.gz, a real report of two processes
on one H100 (tests/data/record_nsys_ranks.py; FIXTURES.md)."""

from __future__ import annotations

import gzip
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from tracer.analysis.summary import analyze
from tracer.exporters import export_timeline
from tracer.parsers import load_trace

DATA = Path(__file__).parent / "data"
TWO = DATA / "nsys_two_ranks.sqlite.gz"


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("two") / "two.sqlite"
    with gzip.open(TWO) as src, open(out, "wb") as dst:
        shutil.copyfileobj(src, dst)
    return out


def _union_ns(start: np.ndarray, end: np.ndarray) -> int:
    """Length of the union of [start, end) intervals, in plain numpy (independent of tracer's interval code)."""
    order = np.argsort(start, kind="stable")
    s, e = start[order], end[order]
    reach = np.maximum.accumulate(e)
    new = np.r_[True, s[1:] > reach[:-1]]
    ids = np.cumsum(new) - 1
    lo = s[new]
    hi = np.zeros(lo.size, dtype=np.int64)
    np.maximum.at(hi, ids, e)
    return int((hi - lo).sum())


def test_each_process_with_gpu_work_is_a_rank_with_its_own_figures(plain: Path) -> None:
    con = sqlite3.connect(plain)
    rows = con.execute('SELECT "start", "end", ("globalPid" >> 24) & 16777215 FROM CUPTI_ACTIVITY_KIND_KERNEL')
    kernels = np.array(rows.fetchall(), dtype=np.int64)
    con.close()
    pids = sorted(set(kernels[:, 2].tolist()))
    assert len(pids) == 2  # (both processes on GPU 0: numbered by pid)
    timeline = load_trace(TWO, cache=False)
    ev = timeline.events
    assert sorted(ev["rank"].unique().tolist()) == [0, 1]
    summary = analyze(timeline).to_dict()
    assert sorted(summary["devices"]) == ["0/0", "1/0"]
    for rank, pid in enumerate(pids):
        mine = kernels[kernels[:, 2] == pid]
        assert summary["devices"][f"{rank}/0"]["kernels"] == len(mine) == 14
        assert summary["devices"][f"{rank}/0"]["compute_ns"] == _union_ns(mine[:, 0], mine[:, 1])
        # every row of the process is on its rank: its CUDA calls and NVTX ranges too
        assert set(ev.loc[ev["pid"] == pid, "rank"].unique().tolist()) == {rank}
    # rank 1 multiplied 3× the rows: the straggler, as recorded
    assert summary["devices"]["1/0"]["compute_ns"] > 2.5 * summary["devices"]["0/0"]["compute_ns"]
    # one stream 7 per process, not one lane holding both
    lanes = {(lane["rank"], lane["device"], lane["stream"]) for lane in summary["lanes"]}
    assert {(0, 0, 7), (1, 0, 7)} <= lanes
    (note,) = [n for n in timeline.meta.extra["notes"] if "processes ran GPU work" in n]
    assert note == (f"2 processes ran GPU work: read as the ranks of one job (rank 0 = pid {pids[0]}, rank 1 = pid "
                    f"{pids[1]}; numbered by the first GPU each used, then pid)")


def test_a_report_of_one_process_stays_on_rank_0() -> None:
    timeline = load_trace(DATA / "nsys_compute_copy.sqlite.gz", cache=False)
    assert set(timeline.events["rank"].unique().tolist()) == {0}
    assert not any("processes ran GPU work" in n for n in timeline.meta.extra.get("notes") or [])


def test_its_export_reads_back_on_the_same_ranks(tmp_path: Path) -> None:
    timeline = load_trace(TWO, cache=False)
    for name in ("back.sqlite", "back.json.gz", "back.parquet"):
        export_timeline(timeline, tmp_path / name)
        back = analyze(load_trace(tmp_path / name, cache=False)).to_dict()
        assert back["devices"] == analyze(timeline).to_dict()["devices"], name
