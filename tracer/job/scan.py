"""A rank's plain Kineto file scanned in parts on several local processes, and the parts of a whole job set
scanning early: before the job's process imports pandas and Dask.

Where local processes outnumber the ranks, a rank's large plain Kineto file is scanned in parts
(:func:`split_counts`, :func:`scan_part`) and the parts merged on another worker
(:func:`tracer.job.rank_tasks.merge_group`); each part is handed to its merge through a file
(:mod:`tracer.job.handoff`). A job's first open starts these scans at once (:func:`start_early_scans`), on
processes forked from the job's process while it still has not imported pandas (so the fork is cheap), and
imports pandas and Dask while they scan.

This module, and everything it imports, imports no pandas: the early scans' workers are forked with it
(tests/test_kineto_split.py checks it).
"""

from __future__ import annotations

import mmap
import os
import shutil
import time
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from tracer import parsers
from tracer.errors import TracerError
from tracer.job import handoff, scheduling, workers
from tracer.parsers.kineto_scan import scan_kineto_part

#: The least bytes of a rank's file each part of a split parse gets (:func:`split_counts`): below ~16 MB a
#: part's own costs (its task, pickling its columns back and on to the merge) eat what it saves.
MIN_PART_BYTES = 16 << 20


def split_counts(groups: Sequence[Sequence[str]]) -> list[int]:
    """Into how many parts each rank's file is parsed on local processes: where there are more cores than
    ranks, ``min(cores // ranks, size // MIN_PART_BYTES)`` for a rank of one plain (not gzipped) Kineto file,
    else 1 (a gzipped file must be inflated from its start; a small one is parsed faster whole). On a cluster
    the ranks are not split: its workers' cores are not known here, and a rank per worker keeps them busy."""
    per_rank = scheduling.cores() // max(len(groups), 1)
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


@dataclass(frozen=True)
class Handoff:
    """A scanned part left in a file for its merge (:func:`scan_part`'s ``out``)."""

    path: str


def scan_part(path: str, part: int, parts: int, out: str | None = None) -> tuple[Any, float]:
    """Part ``part`` of ``parts`` of one rank's plain Kineto file scanned
    (:func:`tracer.parsers.kineto_scan.scan_kineto_part`), and its seconds; runs on a worker, for
    :func:`tracer.job.rank_tasks.merge_group`. None where the part cannot vouch for what it read, or the file
    cannot be read: the merge then parses the whole file, which says why. With ``out`` (a new file's path), the
    part is written there (:mod:`tracer.job.handoff`) and the path comes back instead of the part, so that its
    columns go to the merge without passing through the caller; the part itself where that fails."""
    t0 = time.perf_counter()
    scanned = _scan(path, part, parts)
    if out is not None and scanned is not None:
        try:
            handoff.save(scanned, out)
            return Handoff(out), time.perf_counter() - t0
        except OSError:  # (no room in memory's folder ...: through the caller, as a result, after all)
            pass
    return scanned, time.perf_counter() - t0


def _scan(path: str, part: int, parts: int) -> Any:
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


def part_file(parked: str | None, index: int, part: int) -> str | None:
    """Where part ``part`` of rank ``index`` is left for its merge (:func:`scan_part`'s ``out``); None: no folder."""
    return os.path.join(parked, f"rank{index}-part{part}") if parked else None


def file_size(path: str) -> int:
    """``path``'s size in bytes; 0 where it cannot be read (the parse says why)."""
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


class EarlyScans:
    """A job's split rank files being scanned (:func:`scan_part`) on local processes forked before the job's
    process imports pandas and Dask (:func:`start_early_scans`). The job's process imports them while the parts
    are scanned, then merges the parts on a pool forked from it (:func:`tracer.job.task_graph.parse_groups`,
    ``early``). Close it when the job is read: a pool the job did not use is shut down, its parked parts
    removed."""

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
    if min(counts) < 2 or workers.start_method().get_start_method() != "fork":
        return None
    from concurrent.futures import ProcessPoolExecutor  # (the standard library's pools: where a job starts one)

    parked = handoff.new_folder(sum(file_size(g[0]) for g in paths))
    try:
        pool = ProcessPoolExecutor(max_workers=scheduling.local_workers(sum(counts)), initializer=workers.start_scanner,
                                   initargs=(os.getpid(),), mp_context=workers.start_method())
        futures = {
            g[0]: [pool.submit(scan_part, g[0], j, k, part_file(parked, i, j)) for j in range(k)]
            for i, (g, k) in enumerate(zip(paths, counts, strict=True))
        }
    except BaseException:
        if parked is not None:
            shutil.rmtree(parked, ignore_errors=True)
        raise
    return EarlyScans(pool, futures, parked)
