"""A stored job's views answered from its dataset (tracer/job/store.py), not from its traces and not with the job in
one frame: ``tracer sql --job`` scans the ranks' partitions in place, and its answers are those of the job read
whole. Once the job is stored, the traces are never parsed again (the parse is made to fail) and the job is never
read as one timeline (that is made to fail too)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import cli_main
from tracer.job import rank_tasks
from tracer.job import read as jobread
from tracer.job import store as jobstore
from tracer.job.load import load_job, store_job
from tracer.sql import Partitions, Session

EXTERNAL = Path(__file__).parent / "data" / "external"
HTA_RANKS = [EXTERNAL / f"HTA_trace_filter_sampled_rank-{r}.json.gz" for r in (0, 1)]


@pytest.fixture()
def job_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """HTA's two rank traces in a folder of their own, stored (small as they are) on their first open."""
    monkeypatch.setattr(jobstore, "CACHE_MIN_BYTES", 0)
    d = tmp_path / "job"
    d.mkdir()
    for p in HTA_RANKS:
        shutil.copy(p, d / p.name)
    return d


def _files(d: Path) -> list[Path]:
    return sorted(d.glob("*.json.gz"))


def _no_parse_and_no_whole_job(monkeypatch: pytest.MonkeyPatch) -> None:
    """From here on, parsing a rank or reading the job as one timeline fails the test."""

    def refuse(*_a: object, **_k: object) -> None:
        raise AssertionError("read from the traces, or the job read whole")

    monkeypatch.setattr(rank_tasks, "parse_group", refuse)
    monkeypatch.setattr(rank_tasks, "merge_group", refuse)
    monkeypatch.setattr(jobread, "job_timeline", refuse)


QUERIES = [
    "SELECT rank, kind, count(*) AS n, sum(dur_ns) AS ns, min(start_ns) AS lo, max(end_ns) AS hi FROM events "
    "GROUP BY ALL ORDER BY ALL",
    "SELECT rank, device, stream, count(*) AS n, sum(dur_ns) AS ns FROM kernels GROUP BY ALL ORDER BY ALL",
    "SELECT * FROM lanes ORDER BY rank, device, stream",
    "SELECT rank, name, count(*) AS n, sum(gpu_busy_ns) AS busy, sum(kernels) AS k FROM range_gpu GROUP BY ALL "
    "ORDER BY ALL",
    "SELECT rank, collective, count(*) AS n FROM comm GROUP BY ALL ORDER BY ALL",
    "SELECT * FROM gpus ORDER BY device",
]


def test_sql_over_a_stored_job_scans_its_partitions_and_answers_as_the_whole_job(
    job_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    whole = load_job(_files(job_dir), cache=False)
    stored = store_job(_files(job_dir))
    assert stored is not None and stored.ranks == [0, 1]
    assert [f.parent.name for f in stored.files] == ["rank=0", "rank=1"]
    _no_parse_and_no_whole_job(monkeypatch)
    label = str(job_dir)
    whole.meta.source = label
    with Session(Partitions(label, stored.files)) as in_place, Session(whole) as in_memory:
        for q in QUERIES:
            a, b = in_place.query(q), in_memory.query(q)
            assert len(a) or "gpus" in q, q
            pd.testing.assert_frame_equal(a, b, check_dtype=False, obj=q)
        with pytest.raises(Exception, match="tracer lines"):
            in_place.query("SELECT * FROM source_lines")
    assert store_job(_files(job_dir), ranks=[1]) is not None  # (read back: the parse would fail the test)


def test_cli_sql_job_stores_the_job_then_answers_from_it(job_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    q = "SELECT rank, count(*) AS n FROM kernels GROUP BY rank ORDER BY rank"
    first = cli_main("sql", "--job", str(job_dir), q, "--format", "json")
    assert first.returncode == 0, first.stderr
    assert "cached the parsed job" in first.stderr
    rows = json.loads(first.stdout)
    assert [r["rank"] for r in rows] == [0, 1] and all(r["n"] > 0 for r in rows)
    _no_parse_and_no_whole_job(monkeypatch)
    again = cli_main("sql", "--job", str(job_dir), q, "--format", "json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout) == rows
    source = cli_main("sql", "--job", str(job_dir), "SELECT DISTINCT source FROM events", "--format", "csv")
    assert source.stdout.splitlines() == ["source", str(job_dir)]


def test_cli_sql_job_without_a_store_reads_the_job_whole(job_dir: Path) -> None:
    q = "SELECT rank, count(*) AS n FROM kernels GROUP BY rank ORDER BY rank"
    stored = cli_main("sql", "--job", str(job_dir), q, "--format", "json")
    fresh = cli_main("sql", "--job", "--no-cache", str(job_dir), q, "--format", "json")
    assert fresh.returncode == 0, fresh.stderr
    assert json.loads(fresh.stdout) == json.loads(stored.stdout)
