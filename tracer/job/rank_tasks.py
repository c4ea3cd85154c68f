"""What a worker does with one rank of a job: parse its files (whole, or merged from parts scanned elsewhere), put
it on the Unix clock, key its files for the dataset, write it into the dataset being built, analyse it; or read
a stored rank back and analyse it. Each task returns a :class:`Parsed`: its results, its one-line error, the
seconds of its steps. :mod:`tracer.job.task_graph` runs these tasks, one per rank, on a scheduler.

Imports the timeline, the analysis and the Parquet storage (pandas) at its top: the job's process imports this
module once its early scans have started, and its workers are forked after that (or preload it: a forkserver's).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

import tracer.errors as errors
from tracer.analysis.overlap import shared_work
from tracer.analysis.ranked import rank_results
from tracer.errors import TracerError
from tracer.files import digests
from tracer.job import handoff, views
from tracer.job import store as jobstore
from tracer.job.partitions import read_partition, write_part
from tracer.job.ranks import one_rank, rank_of
from tracer.job.scan import Handoff
from tracer.parsers.kineto import load_kineto_parts
from tracer.parsers.load import load_trace
from tracer.timeline import Timeline, align, concat


@dataclass(frozen=True)
class Task:
    """What a worker does with each rank's files besides parsing them."""

    with_keys: bool = False  # compute each file's tracer.job.store.source_key (for the dataset's manifest)
    align: bool = False  # put the timeline on the Unix clock (tracer.timeline.align): a job of several ranks
    store: str | None = None  # write it into this dataset being built (tracer.job.partitions.write_part)
    #: analyse the rank here and send back its results (tracer.analysis.ranked.rank_results), not its timeline;
    #: its rank as the job will number it where nothing else fails (tracer.job.ranks.rank_of, by the group's place)
    analyze: bool = False
    #: hash the files and write the partition on a side thread of the worker, beside the parse and the
    #: analysis: where cores are left over (more than two per worker), not where every core runs a worker
    side_thread: bool = False
    #: (rank, ns) pairs: a rank's times moved by ns before it is analysed (``--clock-fix``); what is stored is
    #: the rank as its trace has it
    shifts: tuple[tuple[int, int], ...] = ()
    #: lay the rank out for drawing and write its pack beside its partition (tracer.job.views): a job too large
    #: for the dashboard to read whole
    views: bool = False


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

    def load(keys: _Keys | None) -> Timeline:
        parts = [load_trace(p, cache=False, on_raw=keys.hasher(i) if keys else None) for i, p in enumerate(paths)]
        return parts[0] if len(parts) == 1 else concat(parts)

    return _rank(index, paths, task, load, {})


def merge_group(index: int, paths: Sequence[str], task: Task, scanned: Sequence[tuple[Any, float]]) -> Parsed:
    """:func:`parse_group` of a rank whose one file was scanned in parts (:func:`tracer.job.scan.scan_part`, in
    file order): the parts merged into its timeline, then the same steps. Its phases: "parts" (the slowest
    part's seconds) and "parse" (the merge's)."""

    def load(keys: _Keys | None) -> Timeline:  # (the parts' bytes are not at hand here: the key reads the file)
        return load_kineto_parts(paths[0], [_take(s[0]) for s in scanned])

    return _rank(index, paths, task, load, {"parts": max(s[1] for s in scanned)}, read_now=True)


def _take(scanned: Any) -> Any:
    """A scanned part as :func:`tracer.job.scan.scan_part` gave it: read from its file where it was left in one
    (None, for the whole-file parse, where that file cannot be read back)."""
    if not isinstance(scanned, Handoff):
        return scanned
    try:
        return handoff.load(scanned.path)
    except Exception:  # noqa: BLE001 - (gone, cut short ...): the whole file parsed instead says what is wrong
        return None


def _rank(index: int, paths: Sequence[str], task: Task, load: Callable[[_Keys | None], Timeline],
          laps: dict[str, float], *, read_now: bool = False) -> Parsed:
    """One rank's timeline from ``load`` (on a worker), then ``task``'s steps; ``laps``: phases timed before;
    ``read_now``: ``load`` does not hand the files' bytes over for their keys (:class:`_Keys`)."""
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
            storing = side.submit(write_part, timeline, Path(task.store), index)
            clock.lap("store")
        results = None
        with shared_work():  # (the rank's GPU sets found once for the analyses and the layout)
            if rank is not None:
                results = rank_results(shifted(timeline, dict(task.shifts).get(rank, 0)), rank)
                clock.lap("analyze")
            if task.views and task.store is not None:
                # (laid out as the rank the job will number it, where nothing else fails: finish keeps it only then)
                laid = rank if rank is not None else rank_of(timeline.meta, paths[0], index)[0]
                views.write_rank_pack(timeline if rank is not None else with_rank(timeline, laid),
                                      jobstore.view_file(Path(task.store), index, laid),
                                      known=results.parts if results is not None else None)
                clock.lap("lay out")
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
    """Read one rank's stored partition (tracer.job.partitions) and analyse it (tracer.analysis.ranked), its times
    moved by ``shift_ns`` first; runs on a worker. Only the results come back."""
    t0 = time.perf_counter()
    clock = _Phases()
    try:
        timeline = shifted(with_rank(read_partition(Path(path)), rank), shift_ns)
        clock.lap("read")
        results = rank_results(timeline, rank)
        clock.lap("analyze")
    except TracerError as exc:
        return Parsed(index, error=(type(exc).__name__, exc.subject, exc.problem), seconds=time.perf_counter() - t0)
    return Parsed(index, results=results, seconds=time.perf_counter() - t0, phases=clock.laps)


def shifted(timeline: Timeline, ns: int) -> Timeline:
    """``timeline`` with every time moved by ``ns`` (one rank's clock fix); itself where ``ns`` is 0."""
    if not ns:
        return timeline
    events = timeline.events.copy(deep=False)
    events["start_ns"] = events["start_ns"].to_numpy() + ns
    events["end_ns"] = events["end_ns"].to_numpy() + ns
    return Timeline(events, timeline.meta)


def with_rank(timeline: Timeline, rank: int) -> Timeline:
    """``timeline`` with every row on ``rank`` (what joining it into a job does to it)."""
    events = timeline.events.copy(deep=False)
    events["rank"] = np.full(len(events), rank, dtype=np.int16)
    return Timeline(events, timeline.meta)
