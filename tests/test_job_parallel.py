"""A job's ranks parsed in parallel on Dask (tracer/job/task_graph.py) and stored as a Parquet dataset partitioned by
rank (tracer/job/store.py): the same frame as the serial load, a reload that reads only the ranks asked for, one
line for a corrupt rank, and the scheduler option."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from tests.conftest import HTA_RANKS, cli_main
from tracer.errors import TraceFormatError, TracerError, UsageError
from tracer.files import digests
from tracer.job import partitions, rank_tasks, scheduling, task_graph, workers
from tracer.job import store as jobstore
from tracer.job.load import load_job
from tracer.job.read import RankDone
from tracer.parsers import load_trace


def _files(d: Path) -> list[Path]:
    return sorted(d.glob("*.json.gz"))


def _serial(d: Path):
    return load_job(_files(d), load=lambda p: load_trace(p, cache=False))


@pytest.mark.parametrize("scheduler", ["processes", "threads", "sync"])
def test_parallel_load_equals_the_serial_load(job_dir: Path, scheduler: str) -> None:
    serial = _serial(job_dir)
    done: list[RankDone] = []
    threads = set(threading.enumerate())
    par = load_job(_files(job_dir), scheduler=scheduler, cache=False, on_rank=done.append)
    # every thread the job started has ended (a thread left running would keep `tracer` from its quick exit)
    assert not [t.name for t in threading.enumerate() if t not in threads and not t.daemon]
    pd.testing.assert_frame_equal(par.events, serial.events, check_exact=True)
    assert par.meta.extra["ranks"] == serial.meta.extra["ranks"]
    assert sorted(d.done for d in done) == [1, 2] and {d.total for d in done} == {2}
    assert sorted(d.files[0].name for d in done) == [p.name for p in HTA_RANKS]
    assert not list(job_dir.glob(".tracer-job-*"))  # cache=False writes nothing


def test_the_dataset_is_written_once_and_read_back_equal(job_dir: Path) -> None:
    serial = _serial(job_dir)
    written: list[Path] = []
    first = load_job(_files(job_dir), scheduler="processes", on_cache_write=written.append)
    assert written == [jobstore.dataset_path(_files(job_dir))]
    dataset = written[0]
    assert dataset.parent == job_dir and dataset.name.startswith(".")
    assert sorted(p.name for p in dataset.iterdir()) == ["_job.json", "rank=0", "rank=1"]
    assert "stored_as" not in first.meta.extra
    # the first open reads each rank back from the file its worker wrote: the same frame as parsed here
    pd.testing.assert_frame_equal(first.events, serial.events, check_exact=True)
    again = load_job(_files(job_dir), on_cache_write=written.append)
    assert len(written) == 1 and again.meta.extra["stored_as"] == str(dataset)
    pd.testing.assert_frame_equal(again.events, serial.events, check_exact=True)
    assert again.meta.extra["ranks"] == serial.meta.extra["ranks"]


def test_a_reload_reads_only_the_ranks_asked(job_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    serial = _serial(job_dir)
    load_job(_files(job_dir), scheduler="sync")
    dataset = jobstore.dataset_path(_files(job_dir))
    # rank 0's partition gone: a view of rank 1 never opens it, and parses nothing
    jobstore.partition_file(dataset, 0).unlink()
    monkeypatch.setattr(rank_tasks, "parse_group", lambda *a: pytest.fail("parsed a trace"))
    one = load_job(_files(job_dir), ranks=[1])
    assert one.meta.extra["stored_as"] == str(dataset)
    expect = serial.events[serial.events["rank"] == 1].reset_index(drop=True)
    assert one.events["rank"].unique().tolist() == [1]
    pd.testing.assert_series_equal(one.events["start_ns"], expect["start_ns"])
    pd.testing.assert_series_equal(one.events["name"].astype(str), expect["name"].astype(str))
    # columns: only those asked, of the ranks asked
    cols = partitions.read_columns(dataset, ["start_ns", "end_ns"], ranks=[1])
    assert list(cols.columns) == ["rank", "start_ns", "end_ns"] and len(cols) == len(expect)
    assert (cols["end_ns"] - cols["start_ns"]).sum() == (expect["end_ns"] - expect["start_ns"]).sum()


def test_a_changed_trace_invalidates_the_dataset(job_dir: Path) -> None:
    written: list[Path] = []
    load_job(_files(job_dir), scheduler="sync", on_cache_write=written.append)
    target = job_dir / HTA_RANKS[1].name
    # the same events, other bytes (another gzip level): the content hash decides, not the mtime
    data = gzip.decompress(target.read_bytes())
    stat = target.stat()
    target.write_bytes(gzip.compress(data, compresslevel=1))
    os.utime(target, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    again = load_job(_files(job_dir), scheduler="sync", on_cache_write=written.append)
    assert len(written) == 2 and "stored_as" not in again.meta.extra
    # a touch alone (ctime moves, bytes do not) is served from the dataset
    os.utime(target)
    assert load_job(_files(job_dir), on_cache_write=written.append).meta.extra["stored_as"]
    assert len(written) == 2


def test_a_small_job_is_not_stored(job_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jobstore, "CACHE_MIN_BYTES", sum(p.stat().st_size for p in _files(job_dir)) + 1)
    written: list[Path] = []
    load_job(_files(job_dir), on_cache_write=written.append)
    assert written == [] and not list(job_dir.glob(".tracer-job-*"))


def test_an_unknown_rank_is_one_line(job_dir: Path) -> None:
    with pytest.raises(UsageError, match=r"the job has no rank 5 \(it has 0, 1\)"):
        load_job(_files(job_dir), ranks=[5], scheduler="sync")


def _corrupt(job_dir: Path) -> Path:
    bad = job_dir / HTA_RANKS[1].name
    bad.write_bytes(HTA_RANKS[1].read_bytes()[:5000])  # a truncated gzip
    return bad


def test_a_corrupt_rank_is_one_error_naming_its_file(job_dir: Path) -> None:
    bad = _corrupt(job_dir)
    with pytest.raises(TraceFormatError) as err:
        load_job(_files(job_dir), scheduler="processes")
    assert err.value.subject.endswith(bad.name) and "truncated gzip" in err.value.problem
    skipped: list[TracerError] = []
    job = load_job(_files(job_dir), scheduler="processes", skip_bad_ranks=True, on_skip=skipped.append)
    assert [s.subject for s in skipped] == [str(bad)]
    assert job.events["rank"].unique().tolist() == [0]
    assert list(job.meta.extra["skipped_ranks"]) == [str(bad)]
    assert not list(job_dir.glob(".tracer-job-*"))  # a job read without a rank is not stored


@pytest.mark.slow
def test_cli_corrupt_rank_and_skip_bad_ranks(job_dir: Path) -> None:
    bad = _corrupt(job_dir)
    proc = cli_main("summary", "--job", "--json", str(job_dir), "--scheduler", "sync")
    assert proc.returncode == 2 and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"tracer: error: {bad}: truncated gzip"), proc.stderr
    proc = cli_main("summary", "--job", "--json", "--skip-bad-ranks", str(job_dir))
    assert proc.returncode == 0, proc.stderr
    assert f"tracer: warning: {bad}: truncated gzip" in proc.stderr and "--skip-bad-ranks" in proc.stderr
    doc = json.loads(proc.stdout)
    assert list(doc["devices"]) == ["0"]  # rank 0's one GPU, labelled as in a one-rank trace
    assert list(doc["meta"]["skipped_ranks"]) == [str(bad)]


@pytest.mark.slow
def test_cli_options_need_job(job_dir: Path) -> None:
    proc = cli_main("summary", str(job_dir), "--scheduler", "sync")
    assert proc.returncode == 2 and proc.stderr.strip() == "tracer: error: --scheduler: applies to a job's traces: add --job"
    proc = cli_main("summary", "--job", str(job_dir), "--ranks", "2-1")
    assert proc.returncode == 2 and "tracer: error: --ranks: '2-1' is not a range" in proc.stderr
    proc = cli_main("summary", str(job_dir), "--clock-fix")  # (was silently ignored)
    assert proc.returncode == 2 and proc.stderr.strip() == "tracer: error: --clock-fix: applies to a job's traces: add --job"
    proc = cli_main("summary", "--job", str(job_dir), "--collectives", "-1")
    assert proc.returncode == 2 and proc.stderr.strip() == "tracer: error: --collectives: -1 is not a count; give 0 or more"


def test_scheduler_values_and_the_environment() -> None:
    assert scheduling.resolve_scheduler(None, env={}) == scheduling.Scheduler("processes")
    assert scheduling.resolve_scheduler("threads", env={}).name == "threads"
    s = scheduling.resolve_scheduler("10.0.0.5:8786", env={})
    assert (s.name, s.address, s.origin) == ("distributed", "tcp://10.0.0.5:8786", "option")
    s = scheduling.resolve_scheduler(None, env={scheduling.SCHEDULER_ENV: "tls://head:8786"})
    assert (s.address, s.origin) == ("tls://head:8786", "environment")
    # the option wins over the environment
    assert scheduling.resolve_scheduler("sync", env={scheduling.SCHEDULER_ENV: "tcp://x:1"}).name == "sync"
    with pytest.raises(UsageError, match=r"^--scheduler: 'cluster' is neither a Dask scheduler address"):
        scheduling.resolve_scheduler("cluster", env={})
    with pytest.raises(UsageError, match=rf"^{scheduling.SCHEDULER_ENV}: 'x y' is neither"):
        scheduling.resolve_scheduler(None, env={scheduling.SCHEDULER_ENV: "x y"})


@pytest.mark.slow
def test_an_unreachable_cluster_is_one_line(job_dir: Path) -> None:
    pytest.importorskip("distributed")
    env = {**os.environ, scheduling.SCHEDULER_ENV: "tcp://127.0.0.1:9"}
    proc = subprocess.run([sys.executable, "-m", "tracer", "summary", "--job", "--no-cache", str(job_dir)],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"tracer: error: {scheduling.SCHEDULER_ENV}: cannot reach the Dask scheduler at "
                                  "tcp://127.0.0.1:9")
    assert len(proc.stderr.strip().splitlines()) == 1


def test_a_local_cluster_parses_the_job(job_dir: Path) -> None:
    distributed = pytest.importorskip("distributed")
    t0 = time.perf_counter()
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  dashboard_address=":0") as cluster:
        started = time.perf_counter() - t0
        done: list[RankDone] = []
        job = load_job(_files(job_dir), scheduler=cluster.scheduler_address, cache=False, on_rank=done.append)
    pd.testing.assert_frame_equal(job.events, _serial(job_dir).events, check_exact=True)
    assert len(done) == 2
    assert started < 30


@pytest.mark.slow
def test_the_single_file_path_does_not_import_dask() -> None:
    code = ("import sys; from tracer.cli import main; rc = main(['summary', '--json', sys.argv[1]]); "
            "bad = [m for m in ('dask', 'distributed') if m in sys.modules]; assert rc == 0 and not bad, bad")
    proc = subprocess.run([sys.executable, "-c", code, str(HTA_RANKS[0])], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr


_FAULTS = """
import resource, sys
if sys.argv[1] == "keep":
    from tracer.job.oscalls import keep_freed_memory
    keep_freed_memory()
out = []
for _ in range(3):  # a rank's worth of bytes, written (so faulted in), freed, and again
    f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    b = b"x" * (100 << 20)
    out.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
    del b
print(out)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux") or os.confstr("CS_GNU_LIBC_VERSION") is None,
                    reason="glibc's malloc only")
def test_a_worker_keeps_freed_memory_for_the_next_rank() -> None:
    # (a child process each: the setting stays for a process's life)
    def faults(mode: str) -> list[int]:
        proc = subprocess.run([sys.executable, "-c", _FAULTS, mode], capture_output=True, text=True, check=True)
        return json.loads(proc.stdout)

    pages = (100 << 20) // os.sysconf("SC_PAGE_SIZE")
    plain, kept = faults("plain"), faults("keep")
    assert all(n >= pages * 0.9 for n in plain)  # each allocation a fresh mapping, faulted in page by page
    assert kept[0] >= pages * 0.9 and max(kept[1:]) < pages * 0.05  # the heap's pages reused


@pytest.mark.slow
def test_the_local_pool_keeps_freed_memory_where_a_worker_parses_several_ranks(monkeypatch: pytest.MonkeyPatch) -> None:
    import concurrent.futures

    seen: list[object] = []

    class Recording(concurrent.futures.ProcessPoolExecutor):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            seen.append((kwargs.get("initializer"), kwargs.get("initargs")))
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", Recording)
    monkeypatch.setattr(scheduling, "cores", lambda: 2)
    # four ranks on two workers: each parses two, so keeps its freed memory; two ranks on two: nothing to reuse
    done = task_graph.parse_groups([[p] for p in HTA_RANKS * 2], scheduler=scheduling.Scheduler("processes"))
    done += task_graph.parse_groups([[p] for p in HTA_RANKS], scheduler=scheduling.Scheduler("processes"))
    start = workers.start_worker
    # (forked from this process, each worker ends with it; a forkserver's (where a thread runs) with the server)
    me = os.getpid() if workers.start_method().get_start_method() == "fork" else None
    assert [d.error for d in done] == [None] * 6 and seen == [(start, (True, me)), (start, (False, me))]


def test_progress_is_one_line_per_rank_on_a_terminal(job_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    from rich.console import Console

    from tracer.cli import _job

    out = io.StringIO()
    terminal = Console(file=out, force_terminal=True, width=200, color_system=None)
    assert _job.job_progress(_files(job_dir), terminal) is None  # a small job: no progress
    monkeypatch.setattr(_job, "PROGRESS_MIN_BYTES", 0)
    assert _job.job_progress(_files(job_dir), Console(file=io.StringIO(), force_terminal=False)) is None
    on_rank = _job.job_progress(_files(job_dir), terminal)
    assert on_rank is not None
    load_job(_files(job_dir), scheduler="sync", cache=False, on_rank=on_rank)
    lines = out.getvalue().splitlines()
    assert [line.split(":")[0] for line in lines] == ["Parsed 1/2", "Parsed 2/2"]
    assert all(" MB in " in line and line.endswith(" s)") for line in lines)


def _die(*_: object) -> None:
    os._exit(3)  # a worker killed mid-parse (the OOM killer, a segfault in a native library)


def test_a_worker_that_dies_is_one_line(job_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tracer.errors import TracerError

    monkeypatch.setattr(rank_tasks, "parse_group", _die)
    with pytest.raises(TracerError, match=r"^a worker process parsing the job's ranks died"):
        load_job(_files(job_dir), scheduler="processes", cache=False)


@pytest.mark.parametrize("side_thread", [False, True])
def test_a_worker_hashes_the_bytes_it_parses_not_the_file_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, side_thread: bool
) -> None:
    """A rank's dataset key is the one tracer.job.store.source_key gives (size, hash, stat), from the bytes the
    parse read: a Kineto file is not read a second time for it; a file of another format (an nsys export) is."""

    kineto = tmp_path / "rank-0.json.gz"
    shutil.copy(HTA_RANKS[0], kineto)
    nsys = tmp_path / "rank-1.sqlite"
    nsys.write_bytes(gzip.decompress((Path(__file__).parent / "data" / "pair.sqlite.gz").read_bytes()))
    expected = {p: jobstore.source_key(p) for p in (kineto, nsys)}
    read_for_a_key: list[Path] = []
    file_digest = digests.file_digest

    def counted(p: Path) -> str:
        read_for_a_key.append(Path(p))
        return file_digest(p)

    monkeypatch.setattr(digests, "file_digest", counted)
    task = rank_tasks.Task(with_keys=True, side_thread=side_thread)
    for i, p in enumerate((kineto, nsys)):
        got = rank_tasks.parse_group(i, [str(p)], task)
        assert got.error is None
        assert got.keys == [expected[p]]
    assert read_for_a_key == [nsys]


@pytest.mark.slow
def test_the_workers_are_forked_with_dask_and_their_tasks_modules_imported(tmp_path: Path) -> None:
    """Every task a local worker runs is Dask's (dask.local.batch_execute_tasks): the job's process imports Dask and
    the tasks' modules before it forks the workers, so none imports them again at its first task (0.45 s on a
    16-core host). Checked in a fresh interpreter, where nothing had imported Dask."""
    seen = tmp_path / "seen"
    code = f"""
import sys
import tracer.job.scheduling as s, tracer.job.task_graph as g, tracer.job.workers as w
assert "dask" not in sys.modules
original = w.start_worker
def start(*args):
    with open({str(seen)!r}, "a") as f:
        print(all(m in sys.modules for m in w.WORKER_IMPORTS), file=f)
    original(*args)
w.start_worker = start
s.cores = lambda: 2
done = g.parse_groups([[{str(HTA_RANKS[0])!r}], [{str(HTA_RANKS[1])!r}]], scheduler=s.Scheduler("processes"))
print([d.error for d in done])
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "[None, None]", out.stderr
    assert seen.read_text().split() == ["True", "True"]


@pytest.mark.slow
def test_a_worker_imports_what_its_tasks_need_as_it_starts() -> None:
    """start_worker, in a fresh interpreter (as a forkserver's or a spawned worker): the parser, the Parquet writer
    and the key's hash are there before the first task; a module that fails to import is left to the task."""
    code = ("import sys, tracer.job.workers as p; p.WORKER_IMPORTS += ('tracer.no_such_module',); p.start_worker(False); "
            "print(all(m in sys.modules for m in ('tracer.parsers.kineto', 'pyarrow.parquet', 'blake3', 'msgspec')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "True", out.stderr


@pytest.mark.slow
def test_a_job_s_workers_end_with_it_however_it_ends(tmp_path: Path) -> None:
    """start_worker(..., parent): on Linux a worker is killed as its parent ends (here SIGKILL, which no handler
    sees): it does not go on parsing ranks for nobody. Elsewhere only said."""
    if not sys.platform.startswith("linux"):
        pytest.skip("PR_SET_PDEATHSIG is Linux's; elsewhere a worker ends when it next reads its queue")
    import signal

    code = """
import concurrent.futures, multiprocessing, os, sys, time
import tracer.job.workers as p
pool = concurrent.futures.ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("fork"),
                                              initializer=p.start_worker, initargs=(False, os.getpid()))
print(*sorted({pool.submit(os.getpid).result() for _ in range(8)} | set(pool._processes)), flush=True)
for _ in range(2):
    pool.submit(time.sleep, 60)
time.sleep(60)
"""
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        workers = [int(w) for w in proc.stdout.readline().split()]
        assert len(workers) == 2 and all(_alive(w) for w in workers)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    deadline = time.monotonic() + 20
    while any(_alive(w) for w in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_alive(w) for w in workers)


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, dead and not yet reaped by init, does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_a_worker_whose_parent_is_gone_before_it_starts_ends_at_once() -> None:
    """die_with(parent): where the process that forked it is already gone (it reports another parent), the worker
    ends at once rather than run unwatched."""
    if not sys.platform.startswith("linux"):
        pytest.skip("PR_SET_PDEATHSIG is Linux's")
    code = "import tracer.job.oscalls as p; p.die_with(1); print('went on')"  # (its parent is not pid 1)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and out.stdout == ""
    fine = subprocess.run([sys.executable, "-c", "import os, tracer.job.oscalls as p; p.die_with(os.getppid()); "
                           "print('went on')"], capture_output=True, text=True, timeout=60)
    assert fine.returncode == 0 and fine.stdout == "went on\n"


_TERM_MID_JOB = """
import os, signal, sys
import tracer.cli._job as progress
import tracer.job.store

tracer.job.store.CACHE_MIN_BYTES = 0  # (the job's dataset is being built when the signal comes)

def job_progress(*_a, **_k):
    def on_rank(_done):  # a rank parsed, the other not yet back: SIGTERM, as a batch system's time limit sends
        os.kill(os.getpid(), signal.SIGTERM)
    return on_rank

progress.job_progress = job_progress
from tracer.cli import run
sys.argv = ["tracer", "summary", "--job", "--scheduler", "processes", sys.argv[1]]
run()
"""


@pytest.mark.slow
def test_sigterm_mid_job_is_one_line_and_leaves_nothing_half_written(job_dir: Path) -> None:
    proc = subprocess.run([sys.executable, "-c", _TERM_MID_JOB, str(job_dir)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 128 + 15, proc.stderr
    assert proc.stderr.strip().splitlines() == ["tracer: terminated (SIGTERM)"]
    assert proc.stdout == ""
    # the dataset being built (a temporary folder beside the traces) was removed; nothing else was written
    assert sorted(p.name for p in job_dir.iterdir()) == sorted(p.name for p in HTA_RANKS)


@pytest.mark.slow
def test_a_worker_ends_on_sigterm_as_any_process_does() -> None:
    """Workers forked from the command do not keep its SIGTERM handler (tracer.cli: an exception, for the
    command's clean-up): in a worker it would turn a stopped task into an error sent back, not an end."""
    code = """
import concurrent.futures, multiprocessing, os, signal
import tracer.job.workers as p
signal.signal(signal.SIGTERM, lambda *_: None)
fork = multiprocessing.get_context("fork")
for init, args in ((p.start_worker, (False, os.getpid())), (p.start_scanner, (os.getpid(),))):
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=fork, initializer=init, initargs=args) as pool:
        print(pool.submit(signal.getsignal, signal.SIGTERM).result() == signal.SIG_DFL)
print(signal.getsignal(signal.SIGTERM) == signal.SIG_DFL)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["True", "True", "False"], out.stderr
