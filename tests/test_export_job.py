"""``tracer export`` of a job's run directory (``traces/``, one trace per rank): every format keeps the ranks
apart, and the nsys SQLite export keeps NCCL kernels as kernels (issue 9, part 2)."""

from __future__ import annotations

import gzip
import json
import sqlite3
from pathlib import Path

import pytest
from job_runs import GLOO_RANKS, HTA_RANKS, make_job_run  # tests/job_runs.py

from tracer.cli import main
from tracer.exporters import export_timeline
from tracer.parsers import load_trace
from tracer.timeline import Timeline


@pytest.fixture(scope="module")
def hta_job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_job_run(tmp_path_factory.mktemp("job") / "hta", HTA_RANKS)


def _chrome(path: Path) -> list[dict]:
    doc = json.loads(gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes())
    return doc["traceEvents"]


def _nccl_per_rank(events) -> dict[int, int]:
    k = events[(events["kind"] == "kernel") & events["name"].str.startswith("nccl")]
    return {int(r): int(n) for r, n in k.groupby("rank").size().items()}


def test_chrome_export_of_a_job_keeps_each_rank_on_its_own_tracks(hta_job: Path, tmp_path: Path) -> None:
    out = tmp_path / "job.json.gz"
    assert main(["export", str(hta_job), "-o", str(out)]) == 0
    events = _chrome(out)
    names = {(e["pid"], e.get("tid")): e["args"]["name"] for e in events if e.get("ph") == "M"
             and e["name"] in ("process_name", "thread_name")}
    kernels = [e for e in events if e.get("cat") == "kernel"]
    ranks_of_pid: dict[int, set[int]] = {}
    for e in kernels:
        ranks_of_pid.setdefault(e["pid"], set()).add(e["args"]["rank"])
    assert all(len(r) == 1 for r in ranks_of_pid.values())  # no GPU track mixes ranks
    assert {r for rs in ranks_of_pid.values() for r in rs} == {0, 1}
    for pid, (rank,) in ranks_of_pid.items():
        assert names[(pid, 0)].startswith(f"rank {rank} · GPU")
    # the same NCCL kernels on the same ranks as the job's timeline (args.rank, with every row's real pid in
    # args.tracer_pid: what tracer reads back, below)
    job = load_trace(hta_job, cache=False)
    nccl: dict[int, int] = {}
    for e in kernels:
        if e["name"].startswith("nccl"):
            nccl[e["args"]["rank"]] = nccl.get(e["args"]["rank"], 0) + 1
    assert nccl == _nccl_per_rank(job.events) == {0: 10, 1: 10}


def test_chrome_export_keeps_ranks_apart_when_both_use_gpu_0(hta_job: Path, tmp_path: Path) -> None:
    """Ranks on separate hosts each run on their GPU 0: the two GPUs must still be two tracks."""
    job = load_trace(hta_job, cache=False)
    ev = job.events.copy()
    ev.loc[ev["device"] == 1, "device"] = 0
    out = tmp_path / "gpu0.json"
    export_timeline(Timeline(ev, job.meta), out)
    kernels = [e for e in _chrome(out) if e.get("cat") == "kernel"]
    pids = {r: {e["pid"] for e in kernels if e["args"]["rank"] == r} for r in (0, 1)}
    assert pids[0] and pids[1] and not pids[0] & pids[1]


@pytest.mark.slow
def test_nsys_export_of_a_job_keeps_nccl_kernels_as_kernels_per_rank(hta_job: Path, tmp_path: Path) -> None:
    out = tmp_path / "job.sqlite"
    assert main(["export", str(hta_job), "-o", str(out)]) == 0
    con = sqlite3.connect(out)
    rows = con.execute(
        "SELECT k.globalPid, k.deviceId, count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k "
        "JOIN StringIds s ON s.id = k.demangledName WHERE s.value LIKE 'nccl%' GROUP BY 1, 2 ORDER BY 2"
    ).fetchall()
    con.close()
    # one process per rank, each with its 10 NCCL kernels on its own GPU
    assert [(dev, n) for _, dev, n in rows] == [(0, 10), (1, 10)]
    assert rows[0][0] != rows[1][0]
    assert _nccl_per_rank(load_trace(out, cache=False).events) == {0: 10, 1: 10}


@pytest.mark.slow
def test_every_format_exports_a_cpu_job(tmp_path: Path) -> None:
    run = make_job_run(tmp_path / "gloo", GLOO_RANKS)
    job = load_trace(run, cache=False)
    for name in ("job.json", "job.sqlite", "job.parquet", "job.nvtxt"):
        assert main(["export", str(run), "-o", str(tmp_path / name)]) == 0, name
    back = load_trace(tmp_path / "job.parquet", cache=False)
    assert sorted(back.events["rank"].unique().tolist()) == [0, 1]
    chrome = [e for e in _chrome(tmp_path / "job.json") if e.get("ph") == "X"]
    assert {e["args"]["rank"] for e in chrome} == {0, 1}
    assert len(chrome) == int(job.events["kind"].isin(["cpu_op", "range"]).sum())


@pytest.mark.slow
def test_nsys_export_gives_ranks_sharing_a_pid_and_a_gpu_their_own_processes(hta_job: Path, tmp_path: Path) -> None:
    """Regression: ranks in containers (the same pid) on their own GPU 0 were one process in the nsys export,
    their kernels and CUDA calls mixed."""
    job = load_trace(hta_job, cache=False)
    ev = job.events.copy()
    ev.loc[ev["rank"] == 1, "pid"] = 4037
    ev.loc[ev["device"] == 1, "device"] = 0
    out = tmp_path / "same.sqlite"
    result = export_timeline(Timeline(ev, job.meta), out)
    assert any("shared by several ranks were renumbered" in n for n in result.notes)
    con = sqlite3.connect(out)
    kernels = con.execute("SELECT globalPid, count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL GROUP BY 1 ORDER BY 1").fetchall()
    calls = con.execute("SELECT globalTid >> 24 & 16777215, count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME GROUP BY 1").fetchall()
    names = [n for (n,) in con.execute("SELECT name FROM PROCESSES ORDER BY name")]
    con.close()
    per_rank = ev[ev["kind"] == "kernel"].groupby("rank").size().tolist()
    assert sorted(n for _, n in kernels) == sorted(per_rank)  # two processes, each rank's kernels in its own
    assert len(calls) == 2
    assert [n.split(" · ")[0] for n in names] == ["rank 0", "rank 1"]
    # read back: every row on its rank and its own pid again (TRACER_META's process_ranks)
    back = load_trace(out, cache=False).events
    for col in ("rank", "pid"):
        assert back.groupby(["kind", col], observed=True).size().to_dict() == \
            ev.groupby(["kind", col], observed=True).size().to_dict()


def test_chrome_export_of_a_job_reads_back_with_every_row_on_its_rank(hta_job: Path, tmp_path: Path) -> None:
    """No lost data: a job's Chrome JSON read back by tracer is the job again (ranks, pids, per-GPU figures)."""
    from tracer.analysis.overlap import device_overlap

    out = tmp_path / "job.json.gz"
    assert main(["export", str(hta_job), "-o", str(out)]) == 0
    job = load_trace(hta_job, cache=False).events
    back = load_trace(out, cache=False).events
    key = ["rank", "kind", "device", "stream", "pid"]
    assert back.groupby(key, observed=True).size().to_dict() == job.groupby(key, observed=True).size().to_dict()
    assert _nccl_per_rank(back) == {0: 10, 1: 10}
    assert device_overlap(back) == device_overlap(job)


@pytest.mark.slow
@pytest.mark.parametrize("given", ["files", "folder", "run"])
def test_export_job_of_rank_traces_reads_back_as_the_job(tmp_path: Path, capsys: pytest.CaptureFixture,
                                                           given: str) -> None:
    # `export` took one trace or a job's run directory; a job's rank traces (or a folder of them) were refused
    import shutil

    folder = tmp_path / "traces"
    folder.mkdir()
    for p in HTA_RANKS:
        shutil.copy(p, folder / p.name)
    files = sorted(folder.iterdir())
    paths = {"files": files, "folder": [folder], "run": [make_job_run(tmp_path / "run", HTA_RANKS)]}[given]
    out = tmp_path / "job.sqlite"
    assert main(["export", "--job", "--no-cache", *map(str, paths), "-o", str(out)]) == 0
    assert capsys.readouterr().err.startswith(f"wrote {out} (nsys-sqlite): 2,258 kernels")
    assert main(["summary", "--json", str(out)]) == 0
    back = json.loads(capsys.readouterr().out)
    assert main(["summary", "--json", "--no-cache", "--job", *map(str, files)]) == 0
    want = json.loads(capsys.readouterr().out)
    assert sorted(back["devices"]) == ["0/0", "1/1"]
    assert {k: v for k, v in back.items() if k not in ("format", "source")} == \
        {k: v for k, v in want.items() if k not in ("format", "source")}


def test_export_of_several_paths_needs_job(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["export", *map(str, HTA_RANKS), "-o", str(tmp_path / "j.sqlite")]) == 2
    assert capsys.readouterr().err == (f"tracer: error: {HTA_RANKS[1]}: one PATH is exported at a time; several "
                                       "that are one job's ranks: add --job\n")
    assert not (tmp_path / "j.sqlite").exists()
