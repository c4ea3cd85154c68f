"""A job's traces read as one timeline: one trace per rank (torch.profiler on each process of a torchrun job,
HTA's ``rank-N`` layout, tracer's own ``rank<N>-pid<P>`` captures), each on its own rank, on one clock.

Which rank a trace is: :mod:`tracer.job.ranks`.

Clocks: every trace is put on the Unix clock (:func:`tracer.timeline.align`). Kineto traces of PyTorch ≥ 2.0 and
nsys exports are; a trace whose clock is unknown is refused in one line when the job has more than one trace
(there would be no true way to line it up). Hosts' clocks still differ by their NTP error, up to milliseconds;
correcting that from matched collectives is the multi-rank issue's work and is not done here.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tracer.errors import TracerError, UsageError
from tracer.job import parallel
from tracer.job import store as jobstore
from tracer.job.parallel import EarlyScans
from tracer.job.ranks import RankTrace, assign_ranks, group_parts, one_rank

if TYPE_CHECKING:
    # (the analysis and the timeline are imported where they are used: they bring pandas, and a job's first open
    # starts its scan workers before this process imports pandas, tracer.job.parallel's early scans)
    from tracer.analysis.summary import Summary
    from tracer.timeline import Timeline, TraceMeta

#: Below this many bytes in all, a job's ranks are parsed one after another in this process unless a scheduler
#: is named: starting worker processes and importing Dask (~0.3-0.5 s) would cost more than it saves.
PARALLEL_MIN_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class RankDone:
    """Progress of a job's parse: one rank's files read (``error``: its one-line error, or "")."""

    done: int
    total: int
    files: tuple[Path, ...]
    seconds: float
    error: str = ""


def load_job(
    paths: Sequence[str | os.PathLike[str]],
    *,
    load: Callable[[Path], Timeline] | None = None,
    scheduler: str | None = None,
    cache: bool = True,
    ranks: Sequence[int] | None = None,
    skip_bad_ranks: bool = False,
    on_rank: Callable[[RankDone], None] | None = None,
    on_cache_write: Callable[[Path], None] | None = None,
    on_skip: Callable[[TracerError], None] | None = None,
) -> Timeline:
    """The traces ``paths`` (the ranks of one job) as one timeline: rows marked with their rank, all on the Unix
    clock. ``meta.extra["ranks"]`` says which file each rank came from and why it is that rank.

    The ranks are parsed in parallel on Dask (:mod:`tracer.job.parallel`; ``scheduler``: a local scheduler's name or
    a cluster's address, else ``$TRACER_DASK_SCHEDULER``, else local processes); a job of one trace is parsed
    here, without Dask. With ``cache``, the parsed job is stored as a Parquet dataset partitioned by rank beside
    the traces (:mod:`tracer.job.store`) and read back from there while its traces are unchanged; ``ranks``
    (a subset) then reads only those ranks' files. ``load`` reads one trace in this process instead (no Dask,
    no dataset). A rank whose file cannot be read is that file's one-line error, or with ``skip_bad_ranks`` is
    left out (``on_skip`` hears of it; ``meta.extra["skipped_ranks"]`` names it). ``on_rank`` hears of each
    rank parsed; ``on_cache_write`` of the dataset written.
    """
    given = [Path(p) for p in paths]
    if not given:
        raise UsageError("", "a job needs at least one trace")
    if load is not None:
        groups = group_parts(given)
        timelines = [_load_group(g, load) for g in groups]
        return _assemble(given, [g[0] for g in groups], timelines, ranks)
    opened = _open(given, scheduler=scheduler, cache=cache, ranks=ranks, skip_bad_ranks=skip_bad_ranks,
                   on_rank=on_rank, on_cache_write=on_cache_write, on_skip=on_skip, analyze=False)
    job = _join(given, opened.files, opened.items, opened.found, subset=ranks is not None)
    _note(job.meta, opened)
    return job


def summarize_job(
    paths: Sequence[str | os.PathLike[str]],
    *,
    scheduler: str | None = None,
    cache: bool = True,
    ranks: Sequence[int] | None = None,
    skip_bad_ranks: bool = False,
    on_rank: Callable[[RankDone], None] | None = None,
    on_cache_write: Callable[[Path], None] | None = None,
    on_skip: Callable[[TracerError], None] | None = None,
    shifts: Mapping[int, int] | None = None,
) -> tuple[Summary, TraceMeta]:
    """The summary of the job ``paths`` (what ``analyze(load_job(paths, ...))`` gives, figure for figure) and
    the job's meta, without the job in one frame: each rank is analysed where it is read (a worker, with the
    parse or the stored partition) and only its results come back (:mod:`tracer.analysis.ranked`). The
    arguments are :func:`load_job`'s; ``shifts``: rank → ns its times are moved by before it is analysed (the
    collectives' clock fix, ``--clock-fix``: the figures of ``shift_ranks`` of the job, named in the meta's
    ``clock_fix_ns``). Where an analysis cannot be combined from ranks, or a rank left out (``skip_bad_ranks``)
    renumbers those numbered by their order, the job is read whole and analysed."""
    given = [Path(p) for p in paths]
    if not given:
        raise UsageError("", "a job needs at least one trace")
    early = _early_scans(given, scheduler, cache)  # (first: before this process imports pandas, just below)
    try:
        return _summarize(given, early, scheduler=scheduler, cache=cache, ranks=ranks,
                          skip_bad_ranks=skip_bad_ranks, on_rank=on_rank, on_cache_write=on_cache_write,
                          on_skip=on_skip, shifts=shifts)
    finally:
        if early is not None:
            early.close()


def _summarize(given: list[Path], early: EarlyScans | None, *, scheduler: str | None, cache: bool,
               ranks: Sequence[int] | None, skip_bad_ranks: bool, on_rank: Callable[[RankDone], None] | None,
               on_cache_write: Callable[[Path], None] | None, on_skip: Callable[[TracerError], None] | None,
               shifts: Mapping[int, int] | None) -> tuple[Summary, TraceMeta]:
    # (the analysis and the timeline bring pandas: imported here, once this job's scan workers have started)
    from tracer.analysis import ranked
    from tracer.analysis.comm import shift_ranks
    from tracer.analysis.summary import analyze
    from tracer.job.checks import check_job, rank_bounds
    from tracer.timeline import Timeline
    from tracer.timeline.combine import concat_meta

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
    job = load_job(given, **args)
    if moved:
        job.meta.extra["clock_fix_ns"] = {str(r): ns for r, ns in sorted(moved.items())}
        job = Timeline(shift_ranks(job.events, moved), job.meta)
    return analyze(job), job.meta


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
    """:func:`load_job`'s reading: from the stored dataset where it is valid, else parsed (and stored)."""
    groups = group_parts(given)
    chosen = parallel.resolve_scheduler(scheduler)  # (a bad address is refused whether or not it is needed)
    dataset = _dataset_of(groups, cache)
    if dataset is not None:
        stored_ranks = jobstore.stored_ranks(dataset, given)
        if stored_ranks is not None and ranks is not None:  # (an unknown rank: said without parsing anything)
            _check_ranks_exist(given, [RankTrace(Path(""), r, "") for r in stored_ranks], ranks)
        entries = jobstore.valid_entries(dataset, given, ranks) if stored_ranks is not None else None
        if entries is not None:
            stored: list[Any]
            if analyze:
                stored = _analyze_stored(dataset, entries, chosen, _total_bytes(groups), shifts or {})
            else:
                stored = jobstore.read_ranks(dataset, entries)
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
                 p.timeline if p.timeline is not None or building is None else jobstore.read_part(building, p.index)
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
            if jobstore.finish(building, dataset, given, parts) and on_cache_write is not None:
                on_cache_write(dataset)
        else:
            jobstore.abandon(building)
    keep = range(len(found)) if ranks is None else [i for i, r in enumerate(found) if r.rank in set(ranks)]
    _check_ranks_exist(given, found, ranks)
    return _Opened([files[i] for i in keep], [found[i] for i in keep], [items[i] for i in keep], skipped)


def _analyze_stored(dataset: Path, entries: Sequence[Any], scheduler: Any, total_bytes: int,
                    shifts: Mapping[int, int]) -> list[Any]:
    """The stored ranks ``entries`` analysed where they are read (each moved by ``shifts[rank]`` ns first): on the
    scheduler's workers, or here for one rank or a small job (as :func:`_parse` decides)."""
    parts = [(jobstore.partition_file(dataset, e.rank), e.rank) for e in entries]
    chosen: parallel.Scheduler = scheduler
    if _in_this_process(len(parts), chosen, total_bytes):
        done = [parallel.analyze_stored(i, str(p), r, shifts.get(r, 0)) for i, (p, r) in enumerate(parts)]
    else:
        done = parallel.analyze_partitions(parts, scheduler=chosen, shifts=dict(shifts))
    for d in done:
        d.raise_error()
    return [d.results for d in done]


def _load_group(group: Sequence[Path], load: Callable[[Path], Timeline]) -> Timeline:
    from tracer.timeline import concat  # (pandas: this module is imported without it, see _summarize)

    parts = [load(p) for p in group]
    return parts[0] if len(parts) == 1 else concat(parts)


def _parse(groups: Sequence[Sequence[Path]], *, scheduler: Any, with_keys: bool, align: bool, store: Path | None,
           on_rank: Callable[[RankDone], None] | None, analyze: bool = False,
           shifts: Mapping[int, int] | None = None, early: EarlyScans | None = None) -> list[Any]:
    """Each group parsed (aligned, and written into the dataset being built, where asked): in this process for
    one group or a small job, else on Dask."""
    done = 0

    def report(p: parallel.Parsed) -> None:
        nonlocal done
        done += 1
        if on_rank is not None:
            error = f"{p.error[1]}: {p.error[2]}" if p.error else ""
            on_rank(RankDone(done, len(groups), tuple(groups[p.index]), p.seconds, error))

    chosen: parallel.Scheduler = scheduler
    task = parallel.Task(with_keys=with_keys, align=align, store=str(store) if store is not None else None,
                         analyze=analyze, shifts=tuple(sorted((shifts or {}).items())))
    if _in_this_process(len(groups), chosen, _total_bytes(groups)):
        results = []
        for i, g in enumerate(groups):
            results.append(parallel.parse_group(i, [str(p) for p in g], task))
            report(results[-1])
        return results
    return parallel.parse_groups(groups, scheduler=chosen, task=task, on_done=report, early=early)


def _early_scans(given: Sequence[Path], scheduler: str | None, cache: bool) -> EarlyScans | None:
    """The job's rank files' parts set scanning now, before this process imports pandas
    (:func:`tracer.job.parallel.start_early_scans`), where the job will be parsed on local processes as
    :func:`_open` and :func:`_parse` decide (not read back from a stored dataset, not parsed here); else None."""
    groups = group_parts(given)
    chosen = parallel.resolve_scheduler(scheduler)
    if chosen.name != "processes" or _in_this_process(len(groups), chosen, _total_bytes(groups)):
        return None
    dataset = _dataset_of(groups, cache)
    if dataset is not None and jobstore.stored_ranks(dataset, given) is not None:
        return None  # (a dataset of this job is stored: read back where it is valid)
    return parallel.start_early_scans(groups)


def _in_this_process(ranks: int, chosen: Any, total_bytes: int) -> bool:
    """Whether a job of ``ranks`` ranks (``total_bytes`` of traces) is read in this process, one rank after
    another, rather than on the scheduler ``chosen``: one rank, or a small job where no scheduler was named."""
    return ranks == 1 or (chosen.origin == "default" and total_bytes < PARALLEL_MIN_BYTES)


def _dataset_of(groups: Sequence[Sequence[Path]], cache: bool) -> Path | None:
    """Where the job of ``groups`` is stored as a dataset (:mod:`tracer.job.store`), where it is kept at all: with
    ``cache``, for a job of more than one rank and at least ``CACHE_MIN_BYTES`` of traces."""
    if not (cache and len(groups) > 1 and _total_bytes(groups) >= jobstore.CACHE_MIN_BYTES):
        return None
    return jobstore.dataset_path([g[0] for g in groups])


def _total_bytes(groups: Sequence[Sequence[Path]]) -> int:
    total = 0
    for g in groups:
        for p in g:
            try:
                total += p.stat().st_size
            except OSError:
                pass  # (the parse says why)
    return total


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
    from tracer.timeline import align  # (pandas: this module is imported without it, see _summarize)

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
    from tracer.job.checks import check_job, rank_bounds  # (pandas, as concat)
    from tracer.timeline import concat  # (pandas: this module is imported without it, see _summarize)

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
