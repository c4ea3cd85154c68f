"""A stored job's views answered from its dataset (tracer/job/store.py), not from its traces and not with the job in
one frame: ``tracer sql --job`` scans the ranks' partitions in place, and its answers are those of the job read
whole. Once the job is stored, the traces are never parsed again (the parse is made to fail) and the job is never
read as one timeline (that is made to fail too)."""

from __future__ import annotations

import gzip
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

GLOO_RANKS = [Path(__file__).parent / "data" / "comm" / f"gloo_rank{r}.json.gz" for r in (0, 1)]


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


def test_diff_of_two_ranks_of_a_stored_job_reads_their_partitions(
    job_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = _files(job_dir)
    from_traces = cli_main("diff", str(a), str(b), "--json", "--no-cache")
    assert from_traces.returncode == 0, from_traces.stderr
    assert store_job(_files(job_dir)) is not None

    from tracer.cli import diff as diff_cli

    parsed: list[Path] = []
    real = getattr(diff_cli, "load_trace")  # noqa: B009 - (the module's own name for it, replaced below)

    def counted(path: Path, **kw: object) -> object:
        parsed.append(path)
        return real(path, **kw)

    monkeypatch.setattr(diff_cli, "load_trace", counted)
    from_store = cli_main("diff", str(a), str(b), "--json")
    assert from_store.returncode == 0, from_store.stderr
    assert json.loads(from_store.stdout) == json.loads(from_traces.stdout)
    assert parsed == []
    a.write_bytes(a.read_bytes())  # (the same bytes, a new ctime: the hash decides, and it matches)
    assert cli_main("diff", str(a), str(b), "--json").returncode == 0 and parsed == []
    data = json.loads(gzip.decompress(a.read_bytes()))
    data["traceEvents"] = data["traceEvents"][:-10]
    a.write_bytes(gzip.compress(json.dumps(data).encode()))  # (changed since: parsed, not served from the store)
    assert cli_main("diff", str(a), str(b), "--json").returncode == 0
    assert parsed == [a]


def _without_ids(doc: object) -> object:
    """An explain --json document without the graph's node and timeline row numbers (a job read near a window
    numbers its nodes and rows among the rows it read) and the job's note of where it was read from."""
    if isinstance(doc, dict):
        return {k: _without_ids(v) for k, v in doc.items() if k not in ("node", "nodes", "row", "rows")}
    if isinstance(doc, list):
        return [_without_ids(v) for v in doc]
    return doc


@pytest.mark.parametrize("window", ["0:5", "40:60", "100:", ":30", "12:20", "0:2000"])
def test_explain_of_a_large_job_s_window_reads_its_stored_rows_near_it(
    job_dir: Path, monkeypatch: pytest.MonkeyPatch, window: str
) -> None:
    # (the kernels' launch figures are in the traces, not the dataset: the job read whole is explained without them)
    monkeypatch.setattr("tracer.cli.explain.read_launches", lambda *_a: ())
    whole = cli_main("explain", str(job_dir), "--window", window, "--json", "--no-cache")
    assert whole.returncode == 0, whole.stderr
    monkeypatch.setattr(jobstore, "LARGE_JOB_BYTES", 0)  # (the HTA pair read as a job too large to read whole)
    assert store_job(_files(job_dir)) is not None
    _no_parse_and_no_whole_job(monkeypatch)
    near = cli_main("explain", str(job_dir), "--window", window, "--json")
    assert near.returncode == 0, near.stderr
    assert "read from its stored dataset near the window" in near.stderr
    a, b = json.loads(whole.stdout), json.loads(near.stdout)
    assert b["pieces"] > 0 and b["job"]["ranks"] == [0, 1]
    assert _without_ids(b) == _without_ids(a)


@pytest.mark.parametrize("window", ["0:1", "300:330", "330:"])
def test_explain_of_a_large_gloo_job_s_window_equals_the_whole_job_s(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, window: str
) -> None:
    monkeypatch.setattr(jobstore, "CACHE_MIN_BYTES", 0)
    for p in GLOO_RANKS:
        shutil.copy(p, tmp_path / p.name)
    monkeypatch.setattr("tracer.cli.explain.read_launches", lambda *_a: ())
    whole = cli_main("explain", str(tmp_path), "--window", window, "--json", "--no-cache")
    assert whole.returncode == 0, whole.stderr
    monkeypatch.setattr(jobstore, "LARGE_JOB_BYTES", 0)
    near = cli_main("explain", str(tmp_path), "--window", window, "--json")
    assert near.returncode == 0, near.stderr
    assert _without_ids(json.loads(near.stdout)) == _without_ids(json.loads(whole.stdout))


def test_a_large_job_is_explained_a_window_at_a_time(job_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jobstore, "LARGE_JOB_BYTES", 0)
    for extra in ([], ["--range", "ProfilerStep"], ["--window", "0:5", "--clock-fix"]):
        out = cli_main("explain", str(job_dir), *extra)
        assert out.returncode == 2, out.stderr
        assert "explained a window at a time" in out.stderr
        assert len(out.stderr.strip().splitlines()) == 1
