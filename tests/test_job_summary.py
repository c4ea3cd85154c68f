"""A job's summary combined from per-rank results (tracer/analysis/ranked.py, tracer.job.load.summarize_job) equals the
summary of the job read whole into one frame: on real multi-rank traces (HTA's NCCL pair, whose file rank-0 is
rank 1 by its distributedInfo; the gloo DDP pair with host-side collectives), on every local scheduler, on the
first open and on a reload from the stored dataset, for a subset of ranks, and with a bad rank left out."""

from __future__ import annotations

import gzip
import io
import json
import os
import shutil
from pathlib import Path

import orjson
import pytest

import tracer.errors
import tracer.job.load
from tests.conftest import cli_main
from tracer.analysis import ranked, registry
from tracer.analysis.summary import Summary, analyze
from tracer.cli.summary import render_summary
from tracer.job import store as jobstore
from tracer.job.load import load_job, summarize_job
from tracer.parsers import load_trace
from tracer.timeline import Timeline
from tracer.timeline.combine import concat_meta

DATA = Path(__file__).parent / "data"
JOBS = {
    "hta-nccl": [DATA / "external" / f"HTA_trace_filter_sampled_rank-{r}.json.gz" for r in (0, 1)],
    "gloo-ddp": [DATA / "comm" / f"gloo_rank{r}.json.gz" for r in (0, 1)],
}


@pytest.fixture(params=sorted(JOBS))
def job(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """One of the jobs, copied into a folder of its own (its dataset is written there, small as it is)."""
    monkeypatch.setattr(jobstore, "CACHE_MIN_BYTES", 0)
    for p in JOBS[request.param]:
        shutil.copy(p, tmp_path / p.name)
    return sorted(tmp_path.glob("*.json.gz"))


def _whole(files: list[Path], **kwargs: object) -> Summary:
    """The summary of the job read into one frame, parsed here (the reference)."""
    return analyze(load_job(files, load=lambda p: load_trace(p, cache=False), **kwargs))  # type: ignore[arg-type]


def _text(summary: Summary) -> list[str]:
    from rich.console import Console

    console = Console(width=160, record=True, file=io.StringIO())
    for r in render_summary(summary, width=160, max_collectives=-1):
        console.print(r)
    return console.export_text().splitlines()


def _assert_same(got: Summary, want: Summary) -> None:
    g, w = got.to_dict(), want.to_dict()
    assert list(g) == list(w)  # the same keys in the same order
    for key in w:
        assert g[key] == w[key], key
    assert got.multi_rank == want.multi_rank
    assert _text(got) == _text(want)


@pytest.mark.slow
@pytest.mark.parametrize("scheduler", ["processes", "sync"])
def test_the_combined_summary_equals_the_whole_jobs(job: list[Path], scheduler: str,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    want = _whole(job)
    assert want.to_dict()["collectives"] and want.multi_rank  # (collectives matched across the two ranks)

    def whole(*_a: object, **_k: object) -> None:
        raise AssertionError("the job was read whole")

    monkeypatch.setattr(tracer.job.load, "load_job", whole)  # (combined from the ranks, not the fallback)
    got, meta = summarize_job(job, scheduler=scheduler, cache=False)
    _assert_same(got, want)
    assert set(meta.extra["ranks"]) == {"0", "1"} and "stored_as" not in meta.extra


@pytest.mark.slow
def test_first_open_and_reload_equal_the_whole_jobs(job: list[Path]) -> None:
    want = _whole(job)
    written: list[Path] = []
    first, meta = summarize_job(job, scheduler="processes", on_cache_write=written.append)
    assert written == [jobstore.dataset_path(job)] and "stored_as" not in meta.extra
    _assert_same(first, want)
    kept = sorted(written[0].glob(f"rank=*/{jobstore.RESULTS}"))
    assert len(kept) == 2  # each rank's results kept beside its partition (tracer.job.kept_results)
    for f in kept:
        f.unlink()
    # without them, the reload analyses each stored partition on a worker, and keeps the results again
    again, meta = summarize_job(job, scheduler="processes", on_cache_write=written.append)
    assert len(written) == 1 and meta.extra["stored_as"] == str(written[0])
    _assert_same(again, want)
    assert sorted(written[0].glob(f"rank=*/{jobstore.RESULTS}")) == kept
    for f in kept:
        f.unlink()
    # and the same in this process (a small job with no scheduler named)
    here, _ = summarize_job(job)
    _assert_same(here, want)


@pytest.mark.slow
def test_a_reload_takes_the_kept_results_and_reads_no_partition(job: list[Path],
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A stored job's summary from each rank's kept results, no partition read nor analysed, equals the job read
    whole; results signed by another user's key, or by other code, are not unpickled: the rank is analysed again."""
    from tracer.job import kept_results, rank_tasks

    want = _whole(job)
    summarize_job(job, scheduler="sync")  # (stores the job, its ranks' results with it)
    dataset = jobstore.dataset_path(job)
    analysed: list[int] = []
    analyze_stored = rank_tasks.analyze_stored

    def counted(index: int, path: str, rank: int, shift_ns: int = 0) -> object:
        analysed.append(rank)
        return analyze_stored(index, path, rank, shift_ns)

    monkeypatch.setattr(rank_tasks, "analyze_stored", counted)
    got, meta = summarize_job(job)
    assert analysed == [] and meta.extra["stored_as"] == str(dataset)
    _assert_same(got, want)

    # rank 1's results signed by someone else's key (a dataset copied from a colleague): analysed again
    manifest = jobstore.read_manifest(dataset)
    assert manifest is not None
    entry = {e.rank: e for e in manifest.entries}
    results_1, home = kept_results.read(dataset, entry[1]), os.environ["XDG_CACHE_HOME"]
    assert results_1 is not None
    monkeypatch.setenv("XDG_CACHE_HOME", str(dataset.parent / "another-home"))
    kept_results.keep(dataset, entry[1], results_1)  # (rank 1's own results, signed by their key)
    monkeypatch.setenv("XDG_CACHE_HOME", home)
    assert kept_results.read(dataset, entry[1]) is None
    got, _ = summarize_job(job)
    assert analysed == [1]
    _assert_same(got, want)
    # other code (an analysis changed since): every rank analysed again
    monkeypatch.setattr(kept_results, "code_version", lambda: "another version")
    got, _ = summarize_job(job)
    assert analysed == [1, 0, 1]
    _assert_same(got, want)
    # and a rank's results moved under another rank's folder are not that rank's
    kept_results.results_file(dataset, 1).write_bytes(kept_results.results_file(dataset, 0).read_bytes())
    got, _ = summarize_job(job)
    assert analysed == [1, 0, 1, 1]
    _assert_same(got, want)
    # nor are rank 0's results of the same job stored again after a trace changed (another partition, the same
    # code and key: the file put back into the rebuilt dataset, as a summary still running on the old one would)
    old_results = kept_results.results_file(dataset, 0).read_bytes()
    trace_0 = sorted(job)[0]
    trace_0.write_bytes(gzip.compress(gzip.decompress(trace_0.read_bytes()) + b" "))
    summarize_job(job)  # (parses again: rank 0's file changed)
    assert analysed == [1, 0, 1, 1]
    kept_results.results_file(dataset, 0).write_bytes(old_results)
    got, _ = summarize_job(job)
    assert analysed == [1, 0, 1, 1, 0]
    _assert_same(got, want)


@pytest.mark.slow
def test_a_clock_fixed_summary_neither_reads_nor_keeps_results(job: list[Path],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Results made with a rank's clock moved hold moved times: a --clock-fix summary analyses the moved ranks'
    partitions and keeps nothing of them (the unmoved rank's kept results still serve)."""
    from tracer.job import kept_results

    summarize_job(job, scheduler="sync")
    dataset = jobstore.dataset_path(job)
    asked: list[jobstore.RankEntry] = []
    read = kept_results.read

    def counted(dataset: Path, entry: jobstore.RankEntry) -> object:
        asked.append(entry)
        return read(dataset, entry)

    monkeypatch.setattr(kept_results, "read", counted)
    kept = {r: kept_results.results_file(dataset, r).read_bytes() for r in (0, 1)}
    summarize_job(job, shifts={1: 1_000_000})
    assert [e.rank for e in asked] == [0]
    assert {r: kept_results.results_file(dataset, r).read_bytes() for r in (0, 1)} == kept


@pytest.mark.slow
@pytest.mark.parametrize("rank", [0, 1])
def test_a_subset_of_ranks(job: list[Path], rank: int) -> None:
    want = _whole(job, ranks=[rank])
    assert not want.multi_rank
    got, meta = summarize_job(job, scheduler="sync", ranks=[rank], cache=False)
    _assert_same(got, want)
    summarize_job(job, scheduler="sync")  # (stores the job)
    got, meta = summarize_job(job, scheduler="processes", ranks=[rank])
    assert "stored_as" in meta.extra
    _assert_same(got, want)


@pytest.mark.slow
def test_combining_is_splitting_by_rank(job: list[Path]) -> None:
    """Each analysis's per-rank parts, combined, give what it computes over the concatenated job (on the
    timelines themselves: no workers, no store)."""
    whole = load_job(job, load=lambda p: load_trace(p, cache=False))
    ev = whole.events
    ranks = sorted(set(ev["rank"].tolist()))
    parts = [Timeline(ev[ev["rank"] == r].reset_index(drop=True), m)
             for r, m in zip(ranks, [whole.meta] * len(ranks))]
    results = [ranked.rank_results(t, r) for t, r in zip(parts, ranks)]
    for a in registry.analyses():
        assert a.combine is not None, f"{a.name}: no combine, so every job's summary reads the job whole"
        got = a.combine([r.parts.get(a.name) for r in results], whole)
        assert a.to_json(got, analyze(whole)) == a.to_json(a.compute(whole), analyze(whole)), a.name


@pytest.mark.slow
def test_the_job_meta_is_the_concatenated_jobs(job: list[Path]) -> None:
    whole = load_job(job, load=lambda p: load_trace(p, cache=False))
    _, meta = summarize_job(job, scheduler="sync", cache=False)
    for field in ("format", "source", "gpu_names", "process_names", "thread_names", "clock"):
        assert getattr(meta, field) == getattr(whole.meta, field), field
    assert meta.extra["ranks"] == whole.meta.extra["ranks"]
    assert concat_meta([whole.meta], [0]).format == whole.meta.format


def _without_rank_info(src: Path, dest: Path) -> None:
    doc = json.loads(gzip.decompress(src.read_bytes()))
    doc.pop("distributedInfo", None)
    dest.write_bytes(gzip.compress(json.dumps(doc).encode()))


@pytest.mark.slow
def test_a_rank_numbered_by_order_behind_a_skipped_one(tmp_path: Path) -> None:
    """Ranks from the files' order: with the middle file unreadable, the third file is rank 1, not the 2 its
    worker numbered it; the job is then read whole, and the summary is still the whole job's."""
    a, b, c = tmp_path / "a.json.gz", tmp_path / "b.json.gz", tmp_path / "c.json.gz"
    _without_rank_info(JOBS["gloo-ddp"][0], a)
    b.write_bytes(JOBS["gloo-ddp"][1].read_bytes()[:800])  # a truncated gzip
    _without_rank_info(JOBS["gloo-ddp"][1], c)
    skipped: list[object] = []
    got, meta = summarize_job([a, b, c], scheduler="sync", skip_bad_ranks=True, on_skip=skipped.append)
    want = analyze(load_job([a, b, c], scheduler="sync", skip_bad_ranks=True))
    _assert_same(got, want)
    assert sorted(meta.extra["ranks"]) == ["0", "1"] and list(meta.extra["skipped_ranks"]) == [str(b)]
    assert len(skipped) == 1  # said once, not again by the second read


@pytest.mark.slow
def test_an_analysis_without_combine_reads_the_job_whole(job: list[Path]) -> None:
    extra = registry.Analysis("test_rows_per_rank", "rows per rank", lambda t: t.events["rank"].value_counts()
                              .sort_index().to_dict(), to_json=lambda r, s: {"test_rows_per_rank": r},
                              from_json=lambda d: d.get("test_rows_per_rank"), json_keys=("test_rows_per_rank",))
    registry.register(extra)
    try:
        assert not ranked.combinable()
        got, _ = summarize_job(job, scheduler="sync", cache=False)
        assert got.to_dict() == _whole(job).to_dict()
        assert sum(got.to_dict()["test_rows_per_rank"].values()) == got.events
    finally:
        registry.unregister(extra.name)


@pytest.mark.slow
def test_cli_json_is_the_whole_jobs(job: list[Path]) -> None:
    proc = cli_main("summary", "--json", "--job", *map(str, job))
    assert proc.returncode == 0, proc.stderr
    (doc,) = [orjson.loads(line) for line in proc.stdout.splitlines()]
    assert doc == _whole(job).to_dict()
    again = cli_main("summary", "--json", "--job", "--ranks", "1", *map(str, job))
    assert again.returncode == 0, again.stderr
    assert orjson.loads(again.stdout) == _whole(job, ranks=[1]).to_dict()


@pytest.mark.slow
@pytest.mark.parametrize("side_thread", [False, True])
def test_a_worker_hashes_and_stores_beside_the_parse(tmp_path: Path, side_thread: bool) -> None:
    """The key, the stored partition and the results are the same whether a side thread hashes and writes
    (where cores are to spare) or the worker does it in line; a bad file is still its one-line error."""
    from tracer.job import partitions, rank_tasks

    src = JOBS["hta-nccl"][1]
    store = tmp_path / "store"
    store.mkdir()
    task = rank_tasks.Task(with_keys=True, align=True, store=str(store), analyze=True, side_thread=side_thread)
    done = rank_tasks.parse_group(0, [str(src)], task)
    assert done.error is None and done.stored and done.timeline is None
    assert done.keys == [jobstore.source_key(src)]
    assert set(done.phases) >= {"key", "parse", "analyze", "store"}
    stored = partitions.read_part(store, 0)
    alone = load_job([src], load=lambda p: load_trace(p, cache=False))
    assert stored.events["start_ns"].tolist() == alone.events["start_ns"].tolist()
    assert done.results.rank == 1 and done.results.rows == len(alone.events)  # (rank-1 in its name)
    want = analyze(alone).to_dict()
    got = ranked.combine([done.results], alone.meta).to_dict()
    assert got == want
    bad = tmp_path / "bad.json.gz"
    bad.write_bytes(src.read_bytes()[:5000])
    failed = rank_tasks.parse_group(1, [str(bad)], task)
    assert failed.error is not None and failed.error[1] == str(bad) and "truncated gzip" in failed.error[2]


@pytest.mark.slow
def test_clock_fix_gives_the_figures_of_the_job_read_whole(job: list[Path], capsys: pytest.CaptureFixture) -> None:
    """--clock-fix: where no rank moves, the combined summary stands (and says what the fix found); where one
    moves, the job is read whole and moved, as before. Either way the figures and notes are the old path's."""
    from tracer.cli import main
    from tracer.cli._job import say_fixes
    from tracer.job.clocks import fix_clocks

    fixed = fix_clocks(load_job(job, load=lambda p: load_trace(p, cache=False)))
    say_fixes(fixed.fixes)
    want = analyze(fixed.timeline).to_dict()
    notes = capsys.readouterr().err
    assert main(["summary", "--json", "--no-cache", "--clock-fix", "--job", *map(str, job)]) == 0
    out = capsys.readouterr()
    assert orjson.loads(out.out) == want
    assert out.err == notes


def test_a_rank_with_no_events(tmp_path: Path) -> None:
    """A rank whose profiler caught nothing adds nothing to the figures, as in the concatenated job."""
    files = []
    for p in JOBS["gloo-ddp"]:
        shutil.copy(p, tmp_path / p.name)
        files.append(tmp_path / p.name)
    empty = tmp_path / "gloo_rank2.json.gz"
    empty.write_bytes(gzip.compress(json.dumps({"baseTimeNanoseconds": 1790857026000000000,
                                                "distributedInfo": {"rank": 2}, "traceEvents": []}).encode()))
    files.append(empty)
    want = _whole(files)
    got, meta = summarize_job(files, scheduler="sync", cache=False)
    _assert_same(got, want)
    assert set(meta.extra["ranks"]) == {"0", "1", "2"}


@pytest.mark.slow
def test_a_clock_fix_is_applied_where_each_rank_is_analysed(job: list[Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """``--clock-fix``: each rank moved on its worker before it is analysed equals the job read whole and moved
    (``shift_ranks``), on the first open, on a reload and in this process, and the store keeps the ranks as their
    traces have them."""
    from tracer.analysis.comm import shift_ranks

    shifts = {1: 123_456_789, 0: -5_000}
    whole = load_job(job, load=lambda p: load_trace(p, cache=False))
    want = analyze(Timeline(shift_ranks(whole.events, shifts), whole.meta))
    first, meta = summarize_job(job, scheduler="processes", shifts=shifts)
    _assert_same(first, want)
    assert meta.extra["clock_fix_ns"] == {"0": -5_000, "1": 123_456_789}

    def read_whole(*_a: object, **_k: object) -> None:
        raise AssertionError("the job was read whole")

    monkeypatch.setattr(tracer.job.load, "load_job", read_whole)
    again, meta = summarize_job(job, scheduler="processes", shifts=shifts)  # (from the stored partitions)
    assert "stored_as" in meta.extra
    _assert_same(again, want)
    here, _ = summarize_job(job, shifts=shifts)
    _assert_same(here, want)
    plain, meta = summarize_job(job, scheduler="sync")  # (the store is unmoved: no shift, the job as it is)
    _assert_same(plain, analyze(whole))
    assert "clock_fix_ns" not in meta.extra


@pytest.mark.slow
def test_a_job_s_run_directory_with_job_is_its_rank_traces(tmp_path: Path) -> None:
    # `summary --job RUN` of a recorded job took the run for one rank: every row on rank 0, the GPUs merged
    from tests.job_runs import HTA_RANKS, make_job_run

    run = make_job_run(tmp_path / "run", HTA_RANKS)
    plain, job = cli_main("summary", "--json", str(run)), cli_main("summary", "--job", "--json", str(run))
    assert plain.returncode == 0 and job.returncode == 0, plain.stderr + job.stderr
    as_run, as_job = json.loads(plain.stdout), json.loads(job.stdout)
    assert sorted(as_job["devices"]) == ["0/0", "1/1"]
    assert {k: v for k, v in as_job.items() if k not in ("source", "run")} == \
        {k: v for k, v in as_run.items() if k not in ("source", "run")}
    one = cli_main("summary", "--job", "--json", "--ranks", "1", str(run))  # (was "the job has no rank 1")
    assert one.returncode == 0, one.stderr
    assert sorted(json.loads(one.stdout)["devices"]) == ["1"]  # (one rank: its GPU 1 as a one-rank summary names it)
    # two jobs' runs are not one job: their ranks collide, said in one line naming both files
    other = make_job_run(tmp_path / "other", HTA_RANKS)
    both = cli_main("summary", "--job", str(run), str(other))
    assert both.returncode == 2
    assert both.stderr == (f"tracer: error: {other / 'traces' / 'rank0-pid100.json.gz'}: is rank 0 "
                           f"(distributedInfo), as is {run / 'traces' / 'rank0-pid100.json.gz'}: a job holds one "
                           "trace per rank\n")


@pytest.mark.slow
def test_clock_fix_says_what_it_moved_each_rank_by(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    # After --clock-fix the rank table's "clock fix" is what is left to move (0 once moved), and its caption said
    # "(not applied)": the shift applied was said only on stderr. Now a "moved" column and --json's meta say it.
    from tracer.cli import main

    files = []
    for r, p in enumerate(JOBS["gloo-ddp"]):
        doc = json.loads(gzip.decompress(p.read_bytes()))
        doc["baseTimeNanoseconds"] -= 50_000_000 * r  # (rank 1's clock 50 ms behind)
        files.append(tmp_path / p.name)
        files[-1].write_bytes(gzip.compress(json.dumps(doc).encode()))
    argv = ["summary", "--no-cache", "--job", *map(str, files)]
    assert main([*argv, "--clock-fix", "--json"]) == 0
    moved = orjson.loads(capsys.readouterr().out)["meta"]["clock_fix_ns"]
    assert list(moved) == ["1"] and 49_000_000 < moved["1"] <= 50_000_000
    assert main([*argv, "--clock-fix"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "moved µs" in text and f"{moved['1'] / 1e3:,.1f}" in text
    assert "not applied" not in text and "moved: what --clock-fix moved each rank's clock by" in text
    assert main(argv) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "moved µs" not in text and "(not applied: summary --clock-fix applies it)" in text
    # asked for, and nothing to move (the ranks as recorded): said so, not "not applied"
    assert main(["summary", "--no-cache", "--clock-fix", "--job", *map(str, JOBS["gloo-ddp"])]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "not applied" not in text and "(--clock-fix moved no rank: none needed it, or none fits)" in text


@pytest.mark.slow
def test_a_file_that_holds_several_ranks_is_not_one_rank_of_a_job(tmp_path: Path) -> None:
    # --job stamps one rank on every row of each file: an nsys report of two processes (read as ranks 0 and 1 on its
    # own) had its two GPUs' figures summed into one; refused in one line (or left out, --skip-bad-ranks)
    two = DATA / "nsys_two_ranks.sqlite.gz"
    alone = cli_main("summary", "--json", str(two))
    assert alone.returncode == 0 and sorted(json.loads(alone.stdout)["devices"]) == ["0/0", "1/0"]
    proc = cli_main("summary", "--job", "--no-cache", str(two))
    assert proc.returncode == 2
    assert proc.stderr == f"tracer: error: {two}: holds 2 ranks already (a whole job in one file): read it without --job\n"
    with pytest.raises(tracer.errors.UsageError, match="holds 2 ranks already"):
        load_job([two, DATA / "pair.sqlite.gz"], load=lambda p: load_trace(p, cache=False))
