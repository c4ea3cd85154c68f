"""A job's ranks read and put together, on the pandas side of :mod:`tracer.job.load` (the job's front door, which
imports this module once it has set the job's early scans going): each rank read from the job's stored dataset or
parsed (here, or on the scheduler: :mod:`tracer.job.task_graph`), then joined into one timeline on the Unix clock,
or, for a summary, each rank analysed where it is read and only the results combined.

Imports the timeline and the analysis (pandas) at its top.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracer.analysis import ranked, summary
from tracer.analysis.comm import shift_ranks
from tracer.analysis.summary import Summary
from tracer.errors import TracerError, UsageError
from tracer.job import kept_results, partitions, rank_tasks, task_graph
from tracer.job import store as jobstore
from tracer.job.checks import check_job, rank_bounds
from tracer.job.rank_tasks import Parsed, Task
from tracer.job.ranks import RankTrace, assign_ranks, group_parts, one_rank
from tracer.job.scan import EarlyScans
from tracer.job.scheduling import Scheduler, in_this_process, resolve_scheduler
from tracer.timeline import Timeline, TraceMeta, align, concat
from tracer.timeline.combine import concat_meta


@dataclass(frozen=True)
class RankDone:
    """Progress of a job's parse: one rank's files read (``error``: its one-line error, or "")."""

    done: int
    total: int
    files: tuple[Path, ...]
    seconds: float
    error: str = ""


def job_timeline(
    given: list[Path],
    *,
    load: Callable[[Path], Timeline] | None,
    scheduler: str | None,
    cache: bool,
    ranks: Sequence[int] | None,
    skip_bad_ranks: bool,
    on_rank: Callable[[RankDone], None] | None,
    on_cache_write: Callable[[Path], None] | None,
    on_skip: Callable[[TracerError], None] | None,
) -> Timeline:
    """:func:`tracer.job.load.load_job` of the traces ``given`` (at least one), its arguments as it says."""
    if load is not None:
        groups = group_parts(given)
        timelines = [_load_group(g, load) for g in groups]
        return _assemble(given, [g[0] for g in groups], timelines, ranks)
    opened = _open(given, scheduler=scheduler, cache=cache, ranks=ranks, skip_bad_ranks=skip_bad_ranks,
                   on_rank=on_rank, on_cache_write=on_cache_write, on_skip=on_skip, analyze=False)
    job = _join(given, opened.files, opened.items, opened.found, subset=ranks is not None)
    _note(job.meta, opened)
    return job


def job_summary(given: list[Path], early: EarlyScans | None, *, scheduler: str | None, cache: bool,
                ranks: Sequence[int] | None, skip_bad_ranks: bool, on_rank: Callable[[RankDone], None] | None,
                on_cache_write: Callable[[Path], None] | None, on_skip: Callable[[TracerError], None] | None,
                shifts: Mapping[int, int] | None) -> tuple[Summary, TraceMeta]:
    """:func:`tracer.job.load.summarize_job` of the traces ``given`` (at least one), its arguments as it says;
    ``early``: the job's parts being scanned already (:func:`tracer.job.scan.start_early_scans`), or None."""
    args: dict[str, Any] = dict(scheduler=scheduler, cache=cache, ranks=ranks, skip_bad_ranks=skip_bad_ranks,
                                on_rank=on_rank, on_cache_write=on_cache_write, on_skip=on_skip)
    moved = {int(r): int(ns) for r, ns in (shifts or {}).items() if ns}
    if ranked.combinable():
        opened = _open(given, analyze=True, shifts=moved, early=early, **args)
        if all(r.rank == f.rank for r, f in zip(opened.items, opened.found)):
            order = sorted(range(len(opened.found)), key=lambda i: opened.found[i].rank)
            metas = [opened.items[i].meta for i in order]
            keep = [i for i, j in enumerate(order) if opened.items[j].rows] or [0]
            meta = _job_meta(given, concat_meta(metas, keep), [opened.found[i] for i in order])
            check_job(meta, [opened.found[i] for i in order], [rank_bounds(opened.items[i]) for i in order],
                      subset=ranks is not None)
            _note(meta, opened)
            if moved:
                meta.extra["clock_fix_ns"] = {str(r): ns for r, ns in sorted(moved.items())}
            return ranked.combine(opened.items, meta), meta
        # (a rank numbered by its place moved up past one left out: read again, saying nothing twice)
        args.update(on_rank=None, on_skip=None)
    job = job_timeline(given, load=None, **args)
    if moved:
        job.meta.extra["clock_fix_ns"] = {str(r): ns for r, ns in sorted(moved.items())}
        job = Timeline(shift_ranks(job.events, moved), job.meta)
    return summary.analyze(job), job.meta


def job_store(given: list[Path], *, scheduler: str | None, ranks: Sequence[int] | None,
              on_rank: Callable[[RankDone], None] | None,
              on_cache_write: Callable[[Path], None] | None) -> jobstore.StoredJob | None:
    """:func:`tracer.job.load.store_job` of the traces ``given`` (at least one), its arguments as it says."""
    groups = group_parts(given)
    resolve_scheduler(scheduler)  # (a bad address is refused whether or not it is needed)
    dataset = jobstore.dataset_of(groups, True)
    if dataset is None:
        return None
    entries = _stored_entries(dataset, given, ranks)
    if entries is None:
        # parsed and stored as a summary's first open is: each rank's results come back, never its timeline
        _open(given, scheduler=scheduler, cache=True, ranks=ranks, skip_bad_ranks=False, on_rank=on_rank,
              on_cache_write=on_cache_write, on_skip=None, analyze=True)
        entries = _stored_entries(dataset, given, ranks)
    return None if entries is None else jobstore.StoredJob(dataset, tuple(entries))


def job_window(given: list[Path], stored: jobstore.StoredJob, window: tuple[int | None, int | None],
               margin_ns: int) -> tuple[Timeline, int]:
    """The stored job's rows that bear on the window ``window`` (ns from the job's first interval; None: open) as
    one timeline on the Unix clock, and that first interval's start (ns): each rank's rows within ``margin_ns`` of
    the window stretched over the GPU work that ran in it or was launched in it, and every row of its collectives
    (:func:`tracer.job.partitions.read_near`), read one rank at a time; the job's meta as :func:`job_timeline`
    gives it."""
    files = stored.files
    origin = partitions.first_start(files)
    if origin is None:
        raise UsageError(os.path.commonpath([str(p) for p in given]), "the job holds no interval")
    lo = None if window[0] is None else origin + window[0]
    hi = None if window[1] is None else origin + window[1]
    entries = sorted(stored.entries, key=lambda e: e.rank)
    timelines = [partitions.read_near(f, lo, hi, margin_ns) for f in files]
    as_given = {str(p.resolve()): p for p in given}  # (the manifest holds resolved paths)
    firsts = [as_given.get(e.sources[0], Path(e.sources[0])) for e in entries]
    found = [RankTrace(f, e.rank, e.rank_from) for f, e in zip(firsts, entries)]
    job = concat(timelines, ranks=[e.rank for e in entries])
    _job_meta(given, job.meta, found)
    check_job(job.meta, found, [partitions.bounds(f) for f in files], subset=len(entries) < len(
        jobstore.read_manifest(stored.dataset).entries))  # type: ignore[union-attr]
    job.meta.extra["stored_as"] = str(stored.dataset)
    return job, origin


def _stored_entries(dataset: Path, given: Sequence[Path], ranks: Sequence[int] | None) -> list[Any] | None:
    """The entries of ``dataset`` to read for the job ``given`` (:func:`tracer.job.store.valid_entries`), a rank
    it has not got said in one line."""
    stored_ranks = jobstore.stored_ranks(dataset, given)
    if stored_ranks is None:
        return None
    if ranks is not None:
        _check_ranks_exist(given, [RankTrace(Path(""), r, "") for r in stored_ranks], ranks)
    return jobstore.valid_entries(dataset, given, ranks)


@dataclass
class _Opened:
    """A job read: each kept rank's file, rank and timeline (or, ``analyze``, its results)."""

    files: list[Path]
    found: list[RankTrace]
    items: list[Any]
    skipped: list[TracerError]
    stored_as: Path | None = None


def _note(meta: TraceMeta, opened: _Opened) -> None:
    if opened.stored_as is not None:
        meta.extra["stored_as"] = str(opened.stored_as)
    if opened.skipped:
        meta.extra["skipped_ranks"] = {exc.subject: exc.problem for exc in opened.skipped}


def _open(
    given: list[Path],
    *,
    scheduler: str | None,
    cache: bool,
    ranks: Sequence[int] | None,
    skip_bad_ranks: bool,
    on_rank: Callable[[RankDone], None] | None,
    on_cache_write: Callable[[Path], None] | None,
    on_skip: Callable[[TracerError], None] | None,
    analyze: bool,
    shifts: Mapping[int, int] | None = None,
    early: EarlyScans | None = None,
) -> _Opened:
    """The job's ranks read: from the stored dataset where it is valid, else parsed (and stored)."""
    groups = group_parts(given)
    chosen = resolve_scheduler(scheduler)  # (a bad address is refused whether or not it is needed)
    dataset = jobstore.dataset_of(groups, cache)
    if dataset is not None:
        stored_ranks = jobstore.stored_ranks(dataset, given)
        if stored_ranks is not None and ranks is not None:  # (an unknown rank: said without parsing anything)
            _check_ranks_exist(given, [RankTrace(Path(""), r, "") for r in stored_ranks], ranks)
        entries = jobstore.valid_entries(dataset, given, ranks) if stored_ranks is not None else None
        if entries is not None:
            stored: list[Any]
            if analyze:
                stored = _analyze_stored(dataset, entries, chosen, jobstore.total_bytes(groups), shifts or {})
            else:
                stored = partitions.read_ranks(dataset, entries)
            as_given = {str(p.resolve()): p for p in given}  # (the manifest holds resolved paths)
            firsts = [as_given.get(e.sources[0], Path(e.sources[0])) for e in entries]
            return _Opened(firsts, [RankTrace(f, e.rank, e.rank_from) for f, e in zip(firsts, entries)], stored, [],
                           dataset)

    building = jobstore.begin(dataset) if dataset is not None else None
    try:
        parsed = _parse(groups, scheduler=chosen, with_keys=dataset is not None, align=len(groups) > 1,
                        store=building, on_rank=on_rank, analyze=analyze, shifts=shifts, early=early)
    except BaseException:
        if building is not None:
            jobstore.abandon(building)
        raise
    bad = [p for p in parsed if p.error is not None]
    if bad and not skip_bad_ranks:
        if building is not None:
            jobstore.abandon(building)
        bad[0].raise_error()
    skipped: list[TracerError] = []
    for p in bad:
        try:
            p.raise_error()
        except TracerError as exc:
            skipped.append(exc)
            if on_skip is not None:
                on_skip(exc)
    good = [p for p in parsed if p.error is None]
    files = [groups[p.index][0] for p in good]
    try:
        if not good:
            raise UsageError(os.path.commonpath([str(p) for p in given]), "no rank of the job could be read")
        # (on the Unix clock already: aligned where they were parsed; read from the dataset where written there)
        items = [p.results if analyze else
                 p.timeline if p.timeline is not None or building is None else partitions.read_part(building, p.index)
                 for p in good]
        found = assign_ranks(files, items)
    except BaseException:
        if building is not None:
            jobstore.abandon(building)
        raise
    if building is not None and dataset is not None:
        if not bad and all(p.stored for p in good):  # (a job read without a rank is not stored)
            parts = [(p.index, jobstore.RankEntry(r.rank, r.rank_from, tuple(str(Path(f).resolve()) for f in
                                                                              groups[p.index]), tuple(p.keys or ())))
                     for r, p in zip(found, good)]
            kept = _signed_results(parts, items) if analyze and not shifts else None
            if jobstore.finish(building, dataset, given, parts, kept) and on_cache_write is not None:
                on_cache_write(dataset)
        else:
            jobstore.abandon(building)
    keep = range(len(found)) if ranks is None else [i for i, r in enumerate(found) if r.rank in set(ranks)]
    _check_ranks_exist(given, found, ranks)
    return _Opened([files[i] for i in keep], [found[i] for i in keep], [items[i] for i in keep], skipped)


def _signed_results(parts: Sequence[tuple[int, jobstore.RankEntry]], items: Sequence[Any]) -> dict[int, bytes]:
    """The ranks' results (``items``, in the order of ``parts``: each rank's group index and manifest entry) as
    :mod:`tracer.job.kept_results` keeps them in the dataset being stored: those made as the rank the job numbers
    them (the others are made again when read)."""
    out: dict[int, bytes] = {}
    for (_index, entry), results in zip(parts, items):
        blob = kept_results.signed_results(results, entry)
        if blob is not None:
            out[entry.rank] = blob
    return out


def _analyze_stored(dataset: Path, entries: Sequence[Any], chosen: Scheduler, total_bytes: int,
                    shifts: Mapping[int, int]) -> list[Any]:
    """The stored ranks ``entries`` analysed where they are read (each moved by ``shifts[rank]`` ns first): on the
    scheduler's workers, or here for one rank or a small job (as :func:`_parse` decides). A rank whose results
    the dataset keeps (:mod:`tracer.job.kept_results`) is not read at all; those made here are kept there."""
    results: dict[int, Any] = {e.rank: kept_results.read(dataset, e) for e in entries if not shifts.get(e.rank, 0)}
    todo = [e for e in entries if results.get(e.rank) is None]
    parts = [(jobstore.partition_file(dataset, e.rank), e.rank) for e in todo]
    if not parts:
        done = []
    elif in_this_process(len(parts), chosen, total_bytes * len(parts) // max(len(entries), 1)):
        done = [rank_tasks.analyze_stored(i, str(p), r, shifts.get(r, 0)) for i, (p, r) in enumerate(parts)]
    else:
        done = task_graph.analyze_partitions(parts, scheduler=chosen, shifts=dict(shifts))
    for d in done:
        d.raise_error()
    for e, d in zip(todo, done):
        results[e.rank] = d.results
        if not shifts.get(e.rank, 0):
            kept_results.keep(dataset, e, d.results)
    return [results[e.rank] for e in entries]


def _load_group(group: Sequence[Path], load: Callable[[Path], Timeline]) -> Timeline:
    parts = [load(p) for p in group]
    return parts[0] if len(parts) == 1 else concat(parts)


def _parse(groups: Sequence[Sequence[Path]], *, scheduler: Scheduler, with_keys: bool, align: bool, store: Path | None,
           on_rank: Callable[[RankDone], None] | None, analyze: bool = False,
           shifts: Mapping[int, int] | None = None, early: EarlyScans | None = None) -> list[Any]:
    """Each group parsed (aligned, and written into the dataset being built, where asked): in this process for
    one group or a small job, else on Dask."""
    done = 0

    def report(p: Parsed) -> None:
        nonlocal done
        done += 1
        if on_rank is not None:
            error = f"{p.error[1]}: {p.error[2]}" if p.error else ""
            on_rank(RankDone(done, len(groups), tuple(groups[p.index]), p.seconds, error))

    # (a job too large for the dashboard to read whole: each rank laid out as it is parsed, beside its partition)
    large = store is not None and jobstore.total_bytes(groups) > jobstore.LARGE_JOB_BYTES
    task = Task(with_keys=with_keys, align=align, store=str(store) if store is not None else None,
                analyze=analyze, shifts=tuple(sorted((shifts or {}).items())), views=large)
    if in_this_process(len(groups), scheduler, jobstore.total_bytes(groups)):
        results = []
        for i, g in enumerate(groups):
            results.append(rank_tasks.parse_group(i, [str(p) for p in g], task))
            report(results[-1])
        return results
    return task_graph.parse_groups(groups, scheduler=scheduler, task=task, on_done=report, early=early)


def _check_ranks_exist(given: Sequence[Path], found: Sequence[RankTrace], ranks: Sequence[int] | None) -> None:
    if ranks is None:
        return
    have = {r.rank for r in found}
    missing = [r for r in ranks if r not in have]
    if missing:
        raise UsageError(os.path.commonpath([str(p) for p in given]),
                         f"the job has no rank {', '.join(map(str, missing))} (it has {_ranges(sorted(have))})")


def _ranges(values: Sequence[int]) -> str:
    return ", ".join(str(v) for v in values) if len(values) < 8 else f"{values[0]}–{values[-1]}"


def _assemble(given: Sequence[Path], files: Sequence[Path], timelines: Sequence[Timeline],
              ranks: Sequence[int] | None) -> Timeline:
    for f, t in zip(files, timelines):
        one_rank(t, f)
    found = assign_ranks(files, timelines)
    _check_ranks_exist(given, found, ranks)
    aligned = [align(t) for t in timelines] if len(timelines) > 1 else list(timelines)
    keep = range(len(found)) if ranks is None else [i for i, r in enumerate(found) if r.rank in set(ranks)]
    return _join(given, [files[i] for i in keep], [aligned[i] for i in keep], [found[i] for i in keep],
                 subset=ranks is not None)


def _join(given: Sequence[Path], files: Sequence[Path], timelines: Sequence[Timeline],
          found: Sequence[RankTrace], *, subset: bool = False) -> Timeline:
    """The aligned ``timelines`` of ranks ``found`` as one, in rank order, with the job's meta (``subset``: the
    ranks were chosen, see :func:`tracer.job.checks.check_job`)."""
    order = sorted(range(len(found)), key=lambda i: found[i].rank)
    job = concat([timelines[i] for i in order], ranks=[found[i].rank for i in order])
    _job_meta(given, job.meta, [found[i] for i in order])
    check_job(job.meta, [found[i] for i in order], [rank_bounds(timelines[i]) for i in order], subset=subset)
    return job


def _job_meta(given: Sequence[Path], meta: TraceMeta, found: Sequence[RankTrace]) -> TraceMeta:
    """``meta`` (the ranks' meta concatenated) named as the job's: its folder, and which file each rank
    (``found``, in rank order) came from and why."""
    meta.source = os.path.commonpath([str(p) for p in given]) if len(given) > 1 else str(given[0])
    meta.extra["ranks"] = {str(r.rank): {"source": str(r.path), "rank_from": r.rank_from} for r in found}
    return meta
