"""The local worker processes a job's ranks are parsed on: how they start (forked from the job's process, or a
forkserver's), what each imports first, and what each does as it starts (:mod:`tracer.job.oscalls`).

No pandas and no Dask at import: the early scans' workers start from here before the job's process imports
either (:mod:`tracer.job.scan`).
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

from tracer.job.oscalls import default_sigterm, die_with, keep_freed_memory

#: what a local worker's tasks need (:func:`import_worker_modules`): Dask's scheduler (which runs them), the tasks
#: themselves, the parser and the timeline it builds, the dataset's Parquet writer, the hash of its keys
WORKER_IMPORTS = ("dask.local", "dask.callbacks", "tracer.job.rank_tasks", "tracer.parsers.kineto", "tracer.timeline",
                  "tracer.timeline.comm", "tracer.job.partitions", "tracer.files.storage", "blake3")
#: what a forkserver imports before it forks workers: numpy on one OpenBLAS thread first (tracer._blas), then
#: what every worker needs: its start (this module), the tasks it runs, the scan of a file's parts
FORKSERVER_PRELOAD = ("tracer.job._preload", "tracer.job.workers", "tracer.job.scan", "tracer.parsers",
                      *WORKER_IMPORTS)


def import_worker_modules() -> None:
    """Import :data:`WORKER_IMPORTS` (a module that fails is left to the task that needs it to say why): in the
    job's process before it forks its workers, which then have them; in a worker that was not forked from it (a
    forkserver's, a spawned one) as it starts."""
    for name in WORKER_IMPORTS:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - a head start only: the task that needs it says what is wrong
            pass


def start_worker(keep_memory: bool, parent: int | None = None) -> None:
    """A local worker process's start: :func:`~tracer.job.oscalls.die_with` its parent,
    :func:`~tracer.job.oscalls.keep_freed_memory` where it will parse several ranks, then
    :func:`import_worker_modules` (nothing to do in a worker forked from the job's process). ``parent``: the pid
    of the process that forked it (None: a forkserver's child, which ends with the job)."""
    die_with(parent)
    default_sigterm()
    if keep_memory:
        keep_freed_memory()
    import_worker_modules()


def start_scanner(parent: int) -> None:
    """An early scan's worker's start (:func:`tracer.job.scan.start_early_scans`): die with its parent and
    SIGTERM back to its default; nothing imported (its parent has not imported pandas yet, and it needs none)."""
    die_with(parent)
    default_sigterm()


def worker_pool(workers: int, *, keep_memory: bool) -> Any:
    """A pool of ``workers`` local processes (:func:`start_worker`): forked from this process where it may fork,
    else a forkserver's (:func:`start_method`). Import what they run first (:func:`import_worker_modules`)."""
    from concurrent.futures import ProcessPoolExecutor  # (the standard library's pools: where a job starts one)

    context = start_method()
    parent = os.getpid() if context.get_start_method() == "fork" else None  # (else the forkserver forks)
    return ProcessPoolExecutor(max_workers=workers, mp_context=context, initializer=start_worker,
                               initargs=(keep_memory, parent))


def start_method() -> Any:
    """How local worker processes start: fork where this process runs one thread (fastest, and the caller's
    ``__main__`` is not run again, so a script without an ``if __name__ == "__main__"`` guard works); forkserver
    where it runs more (a Dash server, a progress spinner), whose locks a fork would copy mid-use. (Spawn and
    forkserver re-import the caller's main module in each worker, as every multiprocessing user knows.)"""
    import multiprocessing
    import threading

    if sys.platform == "linux" and threading.active_count() == 1:
        return multiprocessing.get_context("fork")
    ctx = multiprocessing.get_context("forkserver" if sys.platform != "win32" else "spawn")
    if sys.platform != "win32":
        ctx.set_forkserver_preload(list(FORKSERVER_PRELOAD))
    return ctx
