"""One Kineto trace parsed in parts (tracer.parsers.kineto_scan.scan_kineto_part,
tracer.parsers.kineto.merge_kineto_parts) and a job whose ranks are split across worker processes
(tracer.job.scan.split_counts): exactly the whole-file parse, frame (dtypes and category order included) and
meta, on every trace under tests/data and on hand-made traces whose cuts fall on B/E pairs, metadata, skipped
events, a gap inside a string and a corrupt part."""

from __future__ import annotations

import gzip
import json
import pickle
import shutil
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from tracer.errors import TraceFormatError
from tracer.job import rank_tasks, scan, scheduling, task_graph, workers
from tracer.parsers import kineto, kineto_scan, load_trace
from tracer.parsers.kineto import load_kineto_parts
from tracer.timeline import Timeline

DATA = Path(__file__).parent / "data"
TRACES = sorted(p for p in DATA.rglob("*.json*") if p.name.endswith((".json", ".json.gz"))
                and p.name not in ("meta.json", "summary.json"))


@pytest.fixture(autouse=True)
def _small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    # chunks of a few events, so that a small trace's parts hold several chunks as a large one's do
    monkeypatch.setattr(kineto_scan, "_CHUNK_BYTES", 2048)


def _bytes(p: Path) -> bytes:
    raw = p.read_bytes()
    return gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw


def _parts(data: bytes, k: int) -> list[Any]:
    """The k parts, each pickled there and back as from a worker."""
    return [pickle.loads(pickle.dumps(kineto_scan.scan_kineto_part(data, j, k))) for j in range(k)]


def _assert_same(a: Timeline, b: Timeline) -> None:
    pd.testing.assert_frame_equal(a.events, b.events, check_exact=True)
    for column in a.events.select_dtypes("category"):
        assert list(a.events[column].cat.categories) == list(b.events[column].cat.categories), column
    assert a.meta == b.meta
    assert a.meta.extra == b.meta.extra  # (skipped, ignored, cuda_sync)


def _split_equals_whole(data: bytes, k: int, tmp_path: Path) -> list[Any]:
    path = tmp_path / "trace.json"
    path.write_bytes(data)
    whole = load_trace(path, cache=False)
    parts = _parts(data, k)
    _assert_same(whole, load_kineto_parts(path, parts))
    if all(p is not None for p in parts):
        _assert_same(kineto.parse_kineto_bytes(data, str(path)), kineto.merge_kineto_parts(parts, str(path)))
    return parts


@pytest.mark.slow
@pytest.mark.parametrize("trace", TRACES, ids=lambda p: str(p.relative_to(DATA)))
def test_every_trace_in_parts_equals_the_whole(trace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kineto_scan, "_CHUNK_BYTES", 16 * 1024)  # (a few chunks per part of the larger traces)
    data = _bytes(trace)
    try:
        whole = kineto.parse_kineto_bytes(data, "")
    except TraceFormatError:
        pytest.skip("not a trace the parser reads whole either")
    for k in (2, 3, 4):
        parts = _parts(data, k)
        assert all(p is not None for p in parts)  # these all split cleanly: none falls back to the whole file
        _assert_same(whole, kineto.merge_kineto_parts(parts, ""))


def _x(ts: float, name: str = "op", **args: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 2, "ts": ts, "dur": 1.5, "args": args}


def _trace(events: list[Any], **top: Any) -> bytes:
    return json.dumps({"schemaVersion": 1, "traceEvents": events, "baseTimeNanoseconds": 1000, **top},
                      indent=1).encode()


def _every_cut(data: bytes, tmp_path: Path, most: int = 12) -> int:
    """Parts from 2 to ``most``: cuts at many places of a small trace; how many splits fell back whole."""
    fell_back = 0
    for k in range(2, most + 1):
        parts = _split_equals_whole(data, k, tmp_path)
        fell_back += any(p is None for p in parts)
    return fell_back


@pytest.mark.slow
def test_slices_crossing_the_cut_pair_up(tmp_path: Path) -> None:
    events: list[Any] = [{"ph": "B", "cat": "user_annotation", "name": f"outer{i}", "pid": 1, "tid": 2, "ts": i * 100}
                         for i in range(5)]
    events += [_x(600 + i, f"k{i}") for i in range(20)]
    events += [{"ph": "E", "pid": 1, "tid": 2, "ts": 1000 + i} for i in range(4)]  # one B is never closed
    events += [{"ph": "E", "pid": 1, "tid": 9, "ts": 1200}]  # an E with nothing open
    data = _trace(events)
    assert _every_cut(data, tmp_path) == 0
    t = kineto.merge_kineto_parts(_parts(data, 2))
    assert t.meta.extra["skipped"] == {"B without E": 1, "E without B": 1}
    assert (t.events["name"].astype(str).str.startswith("outer")).sum() == 4


@pytest.mark.slow
def test_metadata_in_the_second_part(tmp_path: Path) -> None:
    events: list[Any] = [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "first"}}]
    events += [_x(i) for i in range(30)]
    events += [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "later"}},
               {"ph": "M", "name": "thread_name", "pid": 1, "tid": 2, "args": {"name": "main"}},
               {"ph": "M", "name": "process_name", "pid": 3, "args": {"name": "other"}}]
    data = _trace(events)
    assert _every_cut(data, tmp_path) == 0
    t = kineto.merge_kineto_parts(_parts(data, 2))
    assert t.meta.process_names == {1: "later", 3: "other"} and t.meta.thread_names == {"1:2": "main"}


@pytest.mark.slow
def test_codes_of_each_part_are_remapped(tmp_path: Path) -> None:
    # names and process groups first met in the second part, and met again there in another order
    coll = {"Collective name": "allreduce", "In msg nelems": 4, "Out msg nelems": 4, "dtype": "Float"}
    events = [_x(i, f"a{i % 3}", **coll, **{"Process Group Name": f"pg{i % 2}"}) for i in range(20)]
    events += [_x(100 + i, f"b{i % 4}", **coll, **{"Process Group Name": f"pg{3 - i % 4}"}) for i in range(20)]
    data = _trace(events)
    assert _every_cut(data, tmp_path) == 0
    t = kineto.merge_kineto_parts(_parts(data, 2))
    assert list(t.events["pg"].cat.categories) == ["", "pg0", "pg1", "pg3", "pg2"]  # as first met in the file


@pytest.mark.slow
def test_skipped_events_in_each_part_are_counted_once(tmp_path: Path) -> None:
    bad: list[Any] = [{"ph": "X", "cat": "cpu_op", "name": "n", "ts": "abc", "dur": 1},
                      {"ph": "X", "cat": "cpu_op", "name": "n", "ts": 5, "dur": -1},
                      7, {"cat": "cpu_op", "name": "no ph"},
                      {"ph": "X", "cat": "kernel", "name": "k", "pid": "x", "ts": 5, "dur": 1}]
    events = bad + [_x(i) for i in range(30)] + bad + [_x(100 + i) for i in range(30)] + bad
    data = _trace(events, baseTimeNanoseconds="soon")
    assert _every_cut(data, tmp_path) == 0
    t = kineto.merge_kineto_parts(_parts(data, 3))
    assert sum((t.meta.extra.get("skipped") or {}).values()) == 3 * 5 and t.meta.extra["ignored"]


def test_a_gap_inside_a_string_at_the_cut_falls_back_to_the_whole_file(tmp_path: Path) -> None:
    tricky = "x}, {" * 400  # the text of a gap between events, all over one event's args
    events = [_x(i) for i in range(10)] + [_x(50, "tricky", note=tricky)] + [_x(60 + i) for i in range(10)]
    data = _trace(events)
    assert _every_cut(data, tmp_path) > 0  # some cut fell inside the string: that split parsed the file whole


def test_a_corrupt_second_part_is_the_whole_file_error(tmp_path: Path) -> None:
    data = _trace([_x(i) for i in range(40)])
    cut = len(data) * 3 // 4
    broken = data[:cut] + b"{]" + data[cut + 2 :]
    path = tmp_path / "broken.json"
    path.write_bytes(broken)
    with pytest.raises(TraceFormatError) as whole:
        load_trace(path, cache=False)
    parts = _parts(broken, 2)
    assert parts[0] is not None and parts[1] is None
    with pytest.raises(TraceFormatError) as split:
        load_kineto_parts(path, parts)
    assert str(split.value) == str(whole.value) and "\n" not in str(split.value)


def test_more_parts_than_gaps(tmp_path: Path) -> None:
    data = _trace([_x(1), _x(2)])
    parts = _split_equals_whole(data, 8, tmp_path)
    assert all(p is not None for p in parts)


# ---------------------------------------------------------------------------------------------------------
# A job on local processes, its ranks split

HTA_RANKS = [DATA / "external" / f"HTA_trace_filter_sampled_rank-{r}.json.gz" for r in (0, 1)]


@pytest.fixture()
def plain_job(tmp_path: Path) -> list[Path]:
    """HTA's two ranks, inflated (a gzipped file is never split)."""
    files = []
    for p in HTA_RANKS:
        plain = tmp_path / p.name.removesuffix(".gz")
        with gzip.open(p, "rb") as src, open(plain, "wb") as dst:
            shutil.copyfileobj(src, dst)
        files.append(plain)
    return files


def test_split_counts(plain_job: list[Path], monkeypatch: pytest.MonkeyPatch) -> None:
    size = min(p.stat().st_size for p in plain_job)
    monkeypatch.setattr(scan, "MIN_PART_BYTES", size // 3)
    monkeypatch.setattr(scheduling, "cores", lambda: 2)
    assert scan.split_counts([[str(p)] for p in plain_job]) == [1, 1]  # no core to spare: whole
    monkeypatch.setattr(scheduling, "cores", lambda: 16)
    assert scan.split_counts([[str(p)] for p in plain_job]) == [3, 3]  # the size bounds it
    assert scan.split_counts([[str(HTA_RANKS[0])], [str(p) for p in plain_job]]) == [1, 1]  # gzipped; 2 files
    monkeypatch.setattr(scan, "MIN_PART_BYTES", 1)
    assert scan.split_counts([[str(p)] for p in plain_job]) == [8, 8]  # the cores bound it


@pytest.mark.slow
def test_a_job_with_split_ranks_equals_the_unsplit_one(plain_job: list[Path], monkeypatch: pytest.MonkeyPatch) -> None:
    from tracer.analysis import ranked
    from tracer.job.load import load_job

    serial = load_job(plain_job, load=lambda p: load_trace(p, cache=False))
    monkeypatch.setattr(scan, "MIN_PART_BYTES", 64 * 1024)
    monkeypatch.setattr(scheduling, "cores", lambda: 6)
    assert scan.split_counts([[str(p)] for p in plain_job]) == [3, 3]
    par = load_job(plain_job, scheduler="processes", cache=False)
    pd.testing.assert_frame_equal(par.events, serial.events, check_exact=True)
    assert par.meta.extra["ranks"] == serial.meta.extra["ranks"]
    done = task_graph.parse_groups([[p] for p in plain_job], scheduler=scheduling.Scheduler("processes"),
                                 task=rank_tasks.Task(analyze=True))
    whole = task_graph.parse_groups([[p] for p in plain_job], scheduler=scheduling.Scheduler("sync"),
                                  task=rank_tasks.Task(analyze=True))
    for d, w in zip(done, whole, strict=True):
        assert d.error is None and "parts" in d.phases and "parts" not in w.phases
    assert ranked.combine([d.results for d in done], serial.meta).to_dict() == \
        ranked.combine([w.results for w in whole], serial.meta).to_dict()



def test_a_split_rank_s_dataset_keys_equal_the_whole_file_s(plain_job: list[Path],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    # a merge hashes its file itself, beside the merge (its parts were scanned elsewhere): the key a reload
    # checks must still be the file's own
    from tracer.job.store import source_key

    monkeypatch.setattr(scan, "MIN_PART_BYTES", 64 * 1024)
    monkeypatch.setattr(scheduling, "cores", lambda: 6)  # (split, and a core to spare for each worker)
    done = task_graph.parse_groups([[p] for p in plain_job], scheduler=scheduling.Scheduler("processes"),
                                 task=rank_tasks.Task(with_keys=True, analyze=True))
    for d, p in zip(done, plain_job, strict=True):
        assert d.error is None and "parts" in d.phases
        assert d.keys == [source_key(p)]


def test_a_merge_s_keys_are_hashed_from_the_start_on_the_side_thread(plain_job: list[Path]) -> None:
    from tracer.job.store import source_key

    side = rank_tasks._Side(True)
    try:
        keys = rank_tasks._Keys([str(p) for p in plain_job], side, read_now=True)
        assert sorted(keys.digests) == [0, 1]  # (submitted at once, before the merge runs)
        assert keys.result() == [source_key(p) for p in plain_job]
    finally:
        side.close()
    inline = rank_tasks._Side(False)
    try:  # (no side thread: hashed after the rank's steps, as before, not first)
        assert rank_tasks._Keys([str(p) for p in plain_job], inline, read_now=True).digests == {}
    finally:
        inline.close()

# ---------------------------------------------------------------------------------------------------------
# Early scans: a job's parts scanned on processes forked before the job's process imports pandas

_EARLY = r"""
import json, os, sys
import tracer.job.scan as p
import tracer.job.scheduling

tracer.job.scheduling.cores = lambda: 6
p.MIN_PART_BYTES = 64 * 1024
seen = {}
start = p.start_early_scans


def spy(groups):
    seen["pandas before"] = "pandas" in sys.modules
    early = start(groups)
    seen["started"] = early is not None
    if early is not None:
        seen["parked"] = early._parked
        closing = early.close

        def close():
            closing()
            seen["used"] = early.used
        early.close = close
    return early


p.start_early_scans = spy
from tracer.cli import main

files = sys.argv[1:]
os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # (the command's own output is not this script's)
out = {}
for mode in ("early", "without"):
    if mode == "without":
        p.start_early_scans = lambda groups: None
    r, w = os.pipe()
    saved = os.dup(1)
    os.dup2(w, 1)
    rc = main(["summary", "--job", "--json", "--no-cache", "--scheduler", "processes", *files])
    sys.stdout.flush()
    os.dup2(saved, 1)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        out[mode] = json.loads(f.read())
    assert rc == 0, rc
sys.stderr.write(json.dumps({"seen": seen, "same": out["early"] == out["without"],
                             "parked left": bool(seen.get("parked")) and os.path.exists(seen["parked"])}) + "\n")
"""


def _early_child(files: list[Path]) -> dict[str, Any]:
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", _EARLY, *map(str, files)], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stderr.strip().splitlines()[-1])


@pytest.mark.slow
def test_a_job_s_parts_are_scanned_before_pandas_is_imported_and_sum_up_the_same(plain_job: list[Path]) -> None:
    got = _early_child(plain_job)
    seen = got["seen"]
    assert seen["pandas before"] is False  # the CLI reached the job's scans without pandas
    assert seen["started"] is True and seen["used"] is True  # the scans started early were the job's parts
    assert got["same"] is True  # the summary, figure for figure, as the job read without early scans
    assert got["parked left"] is False  # the parts handed over through memory's folder, removed after


@pytest.mark.slow
def test_no_early_scans_where_they_do_not_apply(plain_job: list[Path], tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from tracer.job import store as jobstore
    from tracer.job.load import _early_scans, summarize_job

    monkeypatch.setattr(scan, "MIN_PART_BYTES", 64 * 1024)
    monkeypatch.setattr(scheduling, "cores", lambda: 6)
    started: list[Any] = []
    monkeypatch.setattr(scan, "start_early_scans", lambda groups: started.append(groups))  # (None: not run)
    assert _early_scans(plain_job, "threads", True) is None  # not local processes
    assert _early_scans(plain_job, "sync", True) is None
    assert _early_scans(plain_job[:1], "processes", True) is None  # one rank: parsed here
    assert _early_scans(plain_job, None, True) is None  # the default, for a job this small: parsed here
    assert started == []
    _early_scans(plain_job, "processes", False)
    assert len(started) == 1  # a job parsed on local processes: asked
    monkeypatch.setattr(jobstore, "CACHE_MIN_BYTES", 0)
    summarize_job(plain_job, scheduler="processes")  # (stores the job's dataset)
    assert _early_scans(plain_job, "processes", True) is None  # stored: read back, not parsed
    assert len(started) == 2  # (the summary above asked once; the stored job did not)


def test_early_scans_do_not_start_for_gzipped_ranks_or_where_this_process_cannot_fork(
        plain_job: list[Path], monkeypatch: pytest.MonkeyPatch) -> None:
    import multiprocessing

    monkeypatch.setattr(scan, "MIN_PART_BYTES", 64 * 1024)
    monkeypatch.setattr(scheduling, "cores", lambda: 6)
    assert scan.start_early_scans([[p] for p in HTA_RANKS]) is None  # gzipped: never split
    monkeypatch.setattr(workers, "start_method", lambda: multiprocessing.get_context("spawn"))
    assert scan.start_early_scans([[p] for p in plain_job]) is None  # (threads running: no fork)


_EARLY_BAD = r"""
import sys
import tracer.job.scan as p
import tracer.job.scheduling

tracer.job.scheduling.cores = lambda: 6
p.MIN_PART_BYTES = 64 * 1024
started = []
start = p.start_early_scans
p.start_early_scans = lambda groups: started.append(start(groups)) or started[-1]
from tracer.cli import main

rc = main(["summary", "--job", "--no-cache", "--scheduler", "processes", *sys.argv[1:]])
print("early scans:", started[0] is not None, file=sys.stderr)
sys.exit(rc)
"""


@pytest.mark.slow
@pytest.mark.parametrize("skip", [False, True], ids=["refused", "skipped"])
def test_a_corrupt_rank_among_early_scanned_ranks_is_one_line_naming_it(plain_job: list[Path], tmp_path: Path,
                                                                        skip: bool) -> None:
    # The early scans' path (each rank's merge started as its own parts are scanned): a rank whose parts
    # cannot be scanned is parsed whole on its merge, which names the file; the other ranks are not held up.
    import subprocess
    import sys

    bad = tmp_path / "rank-9.json"
    data = plain_job[0].read_bytes()
    bad.write_bytes(data[: len(data) * 2 // 3])  # cut short: no part after the cut vouches for it
    proc = subprocess.run([sys.executable, "-c", _EARLY_BAD, *map(str, plain_job), str(bad),
                           *(["--skip-bad-ranks"] if skip else [])], capture_output=True, text=True, timeout=300)
    lines = proc.stderr.strip().splitlines()
    assert lines[-1] == "early scans: True"
    assert "Traceback" not in proc.stderr
    if skip:
        assert proc.returncode == 0, proc.stderr
        assert any(str(bad) in line and "opened without it" in line for line in lines), proc.stderr
    else:
        assert proc.returncode == 2, proc.stderr
        assert lines[-2].startswith("tracer: error: ") and str(bad) in lines[-2], proc.stderr
