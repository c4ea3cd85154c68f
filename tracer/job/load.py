"""A job's traces read as one timeline: one trace per rank (torch.profiler on each process of a torchrun job,
HTA's ``rank-N`` layout, tracer's own ``rank<N>-pid<P>`` captures), each on its own rank, on one clock.

Which rank a trace is: :mod:`tracer.job.ranks`.

Clocks: every trace is put on the Unix clock (:func:`tracer.timeline.align`). Kineto traces of PyTorch ≥ 2.0 and
nsys exports are; a trace whose clock is unknown is refused in one line when the job has more than one trace
(there would be no true way to line it up). Hosts' clocks still differ by their NTP error, up to milliseconds;
correcting that from matched collectives is the multi-rank issue's work and is not done here.

This module is the job's front door, imported without pandas: :func:`summarize_job` first sets the job's rank
files scanning on processes forked from this one (:mod:`tracer.job.scan`'s early scans), then imports the side
that reads and joins the ranks (:mod:`tracer.job.read`: the timeline, the analysis, pandas) while they scan.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from tracer.errors import TracerError, UsageError
from tracer.job import scan
from tracer.job import store as jobstore
from tracer.job.ranks import group_parts
from tracer.job.scan import EarlyScans
from tracer.job.scheduling import in_this_process, resolve_scheduler

if TYPE_CHECKING:
    # (types only: these bring pandas, imported with tracer.job.read where a job is read)
    from tracer.analysis.summary import Summary
    from tracer.job.read import RankDone
    from tracer.timeline import Timeline, TraceMeta


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

    The ranks are parsed in parallel on Dask (:mod:`tracer.job.task_graph`; ``scheduler``: a local scheduler's name or
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
    from tracer.job import read  # (pandas: see the module's docstring)

    return read.job_timeline(given, load=load, scheduler=scheduler, cache=cache, ranks=ranks,
                             skip_bad_ranks=skip_bad_ranks, on_rank=on_rank, on_cache_write=on_cache_write,
                             on_skip=on_skip)


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
        from tracer.job import read  # (pandas, once the job's scan workers have started: the module's docstring)

        return read.job_summary(given, early, scheduler=scheduler, cache=cache, ranks=ranks,
                                skip_bad_ranks=skip_bad_ranks, on_rank=on_rank, on_cache_write=on_cache_write,
                                on_skip=on_skip, shifts=shifts)
    finally:
        if early is not None:
            early.close()


def store_job(
    paths: Sequence[str | os.PathLike[str]],
    *,
    scheduler: str | None = None,
    ranks: Sequence[int] | None = None,
    on_rank: Callable[[RankDone], None] | None = None,
    on_cache_write: Callable[[Path], None] | None = None,
) -> jobstore.StoredJob | None:
    """The stored dataset of the job ``paths`` (the ``ranks`` asked, or all), for a view that reads it in place
    (``tracer sql --job``) rather than the job in one frame: read from where it is stored while its traces are
    unchanged, else parsed and stored first (as :func:`summarize_job`'s first open: each rank parsed, written and
    analysed on a worker, only its results sent back, never its timeline). None where the job is not stored: one
    under the cache's size (:data:`tracer.job.store.CACHE_MIN_BYTES`), a folder that cannot be written, a rank
    that could not be read. The other arguments are :func:`load_job`'s."""
    given = [Path(p) for p in paths]
    if not given:
        raise UsageError("", "a job needs at least one trace")
    from tracer.job import read  # (pandas: see the module's docstring)

    return read.job_store(given, scheduler=scheduler, ranks=ranks, on_rank=on_rank, on_cache_write=on_cache_write)


def read_job_window(
    paths: Sequence[str | os.PathLike[str]], stored: jobstore.StoredJob, window: tuple[int | None, int | None],
    margin_ns: int,
) -> tuple[Timeline, int]:
    """The part of the stored job ``stored`` (of the traces ``paths``: :func:`store_job`) that bears on the window
    ``window`` (ns from the job's first interval; None: an open side), as one timeline, and the job's first
    interval's start (ns, Unix clock): every rank's rows that run in the window or within ``margin_ns`` of it
    (the work its first intervals waited for, the work after it that ends its last idle gaps), and all of its
    collectives' rows (matched across ranks), one rank's partition read at a time. What
    ``tracer explain --window`` of a job too large to read whole reads (:data:`tracer.job.store.LARGE_JOB_BYTES`)."""
    from tracer.job import read  # (pandas: see the module's docstring)

    return read.job_window([Path(p) for p in paths], stored, window, margin_ns)


def read_stored_rank(trace: str | os.PathLike[str]) -> Timeline | None:
    """The trace ``trace`` read from the stored dataset of a job it is a rank of (its partition: as parsed, on the
    Unix clock, with its rank), where one holds it and it is unchanged since; None otherwise (parse it). For the
    commands that take one rank's trace of a large job (``tracer diff``): a partition reads in a fraction of the
    parse's time and memory."""
    found = jobstore.stored_rank_of(Path(trace))
    if found is None:
        return None
    from tracer.job import partitions  # (pandas: see the module's docstring)

    dataset, entry = found
    timeline = partitions.read_partition(jobstore.partition_file(dataset, entry.rank))
    timeline.meta.source = str(trace)
    return timeline


def _early_scans(given: Sequence[Path], scheduler: str | None, cache: bool) -> EarlyScans | None:
    """The job's rank files' parts set scanning now, before this process imports pandas
    (:func:`tracer.job.scan.start_early_scans`), where the job will be parsed on local processes as
    :mod:`tracer.job.read` decides (not read back from a stored dataset, not parsed here); else None."""
    groups = group_parts(given)
    chosen = resolve_scheduler(scheduler)
    if chosen.name != "processes" or in_this_process(len(groups), chosen, jobstore.total_bytes(groups)):
        return None
    dataset = jobstore.dataset_of(groups, cache)
    if dataset is not None and jobstore.stored_ranks(dataset, given) is not None:
        return None  # (a dataset of this job is stored: read back where it is valid)
    return scan.start_early_scans(groups)
