"""A job's ranks parsed in parallel on Dask: one task per rank (:mod:`tracer.job.rank_tasks`), or a rank's
file scanned in parts on several tasks and merged on one (:mod:`tracer.job.scan`), run on local processes by
default or on a running Dask cluster (:mod:`tracer.job.scheduling` says which); the results in the ranks' order.

Dask is imported here only, inside the functions, and only for a job of more than one rank: the single-file
path never imports it. Imports pandas (through the tasks): :mod:`tracer.job.load` imports this side of the job
once its early scans have started.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

from tracer.errors import TracerError, UsageError
from tracer.job import handoff, rank_tasks, scan, scheduling, workers
from tracer.job.rank_tasks import Parsed, Task
from tracer.job.scan import EarlyScans, file_size, part_file, split_counts
from tracer.job.scheduling import SCHEDULER_ENV, Scheduler


def parse_groups(
    groups: Sequence[Sequence[Path]],
    *,
    scheduler: Scheduler,
    task: Task | None = None,
    on_done: Callable[[Parsed], None] | None = None,
    early: EarlyScans | None = None,
) -> list[Parsed]:
    """Parse each group of files (one rank each) on ``scheduler``; the results in the groups' order.
    ``on_done`` is called in this process as each rank finishes (in the order they finish). ``early``: the
    groups' parts already being scanned (:func:`tracer.job.scan.start_early_scans`), used where they are these
    groups' parts. ``task``: what each rank's worker does besides parsing it (none: only that)."""
    task = Task() if task is None else task
    # absolute (a worker's folder may differ: a cluster's, or a forkserver's); symbolic links kept as given
    if scheduler.name == "processes" and scheduling.cores() >= 2 * scheduling.local_workers(len(groups)):
        task = replace(task, side_thread=True)  # (a core to spare for each worker)
    args = [(i, [os.path.abspath(p) for p in g], task) for i, g in enumerate(groups)]
    if scheduler.name == "processes":
        splits = split_counts([a[1] for a in args])
        if early is not None and early.covers([(a[1][0], k) for a, k in zip(args, splits)]):
            return sorted(_merge_early(args, splits, early, on_done), key=lambda r: r.index)
        if max(splits, default=1) > 1:
            return sorted(_local(rank_tasks.parse_group, args, scheduler, on_done, splits), key=lambda r: r.index)
    return run(rank_tasks.parse_group, args, scheduler=scheduler, on_done=on_done)


def analyze_partitions(parts: Sequence[tuple[Path, int]], *, scheduler: Scheduler,
                       on_done: Callable[[Parsed], None] | None = None,
                       shifts: dict[int, int] | None = None) -> list[Parsed]:
    """Each stored partition (its file, its rank) read and analysed on ``scheduler``
    (:func:`tracer.job.rank_tasks.analyze_stored`), a rank's times moved by ``shifts[rank]`` ns first; the
    results in the order given."""
    moves = shifts or {}
    args = [(i, os.path.abspath(p), rank, moves.get(rank, 0)) for i, (p, rank) in enumerate(parts)]
    return run(rank_tasks.analyze_stored, args, scheduler=scheduler, on_done=on_done)


def run(fn: Callable[..., Parsed], args: Sequence[tuple[Any, ...]], *, scheduler: Scheduler,
        on_done: Callable[[Parsed], None] | None = None) -> list[Parsed]:
    """``fn(*a)`` for each of ``args`` on ``scheduler``; the results by their index."""
    if scheduler.name == "distributed":
        results = _on_cluster(fn, args, scheduler, on_done)
    else:
        results = _local(fn, args, scheduler, on_done)
    return sorted(results, key=lambda r: r.index)


def _local(fn: Callable[..., Parsed], args: Sequence[tuple[Any, ...]], scheduler: Scheduler,
           on_done: Callable[[Parsed], None] | None, splits: Sequence[int] | None = None) -> list[Parsed]:
    """``run`` on a local scheduler; ``splits``: into how many parts each rank's file is parsed (parse_groups'
    args only; :func:`tracer.job.scan.split_counts`)."""
    counts = list(splits) if splits else [1] * len(args)
    n_workers = scheduling.local_workers(sum(counts))
    if scheduler.name != "processes":
        return _compute(fn, args, counts, None, scheduler.name, n_workers, on_done)
    parked = None
    try:
        if max(counts, default=1) > 1:  # (where the scanned parts wait for their merge: removed below)
            parked = handoff.new_folder(sum(file_size(a[1][0]) for a, k in zip(args, counts) if k > 1))
        # What every worker runs is imported here, once, before they are forked: Dask first (each task a worker
        # runs is dask.local's batch_execute_tasks: a worker forked without it imported all of Dask at its first
        # task, 0.45 s on a 16-core host, after this process had imported it too), then the tasks' own modules.
        workers.import_worker_modules()
        # (keep freed memory only where a worker parses more than one rank: kept, a heap's holes can raise a
        # one-rank worker's peak, 0.26 → 0.36 GB per 100 MB rank on 16 cores, for nothing to reuse)
        with _one_line_if_a_worker_dies(), workers.worker_pool(n_workers, keep_memory=len(args) > n_workers) as pool:
            # (The pool is the scheduler: dask's local scheduler submits to it; its "processes" scheduler would
            # import cloudpickle and more, for functions that plain pickle ships by name.)
            return _compute(fn, args, counts, parked, pool, n_workers, on_done)
    finally:
        if parked is not None:
            shutil.rmtree(parked, ignore_errors=True)


@contextlib.contextmanager
def _one_line_if_a_worker_dies() -> Iterator[None]:
    """A local worker process that died (killed, out of memory) is one line, not a BrokenProcessPool traceback."""
    from concurrent.futures.process import BrokenProcessPool

    try:
        yield
    except BrokenProcessPool:
        raise TracerError("", "a worker process parsing the job's ranks died (killed, or out of memory: "
                              "try --scheduler sync, one rank at a time)") from None


def _compute(fn: Callable[..., Parsed], args: Sequence[tuple[Any, ...]], counts: Sequence[int], parked: str | None,
             scheduler: Any, n_workers: int, on_done: Callable[[Parsed], None] | None,
             scanned: Sequence[list[tuple[Any, float]]] | None = None) -> list[Parsed]:
    """``fn(*a)`` for each of ``args`` (a rank of ``counts[i]`` > 1 parts: scanned, then merged) as dask tasks on
    ``scheduler`` (a process pool, or a local scheduler's name, of ``n_workers``); scanned parts left in ``parked``.
    ``scanned``: each rank's parts, scanned already (:func:`tracer.job.scan.start_early_scans`): only the merges
    are tasks."""
    import dask
    from dask.callbacks import Callback

    tasks = []
    for i, (a, k) in enumerate(zip(args, counts, strict=True)):
        if k == 1:
            tasks.append(dask.delayed(fn, pure=False)(*a))
        elif scanned is not None:
            tasks.append(dask.delayed(rank_tasks.merge_group, pure=False)(*a, scanned[i]))
        else:  # (parse_group's rank, its file scanned in k parts on as many processes, then merged on one)
            index, paths, task = a
            scans = [dask.delayed(scan.scan_part, pure=False)(
                paths[0], j, k, part_file(parked, index, j)) for j in range(k)]
            tasks.append(dask.delayed(rank_tasks.merge_group, pure=False)(index, paths, task, scans))

    class _Progress(Callback):
        # Called in this process as each task ends, whichever local scheduler ran it.
        def _posttask(self, key: Any, result: Any, dsk: Any, state: Any, worker_id: Any) -> None:
            if on_done is not None and isinstance(result, Parsed):
                on_done(result)

    with _Progress():  # type: ignore[no-untyped-call]  # dask Callback.__init__ is unannotated
        if scheduler == "threads":
            # (a pool of this job's own, ended with it: dask's "threads" keeps a pool per size for the process's
            # life, whose threads outlive the job and keep the command from its quick exit, tracer.cli.leave)
            with ThreadPoolExecutor(n_workers, thread_name_prefix="tracer-job") as threads:
                return list(dask.compute(*tasks, scheduler=threads))
        if isinstance(scheduler, str):
            return list(dask.compute(*tasks, scheduler=scheduler, num_workers=n_workers))
        return list(dask.compute(*tasks, scheduler=scheduler))


def _merge_early(args: Sequence[tuple[Any, ...]], counts: Sequence[int], early: EarlyScans,
                 on_done: Callable[[Parsed], None] | None) -> list[Parsed]:
    """:func:`parse_groups` of ranks whose parts ``early`` scanned: their scans awaited, then each rank's merge
    (:func:`tracer.job.rank_tasks.merge_group`) a Dask task on a pool forked now, with everything a merge needs
    imported."""
    # (what the merges need is imported while the parts are still being scanned, not after)
    workers.import_worker_modules()
    n_workers = scheduling.local_workers(len(args))
    with _one_line_if_a_worker_dies():
        scanned = early.results([a[1][0] for a in args])
        with workers.worker_pool(n_workers, keep_memory=False) as pool:
            return _compute(rank_tasks.parse_group, args, counts, None, pool, n_workers, on_done, scanned)


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
