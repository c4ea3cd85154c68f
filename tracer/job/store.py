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
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from tracer import parsers
from tracer.files import digests
from tracer.files.atomic import temp_dir_beside
from tracer.vocabulary import SCHEMA_VERSION

if TYPE_CHECKING:
    # (not at run time, nor tracer.files.storage, imported where a partition is read or written: they bring
    # pandas, and this module is imported before a job's scan workers fork, tracer.job.parallel's early scans)
    from tracer.timeline import Timeline

#: Raise when the layout or the manifest changes meaning: an older dataset is then rebuilt, not misread.
DATASET_VERSION = 1
MANIFEST = "_job.json"
#: A job whose traces hold fewer bytes than this in all is not stored (the single-file cache's threshold): it
#: parses in about the time a reload takes, and a folder of small traces stays as it was.
CACHE_MIN_BYTES = 4 * 1024 * 1024
PART = "part-0.parquet"


def dataset_path(files: Sequence[Path]) -> Path:
    """Where the dataset of the job made of ``files`` (the first file of each rank) lives: a hidden folder in
    their common folder, named by a hash of their names (so that two file sets never share one)."""
    resolved = sorted(str(Path(f).resolve()) for f in files)
    parents = [str(Path(f).parent) for f in resolved]
    home = Path(os.path.commonpath(parents)) if parents else Path(".")
    names = "\n".join(os.path.relpath(f, home) for f in resolved)
    tag = hashlib.sha256(names.encode()).hexdigest()[:8]
    return home / f".tracer-job-{tag}.parquet"


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


def read_ranks(dataset: Path, entries: Sequence[RankEntry]) -> list[Timeline]:
    """The stored timelines of ``entries``' ranks (each as parsed and aligned), reading only their files."""
    return [read_partition(partition_file(dataset, e.rank)) for e in entries]


def read_partition(path: Path) -> Timeline:
    """One rank's stored timeline (:func:`partition_file`), as parsed and aligned."""
    from tracer.files.storage import read_timeline_parquet  # (pandas: see the TYPE_CHECKING imports above)

    t = read_timeline_parquet(path)
    t.meta.extra.pop("stored_as", None)
    t.meta.extra.pop("job_rank", None)
    return t


def read_columns(dataset: Path, columns: Sequence[str], ranks: Sequence[int] | None = None) -> Any:
    """Some ``columns`` of a stored job as one pandas DataFrame with ``rank``, reading only the files of
    ``ranks`` (default all) and only those columns from each (Parquet is columnar: the others are not read)."""
    import pandas as pd
    import pyarrow.parquet as pq

    manifest = read_manifest(dataset)
    if manifest is None:
        raise FileNotFoundError(dataset / MANIFEST)
    wanted = [e.rank for e in manifest.entries] if ranks is None else list(ranks)
    cols = [c for c in columns if c != "rank"]
    frames = []
    for r in wanted:
        with pq.ParquetFile(partition_file(dataset, r)) as f:
            df = f.read(columns=cols).to_pandas()
        df.insert(0, "rank", pd.Series(r, index=df.index, dtype="int16"))
        frames.append(df)
    return pd.concat(frames, ignore_index=True)


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


def write_part(timeline: Timeline, tmp: Path, index: int) -> bool:
    """Write one rank's timeline into the dataset being built (on a worker); False where it could not be."""
    from tracer.files.storage import CACHE_COMPRESSION, write_timeline_parquet  # (pandas: as in read_partition)

    try:
        write_timeline_parquet(timeline, part_file(tmp, index), compression=CACHE_COMPRESSION)
    except Exception:  # noqa: BLE001 - a cache is never worth failing a job that was read
        return False
    return True


def read_part(tmp: Path, index: int) -> Timeline:
    """The timeline a worker wrote into the dataset being built (:func:`write_part`)."""
    from tracer.files.storage import read_timeline_parquet  # (pandas: as in read_partition)

    t = read_timeline_parquet(part_file(tmp, index))
    t.meta.extra.pop("stored_as", None)
    return t


def finish(tmp: Path, dataset: Path, paths: Sequence[Path], parts: Sequence[tuple[int, RankEntry]]) -> bool:
    """Publish the dataset built in ``tmp``: each ``(group index, entry)``'s file moved to its rank's partition,
    the manifest written, the folder renamed over any older ``dataset``. False (and ``tmp`` removed) where that
    fails, for any reason: a cache is never worth failing a job that was read."""
    try:
        for index, e in parts:
            dest = partition_file(tmp, e.rank)
            dest.parent.mkdir()
            os.replace(part_file(tmp, index), dest)
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
