"""A parsed job stored as a Parquet dataset partitioned by rank, beside its traces, so that a reload reads only
what a view needs: the ranks it shows (one file each) and the columns it uses.

Layout (hive-style, so DuckDB's and pyarrow's dataset readers see ``rank`` as a partition)::

    .tracer-job-<8 hex>.parquet/       beside the traces (in their common folder); the hex names the file set
        _job.json                      manifest: format version, the job's files, one entry per rank
        rank=0/part-0.parquet          that rank's timeline (every column the Timeline has, its meta in the footer)
        rank=1/part-0.parquet

Each rank's entry holds the key its traces must still match (:func:`source_key`: size and BLAKE3 of every
byte, with the device / inode / ctime that spare the hash while nobody wrote, as the single-file cache does), and
the timeline schema and Kineto parser versions. The dataset is written whole into a temporary folder and renamed
into place; a job whose file set differs (a subset of the ranks) gets a dataset of its own (the hex in the
name). The partition files are whole timelines, on the Unix clock already (aligned before writing), so the
store does not depend on which columns the timeline schema has: it writes and reads whatever columns there are.

This module is the dataset's layout and manifest, without pandas (a job's first open asks it whether the job is
stored before the job's process imports pandas: tracer.job.scan's early scans); the partitions' Parquet files are
read and written by :mod:`tracer.job.partitions`.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from tracer import parsers
from tracer.files import digests
from tracer.files.atomic import temp_dir_beside
from tracer.vocabulary import SCHEMA_VERSION

#: Raise when the layout or the manifest changes meaning: an older dataset is then rebuilt, not misread.
DATASET_VERSION = 1
MANIFEST = "_job.json"
#: A job whose traces hold fewer bytes than this in all is not stored (the single-file cache's threshold): it
#: parses in about the time a reload takes, and a folder of small traces stays as it was.
CACHE_MIN_BYTES = 4 * 1024 * 1024
PART = "part-0.parquet"
#: A job whose traces hold more than this is not read into memory whole by the views that can read less of it
#: from its dataset: ``tracer explain --window`` reads the rows near its window, rank by rank.
LARGE_JOB_BYTES = 2_000_000_000


def dataset_path(files: Sequence[Path]) -> Path:
    """Where the dataset of the job made of ``files`` (the first file of each rank) lives: a hidden folder in
    their common folder, named by a hash of their names (so that two file sets never share one)."""
    resolved = sorted(str(Path(f).resolve()) for f in files)
    parents = [str(Path(f).parent) for f in resolved]
    home = Path(os.path.commonpath(parents)) if parents else Path(".")
    names = "\n".join(os.path.relpath(f, home) for f in resolved)
    tag = hashlib.sha256(names.encode()).hexdigest()[:8]
    return home / f".tracer-job-{tag}.parquet"


def dataset_of(groups: Sequence[Sequence[Path]], cache: bool) -> Path | None:
    """Where the job of ``groups`` (each rank's files) is stored as a dataset, where it is kept at all: with
    ``cache``, for a job of more than one rank and at least :data:`CACHE_MIN_BYTES` of traces."""
    if not (cache and len(groups) > 1 and total_bytes(groups) >= CACHE_MIN_BYTES):
        return None
    return dataset_path([g[0] for g in groups])


def total_bytes(groups: Sequence[Sequence[Path]]) -> int:
    """The bytes of every file of ``groups``; a file that cannot be read counts 0 (the parse says why)."""
    total = 0
    for g in groups:
        for p in g:
            try:
                total += p.stat().st_size
            except OSError:
                pass  # (the parse says why)
    return total


def is_large_job(files: Sequence[Path]) -> bool:
    """Whether the job whose rank traces are ``files`` is too large to read whole (:data:`LARGE_JOB_BYTES`): its
    views are then answered from its store."""
    return len(files) > 1 and total_bytes([[f] for f in files]) > LARGE_JOB_BYTES


def partition_file(dataset: Path, rank: int) -> Path:
    """The file holding ``rank``'s rows in ``dataset``."""
    return dataset / f"rank={rank}" / PART


def source_key(path: Path, *, digest: str | None = None, stat: list[int] | None = None) -> dict[str, Any]:
    """What a trace must still match for its partition to be served: size, BLAKE3 of its bytes, and its
    device / inode / ctime / size (equal only while nobody has written to it). ``digest``: the hash when the
    caller already has it; ``stat``: the file's stat key taken before the bytes hashed were read."""
    stat = stat or digests.stat_key(path)  # (before the hash: a write during it must not go unseen)
    return {"size": stat[3], "blake3": digest or digests.file_digest(path), "stat": stat}


def _still_matches(path: Path, stored: dict[str, Any]) -> bool:
    """Whether ``path`` is the trace ``stored`` describes: no hash while its stat is as stored (no write since),
    else the content hash decides (a copy, a touch, an edit)."""
    try:
        stat = digests.stat_key(path)
    except OSError:
        return False
    if stat[3] != stored.get("size"):
        return False
    if stat == stored.get("stat"):
        return True
    try:
        return digests.file_digest(path) == stored.get("blake3")
    except Exception:  # noqa: BLE001 - unreadable now: not a match; the parse will say why
        return False


@dataclass(frozen=True)
class RankEntry:
    """One rank of a stored job: its files, where its rank came from, and their keys."""

    rank: int
    rank_from: str
    sources: tuple[str, ...]  # absolute paths of the rank's files (a process's parts, in order)
    keys: tuple[dict[str, Any], ...]

    def to_dict(self) -> dict[str, Any]:
        return {"rank": self.rank, "rank_from": self.rank_from, "sources": list(self.sources),
                "keys": list(self.keys)}


@dataclass(frozen=True)
class Manifest:
    """The dataset's ``_job.json``: its job's files and one entry per rank."""

    files: tuple[str, ...]  # every file of the job, as given, resolved and sorted
    entries: tuple[RankEntry, ...]

    def entry(self, rank: int) -> RankEntry | None:
        return next((e for e in self.entries if e.rank == rank), None)


def _versions() -> dict[str, int]:
    return {"dataset_version": DATASET_VERSION, "schema_version": SCHEMA_VERSION,
            "parser_version": parsers.KINETO_PARSER_VERSION}


@dataclass(frozen=True)
class StoredJob:
    """A job's stored dataset, as a view that reads it in place needs it: the folder and the entries of the ranks
    read (each rank's partition: :func:`partition_file`)."""

    dataset: Path
    entries: tuple[RankEntry, ...]

    @property
    def ranks(self) -> list[int]:
        return [e.rank for e in self.entries]

    @property
    def files(self) -> tuple[Path, ...]:
        """Each rank's partition file, in rank order."""
        return tuple(partition_file(self.dataset, e.rank) for e in sorted(self.entries, key=lambda e: e.rank))


def read_manifest(dataset: Path) -> Manifest | None:
    """The manifest of ``dataset``; None where there is none, it is damaged or of another version."""
    try:
        doc = orjson.loads((dataset / MANIFEST).read_bytes())
        if any(doc.get(k) != v for k, v in _versions().items()):
            return None
        entries = tuple(
            RankEntry(int(e["rank"]), str(e["rank_from"]), tuple(e["sources"]), tuple(e["keys"]))
            for e in doc["ranks"]
        )
        return Manifest(tuple(doc["files"]), entries)
    except Exception:  # noqa: BLE001 - a missing or damaged cache is never worth an error: parse afresh
        return None


def job_files(paths: Sequence[Path]) -> tuple[str, ...]:
    """A job's files as a manifest records them (resolved, sorted)."""
    return tuple(sorted(str(Path(p).resolve()) for p in paths))


def stored_ranks(dataset: Path, paths: Sequence[Path]) -> list[int] | None:
    """The ranks ``dataset`` holds, when it is the dataset of the job ``paths`` (whether or not its traces have
    changed since); None otherwise."""
    manifest = read_manifest(dataset)
    if manifest is None or manifest.files != job_files(paths):
        return None
    return [e.rank for e in manifest.entries]


def valid_entries(dataset: Path, paths: Sequence[Path], ranks: Sequence[int] | None) -> list[RankEntry] | None:
    """The entries of ``dataset`` to read for the job ``paths`` (the ``ranks`` asked, or all), when the dataset
    is this job's and every trace of those ranks is unchanged; None when it must be parsed afresh. Traces of
    ranks not asked for are not looked at."""
    manifest = read_manifest(dataset)
    if manifest is None or manifest.files != job_files(paths):
        return None
    if ranks is None:
        wanted = list(manifest.entries)
    else:
        found = [manifest.entry(r) for r in ranks]
        if any(e is None for e in found):
            return None  # (a rank the job has not got: the parse says so)
        wanted = [e for e in found if e is not None]
    for e in wanted:
        if not partition_file(dataset, e.rank).is_file():
            return None
        if not all(_still_matches(Path(s), k) for s, k in zip(e.sources, e.keys)):
            return None
    return wanted


def stored_rank_of(trace: Path) -> tuple[Path, RankEntry] | None:
    """The stored job dataset that holds the trace ``trace`` as one of its ranks (a rank of one file), and its
    entry, where that trace is unchanged since (its key): looked for beside the trace and in the folder above (a
    job's dataset lies in its traces' common folder); None where none does."""
    try:
        path = str(trace.resolve())
        homes = [trace.resolve().parent, trace.resolve().parent.parent]
    except OSError:
        return None
    for home in dict.fromkeys(homes):
        try:
            found = sorted(home.glob(".tracer-job-*.parquet"))
        except OSError:
            continue
        for dataset in found:
            manifest = read_manifest(dataset)
            entry = next((e for e in manifest.entries if e.sources == (path,)), None) if manifest else None
            if entry is not None and partition_file(dataset, entry.rank).is_file() \
                    and _still_matches(trace, entry.keys[0]):
                return dataset, entry
    return None


def begin(dataset: Path) -> Path | None:
    """A new temporary folder beside ``dataset`` for the workers to write their ranks into (:func:`part_file`),
    or None where none can be made (a read-only folder of traces just means no cache)."""
    if not os.access(dataset.parent, os.W_OK):
        return None
    try:
        tmp = temp_dir_beside(dataset)
        mask = os.umask(0)
        os.umask(mask)
        os.chmod(tmp, 0o777 & ~mask)  # (mkdtemp makes it private; the traces' readers may read their cache)
    except Exception:  # noqa: BLE001 - a cache is never worth failing a job
        return None
    return tmp


def part_file(tmp: Path, index: int) -> Path:
    """Where a worker writes the ``index``-th file group's timeline (its rank is not known until all are read)."""
    return tmp / f"group-{index}.parquet"


def view_file(tmp: Path, index: int, rank: int) -> Path:
    """Where a worker writes the ``index``-th file group's drawing layout (:mod:`tracer.job.views`), laid out as
    rank ``rank``: kept by :func:`finish` only where the job numbers the group so."""
    return tmp / f"view-{index}-{rank}.npz"


#: A rank's drawing layout beside its partition (tracer.job.views; "_": not part of the dataset's Parquet).
VIEW = "_view.npz"
#: A rank's summary results beside its partition (tracer.job.kept_results), signed by the user's key.
RESULTS = "_results.pickle"


def finish(tmp: Path, dataset: Path, paths: Sequence[Path], parts: Sequence[tuple[int, RankEntry]],
           results: Mapping[int, bytes] | None = None) -> bool:
    """Publish the dataset built in ``tmp``: each ``(group index, entry)``'s file moved to its rank's partition
    (with its drawing layout, where one was laid out for that rank, and its summary results: ``results``, rank ->
    the signed bytes :mod:`tracer.job.kept_results` made), the manifest written, the folder renamed over any older
    ``dataset``. False (and ``tmp`` removed) where that fails, for any reason: a cache is never worth failing a job
    that was read."""
    try:
        for index, e in parts:
            dest = partition_file(tmp, e.rank)
            dest.parent.mkdir()
            os.replace(part_file(tmp, index), dest)
            view = view_file(tmp, index, e.rank)
            if view.exists():
                os.replace(view, dest.parent / VIEW)
            if results and e.rank in results:
                (dest.parent / RESULTS).write_bytes(results[e.rank])
        for stray in tmp.glob("view-*.npz"):  # (laid out as a rank the job numbered otherwise)
            stray.unlink()
        doc = {**_versions(), "files": list(job_files(paths)), "ranks": [e.to_dict() for _, e in parts]}
        (tmp / MANIFEST).write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2))
        _replace_dir(tmp, dataset)
    except Exception:  # noqa: BLE001 - see the docstring
        abandon(tmp)
        return False
    return True


def abandon(tmp: Path) -> None:
    """Remove a dataset that will not be finished."""
    shutil.rmtree(tmp, ignore_errors=True)


def _replace_dir(tmp: Path, dest: Path) -> None:
    """Rename the finished folder ``tmp`` to ``dest``; an older ``dest`` is moved aside first and removed after
    (a folder cannot be renamed over a non-empty one). A reader in between finds no dataset and parses."""
    old: Path | None = None
    if dest.exists():
        old = dest.with_name(f"{dest.name}.old-{os.getpid()}")
        shutil.rmtree(old, ignore_errors=True)
        os.replace(dest, old)
    try:
        os.replace(tmp, dest)
    except OSError:
        if old is not None:  # (another writer got there first: theirs stays)
            with contextlib.suppress(OSError):
                os.replace(old, dest)
        raise
    finally:
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
