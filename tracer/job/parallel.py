"""A job's rank files parsed in parallel on Dask: local processes by default, or a running Dask cluster.

Which scheduler (first found): the ``scheduler`` argument (the CLI's ``--scheduler``), the environment variable
:data:`SCHEDULER_ENV`, else ``processes``. A value is a Dask scheduler address (``tcp://HOST:PORT``,
``tls://…``, ``HOST:PORT``), for a cluster already running (its workers must see the trace files at the same
paths), or the name of a local scheduler: ``processes`` (one process per rank, as many at once as there are
cores: parsing is CPU-bound Python and numpy, which threads would serialise on the GIL), ``threads`` or
``sync`` (one after another in this process: for debugging). Where local processes outnumber the ranks, a
rank's large plain Kineto file is parsed in parts on several of them and merged (:func:`split_counts`).

Dask is imported here only, inside the functions, and only for a job of more than one rank: the single-file
path never imports it.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, cast

import tracer.errors as errors
from tracer import parsers
from tracer.errors import TracerError, UsageError
from tracer.files import digests
from tracer.job import handoff
from tracer.job import store as jobstore
from tracer.job.ranks import one_rank, rank_of
from tracer.parsers.kineto_scan import scan_kineto_part

SCHEDULER_ENV = "TRACER_DASK_SCHEDULER"
LOCAL_SCHEDULERS = ("processes", "threads", "sync")
#: ``tcp://10.0.0.5:8786``, ``tls://host:8786``, ``inproc://…``, or a bare ``host:port``.
_ADDRESS = re.compile(r"^(?:(?:tcp|tls|ucx|inproc|ws|wss)://\S+|[A-Za-z0-9.\-\[\]:]+:\d{1,5})$")


@dataclass(frozen=True)
class Scheduler:
    """Where a job's ranks are parsed: a local scheduler by name, or a cluster's address."""

    name: str  # one of LOCAL_SCHEDULERS, or "distributed"
    address: str = ""
    origin: str = "default"  # "option", "environment" or "default": said in errors

    def __str__(self) -> str:
        return self.address or self.name


def resolve_scheduler(value: str | None = None, env: dict[str, str] | None = None) -> Scheduler:
    """The scheduler ``value`` names, else the one :data:`SCHEDULER_ENV` names, else local processes; a value
    that is neither a local scheduler nor an address is a :class:`UsageError` (one line)."""
    environ = os.environ if env is None else env
    origin = "option"
    if value is None or not value.strip():
        value, origin = environ.get(SCHEDULER_ENV, "").strip(), "environment"
    if not value:
        return Scheduler("processes")
    value = value.strip()
    if value in LOCAL_SCHEDULERS:
        return Scheduler(value, origin=origin)
    if _ADDRESS.match(value):
        return Scheduler("distributed", value if "://" in value else f"tcp://{value}", origin)
    where = "--scheduler" if origin == "option" else SCHEDULER_ENV
    raise UsageError(where, f"{value!r} is neither a Dask scheduler address (tcp://HOST:PORT) nor one of "
                            f"{', '.join(LOCAL_SCHEDULERS)}")


@dataclass(frozen=True)
class Task:
    """What a worker does with each rank's files besides parsing them."""

    with_keys: bool = False  # compute each file's tracer.job.store.source_key (for the dataset's manifest)
    align: bool = False  # put the timeline on the Unix clock (tracer.timeline.align): a job of several ranks
    store: str | None = None  # write it into this dataset being built (tracer.job.store.write_part)
    #: analyse the rank here and send back its results (tracer.analysis.ranked.rank_results), not its timeline;
    #: its rank as the job will number it where nothing else fails (tracer.job.ranks.rank_of, by the group's place)
    analyze: bool = False
    #: hash the files and write the partition on a side thread of the worker, beside the parse and the
    #: analysis: where cores are left over (more than two per worker), not where every core runs a worker
    side_thread: bool = False
    #: (rank, ns) pairs: a rank's times moved by ns before it is analysed (``--clock-fix``); what is stored is
    #: the rank as its trace has it
    shifts: tuple[tuple[int, int], ...] = ()


@dataclass
class Parsed:
    """What parsing one rank's files gave: its timeline, or the one-line error of the file that failed."""

    index: int
    timeline: Any = None  # a tracer.timeline.Timeline (Any: pickled across processes as it is); None if stored
    error: tuple[str, str, str] | None = None  # (TracerError subclass name, subject, problem)
    keys: list[dict[str, Any]] | None = None  # each file's tracer.job.store.source_key, when asked for
    stored: bool = False  # written into the dataset being built
    seconds: float = 0.0
    results: Any = None  # a tracer.analysis.ranked.RankResults, when the task asked for them
    #: seconds of each step on the worker ("key", "parse", "analyze", "store"; "read" for a stored rank)
    phases: dict[str, float] = field(default_factory=dict)

    def raise_error(self) -> None:
        """Raise the error this rank's parse reported, as the :class:`TracerError` it was."""
        if self.error is None:
            return
        cls = getattr(errors, self.error[0], TracerError)
        raise cls(self.error[1], self.error[2])


def parse_group(index: int, paths: Sequence[str], task: Task) -> Parsed:
    """Parse one rank's files (a process's parts, in order) into one timeline and do ``task``; runs on a worker.
    A :class:`TracerError` is returned, not raised: its class cannot be pickled back as it is, and a job with
    ``--skip-bad-ranks`` goes on without the rank."""

    def load(keys: _Keys | None) -> Any:
        from tracer.timeline import concat  # (pandas, on the worker: as in _rank)

        parts = [parsers.load_trace(p, cache=False, on_raw=keys.hasher(i) if keys else None)
                 for i, p in enumerate(paths)]
        return parts[0] if len(parts) == 1 else concat(parts)

    return _rank(index, paths, task, load, {})


def scan_part(path: str, part: int, parts: int, out: str | None = None) -> tuple[Any, float]:
    """Part ``part`` of ``parts`` of one rank's plain Kineto file scanned (tracer.parsers.kineto_scan.scan_kineto_part),
    and its seconds; runs on a worker, for :func:`merge_group`. None where the part cannot vouch for what it
    read, or the file cannot be read: the merge then parses the whole file, which says why. With ``out`` (a new
    file's path), the part is written there (:mod:`tracer.job.handoff`) and the path comes back instead of the part,
    so that its columns go to the merge without passing through the caller; the part itself where that fails."""
    t0 = time.perf_counter()
    scanned = _scan(path, part, parts)
    if out is not None and scanned is not None:
        try:
            handoff.save(scanned, out)
            return Handoff(out), time.perf_counter() - t0
        except OSError:  # (no room in memory's folder ...: through the caller, as a result, after all)
            pass
    return scanned, time.perf_counter() - t0


@dataclass(frozen=True)
class Handoff:
    """A scanned part left in a file for its merge (:func:`scan_part`'s ``out``)."""

    path: str


def _take(scanned: Any) -> Any:
    """A scanned part as :func:`scan_part` gave it: read from its file where it was left in one (None, for the
    whole-file parse, where that file cannot be read back)."""
    if not isinstance(scanned, Handoff):
        return scanned
    try:
        return handoff.load(scanned.path)
    except Exception:  # noqa: BLE001 - (gone, cut short ...): the whole file parsed instead says what is wrong
        return None


def _scan(path: str, part: int, parts: int) -> Any:
    import mmap

    try:
        # (mapped, not read: each part touches its own range of the file and the few bytes around its cut)
        with open(path, "rb") as f:
            mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError):
        return None
    try:
        return scan_kineto_part(cast(bytes, mapped), part, parts)
    finally:
        try:
            mapped.close()
        except BufferError:  # (a view still held somewhere: the map closes when that goes)
            pass


def merge_group(index: int, paths: Sequence[str], task: Task, scanned: Sequence[tuple[Any, float]]) -> Parsed:
    """:func:`parse_group` of a rank whose one file was scanned in parts (:func:`scan_part`, in file order):
    the parts merged into its timeline, then the same steps. Its phases: "parts" (the slowest part's seconds)
    and "parse" (the merge's)."""

    def load(keys: _Keys | None) -> Any:  # (the parts' bytes are not at hand here: the key reads the file)
        from tracer.parsers.kineto import load_kineto_parts  # (pandas, on the worker: as in _rank)

        return load_kineto_parts(paths[0], [_take(s[0]) for s in scanned])

    return _rank(index, paths, task, load, {"parts": max(s[1] for s in scanned)}, read_now=True)


def _rank(index: int, paths: Sequence[str], task: Task, load: Callable[[_Keys | None], Any],
          laps: dict[str, float], *, read_now: bool = False) -> Parsed:
    """One rank's timeline from ``load`` (on a worker), then ``task``'s steps; ``laps``: phases timed before;
    ``read_now``: ``load`` does not hand the files' bytes over for their keys (:class:`_Keys`)."""
    from tracer.timeline import align  # (pandas: this module is imported without it, before the early scans fork)

    t0 = time.perf_counter()
    clock = _Phases()
    clock.laps.update(laps)
    # A side thread hashes the files (the dataset's keys) while this one parses them, and writes the rank's
    # partition while this one analyses it: hashlib and pyarrow's writer let go of the GIL, so where a core is
    # free (a worker per rank on a many-core host) both cost little on top of the parse and the analysis. Where
    # every core runs a worker the thread only takes turns with them: the steps run in line.
    side = _Side(task.side_thread)
    try:
        keys = _Keys(paths, side, read_now=read_now) if task.with_keys else None
        clock.lap("key")
        timeline = load(keys)
        one_rank(timeline, paths[0])
        if task.align:
            timeline = align(timeline)
        clock.lap("parse")
        if keys is not None and keys.inline_s:  # (hashed in line, inside the parse's lap: said as the key's)
            clock.laps["parse"] -= keys.inline_s
            clock.laps["key"] += keys.inline_s
        storing, rank = None, None
        if task.analyze:
            rank = rank_of(timeline.meta, paths[0], index)[0]
            timeline = with_rank(timeline, rank)
        if task.store is not None:
            # (here, in parallel, rather than after the gather; and what was written is not sent back: the
            # caller reads it from the file, faster than a frame pickled through a pipe or a cluster's sockets)
            storing = side.submit(jobstore.write_part, timeline, Path(task.store), index)
            clock.lap("store")
        results = None
        if rank is not None:
            from tracer.analysis.ranked import rank_results  # (pandas, as align above; only where ranks are analysed)

            results = rank_results(shifted(timeline, dict(task.shifts).get(rank, 0)), rank)
            clock.lap("analyze")
        source_keys = keys.result() if keys is not None else None
        stored = storing.result() if storing is not None else False
        clock.lap("side thread")
    except TracerError as exc:
        return Parsed(index, error=(type(exc).__name__, exc.subject, exc.problem),
                      seconds=time.perf_counter() - t0)
    finally:
        side.close()
    kept = None if stored or results is not None else timeline
    return Parsed(index, kept, keys=source_keys, stored=stored, seconds=time.perf_counter() - t0, results=results,
                  phases=clock.laps)


class _Side:
    """Runs a step on one side thread, or (``threaded`` false) at once in this one; either way a Future."""

    def __init__(self, threaded: bool) -> None:
        self.threaded = threaded
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="tracer-side") if threaded else None

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future[Any]:
        if self._pool is not None:
            return self._pool.submit(fn, *args)
        done: Future[Any] = Future()
        try:
            done.set_result(fn(*args))
        except BaseException as exc:  # noqa: BLE001 - handed to whoever asks for the result, as a thread would
            done.set_exception(exc)
        return done

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)


class _Keys:
    """The dataset's key of each of a rank's files (tracer.job.store.source_key): each file's stat taken now,
    before it is read, and its hash from the bytes the parse reads (handed over by ``load_trace(on_raw=)``), on
    the side thread where there is one; a file whose bytes never came (not a Kineto file) is read for it.
    ``read_now``: the parse will not read the files' bytes here (a merge of parts scanned elsewhere): each file
    is read and hashed on the side thread from now on, beside the merge, not after the analyses."""

    def __init__(self, paths: Sequence[str], side: _Side, *, read_now: bool = False) -> None:
        self.paths, self.side = paths, side
        self.stats: list[list[int] | None] = []
        for p in paths:
            try:
                self.stats.append(digests.stat_key(Path(p)))
            except OSError:  # (the parse says why, in one line)
                self.stats.append(None)
        self.digests: dict[int, Future[str]] = {}
        self.inline_s = 0.0  # seconds spent hashing in this thread (no side thread)
        # (in this thread, with no side thread, the hash would only come first instead of last: no gain)
        if read_now and side.threaded:
            for i, (p, stat) in enumerate(zip(paths, self.stats, strict=True)):
                if stat is not None:  # (after the stat: a write during the hash does not go unseen)
                    self.digests[i] = side.submit(digests.file_digest, Path(p))

    def hasher(self, i: int) -> Callable[[bytes], None]:
        def take(raw: bytes) -> None:
            t0 = time.perf_counter()
            self.digests[i] = self.side.submit(digests.of_bytes, raw)
            if not self.side.threaded:
                self.inline_s += time.perf_counter() - t0

        return take

    def result(self) -> list[dict[str, Any]]:
        return [
            jobstore.source_key(Path(p), digest=self.digests[i].result(), stat=stat)
            if i in self.digests and stat is not None else jobstore.source_key(Path(p))
            for i, (p, stat) in enumerate(zip(self.paths, self.stats))
        ]


class _Phases:
    """Seconds between laps, by name."""

    def __init__(self) -> None:
        self.laps: dict[str, float] = {}
        self._last = time.perf_counter()

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.laps[name] = self.laps.get(name, 0.0) + now - self._last
        self._last = now


def analyze_stored(index: int, path: str, rank: int, shift_ns: int = 0) -> Parsed:
    """Read one rank's stored partition (tracer.job.store) and analyse it (tracer.analysis.ranked), its times
    moved by ``shift_ns`` first; runs on a worker. Only the results come back."""
    from tracer.analysis.ranked import rank_results  # (pandas, on the worker: as in _rank)

    t0 = time.perf_counter()
    clock = _Phases()
    try:
        timeline = shifted(with_rank(jobstore.read_partition(Path(path)), rank), shift_ns)
        clock.lap("read")
        results = rank_results(timeline, rank)
        clock.lap("analyze")
    except TracerError as exc:
        return Parsed(index, error=(type(exc).__name__, exc.subject, exc.problem), seconds=time.perf_counter() - t0)
    return Parsed(index, results=results, seconds=time.perf_counter() - t0, phases=clock.laps)


def shifted(timeline: Any, ns: int) -> Any:
    """``timeline`` with every time moved by ``ns`` (one rank's clock fix); itself where ``ns`` is 0."""
    if not ns:
        return timeline
    from tracer.timeline import Timeline  # (pandas, on the worker: as in _rank)

    events = timeline.events.copy(deep=False)
    events["start_ns"] = events["start_ns"].to_numpy() + ns
    events["end_ns"] = events["end_ns"].to_numpy() + ns
    return Timeline(events, timeline.meta)


def with_rank(timeline: Any, rank: int) -> Any:
    """``timeline`` with every row on ``rank`` (what joining it into a job does to it)."""
    import numpy as np

    from tracer.timeline import Timeline  # (pandas, on the worker: as in _rank)

    events = timeline.events.copy(deep=False)
    events["rank"] = np.full(len(events), rank, dtype=np.int16)
    return Timeline(events, timeline.meta)


def parse_groups(
    groups: Sequence[Sequence[Path]],
    *,
    scheduler: Scheduler,
    task: Task = Task(),
    on_done: Callable[[Parsed], None] | None = None,
    early: EarlyScans | None = None,
) -> list[Parsed]:
    """Parse each group of files (one rank each) on ``scheduler``; the results in the groups' order.
    ``on_done`` is called in this process as each rank finishes (in the order they finish). ``early``: the
    groups' parts already being scanned (:func:`start_early_scans`), used where they are these groups' parts."""
    # absolute (a worker's folder may differ: a cluster's, or a forkserver's); symbolic links kept as given
    if scheduler.name == "processes" and _cores() >= 2 * local_workers(len(groups)):
        task = replace(task, side_thread=True)  # (a core to spare for each worker)
    args = [(i, [os.path.abspath(p) for p in g], task) for i, g in enumerate(groups)]
    if scheduler.name == "processes":
        splits = split_counts([a[1] for a in args])
        if early is not None and early.covers([(a[1][0], k) for a, k in zip(args, splits)]):
            return sorted(_merge_early(args, splits, early, on_done), key=lambda r: r.index)
        if max(splits, default=1) > 1:
            return sorted(_local(parse_group, args, scheduler, on_done, splits), key=lambda r: r.index)
    return run(parse_group, args, scheduler=scheduler, on_done=on_done)


#: The least bytes of a rank's file each part of a split parse gets (:func:`split_counts`): below ~16 MB a
#: part's own costs (its task, pickling its columns back and on to the merge) eat what it saves.
MIN_PART_BYTES = 16 << 20


def split_counts(groups: Sequence[Sequence[str]]) -> list[int]:
    """Into how many parts each rank's file is parsed on local processes: where there are more cores than
    ranks, ``min(cores // ranks, size // MIN_PART_BYTES)`` for a rank of one plain (not gzipped) Kineto file,
    else 1 (a gzipped file must be inflated from its start; a small one is parsed faster whole). On a cluster
    the ranks are not split: its workers' cores are not known here, and a rank per worker keeps them busy."""
    per_rank = _cores() // max(len(groups), 1)
    if per_rank < 2:
        return [1] * len(groups)
    counts = []
    for g in groups:
        k = 1
        if len(g) == 1:
            try:
                size = os.stat(g[0]).st_size
                k = min(per_rank, size // MIN_PART_BYTES)
                if k > 1:
                    with open(g[0], "rb") as f:
                        plain = f.read(2) != b"\x1f\x8b"
                    k = k if plain and parsers.detect_format(Path(g[0])) == "kineto" else 1
            except (OSError, TracerError):
                k = 1  # (the parse says why)
        counts.append(max(k, 1))
    return counts


def analyze_partitions(parts: Sequence[tuple[Path, int]], *, scheduler: Scheduler,
                       on_done: Callable[[Parsed], None] | None = None,
                       shifts: dict[int, int] | None = None) -> list[Parsed]:
    """Each stored partition (its file, its rank) read and analysed on ``scheduler`` (:func:`analyze_stored`),
    a rank's times moved by ``shifts[rank]`` ns first; the results in the order given."""
    moves = shifts or {}
    args = [(i, os.path.abspath(p), rank, moves.get(rank, 0)) for i, (p, rank) in enumerate(parts)]
    return run(analyze_stored, args, scheduler=scheduler, on_done=on_done)


def run(fn: Callable[..., Parsed], args: Sequence[tuple[Any, ...]], *, scheduler: Scheduler,
        on_done: Callable[[Parsed], None] | None = None) -> list[Parsed]:
    """``fn(*a)`` for each of ``args`` on ``scheduler``; the results by their index."""
    if scheduler.name == "distributed":
        results = _on_cluster(fn, args, scheduler, on_done)
    else:
        results = _local(fn, args, scheduler, on_done)
    return sorted(results, key=lambda r: r.index)


def local_workers(n_tasks: int) -> int:
    """How many local processes: one per rank, at most one per core this process may run on."""
    return max(1, min(n_tasks, _cores()))


def _cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # (not on Linux)
        return os.cpu_count() or 1


def _local(fn: Callable[..., Parsed], args: Sequence[tuple[Any, ...]], scheduler: Scheduler,
           on_done: Callable[[Parsed], None] | None, splits: Sequence[int] | None = None) -> list[Parsed]:
    """``run`` on a local scheduler; ``splits``: into how many parts each rank's file is parsed (parse_groups'
    args only; :func:`split_counts`)."""
    counts = list(splits) if splits else [1] * len(args)
    workers = local_workers(sum(counts))
    if scheduler.name != "processes":
        return _compute(fn, args, counts, None, scheduler.name, workers, on_done)
    parked = None
    try:
        if max(counts, default=1) > 1:  # (where the scanned parts wait for their merge: removed below)
            parked = handoff.new_folder(sum(_size(a[1][0]) for a, k in zip(args, counts) if k > 1))
        # What every worker runs is imported here, once, before they are forked: Dask first (each task a worker
        # runs is dask.local's batch_execute_tasks: a worker forked without it imported all of Dask at its first
        # task, 0.45 s on a 16-core host, after this process had imported it too), then the tasks' own modules.
        import_worker_modules()
        # (keep freed memory only where a worker parses more than one rank: kept, a heap's holes can raise a
        # one-rank worker's peak, 0.26 → 0.36 GB per 100 MB rank on 16 cores, for nothing to reuse)
        with _one_line_if_a_worker_dies(), _worker_pool(workers, keep_memory=len(args) > workers) as pool:
            # (The pool is the scheduler: dask's local scheduler submits to it; its "processes" scheduler would
            # import cloudpickle and more, for functions that plain pickle ships by name.)
            return _compute(fn, args, counts, parked, pool, workers, on_done)
    finally:
        if parked is not None:
            shutil.rmtree(parked, ignore_errors=True)


def _worker_pool(workers: int, *, keep_memory: bool) -> Any:
    """A pool of ``workers`` local processes (:func:`start_worker`): forked from this process where it may fork,
    else a forkserver's (:func:`_start_method`). Import what they run first (:func:`import_worker_modules`)."""
    from concurrent.futures import ProcessPoolExecutor

    context = _start_method()
    parent = os.getpid() if context.get_start_method() == "fork" else None  # (else the forkserver forks)
    return ProcessPoolExecutor(max_workers=workers, mp_context=context, initializer=start_worker,
                               initargs=(keep_memory, parent))


@contextlib.contextmanager
def _one_line_if_a_worker_dies() -> Iterator[None]:
    """A local worker process that died (killed, out of memory) is one line, not a BrokenProcessPool traceback."""
    from concurrent.futures.process import BrokenProcessPool

    try:
        yield
    except BrokenProcessPool:
        raise TracerError("", "a worker process parsing the job's ranks died (killed, or out of memory: "
                              "try --scheduler sync, one rank at a time)") from None


def _part_file(parked: str | None, index: int, part: int) -> str | None:
    """Where part ``part`` of rank ``index`` is left for its merge (:func:`scan_part`'s ``out``); None: no folder."""
    return os.path.join(parked, f"rank{index}-part{part}") if parked else None


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def _compute(fn: Callable[..., Parsed], args: Sequence[tuple[Any, ...]], counts: Sequence[int], parked: str | None,
             scheduler: Any, workers: int, on_done: Callable[[Parsed], None] | None,
             scanned: Sequence[list[tuple[Any, float]]] | None = None) -> list[Parsed]:
    """``fn(*a)`` for each of ``args`` (a rank of ``counts[i]`` > 1 parts: scanned, then merged) as dask tasks on
    ``scheduler`` (a process pool, or a local scheduler's name, of ``workers``); scanned parts left in ``parked``.
    ``scanned``: each rank's parts, scanned already (:func:`start_early_scans`): only the merges are tasks."""
    import dask
    from dask.callbacks import Callback

    tasks = []
    for i, (a, k) in enumerate(zip(args, counts, strict=True)):
        if k == 1:
            tasks.append(dask.delayed(fn, pure=False)(*a))
        elif scanned is not None:
            tasks.append(dask.delayed(merge_group, pure=False)(*a, scanned[i]))
        else:  # (parse_group's rank, its file scanned in k parts on as many processes, then merged on one)
            index, paths, task = a
            scans = [dask.delayed(scan_part, pure=False)(
                paths[0], j, k, _part_file(parked, index, j)) for j in range(k)]
            tasks.append(dask.delayed(merge_group, pure=False)(index, paths, task, scans))

    class _Progress(Callback):
        # Called in this process as each task ends, whichever local scheduler ran it.
        def _posttask(self, key: Any, result: Any, dsk: Any, state: Any, worker_id: Any) -> None:
            if on_done is not None and isinstance(result, Parsed):
                on_done(result)

    with _Progress():  # type: ignore[no-untyped-call]  # dask Callback.__init__ is unannotated
        if scheduler == "threads":
            # (a pool of this job's own, ended with it: dask's "threads" keeps a pool per size for the process's
            # life, whose threads outlive the job and keep the command from its quick exit, tracer.cli.leave)
            with ThreadPoolExecutor(workers, thread_name_prefix="tracer-job") as threads:
                return list(dask.compute(*tasks, scheduler=threads))
        if isinstance(scheduler, str):
            return list(dask.compute(*tasks, scheduler=scheduler, num_workers=workers))
        return list(dask.compute(*tasks, scheduler=scheduler))


class EarlyScans:
    """A job's split rank files being scanned (:func:`scan_part`) on local processes forked before the job's
    process imports pandas and Dask (:func:`start_early_scans`). The job's process imports them while the parts
    are scanned, then merges the parts on a pool forked from it (:func:`parse_groups`, ``early``). Close it
    when the job is read: a pool the job did not use is shut down, its parked parts removed."""

    def __init__(self, pool: Any, futures: dict[str, list[Future[Any]]], parked: str | None) -> None:
        self._pool = pool
        self._futures = futures  # each file's absolute path -> its parts' futures, in file order
        self._parked = parked
        self.used = False

    def covers(self, files: Sequence[tuple[str, int]]) -> bool:
        """Whether these (file, parts) are exactly the ones being scanned, each in as many parts."""
        return (not self.used and len(files) == len(self._futures)
                and all(len(self._futures.get(f, ())) == k for f, k in files))

    def results(self, files: Sequence[str]) -> list[list[tuple[Any, float]]]:
        """Each file's scanned parts (:func:`scan_part`'s results), waiting for them; then the scanning pool is
        shut down (its processes end: the merges run on a pool forked after the imports)."""
        self.used = True
        try:
            return [[f.result() for f in self._futures[p]] for p in files]
        finally:
            self._pool.shutdown(wait=True, cancel_futures=True)

    def close(self) -> None:
        """Shut the scanning pool down (at once where the job did not use it) and remove the parked parts."""
        self._pool.shutdown(wait=self.used, cancel_futures=True)
        if self._parked is not None:
            shutil.rmtree(self._parked, ignore_errors=True)
            self._parked = None


def start_early_scans(groups: Sequence[Sequence[str | os.PathLike[str]]]) -> EarlyScans | None:
    """Start scanning the parts of a job's rank files on local processes now, before this process imports
    pandas and Dask (which take it ~0.5 s on a 16-core host, while 16 cores could scan): where every rank is
    one plain Kineto file split into parts (:func:`split_counts`: cores outnumber ranks) and this process may
    fork (one thread, Linux). None where it does not apply (the job is then read as it would be without).
    The caller decides that the job will be parsed on local processes (not read back from its dataset) and
    closes what this returns (:meth:`EarlyScans.close`)."""
    paths = [[os.path.abspath(p) for p in g] for g in groups]
    if len(paths) < 2 or any(len(g) != 1 for g in paths):
        return None
    counts = split_counts(paths)
    if min(counts) < 2 or _start_method().get_start_method() != "fork":
        return None
    from concurrent.futures import ProcessPoolExecutor

    parked = handoff.new_folder(sum(_size(g[0]) for g in paths))
    try:
        pool = ProcessPoolExecutor(max_workers=local_workers(sum(counts)), initializer=start_scanner,
                                   initargs=(os.getpid(),), mp_context=_start_method())
        futures = {
            g[0]: [pool.submit(scan_part, g[0], j, k, _part_file(parked, i, j)) for j in range(k)]
            for i, (g, k) in enumerate(zip(paths, counts, strict=True))
        }
    except BaseException:
        if parked is not None:
            shutil.rmtree(parked, ignore_errors=True)
        raise
    return EarlyScans(pool, futures, parked)


def _merge_early(args: Sequence[tuple[Any, ...]], counts: Sequence[int], early: EarlyScans,
                 on_done: Callable[[Parsed], None] | None) -> list[Parsed]:
    """:func:`parse_groups` of ranks whose parts ``early`` scanned: their scans awaited, then each rank's merge
    (:func:`merge_group`) a Dask task on a pool forked now, with everything a merge needs imported."""
    # (what the merges need is imported while the parts are still being scanned, not after)
    import_worker_modules()
    workers = local_workers(len(args))
    with _one_line_if_a_worker_dies():
        scanned = early.results([a[1][0] for a in args])
        with _worker_pool(workers, keep_memory=False) as pool:
            return _compute(parse_group, args, counts, None, pool, workers, on_done, scanned)


#: what a local worker's tasks need (:func:`import_worker_modules`): Dask's scheduler (which runs them), the
#: parser and the timeline it builds, the dataset's Parquet writer, the hash of its keys
WORKER_IMPORTS = ("dask.local", "dask.callbacks", "tracer.parsers.kineto", "tracer.timeline", "tracer.timeline.comm",
                  "tracer.job.store", "tracer.files.storage", "blake3")


def import_worker_modules() -> None:
    """Import :data:`WORKER_IMPORTS` (a module that fails is left to the task that needs it to say why): in the
    job's process before it forks its workers, which then have them; in a worker that was not forked from it (a
    forkserver's, a spawned one) as it starts."""
    import importlib

    for name in WORKER_IMPORTS:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - a head start only: the task that needs it says what is wrong
            pass


def start_worker(keep_memory: bool, parent: int | None = None) -> None:
    """A local worker process's start: :func:`die_with` its parent, :func:`keep_freed_memory` where it will parse
    several ranks, then :func:`import_worker_modules` (nothing to do in a worker forked from the job's process).
    ``parent``: the pid of the process that forked it (None: a forkserver's child, which ends with the job)."""
    die_with(parent)
    default_sigterm()
    if keep_memory:
        keep_freed_memory()
    import_worker_modules()


def start_scanner(parent: int) -> None:
    """An early scan's worker's start (:func:`start_early_scans`): :func:`die_with` its parent and
    :func:`default_sigterm`; nothing imported (its parent has not imported pandas yet, and it needs none)."""
    die_with(parent)
    default_sigterm()


def default_sigterm() -> None:
    """SIGTERM ends this worker at once, as it ends any process: a worker forked from the ``tracer`` command
    inherits the command's handler (:mod:`tracer.cli`: SIGTERM raised as an exception, for its clean-up),
    which in a worker would only turn a stopped task into an error sent back. The job's process, told by its
    pool that a worker died, says so in one line."""
    import signal

    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


#: prctl's option (linux/prctl.h): the signal this process gets when its parent ends
_PR_SET_PDEATHSIG = 1


def die_with(parent: int | None) -> None:
    """Linux: this process is killed (SIGKILL) as soon as its parent ends, however it ends (SIGTERM from a batch
    system's time limit, SIGKILL, the out-of-memory killer): a job's workers do not go on parsing ranks for nobody.
    ``parent``: the pid the caller forked this process from; where the parent is already gone (it ended before
    the kernel was told), this process ends now. Elsewhere nothing: there a worker of a job that was killed can
    stay blocked on its queue (the other workers hold the pipe's write end, so it never reads its end)."""
    import sys

    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes
        import signal

        if ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) != 0:
            return
    except Exception:  # noqa: BLE001 - (no _ctypes, no symbol ...): a guard only, never an error
        return
    if parent is not None and os.getppid() != parent:
        os._exit(1)


#: glibc's mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3


def keep_freed_memory() -> None:
    """In a local worker process (it parses rank after rank): let glibc's malloc keep freed memory for the next
    rank instead of handing it back to the kernel. By default every allocation over its threshold (the file's
    bytes, the large arrays) is a fresh mmap, faulted in page by page and unmapped when freed: ~37,000 page faults
    and ~0.15 s of system time per 100 MB rank, ~3,000 and ~0.03 s with these settings (measured in
    docs/performance.md). Only for workers that parse several ranks (the pool sets it so), never in the
    caller's own process (a dashboard's server lives on); nothing where malloc is not glibc's."""
    import sys

    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        mallopt = ctypes.CDLL(None).mallopt
        # glibc 2.36 (measured) takes 1 GiB, so a rank's 100 MB of file bytes come from the heap too; a glibc
        # that refuses thresholds over 32 MiB still keeps everything below that
        if not mallopt(_M_MMAP_THRESHOLD, 1 << 30):
            mallopt(_M_MMAP_THRESHOLD, 32 << 20)
        mallopt(_M_TRIM_THRESHOLD, 1 << 30)
    except Exception:  # noqa: BLE001 - (no _ctypes, musl, no symbol table ...): a speed-up only, never an error
        return


#: what a forkserver imports before it forks workers: numpy on one OpenBLAS thread first (tracer._blas), then
#: what every worker needs
FORKSERVER_PRELOAD = ("tracer.job._preload", "tracer.job.parallel", "tracer.parsers", *WORKER_IMPORTS)


def _start_method() -> Any:
    """How local worker processes start: fork where this process runs one thread (fastest, and the caller's
    ``__main__`` is not run again, so a script without an ``if __name__ == "__main__"`` guard works); forkserver
    where it runs more (a Dash server, a progress spinner), whose locks a fork would copy mid-use. (Spawn and
    forkserver re-import the caller's main module in each worker, as every multiprocessing user knows.)"""
    import multiprocessing
    import sys
    import threading

    if sys.platform == "linux" and threading.active_count() == 1:
        return multiprocessing.get_context("fork")
    ctx = multiprocessing.get_context("forkserver" if sys.platform != "win32" else "spawn")
    if sys.platform != "win32":
        ctx.set_forkserver_preload(list(FORKSERVER_PRELOAD))
    return ctx


def _on_cluster(fn: Callable[..., Parsed], args: Sequence[tuple[Any, ...]], scheduler: Scheduler,
                on_done: Callable[[Parsed], None] | None) -> list[Parsed]:
    try:
        from distributed import Client, as_completed
    except ImportError:
        raise UsageError(str(scheduler), "a Dask cluster needs the distributed package: "
                                         "pip install 'tracer[cluster]'") from None
    try:
        client = Client(scheduler.address, timeout="10s", set_as_default=False)
    except (OSError, TimeoutError, ValueError) as exc:
        where = "--scheduler" if scheduler.origin == "option" else SCHEDULER_ENV
        raise UsageError(where, f"cannot reach the Dask scheduler at {scheduler.address}: "
                                f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
    # (each rank whole on one worker: not split into parts as on local processes, see split_counts)
    try:
        futures = [client.submit(fn, *a, pure=False) for a in args]
        results = []
        for future in as_completed(futures, loop=client.loop):  # (not the default client: none is set)
            try:
                result = future.result()
            except Exception as exc:  # noqa: BLE001 - KilledWorker, a lost connection ...: one line, not a traceback
                why = str(exc).splitlines()[0] if str(exc) else ""
                raise TracerError(str(scheduler), f"the cluster failed parsing the job's ranks: "
                                                  f"{type(exc).__name__}: {why}") from None
            results.append(result)
            if on_done is not None:
                on_done(result)
        return results
    finally:
        client.close()
